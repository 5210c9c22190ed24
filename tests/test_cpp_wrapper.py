"""The C++ wrapper (``torch.compile`` with ``cpp_wrapper=True``) on CPU, in process.

The C++ runtime writes synchronously in the model thread, so a dump is complete when
the compiled call returns (no flush). It reads ``AOTI_DEBUG_DIR`` whenever a launch
starts a record and opens a new run when the value changed, so each test points it at
its own directory.
"""

from __future__ import annotations

import glob
import json
import os
import re
import zipfile

import pytest
import torch
from torch._inductor.utils import run_and_get_cpp_code

import aoti_debug
from aoti_debug.format.schema import GRAPH_RE, NAMES_RE
from aoti_debug.format.writer import default_run_id
from aoti_debug.runtime.stats import tensor_stats
from examples.models import MLP
from tests.conftest import dump_dir_restored, load_record, only_run, records
from tests.kinds import kinds_args, kinds_fn

def compile_cpp(fn, *args, level="save", root=None, dynamic=None, kernels=None, phases=None):
    """Compile ``fn`` with cpp_wrapper=True at ``level`` and run it once; (fn, out, code)."""
    if root is not None:
        os.environ["AOTI_DEBUG_DIR"] = root
    torch._dynamo.reset()
    with aoti_debug.enabled(level=level, kernels=kernels, phases=phases), torch._inductor.config.patch(cpp_wrapper=True):
        compiled = torch.compile(fn, dynamic=dynamic)
        out, code = run_and_get_cpp_code(compiled, *args)
    return compiled, out, code


def run_in(root: str, fn, *args, level="save"):
    """Call a compiled function again with the dump directory set to ``root``.

    Leaving ``aoti_debug.enabled`` resets Dynamo, so this enables the level again; the
    FX graph cache hands back the same instrumented wrapper (no new compile)."""
    os.environ["AOTI_DEBUG_DIR"] = root
    with aoti_debug.enabled(level=level), torch._inductor.config.patch(cpp_wrapper=True):
        return fn(*args)



@pytest.fixture(autouse=True)
def _restore_dump_dir():
    with dump_dir_restored():
        yield


# --------------------------------------------------------------------------- exact values
@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    torch.manual_seed(0)
    model = MLP(16, 32, 8).eval()
    x = torch.randn(4, 16)
    root = str(tmp_path_factory.mktemp("cpp_mlp"))
    with dump_dir_restored():
        with torch.no_grad():
            fn, out, code = compile_cpp(model, x, root=root)
    return model, x, fn, out, code, only_run(root)


def test_saved_values_match_eager(mlp):
    model, x, _fn, out, _code, run_dir = mlp
    recs = records(run_dir)
    with torch.no_grad():
        h_pre = torch.nn.functional.linear(x, model.fc1.weight, model.fc1.bias)
        h = torch.relu(h_pre)
        logits = torch.nn.functional.linear(h, model.fc2.weight, model.fc2.bias)
        expected = torch.softmax(logits, dim=-1)
    assert {r["wrapper"] for r in recs} == {"cpp"} and {r["graph"] for r in recs} == {"graph0"}
    addmm = [r for r in recs if r["op"] == "aten.addmm" and r["phase"] == "after"]
    assert [r["kernel"] for r in addmm] == ["aoti_torch_cpu_addmm_out"] * 2
    assert [r["kernel_call"] for r in addmm] == [0, 1]
    torch.testing.assert_close(load_record(run_dir, addmm[0]), h_pre)
    relu = [r for r in recs if r["kernel"].startswith("cpp_fused") and "relu" in r["kernel"]]
    assert {r["phase"] for r in relu} == {"before", "after"} and all(r["role"] == "inout" for r in relu)
    torch.testing.assert_close(load_record(run_dir, [r for r in relu if r["phase"] == "after"][0]), h)
    torch.testing.assert_close(load_record(run_dir, addmm[1]), logits)
    torch.testing.assert_close(load_record(run_dir, [r for r in recs if r["phase"] == "after"][-1]), expected)
    torch.testing.assert_close(out, expected)


