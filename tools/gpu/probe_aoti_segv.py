"""Probe: which AOTInductor CUDA packages crash when loaded, and where (a native backtrace).

    python3 tools/gpu/probe_aoti_segv.py [--gdb] [VARIANT ...]

Each variant is exported, compiled with aoti_compile_and_package (at an aoti_debug level
or uninstrumented), then loaded and run in a fresh process. A load that dies on a signal
is run again under cuda-gdb (or gdb) with --gdb, and the top of its backtrace printed.
The system g++ is used (CXX=/usr/bin/g++): /opt/gcc/bin/g++ links libstdc++ statically,
a crash of its own (tools/gpu/probe_aoti.sh).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

if os.path.exists("/usr/bin/g++"):
    os.environ.setdefault("CXX", "/usr/bin/g++")

import torch  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import aoti_debug  # noqa: E402
from examples.models import MLP  # noqa: E402


class Indexing(torch.nn.Module):  # examples/locate_ima_indexing.py, indices in range
    def forward(self, x, idx):
        return (torch.softmax(x, dim=-1)[idx] * 3).sum(dim=-1) + 1


def variant(name):
    torch.manual_seed(0)
    model, level = name.rsplit("-", 1)
    if model.startswith("mlp"):
        m = MLP(64, 128, 32).cuda().eval()
        args = (torch.randn(16, 64, device="cuda"),)
        dyn = {"x": {0: torch.export.Dim("batch", min=2, max=256)}} if model == "mlp_dyn" else None
    else:
        m = Indexing()
        args = (torch.randn(64, 128, device="cuda"), torch.arange(16, device="cuda"))
        dyn = None
    return m, args, dyn, level


_LOAD = """
import faulthandler, sys, torch
faulthandler.enable()
r = torch._inductor.aoti_load_package(sys.argv[1])
args = torch.load(sys.argv[2])
out = r(*[a.cuda() for a in args])
torch.cuda.synchronize()
print("OK", [tuple(o.shape) for o in (out if isinstance(out, (list, tuple)) else [out])], flush=True)
"""


def main() -> int:
    use_gdb = "--gdb" in sys.argv
    names = [a for a in sys.argv[1:] if not a.startswith("--")] or [
        "mlp_dyn-off", "mlp_dyn-save", "mlp_static-save", "idx-off", "idx-names"]
    work = tempfile.mkdtemp(prefix="aoti_segv_")
    loader = os.path.join(work, "load.py")
    with open(loader, "w") as f:
        f.write(_LOAD)
    debugger = shutil.which("cuda-gdb") or shutil.which("gdb")
    print(f"torch {torch.__version__}, CXX={os.environ.get('CXX')}, debugger={debugger}", flush=True)
    for name in names:
        m, args, dyn, level = variant(name)
        try:
            ep = torch.export.export(m, args, dynamic_shapes=dyn)
            with aoti_debug.enabled(level=level) if level != "off" else torch.no_grad():
                pkg = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(work, name + ".pt2"))
        except Exception as e:  # noqa: BLE001
            print(f"[{name}] compile failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
            continue
        inputs = os.path.join(work, name + ".in.pt")
        torch.save([a.cpu() for a in args], inputs)
        env = dict(os.environ, AOTI_DEBUG_DIR=os.path.join(work, "dump", name))
        p = subprocess.run([sys.executable, loader, pkg, inputs], capture_output=True, text=True, env=env,
                           timeout=300)
        tail = " | ".join(p.stderr.strip().splitlines()[-4:])
        print(f"[{name}] rc={p.returncode} out={p.stdout.strip()[:80]!r} err={tail[:600]!r}", flush=True)
        if p.returncode < 0 and use_gdb and debugger:
            g = subprocess.run([debugger, "-q", "-batch", "-ex", "set pagination off", "-ex", "run", "-ex", "bt 25",
                                "--args", sys.executable, loader, pkg, inputs],
                               capture_output=True, text=True, env=env, timeout=400)
            lines = [x for x in (g.stdout + g.stderr).splitlines()
                     if not x.startswith(("[New Thread", "[Thread", "[Detaching")) and "warn" not in x.lower()]
            start = next((i for i, x in enumerate(lines) if "SIG" in x), max(0, len(lines) - 40))
            print("\n".join(f"   {x[:220]}" for x in lines[start:start + 40]), flush=True)
            use_gdb = False  # one backtrace is enough per run
    return 0


if __name__ == "__main__":
    sys.exit(main())
