"""A user-defined Triton kernel between two Inductor kernels, shared by the GPU tests of
both wrappers (importable without triton: HAVE_TRITON says whether it is there)."""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl

    @triton.jit
    def _scaled_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    HAVE_TRITON = True
except ImportError:  # pragma: no cover
    HAVE_TRITON = False


def user_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """relu(2 * sin(x) + y), the middle step in the user's kernel ``_scaled_add``."""
    a = torch.sin(x)
    out = torch.empty_like(a)
    n = out.numel()
    _scaled_add[(triton.cdiv(n, 128),)](a, y, out, n, BLOCK=128)
    return torch.relu(out)
