"""Stats of CUDA tensors on the device in the C++ wrapper and AOTInductor:
records equal to the Python wrapper's and to the C++ host path's (min, max, absmax, nan,
inf and checksum to the bit; mean and std within fused_stats' tolerance), on float32,
bfloat16, float16 and int64 tensors, NaN/Inf and a non-contiguous one; what crosses to
the host (the profiler's memcpy events: 9 doubles per tensor, not the tensors); a device
fault still named. Each run is a process of its own (``AOTI_DEBUG_FUSED_STATS=0``, the
host path, is read once per process). Run with tools/gpu/run_gpu_tests.py, or this file
alone with ``-x`` (docs/development.md: the command, which ends within 5 minutes).

Layer by layer, so that a failure or a hang points at one: first the pack alone (built
by the worker processes, each cubin loaded with cuModuleLoadData and launched through
ctypes on one tensor, against the Python runtime's launch of the same kernel), then the
wrappers. Every child process is bounded: its output goes to files (no pipe a lingering
grandchild could hold open), faulthandler dumps its stacks and ends it before the test's
timeout, which kills its whole process group; it prints its phases, the pack build its
steps (``AOTI_DEBUG_TRACE_BUILD``) and the C++ runtime its driver calls
(``AOTI_DEBUG_TRACE_DEVICE``), and a failure shows the tails of both."""

from __future__ import annotations

import collections
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.conftest import REPO, only_run, records
from tests.gpu.test_cpp_wrapper_gpu import _IMA_SCRIPT
from tests.user_kernels import HAVE_TRITON

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

#: Seconds a child may take: a compile from a cold cache (runtime library, stats pack,
#: Inductor, the C++ wrapper) takes about a minute on the H100 machine; the pack check less.
CHILD_TIMEOUT = 150
LAYER_TIMEOUT = 120
#: The child dumps its stacks and exits this long before the test would kill it.
DUMP_MARGIN = 15

#: Put in front of every child script: stacks dumped and the process ended before the
#: test's timeout (and at a crash); ``phase()`` marks progress on stderr.
_HEADER = """
import faulthandler, sys, time
faulthandler.enable()
faulthandler.dump_traceback_later({deadline}, exit=True)
_T0 = time.monotonic()


def phase(what):
    print(f"[phase +{{time.monotonic() - _T0:.1f}}s] {{what}}", file=sys.stderr, flush=True)


phase("start")
"""


