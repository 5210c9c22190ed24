"""Compiled against eager and against float64: the eager reference (``aoti_debug.eager``).

GPT-2 from ``transformers`` (random init) is compiled once per wrapper and run at
``save``; the same compiled function is run under ``aoti_debug.reference()`` (eager) and
``aoti_debug.reference(dtype=torch.float64)``. What must hold:

- the reference run returns exactly what eager PyTorch returns, and records every value
  keyed by the Dynamo node it belongs to;
- compiled vs eager exits 0 at default tolerances, and vs fp64 every compared value's
  verdict is ``rounding``, in the Python and the C++ wrapper, with most of the compiled
  run's outputs paired (values fused away in one run are not compared, never
  mispaired: no shape or dtype mismatch);
- a compiler bug injected into one lowering (``aten.tanh`` made 1e-4 too large: the
  GELU of GPT-2's MLP) is named as the first divergent kernel, at its module path and
  source line, ``suspect`` against fp64, against eager a difference;
- the CLI: ``aoti-debug run --reference fp64 -- python script.py`` records, and
  ``aoti-debug diff`` gives the verdicts; bad values are one-line errors.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from click.testing import CliRunner  # noqa: E402

import aoti_debug  # noqa: E402
from aoti_debug.cli import main as cli_main  # noqa: E402
from aoti_debug.compare.verdict import ROUNDING, SUSPECT  # noqa: E402
from aoti_debug.eager.recorder import Recorder  # noqa: E402
from aoti_debug.format.reader import RunReader  # noqa: E402
from tests.conftest import dump_dir_restored, only_run, records, run_python  # noqa: E402
from tests.real_models import gpt2  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def wrong_lowering(op, scale: float):
    """A compiler bug: Inductor's lowering of ``op`` made ``scale`` times too large.

    The caches are off meanwhile: their keys do not know the lowering, and a clean
    compile must neither read nor leave a wrong artifact."""
    from torch._inductor import lowering as L

    original = L.lowerings[op]
    L.lowerings[op] = lambda *a, **k: L.lowerings[torch.ops.aten.mul.Tensor](original(*a, **k), scale)
    try:
        with torch._inductor.config.patch(fx_graph_cache=False, fx_graph_remote_cache=False,
                                          autotune_local_cache=False), \
                torch._functorch.config.patch(enable_autograd_cache=False):
            yield
    finally:
        L.lowerings[op] = original


def wrong_tanh(scale: float = 1.0001):
    """``aten.tanh`` made ``scale`` times too large (:func:`wrong_lowering`): the GELU of GPT-2's MLP."""
    return wrong_lowering(torch.ops.aten.tanh.default, scale)


class Dumps:
    def __init__(self, root):
        self.root = root
        self.model = gpt2()
        self.eager = self.model.eager()
        self.refs: dict[str, str] = {}
        self.compiled: dict[tuple[str, bool], str] = {}

    def reference(self, mode: str) -> str:
        if mode not in self.refs:
            d = str(self.root / f"ref-{mode}")
            torch._dynamo.reset()
            fn = torch.compile(self.model.module)
            with dump_dir_restored(), torch.no_grad(), \
                    aoti_debug.reference(dtype=torch.float64 if mode == "fp64" else None, dump_dir=d):
                out = fn(*self.model.inputs)
            torch.testing.assert_close(out, self.eager, rtol=0, atol=0)  # it is eager
            self.refs[mode] = only_run(d)
        return self.refs[mode]

    def compile(self, wrapper: str, bug: bool = False) -> str:
        key = (wrapper, bug)
        if key not in self.compiled:
            d = str(self.root / f"{wrapper}{'-bug' if bug else ''}")
            torch._dynamo.reset()
            with dump_dir_restored(), torch.no_grad(), (wrong_tanh() if bug else contextlib.nullcontext()), \
                    aoti_debug.enabled(level="save", dump_dir=d):
                out = torch.compile(self.model.module, options={"cpp_wrapper": wrapper == "cpp"})(*self.model.inputs)
            if not bug:
                torch.testing.assert_close(out, self.eager, rtol=1e-4, atol=1e-4)
            self.compiled[key] = only_run(d)
        return self.compiled[key]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    return Dumps(tmp_path_factory.mktemp("reference"))


def _outputs(result):
    return [rc for rc in result.compared if rc.a is not None and rc.a.phase == "after"]


