"""AOTInductor packages against eager and float64: ``aoti_debug.record_reference``.

GPT-2 and Llama from ``transformers`` (random init) are exported, compiled into an
AOTInductor package at level ``save`` and run; the ``ExportedProgram`` they were
compiled from is recorded eagerly and in float64 beside (``aoti_debug.eager.exported``).
What must hold:

- the reference returns what eager PyTorch returns, and records each value under the
  name of the export graph's node it belongs to, as the package's provenance names it;
- a clean package against the references exits 0, many values compared, each module
  that materialised a value compared somewhere in it, every float verdict ``rounding``;
- a compiler bug injected into Inductor's lowering of ``aten.rsqrt`` (1% too large: the
  RMSNorm of Llama) is named ``suspect`` at the first RMSNorm, exit 1, through the
  library and the CLI.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import Counter, defaultdict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from click.testing import CliRunner  # noqa: E402

import aoti_debug  # noqa: E402
from aoti_debug.cli import main as cli_main  # noqa: E402
from aoti_debug.compare.verdict import ROUNDING, SUSPECT  # noqa: E402
from aoti_debug.errors import ConfigError  # noqa: E402
from aoti_debug.format.reader import RunReader  # noqa: E402
from tests.conftest import dump_dir_restored, only_run  # noqa: E402
from tests.real_models import gpt2, llama  # noqa: E402

BUILDERS = {"gpt2": gpt2, "llama": llama}
FIRST_NORM = {"llama": "model.model.layers.0.input_layernorm"}


@contextlib.contextmanager
def wrong_rsqrt(scale: float = 1.01):
    """A compiler bug: Inductor's lowering of ``aten.rsqrt`` made ``scale`` times too large.

    Every cache is off meanwhile: their keys do not know the lowering, and a clean
    compile must neither read nor leave a wrong artifact."""
    from torch._inductor import lowering as L

    op = torch.ops.aten.rsqrt.default
    original = L.lowerings[op]
    L.lowerings[op] = lambda *a, **k: L.lowerings[torch.ops.aten.mul.Tensor](original(*a, **k), scale)
    try:
        with torch._inductor.config.patch(force_disable_caches=True):
            yield
    finally:
        L.lowerings[op] = original


class Models:
    """Per model: its export, references and packages' dumps, each made on first use."""

    def __init__(self, root):
        self.root = root
        self.models: dict = {}
        self.programs: dict = {}
        self.refs: dict = {}
        self.dumps: dict = {}

    def model(self, name: str):
        if name not in self.models:
            self.models[name] = BUILDERS[name]()
        return self.models[name]

    def program(self, name: str):
        if name not in self.programs:
            m = self.model(name)
            with torch.no_grad():
                self.programs[name] = torch.export.export(m.module, m.inputs)
        return self.programs[name]

    def reference(self, name: str, mode: str) -> str:
        key = (name, mode)
        if key not in self.refs:
            d = str(self.root / f"{name}-ref-{mode}")
            m = self.model(name)
            with dump_dir_restored():
                out = aoti_debug.record_reference(self.program(name), m.inputs, dump_dir=d,
                                                  dtype=torch.float64 if mode == "fp64" else None)
            torch.testing.assert_close(out, m.eager(), rtol=0, atol=0)  # it is eager
            self.refs[key] = only_run(d)
        return self.refs[key]

    def package(self, name: str, bug: bool = False) -> str:
        """The dump of the AOTInductor package (level save) run on the model's inputs."""
        key = (name, bug)
        if key not in self.dumps:
            tag = f"{name}{'-bug' if bug else ''}"
            m = self.model(name)
            with (wrong_rsqrt() if bug else contextlib.nullcontext()), aoti_debug.enabled(level="save"):
                pkg = torch._inductor.aoti_compile_and_package(self.program(name),
                                                               package_path=str(self.root / f"{tag}.pt2"))
            runner = torch._inductor.aoti_load_package(pkg)
            d = str(self.root / f"{tag}-aoti")
            with dump_dir_restored():
                os.environ["AOTI_DEBUG_DIR"] = d  # read by the .so when a run starts
                out = runner(*m.inputs)
            if not bug:
                torch.testing.assert_close(out, m.eager(), rtol=1e-4, atol=1e-4)
            self.dumps[key] = only_run(d)
        return self.dumps[key]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return Models(tmp_path_factory.mktemp("aoti_reference"))


@pytest.fixture(autouse=True)
def _dump_dir_restored():
    with dump_dir_restored():
        yield


def _outputs(result):
    return [rc for rc in result.records if rc.a is not None and rc.a.phase == "after" and rc.a.kind == "tensor"]


def _explain(result) -> str:
    bad = [str(rc) + f" [{rc.note}]" for rc in result.records if rc.status not in ("pass", "unpaired")]
    return f"{result}\n" + "\n".join(bad[:20])


# ---------------------------------------------------------------------------- the recording
def test_reference_records_each_export_node_in_float64(models):
    run = models.reference("gpt2", "fp64")
    reader = RunReader(run)
    assert {g["reference"] for g in reader.info.graphs.values()} == {"fp64"}
    outs = [r for r in reader.records() if r.phase == "after"]
    nodes = {n.name for n in models.program("gpt2").graph_module.graph.nodes}
    assert len(outs) > 40
    for r in outs:
        origin = reader.provenance(r).output(r.arg)
        assert origin.instance == r.kernel and r.kernel in nodes  # keyed by the export graph's node
    floats = [r for r in outs if r.model_dtype == "float32"]
    assert floats and all(r.dtype == "float64" for r in floats)
    modules = {reader.provenance(r).output(r.arg).module for r in outs}
    assert "model.transformer.h.0.ln_1" in modules and "model.lm_head" in modules
    # The weights are inputs of the nodes that read them, as the package keys them.
    weights = [r for r in reader.records() if r.phase == "before" and r.arg.startswith("p_")]
    assert any(r.arg == "p_model_transformer_h_0_ln_1_weight" for r in weights), sorted({r.arg for r in weights})


