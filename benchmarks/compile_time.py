"""C++ compile time of instrumented wrappers: uninstrumented vs each level.

Each compile runs in its own process with a fresh Inductor cache directory (no FX
graph cache, no compiled-module cache, no precompiled header to reuse), and times every
C++ compile command Inductor runs (``torch._inductor.cpp_builder.run_compile_cmd``):

* ``wrapper``: the wrapper's compile (``*.main.cpp`` under cpp_wrapper, ``*.wrapper.cpp``
  under AOTInductor): what the instrumentation adds to;
* ``total``: every C++ command of the compile (kernels, the header precompile, ...).

For JIT cpp_wrapper the runtime library, for AOTInductor the runtime objects its packages
link (one per level's features), are built once first (their time is reported on its
own) and copied into each fresh cache, as a user's cache holds them after the first
instrumented compile. Configurations are interleaved round by round; medians.

    python benchmarks/compile_time.py                          # minimal + small, 5 rounds
    python benchmarks/compile_time.py --rounds 3 --models small --aoti
    python benchmarks/compile_time.py --repo /tmp/head          # another checkout (before/after)
    CXX=/usr/bin/g++ python3 benchmarks/compile_time.py --device cuda   # the GPU machine
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEVELS = ["base", "names", "print", "stats", "save"]

_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {repo!r})
import torch
from torch._inductor import cpp_builder
cmds = []
run = cpp_builder.run_compile_cmd
def timed(cmd_line, cwd):
    t = time.perf_counter()
    run(cmd_line, cwd)
    cmds.append((cmd_line, time.perf_counter() - t))
cpp_builder.run_compile_cmd = timed
level, model, aoti, device = {level!r}, {model!r}, {aoti!r}, {device!r}
torch.manual_seed(0)
if model == "minimal":
    fn, x = (lambda x: torch.relu(x) + 1), torch.randn(8, 8, device=device)
    mod = torch.nn.Module(); mod.forward = fn
else:
    from examples.models import Transformer
    mod = Transformer(64, 4, 2).eval().to(device); fn = mod; x = torch.randn(2, 32, 64, device=device)
ctx = None
if level != "base":
    import aoti_debug
    ctx = aoti_debug.enabled(level=level)
    ctx.__enter__()
t0 = time.perf_counter()
with torch.no_grad():
    if aoti:
        class M(torch.nn.Module):
            def __init__(self, f):
                super().__init__(); self.f = f
            def forward(self, x):
                return self.f(x)
        ep = torch.export.export(M(fn), (x,))
        torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(os.getcwd(), "m.pt2"))
        wrapper = [t for c, t in cmds if ".wrapper.cpp" in c]
    else:
        with torch._inductor.config.patch(cpp_wrapper=True):
            torch.compile(fn)(x)
        wrapper = [t for c, t in cmds if ".main." in c]
wall = time.perf_counter() - t0
print(json.dumps(dict(wrapper=sum(wrapper), total=sum(t for _, t in cmds), wall=wall, commands=len(cmds))))
"""


def prebuild_library(cache: str, aoti: bool) -> tuple[str | None, float]:
    """Build the runtime library (``aoti``: the runtime objects of every level) into
    ``cache`` (a fresh Inductor cache); their folder and the seconds the build took."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    sys.path.insert(0, REPO)
    from aoti_debug.codegen import native_library, native_object

    specs = ([native_object.object_spec(v) for v in ("names", "records", "files")] if aoti
             else [native_library.build_spec()])
    t0 = time.perf_counter()
    for spec in specs:
        native_library.build(spec)
    return specs[0].directory, time.perf_counter() - t0


def run_child(repo: str, level: str, model: str, aoti: bool, library_dir: str | None, device: str = "cpu") -> dict:
    work = tempfile.mkdtemp(prefix="aoti_debug_ct_")
    try:
        cache = os.path.join(work, "inductor")
        if library_dir and level != "base":
            shutil.copytree(library_dir, os.path.join(cache, "aoti_debug", os.path.basename(library_dir)))
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, TORCHINDUCTOR_COMPILE_THREADS="1",
                   AOTI_DEBUG_DIR=os.path.join(work, "dump"))
        for k in ("AOTI_DEBUG_LEVEL", "AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER"):
            env.pop(k, None)
        code = _CHILD.format(repo=repo, level=level, model=model, aoti=aoti, device=device)
        r = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{model}/{level} failed:\n{r.stderr[-4000:]}")
        if library_dir and level != "base" and os.path.isdir(os.path.join(cache, "aoti_debug")):
            built = [d for d in os.listdir(os.path.join(cache, "aoti_debug")) if d != os.path.basename(library_dir)]
            if built:
                raise RuntimeError(f"{model}/{level} built its own runtime ({built}): the key differs")
        return json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--models", default="minimal,small", help="comma-separated: minimal, small")
    ap.add_argument("--levels", default=",".join(LEVELS))
    ap.add_argument("--aoti", action="store_true", help="AOTInductor packages instead of JIT cpp_wrapper")
    ap.add_argument("--repo", default=REPO, help="the aoti_debug checkout to measure (default: this one)")
    ap.add_argument("--device", default="cpu", help="where the model runs: cpu, or cuda (C++ wrappers launching Triton)")
    args = ap.parse_args(argv)
    models, levels = args.models.split(","), args.levels.split(",")
    library_dir, build_s = None, None
    lib_cache = tempfile.mkdtemp(prefix="aoti_debug_ct_lib_")
    try:
        prebuilt = "native_object.py" if args.aoti else "native_library.py"
        if os.path.exists(os.path.join(args.repo, "aoti_debug", "codegen", prebuilt)):
            if os.path.realpath(args.repo) != os.path.realpath(REPO):
                raise SystemExit("--repo with a prebuilt runtime: run the script of that checkout")
            library_dir, build_s = prebuild_library(lib_cache, args.aoti)
        what = "runtime objects" if args.aoti else "runtime library"
        print(f"{'AOTInductor' if args.aoti else 'cpp_wrapper=True'} on {args.device}, {args.repo}, {args.rounds} rounds, "
              f"{os.cpu_count()} cores" + (f"; {what} built once in {build_s:.1f} s" if build_s else ""),
              flush=True)
        results: dict[tuple[str, str], list[dict]] = {}
        for rnd in range(args.rounds):
            for model in models:
                for level in levels:
                    r = run_child(args.repo, level, model, args.aoti, library_dir, args.device)
                    results.setdefault((model, level), []).append(r)
                    print(f"  round {rnd + 1} {model:<8} {level:<6} wrapper {r['wrapper']:6.2f} s  "
                          f"total {r['total']:6.2f} s", flush=True)
    finally:
        shutil.rmtree(lib_cache, ignore_errors=True)
    print()
    print("| model | level | wrapper s (median) | x base | all C++ s (median) | x base |")
    print("|---|---|---:|---:|---:|---:|")
    for model in models:
        base = results.get((model, "base"))
        bw = statistics.median(r["wrapper"] for r in base) if base else float("nan")
        bt = statistics.median(r["total"] for r in base) if base else float("nan")
        for level in levels:
            rs = results[(model, level)]
            w = statistics.median(r["wrapper"] for r in rs)
            t = statistics.median(r["total"] for r in rs)
            print(f"| {model} | {level} | {w:.2f} | {w / bw:.2f} | {t:.2f} | {t / bt:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