def _tail(path, n: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(none)"


def run_child(out, name: str, script: str, args: list[str], timeout: int, **env_extra: str) -> tuple[str, str]:
    """``script`` run by this Python in a session of its own, bounded by ``timeout``; its
    stdout and stderr. Fails with both tails when it times out or exits non-zero."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.py"
    path.write_text(_HEADER.format(deadline=max(10, timeout - DUMP_MARGIN)) + script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTI_DEBUG_")}
    env.update(PYTHONPATH=REPO, PYTHONUNBUFFERED="1", AOTI_DEBUG_TRACE_BUILD="1", AOTI_DEBUG_TRACE_DEVICE="1",
               **env_extra)
    so, se = out / f"{name}.stdout", out / f"{name}.stderr"
    t0 = time.monotonic()
    with open(so, "w") as fo, open(se, "w") as fe:
        proc = subprocess.Popen([sys.executable, str(path), *args], stdin=subprocess.DEVNULL, stdout=fo, stderr=fe,
                                env=env, start_new_session=True)
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            try:  # the child (when late) and whatever it left running: compile and stats workers
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    took = time.monotonic() - t0
    print(f"[{name}] exit {proc.returncode} after {took:.1f} s", file=sys.stderr)
    what = f"did not finish in {timeout} s" if timed_out else f"exited with {proc.returncode} after {took:.1f} s"
    assert not timed_out and proc.returncode == 0, \
        f"{name} {what}\n--- stderr (tail) ---\n{_tail(se)}\n--- stdout (tail) ---\n{_tail(so, 20)}"
    return so.read_text(), se.read_text()


_LAYER = r"""
import ctypes, json, math, os, sys
from ctypes import POINTER, byref, c_char_p, c_int, c_int32, c_uint, c_uint64, c_void_p
sys.path.insert(0, {repo!r})
phase("import torch")
import torch
from aoti_debug.codegen import device_stats
from aoti_debug.runtime import fused_stats

cap = device_stats.capability()
phase(f"build the pack for sm_{{cap}}")
path = device_stats.pack_path(cap)
assert path, "no pack: the warning above says why"
pack = device_stats.read_pack(open(path, "rb").read())
phase(f"pack {{path}}: {{len(pack['kernels'])}} kernels, {{pack['scratch']}} scratch pointers")

cu = ctypes.CDLL("libcuda.so.1")
cu.cuInit.argtypes = [c_uint]
cu.cuCtxGetCurrent.argtypes = [POINTER(c_void_p)]
cu.cuModuleLoadData.argtypes = [POINTER(c_void_p), c_void_p]
cu.cuModuleGetFunction.argtypes = [POINTER(c_void_p), c_void_p, c_char_p]
cu.cuLaunchKernel.argtypes = [c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p,
                              POINTER(c_void_p), c_void_p]
cu.cuStreamQuery.argtypes = [c_void_p]
cu.cuGetErrorName.argtypes = [c_int, POINTER(c_char_p)]


def check(r, what):
    if r != 0:
        name = c_char_p()
        cu.cuGetErrorName(r, byref(name))
        raise SystemExit(f"{{what}}: {{name.value}} ({{r}})")


torch.zeros(1, device="cuda")  # torch's primary context, current on this thread
check(cu.cuInit(0), "cuInit")
ctx = c_void_p()
check(cu.cuCtxGetCurrent(byref(ctx)), "cuCtxGetCurrent")
assert ctx.value, "no current context"
sms = torch.cuda.get_device_properties(0).multi_processor_count
g = torch.Generator(device="cuda").manual_seed(0)
cases = {{
    "float32 vec": torch.randn(5000, device="cuda", generator=g),
    "float32 misaligned": torch.randn(5001, device="cuda", generator=g)[1:],
    "float32 many programs": torch.randn(3_000_000, device="cuda", generator=g),
    "bfloat16 nan/inf": torch.tensor([1.0, float("nan"), float("inf"), -2.5] * 300, device="cuda").bfloat16(),
    "int64": torch.arange(7000, device="cuda") * 3 - 5,
}}
keep = []
for label, x in cases.items():
    code, width, _is_float = fused_stats._KINDS[x.dtype]
    out = torch.full((9,), float("nan"), dtype=torch.float64, device="cuda")
    base, vec, table, programs = fused_stats.plan([x.data_ptr()], [x.numel()], [0], width, out.data_ptr(),
                                                  pack["block"], pack["programs_per_sm"] * sms, pack["min_tiles"])
    kern = next(k for k in pack["kernels"] if k["kind"] == code and k["vec"] == vec and k["cols"] == 0
                and k["dense"] == 0)
    image = ctypes.create_string_buffer(kern["image"], len(kern["image"]))
    keep.append(image)
    module, fn = c_void_p(), c_void_p()
    phase(f"{{label}}: cuModuleLoadData (kind {{code}}, vec {{vec}}, {{len(kern['image'])}} bytes)")
    check(cu.cuModuleLoadData(byref(module), ctypes.cast(image, c_void_p)), "cuModuleLoadData")
    check(cu.cuModuleGetFunction(byref(fn), module, kern["name"].encode()), "cuModuleGetFunction")
    tab = torch.tensor(table, dtype=torch.int64, device="cuda")
    part = torch.full((programs * 9,), float("nan"), dtype=torch.float64, device="cuda")
    counters = torch.zeros(1, dtype=torch.int32, device="cuda")
    args = [c_uint64(base), c_uint64(tab.data_ptr()), c_int32(1), c_uint64(part.data_ptr()),
            c_uint64(counters.data_ptr()), c_uint64(out.data_ptr()), c_int32(1)]
    args += [c_uint64(0) for _ in range(pack["scratch"])]
    params = (c_void_p * len(args))(*[ctypes.cast(byref(a), c_void_p) for a in args])
    stream = torch.cuda.current_stream().cuda_stream
    torch.cuda.synchronize()
    phase(f"{{label}}: cuLaunchKernel grid {{programs}}, block {{32 * kern['num_warps']}}, shared {{kern['shared']}}")
    check(cu.cuLaunchKernel(fn, programs, 1, 1, 32 * kern["num_warps"], 1, 1, kern["shared"], c_void_p(stream),
                            params, None), "cuLaunchKernel")
    deadline = time.monotonic() + 30
    while (r := cu.cuStreamQuery(c_void_p(stream))) == 600:  # CUDA_ERROR_NOT_READY
        if time.monotonic() > deadline:
            raise SystemExit(f"{{label}}: the stats kernel did not end in 30 s")
        time.sleep(0.001)
    check(r, "the stats kernel")
    phase(f"{{label}}: done")
    ref = fused_stats.summarize([x], packed=True)  # the Python runtime's launch of the same kernel
    got, want = out.cpu(), ref.cpu()
    for i, stat in enumerate(("min", "max", "mean", "std", "absmax", "nan", "inf", "count")):
        a, b = got[i].item(), want[i].item()
        same = (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
        assert same, (label, stat, a, b)
    assert got[8:].view(torch.int64).item() == want[8:].view(torch.int64).item(), (label, "checksum")
    assert counters.item() == 0, (label, "the last program resets its counter", counters.item())
    print(json.dumps({{"case": label, "programs": programs, "vec": vec}}), flush=True)
phase("all cases equal the Python runtime's")
"""


def test_the_pack_builds_loads_and_its_kernels_equal_the_python_runtime(tmp_path):
    """The cheapest layer first: the pack built by the worker processes, each case's cubin
    loaded with cuModuleLoadData and launched through ctypes, its stream polled with a
    deadline (a kernel that never ends fails here, named), results equal to
    fused_stats.summarize and the ticket counter back at zero."""
    stdout, stderr = run_child(tmp_path, "layer", _LAYER.format(repo=REPO), [], LAYER_TIMEOUT)
    cases = [json.loads(x) for x in stdout.splitlines() if x.startswith("{")]
    assert len(cases) == 5, stderr[-4000:]
    assert any(c["programs"] > 1 for c in cases) and {c["vec"] for c in cases} >= {1, 4}
    assert "[aoti_debug build" in stderr  # the build's trace (built here, or found)


_SCRIPT = r"""
import json, os, sys
sys.path.insert(0, {repo!r})
phase("import torch")
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

    phase("profiler start")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        phase("profiled call")
        fn(*args)
        torch.cuda.synchronize()
        phase("profiled call done")
    phase("profiler stopped")
    path = os.path.join(out_dir, "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as fh:
        events = json.load(fh)["traceEvents"]
    phase("trace read")
    dtoh = [e for e in events if e.get("cat") == "gpu_memcpy" and "DtoH" in e.get("name", "")]
    kernels = [e["name"] for e in events if e.get("cat") == "kernel"]
    return {{"dtoh_bytes": sum(int(e.get("args", {{}}).get("bytes", 0)) for e in dtoh), "dtoh": len(dtoh),
            "stats_kernels": sum(1 for k in kernels if k.startswith("_stats_kernel")), "kernels": len(kernels)}}


with torch.no_grad():
    if mode == "python":
        args = inputs(False)
        phase("compile and call")
        with aoti_debug.enabled(level="stats"):
            torch.compile(f)(*args)
        aoti_debug.flush()
        result = {{}}
    elif mode == "cpp":
        args = inputs(False)
        with aoti_debug.enabled(level="stats"), torch._inductor.config.patch(cpp_wrapper=True):
            fn = torch.compile(f)
            phase("compile and first call")
            fn(*args)
            phase("first call returned")
            torch.cuda.synchronize()
            phase("first call synchronized")
            result = profiled(fn, args)
    elif mode == "aoti-compile":
        phase("export")
        ep = torch.export.export(M(), inputs(True))
        phase("aoti compile")
        with aoti_debug.enabled(level="stats"):
            torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(out_dir, "m.pt2"))
        result = {{}}
    elif mode == "aoti-run":
        phase("load package")
        runner = torch._inductor.aoti_load_package(sys.argv[3])
        args = inputs(True)
        phase("first call")
        runner(*args)
        torch.cuda.synchronize()
        phase("first call synchronized")
        result = profiled(runner, args)
with open(os.path.join(out_dir, "result.json"), "w") as fh:
    json.dump(result, fh)
phase("result written; exiting")
"""


def run(tmp_path, name: str, mode: str, *extra: str, host: bool = False,
        timeout: int = CHILD_TIMEOUT) -> tuple[list[dict], dict]:
    """One process of the script: its records (a fresh dump) and what it measured."""
    out = tmp_path / name
    env = dict(AOTI_DEBUG_DIR=str(out / "dump"))
    if host:
        env["AOTI_DEBUG_FUSED_STATS"] = "0"
    _stdout, stderr = run_child(out, mode, _SCRIPT.format(repo=REPO), [mode, str(out), *extra], timeout, **env)
    # Nothing fell back: no runtime warning, no stats kernels missing at compile time.
    for bad in ("[aoti_debug] warning", "no stats kernel", "are not linked"):
        assert bad not in stderr, stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    recs = records(only_run(str(out / "dump"))) if os.path.isdir(out / "dump") else []
    return recs, result


def call_counts(recs: list[dict]) -> dict:
    """Records per (wrapper, kernel_call): what an assertion message shows about a run."""
    counts = collections.Counter((r["wrapper"], r["kernel_call"]) for r in recs)
    return dict(sorted(counts.items()))


def one_call(recs: list[dict], wrapper: str, last: bool = False) -> list[dict]:
    """``wrapper``'s records of each kernel's first (``last``: last) call present, numbered
    as call 0 so that runs that called the model a different number of times align.
    kernel_call is the 0-based n-th call of a kernel in its graph (DESIGN.md), counted per
    (graph, kernel): a child that calls the compiled function twice has calls 0 and 1 of
    each kernel, and records of any other call (a compile-time pass of the wrapper, should
    it be instrumented) are not the first or last ones."""
    mine = [r for r in recs if r["wrapper"] == wrapper]
    calls: dict[tuple, set] = collections.defaultdict(set)
    for r in mine:
        calls[r["graph"], r["kernel"]].add(r["kernel_call"])
    pick = {k: (max(v) if last else min(v)) for k, v in calls.items()}
    return [dict(r, kernel_call=0) for r in mine if r["kernel_call"] == pick[r["graph"], r["kernel"]]]


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


def _ring_rows(recs: list[dict]) -> int:
    """The device ring's rows a graph call's tensor records take at most: each launch side's
    from a multiple of 8 (native/device_stats.h), in record order."""
    end, last = 0, None
    for r in recs:
        side = (r["graph"], r["kernel"], r["phase"])
        if side != last:
            end, last = (end + 7) // 8 * 8, side
        end += 1
    return end


def test_cpp_wrapper_stats_on_the_device_equal_python_and_the_host_path(tmp_path):
    py, _ = run(tmp_path, "python", "python")
    dev, measured = run(tmp_path, "device", "cpp")
    host, host_measured = run(tmp_path, "host", "cpp", host=True)
    calls = f"records per (wrapper, kernel_call): python {call_counts(py)}, device {call_counts(dev)}, " \
            f"host {call_counts(host)}"
    # The cpp child calls the compiled function twice (the first call, then the profiled
    # one): its first call is what the Python child's only call computed.
    first = one_call(dev, "cpp")
    assert assert_same_stats(first, one_call(py, "python"), f"cpp device (first call) vs python; {calls}") >= 6
    assert_same_stats(dev, host, f"cpp device vs cpp host; {calls}")
    tensors = [r for r in first if r["kind"] == "tensor" and not r.get("uninitialised")]
    assert {r["dtype"] for r in tensors} >= {"float32", "bfloat16", "float16", "int64"}, calls
    assert any(r["stats"]["nan"] > 0 for r in tensors) and any(r["stats"]["inf"] > 0 for r in tensors), calls

    def contiguous(r):
        want, s = [], 1
        for size in reversed(r["shape"]):
            want.insert(0, s)
            s *= max(size, 1)
        return all(st == w for st, w, size in zip(r["stride"], want, r["shape"]) if size != 1)

    assert any(not contiguous(r) for r in tensors), [(r["arg"], r["stride"]) for r in tensors]
    # What crossed to the host during the profiled call (each kernel's last): results only
    # (9 doubles per ring row: a row per tensor, up to 7 unused before each side's first) on
    # the device path, every tensor on the host path.
    per_call = [r for r in one_call(dev, "cpp", last=True) if r["kind"] == "tensor" and not r.get("uninitialised")]
    nbytes = sum(r["numel"] * {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8}.get(r["dtype"], 8)
                 for r in per_call)
    assert per_call, calls
    assert measured["stats_kernels"] >= 1 and host_measured["stats_kernels"] == 0, (measured, host_measured)
    assert measured["dtoh_bytes"] <= 72 * _ring_rows(per_call), (measured, _ring_rows(per_call), calls)
    assert host_measured["dtoh_bytes"] >= nbytes // 2, (host_measured, nbytes, calls)


def test_aoti_package_stats_on_the_device_equal_the_host_path(tmp_path):
    run(tmp_path, "compile", "aoti-compile")
    pkg = str(tmp_path / "compile" / "m.pt2")
    dev, measured = run(tmp_path, "device", "aoti-run", pkg)
    host, host_measured = run(tmp_path, "host", "aoti-run", pkg, host=True)
    calls = f"records per (wrapper, kernel_call): device {call_counts(dev)}, host {call_counts(host)}"
    assert assert_same_stats(dev, host, f"aoti device vs host; {calls}") >= 6
    assert {r["graph"] for r in dev} == {"graph0"}, calls
    tensors = [r for r in dev if r["kind"] == "tensor" and not r.get("uninitialised")]
    assert {r["dtype"] for r in tensors} >= {"float32", "bfloat16", "float16", "int64"}, calls
    assert measured["stats_kernels"] >= 1 and host_measured["stats_kernels"] == 0, (measured, host_measured)
    # The child calls the package twice (the first call, then the profiled one): each kernel's last call.
    per_call = one_call(tensors, "cpp", last=True)
    assert per_call, calls
    assert measured["dtoh_bytes"] <= 72 * _ring_rows(per_call), (measured, _ring_rows(per_call), calls)


# The illegal-access script of the AOTI_DEBUG_SYNC test, at level stats without the sync.
_FAULT = _IMA_SCRIPT.replace('aoti_debug.enable("names", sync=True)', 'aoti_debug.enable("stats")')


@pytest.mark.skipif(not HAVE_TRITON, reason="needs triton")
def test_a_fault_before_the_stats_kernel_is_named_and_not_hidden(tmp_path):
    """At level stats without AOTI_DEBUG_SYNC, the stats kernel after a faulting kernel is
    where the fault surfaces: the warning names that kernel, and the model still fails."""
    assert _FAULT != _IMA_SCRIPT
    with pytest.raises(AssertionError, match="exited with"):  # the model fails: a non-zero exit
        run_child(tmp_path, "fault", _FAULT.format(repo=REPO), [], CHILD_TIMEOUT,
                  AOTI_DEBUG_DIR=str(tmp_path / "dump"))
    stderr = (tmp_path / "fault.stderr").read_text()
    warned = [x for x in stderr.splitlines() if "CUDA error while computing stats on the device after" in x]
    assert len(warned) == 1 and "far_store" in warned[0], stderr[-4000:]