def _explain(result) -> str:
    bad = [str(rc) + f" [{rc.note}]" for rc in result.records if rc.status not in ("pass", "unpaired")]
    return f"{result}\n" + "\n".join(bad[:20])


# ---------------------------------------------------------------------------- the recording
def test_reference_records_each_node_keyed_by_provenance(dumps):
    run = dumps.reference("eager")
    recs = records(run)
    assert recs and all(r["wrapper"] == "eager" for r in recs)
    info = RunReader(run).info
    assert {g["reference"] for g in info.graphs.values()} == {"eager"}
    reader = RunReader(run)
    outs = [r for r in reader.records() if r.phase == "after"]
    assert len(outs) > 40
    for r in outs:
        origin = reader.provenance(r).output(r.arg)
        assert origin.instance == r.kernel  # keyed by the Dynamo node itself
    modules = {reader.provenance(r).output(r.arg).module for r in outs}
    assert "model.transformer.h.1.mlp.act" in modules and "model.transformer.h.0.ln_1" in modules


def test_fp64_reference_records_float64_and_eager_error(dumps):
    recs = [r for r in records(dumps.reference("fp64")) if r["phase"] == "after"]
    floats = [r for r in recs if r.get("model_dtype") == "float32"]
    assert floats and all(r["dtype"] == "float64" for r in floats)
    errors = [r["eager_error"] for r in floats]
    assert all(isinstance(e, float) and e >= 0 for e in errors)
    assert max(errors) > 0  # eager float32 does round somewhere
    ints = [r for r in recs if r.get("model_dtype") == "int64"]
    assert ints and all(r["dtype"] == "int64" and "eager_error" not in r for r in ints)


def _fp64_recorder(graph: torch.fx.Graph) -> tuple[Recorder, list]:
    """An fp64 Recorder of ``graph`` whose records land in the list, as
    ``(node, dtype recorded, extra fields)``."""
    done: list = []

    class Handle:
        def launch(self, site, values):
            pass

        def done(self, site, values, extra=None):
            done.append((site.kernel, values[0].dtype, extra))

    rec = Recorder(torch.fx.GraphModule(torch.nn.Module(), graph), "fp64", "save", aoti_debug.config.KernelFilter())
    rec.handle = Handle()
    return rec, done


