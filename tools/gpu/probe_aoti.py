"""Probe: does an uninstrumented AOTInductor package load and run on this GPU machine?

Run on the device machine; prints what it finds step by step (flushed), so a segfault
still leaves the last completed step in the log.
"""
import faulthandler
import os
import subprocess
import sys
import tempfile
import zipfile

faulthandler.enable()  # before torch: a crash while it loads is shown too

import torch  # noqa: E402

def say(*a):
    print("[probe]", *a, flush=True)

say("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())
class M(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(16, 16)
    def forward(self, x):
        return torch.relu(self.l(x))

dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"
m = M().to(dev); x = torch.randn(4, 16, device=dev)
ep = torch.export.export(m, (x,))
d = tempfile.mkdtemp()
level = os.environ.get("PROBE_LEVEL")  # compile instrumented at this aoti_debug level
if level:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    import aoti_debug
    with aoti_debug.enabled(level=level, dump_dir=os.path.join(d, "dump")):
        pkg = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(d, "m.pt2"))
else:
    pkg = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(d, "m.pt2"))
say("compiled", pkg)
names = zipfile.ZipFile(pkg).namelist()
say("package contents:", names)
so = [n for n in names if n.endswith(".so")]
if so:
    zipfile.ZipFile(pkg).extractall(d)
    for s in so:
        p = os.path.join(d, s)
        say("ldd", s, subprocess.run(["ldd", p], capture_output=True, text=True).stdout)
        say("readelf -d", subprocess.run(["readelf", "-d", p], capture_output=True, text=True).stdout[:3000])
say("cxx", torch._inductor.config.cpp.cxx, subprocess.run([str(torch._inductor.config.cpp.cxx[1] if isinstance(torch._inductor.config.cpp.cxx, tuple) else torch._inductor.config.cpp.cxx), "--version"], capture_output=True, text=True).stdout[:200])
say("loading package ...")
r = torch._inductor.aoti_load_package(pkg)
say("loaded; running ...")
y = r(x)
torch.cuda.synchronize() if dev == "cuda" else None
say("ran OK, max err", (y - m(x)).abs().max().item())