def test_extern_inputs_include_views_and_weights(mlp):
    model, x, *_rest, run_dir = mlp
    first = [r for r in records(run_dir) if r["op"] == "aten.addmm" and r["kernel_call"] == 0
             and r["phase"] == "before"]
    views = [r for r in first if "reinterpret_tensor" in r.get("expr", "")]
    assert len(views) == 1 and views[0]["stride"] == [1, 16]  # the transposed weight, as the kernel sees it
    torch.testing.assert_close(load_record(run_dir, views[0]), model.fc1.weight.detach().t())
    assert any(torch.equal(load_record(run_dir, r), x) for r in first)


def test_records_complete_files_load_and_stats_match(mlp):
    *_rest, run_dir = mlp
    recs = records(run_dir)
    required = {"seq", "launch", "graph", "wrapper", "kernel", "op", "kernel_call", "phase", "arg", "kind",
                "dtype", "shape", "stride", "device", "numel", "stats", "checksum", "file", "role", "index"}
    for r in recs:
        assert required <= set(r), required - set(r)
        assert r["phase"] == "after" if r["role"] == "output" else True
        t = load_record(run_dir, r)
        assert list(t.shape) == r["shape"] and str(t.dtype) == "torch." + r["dtype"] and t.is_contiguous()
        stats, checksum = tensor_stats(t)
        assert checksum == r["checksum"]
        for k in ("min", "max", "absmax", "nan", "inf"):
            assert stats.to_dict()[k] == r["stats"][k]
        assert r["stats"]["mean"] == pytest.approx(stats.mean, rel=1e-12, abs=1e-15)
        assert r["stats"]["std"] == pytest.approx(stats.std, rel=1e-9, abs=1e-15)
    assert [r["seq"] for r in recs] == sorted({r["seq"] for r in recs})
    own = [r for r in recs if not r.get("shared")]
    assert len({r["file"] for r in own}) == len(own)
    assert all(re.fullmatch(r"tensors/c\d{8}-(before|after)-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+\.pt", r["file"]) for r in own)
    shared = [r for r in recs if r.get("shared")]
    assert shared and all(r["phase"] == "before" for r in shared)


def test_files_are_plain_zips_that_mmap(mlp):
    *_rest, run_dir = mlp
    files = sorted(glob.glob(os.path.join(run_dir, "tensors", "*.pt")))
    for path in files:
        with zipfile.ZipFile(path) as z:
            assert z.testzip() is None  # CRCs are right
            assert sorted(z.namelist()) == ["archive/byteorder", "archive/data.pkl", "archive/data/0", "archive/version"]
        torch.load(path, weights_only=True, mmap=True)


def test_run_json_and_run_id(mlp):
    *_rest, run_dir = mlp
    with open(os.path.join(run_dir, "run.json")) as f:
        info = json.load(f)
    assert info["format_version"] == 1 and info["writer"] == "cpp" and info["level"] == "save"
    assert info["pid"] == os.getpid() and info["torch_version"] == torch.__version__
    assert info["aoti_debug_version"] == aoti_debug.__version__
    assert info["graphs"]["graph0"]["wrapper"] == "cpp"
    # The C++ runtime derives the same run id as the Python one, from the process start.
    assert os.path.basename(run_dir) == default_run_id()


def test_emitted_code_has_one_runtime_and_a_call_per_side(mlp):
    *_rest, code, run_dir = mlp
    assert code.count("#define AOTI_DEBUG_RUNTIME_V1") == 1
    launches = {r["launch"] for r in records(run_dir)}
    assert code.count("::aoti_debug_rt_1::launch(aoti_debug_site") == len(launches)
    assert code.count("::aoti_debug_rt_1::done(aoti_debug_site") == len(launches)
    line = next(x for x in code.splitlines() if "aoti_debug_rt_1::launch(" in x and "addmm" in x)
    assert '"aoti_torch_cpu_addmm_out", "aten.addmm", ::aoti_debug_rt_1::schema::kSave, 0,' in line
    assert "__FILE__, __LINE__" in line
    # One end of call, after the last launch's done and before the outputs are handed back.
    assert code.count("::aoti_debug_rt_1::call_end();") == 1
    body = code[code.index("inductor_entry_impl("):]
    end = body.index("::aoti_debug_rt_1::call_end();")
    assert body.rindex("::aoti_debug_rt_1::done(aoti_debug_site") < end < body.index("output_handles[0] =")


