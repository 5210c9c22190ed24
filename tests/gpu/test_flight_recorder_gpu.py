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


@pytest.fixture(scope="module")
def cuda_run(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("flight_cuda"))
    env = {**os.environ, "PYTHONPATH": REPO, "AOTI_DEBUG_LEVEL": "stats", "AOTI_DEBUG_DIR": root,
           "AOTI_DEBUG_RING": "3", "AOTI_DEBUG_TRIGGER": "nonfinite"}
    # The device machine runs this checkout from PYTHONPATH, not installed: torch's
    # autoload of aoti_debug is not registered there, so the child imports it first.
    start = "import sys, runpy, aoti_debug; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    proc = subprocess.run([sys.executable, "-c", start, LOOP, str(NAN_AT + 5), str(NAN_AT), "cuda"], env=env,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = only_run(root)
    with open(os.path.join(run, "run.json")) as f:
        return run, json.load(f)["flight"]


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
