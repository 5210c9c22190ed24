"""Device and host time of the fused stats kernel on strided CUDA tensors: read in place
(the strided kernel) against a contiguous copy first (what the runtime did before:
``fused_stats._layout_of`` forced to None).

    python benchmarks/permuted_stats.py [--repeats 50]

Cases: ResNet-18's channels_last activations at batch 32 (one side per conv's output
shape), a transformer layer's transposed weights (d=1024), its attention inputs
(permuted), and the gapped ones: SDPA's q/k/v as slices of a fused QKV buffer
(``[8, 256, 3*16*64]`` seen as three ``[8, 16, 256, 64]``, strides ``(256*3072, 64,
3072, 1)``: one side as the transformer has it) and an expanded attention mask (a
stride-0 head dim). Per case: median device
time of one ``summarize(..., into=ring)`` (CUDA events around ``--inner`` back-to-back
calls) and median host time per call, in microseconds; the device time of the
contiguous kernel on contiguous tensors of the same values (no copy: the floor); GB/s
of the in-place read.
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


def cases(dtype: torch.dtype):
    cl = torch.channels_last
    g = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*shape, dt=dtype):
        return torch.randn(shape, device="cuda", generator=g).to(dt)

    return [
        ("resnet18 stem input 32x3x224x224", [rnd(32, 3, 224, 224, dt=torch.float32).to(memory_format=cl)]),
        ("resnet18 32x64x112x112", [rnd(32, 64, 112, 112).to(memory_format=cl)]),
        ("resnet18 32x64x56x56 x3", [rnd(32, 64, 56, 56).to(memory_format=cl) for _ in range(3)]),
        ("resnet18 32x128x28x28 x3", [rnd(32, 128, 28, 28).to(memory_format=cl) for _ in range(3)]),
        ("resnet18 32x256x14x14 x3", [rnd(32, 256, 14, 14).to(memory_format=cl) for _ in range(3)]),
        ("resnet18 32x512x7x7 x3", [rnd(32, 512, 7, 7).to(memory_format=cl) for _ in range(3)]),
        ("weights 1024x3072 + 3072x1024 transposed", [rnd(1024, 3072).t(), rnd(3072, 1024).t()]),
        ("attention 8x256x16x64 -> BHSD, K^T", [rnd(8, 256, 16, 64).permute(0, 2, 1, 3),
                                                 rnd(8, 256, 16, 64).permute(0, 2, 3, 1)]),
        ("gapped: q, k, v of a fused QKV 8x256x3072", qkv_slices(rnd(8, 256, 3 * 16 * 64))),
        ("gapped: mask 8x1x256x256 expanded x16 heads", [rnd(8, 1, 256, 256).expand(8, 16, 256, 256)]),
    ]


def qkv_slices(qkv: torch.Tensor) -> list[torch.Tensor]:
    """q, k, v ``[B, H, S, D]`` (H=16) as views of a fused QKV projection's output ``[B, S, 3*H*D]``."""
    b, s, hd3 = qkv.shape
    d = hd3 // 3 // 16
    return [qkv[..., i * 16 * d:(i + 1) * 16 * d].view(b, s, 16, d).transpose(1, 2) for i in range(3)]


def measure(ts, buf, repeats: int, inner: int) -> tuple[float, float]:
    """Median device µs and host µs per summarize call."""
    for _ in range(3):
        fused_stats.summarize(ts, into=(buf, 0))
    torch.cuda.synchronize()
    dev, host = [], []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t0 = time.perf_counter()
        for _ in range(inner):
            fused_stats.summarize(ts, into=(buf, 0))
        host.append((time.perf_counter() - t0) / inner * 1e6)
        b.record()
        b.synchronize()
        dev.append(a.elapsed_time(b) / inner * 1e3)
    return statistics.median(dev), statistics.median(host)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--inner", type=int, default=10)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--only", default="", help="only the cases whose name contains this (e.g. gapped)")
    args = p.parse_args()
    dtype = getattr(torch, args.dtype)
    buf = torch.zeros(9 * 64, dtype=torch.float64, device="cuda")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, activations {args.dtype}")
    print(f"{'case':<46} {'in place dev':>12} {'copy dev':>9} {'contig dev':>10} {'in place host':>13} "
          f"{'copy host':>9} {'GB/s':>6}")
    real = fused_stats._cached_layout
    for name, ts in cases(dtype):
        if args.only not in name:
            continue
        assert all(fused_stats._prepare(t)[2] is not None for t in ts), name
        fused_stats._sides.clear()
        d_in, h_in = measure(ts, buf, args.repeats, args.inner)
        # No layout read in place: _prepare and _side_key copy as before (and the side's kept
        # launches are cleared, else the copy runs would repeat the in-place launches).
        fused_stats._sides.clear()
        fused_stats._cached_layout = lambda shape, strides: None
        try:
            d_cp, h_cp = measure(ts, buf, args.repeats, args.inner)
        finally:
            fused_stats._cached_layout = real
            fused_stats._sides.clear()
        d_ct, _ = measure([t.contiguous() for t in ts], buf, args.repeats, args.inner)
        nbytes = sum(t.numel() * t.element_size() for t in ts)
        print(f"{name:<46} {d_in:12.1f} {d_cp:9.1f} {d_ct:10.1f} {h_in:13.1f} {h_cp:9.1f} {nbytes / d_in / 1e3:6.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
