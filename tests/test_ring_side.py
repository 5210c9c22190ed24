"""The runtime library's planned CUDA side function (native/ring_side.h) checks a side's
values as ``SidePlan.matches`` does, on CPU tensors and without launches: a spec from
``fused_stats.side_spec`` with an empty launch list. Its answers agree with the Python
check value kind by value kind; the launches themselves are checked on the GPU
(tests/gpu/test_device_ring_gpu.py, bit for bit against the per-side host copies)."""

from __future__ import annotations

import array
import math

import pytest
import torch

from aoti_debug.runtime import cpu_records, fused_stats, ring_records

pytestmark = pytest.mark.quick  # compiles nothing: make check runs it

LAUNCHED, MISMATCH, MOVED, NOT_HERE = (fused_stats.SIDE_LAUNCHED, fused_stats.SIDE_MISMATCH, fused_stats.SIDE_MOVED,
                                       fused_stats.SIDE_NOT_HERE)


class _Launch:
    out_aligned = True


@pytest.fixture
def side(library, monkeypatch):
    """``check(values_made_from, ring_at) -> (plan, spec_address, launches)``: a plan and the
    library's spec of it with no launches; the function is bound for the test only."""
    monkeypatch.setattr(fused_stats, "side_function", None)
    monkeypatch.setattr(fused_stats, "express_function", None)  # (bound with it: restored after the test)
    monkeypatch.setattr(fused_stats, "_library_launch", object())  # (a bound launcher: side_spec's condition)
    fused_stats.bind_side_function(library, cpu_records.values_config(library.codes))
    if not fused_stats.side_function:
        pytest.fail("the runtime library was built without its ring side function (Python headers, tensor layout)")
    empty = array.array("q", [0])
    kept = []

    def make(values, ring_at=None):
        in_ring = [isinstance(v, torch.Tensor) and (ring_at is None or i in ring_at) for i, v in enumerate(values)]
        plan = ring_records.SidePlan(None, [{} for _ in values], list(values), in_ring, None)
        launches = fused_stats._Kept((_Launch(),))
        launches.packed = (empty, empty.buffer_info()[0])
        ptrs = [v.data_ptr() for v, r in zip(values, in_ring) if r]
        spec = fused_stats.side_spec(plan.meta, plan.ring_at, ptrs, launches, torch.device("cpu"), library.codes)
        assert spec, "side_spec refused a plain side"
        kept.append(spec)
        return plan, spec[1]

    return make


def _call(addr, values):
    return fused_stats.side_function(addr, values, 0, 0)


def test_the_values_a_plan_was_made_from_match(side):
    x = torch.randn(4, 6)
    t = torch.randn(6, 4).t()  # strided
    meta_only = torch.empty(3)
    values = (x, t, 7, None, True, 0.5, meta_only)
    plan, addr = side(values, ring_at={0, 1})
    assert plan.matches(list(values))
    assert _call(addr, values) == LAUNCHED
    assert _call(addr, list(values)) == LAUNCHED  # a list as the wrapper may pass
    # A Parameter over the same memory is the same value to the kernel.
    assert _call(addr, (torch.nn.Parameter(x), *values[1:])) == LAUNCHED


@pytest.mark.parametrize("case", ["ring-moved", "meta-moved", "shape", "stride", "dtype", "int", "bool-for-int",
                                  "none", "float-sign", "float-nan", "count", "list", "string", "subclass", "neg"])
def test_each_change_is_judged_as_the_python_check_judges_it(side, case):
    x = torch.randn(4, 6)
    t = torch.randn(6, 4).t()
    meta_only = torch.empty(3)
    base = [x, t, 7, None, True, 0.5, meta_only]
    plan, addr = side(tuple(base), ring_at={0, 1})
    v = list(base)
    expected = MISMATCH
    if case == "ring-moved":
        v[0] = x.clone()
        expected = MOVED  # matches, but the kept launches read the old address
    elif case == "meta-moved":
        v[6] = torch.empty(3)
        expected = LAUNCHED  # read for its metadata only
    elif case == "shape":
        v[0] = x.view(6, 4)
    elif case == "stride":
        v[1] = t.contiguous()
    elif case == "dtype":
        v[0] = x.double()
    elif case == "int":
        v[2] = 8
    elif case == "bool-for-int":
        v[2] = True
    elif case == "none":
        v[3] = 0
    elif case == "float-sign":
        plan, addr = side(tuple(base[:5] + [0.0] + base[6:]), ring_at={0, 1})
        v[5] = -0.0
    elif case == "float-nan":
        plan, addr = side(tuple(base[:5] + [math.nan] + base[6:]), ring_at={0, 1})
        v[5] = math.nan  # NaN != NaN: never the same scalar, in either check
    elif case == "count":
        v = v[:-1]
    elif case == "list":
        v[0] = [x]
    elif case == "string":
        v[2] = "7"
    elif case == "subclass":
        class Sub(torch.Tensor):
            pass

        v[0] = x.as_subclass(Sub)
        expected = NOT_HERE  # the Python check decides (isinstance)
    elif case == "neg":
        v[0] = torch._neg_view(x)
    rc = _call(addr, tuple(v))
    assert rc == expected
    if expected in (LAUNCHED, MOVED):
        assert plan.matches(v)
    elif expected == MISMATCH and case != "neg":
        # (a negated view passes the Python check; its memory reads negated, so the C
        # function sends it to the full path, which reads it as what it is)
        assert not plan.matches(v)


def test_a_spec_it_cannot_hold_is_refused(library, monkeypatch):
    monkeypatch.setattr(fused_stats, "_library_launch", object())
    empty = array.array("q", [0])
    launches = fused_stats._Kept((_Launch(),))
    launches.packed = (empty, empty.buffer_info()[0])
    x = torch.randn(3)
    plan = ring_records.SidePlan(None, [{}, {}], [x, 2 ** 70], [True, False], None)
    cpu = torch.device("cpu")
    assert fused_stats.side_spec(plan.meta, plan.ring_at, [x.data_ptr()], launches, cpu, library.codes) is False
    plan = ring_records.SidePlan(None, [{}], [x], [True], None)
    assert fused_stats.side_spec(plan.meta, None, [x.data_ptr()], launches, cpu, {}) is False  # no dtype code
    assert fused_stats.side_spec(plan.meta, None, [x.data_ptr()], (), cpu, library.codes) is False  # no launches
    unpacked = fused_stats._Kept((_Launch(),))
    assert fused_stats.side_spec(plan.meta, None, [x.data_ptr()], unpacked, cpu, library.codes) is False
    monkeypatch.setattr(fused_stats, "_library_launch", False)  # Triton's launcher: not the library's launches
    assert fused_stats.side_spec(plan.meta, None, [x.data_ptr()], launches, cpu, library.codes) is False


def test_a_malformed_spec_is_not_read(side):
    x = torch.randn(3)
    _plan, addr = side((x,))
    bad = array.array("q", [99, 7, 1, 0, -1, 1, 0])  # another layout
    assert _call(bad.buffer_info()[0], (x,)) == NOT_HERE
    short = array.array("q", [fused_stats.SIDE_LAYOUT, 7, 1, 0, -1, 1, 0])  # the item runs past the spec's length
    assert _call(short.buffer_info()[0], (x,)) == NOT_HERE
    assert _call(0, (x,)) == NOT_HERE
    assert _call(addr, x) == NOT_HERE  # not a tuple or list
    with pytest.raises(TypeError):
        fused_stats.side_function(addr, (x,))
