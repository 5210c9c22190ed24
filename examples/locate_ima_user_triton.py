"""GPU reproduction for ``aoti-debug locate``: a user-defined Triton kernel stores far out of
bounds, between two ordinary Inductor kernels.

The compiled function is ``sin(x) + 1`` (Inductor), then ``oob_store_kernel`` (ours: it
writes ``FAR`` elements past the end of its output), then ``cos(out) * 2`` (Inductor)::

    aoti-debug locate -- python examples/locate_ima_user_triton.py                 # Python wrapper
    aoti-debug locate -- python examples/locate_ima_user_triton.py --wrapper cpp   # cpp_wrapper=True
    aoti-debug locate -- python examples/locate_ima_user_triton.py --wrapper aoti  # AOTInductor .so

Run alone, it dies with "CUDA error: an illegal memory access was encountered" at some
later call, and nothing says which kernel did it. ``--no-fault`` runs it clean.

The distance past the end is read from a tensor input, not baked into the kernel: the
C++ wrapper and AOTInductor run every kernel once at compile time on made-up inputs
(``triton.autotune_at_compile_time``; integer inputs are zeros there), and a constant
shift would fault in the compiler instead of in the run being located.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
import torch._inductor
import triton
import triton.language as tl

try:  # AOTI_DEBUG_LEVEL takes effect on import, also where the package is not pip-installed
    import aoti_debug  # noqa: F401
except ImportError:
    pass

BLOCK = 256
#: Elements past the output: 4 TiB of float32, far outside anything mapped.
FAR = 1 << 40


@triton.jit
def oob_store_kernel(in_ptr, shift_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(in_ptr + offs, mask=mask)
    shift = tl.load(shift_ptr)  # > 0: out of bounds
    tl.store(out_ptr + offs + shift, x, mask=mask)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x) + 1
        out = torch.empty_like(y)
        n = y.numel()
        # wrap_triton: traceable by torch.compile and by (non-strict) torch.export alike.
        kernel = torch.library.wrap_triton(oob_store_kernel)
        kernel[(triton.cdiv(n, BLOCK),)](y, shift, out, n, BLOCK=BLOCK)
        return torch.cos(out) * 2


def run(wrapper: str, x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    model = Model()
    if wrapper in ("python", "cpp"):
        return torch.compile(model, options={"cpp_wrapper": wrapper == "cpp"})(x, shift)
    ep = torch.export.export(model, (x, shift))
    with tempfile.TemporaryDirectory() as d:
        package = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(d, "model.pt2"))
        return torch._inductor.aoti_load_package(package)(x, shift)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wrapper", choices=["python", "cpp", "aoti"], default="python")
    p.add_argument("--no-fault", action="store_true", help="store in bounds (a clean run)")
    p.add_argument("--numel", type=int, default=1024)
    args = p.parse_args()
    x = torch.randn(args.numel, device="cuda")
    shift = torch.tensor([0 if args.no_fault else FAR], device="cuda", dtype=torch.int64)
    out = run(args.wrapper, x, shift)
    torch.cuda.synchronize()
    print(f"ok: {args.wrapper} wrapper ran clean, output {tuple(out.shape)}")


if __name__ == "__main__":
    main()
