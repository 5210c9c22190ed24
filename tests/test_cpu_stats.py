"""CPU stats through the runtime library (runtime/native_stats.py, native/cpu_summary.h):
the same values as the torch-op path (stats.device_summary) on every dtype and layout
the library reads, bit for bit where the format says so; what it does not read goes
back to the caller; a Python-wrapper model at stats level uses it; without it, the
model runs on torch ops with one warning."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aoti_debug
from aoti_debug.codegen import native_library
from aoti_debug.format.protocol import PROTOCOL_VERSION, Site, SiteArg
from aoti_debug.format.writer import EncodedDict
from aoti_debug.runtime import hooks, native_stats, session
from aoti_debug.runtime.stats import stats_fields, summary_to_stats, tensor_stats
from tests.conftest import only_run, records

_FAST = dict(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])


#: Every dtype the library reads (its own table must name all of them).
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2,
          torch.float8_e4m3fnuz, torch.float8_e5m2fnuz, torch.complex32, torch.complex64, torch.complex128,
          torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16, torch.uint32, torch.uint64,
          torch.bool]


def test_the_library_names_every_dtype_it_reads(library):
    assert set(library.codes) == set(DTYPES)
    for dtype, (_code, itemsize, is_complex) in library.codes.items():
        assert (itemsize, is_complex) == (dtype.itemsize, dtype.is_complex)


def assert_same(native: tuple[dict, str], t: torch.Tensor) -> None:
    """The library's (stats, checksum) against the torch-op path's: checksum, counts,
    min, max and absmax exactly; mean and std to float64 rounding of the sums."""
    expected, checksum = tensor_stats(t)
    stats, got_checksum = native
    want = expected.to_dict()
    assert got_checksum == checksum
    if isinstance(stats, EncodedDict):  # the library's own JSON text for these stats: the same values
        parsed = json.loads(stats.json)
        assert parsed == stats and [type(v) for v in parsed.values()] == [type(v) for v in stats.values()]
    for key in ("min", "max", "absmax", "nan", "inf"):
        assert stats[key] == want[key], (key, stats, want)
    scale = max(abs(want["absmax"] or 0.0), 1e-300)
    for key in ("mean", "std"):
        if want[key] is None or stats[key] is None:
            assert stats[key] is want[key], (key, stats, want)
        else:
            assert stats[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12 * scale), (key, stats, want)


def _values(dtype: torch.dtype, shape: tuple[int, ...], seed: int, specials: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:  # real and imaginary parts drawn as float64 pairs
        return torch.view_as_complex(_values(torch.float64, (*shape, 2), seed, specials)).to(dtype)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float64) * 3
        if specials and x.numel() >= 4:
            flat = x.view(-1)
            flat[0] = float("nan")
            flat[x.numel() // 2] = float("inf")
            flat[-1] = -float("inf")
        return x.to(dtype)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -2**40), min(info.max, 2**40)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype) if dtype != torch.uint64 else \
        torch.randint(0, 2**40, shape, generator=g, dtype=torch.int64).to(dtype)


@st.composite
def strided(draw):
    """A tensor of any dtype the library reads, in any layout a CPU buffer can have:
    contiguous, transposed, sliced with steps, expanded (stride 0), 0-d, empty."""
    dtype = draw(st.sampled_from(DTYPES))
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 7), min_size=ndim, max_size=ndim)))
    t = _values(dtype, tuple(s * 2 for s in shape), draw(st.integers(0, 2**16)), draw(st.booleans()))
    view = draw(st.sampled_from(["contiguous", "stepped", "transposed", "permuted", "expanded"]))
    if view == "stepped" and ndim:
        t = t[tuple(slice(None, None, 2) for _ in range(ndim))]
    elif view == "transposed" and ndim >= 2:
        t = t[tuple(slice(0, s) for s in shape)].transpose(0, ndim - 1)
    elif view == "permuted" and ndim >= 2:
        t = t[tuple(slice(0, s) for s in shape)].permute(*draw(st.permutations(range(ndim))))
    elif view == "expanded" and ndim and min(shape) > 0:
        t = t[tuple(slice(0, 1) for _ in range(ndim))].expand(*shape)
    else:
        t = t[tuple(slice(0, s) for s in shape)]
    return t


@settings(max_examples=400, **_FAST)
@given(ts=st.lists(strided(), min_size=1, max_size=4))
def test_batches_of_strided_tensors_match_the_torch_path(library, ts):
    results = library.summarize(ts)
    for t, r in zip(ts, results):
        assert r is not None, (t.dtype, t.shape, t.stride())
        assert isinstance(r[0], EncodedDict)
        assert_same(r, t)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bool, torch.int64,
                                   torch.complex64])
def test_transposed_and_permuted_tensors_across_gather_tiles(library, dtype):
    """Layouts gathered tile by tile (their last dim strided, another dim nearer in
    memory), with partial tiles at every edge, a sliced source and stride-0 dims."""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(5, 67, 70, generator=g).to(dtype)
    views = [base[0].t(), base.permute(2, 0, 1), base.permute(0, 2, 1), base.permute(1, 2, 0)[3:, ::2, 1:],
             base[:, :1, :].expand(5, 40, 70).transpose(1, 2), base.transpose(0, 2)[:, 1:4]]
    for t in views:
        assert not t.is_contiguous()
    for t, r in zip(views, library.summarize(views)):
        assert r is not None, (t.shape, t.stride())
        assert_same(r, t)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64])
def test_large_tensors_threaded_and_without_the_gil(library, dtype):
    """Above NOGIL_BYTES the call releases the GIL; large float tensors are summarised in
    parallel blocks (OpenMP where the library has it)."""
    t = _values(dtype, (1024, 1031), 3, True)[:, 3:1027]  # 4 MB+, a strided view
    assert t.numel() * t.element_size() > native_stats.NOGIL_BYTES
    (r,) = library.summarize([t])
    assert_same(r, t)


def _edge_values(dtype: torch.dtype) -> torch.Tensor:
    """Three blocks and an odd tail of the library's float kernel (2048 values a block, 8
    or 4 a vector): subnormals, signed zeros, the largest and smallest finite values,
    NaNs of every sign and payload the dtype has, infinities, a block with no finite
    value, and blocks whose first values are not finite (the kernel's shift)."""
    finfo = torch.finfo(dtype)
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(3 * 2048 + 13, generator=g, dtype=torch.float64) * 3).to(dtype)
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[dtype.itemsize]
    raw = x.view(bits)
    special = [0.0, -0.0, finfo.tiny, -finfo.tiny, finfo.max, -finfo.max, finfo.smallest_normal / 4, float("nan")]
    if dtype not in (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz):
        special += [float("inf"), -float("inf")]
    for i, v in enumerate(special * 3):
        x[5 + 37 * i] = v
    x[2048:4096] = float("nan") if dtype.itemsize == 1 and dtype != torch.float8_e5m2 else float("inf")
    x[4096:4100] = float("nan")  # the third block starts with NaNs
    if dtype.itemsize > 1:  # NaNs with other payloads and the sign bit set
        nan = x[4096:4097].view(bits).clone()
        raw[4100] = nan | 1
        raw[4101] = (nan | 3).neg() if dtype.itemsize == 4 else nan | 5
    x[-1] = -float("inf") if dtype not in (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz) \
        else float("nan")
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn,
                                   torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
                                   torch.complex64, torch.complex32])
