"""Per-tensor cost of the stats level's device work: torch-op path vs fused Triton kernel.

Builds ~200 tensors of transformer-like sizes (d=1024, batch 8x256, fp32 by default),
cut into "launch sides" of a few tensors each, and times, per side, what the hooks do:

* old: ``stats.device_summary`` per tensor + two ``torch.stack`` (hooks.py today)
* new: ``fused_stats.summarize(side, packed=True)`` (one buffer per side)

For each path it prints, as medians over repeats, microseconds per tensor of
host time to enqueue the work and of GPU time (CUDA events around the whole batch),
and the GPU time of the fused kernel alone on the largest tensor (as GB/s).

    python benchmarks/stats_kernels.py                 # needs CUDA (and triton for "new")
    python benchmarks/stats_kernels.py --dtype bfloat16 --side 4 --repeats 50
    python benchmarks/stats_kernels.py --block 2048 --warps 8   # try kernel shapes
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from aoti_debug.runtime import fused_stats  # noqa: E402
from aoti_debug.runtime.stats import device_summary  # noqa: E402


def make_tensors(n: int, dtype: torch.dtype, d: int = 1024, tokens: int = 8 * 256, heads: int = 16):
    """Sizes met in one transformer block's kernels, cycled to ``n`` tensors."""
    shapes = [
        (tokens, d), (d,), (d,), (tokens, d),            # layer norm in/out, weight, bias
        (3 * d, d), (tokens, 3 * d),                     # qkv projection
        (8, heads, tokens // 8, d // heads),             # q / k / v
        (8, heads, tokens // 8, tokens // 8),            # attention scores
        (d, d), (tokens, d),                             # out projection
        (4 * d, d), (tokens, 4 * d), (4 * d,),           # MLP up
        (d, 4 * d), (tokens, d), (d,),                   # MLP down
        (tokens,), (),                                   # a row statistic, a scalar
    ]
    g = torch.Generator(device="cuda").manual_seed(0)
    out = []
    for i in range(n):
        s = shapes[i % len(shapes)]
        out.append(torch.randn(s, device="cuda", generator=g).to(dtype))
    return out


def old_side(side):
    pairs = [device_summary(t) for t in side]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])


def new_side(side):
    return fused_stats.summarize(side, packed=True)


def time_path(fn, sides, repeats: int):
    host, gpu = [], []
    for _ in range(3):  # warm up (compiles, caches, allocator)
        for side in sides:
            fn(side)
    torch.cuda.synchronize()
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        t0 = time.perf_counter()
        for side in sides:
            fn(side)
        t1 = time.perf_counter()
        end.record()
        end.synchronize()
        host.append((t1 - t0) * 1e6)
        gpu.append(start.elapsed_time(end) * 1e3)
    return statistics.median(host), statistics.median(gpu)


def kernel_bandwidth(t: torch.Tensor, repeats: int) -> tuple[float, float]:
    """(microseconds, GB/s) of summarize([t]) on the GPU, median."""
    times = []
    for _ in range(3):
        fused_stats.summarize([t], packed=True)
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fused_stats.summarize([t], packed=True)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    us = statistics.median(times)
    return us, t.numel() * t.element_size() / (us * 1e-6) / 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tensors", type=int, default=200)
    p.add_argument("--side", type=int, default=3, help="tensors per launch side")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--block", type=int, default=None, help="fused_stats.BLOCK (elements per tile)")
    p.add_argument("--warps", type=int, default=None, help="fused_stats.NUM_WARPS")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA device")
    if args.block:
        fused_stats.BLOCK = args.block
    if args.warps:
        fused_stats.NUM_WARPS = args.warps
    dtype = getattr(torch, args.dtype)
    tensors = make_tensors(args.tensors, dtype)
    sides = [tensors[i:i + args.side] for i in range(0, len(tensors), args.side)]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  "
          f"{len(tensors)} tensors of {args.dtype} in {len(sides)} sides, {nbytes / 2**20:.0f} MiB in all")

    fused = fused_stats.enabled_for(torch.device("cuda"))
    if fused:  # same answers before timing anything
        for side in sides:
            s_old, c_old = old_side(side)
            s_new, c_new = fused_stats.unpack(new_side(side))
            assert torch.equal(c_old, c_new), "checksums differ"
            torch.testing.assert_close(s_new, s_old, rtol=1e-9, atol=1e-9, equal_nan=True)
    else:
        print("fused stats kernel unavailable (no triton?): only the old path is timed")

    n = len(tensors)
    rows = [("old (torch ops)", old_side)] + ([("new (fused)", new_side)] if fused else [])
    results = {}
    print(f"{'path':<18}{'host us/tensor':>16}{'GPU us/tensor':>16}{'GPU total ms':>14}")
    for name, fn in rows:
        host, gpu = time_path(fn, sides, args.repeats)
        results[name] = gpu
        print(f"{name:<18}{host / n:>16.2f}{gpu / n:>16.2f}{gpu / 1e3:>14.3f}")
    if fused:
        old, new = results["old (torch ops)"], results["new (fused)"]
        print(f"speed-up (GPU time): {old / new:.1f}x")
        big = max(tensors, key=lambda t: t.numel())
        us, gbs = kernel_bandwidth(big, args.repeats)
        print(f"fused kernel alone on {tuple(big.shape)} {args.dtype}: {us:.1f} us, {gbs:.0f} GB/s")


if __name__ == "__main__":
    main()
