"""A machine's first instrumented compile: the C++ runtime built from the wrapper's creation or not.

    PYTHONPATH=. python benchmarks/first_compile.py [--model transformer] [--preset small] [--rounds 2] [--device cpu]

Each run is a fresh process with a fresh Inductor cache (so aoti_debug's runtime library
is not there yet, as on a new machine; on CUDA a fresh Triton cache too), Python
wrapper, level stats: the
first call's seconds (Dynamo, Inductor, the model's C++ kernels, the library's build, the
first run) with the build started when the wrapper is made (``prebuild.start_early``, as
aoti_debug does) against started only when the wrapper's header asks for it, and an
uninstrumented compile for scale. Rounds alternate the configs;
prints the median of each and its ratio to the uninstrumented one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

CONFIGS = ("base", "stats, build early", "stats, build at the header")


def child(model_name: str, preset: str, config: str, device: str) -> float:
    import time

    import torch

    import aoti_debug
    from benchmarks.overhead_row import build_model

    if config == "stats, build at the header":
        from aoti_debug.codegen import prebuild

        prebuild.start_early = lambda *a, **k: None
    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    model, x, _source = build_model(model_name, preset, device)
    with torch.no_grad():
        model(x)
        sync()
    if config != "base":
        aoti_debug.enable("stats", dump_dir=tempfile.mkdtemp(prefix="first_compile_"))
    fn = torch.compile(model)
    with torch.no_grad():
        t0 = time.perf_counter()
        fn(x)
        sync()
        aoti_debug.flush()
        return time.perf_counter() - t0


def run(model: str, preset: str, config: str, device: str) -> float:
    with tempfile.TemporaryDirectory(prefix="first_compile_") as d:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "inductor"),
                   TRITON_CACHE_DIR=os.path.join(d, "triton"), PYTHONPATH=REPO)
        env = {k: v for k, v in env.items() if not k.startswith("AOTI_DEBUG_")}
        cmd = [sys.executable, __file__, "--child", config, "--model", model, "--preset", preset, "--device", device]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
            raise RuntimeError(f"{config}: exit {proc.returncode}: {tail[0]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])["first_call_s"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="transformer", choices=("transformer", "resnet18"))
    ap.add_argument("--preset", default="small", choices=("full", "small", "tiny"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps({"first_call_s": child(args.model, args.preset, args.child, args.device)}))
        return 0
    if args.rounds < 1:
        print("first_compile.py: --rounds must be 1 or more", file=sys.stderr)
        return 2
    times: dict[str, list[float]] = {c: [] for c in CONFIGS}
    for r in range(args.rounds):
        for config in (CONFIGS if r % 2 == 0 else CONFIGS[::-1]):
            try:
                times[config].append(run(args.model, args.preset, config, args.device))
            except RuntimeError as e:
                print(f"first_compile.py: {e}", file=sys.stderr)
                return 1
            print(f"round {r + 1}: {config}: {times[config][-1]:.1f} s", file=sys.stderr, flush=True)
    base = statistics.median(times["base"])
    where = "CPU"
    if args.device == "cuda":
        import torch

        where = torch.cuda.get_device_name()
    print(f"{args.model} ({args.preset}), {where}, {os.cpu_count()} cores, {args.rounds} rounds, fresh caches each")
    print("| config | first call s (median) | x base | runs |")
    print("|---|---:|---:|---|")
    for config in CONFIGS:
        m = statistics.median(times[config])
        print(f"| {config} | {m:.1f} | {m / base:.2f} | {', '.join(f'{t:.1f}' for t in times[config])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
