"""Where does a level's step time go? cProfile of N steps of the benchmark transformer.

    python3 tools/gpu/profile_levels.py --level stats [--steps 5]
"""
import argparse
import cProfile
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import aoti_debug  # noqa: E402
from aoti_debug.runtime import session  # noqa: E402
from examples.models import Transformer  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--level", default="stats")
p.add_argument("--steps", type=int, default=5)
args = p.parse_args()
dev = "cuda" if torch.cuda.is_available() else "cpu"
m = Transformer(1024, 16, 4).to(dev).eval()
x = torch.randn(8, 256, 1024, device=dev)
with torch.no_grad(), aoti_debug.enabled(level=args.level, dump_dir="/tmp/prof_dump"):
    fn = torch.compile(m)
    fn(x); fn(x); aoti_debug.flush()
    if dev == "cuda":
        torch.cuda.synchronize()
    n0 = session.current().seq
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    for _ in range(args.steps):
        fn(x)
    aoti_debug.flush()
    if dev == "cuda":
        torch.cuda.synchronize()
    prof.disable()
    dt = (time.perf_counter() - t) / args.steps
print(f"level {args.level}: {dt * 1e3:.2f} ms/step, {(session.current().seq - n0) / args.steps:.0f} records/step")
pstats.Stats(prof).sort_stats("tottime").print_stats(18)
