"""The Python-wrapper path end to end on CPU: coverage, exact values, levels, filter."""

from __future__ import annotations

import os
import re

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import aoti_debug
from aoti_debug.format.schema import NAMES_RE
from aoti_debug.runtime import session
from examples.models import MLP
from tests.conftest import load_record, only_run, records
from tests.kinds import kinds_args, kinds_fn


def _compile_and_run(fn, *args, level="save", kernels=None, root=None, **kw):
    torch._dynamo.reset()
    with aoti_debug.enabled(level=level, kernels=kernels, dump_dir=root, **kw):
        result, codes = run_and_get_code(torch.compile(fn), *args)
    aoti_debug.flush()
    return result, "\n".join(codes)


# --------------------------------------------------------------------------- exact values
@pytest.fixture(scope="module")
def mlp_dump(tmp_path_factory):
    torch.manual_seed(0)
    model = MLP(16, 32, 8).eval()
    x = torch.randn(4, 16)
    root = str(tmp_path_factory.mktemp("mlp"))
    with torch.no_grad():
        out, code = _compile_and_run(model, x, root=root)
    return model, x, out, code, only_run(root)



def test_saved_values_match_eager(mlp_dump):
    model, x, out, _code, run_dir = mlp_dump
    recs = records(run_dir)
    with torch.no_grad():
        h_pre = torch.nn.functional.linear(x, model.fc1.weight, model.fc1.bias)
        h = torch.relu(h_pre)
        logits = torch.nn.functional.linear(h, model.fc2.weight, model.fc2.bias)
        expected_out = torch.softmax(logits, dim=-1)
    addmm = [r for r in recs if r["op"] == "aten.addmm" and r["phase"] == "after"]
    assert [r["kernel_call"] for r in addmm] == [0, 1]
    torch.testing.assert_close(load_record(run_dir, addmm[0]), h_pre)  # fc1 before relu
    # The relu is fused into a C++ kernel that works in place on the addmm output.
    relu = [r for r in recs if r["kernel"].startswith("cpp_fused") and "relu" in r["kernel"]]
    assert {r["phase"] for r in relu} == {"before", "after"} and all(r["role"] == "inout" for r in relu)
    torch.testing.assert_close(load_record(run_dir, [r for r in relu if r["phase"] == "after"][0]), h)
    torch.testing.assert_close(load_record(run_dir, [r for r in relu if r["phase"] == "before"][0]), h_pre)
    torch.testing.assert_close(load_record(run_dir, addmm[1]), logits)
    last = [r for r in recs if r["phase"] == "after"][-1]
    torch.testing.assert_close(load_record(run_dir, last), expected_out)
    torch.testing.assert_close(out, expected_out)


def test_extern_inputs_include_views(mlp_dump):
    model, x, _out, _code, run_dir = mlp_dump
    first = [r for r in records(run_dir) if r["op"] == "aten.addmm" and r["kernel_call"] == 0 and r["phase"] == "before"]
    views = [r for r in first if "reinterpret_tensor" in r.get("expr", "")]
    assert len(views) == 1, first
    torch.testing.assert_close(load_record(run_dir, views[0]), model.fc1.weight.detach().t())
    assert any(torch.equal(load_record(run_dir, r), x) for r in first)


def test_records_are_complete_and_files_load(mlp_dump):
    *_, run_dir = mlp_dump
    recs = records(run_dir)
    required = {"seq", "launch", "graph", "wrapper", "kernel", "kernel_call", "phase", "arg", "kind", "dtype",
                "shape", "stride", "device", "numel", "stats", "checksum", "file", "role"}
    for r in recs:
        assert required <= set(r), set(required) - set(r)
        assert r["role"] in ("input", "output", "inout")
        assert (r["phase"] == "before") == (r["role"] in ("input", "inout")) or r["role"] == "inout"
        t = load_record(run_dir, r)
        assert list(t.shape) == r["shape"] and str(t.dtype) == "torch." + r["dtype"]
    assert [r["seq"] for r in recs] == sorted(r["seq"] for r in recs)
    own = [r for r in recs if not r.get("shared")]
    assert len({r["file"] for r in own}) == len(own)
    # An input that is the unchanged output of an earlier launch shares that file.
    shared = [r for r in recs if r.get("shared")]
    assert shared and all(r["phase"] == "before" for r in shared)
    by_file = {r["file"]: r for r in own}
    assert all(by_file[r["file"]]["checksum"] == r["checksum"] for r in shared)


def test_outputs_never_captured_before_launch(mlp_dump):
    *_, run_dir = mlp_dump
    for r in records(run_dir):
        if r["role"] == "output":
            assert r["phase"] == "after"


# --------------------------------------------------------------------------- coverage
@pytest.fixture(scope="module")
def kinds_dump(tmp_path_factory):
    x, idx, w = kinds_args()
    root = str(tmp_path_factory.mktemp("kinds"))
    out, code = _compile_and_run(kinds_fn, x, idx, w, root=root)
    return (x, idx, w), out, code, only_run(root)


