"""Device time of a CUDA-graph replay at level stats, against the uninstrumented graph's.

    CXX=/usr/bin/g++ PYTHONPATH=. python3 benchmarks/graph_device_time.py --model resnet18,transformer \
        [--configs base,stats,stats-per-side] [--steps 200] [--rounds 2] [--preset full]

Under ``torch.compile(mode="reduce-overhead")`` a step is one graph replay, so the device
time between two CUDA events around it (replays back to back, the host ahead) is what the
step costs the device, without the host's jitter that ``overhead.py``'s wall-clock rows
carry. Configs: ``base`` (no instrumentation), ``stats`` (level stats: the sides' stats
launches deferred and merged, ``cuda_graphs.DEFER``), ``stats-per-side`` (one stats
launch a side, ``DEFER = False``). Each config of each round runs in a fresh process;
the table gives each config's median over its steps (the rounds' medians, alternated),
its ratio to ``base`` of the same round, and the stats launches a capture made. CUDA only.
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

CONFIGS = ("base", "stats", "stats-per-side")


def measure(model_name: str, preset: str, config: str, steps: int) -> dict:
    """Median and min device ms of a replay, and the capture's stats launches (this process)."""
    import torch

    import aoti_debug
    from aoti_debug.runtime import cuda_graphs
    from benchmarks.overhead_row import build_model

    launches = [0]
    summarize = cuda_graphs.fused_stats.summarize

    def counted(tensors, *args, static=None, **kw):
        launches[0] += static is not None
        return summarize(tensors, *args, static=static, **kw)

    cuda_graphs.fused_stats.summarize = counted
    cuda_graphs.DEFER = config != "stats-per-side"
    work = tempfile.mkdtemp(prefix="graph_device_time_")
    model, x, source = build_model(model_name, preset, "cuda")
    if config != "base":
        aoti_debug.enable("stats", dump_dir=work)
    fn = torch.compile(model, mode="reduce-overhead")

    def call():
        torch.compiler.cudagraph_mark_step_begin()
        fn(x)

    with torch.no_grad():
        for _ in range(4):  # CUDA-graph trees: a warm-up run, the recording, replays
            call()
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(steps)]
        for start, end in events:
            start.record()
            call()
            end.record()
        torch.cuda.synchronize()
        aoti_debug.flush()
    ms = [start.elapsed_time(end) for start, end in events]
    return {"median": statistics.median(ms), "min": min(ms), "launches": launches[0], "model": source,
            "device": torch.cuda.get_device_name(), "torch": torch.__version__}


def run_one(model_name: str, preset: str, config: str, steps: int) -> dict:
    """:func:`measure` in a fresh process (a compile per config, nothing shared)."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, __file__, "--one", json.dumps([model_name, preset, config, steps])],
                          capture_output=True, text=True, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": tail[:160]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18", help="comma-separated: resnet18, transformer")
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    ap.add_argument("--preset", default="full", choices=("full", "small", "tiny"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print("RESULT " + json.dumps(measure(*json.loads(args.one))))
        return 0
    from benchmarks.overhead_row import MODELS

    models = [m for m in args.model.split(",") if m]
    configs = [c for c in args.configs.split(",") if c]
    bad = [m for m in models if m not in MODELS] + [c for c in configs if c not in CONFIGS]
    if bad or not models or "base" not in configs:
        ap.error(f"unknown model or config: {', '.join(bad)}" if bad else "--configs must include base")
    if args.steps < 1 or args.rounds < 1:
        ap.error("--steps and --rounds must be at least 1")
    import torch

    if not torch.cuda.is_available():
        print("graph_device_time.py: no CUDA device (CUDA graphs need one); run it on the GPU machine",
              file=sys.stderr)
        return 2
    print(f"python3 benchmarks/graph_device_time.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print("| model | config | round | device ms a replay (median) | min | × base | stats launches a capture |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for model_name in models:
        for r in range(args.rounds):
            results = {c: run_one(model_name, args.preset, c, args.steps) for c in configs}
            base = results["base"].get("median")
            for c, res in results.items():
                if "error" in res:
                    print(f"| {model_name} | {c} | {r + 1} | {res['error']} | | | |")
                    continue
                ratio = f"{res['median'] / base:.3f}" if base else "–"
                launches = res["launches"] if c != "base" else "–"
                print(f"| {model_name} | {c} | {r + 1} | {res['median']:.4f} | {res['min']:.4f} | {ratio} | {launches} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
