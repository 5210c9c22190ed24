"""Probe: is libstdc++ linked statically into AOTI .so files, and by which search path?

    python3 tools/gpu/probe_aoti_libstdcxx.py

Compiles examples/locate_ima_indexing.py's model with AOTI (CXX from the environment),
extracts the model .so from the package, and prints what it needs (ldd) and whether it
carries libstdc++'s own code (std::codecvt<char16_t> vtables: present only when
libstdc++.a was linked in), then loads it in this process and runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from examples.locate_ima_indexing import Model  # noqa: E402


def sh(cmd: str) -> str:
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()


def main() -> int:
    cxx = os.environ.get("CXX", "g++")
    print(f"CXX={cxx} LIBRARY_PATH={os.environ.get('LIBRARY_PATH')!r} LD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH')!r}")
    print(f"{cxx} -print-file-name=libstdc++.so -> {sh(cxx + ' -print-file-name=libstdc++.so')}")
    print(f"{cxx} -print-file-name=libstdc++.a  -> {sh(cxx + ' -print-file-name=libstdc++.a')}")
    print("libraries search:", sh(cxx + " -print-search-dirs | grep ^libraries")[:600])
    x = torch.randn(64, 128, device="cuda")
    idx = torch.arange(16, device="cuda")
    ep = torch.export.export(Model(), (x, idx))
    d = tempfile.mkdtemp()
    pkg = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(d, "m.pt2"))
    with zipfile.ZipFile(pkg) as z:
        sos = [n for n in z.namelist() if n.endswith(".so")]
        z.extractall(d, sos)
    for so in sos:
        path = os.path.join(d, so)
        print(f"{so}: ldd libstdc++ -> {sh(f'ldd {path} | grep -i stdc') or 'not needed (static or none)'}")
        print(f"   codecvt<char16_t> symbols defined: {sh(f'nm -C --defined-only {path} | grep -c codecvt.char16_t')}")
    print("loading in this process ...", flush=True)
    out = torch._inductor.aoti_load_package(pkg)(x, idx)
    torch.cuda.synchronize()
    print("loaded and ran:", tuple(out.shape))
    return 0


if __name__ == "__main__":
    sys.exit(main())
