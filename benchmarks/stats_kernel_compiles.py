"""Where a machine's first instrumented compile goes: the stats kernels' Triton compiles.

    CXX=/usr/bin/g++ PYTHONPATH=. python3 benchmarks/stats_kernel_compiles.py --model resnet18 [--threads 1,4,16]

At level stats on CUDA the first call of a compiled model also compiles aoti_debug's
stats kernels (``runtime/fused_stats_kernels.py``), one Triton compile per variant
(dtype, vector width, layout, pointer alignment), one after another, on the model's
thread: with a cold Triton cache that is what a machine's first instrumented compile pays
beyond an uninstrumented one (ResNet-18 on the H200: 18.6 s against 8.2 s). Each config
runs in a fresh process with fresh Inductor and Triton caches:

* ``base``: the uninstrumented compile's first call;
* ``stats``: level stats; every stats-kernel compile in the first call is timed (Triton's
  ``jit_cache_hook`` and ``jit_post_compile_hook``) and its specialization kept. The
  wrapper's module starts the variants its layouts predict on threads when it is
  imported (``fused_stats.precompile``) and the launches wait for them;
* ``stats, no precompile``: the same without that (each variant compiled at its first
  launch, one after another, on the model's thread);
* ``preload N``: ``stats``'s variants compiled first on N threads (``JITFunction.preload``
  of the kept specializations), timed on their own, then the model's first call, which
  should compile none of them: how much of the cost a compile ahead of the first call,
  in parallel, would take away;
* ``background``: level stats with ``AOTI_DEBUG_STATS_COMPILE=background`` (variants
  compiled on background threads, their tensors summarised with torch ops meanwhile): the
  first call, then how long until the last background compile is done, and the second
  call.

Prints one row a config: the first call's seconds, the stats-kernel compiles inside it
and their seconds, the preload's wall seconds, and for ``background`` the wait for its
compiles after the first call and the second call's seconds. CUDA only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

_KERNELS = ("_stats_kernel", "_stats_kernel_dense", "_stats_kernel_perm")


def child(model_name: str, preset: str, config: str, variants_path: str, out_path: str) -> None:
    import time
    from concurrent.futures import ThreadPoolExecutor

    import torch
    from triton import knobs

    import aoti_debug
    from aoti_debug.runtime import fused_stats, fused_stats_kernels
    from benchmarks.overhead_row import build_model

    started: dict[str, float] = {}
    compiles: list[dict] = []

    def before(*, key, fn, **_):
        if fn.module.startswith("aoti_debug"):
            started[str(key)] = time.perf_counter()
        return None  # a true value would skip the compile

    def after(*, key, fn, compile, **_):
        if fn.module.startswith("aoti_debug"):
            compiles.append({"kernel": fn.name, "s": time.perf_counter() - started.pop(str(key), time.perf_counter()),
                             "data": compile["specialization_data"]})

    knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = before, after
    model, x, _source = build_model(model_name, preset, "cuda")
    with torch.no_grad():
        model(x)
        torch.compile(lambda a: torch.relu(a @ a) + 1)(torch.randn(16, 16, device="cuda"))
        torch.cuda.synchronize()
    torch._dynamo.reset()
    preload_s = None
    if config.startswith("preload"):
        threads = int(config.split()[1])
        with open(variants_path) as f:
            kept = json.load(f)
        kernels = {name: getattr(fused_stats_kernels, name) for name in _KERNELS}
        t0 = time.perf_counter()
        with ThreadPoolExecutor(threads) as ex:
            list(ex.map(lambda c: kernels[c["kernel"]].preload(c["data"]), kept))
        preload_s = time.perf_counter() - t0
        compiles.clear()
    if config == "stats, no precompile":
        from aoti_debug.codegen.manager import Manager

        Manager.precompile_layouts = lambda self: None
    if config != "base":
        aoti_debug.enable("stats", dump_dir=tempfile.mkdtemp(prefix="stats_kernel_compiles_"))
    fn = torch.compile(model)
    with torch.no_grad():
        t0 = time.perf_counter()
        fn(x)
        torch.cuda.synchronize()
        aoti_debug.flush()
        first = time.perf_counter() - t0
        compiled_in_first = list(compiles)
        wait_s = second = None
        if config == "background":
            t0 = time.perf_counter()
            fused_stats.wait_for_compiles()
            wait_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            fn(x)
            torch.cuda.synchronize()
            aoti_debug.flush()
            second = time.perf_counter() - t0
    with open(out_path, "w") as f:
        json.dump({"first_call_s": first, "preload_s": preload_s, "compiles": compiled_in_first,
                   "background_wait_s": wait_s, "second_call_s": second}, f)


def run(model: str, preset: str, config: str, variants: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="stats_kernel_compiles_") as d:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "inductor"),
                   TRITON_CACHE_DIR=os.path.join(d, "triton"), PYTHONPATH=REPO,
                   AOTI_DEBUG_STATS_COMPILE="background" if config == "background" else "inline")
        out = os.path.join(d, "out.json")
        cmd = [sys.executable, __file__, "--child", config, "--model", model, "--preset", preset,
               "--variants", variants, "--out", out]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
            raise RuntimeError(f"{config}: exit {proc.returncode}: {tail[0]}")
        with open(out) as f:
            return json.load(f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18", choices=("resnet18", "transformer"))
    ap.add_argument("--preset", default="full", choices=("full", "small", "tiny"))
    ap.add_argument("--threads", default="1,4,16", help="preload configs: threads each, comma-separated")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--variants", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.model, args.preset, args.child, args.variants, args.out)
        return 0
    try:
        parts = [t.strip() for t in args.threads.split(",") if t.strip()]
        if not all(t.isdigit() and int(t) > 0 for t in parts):
            raise ValueError(f"--threads: positive integers, comma-separated (got {args.threads!r})")
        threads = [int(t) for t in parts]
        import torch

        if not torch.cuda.is_available():
            raise ValueError("needs a CUDA device (the stats kernels compile for it); run it on the GPU machine")
    except ValueError as e:
        print(f"stats_kernel_compiles.py: {e}", file=sys.stderr)
        return 2
    variants = os.path.join(tempfile.mkdtemp(prefix="stats_kernel_variants_"), "variants.json")
    rows = []
    for config in ["base", "stats", "stats, no precompile"] + [f"preload {n}" for n in threads] + ["background"]:
        try:
            r = run(args.model, args.preset, config, variants)
        except RuntimeError as e:
            print(f"{e}", file=sys.stderr)
            continue
        if config == "stats":
            with open(variants, "w") as f:
                json.dump(r["compiles"], f)
            for c in sorted(r["compiles"], key=lambda c: -c["s"]):
                spec = json.loads(c["data"])
                consts = dict(zip((tuple(k) for k in spec["constant_keys"]), spec["constant_vals"]))
                print(f"  {c['s']:6.2f} s  {c['kernel']}  {consts}", file=sys.stderr)
        rows.append((config, r))
        print(f"{config}: first call {r['first_call_s']:.1f} s", file=sys.stderr, flush=True)
    print(f"{args.model} ({args.preset}), {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| config | first call s | stats-kernel compiles in it | their s | preload s | then waited s | second call s |")
    print("|---|---:|---:|---:|---:|---:|---:|")

    def num(x, fmt=".1f"):
        return "–" if x is None else format(x, fmt)

    for config, r in rows:
        print(f"| {config} | {r['first_call_s']:.1f} | {len(r['compiles'])} | "
              f"{sum(c['s'] for c in r['compiles']):.1f} | {num(r['preload_s'])} | "
              f"{num(r.get('background_wait_s'))} | {num(r.get('second_call_s'), '.3f')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