def test_each_call_is_on_disk_when_it_returns(mlp, tmp_path):
    """The runtime holds a call's lines until the wrapper ends the call (manifest.h): all
    of them are in the manifest when the call returns, without aoti_debug.flush()."""
    model, x, fn, *_rest = mlp
    root = str(tmp_path)
    counts = []
    with torch.no_grad():
        for k in range(3):
            run_in(root, fn, x + k)
            with open(os.path.join(only_run(root), "manifest.jsonl")) as f:
                counts.append(sum(1 for _ in f))
    assert counts[0] > 0 and counts == [counts[0], 2 * counts[0], 3 * counts[0]]
    recs = records(only_run(root))
    assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))


def test_repeated_calls_never_overwrite(mlp, tmp_path):
    model, x, fn, *_rest = mlp
    root = str(tmp_path)
    with torch.no_grad():
        run_in(root, fn, x)
        run_in(root, fn, x * 2)
    run_dir = only_run(root)
    recs = records(run_dir)
    calls = [r for r in recs if r["op"] == "aten.addmm" and r["phase"] == "before" and r["index"] == 1]
    assert [r["kernel_call"] for r in calls] == [0, 1, 2, 3]
    torch.testing.assert_close(load_record(run_dir, calls[2]), load_record(run_dir, calls[0]) * 2)


def test_unwritable_dir_warns_once_and_model_runs(mlp, tmp_path, capfd):
    model, x, fn, out, *_rest = mlp
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with torch.no_grad():
        first = run_in(str(blocker / "dump"), fn, x)
        second = run_in(str(blocker / "dump"), fn, x)
    torch.testing.assert_close(first, out)
    torch.testing.assert_close(second, out)
    err = capfd.readouterr().err
    assert err.count("[aoti_debug] warning: cannot create dump directory") == 1


def test_max_bytes_skips_files_keeps_stats(mlp, tmp_path, monkeypatch):
    _model, x, fn, *_rest = mlp
    monkeypatch.setenv("AOTI_DEBUG_MAX_BYTES", "300")
    with torch.no_grad():
        run_in(str(tmp_path), fn, x)
    recs = records(only_run(str(tmp_path)))
    skipped = [r for r in recs if r.get("skipped")]
    written = [r for r in recs if "file" in r and not r.get("shared")]
    assert skipped and all(r["stats"] and r["checksum"] for r in skipped)
    assert sum(r["numel"] * 4 for r in written) <= 300


def test_zip64_files_load(mlp, tmp_path, monkeypatch):
    """The > 4 GiB layout, forced on small tensors (AOTI_DEBUG_ZIP64=1 is a test switch)."""
    _model, x, fn, *_rest = mlp
    monkeypatch.setenv("AOTI_DEBUG_ZIP64", "1")
    with torch.no_grad():
        run_in(str(tmp_path), fn, x)
    run_dir = only_run(str(tmp_path))
    recs = [r for r in records(run_dir) if "file" in r and not r.get("shared")]
    for r in recs:
        with zipfile.ZipFile(os.path.join(run_dir, r["file"])) as z:
            assert z.testzip() is None
        assert tensor_stats(load_record(run_dir, r))[1] == r["checksum"]


# --------------------------------------------------------------------------- coverage
@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    args = kinds_args()
    root = str(tmp_path_factory.mktemp("cpp_kinds"))
    with dump_dir_restored():
        _fn, out, code = compile_cpp(kinds_fn, *args, root=root)
    return args, out, code, only_run(root)


def test_every_launch_kind_is_instrumented(kinds):
    args, out, code, run_dir = kinds
    recs = records(run_dir)
    ops = {r["op"] for r in recs}
    assert {"aten.mm", "aoti_debug_test.scale_shift", "aoti_debug_test.add_into", "aten.sort"} <= ops
    assert any(r["kernel"].startswith("cpp_fused") for r in recs)
    torch.testing.assert_close(out, kinds_fn(*args))
    assert code.count("aoti_debug_rt_1::launch(") == code.count("aoti_debug_rt_1::done(") == len({r["launch"] for r in recs})


