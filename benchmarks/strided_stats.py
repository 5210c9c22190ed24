"""Stats of strided CPU tensors in the runtime library: contiguous against transposed and
permuted layouts (the gather before the one-pass stats).

    PYTHONPATH=. python benchmarks/strided_stats.py

Medians of 25 calls of ``native_stats.Library.summarize`` on one tensor, in ms (absolute
times from a CPU machine: compare checkouts by running this in each, alternating).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from aoti_debug.codegen import native_library  # noqa: E402
from aoti_debug.runtime import native_stats  # noqa: E402


def main() -> int:
    lib = native_stats.load(native_library.stats_library_path())
    cases = [("contiguous 2M", torch.randn(2048 * 1024)),
             ("2D transposed 2M", torch.randn(1024, 2048).t()),
             ("3D permuted 2M", torch.randn(16, 128, 1024).permute(0, 2, 1)),
             ("GPT-2 attention 2x12x64x64, permuted", torch.randn(2, 64, 12, 64).permute(0, 2, 1, 3).transpose(-1, -2))]
    for name, t in cases:
        times = []
        for _ in range(25):
            t0 = time.perf_counter()
            lib.summarize([t])
            times.append(time.perf_counter() - t0)
        print(f"{name:<40} {statistics.median(times) * 1e3:8.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
