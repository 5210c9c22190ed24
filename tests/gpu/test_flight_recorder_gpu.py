"""The flight recorder on CUDA (Python wrapper, Triton kernels): the stats arrive after
the launches, in the writer thread, so the trigger fires there; the ring still holds the
last N calls up to the birth, nothing is saved at once (the values are gone) and the
birth launch's next occurrence is saved in full from pinned host copies. Run with
tools/gpu/run_gpu_tests.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO, only_run, records

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

LOOP = os.path.join(REPO, "examples", "nan_in_long_run.py")
NAN_AT = 1000


def _loop_on_cuda(root: str, steps: int, nan_at: int, **env) -> tuple[str, dict]:
    """LOOP on CUDA with a ring of 3 and the trigger: its run and its run.json."""
    env = {**os.environ, "PYTHONPATH": REPO, "AOTI_DEBUG_LEVEL": "stats", "AOTI_DEBUG_DIR": root,
           "AOTI_DEBUG_RING": "3", "AOTI_DEBUG_TRIGGER": "nonfinite", **env}
    # The device machine runs this checkout from PYTHONPATH, not installed: torch's
    # autoload of aoti_debug is not registered there, so the child imports it first.
    start = "import sys, runpy, aoti_debug; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    proc = subprocess.run([sys.executable, "-c", start, LOOP, str(steps), str(nan_at), "cuda"], env=env,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = only_run(root)
    with open(os.path.join(run, "run.json")) as f:
        return run, json.load(f)


@pytest.fixture(scope="module")
def cuda_run(tmp_path_factory):
    run, info = _loop_on_cuda(str(tmp_path_factory.mktemp("flight_cuda")), NAN_AT + 5, NAN_AT)
    return run, info["flight"]


def test_trigger_on_cuda_writes_the_calls_up_to_the_birth(cuda_run):
    run, fl = cuda_run
    fired = fl["fired"]
    assert fired["value"] == "nan" and fired["graph_call"] == NAN_AT and "sqrt" in fired["kernel"]
    first = fl["dumps"][0]
    assert first["reason"] == "nonfinite" and first["graph_calls"] == [NAN_AT - 2, NAN_AT]
    recs = records(run)
    calls = sorted({r["kernel_call"] + 1 for r in recs})
    assert calls[:3] == [NAN_AT - 2, NAN_AT - 1, NAN_AT] and calls[-1] == NAN_AT + 5
    assert all(r["device"].startswith("cuda") for r in recs if r.get("kind") == "tensor")


def test_next_occurrence_saved_from_the_device(cuda_run):
    run, fl = cuda_run
    fired = fl["fired"]
    assert fired["saved"] == [] and any("released" in n for n in fired["not_saved"])
    nxt = fired["next"]
    again = [r for r in records(run) if r["launch"] == nxt["launch"] and r.get("kind") == "tensor"]  # not xnumel
    assert {r["phase"] for r in again} == {"before", "after"}
    assert sorted(nxt["saved"]) == sorted(r["file"] for r in again)
    out = next(r for r in again if r["phase"] == "after")
    y = torch.load(os.path.join(run, out["file"]), weights_only=True)
    assert y.device.type == "cpu" and y.isnan().all()


# -- the C++ runtime (cpp_wrapper on CUDA): it reads values in the launch's hooks, so the
# birth launch's tensors are saved at once on the device too ----------------------------------
CPP_NAN_AT = 30


@pytest.fixture(scope="module")
def cpp_cuda_run(tmp_path_factory):
    return _loop_on_cuda(str(tmp_path_factory.mktemp("flight_cpp_cuda")), CPP_NAN_AT + 1, CPP_NAN_AT,
                         TORCHINDUCTOR_CPP_WRAPPER="1")


def test_cpp_trigger_on_cuda_saves_the_birth_at_once(cpp_cuda_run):
    run, info = cpp_cuda_run
    fl = info["flight"]
    fired = fl["fired"]
    assert info["writer"] == "cpp" and fired["value"] == "nan" and fired["graph_call"] == CPP_NAN_AT
    assert [d["reason"] for d in fl["dumps"]] == ["nonfinite", "nonfinite: next occurrence saved", "exit"]
    recs = records(run)
    assert sorted({r["kernel_call"] + 1 for r in recs}) == [CPP_NAN_AT - 2, CPP_NAN_AT - 1, CPP_NAN_AT, CPP_NAN_AT + 1]
    assert all(r["device"].startswith("cuda") for r in recs if r.get("kind") == "tensor")
    born = [r for r in recs if r["launch"] == fired["launch"] and r.get("kind") == "tensor"]
    inputs = [r for r in born if r["phase"] == "before" and r["role"] == "input"]
    outputs = [r for r in born if r["phase"] == "after"]
    assert len(inputs) == len(outputs) == 1 and sorted(fired["saved"]) == sorted(r["file"] for r in inputs + outputs)
    x = torch.load(os.path.join(run, inputs[0]["file"]), weights_only=True)
    y = torch.load(os.path.join(run, outputs[0]["file"]), weights_only=True)
    assert torch.equal(x, torch.full((8, 8), -0.5)) and y.isnan().all()
    again = [r for r in recs if r["launch"] == fired["next"]["launch"] and r.get("kind") == "tensor"]
    assert {r["phase"] for r in again} == {"before", "after"}
    assert sorted(fired["next"]["saved"]) == sorted(r["file"] for r in again if not r.get("uninitialised"))