def test_fallback_and_custom_op_outputs_after_the_launch(kinds):
    (x, idx, w), _out, _code, run_dir = kinds
    recs = records(run_dir)
    ss = [r for r in recs if r["op"] == "aoti_debug_test.scale_shift"]
    after = [r for r in ss if r["phase"] == "after"]
    assert len(after) == 1 and after[0]["role"] == "output"
    torch.testing.assert_close(load_record(run_dir, after[0]), (torch.sin(x) @ w) * 2 + 1)
    sort_after = [r for r in recs if r["op"] == "aten.sort" and r["phase"] == "after"]
    assert sorted(r["dtype"] for r in sort_after) == ["float32", "int64"]
    # named as the Python runtime names a returned tuple, with one index for it
    assert sorted(r["arg"] for r in sort_after)[0].endswith("[0]") and len({r["index"] for r in sort_after}) == 1
    values = load_record(run_dir, next(r for r in sort_after if r["dtype"] == "float32"))
    torch.testing.assert_close(values, torch.sort((torch.sin(x) @ w) * 2 + 1, dim=-1).values)
    mut = [r for r in recs if r["op"] == "aoti_debug_test.add_into"]
    assert {(r["phase"], r["role"]) for r in mut} >= {("before", "inout"), ("after", "inout")}
    for r in recs:
        if r["role"] == "output":
            assert r["phase"] == "after"


def test_python_and_cpp_wrappers_align(kinds, tmp_path):
    """The same function through both wrappers: same kernels, ops, args and bitwise values."""
    args, _out, _code, run_dir = kinds
    torch._dynamo.reset()
    with aoti_debug.enabled(level="save", dump_dir=str(tmp_path)):
        torch.compile(kinds_fn)(*args)
    aoti_debug.flush()
    py = records(only_run(str(tmp_path)))
    cc = records(run_dir)

    def key(r):
        kernel = r["kernel"] if r["kernel"] == r["op"] else r["op"]  # generated kernels by name, externs by op
        return (r["graph"], kernel, r["kernel_call"], r["phase"], r["arg"], r["index"])

    py_keys = {key(r): r for r in py}
    cc_keys = {key(r): r for r in cc}
    assert set(py_keys) == set(cc_keys), (set(py_keys) ^ set(cc_keys))
    for k, r in cc_keys.items():
        assert r.get("checksum") == py_keys[k].get("checksum"), k
        assert r.get("value") == py_keys[k].get("value"), k


# --------------------------------------------------------------------------- levels
def test_print_level_one_line_per_value(tmp_path, capfd):
    with torch.no_grad():
        compile_cpp(MLP().eval(), torch.randn(2, 16), level="print", root=str(tmp_path))
    lines = [x for x in capfd.readouterr().err.splitlines() if x.startswith("[aoti_debug] ")]
    recs = records(only_run(str(tmp_path)))
    assert len(lines) == len(recs)
    pattern = re.compile(r"^\[aoti_debug\] (before|after ) \S+ launch=\d+ \S+ \((input|output|inout)\) float32\[[\dx]+\] "
                         r"cpu min=\S+ max=\S+ mean=\S+ std=\S+ absmax=\S+ nan=0 inf=0$")
    assert all(pattern.match(x) for x in lines), [x for x in lines if not pattern.match(x)]
    assert not any("file" in r for r in recs)


