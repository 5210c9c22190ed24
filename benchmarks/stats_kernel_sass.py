"""Instructions and registers of the stats kernels compiled for a GPU, on any machine.

    python benchmarks/stats_kernel_sass.py [--kernels PATH] [--arch 90] [--kind float32]
        [--cb 64] [--vec 16]

Compiles ``_stats_kernel`` and ``_stats_kernel_perm`` (of the package, or of a variant
module: a copy of ``runtime/fused_stats_kernels.py`` or a ``.patch`` of it) with Triton's own ``ptxas`` for
``sm_<arch>`` (no GPU needed), disassembles them with its ``nvdisasm``, and prints each
kernel's registers and, per loop of its code (a backward branch), the instructions in the
loop's body and the most frequent opcodes. The main loops sum one tile a thread an
iteration (BLOCK / (32 * warps) elements): their instructions per tile, against those
of the other kernel or a variant, say where a kernel spends its issue slots.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _module(path: str | None):
    if path is None:
        from aoti_debug.runtime import fused_stats_kernels

        return fused_stats_kernels
    if path.endswith(".patch"):
        from stats_kernel_sides import patched_kernels

        path = patched_kernels(path)
    spec = importlib.util.spec_from_file_location("stats_kernels_variant", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def compile_kernel(fn, arch: int, kind: str, cb: int, vec_bytes: int):
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from aoti_debug.runtime import fused_stats as fs

    code, width, is_float = fs._KINDS[getattr(torch, kind)]
    vec = max(1, vec_bytes // width)
    ptr = {1: "*u8", 2: "*u16", 4: "*u32", 8: "*i64"}[width]
    sig = {"base": ptr, "tab": "*i64", "k": "i32", "part": "*fp64", "counters": "*i32", "out": "*fp64",
           "k_total": "i32"}
    consts = dict(KIND=code, WIDTH=width, IS_FLOAT=is_float, VEC=vec, BLOCK=fs.BLOCK, TBLOCK=fs._TBLOCK,
                  RBLOCK=fs._RBLOCK)
    if fn.__name__ == "_stats_kernel_perm":
        consts.update(CB=cb, TW=fs._PERM_TW)
    sig.update({k: "constexpr" for k in consts})
    aligned = [["tt.divisibility", 16]]
    attrs = {(i,): aligned for i in (0, 1, 3, 4, 5)}
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()},
                    attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": fs.NUM_WARPS})


def sass_loops(cubin: bytes, workdir: str) -> tuple[int, list[tuple[int, collections.Counter]]]:
    """(registers, [(instructions, opcodes) per loop]) of a cubin."""
    import triton

    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    path = os.path.join(workdir, "kernel.cubin")
    with open(path, "wb") as f:
        f.write(cubin)
    res = subprocess.run([os.path.join(tools, "cuobjdump"), "-res-usage", path], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+)", res)
    sass = subprocess.run([os.path.join(tools, "nvdisasm"), "-c", path], capture_output=True, text=True).stdout
    body: list[str] = []
    labels: dict[str, int] = {}
    for line in sass.splitlines():
        lab = re.match(r"^\s*(\.L\w+):", line)
        if lab:
            labels[lab.group(1)] = len(body)
            continue
        ins = re.match(r"^\s+/\*[0-9a-f]{4}\*/\s+(.*?);", line)
        if ins:
            body.append(ins.group(1).strip())
    loops = []
    for i, ins in enumerate(body):
        br = re.search(r"BRA\s+(?:\S+\s+)?`?\(?(\.L\w+)", ins)
        if br and br.group(1) in labels and labels[br.group(1)] <= i:
            part = body[labels[br.group(1)]: i + 1]
            loops.append((len(part), collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", b).split()[0] for b in part)))
    return int(m.group(1)) if m else -1, loops


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernels", default=None, help="a variant kernels module (default: the package's)")
    p.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 90 for H100/H200")
    p.add_argument("--kind", default="float32", help="torch dtype name of the tensors read")
    p.add_argument("--cb", type=int, default=64, help="the strided kernel's tile width (columns)")
    p.add_argument("--vec", type=int, default=16, choices=[1, 16], help="16: 16-byte aligned tensors; 1: not")
    p.add_argument("--top", type=int, default=12, help="opcodes shown per loop")
    args = p.parse_args()
    import tempfile

    mod = _module(args.kernels)
    with tempfile.TemporaryDirectory() as tmp:
        for fn in (mod._stats_kernel, mod._stats_kernel_perm):
            ck = compile_kernel(fn, args.arch, args.kind, args.cb, args.vec)
            regs, loops = sass_loops(ck.asm["cubin"], tmp)
            extra = f" CB={args.cb}" if fn.__name__ == "_stats_kernel_perm" else ""
            print(f"{fn.__name__} ({args.kind}, sm_{args.arch}, vec {args.vec} bytes{extra}): {regs} registers")
            for n, ops in loops:
                print(f"  loop of {n:4d} instructions: " + ", ".join(f"{k} {v}" for k, v in ops.most_common(args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
