"""What appending a step's manifest lines costs, by how many writes they take.

    python benchmarks/manifest_writes.py [--bytes 60000] [--steps 2000] [--dir DIR]

A level-stats step of the 2-layer GPT-2 appends ~60 KB of manifest lines in one write
per launch side (42 a step): what keeps a crash from losing the records of the launch
that crashed. This appends ``--bytes`` a step to a file in ``--dir`` (default: a
temporary directory, on the file system a dump would use) in 42, 21, 8 and 1 writes
(``os.write``, as the runtimes' ``write``), alternating the splits for three rounds, and
prints microseconds per step: the cost of merging sides into fewer writes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

SPLITS = (42, 21, 8, 1)


def step_cost(path: str, total: int, writes: int, steps: int) -> float:
    """Microseconds per step of ``steps`` steps of ``writes`` appends making ``total`` bytes."""
    chunk = b"x" * (total // writes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(steps):
            for _ in range(writes):
                os.write(fd, chunk)
        return (time.perf_counter() - t0) / steps * 1e6
    finally:
        os.close(fd)
        os.unlink(path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bytes", type=int, default=60000, help="manifest bytes a step")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--dir", default=None, help="where the file goes (default: a temporary directory)")
    args = p.parse_args()
    if args.dir and not os.path.isdir(args.dir):
        p.error(f"--dir {args.dir!r} is not a directory: make it first, or leave --dir out for a temporary one")
    if args.bytes < max(SPLITS) or args.steps < 1:
        p.error(f"--bytes must be at least {max(SPLITS)} and --steps at least 1")
    folder = args.dir or tempfile.mkdtemp(prefix="manifest_writes_")
    path = os.path.join(folder, "manifest.jsonl")
    results: dict[int, list[float]] = {n: [] for n in SPLITS}
    for _ in range(3):
        for n in SPLITS:
            results[n].append(step_cost(path, args.bytes, n, args.steps))
    print(f"{args.bytes} bytes a step appended to {folder}, {args.steps} steps, three rounds")
    for n, times in results.items():
        print(f"  {n:>2} writes of {args.bytes // n:>6} B: median {statistics.median(times):7.1f} us a step "
              f"({' '.join(f'{t:.1f}' for t in times)})")
    if not args.dir:
        os.rmdir(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
