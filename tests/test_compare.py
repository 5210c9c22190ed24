"""The comparison library on dumps of real compiled models, plus its parts in isolation.

``real_dumps`` compiles one small model and runs it into several dumps (equal runs, a
perturbed weight, a NaN in the input, another batch size, stats level, a narrower
kernel filter). It is built once per test session and shared with the CLI tests.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil

import pytest
import torch
from torch import nn

import aoti_debug
import aoti_debug.compare as C
from aoti_debug.compare.align import PairedLaunch, pair_records
from aoti_debug.compare.divergence import DivergenceFinder
from aoti_debug.compare.metrics import TensorComparator, compare_scalars, compare_stats, default_tolerance
from aoti_debug.compare.result import RecordComparison
from aoti_debug.format.reader import RunReader
from aoti_debug.format.schema import Record, Stats
from tests.conftest import only_run
from tests.test_reader import write_run


class Net(nn.Module):
    """addmm -> fused relu/LayerNorm (reads the LN weight) -> addmm -> fused softmax."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(8, 16)
        self.ln = nn.LayerNorm(16)
        self.l2 = nn.Linear(16, 4)
        with torch.no_grad():  # distinct values, so the weight can be found in a dump
            self.ln.weight.copy_(torch.rand(16) + 0.5)

    def forward(self, x):
        h = self.ln(torch.relu(self.l1(x))) * 2 + 1
        return self.l2(h).softmax(-1)


@dataclasses.dataclass
class RealDumps:
    root: str
    x: torch.Tensor
    ln_weight: torch.Tensor
    runs: dict[str, str]

    def __getattr__(self, name):
        try:
            return self.__dict__["runs"][name]
        except KeyError:
            raise AttributeError(name) from None


_BUILT: dict[str, RealDumps] = {}


def build_real_dumps(tmp_path_factory) -> RealDumps:
    """Run one compiled model into every dump the tests need (once per session)."""
    if "dumps" in _BUILT:
        return _BUILT["dumps"]
    root = str(tmp_path_factory.mktemp("real_dumps"))
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(4, 8)
    compiled = torch.compile(model)
    runs = {}

    def run(name, level="save", inputs=x, **kw):
        d = os.path.join(root, name)
        aoti_debug.enable(level=level, dump_dir=d, **kw)
        compiled(inputs)
        aoti_debug.flush()
        runs[name] = d

    try:
        with torch.no_grad():
            for level in ("save", "stats"):
                run(f"{level}_a", level)
                run(f"{level}_b", level)
                model.ln.weight[3] += 0.25
                run(f"{level}_p", level)
                model.ln.weight[3] -= 0.25
            xn = x.clone()
            xn[1, 2] = float("nan")
            run("save_nan", inputs=xn)
            run("save_filtered", kernels="cpp_fused_*")
            run("save_shape", inputs=torch.randn(6, 8))
    finally:
        aoti_debug.disable()
    _BUILT["dumps"] = RealDumps(root, x, model.ln.weight.detach().clone(), runs)
    return _BUILT["dumps"]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> RealDumps:
    return build_real_dumps(tmp_path_factory)


def first_reader_of(run: str, value: torch.Tensor) -> Record:
    """The earliest before-record in ``run`` whose tensor equals ``value``."""
    reader = RunReader(run)
    for r in reader.records():
        if r.phase == "before" and r.kind == "tensor" and r.shape == list(value.shape):
            if torch.equal(reader.load_tensor(r), value):
                return r
    raise AssertionError(f"no record of {run} holds the value")


def copy_run(src: str, dst) -> str:
    """A writable copy of the run under ``src``."""
    run = only_run(src)
    out = os.path.join(str(dst), os.path.basename(run))
    shutil.copytree(run, out)
    return out


# -- whole comparisons on real dumps -----------------------------------------------------------
def test_equal_runs_are_equal(dumps):
    result = C.diff(dumps.save_a, dumps.save_b)
    assert result and result.exit_code == 0
    assert result.first_divergence is None
    assert result.counts.get("fail", 0) == 0 and result.counts["pass"] >= 15
    assert str(result).startswith("EQUAL: ")
    assert "\n" not in str(result)