def test_names_level_lines_graph_line_and_args(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("AOTI_DEBUG_NAMES_ARGS", "1")
    with torch.no_grad():
        compile_cpp(MLP().eval(), torch.randn(2, 16), level="names", root=str(tmp_path))
    err = capfd.readouterr().err.splitlines()
    graph = [GRAPH_RE.match(x) for x in err if GRAPH_RE.match(x)]
    assert len(graph) == 1 and graph[0]["wrapper"] == "cpp" and graph[0]["file"].endswith(".cpp")
    names = [NAMES_RE.match(x) for x in err if NAMES_RE.match(x)]
    first = names[0]["launch"]  # launches are counted per process at this level
    assert names[0]["phase"] == "before" and names[0]["kernel"] == "aoti_torch_cpu_addmm_out"
    assert [(m["phase"], m["launch"]) for m in names[:2]] == [("before", first), ("after", first)]
    assert names[0]["graph"] == graph[0]["graph"] and names[0]["call"] == "0"
    assert len([m for m in names if m["phase"] == "before"]) == len([m for m in names if m["phase"] == "after"]) >= 3
    # AOTI_DEBUG_NAMES_ARGS: the site (a line of the wrapper source) and the args' metadata
    site = next(x for x in err if x.startswith(f"[aoti_debug] site launch={first} "))
    line = int(re.search(r"line=(\d+)", site).group(1))
    with open(graph[0]["file"]) as f:
        assert "aoti_debug_rt_1::launch(" in f.read().splitlines()[line - 1]
    args = [x for x in err if x.startswith(f"[aoti_debug] arg launch={first} ")]
    assert any("shape=[2,16] stride=[16,1] device=cpu offset=0 ptr=0x" in x for x in args), args
    assert not os.path.exists(str(tmp_path)) or not os.listdir(str(tmp_path))


def test_stats_level_writes_no_tensor_files(tmp_path):
    with torch.no_grad():
        compile_cpp(MLP().eval(), torch.randn(2, 16), level="stats", root=str(tmp_path))
    run_dir = only_run(str(tmp_path))
    recs = records(run_dir)
    assert recs and all("file" not in r and r["checksum"] and r["stats"] for r in recs)
    assert os.listdir(os.path.join(run_dir, "tensors")) == []


def test_filter_and_phases(tmp_path):
    with torch.no_grad():
        _fn, _out, code = compile_cpp(MLP().eval(), torch.randn(2, 16), kernels="cpp_fused*,!*softmax*",
                                      phases="after", root=str(tmp_path))
    recs = records(only_run(str(tmp_path)))
    assert recs and all(r["kernel"].startswith("cpp_fused") and "softmax" not in r["kernel"] for r in recs)
    assert all(r["phase"] == "after" for r in recs)
    assert '"aoti_torch_cpu_addmm_out"' not in code  # non-matching launches get no code


# --------------------------------------------------------------------------- shapes, graphs
def test_dynamic_shapes_record_symints_and_values(tmp_path):
    def f(x):
        return torch.relu(x) * x.shape[0] + 1

    root = str(tmp_path)
    os.environ["AOTI_DEBUG_DIR"] = root
    torch._dynamo.reset()
    x = torch.randn(7, 3)
    with aoti_debug.enabled(level="save"), torch._inductor.config.patch(cpp_wrapper=True):
        fn = torch.compile(f, dynamic=True)
        fn(torch.randn(5, 3))
        out = fn(x)
    torch.testing.assert_close(out, f(x))
    run_dir = only_run(root)
    recs = records(run_dir)
    symints = [r for r in recs if r["kind"] == "symint"]
    assert symints and all(r["dtype"] == "int" and "file" not in r for r in symints)
    assert {r["value"] for r in symints} >= {5, 7}
    last = [r for r in recs if r["phase"] == "after" and r["kind"] == "tensor"][-1]
    assert last["shape"] == [7, 3]
    torch.testing.assert_close(load_record(run_dir, last), f(x))


def test_two_graphs_share_one_run(tmp_path):
    """Each graph is its own .so; counters and file names are still process-wide."""
    def f(x):
        y = torch.sin(x) + 1
        torch._dynamo.graph_break()
        return torch.cos(y) * 2

    root = str(tmp_path)
    compile_cpp(f, torch.randn(4, 4), root=root)
    recs = records(only_run(root))
    assert {r["graph"] for r in recs} == {"graph0", "graph1"}
    assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))
    assert sorted({r["launch"] for r in recs}) == [1, 2]
    assert len({r["file"] for r in recs if not r.get("shared")}) == len([r for r in recs if not r.get("shared")])
    with open(os.path.join(only_run(root), "run.json")) as f:
        assert set(json.load(f)["graphs"]) == {"graph0", "graph1"}


