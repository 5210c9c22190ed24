"""Instructions and registers of the stats kernels compiled for a GPU, on any machine.

    python benchmarks/stats_kernel_sass.py [--kernels PATH] [--arch 90] [--kind float32]
        [--cb 64] [--vec 16]

Compiles ``_stats_kernel``, ``_stats_kernel_perm`` and (where the module has it)
``_stats_kernel_dense`` (of the package, or of a variant
module: a copy of ``runtime/fused_stats_kernels.py`` or a ``.patch`` of it) as the C++
runtime's pack compiles them (``device_stats.Variant``: the same signature, constants and
alignment) with Triton's own ``ptxas`` for ``sm_<arch>`` (no GPU needed), disassembles
them with its ``nvdisasm``, and prints each
kernel's registers and, per loop of its code (a backward branch), the instructions in the
loop's body and the most frequent opcodes. The main loops sum one tile a thread an
iteration (BLOCK / (32 * warps) elements): their instructions per tile, against those
of the other kernel or a variant, say where a kernel spends its issue slots.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def kernels_path(path: str | None) -> str:
    """The kernels module's file: the package's, a variant's, or a ``.patch`` of the package's applied."""
    if path is None:
        from aoti_debug.runtime import fused_stats_kernels

        return fused_stats_kernels.__file__
    if path.endswith(".patch"):
        from stats_kernel_sides import patched_kernels

        return patched_kernels(path)
    return path


def compile_cubins(kernels: str, arch: int, kind: str, cb: int, vec_bytes: int, out: str) -> list[tuple[str, bytes]]:
    """``[(kernel name, cubin)]`` of the contiguous and the strided kernel of ``kernels`` for
    ``sm_<arch>``, compiled as the C++ runtime's pack compiles them (``device_stats.Variant``,
    ``stats_worker.compile_variants``: the same signature, constants and alignment), and of
    the dense kernel (tiles of ``BLOCK``) where ``kernels`` has one."""
    import torch

    from aoti_debug.codegen import device_stats
    from aoti_debug.codegen.stats_worker import compile_variants
    from aoti_debug.runtime import fused_stats as fs

    code, width, is_float = fs._KINDS[getattr(torch, kind)]
    vec = max(1, vec_bytes // width)
    pointer = device_stats._POINTER[kind]
    chosen = [device_stats.Variant(code, width, bool(is_float), vec, pointer),
              device_stats.Variant(code, width, bool(is_float), vec, pointer, cb)]
    with open(kernels, encoding="utf-8") as f:
        if "def _stats_kernel_dense(" in f.read():
            chosen.append(device_stats.Variant(code, width, bool(is_float), vec, pointer, dense=fs.BLOCK))
    jobs = [v.job() for v in chosen]
    job = {"kernels": os.path.abspath(kernels), "capability": arch, "num_warps": fs.NUM_WARPS, "out": out,
           "variants": jobs}
    cubins = []
    for j, r in zip(jobs, compile_variants(job)):
        with open(os.path.join(out, r["file"]), "rb") as f:
            cubins.append((j["kernel"], f.read()))
    return cubins


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

    with tempfile.TemporaryDirectory() as tmp:
        for name, cubin in compile_cubins(kernels_path(args.kernels), args.arch, args.kind, args.cb, args.vec, tmp):
            regs, loops = sass_loops(cubin, tmp)
            extra = f" CB={args.cb}" if name == "_stats_kernel_perm" else ""
            print(f"{name} ({args.kind}, sm_{args.arch}, vec {args.vec} bytes{extra}): {regs} registers")
            for n, ops in loops:
                print(f"  loop of {n:4d} instructions: " + ", ".join(f"{k} {v}" for k, v in ops.most_common(args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