def test_equal_runs_compared_element_by_element(dumps):
    result = C.diff(dumps.save_a, dumps.save_b, use_checksums=False)
    assert result, result.failures()
    assert result.basis.get("values", 0) >= 15 and not result.basis.get("checksum")
    # (An in/out buffer's value before its launch is uninitialised memory: it may differ.)
    assert all(rc.metrics.bitwise for rc in result.records
               if rc.status == "pass" and not (rc.a.phase == "before" and rc.a.role == "inout"))


def test_perturbed_weight_names_the_kernel_that_first_reads_it(dumps):
    reader = first_reader_of(dumps.save_a, dumps.ln_weight)
    result = C.diff(dumps.save_a, dumps.save_p)
    assert not result and result.exit_code == 1
    fd = result.first_divergence
    assert (fd.launch, fd.kernel, fd.graph) == (reader.launch, reader.kernel, reader.graph)
    assert fd.kernel.startswith("cpp_fused_") and "layer_norm" in fd.kernel
    assert fd.kind == "input" and reader.arg in fd.inputs and fd.outputs
    # Everything before it matches; its rows are flagged and come first.
    assert all(rc.record.launch >= fd.launch for rc in result.records if rc.status == "fail")
    frame = result.to_frame()
    assert frame.iloc[0]["first"] and frame.iloc[0]["launch_a"] == fd.launch
    assert str(fd) in str(result)


def test_nan_in_the_input_is_found_where_it_enters(dumps):
    reader = first_reader_of(dumps.save_a, dumps.x)
    result = C.diff(dumps.save_nan, dumps.save_a)
    fd = result.first_divergence
    assert (fd.launch, fd.kernel) == (reader.launch, reader.kernel)
    assert fd.inputs == [reader.arg]
    nan_row = next(rc for rc in result.records if rc.first and rc.record.arg == reader.arg)
    assert (nan_row.metrics.nan_a, nan_row.metrics.nan_b) == (1, 0)
    assert nan_row.metrics.mismatched == 1


def test_stats_level_dumps_compare_stats_and_say_so(dumps):
    equal = C.diff(dumps.stats_a, dumps.stats_b)
    assert equal and equal.stats_only
    assert any("stats-level dump" in n for n in equal.notes)
    assert not equal.basis.get("values")
    diff = C.diff(dumps.stats_a, dumps.stats_p)
    expected = C.diff(dumps.save_a, dumps.save_p).first_divergence
    assert diff.exit_code == 1
    assert (diff.first_divergence.launch, diff.first_divergence.kernel) == (expected.launch, expected.kernel)
    assert any(rc.metrics.basis == "stats" and rc.note.startswith("stats differ") for rc in diff.failures())


def test_save_against_stats_dump_falls_back_to_stats(dumps):
    result = C.diff(dumps.save_a, dumps.stats_p)
    assert result.exit_code == 1
    assert result.basis.get("stats") and not result.basis.get("values")


def test_different_batch_size_is_a_shape_mismatch_per_record(dumps):
    result = C.diff(dumps.save_a, dumps.save_shape)
    assert result.exit_code == 2
    mism = [rc for rc in result.records if rc.status == "mismatch"]
    assert mism and all(rc.note.startswith("shape differs: ") for rc in mism)
    assert any("4x8 in A, 6x8 in B" in rc.note for rc in mism)


def test_different_kernel_sets_list_records_in_one_run_only(dumps):
    result = C.diff(dumps.save_a, dumps.save_filtered)
    assert result.exit_code == 2
    only = result.only_a
    assert only and {rc.record.kernel for rc in only} == {"extern_kernels.addmm"}
    assert not result.only_b and result.counts.get("fail", 0) == 0
    assert any("no counterpart in run B (kernels: extern_kernels.addmm)" in n for n in result.notes)
    swapped = C.diff(dumps.save_filtered, dumps.save_a)
    assert len(swapped.only_b) == len(only)


def test_kernel_pattern_narrows_the_comparison(dumps):
    result = C.diff(dumps.save_a, dumps.save_p, kernels="extern_*")
    assert {rc.record.kernel for rc in result.records} <= {"extern_kernels.addmm"}
    assert result.first_divergence.kernel == "extern_kernels.addmm"
    none = C.diff(dumps.save_a, dumps.save_p, kernels="!*layer_norm*,!extern_*,!*softmax*")
    assert none.total == 0 and none


