"""A long loop where NaN is first born at call 1,000: leave stats on with the flight
recorder, and the dump holds the last calls, what fired, and the birth launch's tensors.

    aoti-debug run --level stats --ring 3 --trigger nonfinite --dir dumps/long -- \\
        python examples/nan_in_long_run.py
    aoti-debug show dumps/long

Arguments (optional): the number of calls (default 1001), the call where ``sqrt``
first meets a negative input (default 1000) and the device (default cpu).
"""

from __future__ import annotations

import sys

import torch


def step(x, w):
    y = torch.sqrt(x) * 2  # NaN is born here once x < 0
    return torch.relu(y @ w).sum(0) + 1


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1001
    nan_at = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
    torch.manual_seed(0)
    w = torch.randn(8, 4, device=device)
    compiled = torch.compile(step)
    with torch.no_grad():
        for i in range(steps):
            x = torch.full((8, 8), nan_at - 1.5 - i, device=device)  # call i + 1: negative from call nan_at on
            out = compiled(x, w)
    print(f"{steps} calls; the last output holds {int(out.isnan().sum())} NaN")
