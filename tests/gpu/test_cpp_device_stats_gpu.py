"""Stats of CUDA tensors on the device in the C++ wrapper and AOTInductor (issue 13):
records equal to the Python wrapper's and to the C++ host path's (min, max, absmax, nan,
inf and checksum to the bit; mean and std within fused_stats' tolerance), on float32,
bfloat16, float16 and int64 tensors, NaN/Inf and a non-contiguous one; what crosses to
the host (the profiler's memcpy events: 9 doubles per tensor, not the tensors); a device
fault still named. Each run is a process of its own (``AOTI_DEBUG_FUSED_STATS=0``, the
host path, is read once per process). Run with tools/gpu/run_gpu_tests.py."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO, only_run, records
from tests.gpu.test_cpp_wrapper_gpu import _IMA_SCRIPT
from tests.user_kernels import HAVE_TRITON

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

_SCRIPT = r"""
import json, os, sys
sys.path.insert(0, {repo!r})
import torch
import aoti_debug

mode, out_dir = sys.argv[1], sys.argv[2]


def f(x, xt, idx):
    a = torch.sin(x) * 3 + xt                            # float32, reads xt (non-contiguous in cpp runs)
    b = a.to(torch.bfloat16) * 1.5                       # bfloat16
    c = a.to(torch.float16) - 2                          # float16
    d = idx * 7 + (a.reshape(-1) > 0).to(torch.int64)    # int64
    e = torch.log(a) + torch.exp(a * 40)                 # NaN and Inf
    return a, b, c, d, e, (a * 2 + 1).t()


class M(torch.nn.Module):
    def forward(self, x, xt, idx):
        return f(x, xt, idx)


def inputs(contiguous):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(64, 256, device="cuda", generator=g)
    xt = torch.randn(256, 64, device="cuda", generator=g).t()
    if contiguous:
        xt = xt.contiguous()
    return x, xt, torch.arange(64 * 256, device="cuda")


def profiled(fn, args):
    # What crosses to the host during one call, and the stats kernels that ran: from the
    # profiler's trace (CUPTI sees the runtime's driver-API launches and copies too).
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    path = os.path.join(out_dir, "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as fh:
        events = json.load(fh)["traceEvents"]
    dtoh = [e for e in events if e.get("cat") == "gpu_memcpy" and "DtoH" in e.get("name", "")]
    kernels = [e["name"] for e in events if e.get("cat") == "kernel"]
    return {{"dtoh_bytes": sum(int(e.get("args", {{}}).get("bytes", 0)) for e in dtoh), "dtoh": len(dtoh),
            "stats_kernels": sum(1 for k in kernels if k == "_stats_kernel"), "kernels": len(kernels)}}


with torch.no_grad():
    if mode == "python":
        args = inputs(False)
        with aoti_debug.enabled(level="stats"):
            torch.compile(f)(*args)
        aoti_debug.flush()
        result = {{}}
    elif mode == "cpp":
        args = inputs(False)
        with aoti_debug.enabled(level="stats"), torch._inductor.config.patch(cpp_wrapper=True):
            fn = torch.compile(f)
            fn(*args)
            torch.cuda.synchronize()
            result = profiled(fn, args)
    elif mode == "aoti-compile":
        ep = torch.export.export(M(), inputs(True))
        with aoti_debug.enabled(level="stats"):
            torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(out_dir, "m.pt2"))
        result = {{}}
    elif mode == "aoti-run":
        runner = torch._inductor.aoti_load_package(sys.argv[3])
        args = inputs(True)
        runner(*args)
        torch.cuda.synchronize()
        result = profiled(runner, args)
with open(os.path.join(out_dir, "result.json"), "w") as fh:
    json.dump(result, fh)
"""


def run(tmp_path, name: str, mode: str, *extra: str, host: bool = False) -> tuple[list[dict], dict]:
    """One process of the script: its records (a fresh dump) and what it measured."""
    out = tmp_path / name
    out.mkdir()
    script = tmp_path / "script.py"
    script.write_text(_SCRIPT.format(repo=REPO))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTI_DEBUG_")}
    env.update(AOTI_DEBUG_DIR=str(out / "dump"), PYTHONPATH=REPO)
    if host:
        env["AOTI_DEBUG_FUSED_STATS"] = "0"
    proc = subprocess.run([sys.executable, str(script), mode, str(out), *extra], capture_output=True, text=True,
                          timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # Nothing fell back: no runtime warning, no stats kernels missing at compile time.
    for bad in ("[aoti_debug] warning", "no stats kernel", "are not linked"):
        assert bad not in proc.stderr, proc.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    recs = records(only_run(str(out / "dump"))) if os.path.isdir(out / "dump") else []
    return recs, result


def _key(r: dict) -> tuple:
    return (r["kernel"] if r["kernel"] == r["op"] else r["op"], r["kernel_call"], r["phase"], r["arg"])


def assert_same_stats(ours: list[dict], ref: list[dict], what: str) -> int:
    """Tensor records alike: exact fields to the bit, mean and std within fused_stats' tolerance."""
    a = {_key(r): r for r in ours if r["kind"] == "tensor" and not r.get("uninitialised")}
    b = {_key(r): r for r in ref if r["kind"] == "tensor" and not r.get("uninitialised")}
    assert set(a) == set(b), (what, set(a) ^ set(b))
    for k, r in a.items():
        p = b[k]
        assert "error" not in r, (what, k, r)
        assert (r["dtype"], r["shape"], r["stride"]) == (p["dtype"], p["shape"], p["stride"]), (what, k)
        assert r["checksum"] == p["checksum"], (what, k)
        for stat in ("min", "max", "absmax", "nan", "inf"):
            assert r["stats"][stat] == p["stats"][stat], (what, k, stat, r["stats"][stat], p["stats"][stat])
        scale = max(abs(p["stats"]["absmax"]), 1.0) if isinstance(p["stats"]["absmax"], float) else 1.0
        for stat, tol in (("mean", 1e-12 * scale), ("std", 0.0)):
            x, y = r["stats"][stat], p["stats"][stat]
            assert (x is None) == (y is None), (what, k, stat)
            if isinstance(x, float) and isinstance(y, float):
                assert math.isclose(x, y, rel_tol=1e-9, abs_tol=tol), (what, k, stat, x, y)
            else:
                assert x == y, (what, k, stat, x, y)
    return len(a)