def test_every_launch_kind_is_instrumented(kinds_dump):
    _args, _out, code, run_dir = kinds_dump
    recs = records(run_dir)
    ops = {r["op"] for r in recs}
    assert "aten.mm" in ops
    assert "aoti_debug_test.scale_shift" in ops
    assert "aoti_debug_test.add_into" in ops
    assert "aten.sort" in ops
    assert any(r["kernel"].startswith("cpp_fused") for r in recs)
    # every launch line in the generated code is bracketed
    assert code.count("_aoti_debug.launch(") == code.count("_aoti_debug.done(") == len({r["launch"] for r in recs})


def test_custom_op_outputs_and_mutations(kinds_dump):
    (x, idx, w), out, _code, run_dir = kinds_dump
    recs = records(run_dir)
    ss = [r for r in recs if r["op"] == "aoti_debug_test.scale_shift"]
    before = [r for r in ss if r["phase"] == "before" and r["kind"] == "tensor"]
    after = [r for r in ss if r["phase"] == "after"]
    assert len(before) == 1 and len(after) == 1
    expected = (torch.sin(x) @ w) * 2 + 1
    torch.testing.assert_close(load_record(run_dir, after[0]), expected)
    mut = [r for r in recs if r["op"] == "aoti_debug_test.add_into"]
    assert {(r["phase"], r["role"]) for r in mut} >= {("before", "inout"), ("after", "inout")}
    torch.testing.assert_close(out, kinds_fn(x, idx, w))


def test_sort_fallback_records_both_outputs(kinds_dump):
    *_, run_dir = kinds_dump
    after = [r for r in records(run_dir) if r["op"] == "aten.sort" and r["phase"] == "after"]
    assert sorted(r["dtype"] for r in after) == ["float32", "int64"]


def test_subgraph_kernels(tmp_path):
    def f(x):
        return torch.cond(x.sum() > 0, lambda t: torch.sin(t) * 2, lambda t: torch.cos(t) - 1, (x,))

    x = torch.ones(4, 4)
    out, code = _compile_and_run(f, x, root=str(tmp_path))
    recs = records(only_run(str(tmp_path)))
    sub = [r for r in recs if "/" in r["graph"]]
    assert sub, sorted({r["graph"] for r in recs})
    final = [r for r in sub if r["phase"] == "after"][-1]
    torch.testing.assert_close(torch.load(os.path.join(only_run(str(tmp_path)), final["file"]), weights_only=True),
                               torch.sin(x) * 2)


def test_dynamic_shapes_record_symints(tmp_path):
    def f(x):
        return torch.relu(x) * x.shape[0]

    torch._dynamo.reset()
    with aoti_debug.enabled(level="save", dump_dir=str(tmp_path)):
        fn = torch.compile(f, dynamic=True)
        fn(torch.randn(5, 3))
        out = fn(torch.randn(7, 3))
    aoti_debug.flush()
    recs = records(only_run(str(tmp_path)))
    scalars = [r for r in recs if r["kind"] in ("symint", "scalar")]
    assert scalars, "a dynamic-shape kernel takes its size as a scalar argument"
    assert all("file" not in r and "value" in r for r in scalars)
    assert {r["value"] for r in scalars if r["kind"] == "symint"} & {21, 7}, scalars
    assert out.shape == (7, 3)


# --------------------------------------------------------------------------- levels and filter
def test_repeated_launches_do_not_overwrite(tmp_path):
    model = MLP().eval()
    x = torch.randn(2, 16)
    torch._dynamo.reset()
    with torch.no_grad(), aoti_debug.enabled(level="save", dump_dir=str(tmp_path)):
        fn = torch.compile(model)
        fn(x)
        fn(x * 2)
    aoti_debug.flush()
    recs = records(only_run(str(tmp_path)))
    calls = [r for r in recs if r["op"] == "aten.addmm" and r["phase"] == "before" and r["index"] == 1
             and r["kernel_call"] in (0, 2)]  # fc1 is call 0, fc2 call 1, then fc1 again
    assert [r["kernel_call"] for r in calls] == [0, 2]
    a, b = (torch.load(os.path.join(only_run(str(tmp_path)), r["file"]), weights_only=True) for r in calls)
    torch.testing.assert_close(b, a * 2)


def test_names_level_prints_flushed_before_after(tmp_path, capfd):
    model = MLP().eval()
    with torch.no_grad():
        _compile_and_run(model, torch.randn(2, 16), level="names", root=str(tmp_path))
    err = capfd.readouterr().err
    assert re.search(r"^\[aoti_debug\] graph=graph0 wrapper=python file=\S+\.py$", err, re.M)
    lines = [line for line in err.splitlines() if NAMES_RE.match(line)]
    assert lines[0].startswith("[aoti_debug] before launch=1 ") and "kernel=extern_kernels.addmm" in lines[0]
    assert lines[1].startswith("[aoti_debug] after launch=1 ")
    assert len([x for x in lines if " before " in x]) == len([x for x in lines if " after " in x]) >= 3
    assert not os.path.exists(os.path.join(str(tmp_path)))  or not os.listdir(str(tmp_path))