def test_recorder_skips_views_and_runs_float64_beside():
    """A view is not recorded (no kernel makes one), ``.float()`` becomes ``.double()``
    in the float64 run, and the model gets its own dtype's values."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    t = graph.call_method("t", (x,))
    f = graph.call_method("float", (t,))
    y = graph.call_function(torch.mul, (f, 3.0))
    graph.output((y,))
    rec, done = _fp64_recorder(graph)
    inp = torch.randn(3, 2, dtype=torch.float16)
    (out,) = rec(inp)
    assert out.dtype == torch.float32 and torch.equal(out, inp.t().float() * 3.0)
    assert [s[0] for s in done] == [f.name, y.name]  # t is a view of x: not recorded
    assert all(s[1] == torch.float64 for s in done)
    assert done[-1][2][0]["model_dtype"] == "float32" and done[-1][2][0]["eager_error"] >= 0


# ---------------------------------------------------------------------------- the verdicts
@pytest.mark.parametrize("wrapper", ["python", pytest.param("cpp", marks=pytest.mark.slow)])
def test_compiled_matches_eager_and_is_rounding_against_fp64(dumps, wrapper):
    compiled = dumps.compile(wrapper)
    vs_eager = aoti_debug.diff(compiled, dumps.reference("eager"), keep_all=True)
    assert vs_eager.exit_code == 0, _explain(vs_eager)
    assert any("eager reference" in n for n in vs_eager.notes)
    vs_fp64 = aoti_debug.diff(compiled, dumps.reference("fp64"), keep_all=True)
    assert vs_fp64.exit_code == 0, _explain(vs_fp64)
    outs = _outputs(vs_fp64)
    compared = [rc for rc in outs if rc.status == "pass"]
    # Most outputs meet their node's value; the rest are steps inside a node (a
    # LayerNorm's mean) that the reference has no value for, never a wrong pair.
    assert len(compared) >= 0.5 * len(outs) and len(compared) >= 18, (len(compared), len(outs))
    assert not any(rc.status in ("mismatch", "only_a", "only_b") for rc in vs_fp64.compared)
    floats = [rc for rc in compared if rc.a.dtype == "float32"]
    assert floats and all(rc.verdict == ROUNDING for rc in floats)
    assert max(rc.ratio for rc in floats) < 4, max(rc.ratio for rc in floats)
    modules = {rc.module for rc in compared}
    assert "model.transformer.h.1.mlp.act" in modules and "model.lm_head" in modules


def test_injected_bug_is_named_suspect_at_its_module(dumps):
    buggy = dumps.compile("python", bug=True)
    vs_fp64 = aoti_debug.diff(buggy, dumps.reference("fp64"), keep_all=True)
    assert vs_fp64.exit_code == 1
    fd = vs_fp64.first_divergence
    assert fd is not None and fd.kind == "born" and fd.verdict == SUSPECT, str(fd)
    assert "tanh" in fd.kernel and fd.module == "model.transformer.h.0.mlp.act", str(fd)
    assert fd.ratio > 20 and "activations.py" in fd.source, str(fd)
    assert "suspect" in str(fd) and "eager's own" in str(fd)
    # Every value before it is rounding; it is where the ratio jumps.
    before = [rc for rc in _outputs(vs_fp64) if rc.verdict and rc.a.launch < fd.launch]
    assert before and all(rc.verdict == ROUNDING for rc in before)
    vs_eager = aoti_debug.diff(buggy, dumps.reference("eager"))
    assert vs_eager.exit_code == 1
    assert vs_eager.first_divergence.launch == fd.launch and vs_eager.first_divergence.module == fd.module


def test_reference_goes_second(dumps):
    result = CliRunner().invoke(cli_main, ["diff", dumps.reference("eager"), dumps.compile("python")])
    assert result.exit_code == 2
    assert "is an eager reference: give it second" in result.output and "Traceback" not in result.output


def test_diff_cli_prints_verdicts_and_plots_them(dumps, tmp_path):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "error.svg"
    result = CliRunner().invoke(cli_main, ["diff", dumps.compile("python", bug=True), dumps.reference("fp64"),
                                           "--plot", str(plot), "--format", "json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.output.split("plot written", 1)[0])
    first = data["first_divergence"]
    assert first["verdict"] == "suspect" and first["module"] == "model.transformer.h.0.mlp.act"
    verdicts = {r["verdict"] for r in data["records"] if r["verdict"]}
    assert verdicts == {"rounding", "suspect"} or verdicts == {"suspect"}
    text = plot.read_text()
    assert "eager" in text and "suspect" in text


# ---------------------------------------------------------------------------- the CLI run
SCRIPT = """
import sys, torch
sys.path.insert(0, {root!r})
from tests.real_models import gpt2
m = gpt2()
fn = torch.compile(m.module)
with torch.no_grad():
    out = fn(*m.inputs)
