"""The stats kernels, compiled for the H100/H200 (sm_90) here as the C++ runtime's pack
compiles them (Triton's own ptxas, no GPU needed), keep to the registers
``fused_stats.PROGRAMS_PER_SM`` assumes: a tensor's programs run in one wave only if that
many 128-thread programs fit an SM's 65536. Aligned tensors, tiles of 8 columns or more:
narrower strided tiles not 16-byte aligned take more (220-254) and are known to get fewer
programs a SM."""

from __future__ import annotations

import os
import sys

import pytest

pytestmark = pytest.mark.quick  # compiles nothing: make check runs it

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

pytest.importorskip("triton", reason="needs a C++ compiler toolchain: triton (its ptxas) is not installed")


@pytest.mark.parametrize("kind,cb", [("float32", 64), ("bfloat16", 64), ("float32", 512), ("float16", 8)])
def test_kernels_fit_the_programs_a_sm_the_planner_gives_them(tmp_path, kind, cb):
    import stats_kernel_sass as sass

    from aoti_debug.runtime import fused_stats as fs

    threads = 32 * fs.NUM_WARPS
    cubins = sass.compile_cubins(sass.kernels_path(None), 90, kind, cb, 16, str(tmp_path))
    assert [name for name, _ in cubins] == ["_stats_kernel", "_stats_kernel_perm", "_stats_kernel_dense"]
    for name, cubin in cubins:
        regs, loops = sass.sass_loops(cubin, str(tmp_path))
        assert 0 < regs and regs * threads * fs.PROGRAMS_PER_SM <= 65536, (name, kind, cb, regs)
        assert loops, "no loop found in the disassembly"