def test_names_args_describes_every_launch(tmp_path, capfd, monkeypatch):
    """AOTI_DEBUG_NAMES_ARGS (aoti-debug locate): a site line and one arg line per arg, metadata only."""
    from aoti_debug.format.schema import ARG_RE, SITE_RE, parse_fields

    monkeypatch.setenv("AOTI_DEBUG_NAMES_ARGS", "1")
    session.reset()
    try:
        with torch.no_grad():
            _compile_and_run(MLP().eval(), torch.randn(2, 16), level="names", root=str(tmp_path))
    finally:
        session.reset()
    err = capfd.readouterr().err.splitlines()
    sites = [SITE_RE.match(x) for x in err if SITE_RE.match(x)]
    args = [parse_fields(ARG_RE.match(x)["fields"]) for x in err if ARG_RE.match(x)]
    befores = [x for x in err if NAMES_RE.match(x) and " before " in x]
    assert len(sites) == len(befores) >= 3 and all(int(m["line"]) > 0 for m in sites)
    tensors = [a for a in args if a["kind"] == "tensor"]
    assert tensors and all(a["shape"].startswith("[") and a["dtype"] == "float32" and a["device"] == "cpu"
                           for a in tensors)
    assert any(a["shape"] == "[2,16]" for a in tensors)


def test_print_level_prints_one_line_per_tensor(tmp_path, capfd):
    with torch.no_grad():
        _compile_and_run(MLP().eval(), torch.randn(2, 16), level="print", root=str(tmp_path))
    lines = [x for x in capfd.readouterr().err.splitlines() if x.startswith("[aoti_debug] ")]
    recs = records(only_run(str(tmp_path)))
    assert len(lines) == len(recs) and all("min=" in x and "nan=" in x for x in lines)
    assert not any("file" in r for r in recs)


def test_stats_level_writes_no_tensor_files(tmp_path):
    with torch.no_grad():
        _compile_and_run(MLP().eval(), torch.randn(2, 16), level="stats", root=str(tmp_path))
    run_dir = only_run(str(tmp_path))
    recs = records(run_dir)
    assert recs and all("file" not in r and r["checksum"] and r["stats"] for r in recs)
    assert os.listdir(os.path.join(run_dir, "tensors")) == []


def test_kernel_filter_applies_and_nonmatching_get_no_code(tmp_path):
    with torch.no_grad():
        _out, code = _compile_and_run(MLP().eval(), torch.randn(2, 16), kernels="cpp_fused*,!*softmax*",
                                      root=str(tmp_path))
    recs = records(only_run(str(tmp_path)))
    kernels = {r["kernel"] for r in recs}
    assert kernels and all(k.startswith("cpp_fused") and "softmax" not in k for k in kernels)
    assert "extern_kernels.addmm(" in code and "'extern_kernels.addmm'" not in code


def test_level_off_is_byte_identical():
    def f(x):
        return torch.nn.functional.gelu(x @ x.T).sum(0)

    x = torch.randn(8, 8)
    torch._dynamo.reset()
    _, plain = run_and_get_code(torch.compile(f), x)
    with aoti_debug.enabled(level="save"):
        torch._dynamo.reset()
        _, instrumented = run_and_get_code(torch.compile(f), x)
    torch._dynamo.reset()
    _, after = run_and_get_code(torch.compile(f), x)
    assert "_aoti_debug" in instrumented[0]
    assert plain == after


def test_dump_dir_with_quote_and_space(tmp_path):
    root = str(tmp_path / "it's a dir")
    with torch.no_grad():
        _compile_and_run(MLP().eval(), torch.randn(2, 16), root=root)
    assert records(only_run(root))


def test_runtime_does_not_import_heavy_modules():
    from tests.conftest import run_python

    r = run_python("import sys, aoti_debug.runtime.hooks, aoti_debug.runtime.session;"
                   "print(sorted(m for m in ('pandas', 'click', 'aoti_debug.compare', 'aoti_debug.codegen') if m in sys.modules))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_session_reset_reads_dir_at_run_time(tmp_path, monkeypatch):
    """The dump directory is read when a run starts, not when the graph was compiled."""
    model = MLP().eval()
    x = torch.randn(2, 16)
    monkeypatch.setenv("AOTI_DEBUG_DIR", str(tmp_path / "first"))
    torch._dynamo.reset()
    session.reset()
    with torch.no_grad(), aoti_debug.enabled(level="stats"):
        fn = torch.compile(model)
        fn(x)
        aoti_debug.flush()
        session.reset()
        monkeypatch.setenv("AOTI_DEBUG_DIR", str(tmp_path / "second"))
        fn(x)
        aoti_debug.flush()
    session.reset()
    assert records(only_run(str(tmp_path / "first")))
    assert records(only_run(str(tmp_path / "second")))
