"""Device time of the fused stats kernel for each setting of its tiles, warps and programs.

    CXX=/usr/bin/g++ PYTHONPATH=. python3 benchmarks/stats_kernel_sweep.py

For each (BLOCK, warps, programs per SM, minimum tiles per program) it runs
``fused_stats.summarize`` on a few sides shaped like a transformer's and a ResNet's and
prints the kernel's device time per side (torch.profiler, 20 calls) and the bytes read per
second; ``DIFF`` marks a setting whose min/max/absmax/nan/inf or checksums differ from the
first setting's (mean and std may differ in their last bits). CUDA only.
"""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import torch  # noqa: E402

from aoti_debug.runtime import fused_stats as fs  # noqa: E402

CONFIGS = [(1024, 4, 4, 4), (1024, 8, 4, 4), (1024, 4, 8, 4), (2048, 4, 4, 4), (2048, 8, 4, 4), (2048, 8, 8, 2),
           (4096, 8, 4, 2), (512, 4, 8, 4), (512, 4, 16, 4), (1024, 4, 16, 2), (1024, 8, 8, 2)]


def main() -> int:
    if not torch.cuda.is_available():
        print("stats_kernel_sweep.py needs a CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    cases = {
        "act fp32 8x256x1024 x2 + W 1024^2": [torch.randn(8 * 256 * 1024, device=dev),
                                              torch.randn(8 * 256 * 1024, device=dev),
                                              torch.randn(1024 * 1024, device=dev)],
        "ffn fp32 8x256x4096": [torch.randn(8 * 256 * 4096, device=dev)],
        "bf16 32x64x56x56": [torch.randn(32 * 64 * 56 * 56, device=dev).bfloat16()],
        "bf16 32x512x7x7 x3": [torch.randn(32 * 512 * 7 * 7, device=dev).bfloat16() for _ in range(3)],
        "fp32 64K x10": [torch.randn(65536, device=dev) for _ in range(10)],
    }
    out = torch.zeros(9 * 64, dtype=torch.float64, device=dev)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ref = {}
    print("config (BLOCK, warps, programs/SM, min tiles) | " + " | ".join(cases))
    for cfg in CONFIGS:
        block, warps, per_sm, min_tiles = cfg
        fs.NUM_WARPS = warps
        fs._compiled.clear()
        fs._sides.clear()
        cells = []
        for name, ts in cases.items():
            for _ in range(3):
                fs.summarize(ts, into=(out, 0), _block=block, _max_programs=per_sm * sms, _min_tiles=min_tiles)
            torch.cuda.synchronize()
            r, k = out.clone(), len(ts)
            if name in ref:
                sa, ca = fs.unpack(ref[name])
                sb, cb = fs.unpack(r)
                same = torch.equal(ca[:k], cb[:k]) and torch.equal(sa[:k][:, [0, 1, 4, 5, 6]], sb[:k][:, [0, 1, 4, 5, 6]])
            else:
                ref[name], same = r, True
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    fs.summarize(ts, into=(out, 0), _block=block, _max_programs=per_sm * sms, _min_tiles=min_tiles)
                torch.cuda.synchronize()
            us = sum(e.device_time_total for e in prof.key_averages() if "stats_kernel" in e.key) / 20
            nbytes = sum(t.numel() * t.element_size() for t in ts)
            cells.append(f"{us:.1f}us {nbytes / us / 1e3:.0f}GB/s{'' if same else ' DIFF'}")
        print(f"{cfg} | " + " | ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
