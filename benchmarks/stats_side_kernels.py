"""Device time of every kernel of a few stats launches, one row each (CUDA only).

    CXX=/usr/bin/g++ PYTHONPATH=. python3 benchmarks/stats_side_kernels.py [--calls 20]

``fused_stats.summarize`` over: ResNet-18's input image (32x3x224x224 fp32 channels_last)
read in place by the dense kernel (tiles of 3x256 elements) and by the strided kernel
(tiles 4 wide for its runs of 3), and from a
contiguous copy made first, a contiguous tensor of its size, the
weights side of a channels_last ResNet-18 (its parameters and running statistics, as
the graph's inputs are read once a call) whole and split into its contiguous, strided and
small tensors, one tensor of 512 elements (a launch's floor) and one of 24.5 MiB,
contiguous and channels_last, and each of ResNet-18's channels_last activation shapes
through the dense kernel, the strided kernel and as a contiguous tensor. Each row: the device time of every kernel of a call (copies
included; torch.profiler), the mean of ``--calls`` calls. (``stats_kernel_sides.py``
times only the stats kernels, over a whole model's sides.)
"""

from __future__ import annotations

import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def kernels_of(fn, calls: int) -> tuple[float, list[tuple[str, int, float]]]:
    """(device us a call, [(kernel name, launches a call, us a call)]) of ``fn``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per.setdefault(e.name[:48], []).append(e.device_time_total)
    rows = [(name, len(v) // calls, sum(v) / calls) for name, v in per.items()]
    return sum(r[2] for r in rows), rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20)
    args = p.parse_args()
    import torch

    from aoti_debug.runtime import fused_stats as fs

    if not torch.cuda.is_available():
        print("stats_side_kernels.py needs a CUDA device", file=sys.stderr)
        return 2

    def row(name: str, tensors: list, copy: bool = False, dense: bool = True) -> None:
        """``copy``: each tensor's contiguous copy made in the call, then summarised;
        ``dense`` False: dense permutations read by the strided kernel (``fs.DENSE_READS``)."""
        fn = (lambda: fs.summarize([t.contiguous() for t in tensors])) if copy else (lambda: fs.summarize(tensors))
        fs.DENSE_READS = dense
        try:
            total, rows = kernels_of(fn, args.calls)
        finally:
            fs.DENSE_READS = True
        mib = sum(t.numel() * t.element_size() for t in tensors) / 2**20
        print(f"{name:44s} {len(tensors):4d} tensors {mib:8.2f} MiB {total:8.1f} us  "
              + "; ".join(f"{k} x{n} {us:.1f} us" for k, n, us in rows), flush=True)

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    image = torch.randn(32, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    row("image, in place (dense kernel, tiles of 3x256)", [image])
    row("image, in place (strided kernel, tiles 4 wide)", [image], dense=False)
    row("image, a contiguous copy first", [image], copy=True)
    row("a contiguous tensor of the image's size", [torch.randn(32, 224, 224, 3, device="cuda")])
    from benchmarks.overhead_row import build_model

    net, _x, _source = build_model("resnet18", "full", "cuda")  # torchvision's, else examples.models'

    weights = [q.detach() for q in net.parameters()] + [b for n, b in net.named_buffers() if "running" in n]
    row("ResNet-18 weights side", weights)
    row("ResNet-18 weights side, strided kernel only", weights, dense=False)
    row("  its contiguous tensors", [t for t in weights if t.is_contiguous()])
    row("  its strided tensors", [t for t in weights if not t.is_contiguous()])
    row("  its tensors of <= 1024 elements", [t for t in weights if t.numel() <= 1024])
    row("one tensor of 512 elements", [torch.randn(512, device="cuda")])
    row("one contiguous tensor of 24.5 MiB", [torch.randn(32, 64, 56, 56, device="cuda")])
    for shape in ((32, 64, 112, 112), (32, 64, 56, 56), (32, 128, 28, 28), (32, 256, 14, 14), (32, 512, 7, 7)):
        t = torch.randn(*shape, device="cuda").to(memory_format=torch.channels_last)
        mib = t.numel() * 4 / 2**20
        row(f"channels_last {mib:.1f} MiB, dense kernel", [t])
        row(f"channels_last {mib:.1f} MiB, strided kernel", [t], dense=False)
        row(f"  contiguous {mib:.1f} MiB", [t.contiguous()])
    return 0


if __name__ == "__main__":
    sys.exit(main())