torch.testing.assert_close(out, m.eager(), rtol={rtol}, atol={rtol})
print("ran")
"""


def test_cli_run_reference_then_diff(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.format(root=ROOT, rtol=0))
    runner = CliRunner()
    ref = tmp_path / "ref"
    proc = run_python(f"import sys; from aoti_debug.cli import main; sys.argv=['aoti-debug', 'run', '--reference', "
                      f"'fp64', '--dir', {str(ref)!r}, '--', {sys.executable!r}, {str(script)!r}]; main()")
    assert proc.returncode == 0, proc.stderr
    assert "ran" in proc.stdout
    run = only_run(str(ref))
    assert RunReader(run).info.graphs and all(g.get("reference") == "fp64" for g in RunReader(run).info.graphs.values())
    script.write_text(SCRIPT.format(root=ROOT, rtol=1e-4))
    compiled = tmp_path / "compiled"
    proc = run_python(f"import sys; from aoti_debug.cli import main; sys.argv=['aoti-debug', 'run', '--level', "
                      f"'save', '--dir', {str(compiled)!r}, '--', {sys.executable!r}, {str(script)!r}]; main()")
    assert proc.returncode == 0, proc.stderr
    result = runner.invoke(cli_main, ["diff", only_run(str(compiled)), run])
    assert result.exit_code == 0, result.output
    assert "eager reference (fp64)" in result.output and "rounding" in result.output


def test_bad_reference_values_are_one_line(tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli_main, ["run", "--reference", "fp16", "--", "true"])
    assert result.exit_code == 2 and "fp16" in result.output and "Traceback" not in result.output
    with pytest.raises(aoti_debug.errors.ConfigError):
        with aoti_debug.reference(dtype=torch.float16):
            pass
    proc = run_python("import torch\nf = torch.compile(lambda x: x + 1)\nprint(f(torch.ones(2)).tolist())",
                      env={"AOTI_DEBUG_REFERENCE": "bogus", "AOTI_DEBUG_LEVEL": "save",
                           "AOTI_DEBUG_DIR": str(tmp_path / "d")})
    assert proc.returncode == 0 and "[2.0, 2.0]" in proc.stdout, proc.stderr
    assert proc.stderr.count("AOTI_DEBUG_REFERENCE") == 1 and "Traceback" not in proc.stderr


def test_reference_is_switched_off_on_exit(dumps):
    dumps.reference("eager")
    from aoti_debug.codegen import reference_hook

    assert not reference_hook.installed() and aoti_debug.eager.active() is None
    torch._dynamo.reset()
    calls = []
    fn = torch.compile(lambda x: torch.sin(x) + 1)
    with aoti_debug.reference():
        fn(torch.ones(3))
        calls.append(reference_hook.installed())
    assert calls == [True] and not reference_hook.installed()
    assert math.isclose(float(fn(torch.zeros(1))[0]), 1.0)


# ---------------------------------------------------------------------------- other settings
SETTINGS = {
    "freezing": dict(options={"freezing": True}),
    "realize_opcount_threshold=1": dict(options={"realize_opcount_threshold": 1}),
    "max-autotune-no-cudagraphs": dict(mode="max-autotune-no-cudagraphs"),
}


@pytest.mark.parametrize("setting", [
    "freezing",
    pytest.param("realize_opcount_threshold=1", marks=pytest.mark.slow),
    pytest.param("max-autotune-no-cudagraphs", marks=pytest.mark.slow),
])
def test_other_settings_align_with_default_and_reference(dumps, setting, tmp_path):
    """Settings that change the kernels (freezing folds the weights into constants, a
    fusion threshold realises more buffers): the dump pairs with the default compile's
    without an "only in" record or a mismatch, and with the fp64 reference as rounding."""
    d = str(tmp_path / "d")
    torch._dynamo.reset()
    with dump_dir_restored(), torch.no_grad(), aoti_debug.enabled(level="save", dump_dir=d):
        out = torch.compile(dumps.model.module, **SETTINGS[setting])(*dumps.model.inputs)
    torch.testing.assert_close(out, dumps.eager, rtol=1e-4, atol=1e-4)
    run = only_run(d)
    vs_default = aoti_debug.diff(dumps.compile("python"), run)
    assert vs_default.exit_code == 0, _explain(vs_default)
    assert not any(rc.status in ("only_a", "only_b", "mismatch") for rc in vs_default.records)
    assert vs_default.counts.get("pass", 0) >= 39, vs_default.counts
    vs_fp64 = aoti_debug.diff(run, dumps.reference("fp64"))
    assert vs_fp64.exit_code == 0, _explain(vs_fp64)
    assert vs_fp64.counts.get("pass", 0) >= 30, vs_fp64.counts


def test_value_pairing_that_pairs_nothing_is_incomplete(tmp_path):
    """Two dumps of different functions by value: nothing pairs, and that is exit 2, not
    an empty "EQUAL"."""
    runs = []
    for name, fn in (("sin", lambda x: torch.sin(x) * 2), ("cos", lambda x: torch.cos(x) + 1)):
        torch._dynamo.reset()
        d = str(tmp_path / name)
        with dump_dir_restored(), aoti_debug.enabled(level="stats", dump_dir=d):
            torch.compile(fn)(torch.ones(8))
        runs.append(only_run(d))
    result = aoti_debug.diff(*runs, align="value")
    assert result.exit_code == 2 and any("nothing was compared" in p for p in result.problems), result


def _float32_only(x):
    if x.dtype == torch.float64:
        raise RuntimeError("no float64 kernel")
    return x + 1


def test_an_op_without_float64_is_recorded_in_its_dtype_and_the_model_runs():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    y = graph.call_function(_float32_only, (x,))
    z = graph.call_function(torch.mul, (y, 2.0))
    graph.output((z,))
    rec, seen = _fp64_recorder(graph)
    (out,) = rec(torch.ones(3))
    assert torch.equal(out, torch.full((3,), 4.0))
    assert seen[0] == (y.name, torch.float32, None)  # recorded as eager, no verdict
    assert seen[1][0] == z.name and seen[1][1] == torch.float64 and seen[1][2][0]["eager_error"] == 0.0
    assert any("cannot run in float64" in m for _k, m in aoti_debug.runtime.session.FAILURES)
