"""A compiled GPT-2 stepped on CPU without pause: the median step of one configuration.

    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/cpu_loop.py [--level stats] [--wrapper cpp] [--no-reuse] [--repo DIR]

GPT-2 from ``transformers`` (2 layers, random weights, as tests/real_models.py builds it)
is compiled with ``torch.compile`` (``cpp_wrapper=True`` for ``--wrapper cpp``) at
``--level`` (``base``: aoti_debug off; ``--no-reuse``: every input read, none taken
from its producer's record), run once, then stepped ``--rounds`` x ``--steps``
times, a new input each step (made before each round), each step ended by
``aoti_debug.flush()``; prints the median and mean step. Unlike ``overhead_cpu.py``, no
other process takes turns with it: how a training loop steps. ``--repo DIR`` imports
aoti_debug from another checkout (``git archive REV | tar -x -C DIR``); compare checkouts
by alternating processes of each several times. Records go to ``AOTI_DEBUG_DIR`` (default
``aoti_debug_dump`` in the working directory).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--level", default="stats", choices=["base", "save", "print", "names", "stats"])
    p.add_argument("--wrapper", default="cpp", choices=["cpp", "python"])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--steps", type=int, default=50, help="steps a round")
    p.add_argument("--no-reuse", action="store_true", help="read every input, none taken from its producer")
    p.add_argument("--repo", default=REPO, help="the checkout aoti_debug is imported from")
    args = p.parse_args()
    if args.rounds < 1 or args.steps < 1:
        p.error("--rounds and --steps must be at least 1")
    if not os.path.isdir(os.path.join(args.repo, "aoti_debug")):
        p.error(f"--repo {args.repo!r} holds no aoti_debug package: give a checkout's top folder")
    sys.path.insert(0, args.repo)
    sys.path.insert(1, REPO)  # tests.real_models, if the other checkout predates it
    import torch

    import aoti_debug
    from tests.real_models import BATCH, SEQ, VOCAB, gpt2

    torch.manual_seed(0)
    model = gpt2().module
    if args.level != "base":
        aoti_debug.enable(args.level, reuse=not args.no_reuse)
    times: list[float] = []
    with torch.no_grad(), torch._inductor.config.patch(cpp_wrapper=args.wrapper == "cpp"):
        f = torch.compile(model)
        f(torch.randint(0, VOCAB, (BATCH, SEQ)))
        for _ in range(args.rounds):
            xs = [torch.randint(0, VOCAB, (BATCH, SEQ)) for _ in range(args.steps)]
            for x in xs:
                t = time.perf_counter()
                f(x)
                aoti_debug.flush()
                times.append(time.perf_counter() - t)
    level = args.level + (" (no reuse)" if args.no_reuse and args.level != "base" else "")
    print(f"{args.wrapper} {level} ({args.repo}): median {statistics.median(times) * 1e3:.3f} ms, "
          f"mean {statistics.mean(times) * 1e3:.3f} ms over {len(times)} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