def test_cpp_wrapper_stats_on_the_device_equal_python_and_the_host_path(tmp_path):
    py, _ = run(tmp_path, "python", "python")
    dev, measured = run(tmp_path, "device", "cpp")
    host, host_measured = run(tmp_path, "host", "cpp", host=True)
    first = [r for r in dev if r["kernel_call"] == 1]
    assert assert_same_stats(first, py, "cpp device vs python") >= 6
    assert_same_stats(dev, host, "cpp device vs cpp host")
    tensors = [r for r in first if r["kind"] == "tensor" and not r.get("uninitialised")]
    assert {r["dtype"] for r in tensors} >= {"float32", "bfloat16", "float16", "int64"}
    assert any(r["stats"]["nan"] > 0 for r in tensors) and any(r["stats"]["inf"] > 0 for r in tensors)

    def contiguous(r):
        want, s = [], 1
        for size in reversed(r["shape"]):
            want.insert(0, s)
            s *= max(size, 1)
        return all(st == w for st, w, size in zip(r["stride"], want, r["shape"]) if size != 1)

    assert any(not contiguous(r) for r in tensors), [(r["arg"], r["stride"]) for r in tensors]
    # What crossed to the host during the profiled call: results only (9 doubles per
    # tensor) on the device path, every tensor on the host path.
    per_call = [r for r in dev if r["kind"] == "tensor" and r["kernel_call"] == 2 and not r.get("uninitialised")]
    nbytes = sum(r["numel"] * {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8}.get(r["dtype"], 8)
                 for r in per_call)
    assert measured["stats_kernels"] >= 1 and host_measured["stats_kernels"] == 0, (measured, host_measured)
    assert measured["dtoh_bytes"] <= 72 * len(per_call), measured
    assert host_measured["dtoh_bytes"] >= nbytes // 2, (host_measured, nbytes)


def test_aoti_package_stats_on_the_device_equal_the_host_path(tmp_path):
    run(tmp_path, "compile", "aoti-compile")
    pkg = str(tmp_path / "compile" / "m.pt2")
    dev, measured = run(tmp_path, "device", "aoti-run", pkg)
    host, host_measured = run(tmp_path, "host", "aoti-run", pkg, host=True)
    assert assert_same_stats(dev, host, "aoti device vs host") >= 6
    assert {r["graph"] for r in dev} == {"graph0"}
    tensors = [r for r in dev if r["kind"] == "tensor" and not r.get("uninitialised")]
    assert {r["dtype"] for r in tensors} >= {"float32", "bfloat16", "float16", "int64"}
    assert measured["stats_kernels"] >= 1 and host_measured["stats_kernels"] == 0, (measured, host_measured)
    per_call = [r for r in tensors if r["kernel_call"] == 2]
    assert measured["dtoh_bytes"] <= 72 * len(per_call), measured


# The illegal-access script of the AOTI_DEBUG_SYNC test, at level stats without the sync.
_FAULT = _IMA_SCRIPT.replace('aoti_debug.enable("names", sync=True)', 'aoti_debug.enable("stats")')


@pytest.mark.skipif(not HAVE_TRITON, reason="needs triton")
def test_a_fault_before_the_stats_kernel_is_named_and_not_hidden(tmp_path):
    """At level stats without AOTI_DEBUG_SYNC, the stats kernel after a faulting kernel is
    where the fault surfaces: the warning names that kernel, and the model still fails."""
    assert _FAULT != _IMA_SCRIPT
    script = tmp_path / "fault.py"
    script.write_text(_FAULT.format(repo=REPO))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTI_DEBUG_")}
    env.update(AOTI_DEBUG_DIR=str(tmp_path / "dump"), PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode != 0
    warned = [x for x in proc.stderr.splitlines() if "CUDA error while computing stats on the device after" in x]
    assert len(warned) == 1 and "far_store" in warned[0], proc.stderr[-4000:]
