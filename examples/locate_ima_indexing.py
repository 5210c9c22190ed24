"""GPU reproduction for ``aoti-debug locate``: an Inductor-generated kernel driven out of
bounds by an index tensor holding an out-of-range row, with device asserts off.

The compiled function is ``softmax(x)`` (Inductor reductions), then ``a[idx] * 3`` summed
over rows (an Inductor kernel with an indirect load: the one that faults)::

    aoti-debug locate -- python examples/locate_ima_indexing.py                 # Python wrapper
    aoti-debug locate -- python examples/locate_ima_indexing.py --wrapper cpp   # cpp_wrapper=True
    aoti-debug locate -- python examples/locate_ima_indexing.py --wrapper aoti  # AOTInductor .so

Inductor normally guards indirect indexing with a device assert
(``torch._inductor.config.assert_indirect_indexing``); it is switched off here, as in
production builds that turn it off for speed, so the bad index reads far outside ``a``
and the process dies with an illegal memory access. ``--asserts`` keeps the assert (the
fault is then a device-side assert in the same kernel); ``--no-fault`` runs it clean.
``--device cpu`` runs the same graph through C++ kernels: the bad index then segfaults
the process inside the Inductor-generated ``cpp_fused_*`` kernel.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
import torch._inductor
import torch._inductor.config

try:  # AOTI_DEBUG_LEVEL takes effect on import, also where the package is not pip-installed
    import aoti_debug  # noqa: F401
except ImportError:
    pass

#: A row index far past the 64 rows of ``x``: the load lands ~512 TiB away.
BAD_ROW = 1 << 40


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        a = torch.softmax(x, dim=-1)
        g = a[idx] * 3
        return g.sum(dim=-1) + 1


def run(wrapper: str, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    model = Model()
    if wrapper in ("python", "cpp"):
        return torch.compile(model, options={"cpp_wrapper": wrapper == "cpp"})(x, idx)
    ep = torch.export.export(model, (x, idx))
    with tempfile.TemporaryDirectory() as d:
        package = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(d, "model.pt2"))
        return torch._inductor.aoti_load_package(package)(x, idx)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wrapper", choices=["python", "cpp", "aoti"], default="python")
    p.add_argument("--asserts", action="store_true", help="keep Inductor's indirect-indexing device assert")
    p.add_argument("--no-fault", action="store_true", help="all indices in range (a clean run)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = p.parse_args()
    torch._inductor.config.assert_indirect_indexing = args.asserts
    x = torch.randn(64, 128, device=args.device)
    idx = torch.arange(16, device=args.device, dtype=torch.int64)
    if not args.no_fault:
        idx[5] = BAD_ROW
    out = run(args.wrapper, x, idx)
    if args.device == "cuda":
        torch.cuda.synchronize()
    print(f"ok: {args.wrapper} wrapper ran clean, output {tuple(out.shape)}")


if __name__ == "__main__":
    main()
