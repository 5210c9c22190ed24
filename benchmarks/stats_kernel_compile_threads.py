"""How Triton's compiles of the stats kernels scale over threads, without a GPU.

    python benchmarks/stats_kernel_compile_threads.py [--threads 1,2] [--rounds 2] [--arch 90]

``AOTI_DEBUG_STATS_COMPILE=background`` compiles stats-kernel variants on a pool of
threads (``runtime/fused_stats.py``). That helps only where Triton's compile leaves the
GIL (its LLVM passes, ptxas as a process). This compiles nine variants of the contiguous
kernel (float32, float16, bfloat16 × vector widths 1, 2, 4) for a CUDA target with
Triton's compiler and its bundled ptxas, which need no GPU, on N threads, each round
with a fresh Triton cache, and prints the wall seconds, the sum of the compiles' own
seconds and the speed-up over one thread (rounds alternate the thread counts).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

#: (kind code, width, is_float, pointer type) as fused_stats._KINDS has them.
KINDS = [(9, 4, True, "*fp32"), (6, 2, True, "*fp16"), (7, 2, True, "*bf16")]
VECS = (1, 2, 4)


def _source(kernel, vec: int, code: int, width: int, is_float: bool, pointer: str):
    from triton.compiler import ASTSource

    from aoti_debug.runtime import fused_stats

    signature = {"base": pointer, "tab": "*i64", "k": "i32", "part": "*fp64", "counters": "*i32", "out": "*fp64",
                 "k_total": "i32", **{c: "constexpr" for c in ("KIND", "WIDTH", "IS_FLOAT", "VEC", "BLOCK",
                                                                 "TBLOCK", "RBLOCK")}}
    constants = {"KIND": code, "WIDTH": width, "IS_FLOAT": is_float, "VEC": vec, "BLOCK": fused_stats.BLOCK,
                 "TBLOCK": fused_stats._TBLOCK, "RBLOCK": fused_stats._RBLOCK}
    aligned = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 3, 4, 5)}  # the pointers, as the JIT sees them
    return ASTSource(kernel, signature, constants, aligned)


def one_round(threads: int, arch: int) -> tuple[float, float]:
    """Wall and summed seconds of the nine compiles on ``threads`` threads, fresh cache."""
    import triton
    from triton.backends.compiler import GPUTarget

    from aoti_debug.runtime import fused_stats
    from aoti_debug.runtime.fused_stats_kernels import _stats_kernel

    target = GPUTarget("cuda", arch, 32)
    sources = [_source(_stats_kernel, vec, *kind) for vec in VECS for kind in KINDS]

    def compile_one(src) -> float:
        t0 = time.perf_counter()
        triton.compile(src, target=target, options={"num_warps": fused_stats.NUM_WARPS})
        return time.perf_counter() - t0

    with tempfile.TemporaryDirectory(prefix="stats_compile_threads_") as cache:
        os.environ["TRITON_CACHE_DIR"] = cache
        t0 = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            each = list(pool.map(compile_one, sources))
        return time.perf_counter() - t0, sum(each)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--arch", type=int, default=90, help="CUDA compute capability to compile for (default 90)")
    args = ap.parse_args(argv)
    parts = [t.strip() for t in args.threads.split(",") if t.strip()]
    if not parts or not all(t.isdigit() and int(t) > 0 for t in parts) or args.rounds < 1:
        print(f"stats_kernel_compile_threads.py: --threads: positive integers, comma-separated, and --rounds >= 1 "
              f"(got {args.threads!r}, {args.rounds})", file=sys.stderr)
        return 2
    try:
        import triton  # noqa: F401
        from triton.backends.nvidia.compiler import CUDABackend  # noqa: F401
    except Exception as e:
        print(f"stats_kernel_compile_threads.py: needs Triton with its CUDA backend ({type(e).__name__}: {e})",
              file=sys.stderr)
        return 2
    counts = [int(t) for t in parts]
    walls: dict[int, list[float]] = {n: [] for n in counts}
    sums: dict[int, list[float]] = {n: [] for n in counts}
    for r in range(args.rounds):
        for n in counts:
            wall, total = one_round(n, args.arch)
            walls[n].append(wall)
            sums[n].append(total)
            print(f"round {r + 1}: {n} thread(s): wall {wall:.2f} s, compiles' own {total:.2f} s",
                  file=sys.stderr, flush=True)
    one = statistics.median(walls[counts[0]])
    print(f"{len(VECS) * len(KINDS)} stats-kernel variants for sm_{args.arch}, {os.cpu_count()} CPUs, "
          f"median of {args.rounds} round(s)")
    print(f"| threads | wall s | compiles' own s | speed-up over {counts[0]} |")
    print("|---:|---:|---:|---:|")
    for n in counts:
        wall = statistics.median(walls[n])
        print(f"| {n} | {wall:.2f} | {statistics.median(sums[n]):.2f} | {one / wall:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