def test_keep_passing_false_keeps_failures_only(dumps):
    result = C.diff(dumps.save_a, dumps.save_p, keep_passing=False)
    assert result.records and all(rc.status != "pass" for rc in result.records)
    assert result.counts["pass"] > 0
    json.dumps(result.to_dict(), allow_nan=False)


def test_keep_all_keeps_every_pair_apart_from_the_listed_ones(dumps):
    """What a plot draws: every pair, while ``records`` keeps to keep_passing and max_records."""
    listed = C.diff(dumps.save_a, dumps.save_p, keep_passing=False, max_records=2)
    result = C.diff(dumps.save_a, dumps.save_p, keep_passing=False, max_records=2, keep_all=True)
    assert [rc.to_row() for rc in result.records] == [rc.to_row() for rc in listed.records]
    assert result.dropped == listed.dropped > 0 and listed.compared is None
    assert len(result.compared) == result.total and result.every_pair() is result.compared
    assert {rc.status for rc in result.compared} >= {"pass", "fail"}
    assert set(map(id, result.records)) <= set(map(id, result.compared))  # the same objects, not copies


def test_corrupt_and_missing_tensor_files_are_per_record_errors(dumps, tmp_path):
    run = copy_run(dumps.save_p, tmp_path)
    result = C.diff(dumps.save_a, run, use_checksums=False)
    victims = [rc.b for rc in result.records if rc.status == "fail"][:2]
    open(os.path.join(run, victims[0].file), "wb").write(b"not a zip file")
    os.unlink(os.path.join(run, victims[1].file))
    result = C.diff(dumps.save_a, run, use_checksums=False)
    errors = {rc.b.seq: rc.note for rc in result.records if rc.status == "error"}
    assert result.exit_code == 2
    assert "is corrupt" in errors[victims[0].seq] and errors[victims[0].seq].startswith("run B: seq ")
    assert "is missing" in errors[victims[1].seq]


def test_load_dump_streams_records_and_tabulates(dumps):
    with C.load_dump(dumps.save_a) as d:
        frame = d.to_frame()
        assert len(frame) == sum(1 for _ in d.records())
        assert {"seq", "kernel", "stats.min", "checksum"} <= set(frame.columns)
        rec = next(r for r in d.records() if r.file)
        assert d.load_tensor(rec).shape == tuple(rec.shape)
        assert d.summary().records == len(frame)


def test_top_level_diff_and_show(dumps):
    """``aoti_debug.diff`` / ``aoti_debug.show`` are the library behind the CLI commands."""
    result = aoti_debug.diff(dumps.save_a, dumps.save_b)
    assert isinstance(result, C.DiffResult) and result
    shown = aoti_debug.show(dumps.save_a)
    assert isinstance(shown, C.ShowResult) and shown.runs
    assert not callable(aoti_debug.compare)  # one name, one thing: the package


def test_lazy_attribute_before_any_import():
    from tests.conftest import run_python

    out = run_python("import aoti_debug; print(aoti_debug.load_dump.__name__, aoti_debug.diff.__name__)")
    assert out.returncode == 0 and "load_dump diff" in out.stdout, out.stderr[-300:]


@pytest.mark.slow
def test_python_wrapper_and_aoti_dumps_of_one_model_align(dumps, tmp_path, monkeypatch):
    """torch.compile (Python wrapper) vs. AOTInductor of one model: same values."""
    torch.manual_seed(0)
    model = Net().eval()  # the same weights as the model behind save_a (same seed)
    assert torch.equal(model.ln.weight.detach(), dumps.ln_weight)
    ep = torch.export.export(model, (dumps.x,))
    out = str(tmp_path / "aoti")
    monkeypatch.setenv("AOTI_DEBUG_DIR", out)  # where the C++ runtime looks, at run time
    with aoti_debug.enabled(level="save", dump_dir=out):
        pkg = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "m.pt2"))
        runner = torch._inductor.aoti_load_package(pkg)
        with torch.no_grad():
            runner(dumps.x)
        aoti_debug.flush()
    manifests = [os.path.join(d, "manifest.jsonl") for d, _, files in os.walk(out) if "manifest.jsonl" in files]
    assert manifests and any(os.path.getsize(m) for m in manifests), "the C++/AOTInductor path wrote no records"
    result = C.diff(dumps.save_a, out)
    # AOTInductor may fold constants into extra kernel outputs (only in one run): allowed.
    assert result.counts.get("fail", 0) == 0 and result.first_divergence is None, result.failures()[:5]
    assert result.info_b.writer == "cpp" or any(rc.b.wrapper == "cpp" for rc in result.records if rc.b)
    aligned = sum(result.counts.get(s, 0) for s in ("pass", "uninitialised"))
    assert aligned >= 10