def test_a_saved_program_is_a_reference_too(models, tmp_path):
    path = str(tmp_path / "gpt2-ep.pt2")
    torch.export.save(models.program("gpt2"), path)
    m = models.model("gpt2")
    out = aoti_debug.record_reference(path, m.inputs, level="stats", dump_dir=str(tmp_path / "ref"))
    torch.testing.assert_close(out, m.eager(), rtol=0, atol=0)
    assert RunReader(only_run(str(tmp_path / "ref"))).info.graphs


def test_bad_reference_inputs_are_named(models, tmp_path):
    with pytest.raises(ConfigError, match="ExportedProgram"):
        aoti_debug.record_reference(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    with pytest.raises(ConfigError, match="torch.export.save"):
        aoti_debug.record_reference(str(tmp_path / "missing.pt2"), ())
    with pytest.raises(ConfigError, match="structure"):
        aoti_debug.record_reference(models.program("gpt2"), (torch.zeros(2, 3, dtype=torch.long),) * 2)
    with pytest.raises(ConfigError, match="float64"):
        aoti_debug.record_reference(models.program("gpt2"), models.model("gpt2").inputs, dtype=torch.float16)


# ---------------------------------------------------------------------------- the verdicts
@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_package_matches_eager_and_is_rounding_against_fp64(models, name):
    package = models.package(name)
    vs_eager = aoti_debug.diff(package, models.reference(name, "eager"), keep_all=True)
    assert vs_eager.exit_code == 0, _explain(vs_eager)
    vs_fp64 = aoti_debug.diff(package, models.reference(name, "fp64"), keep_all=True)
    assert vs_fp64.exit_code == 0, _explain(vs_fp64)
    outs = _outputs(vs_fp64)
    compared = [rc for rc in outs if rc.status == "pass"]
    assert len(compared) >= 18, Counter(rc.status for rc in outs)
    assert not any(rc.status in ("mismatch", "only_a", "only_b", "fail") for rc in vs_fp64.records)
    floats = [rc for rc in compared if rc.a.dtype == "float32"]
    assert floats and all(rc.verdict == ROUNDING for rc in floats)
    # Every module that materialised a value had one compared, in it or in a submodule.
    per_module: dict[str, int] = defaultdict(int)
    for rc in outs:
        per_module[rc.module or ""] += rc.status == "pass"
    blind = [m for m in per_module
             if not any(n == m or n.startswith(m + ".") and count for n, count in per_module.items() if count)]
    assert not blind, (blind, dict(per_module))
    assert sum(1 for m, count in per_module.items() if count) >= 10, dict(per_module)


@pytest.mark.slow
def test_rsqrt_bug_in_the_package_is_suspect_at_the_first_rmsnorm(models):
    buggy = models.package("llama", bug=True)
    vs_fp64 = aoti_debug.diff(buggy, models.reference("llama", "fp64"), keep_all=True)
    assert vs_fp64.exit_code == 1, _explain(vs_fp64)
    fd = vs_fp64.first_divergence
    assert fd is not None and fd.verdict == SUSPECT, str(fd)
    assert fd.module == FIRST_NORM["llama"], str(fd)
    assert "rsqrt" in fd.kernel and "modeling_llama.py" in fd.source, str(fd)
    before = [rc for rc in _outputs(vs_fp64) if rc.verdict and rc.a.launch < fd.launch]
    assert all(rc.verdict == ROUNDING for rc in before)
    # The CLI says the same, and exits 1.
    result = CliRunner().invoke(cli_main, ["diff", "--no-progress", buggy, models.reference("llama", "fp64"),
                                           "--format", "json"])
    assert result.exit_code == 1, result.output
    first = json.loads(result.output)["first_divergence"]
    assert first["verdict"] == "suspect" and first["module"] == FIRST_NORM["llama"], first
    clean = CliRunner().invoke(cli_main, ["diff", "--no-progress", models.package("llama"),
                                          models.reference("llama", "fp64")])
    assert clean.exit_code == 0, clean.output


@pytest.mark.slow
def test_replay_and_repro_of_the_package_name_the_rsqrt_kernel(models, tmp_path):
    """The package's own C++ kernel, replayed on the fp64 reference's inputs, is the
    culprit; its repro reproduces the mismatch without aoti_debug."""
    from aoti_debug.replay import replay
    from aoti_debug.replay.repro import write_repro
    from tests.test_replay import _run_repro

    buggy = models.package("llama", bug=True)
    ref = models.reference("llama", "fp64")
    result = replay(buggy, ref, first=1)
    assert result.exit_code == 1 and result.culprits, str(result)
    culprit = result.culprits[0]
    assert "rsqrt" in culprit.kernel and culprit.module == FIRST_NORM["llama"], str(result)
    out = write_repro(buggy, culprit.launch, str(tmp_path / "repro"), reference=ref)
    proc = _run_repro(out, str(tmp_path))
    assert proc.returncode == 1 and "MISMATCH" in proc.stdout, proc.stdout + proc.stderr
    clean = replay(models.package("llama"), ref, launches=[culprit.launch])
    assert clean.exit_code == 0 and not clean.culprits, str(clean)
