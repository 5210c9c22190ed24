"""Probe: does an AOTI package (uninstrumented / instrumented) load in a *fresh* process?"""
import os, subprocess, sys, tempfile
import torch
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import aoti_debug

class M(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(16, 16)
    def forward(self, x):
        return torch.relu(self.l(x))

m = M().cuda(); x = torch.randn(4, 16, device="cuda")
d = tempfile.mkdtemp()
torch.save(x.cpu(), os.path.join(d, "x.pt"))
for level in ("off", "names", "save"):
    ep = torch.export.export(m, (x,))
    with aoti_debug.enabled(level=level):
        pkg = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(d, f"{level}.pt2"))
    for pre in ("", "torch.zeros(1, device='cuda'); "):
        code = (f"import faulthandler; faulthandler.enable(); import torch; {pre}"
                f"r = torch._inductor.aoti_load_package({pkg!r}); x = torch.load({os.path.join(d, 'x.pt')!r}).cuda(); "
                "print('OK', r(x).shape, flush=True)")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, AOTI_DEBUG_DIR=os.path.join(d, "dump")))
        print(f"level={level} cuda-init-first={bool(pre)} rc={p.returncode} out={p.stdout.strip()[:60]!r} err={p.stderr.strip().splitlines()[-3:] if p.stderr.strip() else ''}", flush=True)