# -- the parts ---------------------------------------------------------------------------------
def _reference(a, b, atol, rtol):
    a64, b64 = a.double(), b.double()
    close = torch.isclose(a64, b64, rtol=rtol, atol=atol, equal_nan=True)
    fin = torch.isfinite(a64) & torch.isfinite(b64)
    d = (a64 - b64).abs()[fin]
    return int((~close).sum()), float(d.max()) if d.numel() else 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("chunk", [7, 64, 1 << 16])
def test_tensor_metrics_match_torch_isclose(dtype, chunk):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(1000, generator=g).to(dtype)
    b = (a.double() + torch.randn(1000, generator=g, dtype=torch.float64) * 1e-3 * (torch.rand(1000, generator=g) < 0.1)).to(dtype)
    a[5], b[5] = float("nan"), float("nan")       # matching NaN
    a[6], b[6] = float("nan"), 1.0                # NaN against a number
    a[7], b[7] = float("inf"), float("inf")       # matching Inf
    a[8], b[8] = float("-inf"), float("inf")      # opposite Inf
    b[900:] = a[900:]                             # an equal tail: bitwise-equal chunks
    atol, rtol = default_tolerance(str(dtype)[6:])
    m = TensorComparator(chunk).compare(a, b, atol, rtol)
    want_mismatch, want_max = _reference(a, b, atol, rtol)
    assert m.mismatched == want_mismatch and not m.passed
    assert m.max_abs == pytest.approx(want_max, rel=1e-6)
    assert (m.nan_a, m.nan_b, m.inf_a, m.inf_b) == (2, 1, 2, 2)
    assert m.bitwise is False and m.numel == 1000


def test_tensor_metrics_equal_zero_and_integer_tensors():
    tc = TensorComparator(16)
    z = torch.zeros(100)
    m = tc.compare(z, z.clone(), 1e-5, 1e-6)
    assert m.passed and m.bitwise and m.cosine == 1.0 and m.max_abs == 0
    x = torch.arange(100)
    y = x.clone()
    y[50] += 1
    m = tc.compare(x, y, 0.0, 0.0)
    assert (m.mismatched, m.max_abs, m.bitwise) == (1, 1.0, False)
    m = tc.compare(torch.tensor([True, False]), torch.tensor([True, True]), 0.0, 0.0)
    assert m.mismatched == 1
    c = torch.randn(10, dtype=torch.complex64)
    assert tc.compare(c, c.clone(), 1e-5, 1e-6).bitwise


def test_relative_error_and_cosine():
    a = torch.tensor([1.0, 2.0, 0.0, 4.0])
    b = torch.tensor([1.0, 1.0, 0.0, 4.0])
    m = TensorComparator().compare(a, b, 1e-5, 1.3e-6)
    assert m.max_abs == 1.0 and m.max_rel == 1.0 and m.mismatched == 1
    assert m.cosine == pytest.approx(float(torch.nn.functional.cosine_similarity(a, b, dim=0)), rel=1e-6)
    m = TensorComparator().compare(torch.tensor([1e-3, 1.0]), torch.tensor([0.0, 1.0]), 1e-5, 1e-6)  # relative to B
    assert math.isinf(m.max_rel)


def _rec(arg="buf0", phase="after", role="output", index=0, seq=1, launch=1, **kw) -> Record:
    kw.setdefault("stats", Stats(min=0.0, max=1.0, mean=0.5, std=0.1, absmax=1.0))
    return Record(seq=seq, launch=launch, graph="graph0", wrapper="python", kernel="k", op="k", kernel_call=0,
                  phase=phase, arg=arg, role=role, index=index, dtype="float32", shape=[4], numel=4, **kw)


