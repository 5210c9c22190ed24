"""Compiles variants of the fused stats kernel to cubins (``device_stats.py`` runs it).

Run as a script in a process of its own (``python stats_worker.py job.json result.json``), so that
several compile at once and Triton's settings (no line info: a third of the cubin's
size) stay out of the compiling process; imported by ``device_stats`` where no such
process can be started. It imports nothing of aoti_debug (the kernels' module is loaded
from its file), so a worker starts in the time Triton takes to import.

The job (JSON): ``kernels`` (path of runtime/fused_stats_kernels.py), ``capability``
(e.g. 90), ``num_warps``, ``out`` (a folder for the cubins) and ``variants``, each with
its ``kernel`` (``_stats_kernel``, or the strided ``_stats_kernel_perm``), the kernel's
``signature``, ``constexprs``, ``aligned`` (parameter positions specialised as 16-byte
aligned, as Triton's JIT specialises aligned pointers) and a ``file`` name.
Writes one JSON list: per variant what the launcher needs from Triton's metadata and the
PTX parameter types of the entry point. ``timeout`` (seconds): past it the worker writes
every thread's stack to stderr (its log) and exits, so a stuck compile says where it
stuck; ``trace``: each variant's start and end on stderr.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import json
import os
import re
import sys
import time

_ENTRY_RE = re.compile(r"\.(?:visible|extern)\s+\.entry\s+(\w+)\s*\(([^)]*)\)")
_PARAM_RE = re.compile(r"\.param\s+\.(\w+)")


def _kernels(path: str):
    name = "aoti_debug_fused_stats_kernels"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # Triton resolves the helpers a kernel calls through its module
        spec.loader.exec_module(module)
    return sys.modules[name]


#: The stats kernels' own parameters (PTX types) as the C++ launcher and the Python
#: runtime's library launcher pass them: base, tab, k, part, counters, out, k_total.
#: Triton 3.x appends its scratch pointers (u64 each; 3.6: two).
ARG_TYPES = ("u64", "u64", "u32", "u64", "u64", "u64", "u32")


def scratch_pointers(params) -> int | None:
    """How many scratch pointers Triton appended to ``ARG_TYPES`` in a kernel's PTX
    parameter types; None when they are not ``ARG_TYPES`` followed by u64s."""
    n = len(ARG_TYPES)
    if tuple(params[:n]) != ARG_TYPES or any(p != "u64" for p in params[n:]):
        return None
    return len(params) - n


def launch_fields(md) -> dict:
    """What a compiled kernel's launch needs beyond grid, block and shared memory, from its
    Triton metadata: CTAs per cluster, scratch sizes, cooperative and PDL launches."""
    return {"num_ctas": int(getattr(md, "num_ctas", 1)),
            "global_scratch_size": int(getattr(md, "global_scratch_size", 0) or 0),
            "profile_scratch_size": int(getattr(md, "profile_scratch_size", 0) or 0),
            "cooperative": bool(getattr(md, "launch_cooperative_grid", False)),
            "pdl": bool(getattr(md, "launch_pdl", False))}


def plain_launch(fields: dict) -> bool:
    """Whether :func:`launch_fields` describe a launch ``cuLaunchKernel`` makes alone (what
    the C++ launcher and the Python runtime's library launcher make): one CTA a cluster,
    no scratch memory, neither cooperative nor PDL."""
    return fields["num_ctas"] == 1 and not fields["global_scratch_size"] and not fields["profile_scratch_size"] \
        and not fields["cooperative"] and not fields["pdl"]


def ptx_params(ptx: str) -> tuple[str, list[str]]:
    """The entry point's name and parameter types (``u64``, ``u32``) in a PTX text."""
    m = _ENTRY_RE.search(ptx)
    if m is None:
        raise RuntimeError("no .entry in the PTX Triton produced")
    return m.group(1), _PARAM_RE.findall(m.group(2))


def compile_variants(job: dict) -> list[dict]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernels = _kernels(job["kernels"])
    target = GPUTarget("cuda", int(job["capability"]), 32)
    out = []
    t0 = time.monotonic()
    for v in job["variants"]:
        if job.get("trace"):
            print(f"[aoti_debug stats worker pid={os.getpid()} +{time.monotonic() - t0:.2f}s] compiling {v['file']}",
                  file=sys.stderr, flush=True)
        attrs = {(int(i),): [["tt.divisibility", 16]] for i in v["aligned"]}
        src = ASTSource(getattr(kernels, v["kernel"]), dict(v["signature"]), dict(v["constexprs"]), attrs)
        compiled = triton.compile(src, target=target, options={"num_warps": int(job["num_warps"])})
        md = compiled.metadata
        entry, params = ptx_params(compiled.asm["ptx"])
        path = os.path.join(job["out"], v["file"])
        with open(path, "wb") as f:
            f.write(compiled.asm["cubin"])
        out.append({
            "file": v["file"], "name": md.name, "entry": entry, "params": params, "shared": int(md.shared),
            "num_warps": int(md.num_warps), **launch_fields(md), "triton": triton.__version__,
        })
    if job.get("trace"):
        print(f"[aoti_debug stats worker pid={os.getpid()} +{time.monotonic() - t0:.2f}s] done", file=sys.stderr,
              flush=True)
    return out


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        job = json.load(f)
    if job.get("timeout"):
        faulthandler.dump_traceback_later(float(job["timeout"]), exit=True)
    results = compile_variants(job)
    with open(sys.argv[2], "w", encoding="utf-8") as f:  # a file: whatever Triton prints stays out of it
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    # Python put this script's folder (aoti_debug/codegen) first on the path: its modules
    # must not stand in for anything Triton imports.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    sys.exit(main())
