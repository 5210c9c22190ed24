"""One function that reaches every kind of launch Inductor emits on CPU, shared by the
Python-wrapper and C++-wrapper tests (custom ops register once per process)."""

from __future__ import annotations

import torch


@torch.library.custom_op("aoti_debug_test::scale_shift", mutates_args=())
def scale_shift(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s + 1


@scale_shift.register_fake
def _(x, s):
    return torch.empty_like(x)


@torch.library.custom_op("aoti_debug_test::add_into", mutates_args=("out",))
def add_into(x: torch.Tensor, out: torch.Tensor) -> None:
    out.add_(x)


def kinds_fn(x, idx, w):
    y = torch.sin(x) @ w                          # C++ kernel + extern mm
    y = scale_shift(y, 2.0)                       # custom op with an output (fallback)
    z = torch.sort(y, dim=-1).values              # aten fallback, two outputs
    acc = torch.zeros(8, z.shape[1])
    acc.index_put_((idx,), z, accumulate=True)    # index_put
    add_into(acc * 0.5, acc)                      # mutating custom op
    return torch.cos(acc)


def kinds_args():
    torch.manual_seed(0)
    return torch.randn(6, 5), torch.tensor([0, 2, 2, 5, 7, 1]), torch.randn(5, 4)
