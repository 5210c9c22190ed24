"""Replay and repro (``aoti_debug.replay``) on transformers' GPT-2 (random init, CPU).

What must hold:

- with a compiler bug injected into one lowering (``aten.tanh`` 1e-4 too large, the GELU
  of both MLP blocks), replaying every launch on the fp64 reference's inputs names
  exactly the two GELU kernels ``culprit`` and every divergent launch after them
  ``propagator``: each is right on the reference's inputs (own error rounding) while
  its recorded output inherited the error;
- a clean compile replays with no culprit and no propagator;
- against another compile (the clean one, launch by launch) the same GELU kernel is
  the culprit; the C++ wrapper's generated C++ kernels replay too, its shim calls say
  why they cannot; so does an AOTInductor package's (its kernels sit in a file beside
  the wrapper);
- ``aoti-debug repro`` writes a directory whose ``run.py`` runs in a fresh interpreter
  where ``aoti_debug`` cannot be imported and shows the mismatch (exit 1), and agrees
  (exit 0) for a clean launch;
- bad input is one line and exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

import aoti_debug
from aoti_debug.cli import main as cli_main
from aoti_debug.replay import AGREES, CULPRIT, PROPAGATOR, UNJUDGED, replay
from tests.conftest import dump_dir_restored, only_run
from tests.test_reference import Dumps, wrong_tanh

GELU = "cpp_fused_add_mul_pow_tanh_view"


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    return Dumps(tmp_path_factory.mktemp("replay"))


def _launches(run: str) -> list[int]:
    with open(os.path.join(run, "manifest.jsonl")) as f:
        return sorted({json.loads(line)["launch"] for line in f})


def _by_verdict(result) -> dict[str, list]:
    found: dict[str, list] = {}
    for r in result.launches:
        found.setdefault(r.verdict, []).append(r)
    return found


def test_injected_bug_is_the_culprit_and_the_rest_propagate(dumps):
    buggy = dumps.compile("python", bug=True)
    result = replay(buggy, dumps.reference("fp64"), launches=_launches(buggy))
    verdicts = _by_verdict(result)
    culprits = verdicts.get(CULPRIT, [])
    assert [r.kernel.rsplit("_", 1)[0] for r in culprits] == [GELU, GELU], str(result)
    assert [r.module for r in culprits] == ["model.transformer.h.0.mlp.act", "model.transformer.h.1.mlp.act"]
    for r in culprits:  # error born there: as large on the reference's own inputs
        (out,) = r.outputs
        assert out.own_ratio > 20 and out.own_ratio == pytest.approx(out.total_ratio, rel=0.2), str(result)
    first = culprits[0].launch
    assert all(r.launch < first for r in verdicts.get(AGREES, [])), str(result)  # before it, all agree
    after = [r for r in result.launches if r.launch > first and r.verdict != UNJUDGED]
    assert after and {r.verdict for r in after} <= {CULPRIT, PROPAGATOR}, str(result)
    for r in verdicts[PROPAGATOR]:  # right on the reference's inputs, wrong in the run
        assert all(o.own_ratio <= 8 for o in r.outputs) and any(o.total_ratio > 8 for o in r.outputs), str(result)
    assert result.exit_code == 1
    assert "culprit: launch" in str(result) and "model.transformer.h.0.mlp.act" in str(result)


def test_clean_compile_has_no_culprit(dumps):
    clean = dumps.compile("python")
    result = replay(clean, dumps.reference("fp64"), launches=_launches(clean))
    verdicts = _by_verdict(result)
    assert set(verdicts) <= {AGREES, UNJUDGED}, str(result)
    assert len(verdicts[AGREES]) >= 15, str(result)
    assert result.exit_code == 0


def test_against_another_compile_launch_by_launch(dumps):
    """B another compile of the same model (same kernels): inputs by launch."""
    result = replay(dumps.compile("python", bug=True), dumps.compile("python"), first=1)
    (r,) = result.launches
    assert r.verdict == CULPRIT and r.kernel.startswith(GELU) and r.from_b and not r.own, str(result)


@pytest.mark.slow
def test_cpp_wrapper_replays_its_generated_kernels(dumps):
    buggy = dumps.compile("cpp", bug=True)
    result = replay(buggy, dumps.reference("fp64"), launches=_launches(buggy))
    culprits = [r.kernel.rsplit("_", 1)[0] for r in result.launches if r.verdict == CULPRIT]
    assert culprits == [GELU, GELU], str(result)
    shims = [r for r in result.launches if r.kernel.startswith("aoti_torch_")]
    assert shims and all(r.verdict == UNJUDGED and "Python-wrapper dump" in r.note for r in shims)
    cpp = [r for r in result.launches if r.kernel.startswith("cpp_fused") and r.verdict != UNJUDGED]
    assert len(cpp) >= 6


def _run_repro(directory: str, cwd: str) -> subprocess.CompletedProcess:
    """``python DIR/run.py`` in a fresh interpreter in which aoti_debug cannot be imported."""
    blocker = "import sys, runpy; sys.modules['aoti_debug'] = None; sys.argv = [sys.argv[1]]; " \
              "runpy.run_path(sys.argv[0], run_name='__main__')"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AOTI_DEBUG_LEVEL")}
    return subprocess.run([sys.executable, "-c", blocker, os.path.join(directory, "run.py")], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_repro_runs_without_aoti_debug_and_shows_the_mismatch(dumps, tmp_path):
    buggy = dumps.compile("python", bug=True)
    ref = dumps.reference("fp64")
    culprit = replay(buggy, ref, first=1).culprits[0]
    out = tmp_path / "repro"
    result = CliRunner().invoke(cli_main, ["repro", buggy, "--launch", str(culprit.launch), "--reference", ref,
                                           "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert {"run.py", "kernel.py", "kernel.cpp", "meta.json", "README.md", "inputs", "expected"} <= set(os.listdir(out))
    moved = tmp_path / "elsewhere"  # nothing points back at the dump
    shutil.move(str(out), str(moved))
    proc = _run_repro(str(moved), str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "MISMATCH" in proc.stdout and "reproduced" in proc.stdout and "eager's own" in proc.stdout
    # The same kernel of the clean compile agrees with the reference.
    clean = dumps.compile("python")
    out2 = tmp_path / "clean"
    result = CliRunner().invoke(cli_main, ["repro", clean, "--launch", str(culprit.launch), "-r", ref, "-o", str(out2)])
    assert result.exit_code == 0, result.output
    proc = _run_repro(str(out2), str(tmp_path))
    assert proc.returncode == 0 and "not reproduced" in proc.stdout, proc.stdout + proc.stderr


def test_cli_replay_and_diff_replay(dumps, tmp_path):
    buggy, ref = dumps.compile("python", bug=True), dumps.reference("fp64")
    runner = CliRunner()
    result = runner.invoke(cli_main, ["replay", buggy, ref, "--first", "2"])
    assert result.exit_code == 1 and "CULPRIT" in result.output, result.output
    result = runner.invoke(cli_main, ["replay", buggy, ref, "--first", "1", "--format", "json"])
    data = json.loads(result.output)
    assert data["launches"][0]["verdict"] == CULPRIT
    result = runner.invoke(cli_main, ["diff", buggy, ref, "--replay", "1"])
    assert result.exit_code == 1 and "CULPRIT" in result.output, result.output


def test_bad_input_is_one_line(dumps, tmp_path):
    buggy, ref = dumps.compile("python", bug=True), dumps.reference("fp64")
    runner = CliRunner()
    cases = [
        (["replay", buggy, str(tmp_path / "missing")], "no such"),
        (["replay", buggy, ref, "--launch", "9999"], "has no launch 9999"),
        (["replay", ref, buggy, "--launch", "1"], "give it second"),
        (["replay", buggy, ref, "--launch", "1", "--first", "1"], "not both"),
        (["repro", buggy, "--launch", "9999", "-o", str(tmp_path / "r")], "has no launch 9999"),
    ]
    for args, text in cases:
        result = runner.invoke(cli_main, args)
        assert result.exit_code == 2 and text in result.output, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    # A dump without copies of its sources (an older aoti_debug) is refused unless
    # --trust; then the file it names is read, and where it is gone it says so.
    moved = tmp_path / "moved"
    shutil.copytree(buggy, moved)
    shutil.rmtree(moved / "sources")
    info = json.loads((moved / "run.json").read_text())
    for g in info["graphs"].values():
        g.pop("sources")
        g["file"] = str(tmp_path / "gone.py")
    (moved / "run.json").write_text(json.dumps(info))
    result = runner.invoke(cli_main, ["replay", str(moved), ref, "--launch", "1"])
    assert result.exit_code == 2 and "no verified copy" in result.output and "--trust" in result.output, \
        result.output
    assert len(result.output.strip().splitlines()) == 1
    result = runner.invoke(cli_main, ["replay", str(moved), ref, "--launch", "1", "--trust"])
    assert result.exit_code == 2 and "no longer exists" in result.output, result.output


class _TanhMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x)) * 2).sum(-1) + x.mean()


@pytest.mark.slow
def test_aoti_package_replays_its_cpp_kernels(tmp_path):
    """AOTInductor writes its C++ kernels beside the wrapper (``*.kernel.cpp``)."""
    torch.manual_seed(0)
    model, x = _TanhMLP(), torch.randn(4, 8)
    with torch.no_grad():
        ep = torch.export.export(model, (x,))
        with wrong_tanh(1.01), aoti_debug.enabled(level="save"):
            package = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "m.pt2"))
        with dump_dir_restored():
            os.environ["AOTI_DEBUG_DIR"] = str(tmp_path / "aoti")
            torch._inductor.aoti_load_package(package)(x)
        torch._dynamo.reset()
        with aoti_debug.reference(dtype=torch.float64, dump_dir=str(tmp_path / "ref")):
            torch.compile(model)(x)
    a, b = only_run(str(tmp_path / "aoti")), only_run(str(tmp_path / "ref"))
    result = replay(a, b, launches=_launches(a))
    culprits = [r.kernel for r in result.culprits]
    assert len(culprits) == 1 and "tanh" in culprits[0], str(result)