def test_stats_and_scalar_comparisons():
    a = _rec(checksum="00000000000000aa")
    assert compare_stats(a, _rec(checksum="00000000000000aa"), 1e-5, 1e-6).bitwise
    b = _rec(checksum="00000000000000bb", stats=Stats(min=0.0, max=1.0, mean=0.6, std=0.1, absmax=1.0, nan=1))
    m = compare_stats(a, b, 1e-5, 1e-6)
    assert not m.passed and m.note == "stats differ: mean, nan count" and m.max_abs == pytest.approx(0.1)
    s = dict(kind="scalar", stats=None)
    assert compare_scalars(_rec(value=3, **s), _rec(value=3, **s), None, None).passed
    assert not compare_scalars(_rec(value=3, **s), _rec(value=4, **s), None, None).passed
    assert compare_scalars(_rec(value=0.1 + 0.2, **s), _rec(value=0.3, **s), None, None).passed


def test_alignment_by_position_then_by_name():
    # Python wrapper vs. AOTInductor: weights named differently, buffers numbered differently.
    a = [_rec("arg0_1", "before", "input", 0, 1), _rec("buf1", "before", "input", 1, 2),
         _rec("buf6", "after", "output", 2, 3), _rec("buf7", "after", "output", 3, 4)]
    b = [_rec("fc1_weight", "before", "input", 0, 1), _rec("buf1", "before", "input", 1, 2),
         _rec("buf7", "after", "output", 2, 3), _rec("buf8", "after", "output", 3, 4)]
    pairs = pair_records(a, b)
    assert [(p.a.arg, p.b.arg, p.how) for p in pairs] == [
        ("arg0_1", "fc1_weight", "position"), ("buf1", "buf1", "key"), ("buf6", "buf7", "position"),
        ("buf7", "buf8", "position")]
    # Unequal counts in a slot: names only, no guessing.
    pairs = pair_records(a, b[1:])
    assert [(p.a and p.a.arg, p.b and p.b.arg) for p in pairs] == [
        ("arg0_1", None), ("buf1", "buf1"), ("buf6", "buf7"), ("buf7", "buf8")]
    pairs = pair_records(a, [b[0], b[1], b[2]])
    assert [(p.a and p.a.arg, p.b and p.b.arg) for p in pairs] == [
        ("arg0_1", "fc1_weight"), ("buf1", "buf1"), ("buf6", None), ("buf7", "buf7")]


def _row(status, phase, arg, role, launch=1):
    r = _rec(arg, phase, role, launch=launch)
    return RecordComparison(status, r, r)


def _launch(n):
    return PairedLaunch("graph0", f"k{n}", f"k{n}", 0, n, n, [])


def test_first_divergence_is_where_outputs_fail_while_inputs_match():
    f = DivergenceFinder()
    assert not f.observe(_launch(1), [_row("pass", "before", "x", "input"), _row("pass", "after", "b0", "output")])
    # An input that differs while the output matches: remembered only as a fallback.
    assert not f.observe(_launch(2), [_row("fail", "before", "w", "input"), _row("pass", "after", "b1", "output")])
    assert f.first.launch == 2 and f.first.kind == "input"
    rows = [_row("pass", "before", "b1", "inout"), _row("fail", "after", "b1", "inout")]
    assert f.observe(_launch(3), rows)
    assert (f.first.launch, f.first.kind, f.first.outputs, f.first.inputs) == (3, "born", ["b1"], [])
    assert all(r.first for r in rows[1:]) and not rows[0].first
    assert not f.observe(_launch(4), [_row("fail", "after", "b2", "output")])
    assert f.first.launch == 3 and "while every input matches" in str(f.first)


def test_born_divergence_on_writer_made_dumps(tmp_path):
    base = {"x": torch.ones(4), "y": torch.arange(4.0)}
    a = write_run(tmp_path / "a", base)
    b = write_run(tmp_path / "b", {"x": torch.ones(4), "y": torch.arange(4.0) + 1})

    def as_launch(run, phase_of):
        path = os.path.join(run, "manifest.jsonl")
        recs = [json.loads(line) for line in open(path)]
        for r in recs:
            r["phase"], r["role"] = phase_of[r["arg"]]
        open(path, "w").writelines(json.dumps(r) + "\n" for r in recs)

    for run in (a, b):
        as_launch(run, {"x": ("before", "input"), "y": ("after", "output")})
    result = C.diff(a, b)
    assert result.first_divergence.kind == "born" and result.first_divergence.outputs == ["y"]
    assert result.exit_code == 1