def test_subgraph_kernels_get_subgraph_labels(tmp_path):
    def f(x):
        return torch.cond(x.sum() > 0, lambda t: torch.sin(t) * 2, lambda t: torch.cos(t) - 1, (x,))

    x = torch.ones(4, 4)
    root = str(tmp_path)
    _fn, out, _code = compile_cpp(f, x, root=root)
    torch.testing.assert_close(out, torch.sin(x) * 2)
    run_dir = only_run(root)
    recs = records(run_dir)
    sub = [r for r in recs if r["graph"].startswith("graph0/")]
    assert sub, sorted({r["graph"] for r in recs})
    final = [r for r in sub if r["phase"] == "after"][-1]
    torch.testing.assert_close(load_record(run_dir, final), torch.sin(x) * 2)


def test_dtypes_stats_and_checksums_match_python(tmp_path):
    """Every dtype the runtime reads, with NaN/Inf: values, stats and checksums as Python's."""
    def f(x, i, b):
        h = x.to(torch.float16) * 2
        bf = (x * 3).to(torch.bfloat16)
        d = x.to(torch.float64) / 3
        return h + 1, bf - 1, d * d, i * 3 + 1, (i % 3).to(torch.int8), ~b, (x > 0).to(torch.uint8), i.to(torch.int32)

    x = torch.tensor([[1.5, -2.0, float("nan"), float("inf")], [0.0, -0.0, 3.25, float("-inf")]])
    i = torch.arange(8, dtype=torch.int64).reshape(2, 4) - 3
    b = torch.tensor([[True, False, True, False], [False, False, True, True]])
    root = str(tmp_path)
    _fn, outs, _code = compile_cpp(f, x, i, b, root=root)
    run_dir = only_run(root)
    recs = [r for r in records(run_dir) if r["kind"] == "tensor" and not r.get("uninitialised")]
    dtypes = {r["dtype"] for r in recs}
    assert {"float16", "bfloat16", "float64", "int64", "int8", "bool", "uint8", "int32", "float32"} <= dtypes
    for r in recs:
        t = load_record(run_dir, r)
        stats, checksum = tensor_stats(t)
        assert checksum == r["checksum"], r
        expected = stats.to_dict()
        for k in ("min", "max", "absmax", "nan", "inf"):
            assert expected[k] == r["stats"][k], (r["dtype"], k)
        if expected["mean"] is None:
            assert r["stats"]["mean"] is None
        else:
            assert r["stats"]["mean"] == pytest.approx(expected["mean"], rel=1e-12)
    outputs = {r["dtype"]: load_record(run_dir, r) for r in recs if r["phase"] == "after"}
    torch.testing.assert_close(outputs["float16"], outs[0], equal_nan=True)
    torch.testing.assert_close(outputs["bfloat16"], outs[1], equal_nan=True)


def test_level_off_emits_nothing():
    def f(x):
        return torch.nn.functional.gelu(x @ x.T).sum(0)

    torch._dynamo.reset()
    with torch._inductor.config.patch(cpp_wrapper=True):
        _out, code = run_and_get_cpp_code(torch.compile(f), torch.randn(8, 8))
    assert "aoti_debug_rt" not in code and "AOTI_DEBUG" not in code


def test_cpp_integer_literals_are_scalars():
    """The C++ GPU wrapper passes a static numel as the C++ printer writes it ("2048L"): a
    scalar, as the Python wrapper records the same argument; sizes named by symbols stay symints."""
    import sympy

    from aoti_debug.codegen.inductor import _arg_kind

    assert [_arg_kind(t, sympy.Integer) for t in ("2048L", "2048", "-3LL", "7UL")] == ["scalar"] * 4
    assert _arg_kind("true", bool) == _arg_kind("1e-05", float) == "scalar"
    assert _arg_kind("ks0", sympy.Symbol) == _arg_kind("s0", sympy.Symbol) == "symint"