def test_edge_values_through_the_float_kernel(library, dtype):
    real = {torch.complex64: torch.float32, torch.complex32: torch.float16}.get(dtype, dtype)
    x = _edge_values(real)
    if dtype.is_complex:
        x = torch.view_as_complex(x[:-1].view(-1, 2).contiguous()) if dtype == torch.complex64 else \
            x[:-1].view(torch.complex32)
    # mostly subnormal values, whose min and max are compared exactly
    tiny = (torch.randn(2 * 2048 + 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
            * torch.finfo(real).smallest_normal).to(real)
    if dtype.is_complex:
        tiny = torch.view_as_complex(tiny[:-1].view(-1, 2).contiguous()) if dtype == torch.complex64 else \
            tiny[:-1].view(torch.complex32)
    for t in (x, x[1:], x[3:-5], x[:8], x[:7], tiny):  # every alignment of the tail and the vectors
        (r,) = library.summarize([t])
        assert r is not None
        assert_same(r, t)


def test_conjugate_and_negative_views_are_summarised_as_their_values(library):
    z = torch.randn(5, 3, dtype=torch.complex64)
    conj = z.conj()
    neg = z.conj().imag  # a negative view of a real tensor
    assert conj.is_conj() and neg.is_neg()
    for t, resolved in ((conj, conj.resolve_conj()), (neg, neg.resolve_neg())):
        (r,) = library.summarize([t])
        assert_same(r, resolved)


def test_what_the_library_does_not_read_goes_back_to_the_caller(library):
    class Sub(torch.Tensor):
        pass

    plain = torch.arange(6.0)
    quantized = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    sparse = torch.eye(3).to_sparse()
    sub = torch.arange(4.0).as_subclass(Sub)
    meta = torch.empty(3, device="meta")
    results = library.summarize([quantized, plain, sparse, sub, meta])
    assert [r is None for r in results] == [True, False, True, True, True]
    assert_same(results[1], plain)


def test_a_library_answering_in_another_layout_is_not_trusted(library, monkeypatch, capfd):
    """A wrapper compiled from other sources may name a library whose function writes
    less (no JSON lines): nothing it wrote is used, the caller's path takes over."""
    monkeypatch.setattr(library, "_fn", lambda *args: 0)  # returns success, writes nothing
    session._warned.discard("native-stats-abi")
    assert library.summarize([torch.ones(3), torch.zeros(2)]) == [None, None]
    assert "answered in another layout" in capfd.readouterr().err


def test_stats_fields_is_summary_to_stats_to_dict():
    inf, nan = float("inf"), float("nan")
    for values in ([1.0, 2.0, 1.5, 0.5, 2.0, 0, 0], [nan] * 5 + [3, 1], [-1.0, 1e308, inf, nan, 1e308, 0, 2],
                   [0.0, 0.0, -inf, inf, 0.0, 1, 1], [-2.5, 7.0, 1.25, 3.0, 7.0, 2.0, 0.0]):
        got = stats_fields(*values)
        want = summary_to_stats(values + [0]).to_dict()
        assert got == want and [type(v) for v in got.values()] == [type(v) for v in want.values()], (got, want)


def _site(names):
    return Site("", "k", "k", tuple(SiteArg(n, "input", "tensor", n) for n in names), ())


ODD = {
    "noncontig": torch.arange(24.0).view(4, 6).t()[1:, ::2],
    "bf16": torch.randn(5, 7).bfloat16(),
    "complex": torch.randn(3, 2, dtype=torch.complex64),
    "nan_inf": torch.tensor([1.0, float("nan"), float("inf"), -2.0]),
    "empty": torch.empty(0, 3),
    "int64": torch.arange(10),
    "quantized": torch.quantize_per_tensor(torch.tensor([0.5, -1.0]), 0.1, 0, torch.qint8),
}


@pytest.mark.parametrize("level", ["stats", "print"])
def test_the_python_runtime_records_cpu_tensors_through_the_library(library, fresh_session, level, capfd):
    g = hooks.graph(None, level, False, protocol=PROTOCOL_VERSION, native=library.path)
    names = list(ODD)
    g.launch(_site(names), [ODD[n] for n in names])
    aoti_debug.flush()
    recs = {r["arg"]: r for r in records(only_run(str(fresh_session)))}
    assert g._library is library
    for n, t in ODD.items():
        if n == "quantized":
            # not read by the library: the torch-op path, which cannot either and says so
            assert recs[n]["error"].startswith("stats: ") and recs[n]["dtype"] == "qint8"
            continue
        assert "error" not in recs[n], recs[n]
        assert_same((recs[n]["stats"], recs[n]["checksum"]), t)
    assert recs["nan_inf"]["stats"] == {"min": -2.0, "max": 1.0, "mean": -0.5, "std": math.sqrt(4.5),
                                        "absmax": 2.0, "nan": 1, "inf": 1}
    assert not [k for k, _ in session.FAILURES if k.startswith("native-stats")]
    if level == "print":
        err = capfd.readouterr().err
        assert "bf16 (input) bfloat16[5x7] cpu min=" in err and "nan_inf (input) float32[4] cpu min=-2 " in err


def test_without_the_library_the_model_runs_on_torch_ops_with_one_warning(fresh_session, capfd):
    g = hooks.graph(None, "stats", False, protocol=PROTOCOL_VERSION, native="")
    for _ in range(2):
        g.launch(_site(["x"]), [torch.arange(5.0)])
    aoti_debug.flush()
    recs = records(only_run(str(fresh_session)))
    assert [r["checksum"] for r in recs] == [tensor_stats(torch.arange(5.0))[1]] * 2
    assert capfd.readouterr().err.count("could not be built") == 1


def test_a_library_that_cannot_be_loaded_warns_once(fresh_session, tmp_path, capfd):
    bad = tmp_path / "libnot_a_library.so"
    bad.write_text("not ELF")
    g = hooks.graph(None, "stats", False, protocol=PROTOCOL_VERSION, native=str(bad))
    g.launch(_site(["x"]), [torch.ones(3)])
    g.launch(_site(["x"]), [torch.ones(3)])
    aoti_debug.flush()
    recs = records(only_run(str(fresh_session)))
    assert len(recs) == 2 and all(r["stats"]["mean"] == 1.0 for r in recs)
    assert capfd.readouterr().err.count("cannot load the runtime library") == 1


def _some(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """Values of ``dtype``: random bytes (NaN payloads and all) where the dtype has no
    random generator."""
    n = math.prod(shape) * dtype.itemsize
    raw = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=torch.Generator().manual_seed(n))
    if dtype == torch.bool:
        return (raw % 2).bool().view(shape)
    return raw.view(dtype).view(shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_library_writes_tensor_files_that_load_back_bit_for_bit(library, tmp_path, dtype):
    """Level save's tensor files from the library (``Library.write_pt``, native/pt_writer.h):
    ``torch.load(weights_only=True)`` gives the same dtype, shape and bytes, for every dtype
    the library reads, a 0-d tensor and an empty one too."""
    for k, shape in enumerate([(3, 5), (), (0, 4), (2, 1, 7)]):
        t = _some(dtype, shape)
        path = str(tmp_path / f"t{k}.pt")
        assert library.write_pt(path, t)
        back = torch.load(path, weights_only=True)
        assert back.dtype == dtype and back.shape == t.shape and back.is_contiguous()
        assert torch.equal(back.reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8))


def test_what_the_library_does_not_write_goes_to_torch_save_and_a_failed_write_leaves_no_file(library, tmp_path):
    t = torch.arange(12.0).view(3, 4)
    for other in (t.t(), t.conj_physical().to(torch.complex64).conj(), ODD["quantized"], torch.ones(2).to_sparse()):
        assert not library.write_pt(str(tmp_path / "x.pt"), other)
    assert not os.listdir(tmp_path)
    with pytest.raises(OSError, match="cannot open"):
        library.write_pt(str(tmp_path / "missing" / "x.pt"), t)
    assert not os.path.exists(tmp_path / "missing")


def test_level_save_writes_its_tensor_files_through_the_library(library, fresh_session, monkeypatch):
    """The Python runtime's writer thread at level save: the library writes each file
    (torch.save is not called), and the records name files that load back as the values."""
    def refuse(*_a, **_k):
        raise AssertionError("torch.save called")

    monkeypatch.setattr(hooks.torch, "save", refuse)
    g = hooks.graph(None, "save", False, protocol=PROTOCOL_VERSION, native=library.path)
    values = {"x": torch.randn(4, 5), "noncontig": ODD["noncontig"], "bf16": ODD["bf16"], "n": torch.arange(7)}
    g.launch(_site(list(values)), list(values.values()))
    aoti_debug.flush()
    run = only_run(str(fresh_session))
    recs = {r["arg"]: r for r in records(run)}
    assert not session.FAILURES, session.FAILURES
    for name, t in values.items():
        assert "error" not in recs[name], recs[name]
        back = torch.load(os.path.join(run, recs[name]["file"]), weights_only=True)
        assert back.dtype == t.dtype and torch.equal(back, t)


def mlp(x, w1, w2):
    return torch.relu(x @ w1).sum(dim=0)[:, None] * 0.5 + torch.tanh(x[:, :4].t() @ w2)


@pytest.fixture(scope="module")
def python_wrapper_dump(library, tmp_path_factory):
    """One model compiled with the Python wrapper at stats level: its wrapper source and dump."""
    root = str(tmp_path_factory.mktemp("cpu_stats"))
    torch._dynamo.reset()
    torch.manual_seed(0)
    args = (torch.randn(6, 8), torch.randn(8, 4), torch.randn(6, 3))
    session.FAILURES.clear()
    with torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=root):
        from torch._inductor.utils import run_and_get_code

        _out, codes = run_and_get_code(torch.compile(mlp), *args)
    aoti_debug.flush()
    return codes, only_run(root), list(session.FAILURES)


def test_a_compiled_python_wrapper_passes_the_library_and_uses_it(library, python_wrapper_dump):
    codes, run_dir, failures = python_wrapper_dump
    assert any(f"native={library.path!r}" in code for code in codes)
    assert not [f for f in failures if f[0].startswith(("native-stats", "stats-"))], failures
    recs = records(run_dir)
    tensors = [r for r in recs if r["kind"] == "tensor"]
    assert tensors and all(r["stats"] is not None and "error" not in r for r in tensors)
    assert {r["device"] for r in tensors} == {"cpu"}
    assert library.path in native_stats._libraries and native_stats._libraries[library.path] is library


def test_the_emitted_header_names_the_library_only_at_stats_levels():
    from aoti_debug.codegen import python_emitter

    assert "native=" not in python_emitter.header_lines("names", False)[1]
    line = python_emitter.header_lines("stats", False, {}, "/x/libaoti_debug_rt.so")[1]
    assert line.endswith(f"info=(), native='/x/libaoti_debug_rt.so', protocol={PROTOCOL_VERSION})")
    assert os.path.basename(native_library.LIBRARY_FILE) == "libaoti_debug_rt.so"
