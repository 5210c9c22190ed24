"""CPU reproduction for ``aoti-debug locate``: a custom op kills the process mid-graph.

The compiled graph is ``sin(x) + 1`` (an Inductor kernel), then ``locate_demo::boom``
(a custom op that crashes), then ``cos(z) * 2`` (another Inductor kernel)::

    aoti-debug locate -- python examples/locate_cpu_crash.py                  # Python wrapper
    aoti-debug locate -- python examples/locate_cpu_crash.py --wrapper cpp    # cpp_wrapper=True
    aoti-debug locate -- python examples/locate_cpu_crash.py --wrapper aoti   # AOTInductor .so

``--crash`` picks how the op fails: ``abort`` (SIGABRT), ``segv`` (a NULL read through
ctypes), ``raise`` (a Python exception), ``hang`` (sleeps; try ``locate --timeout``)
or ``none`` (runs clean). Without locate it simply crashes, and nothing says where.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import tempfile
import time

import torch
import torch._inductor

try:  # AOTI_DEBUG_LEVEL takes effect on import, also where the package is not pip-installed
    import aoti_debug  # noqa: F401
except ImportError:
    pass

CRASH = "abort"


@torch.library.custom_op("locate_demo::boom", mutates_args=())
def boom(x: torch.Tensor) -> torch.Tensor:
    if CRASH == "abort":
        os.abort()
    elif CRASH == "segv":
        ctypes.string_at(0)
    elif CRASH == "raise":
        raise RuntimeError("locate_demo::boom failed on purpose")
    elif CRASH == "hang":
        time.sleep(3600)
    return x * 3


@boom.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x) + 1
        z = boom(y)
        return torch.cos(z) * 2


def run(wrapper: str, x: torch.Tensor, dynamic: bool) -> torch.Tensor:
    model = Model()
    if wrapper in ("python", "cpp"):
        compiled = torch.compile(model, dynamic=dynamic, options={"cpp_wrapper": wrapper == "cpp"})
        return compiled(x)
    dims = ({0: torch.export.Dim("rows", min=2)},) if dynamic else None
    ep = torch.export.export(model, (x,), dynamic_shapes=dims)
    with tempfile.TemporaryDirectory() as d:
        package = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(d, "model.pt2"))
        return torch._inductor.aoti_load_package(package)(x)


def main() -> None:
    global CRASH
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wrapper", choices=["python", "cpp", "aoti"], default="python")
    p.add_argument("--crash", choices=["abort", "segv", "raise", "hang", "none"], default="abort")
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--dynamic", action="store_true", help="compile with a dynamic first dimension")
    args = p.parse_args()
    # Compiling never runs the op's real implementation (only its fake), so the crash
    # happens in the compiled graph's first run, between the two Inductor kernels.
    CRASH = args.crash
    out = run(args.wrapper, torch.randn(args.rows, 4), args.dynamic)
    print(f"ok: {args.wrapper} wrapper ran clean, output {tuple(out.shape)}")


if __name__ == "__main__":
    main()
