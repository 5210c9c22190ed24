"""fused_stats.summarize() against stats.device_stats / device_checksum.

On CPU the Triton kernel runs in Triton's interpreter: test_under_interpreter re-runs
this file in a subprocess with TRITON_INTERPRET=1 (the other kernel tests are deselected in the
parent process). tests/gpu/test_fused_stats_gpu.py runs the same cases compiled on
CUDA; ``make_cases`` and ``check`` are shared with it.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest
import torch

from aoti_debug.runtime import fused_stats
from aoti_debug.runtime.stats import device_checksum, device_stats

_KERNELS = "aoti_debug.runtime.fused_stats_kernels"


# ------------------------------------------------------------------------- shared


def make_cases(device: str) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs covering every dtype path, odd shapes, NaN/Inf, layouts."""
    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape, dtype=torch.float32, scale=1.0):
        return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype).to(device)

    def ints(lo, hi, *shape, dtype):
        return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype).to(device)

    nan, inf = float("nan"), float("inf")
    out: list[tuple[str, torch.Tensor]] = []
    shapes = [(), (0,), (1,), (5,), (1000,), (33, 65), (2, 0, 3), (3000,)]
    for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        name = str(dt).replace("torch.", "")
        for shape in shapes:
            out.append((f"{name}{list(shape)}", rnd(*shape, dtype=dt, scale=3.0)))
        x = rnd(2049, dtype=dt)
        x[::7] = nan
        x[3::11] = inf
        x[5::13] = -inf
        out.append((f"{name}-nan-inf", x))
        out.append((f"{name}-all-nan", torch.full((37,), nan, dtype=dt, device=device)))
        out.append((f"{name}-all-inf", torch.tensor([inf, -inf, inf], dtype=dt, device=device)))
        out.append((f"{name}-one-finite", torch.tensor([nan, 2.5, inf, nan], dtype=dt, device=device)))
        out.append((f"{name}-nan-first", torch.cat([torch.full((3,), nan, dtype=dt, device=device), rnd(500, dtype=dt)])))
    # precision: a large mean and a small spread
    out.append(("float32-offset", (1e4 + rnd(5000, dtype=torch.float64, scale=1e-3)).float()))
    out.append(("float64-offset", 1e6 + rnd(5000, dtype=torch.float64, scale=1e-4)))
    out.append(("float32-huge", rnd(700, scale=1e30)))
    # worst case for the shifted sums: the shift (a chunk's first element) is an outlier
    x = rnd(9000)
    x[0], x[4096], x[8192] = 1e6, -3e5, 7e5
    out.append(("float32-outlier-first", x))
    x = rnd(9000, dtype=torch.float64)
    x[0], x[4096] = 1e12, -1e11
    out.append(("float64-outlier-first", x))
    # every bit pattern of the small float formats (subnormals, inf, NaN)
    out.append(("float16-all-bits", torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16).to(device)))
    out.append(("bfloat16-all-bits", torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).to(device)))
    for dt in (torch.float8_e4m3fn, torch.float8_e5m2):
        name = str(dt).replace("torch.", "")
        out.append((f"{name}-all-bits", torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dt).to(device)))
        out.append((f"{name}-rand", rnd(300, 7, scale=4.0).to(dt)))
        out.append((f"{name}-empty", torch.empty(0, dtype=dt, device=device)))
    # integers and bool
    out.append(("bool", ints(0, 2, 1001, dtype=torch.bool)))
    out.append(("bool-one", torch.tensor([True], device=device)))
    out.append(("bool-empty", torch.empty(0, 3, dtype=torch.bool, device=device)))
    out.append(("uint8", ints(0, 256, 4099, dtype=torch.uint8)))
    out.append(("int8", ints(-128, 128, 4099, dtype=torch.int8)))
    out.append(("int16", ints(-(2**15), 2**15, 3001, dtype=torch.int16)))
    out.append(("int32", ints(-(2**31), 2**31, 3001, dtype=torch.int32)))
    out.append(("int32-scalar", torch.tensor(-7, dtype=torch.int32, device=device)))
    out.append(("int64", ints(-(2**62), 2**62, 3001, dtype=torch.int64)))
    out.append(("int64-small", ints(-50, 50, 129, dtype=torch.int64)))
    out.append(("int64-extremes", torch.tensor([-(2**63), 2**63 - 1, 0, -1, 2**53 + 1], dtype=torch.int64, device=device)))
    out.append(("int64-empty", torch.empty(0, dtype=torch.int64, device=device)))
    out.append(("uint16", ints(0, 2**16, 999, dtype=torch.int64).to(torch.uint16)))
    out.append(("uint32", ints(0, 2**32, 999, dtype=torch.int64).to(torch.uint32)))
    out.append(("uint64", torch.tensor([0, 1, 2**62, 2**63 - 1, 12345], dtype=torch.int64, device=device).view(torch.uint64)))
    # complex (as their real view)
    c = torch.complex(rnd(300, 3), rnd(300, 3))
    c[7, 1] = complex(nan, 1.0)
    out.append(("complex64", c))
    out.append(("complex128", torch.complex(rnd(513, dtype=torch.float64), rnd(513, dtype=torch.float64))))
    out.append(("complex128-empty", torch.empty(0, dtype=torch.complex128, device=device)))
    out.append(("complex32", torch.complex(rnd(64), rnd(64)).to(torch.complex32)))
    # layouts: non-contiguous, stride 0, offsets that break 16-byte alignment
    out.append(("transposed", rnd(37, 53).t()))
    out.append(("step-slice", rnd(4000)[1::3]))
    out.append(("expanded", rnd(5, 1).expand(5, 300)))
    out.append(("permuted-3d", rnd(4, 5, 6, dtype=torch.float16).permute(2, 0, 1)))
    out.append(("bool-transposed", ints(0, 2, 17, 19, dtype=torch.bool).t()))
    out.append(("int64-transposed", ints(-9, 9, 6, 70, dtype=torch.int64).t()))
    out.append(("complex-transposed", torch.complex(rnd(9, 11), rnd(9, 11)).t()))
    out.append(("float32-offset1", rnd(3001)[1:]))
    out.append(("float32-offset3", rnd(3001)[3:]))
    out.append(("float16-offset1", rnd(2001, dtype=torch.float16)[1:]))
    out.append(("float64-offset1", rnd(2001, dtype=torch.float64)[1:]))
    out.append(("int8-offset1", ints(-128, 128, 2001, dtype=torch.int8)[1:]))
    out.append(("uint8-offset5", ints(0, 256, 2001, dtype=torch.uint8)[5:]))
    out.append(("requires-grad", rnd(100).requires_grad_()))
    # torch-op fallback inside a batch
    out.append(("float8_e4m3fnuz", rnd(50).to(torch.float8_e4m3fnuz)))
    return out


#: Every dtype the kernel decodes (complex ones as their real view).
DTYPES = [torch.bool, torch.uint8, torch.int8, torch.float8_e4m3fn, torch.float8_e5m2, torch.int16, torch.float16,
          torch.bfloat16, torch.int32, torch.float32, torch.int64, torch.float64, torch.uint16, torch.uint32,
          torch.uint64, torch.complex32, torch.complex64, torch.complex128]


def values(shape, dtype: torch.dtype, device: str, g: torch.Generator, special: bool = True) -> torch.Tensor:
    """A contiguous tensor of ``dtype`` with varied values (NaN/Inf among floats when ``special``)."""
    n = math.prod(shape)
    if dtype == torch.bool:
        t = torch.randint(0, 2, (n,), generator=g).bool()
    elif dtype.is_complex:
        t = torch.complex(torch.randn(n, generator=g), torch.randn(n, generator=g) * 3).to(dtype)
    elif dtype.is_floating_point:
        t = (torch.randn(n, generator=g, dtype=torch.float64) * 5).to(dtype)
        if special and n > 8 and dtype != torch.float8_e4m3fn:  # e4m3fn: no inf
            t[3::17] = float("nan")
            t[5::23] = float("inf")
            t[7::29] = float("-inf")
    elif dtype == torch.uint64:
        t = torch.randint(0, 2**62, (n,), generator=g).view(torch.uint64)
    else:
        info = torch.iinfo(dtype)
        lo, hi = max(info.min, -(2**62)), min(info.max, 2**62)
        t = torch.randint(lo, hi, (n,), generator=g).to(dtype)
    return t.view(shape).to(device)


def make_permuted_cases(device: str, big: int = 1) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs of strided tensors read in place by the strided kernel: those
    whose elements fill a dense block of memory in another order than the logical one, and
    those with gaps, stride-0 dims or overlaps around a unit-stride run; and strided tensors
    read from a copy. ``big`` multiplies the leading sizes (the GPU test)."""
    g = torch.Generator(device="cpu").manual_seed(5)
    out: list[tuple[str, torch.Tensor]] = []

    def v(*shape, dtype=torch.float32, special=True):
        return values(shape, dtype, device, g, special)

    for dt in DTYPES:
        name = str(dt).replace("torch.", "")
        out.append((f"{name}-transposed", v(9 * big, 13, dtype=dt).t()))
        out.append((f"{name}-channels-last", v(2 * big, 5, 6, 7, dtype=dt).to(memory_format=torch.channels_last)))
        out.append((f"{name}-permuted-offset", v(3 + 4 * 5 * 6 * big, dtype=dt)[3:].view(4 * big, 5, 6).permute(1, 2, 0)))
        # k of a fused QKV buffer [B, S, 3*H*D] as [B, H, S, D]: rows of D with gaps between them
        out.append((f"{name}-qkv-slice", v(2 * big, 5, 3 * 3 * 4, dtype=dt)[..., 12:24].view(2 * big, 5, 3, 4)
                    .transpose(1, 2)))
        out.append((f"{name}-expanded", v(3 * big, 1, 7, dtype=dt).expand(3 * big, 4, 7)))  # a stride-0 dim
    for dt in (torch.float16, torch.bfloat16, torch.float32, torch.int8):
        name = str(dt).replace("torch.", "")
        out.append((f"{name}-channels-last-3d",
                    v(2 * big, 3, 4, 5, 6, dtype=dt).to(memory_format=torch.channels_last_3d)))
        out.append((f"{name}-channels-last-c64", v(2 * big, 64, 5, 3, dtype=dt).to(memory_format=torch.channels_last)))
        out.append((f"{name}-attention", v(2 * big, 16, 3, 8, dtype=dt).permute(0, 2, 1, 3)))
        out.append((f"{name}-attention-kt", v(2 * big, 16, 3, 8, dtype=dt).permute(0, 2, 3, 1)))
        # a storage offset of 16 bytes: the 16-byte vector form where the runs allow it
        out.append((f"{name}-permuted-4d-offset16",
                    v(64 + 3 * 4 * 5 * 8 * big, dtype=dt)[16 // dt.itemsize:][:3 * 4 * 5 * 8 * big]
                    .view(3 * big, 4, 5, 8).permute(3, 1, 0, 2)))
        # gaps whose rows start 16-byte aligned (the vector form), and rows that do not
        out.append((f"{name}-qkv-slice-vec", v(2 * big, 4, 3 * 2 * 16, dtype=dt)[..., 32:64].view(2 * big, 4, 2, 16)
                    .transpose(1, 2)))
        # 16-byte aligned start and runs of 32, rows one element past a 16-byte boundary
        off = 16 // dt.itemsize
        out.append((f"{name}-gaps-rows-unaligned", v(9 * big, 33 + off, dtype=dt)[:, off:off + 32]))
        out.append((f"{name}-narrow-permuted", v(4 * big, 6, 10, dtype=dt).permute(0, 2, 1).narrow(2, 1, 4)))
        out.append((f"{name}-select-channels-last",
                    v(2 * big, 8, 5, 6, dtype=dt).to(memory_format=torch.channels_last)[:, :, 2]))
        out.append((f"{name}-overlapping", v(5 + 4 * 9 * big + 16, dtype=dt).as_strided((9 * big, 16), (4, 1), 5)))
        out.append((f"{name}-overlapping-vec", v(16 * 7 * big + 32, dtype=dt).as_strided((7 * big, 32), (16, 1))))
        out.append((f"{name}-mask-expanded", v(2 * big, 1, 6, 6, dtype=dt).expand(2 * big, 5, 6, 6)))
    for dt in DTYPES:  # dense in another order, dims a tile fits: the dense kernel
        name = str(dt).replace("torch.", "")
        out.append((f"{name}-channels-last-dense", v(2 * big, 32, 4, 4, dtype=dt).to(memory_format=torch.channels_last)))
        # runs of 3 channels: tiles of 3 x 256 elements (3 x 16 with tiles of 64), the lanes past them masked
        out.append((f"{name}-channels-last-rgb", v(2 * big, 3, 16, 16, dtype=dt).to(memory_format=torch.channels_last)))
    # the tile of 1024 does not fit (1024 / 256 = 4 does not divide 2 * 3), half of it does
    out.append(("float32-channels-last-half-tile", v(2 * big, 256, 2, 3).to(memory_format=torch.channels_last)))
    out.append(("float32-dense-3-tile-dims", v(4 * big, 2, 8, 128).permute(2, 1, 0, 3)))
    out.append(("float32-long-rows", v(3, 1100 * big).t()))     # a run of 1100: column blocks of any tile
    out.append(("float32-short-rows", v(700 * big, 3).t()))     # a run of 3
    out.append(("float32-run-65", v(65, 37 * big).t()))         # a run no tile width divides
    out.append(("float64-outlier-first", v(50 * big, 40, dtype=torch.float64, special=False).mul_(1e-3)
                .index_fill_(0, torch.tensor([0], device=device), 1e9).t()))
    out.append(("float32-unit-dims", v(1, 7 * big, 1, 9).permute(3, 2, 1, 0)))
    out.append(("float32-unit-dims-2", v(5 * big, 1, 6).transpose(0, 2)))
    out.append(("float32-channels-last-c1", v(2 * big, 1, 4, 5).to(memory_format=torch.channels_last)))
    out.append(("float32-merged-dims", v(2 * big, 3, 4, 5).permute(2, 3, 0, 1)))  # memory [N*C, H*W]
    out.append(("float32-6-row-dims", v(*[2] * 6, 3 * big).permute(*reversed(range(7)))))
    out.append(("float32-7-row-dims", v(*[2] * 7, 3 * big).permute(*reversed(range(8)))))  # over the limit: a copy
    out.append(("float32-empty-permuted", v(0, 3, 4).permute(2, 0, 1)))
    out.append(("float16-empty-channels-last", v(0, 3, 4, 5, dtype=torch.float16).to(memory_format=torch.channels_last)))
    out.append(("float32-step-2", v(8 * big, 10)[:, ::2]))                 # no unit-stride dim: a copy
    out.append(("float32-step-2-transposed", v(8 * big, 10)[:, ::2].t()))  # no unit-stride dim: a copy
    out.append(("float32-all-expanded", v(1, 1).expand(5 * big, 30)))      # no unit-stride dim: a copy
    out.append(("float32-gaps-transposed", v(8 * big, 10)[:, 1:9].t()))    # gaps, transposed
    out.append(("float32-expanded-transposed", v(5 * big, 1).expand(5 * big, 30).t()))
    out.append(("float32-gaps-7-row-dims", v(*[2] * 7, 5 * big)[..., 1:4].permute(*reversed(range(8)))))  # a copy
    out.append(("float32-gaps-6-row-dims", v(*[2] * 6, 5 * big)[..., 1:4].permute(*reversed(range(7)))))
    out.append(("int64-gaps-long-rows", v(3, 1200 * big, dtype=torch.int64)[:, 50:1150]))  # runs of 1100 in place
    out.append(("float64-select-last", v(6 * big, 7, 3, dtype=torch.float64)[..., 1]))     # no unit-stride dim: a copy
    return out


def read_in_place(t: torch.Tensor) -> bool:
    """Whether the kernel reads ``t`` itself with the permuted kernel (no copy)."""
    prep = fused_stats._prepare(t)
    return prep is not None and prep[2] is not None and prep[1].data_ptr() == t.data_ptr()


def _scale(exp: torch.Tensor) -> float:
    absmax = float(exp[4])
    return absmax if math.isfinite(absmax) and absmax > 0 else 1.0


def check(tensors: list[torch.Tensor], names: list[str], **kw) -> None:
    """summarize(tensors) equals the per-tensor torch path: exact where exact, else ~1e-12."""
    stats, sums = fused_stats.summarize(tensors, **kw)
    assert not fused_stats._broken, "a kernel failed: the rows came from the torch-op fallback"
    k = len(tensors)
    assert stats.shape == (k, 8) and stats.dtype == torch.float64
    assert sums.shape == (k,) and sums.dtype == torch.int64
    assert stats.device == tensors[0].device and sums.device == tensors[0].device
    stats, sums = stats.cpu(), sums.cpu()
    for i, (t, name) in enumerate(zip(tensors, names)):
        exp, exp_c = device_stats(t.detach()).cpu(), int(device_checksum(t.detach()))
        got = stats[i]
        assert int(sums[i]) == exp_c, f"{name}: checksum {int(sums[i]):x} != {exp_c:x}"
        exact = [0, 1, 4, 5, 6, 7]  # min max absmax nan inf count
        torch.testing.assert_close(got[exact], exp[exact], rtol=0, atol=0, equal_nan=True,
                                   msg=lambda m, name=name: f"{name}: {m}\n got {got.tolist()}\n exp {exp.tolist()}")
        s = _scale(exp)
        torch.testing.assert_close(got[2], exp[2], rtol=1e-12, atol=1e-12 * s, equal_nan=True,
                                   msg=lambda m, name=name: f"{name} mean: {m}")
        torch.testing.assert_close(got[3], exp[3], rtol=1e-9, atol=1e-12 * s, equal_nan=True,
                                   msg=lambda m, name=name: f"{name} std: {m}")


# ------------------------------------------------------------------------- CPU (interpreter)


def _numpy_index_shim() -> None:
    """Triton 3.6's interpreter does ``int(ndarray of shape (1,))`` for loop bounds,
    which numpy >= 2.4 refuses; read the one element instead (test-only patch)."""
    from triton.runtime import interpreter

    orig = getattr(interpreter, "_patch_lang_tensor", None)
    if orig is None or getattr(orig, "_aoti_shim", False):
        return

    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._aoti_shim = True
    interpreter._patch_lang_tensor = patched


#: Triton picks interpreter or compiler when each @jit function is defined, its own
#: library included, so TRITON_INTERPRET=1 must be set before triton is imported:
#: test_under_interpreter re-runs this file in a fresh interpreter with it set.
INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") == "1"


@pytest.mark.not_interpreted
def test_under_interpreter():
    pytest.importorskip("triton", reason="triton is not installed: the fused stats kernel cannot be tested")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TRITON_INTERPRET="1", AOTI_DEBUG_FUSED_STATS="1")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                           os.path.abspath(__file__)], env=env, cwd=repo, capture_output=True, text=True, timeout=1500)
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    summary = [line for line in proc.stdout.splitlines() if " passed" in line]
    assert summary and "failed" not in summary[-1] and "error" not in summary[-1], tail
    assert "skipped" not in summary[-1], tail


@pytest.fixture(scope="module")
def interpreted():
    """The fused kernel under Triton's interpreter (tests/conftest.py runs the tests that
    use it only with TRITON_INTERPRET=1: test_under_interpreter starts that process)."""
    assert INTERPRETING
    assert not (_KERNELS in sys.modules and not fused_stats._interpreted), \
        "the kernel was compiled for the GPU in this process"
    _numpy_index_shim()
    kernel = fused_stats._kernel()
    assert kernel is not None and fused_stats._interpreted, "triton's interpreter is not usable here"
    assert fused_stats.enabled_for(torch.device("cpu"))
    return kernel


CASES = make_cases("cpu")


@pytest.mark.parametrize("name,t", CASES, ids=[n for n, _ in CASES])
def test_each_case(interpreted, name, t):
    check([t], [name])


BIG = [c for c in CASES if c[1].numel() > 200]


@pytest.mark.parametrize("name,t", BIG, ids=[n for n, _ in BIG])
def test_each_case_many_programs(interpreted, name, t):
    # small tiles and few or many programs per tensor: multi-tile loops, tails, combination
    small = 32 if t.numel() <= 5000 else 512  # the interpreter is slow on the 64K-element cases
    check([t], [name], _block=2 * small, _max_programs=3)
    check([t], [name], _block=small, _max_programs=50)
    check([t], [name], _min_tiles=1, _max_programs=1000)  # the GPU test's variant


def test_a_nonfinite_value_inside_a_whole_tile_reads_the_chunk_again(interpreted):
    # The contiguous kernel sums whole tiles without looking at each value (_acc_fast); a
    # NaN or an infinity there makes the program sum its chunk again with _acc. Each value
    # here sits in a whole tile (neither a program's first tile nor a partial last one),
    # alone in its tensor; the channels_last copies hold the strided kernel to the same.
    g = torch.Generator().manual_seed(11)
    cases = []
    for dt in (torch.float32, torch.bfloat16, torch.float64):
        for bad in (float("nan"), float("inf"), float("-inf")):
            x = torch.randn(4 * 512, generator=g, dtype=torch.float64).to(dt)
            x[1000] = bad
            cases.append((f"{dt}-{bad}", x))
            y = torch.randn(2, 64, 4, 4, generator=g, dtype=torch.float64).to(dt)
            y = y.contiguous(memory_format=torch.channels_last)
            y.permute(0, 2, 3, 1).view(-1)[900] = bad  # in memory order: inside the strided kernel's second tile
            cases.append((f"{dt}-{bad}-channels-last", y))
    for name, t in cases:
        assert read_in_place(t) == (not t.is_contiguous())
        check([t], [name], _block=256, _max_programs=2)  # programs of 4 tiles: the first, two whole, the last
    # the finite versions: no value to look at again, the same fields as the torch path
    for name, t in cases:
        t = torch.nan_to_num(t.double(), nan=0.5, posinf=2.0, neginf=-3.0).clamp(-1e10, 1e10).to(t.dtype)
        check([t], [name + "-finite"], _block=256, _max_programs=2)


def test_partials_combined_in_one_pass_or_in_steps(interpreted):
    # The last program loads every partial once when there are at most _RBLOCK of them,
    # else combines them _RBLOCK at a time in two passes: both give the exact fields alike.
    t = torch.randn(24, 250, generator=torch.Generator().manual_seed(3)) * 40 + 7
    t[3, 5], t[9, 1] = float("nan"), float("-inf")
    ts = [t, t[:, :100].t()]  # the contiguous kernel and the strided one
    assert fused_stats._RBLOCK < 6000 // 8
    one = fused_stats.summarize(ts, _block=8, _min_tiles=1, _max_programs=fused_stats._RBLOCK)
    steps = fused_stats.summarize(ts, _block=8, _min_tiles=1, _max_programs=6000)  # 750 programs for t
    assert torch.equal(one[1], steps[1])
    exact = [0, 1, 4, 5, 6, 7]
    torch.testing.assert_close(one[0][:, exact], steps[0][:, exact], rtol=0, atol=0)
    torch.testing.assert_close(one[0], steps[0], rtol=1e-12, atol=0, equal_nan=True)
    check(ts, ["24x250", "24x100 transposed"], _block=8, _min_tiles=1, _max_programs=6000)


def test_all_cases_in_one_batch(interpreted):
    names = [n for n, _ in CASES]
    tensors = [t for _, t in CASES]
    assert len(tensors) > fused_stats._TBLOCK  # the tensor lookup takes several steps
    check(tensors, names, _block=256, _max_programs=4)


def test_repeat_and_counters_reset(interpreted):
    ts = [torch.randn(3000), torch.arange(100), torch.randn(7, 9).t()]
    a = fused_stats.summarize(ts, _block=64, _max_programs=5)
    b = fused_stats.summarize(ts, _block=64, _max_programs=5)
    assert torch.equal(a[1], b[1])
    torch.testing.assert_close(a[0], b[0], equal_nan=True, rtol=0, atol=0)
    cpu = torch.device("cpu")
    part, counters = fused_stats._scratch_for(fused_stats._stream_key(cpu), cpu, 1, 3)
    assert int(counters.abs().sum()) == 0


def test_packed_buffer(interpreted):
    ts = [torch.randn(10), torch.tensor([1, 2, 3])]
    buf = fused_stats.summarize(ts, packed=True)
    assert buf.shape == (18,) and buf.dtype == torch.float64
    s, c = fused_stats.unpack(buf.clone())
    s2, c2 = fused_stats.summarize(ts)
    torch.testing.assert_close(s, s2, rtol=0, atol=0)
    assert torch.equal(c, c2)


@pytest.mark.parametrize("first", [5, 8, 16, 20])  # multiples of 8: rows addressed relative to `first`
def test_into_rows_of_a_ring(interpreted, first):
    """Rows first..first+k-1 of a larger packed buffer (a device ring's segment) get what
    summarize() alone returns; the other rows are untouched."""
    ts = [torch.randn(10), torch.tensor([1, 2, 3]), torch.randn(5, 4).t(), torch.tensor([float("nan"), 1.0])]
    ring = torch.full((9 * 24,), 7.0, dtype=torch.float64)
    assert fused_stats.summarize(ts, into=(ring, first)) is ring
    s, c = fused_stats.unpack(ring)
    s2, c2 = fused_stats.summarize(ts)
    end = first + len(ts)
    torch.testing.assert_close(s[first:end], s2, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(c[first:end], c2)
    untouched = torch.full((9 * 24,), 7.0, dtype=torch.float64)
    us, uc = fused_stats.unpack(untouched)
    assert torch.equal(s[:first], us[:first]) and torch.equal(s[end:], us[end:])
    assert torch.equal(c[:first], uc[:first]) and torch.equal(c[end:], uc[end:])


def test_into_torch_path_rows(monkeypatch):
    monkeypatch.setattr(fused_stats, "ENABLED", False)
    ts = [torch.randn(10), torch.tensor([1, 2, 3])]
    ring = torch.zeros(9 * 4, dtype=torch.float64)
    fused_stats.summarize(ts, into=(ring, 2))
    s, c = fused_stats.unpack(ring)
    s2, c2 = fused_stats.summarize(ts)
    torch.testing.assert_close(s[2:4], s2, rtol=0, atol=0)
    assert torch.equal(c[2:4], c2) and not s[:2].any()


@pytest.mark.parametrize("first", [-1, 3])
def test_into_rows_must_fit(first):
    with pytest.raises(ValueError, match="do not fit"):
        fused_stats.summarize([torch.randn(3), torch.randn(2)], into=(torch.zeros(9 * 4, dtype=torch.float64), first))


def test_kernel_failure_falls_back(interpreted, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("simulated launch failure")

    monkeypatch.setattr(fused_stats, "_launch", boom)
    names = [n for n, _ in CASES[:20]]
    check([t for _, t in CASES[:20]], names)


def test_disabled_uses_torch_path(monkeypatch):
    monkeypatch.setattr(fused_stats, "ENABLED", False)
    assert not fused_stats.enabled_for(torch.device("cpu"))
    sub = CASES[::5]
    check([t for _, t in sub], [n for n, _ in sub])


def test_rejects_mixed_devices_and_empty():
    with pytest.raises(ValueError):
        fused_stats.summarize([])
    with pytest.raises(ValueError):
        fused_stats.summarize([torch.zeros(1), torch.zeros(1, device="meta")])


def test_kernel_was_used(interpreted, monkeypatch):
    """The cases above ran through the kernel, not silently through the fallback."""
    from aoti_debug.runtime import session

    calls = []
    real = fused_stats._launch
    monkeypatch.setattr(fused_stats, "_launch", lambda *a, **k: (calls.append(a[2][0]), real(*a, **k)))
    before = len(session.FAILURES)
    check([t for _, t in CASES], [n for n, _ in CASES])
    assert not [f for f in session.FAILURES[before:] if f[0].startswith("fused-stats")]
    assert sorted(set(calls)) == list(range(15))  # every kind code launched
    assert not fused_stats._broken


def test_side_key_holds_what_decides_a_sides_launches():
    """A side's launches are repeated only for the same reads: the key is the stream and
    each tensor's address, numel and dtype as the kernel reads it, with the shape and
    strides of a permuted-dense tensor (read in place), and a contiguous copy of any other
    strided tensor (which the planned path then reads too); a tensor the kernel does not
    take as it is (misaligned, complex, negated view) gives no key."""
    a, b = torch.randn(64), torch.arange(10)
    key, ready = fused_stats._side_key([a, b], ("s", 7))
    assert key == (("s", 7), a.data_ptr(), 64, torch.float32, b.data_ptr(), 10, torch.int64)
    assert ready[0] is a and ready[1] is b
    assert fused_stats._side_key([a.view(8, 8)], ("s", 7))[0] == (("s", 7), a.data_ptr(), 64, torch.float32)
    t = torch.randn(8, 8).t()
    key, ready = fused_stats._side_key([a, t], ("s", 7))
    assert ready[1] is t and key[4:] == (t.data_ptr(), 64, torch.float32, (8, 8), (1, 8))
    # the same memory read in another order is another launch
    assert fused_stats._side_key([a.view(8, 8).t()], ("s", 7))[0] != fused_stats._side_key([a.view(8, 8)], ("s", 7))[0]
    c = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    key, ready = fused_stats._side_key([c], ("s", 7))
    assert ready[0] is c and key[1:] == (c.data_ptr(), 120, torch.float32, (2, 3, 4, 5), (60, 1, 15, 3))
    # gaps between rows: read in place, keyed by address (with the storage offset) and strides
    rows = torch.randn(4, 64)
    q, r = rows[:, :16], rows.as_strided((4, 16), (32, 1))
    kq, kr = fused_stats._side_key([q], ("s", 7)), fused_stats._side_key([r], ("s", 7))
    assert kq[1][0] is q and kq[0][1:] == (q.data_ptr(), 64, torch.float32, (4, 16), (64, 1))
    assert q.data_ptr() == r.data_ptr() and q.shape == r.shape and kq[0] != kr[0]
    assert fused_stats._side_key([rows[:, 16:32]], ("s", 7))[0] != kq[0]
    g = torch.randn(8, 8)[:, ::2]  # a gap between elements: read from a contiguous copy
    key, ready = fused_stats._side_key([a, g], ("s", 7))
    assert ready[1].is_contiguous() and torch.equal(ready[1], g) and key[4] == ready[1].data_ptr() != g.data_ptr()
    assert len(key) == 7
    raw = bytearray(64)
    odd = torch.frombuffer(raw, dtype=torch.int64, offset=4, count=4)  # an int64 at a 4-byte boundary
    assert odd.data_ptr() % 8 and fused_stats._side_key([odd], ("s", 7)) is None
    assert fused_stats._side_key([torch.randn(4, dtype=torch.complex64)], ("s", 7)) is None
    assert fused_stats._side_key([torch._neg_view(a)], ("s", 7)) is None


def test_a_sides_repeated_launch_follows_the_ring_row():
    """The kept launches are replayed with the output address and row count of the ring
    rows the side got this time (rows relative to ``first``, as summarize addresses them),
    and not at all where the output's alignment changed or launch hooks are installed."""
    from triton import knobs

    runs = []

    class Compiled:
        function, packed_metadata = "fn", "meta"

        def run(self, *args):
            runs.append(args)

    kept = fused_stats._Launch(Compiled(), 12, 99, (1, 2, 3, 4, 5), ("consts",), True, ())
    out = torch.zeros(9 * 64, dtype=torch.float64)
    assert fused_stats._launch_side((kept,), out, 16, 64)
    assert runs == [(12, 1, 1, 99, "fn", "meta", None, None, None, 1, 2, 3, 4, 5, out.data_ptr() + 64 * 16,
                     64 - 7 * 16 // 8, "consts")]
    assert not fused_stats._launch_side((kept._replace(out_aligned=False),), out, 16, 64)
    old = knobs.runtime.launch_enter_hook
    knobs.runtime.launch_enter_hook = lambda metadata: None
    try:
        assert not fused_stats._launch_side((kept,), out, 16, 64)
    finally:
        knobs.runtime.launch_enter_hook = old
    assert len(runs) == 1


def test_kept_launches_go_through_the_runtime_librarys_launcher(monkeypatch):
    """A kept side (_Kept) is repeated by one call of the library's launcher with its
    packed spec (function, grid, block, shared bytes, stream, scratch pointers, then the
    kernel's first five parameters) and this call's output address and row count;
    launches it cannot make, and plain tuples, take Triton's launcher; a failed call
    unbinds it for good (-1: nothing launched, Triton's launcher at once; a CUresult:
    an error, the caller summarises the side again)."""
    import array
    import ctypes

    calls, runs = [], []

    def launcher(address, out_addr, k_total):
        n = ctypes.c_int64.from_address(address).value
        calls.append((list((ctypes.c_int64 * (1 + 11 * n)).from_address(address)), out_addr, k_total))
        return results.pop(0)

    ptx = (".visible .entry _stats_kernel_perm(\n .param .u64 .ptr .global .align 1 a_0,\n .param .u64 a_1,\n"
           " .param .u32 a_2,\n .param .u64 a_3,\n .param .u64 a_4,\n .param .u64 a_5,\n .param .u32 a_6,\n"
           " .param .u64 .ptr .global .align 1 a_7,\n .param .u64 .ptr .global .align 1 a_8\n)\n{ ret; }")

    class Metadata:
        num_warps, num_ctas, shared, global_scratch_size, profile_scratch_size = 4, 1, 96, 0, 0

    class Compiled:
        function, packed_metadata, metadata, asm = 0xF00, "meta", Metadata(), {"ptx": ptx}

        def run(self, *args):
            runs.append(args)

    one = fused_stats._Launch(Compiled(), 12, 99, (1, 2, 3, 4, 5), ("consts",), True, ())
    two = one._replace(programs=7, head=(6, 7, 8, 9, 10))
    kept = fused_stats._Kept((one, two))
    out = torch.zeros(9 * 64, dtype=torch.float64)
    row16 = (out.data_ptr() + 64 * 16, 64 - 7 * 16 // 8)
    monkeypatch.setattr(fused_stats, "_library_launch", launcher)
    results = [0, 0]
    assert fused_stats._launch_side(kept, out, 16, 64) and fused_stats._launch_side(kept, out, 24, 64)
    spec = [2, 0xF00, 12, 128, 96, 99, 2, 1, 2, 3, 4, 5, 0xF00, 7, 128, 96, 99, 2, 6, 7, 8, 9, 10]
    assert calls == [(spec, *row16), (spec, out.data_ptr() + 64 * 24, 64 - 7 * 24 // 8)] and not runs
    assert isinstance(kept.packed[0], array.array)  # packed once, kept with the side

    assert fused_stats._launch_side((one,), out, 16, 64) and len(runs) == 1 and len(calls) == 2  # a plain tuple
    Metadata.global_scratch_size = 256  # a launch the library's launcher does not make
    try:
        big = fused_stats._Kept((one,))
        assert fused_stats._launch_side(big, out, 16, 64) and big.packed is False and len(runs) == 2
    finally:
        Metadata.global_scratch_size = 0

    Compiled.function = None  # a kernel whose handle is not loaded: Triton's launcher
    try:
        unloaded = fused_stats._Kept((one,))
        assert fused_stats._launch_side(unloaded, out, 16, 64) and unloaded.packed is False and len(runs) == 3
    finally:
        Compiled.function = 0xF00
    runs.pop()

    results = [-1]  # no usable libcuda: nothing launched, Triton's launcher at once, for good
    assert fused_stats._launch_side(fused_stats._Kept((one,)), out, 16, 64)
    assert len(runs) == 3 and fused_stats._library_launch is False
    assert fused_stats._launch_side(fused_stats._Kept((one,)), out, 16, 64) and len(calls) == 3 and len(runs) == 4

    monkeypatch.setattr(fused_stats, "_library_launch", launcher)
    results = [719]  # a launch failed (a sticky device error): the caller's full path, no more library calls
    with pytest.raises(RuntimeError, match="CUresult 719"):
        fused_stats._launch_side(fused_stats._Kept((one,)), out, 16, 64)
    assert fused_stats._library_launch is False and len(runs) == 4


def test_the_runtime_librarys_launcher_is_bound_once_and_never_after_a_failure(monkeypatch):
    """bind_launcher takes the runtime library's function, called with the GIL held
    (ctypes.PyDLL); None, or a launcher that failed, leaves Triton's launcher."""
    import ctypes

    from aoti_debug.codegen.native_library import stats_library_path
    from aoti_debug.runtime import native_stats

    path = stats_library_path()
    if not path:
        pytest.skip("no C++ compiler: the runtime library cannot be built")
    lib = native_stats.load(path)
    monkeypatch.setattr(fused_stats, "_library_launch", None)
    fused_stats.bind_launcher(None)
    assert fused_stats._library_launch is None
    fused_stats.bind_launcher(lib)
    bound = fused_stats._library_launch
    assert bound and bound.argtypes == [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int32]
    assert bound._flags_ & ctypes._FUNCFLAG_PYTHONAPI  # the GIL is kept
    fused_stats.bind_launcher(lib)
    assert fused_stats._library_launch is bound
    monkeypatch.setattr(fused_stats, "_library_launch", False)
    fused_stats.bind_launcher(lib)
    assert fused_stats._library_launch is False


# ------------------------------------------------------------------------- permuted-dense layouts


def test_perm_layout_reads_memory_order_with_logical_indices():
    """_perm_layout: a strided tensor with a unit-stride dim reads as [rows, inner], rows in
    memory order, with each row dim's logical stride (the checksum's index) and memory
    stride; dims adjacent in both orders merge; anything else is None."""
    lay = fused_stats._perm_layout
    cl = torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last)
    assert lay(cl.shape, cl.stride()) == ((3, 20, ((20, 1, 3), (2, 60, 60))))  # [N, H*W, C]
    assert lay((6, 5), (1, 6)) == (6, 5, ((5, 1, 6),))                    # a transpose
    assert lay((3, 4, 5), (20, 5, 1)) is None                             # contiguous
    assert lay((3, 1, 5), (5, 99, 1)) is None                             # contiguous, any stride on a unit dim
    assert lay((5, 1, 3), (1, 7, 5)) == (5, 3, ((3, 1, 5),))              # a unit dim ignored
    assert lay((0, 5), (1, 0)) is None                                    # empty
    t = torch.empty(2, 3, 4, 5).permute(2, 3, 0, 1)  # memory [N*C, H*W]: rows N*C, inner run H*W
    assert lay(t.shape, t.stride()) == (20, 6, ((6, 1, 20),))
    # gaps, stride 0, overlaps around a unit-stride run
    assert lay((4, 5), (10, 1)) == (5, 1, ((4, 5, 10),))                  # rows of 5, 10 apart
    assert lay((4, 5), (0, 1)) == (5, 1, ((4, 5, 0),))                    # expanded: one row read 4 times
    assert lay((4, 5), (1, 1)) == (5, 1, ((4, 5, 1),))                    # overlapping rows
    assert lay((4, 5), (1, 0)) == (4, 5, ((5, 1, 0),))                    # the inner run is the unit-stride dim
    assert lay((4, 6), (1, 1)) == (6, 1, ((4, 6, 1),))                    # the longest unit-stride dim
    assert lay((6, 6), (1, 1)) == (6, 1, ((6, 6, 1),))                    # the logically innermost of equals
    # q of a fused QKV buffer [B, S, 3*H*D] as [B, H, S, D]: row dims B, S, H in memory order
    qkv = torch.empty(8, 256, 3 * 16 * 64)
    q = qkv[..., :1024].view(8, 256, 16, 64).transpose(1, 2)
    assert q.stride() == (256 * 3072, 64, 3072, 1)
    assert lay(q.shape, q.stride()) == (64, 1, ((16, 16384, 64), (256, 64, 3072), (8, 262144, 786432)))
    # an expanded mask [B, 1, S, S] as [B, H, S, S]: S*S merges, the stride-0 dim is a row dim
    assert lay((2, 4, 8, 8), (64, 0, 8, 1)) == (64, 1, ((4, 64, 0), (2, 256, 64)))
    assert lay((4, 5), (10, 2)) is None                                   # no unit-stride dim
    assert lay((4, 5), (0, 0)) is None
    assert lay((4, 5), (-5, 1)) is None                                   # a negative stride (not made by torch)
    # all dims reversed: nothing merges; memory dim m (innermost 6) is logical dim 6-m, of
    # logical stride 2**m; row dims innermost first
    many = torch.empty([2] * 7).permute(*reversed(range(7)))
    assert fused_stats.MAX_ROW_DIMS == 6
    assert lay(many.shape, many.stride()) == (2, 64, tuple((2, 2 ** m, 2 ** (6 - m)) for m in reversed(range(6))))
    over = torch.empty([2] * 8).permute(*reversed(range(8)))
    assert lay(over.shape, over.stride()) is None  # more row dims than the kernel decomposes: a copy


def test_plan_permuted_vectors_only_aligned_rows():
    """The 16-byte vector form where the base, every tensor's offset, every inner run and
    every row's start allow it (each row dim's memory stride a multiple of 16 bytes); the
    table holds the row dims' memory strides in units of it."""
    f32 = 4
    q = fused_stats._perm_layout((8, 16, 256, 64), (256 * 3072, 64, 3072, 1))
    base, vec, values, _ = fused_stats.plan_permuted([1024], [8 * 16 * 256 * 64], [q], [0], f32, 1024, 64, 4, 1)
    assert (base, vec) == (1024, 4)
    tw = fused_stats._PERM_TW
    assert len(values) == tw and values[6:9] == [16, 1, 3]
    assert values[9:18] == [16, 16384, 16, 256, 64, 768, 8, 262144, 196608] and values[18:] == [0] * (tw - 18)
    unaligned = fused_stats._perm_layout((9, 32), (37, 1))  # rows 37 elements apart
    assert fused_stats.plan_permuted([1024], [9 * 32], [unaligned], [0], f32, 1024, 32, 4, 1)[1] == 1
    expanded = fused_stats._perm_layout((4, 32), (0, 1))   # stride 0: every row at the base
    assert fused_stats.plan_permuted([1024], [4 * 32], [expanded], [0], f32, 1024, 32, 4, 1)[1] == 4
    # with another tensor whose rows are unaligned, the launch has none
    assert fused_stats.plan_permuted([1024, 4096], [8 * 16 * 256 * 64, 9 * 32], [q, unaligned], [0, 1], f32, 1024,
                                     32, 4, 1)[1] == 1
    assert fused_stats.plan_permuted([1028], [4 * 32], [expanded], [0], f32, 1024, 32, 4, 1)[1] == 1  # base


def test_perm_layout_leaves_2_to_the_31_rows_to_a_copy():
    """The kernel divides row numbers in 32 bits: a tensor of 2**31 rows or more is not read
    in place (never allocated: the layout is a function of shape and strides)."""
    lay = fused_stats._perm_layout
    below = lay((2, 2**30 - 1, 2), (2, 4, 1))  # [rows, inner 2] with rows 2**31 - 2 (transposed outer dims)
    assert below is not None and below.inner == 2
    assert lay((2, 2**30, 2), (2, 4, 1)) is None  # 2**31 rows
    assert lay((2**31, 2, 2), (2, 2**32, 1)) is None


PERMUTED = make_permuted_cases("cpu")
#: read from a copy: no unit-stride dim, too many row dims; empty tensors are contiguous
_COPIED = ("step-2", "all-expanded", "select-last", "7-row-dims", "empty")


def test_permuted_cases_cover_what_they_name():
    for name, t in PERMUTED:
        assert not t.is_contiguous() or name.endswith(("empty-permuted", "empty-channels-last", "channels-last-c1")), name
        assert read_in_place(t) == (not any(c in name for c in _COPIED) and not t.is_contiguous()), name
    kinds = {fused_stats._prepare(t)[0][0] for _, t in PERMUTED if read_in_place(t) and not dense(t)}
    assert kinds == set(range(15))  # every element kind through the strided kernel
    whole = {fused_stats._prepare(t)[0][0] for _, t in PERMUTED if dense(t) and dense(t).span == dense(t).block}
    assert whole == set(range(15))  # ... through the dense kernel
    part = {fused_stats._prepare(t)[0][0] for _, t in PERMUTED if dense(t) and dense(t).span < dense(t).block}
    assert part == set(range(15))  # ... and through it with spans below its tile
    for name, t in PERMUTED:
        d = dense(t)
        assert (d is not None and d.span == d.block) == name.endswith(("-dense", "-half-tile", "-3-tile-dims")), name
        if name.endswith("-rgb"):
            assert d is not None and d.span == 768 and d.block == 1024, name
        if any(g in name for g in ("qkv", "expanded", "overlapping", "gaps", "narrow", "select")):
            assert d is None, name  # gaps, stride 0, repeats: never dense


def dense(t: torch.Tensor, block: int = fused_stats.BLOCK):
    """The dense kernel's layout of ``t`` with tiles of ``block``, or None (another kernel)."""
    prep = fused_stats._prepare(t)
    return None if prep is None or prep[2] is None else fused_stats._dense_of(prep[2], block, prep[0][1])


def test_dense_layouts_of_resnet_shapes():
    """_dense_layout: ResNet-18's channels_last activations read in memory order, the
    logical index affine within each tile (lane weights, tile weights walked with their
    period); the tile halved where 1024 does not fit; an image's runs of 3, a 3x3 conv's
    weight, gaps, overlaps and 2**32 elements left to the strided kernel."""
    lay = fused_stats._perm_layout
    dense = fused_stats._dense_layout
    cl = lambda n, c, h, w: lay((n, c, h, w), (c * h * w, 1, w * c, c))  # noqa: E731
    # [N, H*W, C]: lane a -> channel a % 64 (weight H*W), row a // 64; tile t -> 16 rows a
    # tile (period 3136 / 16 = 196), then the image (weight C*H*W)
    assert dense(cl(32, 64, 56, 56), 1024, 4) == fused_stats._Dense(1024, ((64, 3136), (0, 1)),
                                                                      ((196, 16), (0, 64 * 3136)), 1024)
    assert dense(cl(32, 64, 112, 112), 1024, 4).block == 1024
    assert dense(cl(32, 512, 7, 7), 1024, 4) == fused_stats._Dense(512, ((512, 49), (0, 1)), ((49, 1), (0, 512 * 49)),
                                                                    512)
    # runs of 3: no power of two holds whole periods; 3 x 256 elements do, lanes past them masked
    assert dense(cl(32, 3, 224, 224), 1024, 4) == fused_stats._Dense(1024, ((3, 50176), (0, 1)),
                                                                       ((196, 256), (0, 3 * 50176)), 768)
    # a 3x3 conv's weight, [C_out, 3*3, C_in] in memory: a filter a tile (64 x 9), 3 rows of 128
    assert dense(cl(64, 64, 3, 3), 1024, 4) == fused_stats._Dense(1024, ((64, 9), (9, 1), (0, 576)), ((0, 576),), 576)
    assert dense(cl(128, 128, 3, 3), 1024, 4) == fused_stats._Dense(512, ((128, 9), (0, 1)), ((3, 3), (0, 1152)),
                                                                     384)
    assert dense(cl(64, 3, 7, 7), 1024, 4).span == 3 * 49 * 4  # conv1: 4 filters a tile
    assert dense(cl(8, 5, 3, 3), 1024, 4).span == 360        # smaller than a tile: one tile, of 512 lanes
    assert dense(cl(2, 5, 7, 7), 1024, 4) is None            # runs of 5 over 49: no span of whole vectors
    assert dense(cl(2, 64, 4, 4), 1024, 4) == fused_stats._Dense(1024, ((64, 16), (16, 1), (0, 1024)),
                                                                  ((0, 1024),), 1024)  # a tile an image
    assert dense(cl(1, 64, 4, 4), 1024, 4) == fused_stats._Dense(1024, ((64, 16), (0, 1)), ((0, 0),), 1024)  # a tile
    assert dense(lay((4, 32), (64, 1)), 1024, 4) is None     # gaps between rows
    assert dense(lay((4, 32), (0, 1)), 1024, 4) is None      # an expanded dim
    assert dense(lay((2, 2**29, 4), (4, 8, 1)), 1024, 4) is None  # 2**32 elements (dense: rows 8 apart, a pair 4)
    assert dense(cl(2, 64, 4, 4), 8, 1) is None and dense(cl(2, 64, 4, 4), 16, 1) is not None  # a byte's vector: 16


@pytest.fixture(autouse=True)
def _spans_from_none():
    """Each test meets the dense kernel's spans from none (fused_stats.MAX_SPANS a process)."""
    fused_stats._spans.clear()
    fused_stats._denses.clear()


def test_spans_past_the_limit_go_to_the_strided_kernel(monkeypatch):
    """Spans below the tile are kernel variants: past MAX_SPANS distinct ones a process, a
    tensor that needs another is read by the strided kernel; whole tiles and spans already
    met are not limited."""
    monkeypatch.setattr(fused_stats, "MAX_SPANS", 1)
    rgb = torch.empty(2, 3, 16, 16).to(memory_format=torch.channels_last)   # span 768
    five = torch.empty(2, 5, 6, 8).to(memory_format=torch.channels_last)    # span 480 (the tensor)
    assert dense(rgb).span == 768 and dense(five) is None
    assert dense(torch.empty(4, 3, 16, 16).to(memory_format=torch.channels_last)).span == 768
    assert dense(torch.empty(2, 64, 4, 8).to(memory_format=torch.channels_last)).span == 1024
    fused_stats._spans.clear()
    fused_stats._denses.clear()
    assert dense(five).span == 480


def test_dense_reads_switch_off(interpreted, monkeypatch):
    """``DENSE_READS = False`` sends dense permutations to the strided kernel (or a copy), with the same
    rows bit for bit but for mean and std (summed in another order)."""
    ts = [t for name, t in PERMUTED if dense(t) is not None]
    launches, _ = _watch_launches_and_copies(monkeypatch)
    a = fused_stats.summarize(ts)
    spans = {cols for _, cols in launches}
    assert -1 in spans and -768 in spans and all(c < 0 for c in spans)  # whole tiles, and spans below the tile
    monkeypatch.setattr(fused_stats, "DENSE_READS", False)
    launches.clear()
    b = fused_stats.summarize(ts)
    assert launches and all(cols >= 0 for _, cols in launches)
    assert torch.equal(a[1], b[1])
    exact = [0, 1, 4, 5, 6, 7]
    torch.testing.assert_close(a[0][:, exact], b[0][:, exact], rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(a[0][:, 2:4], b[0][:, 2:4], rtol=1e-9, atol=1e-9, equal_nan=True)


@pytest.mark.parametrize("name,t", PERMUTED, ids=[n for n, _ in PERMUTED])
def test_permuted_case(interpreted, name, t):
    """Read in place: the checksum, min, max, absmax and counts of the logical order,
    bit for bit; with the default tiles, small tiles over few and many programs."""
    check([t], [name])
    check([t], [name], _block=64, _max_programs=3)
    check([t], [name], _block=32, _min_tiles=1, _max_programs=1000)


def test_permuted_equals_the_contiguous_copy(interpreted):
    """The permuted kernel's rows equal those of the tensor's contiguous copy: bit for bit
    but for mean and std (summed in another order)."""
    ts = [t for _, t in PERMUTED]
    a = fused_stats.summarize(ts, _block=256, _max_programs=5)
    b = fused_stats.summarize([t.contiguous() for t in ts], _block=256, _max_programs=5)
    assert torch.equal(a[1], b[1])
    exact = [0, 1, 4, 5, 6, 7]
    torch.testing.assert_close(a[0][:, exact], b[0][:, exact], rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(a[0][:, 2:4], b[0][:, 2:4], rtol=1e-9, atol=1e-9, equal_nan=True)


def _watch_launches_and_copies(monkeypatch) -> tuple[list, list]:
    """Lists that fill, until ``monkeypatch.undo()``, with ``(kind code, tile width)`` of each
    launch (0: the contiguous kernel) and the address of each tensor copied by
    ``.contiguous()`` or ``.clone()``."""
    launches: list = []
    copies: list = []
    real = fused_stats._launch
    monkeypatch.setattr(fused_stats, "_launch",
                        lambda *a, **k: launches.append((a[2][0], a[11])) or real(*a, **k))
    for method in ("contiguous", "clone"):
        orig = getattr(torch.Tensor, method)
        monkeypatch.setattr(torch.Tensor, method, lambda self, *a, _o=orig, **k: copies.append(self.data_ptr())
                            or _o(self, *a, **k))
    return launches, copies


def test_sides_mixing_contiguous_and_permuted(interpreted, monkeypatch):
    """One side of contiguous, permuted (several tile widths) and copied tensors of several
    kinds: one launch per kind, and per kind and tile width for the permuted ones, and
    no copy of a tensor read in place."""
    g = torch.Generator().manual_seed(9)
    ts = [torch.randn(300, generator=g), torch.randn(20, 30, generator=g).t(),
          torch.randn(2, 8, 3, 3, generator=g).to(memory_format=torch.channels_last),
          torch.randn(4, 6, generator=g)[:, ::2], torch.randn(7, 5, generator=g)[1:].t(),
          torch.randint(-5, 5, (9, 4), generator=g).t(), torch.arange(12),
          torch.randn(3, 3, 4, generator=g).to(torch.bfloat16).permute(2, 1, 0)]
    names = ["f32", "f32-t30", "f32-cl8", "f32-step-2", "f32-t-offset", "i64-t", "i64", "bf16-p"]
    monkeypatch.setattr(fused_stats, "DENSE_READS", False)  # the strided kernel's groups first
    launches, copies = _watch_launches_and_copies(monkeypatch)
    fused_stats.summarize(ts, _block=64, _max_programs=4)
    monkeypatch.undo()
    in_place = [t.data_ptr() for t in ts if read_in_place(t)]
    assert len(in_place) == 5 and not set(in_place) & set(copies)
    assert copies == [ts[3].data_ptr()]  # the one with gaps
    # f32: contiguous (with the copy), runs of 20, 8 (channels_last) and 5; i64: contiguous, a run of 4;
    # bf16: a run of 4
    c = fused_stats._cols
    assert sorted(launches) == sorted({(9, 0), (9, c(20, 64)), (9, c(8, 64)), (9, c(5, 64)), (10, 0), (10, c(4, 64)),
                                       (7, c(4, 64))})
    check(ts, names, _block=64, _max_programs=4)
    # With the dense kernel: those that fill a dense block go to it, a launch per kind and span
    # (whole tiles: -1), the others as before.
    launches, copies = _watch_launches_and_copies(monkeypatch)
    fused_stats.summarize(ts, _block=64, _max_programs=4)
    monkeypatch.undo()
    assert copies == [ts[3].data_ptr()]
    want = set()
    for t in ts:
        prep = fused_stats._prepare(t)
        d = dense(t, 64)
        want.add((prep[0][0], 0 if prep[2] is None else c(prep[2].inner, 64) if d is None
                  else -1 if d.span == d.block else -d.span))
    assert sorted(launches) == sorted(want) and any(cols < 0 for _, cols in want)
    check(ts, names, _block=64, _max_programs=4)


def _gapped_side() -> list[tuple[str, torch.Tensor]]:
    """A side of strided tensors that are not a permutation of a dense block: q/k/v slices of
    a fused QKV buffer, an expanded mask, an overlapping view, narrow and select of
    permuted tensors, at storage offsets."""
    g = torch.Generator().manual_seed(11)
    qkv = torch.randn(2, 16, 3 * 4 * 8, generator=g).to(torch.bfloat16)  # [B, S, 3*H*D]
    q, k, v = (qkv[..., i * 32:(i + 1) * 32].view(2, 16, 4, 8).transpose(1, 2) for i in range(3))
    return [("q", q), ("k", k), ("v", v),
            ("mask", torch.randn(2, 1, 16, 16, generator=g).expand(2, 4, 16, 16)),
            ("overlapping", torch.arange(200).as_strided((10, 40), (16, 1), 3)),
            ("narrow-permuted", torch.randn(3, 5, 6, generator=g).half().permute(2, 0, 1).narrow(0, 1, 4)),
            ("select-channels-last", torch.randint(-9, 9, (2, 7, 4, 5), generator=g, dtype=torch.int8)
             .to(memory_format=torch.channels_last)[:, :, 1]),
            ("float64-gaps", torch.randn(6, 9, generator=g, dtype=torch.float64)[1:, 2:7])]


def test_gapped_tensors_are_read_in_place(interpreted, monkeypatch):
    """Strided tensors with gaps, stride-0 dims or overlaps around a unit-stride run go to
    the strided kernel as they are: no ``.contiguous()`` copy, and a kept launch for the
    side is possible (``kept_launches`` is not ``()``, which makes the hot path summarize
    every time)."""
    cases = _gapped_side()
    ts = [t for _, t in cases]
    assert not any(t.is_contiguous() for t in ts)
    launches, copies = _watch_launches_and_copies(monkeypatch)
    fused_stats.summarize(ts, _block=64, _max_programs=4)
    monkeypatch.undo()
    assert copies == []
    assert launches and all(cols for _, cols in launches), launches
    assert fused_stats.kept_launches(ts, torch.device("cpu")) is None  # none kept yet, but no copy either
    assert fused_stats.kept_launches([*ts, torch.randn(4, 6)[:, ::2]], torch.device("cpu")) == ()
    check(ts, [n for n, _ in cases], _block=64, _max_programs=4)
    check(ts, [n for n, _ in cases])


def test_permuted_tensor_in_ring_rows(interpreted):
    """Permuted tensors written into rows of a packed ring buffer (rows relative to
    ``first``) equal summarize() alone."""
    ts = [torch.randn(5, 4).t(), torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last), torch.randn(10)]
    ring = torch.full((9 * 24,), 7.0, dtype=torch.float64)
    fused_stats.summarize(ts, into=(ring, 16))
    s, c = fused_stats.unpack(ring)
    s2, c2 = fused_stats.summarize(ts)
    torch.testing.assert_close(s[16:19], s2, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(c[16:19], c2)


try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    given = None

if given is not None:
    @st.composite
    def permuted_tensors(draw):
        dtype = draw(st.sampled_from(DTYPES))
        shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=5))
        perm = draw(st.permutations(range(len(shape))))
        offset = draw(st.integers(0, 3))
        n = math.prod(shape)
        g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
        t = values((offset + n,), dtype, "cpu", g)[offset:].view(shape).permute(*perm)
        if draw(st.booleans()) and t.dim() >= 2:  # and one more transpose of the view
            t = t.transpose(0, -1)
        return t

    @settings(max_examples=100, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(t=permuted_tensors(), block=st.sampled_from([16, 64, 1024]), programs=st.sampled_from([1, 3, 1000]))
    def test_permuted_tensors_match_the_logical_order(interpreted, t, block, programs):
        check([t], [f"{t.dtype} {tuple(t.shape)} {t.stride()} offset {t.storage_offset()}"], _block=block,
              _min_tiles=1, _max_programs=programs)

    #: Element kinds of each width, and a complex one (its real view adds a unit-stride dim).
    STRIDED_DTYPES = [torch.bool, torch.int8, torch.float8_e4m3fn, torch.float8_e5m2, torch.float16, torch.bfloat16,
                      torch.float32, torch.int64, torch.float64, torch.complex64]

    @st.composite
    def strided_tensors(draw):
        """Strided views at a storage offset: ``as_strided`` with any strides around a
        unit-stride dim (or none: read from a copy), so with gaps, stride-0 dims and
        overlaps; or a permuted tensor through a few of narrow, select, expand, transpose
        and a step-2 slice."""
        dtype = draw(st.sampled_from(STRIDED_DTYPES))
        g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
        offset = draw(st.integers(0, 5))
        shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=5))
        if draw(st.booleans()):
            unit = draw(st.integers(-1, len(shape) - 1))  # -1: no unit-stride dim
            strides = [1 if i == unit else draw(st.integers(0, 24)) for i in range(len(shape))]
            extent = offset + sum((n - 1) * s for n, s in zip(shape, strides)) + 1
            return values((extent,), dtype, "cpu", g).as_strided(shape, strides, offset)
        t = values((offset + math.prod(shape),), dtype, "cpu", g)[offset:].view(shape)
        t = t.permute(*draw(st.permutations(range(len(shape)))))
        for _ in range(draw(st.integers(1, 3))):
            op = draw(st.sampled_from(["narrow", "select", "expand", "transpose", "step"]))
            d = draw(st.integers(0, t.dim() - 1))
            size = t.shape[d]
            if op == "narrow":
                start = draw(st.integers(0, size - 1))
                t = t.narrow(d, start, draw(st.integers(1, size - start)))
            elif op == "select" and t.dim() > 1:
                t = t.select(d, draw(st.integers(0, size - 1)))
            elif op == "expand":
                t = t.unsqueeze(d)
                t = t.expand(*t.shape[:d], draw(st.integers(2, 4)), *t.shape[d + 1:])
            elif op == "transpose":
                t = t.transpose(d, draw(st.integers(0, t.dim() - 1)))
            elif op == "step":
                t = t[(slice(None),) * d + (slice(None, None, 2),)]
        return t

    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(t=strided_tensors(), block=st.sampled_from([16, 64, 1024]), programs=st.sampled_from([1, 3, 1000]))
    def test_strided_tensors_match_the_logical_order(interpreted, t, block, programs):
        """Gapped, expanded, overlapping, narrowed and selected views: read in place wherever
        a dim of size > 1 has unit stride (and the dims are few enough), with the torch
        path's checksum and stats."""
        r = torch.view_as_real(t) if t.is_complex() else t
        unit_run = any(n > 1 and s == 1 for n, s in zip(r.shape, r.stride()))
        if not r.is_contiguous() and unit_run and r.dim() <= fused_stats.MAX_ROW_DIMS + 1:
            assert read_in_place(t)
        elif r.is_contiguous() or not unit_run:
            assert not read_in_place(t)
        check([t], [f"{t.dtype} {tuple(t.shape)} {t.stride()} offset {t.storage_offset()}"], _block=block,
              _min_tiles=1, _max_programs=programs)


# ------------------------------------------------- background compiles (AOTI_DEBUG_STATS_COMPILE)


class _FakeKernel:
    """Triton's JIT function as ``_launch`` uses it: ``warmup`` (a background compile,
    held at ``gate``) and ``kernel[grid](...)`` (the JIT launch), both recorded."""

    def __init__(self, fail: bool = False):
        import collections
        import threading

        self.device_caches = collections.defaultdict(dict)
        self.gate, self.entered = threading.Event(), threading.Event()
        self.warmups, self.launches, self.fail = [], [], fail

    def warmup(self, *args, grid, **kwargs):
        import threading

        self.entered.set()
        assert self.gate.wait(30)
        self.warmups.append((threading.current_thread().name, args, grid, kwargs))
        if self.fail:
            raise RuntimeError("ptxas failed")

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            if self.fail:
                raise RuntimeError("ptxas failed")
            self.launches.append((grid, args, kwargs))
            return object()  # not a compiled kernel the direct launch takes

        return launch


@pytest.fixture
def background(monkeypatch):
    """``_launch`` as on CUDA (variants, not the interpreter) with background compiles on,
    and fresh variant state; the pool's threads are shut down after."""
    monkeypatch.setattr(fused_stats, "_interpreted", False)
    monkeypatch.setattr(fused_stats, "COMPILE_BACKGROUND", True)
    for name, value in [("_compiling", {}), ("_compiled", {}), ("_broken", set()), ("_compile_pool", None)]:
        monkeypatch.setattr(fused_stats, name, value)
    yield
    if fused_stats._compile_pool is not None:
        fused_stats._compile_pool.shutdown(wait=True)


def _items():
    torch.manual_seed(0)
    return [(0, torch.randn(3000)), (1, torch.randn(37))]


def _launch_fake(kernel, items, capturing=False):
    out = torch.zeros(9 * len(items), dtype=torch.float64)
    cpu = torch.device("cpu")
    static = None
    if capturing:
        class Static:  # a capture's own table and scratch (cuda_graphs.Capture)
            def table_for(self, values):
                return torch.tensor(values, dtype=torch.int64)

            def scratch(self, programs, rows):
                return torch.zeros(9 * programs, dtype=torch.float64), torch.zeros(rows, dtype=torch.int32)

        static = Static()
    return fused_stats._launch(kernel, items, fused_stats._KINDS[torch.float32], out, len(items), cpu,
                               fused_stats._stream_key(cpu), fused_stats.BLOCK, 4, fused_stats.MIN_TILES, static)


def test_a_variant_compiles_once_in_the_background_specialised_as_its_launch(background):
    """A variant's first launch starts its compile on a background thread and raises
    NotCompiled (the caller takes torch ops); launches while it compiles start no other;
    once it is done the JIT launch is made, with the arguments the compile was specialised
    on: the same alignment of every pointer, dtypes, integers, constexprs and grid."""
    kernel, items = _FakeKernel(), _items()
    with pytest.raises(fused_stats.NotCompiled):
        _launch_fake(kernel, items)
    assert kernel.entered.wait(30)
    with pytest.raises(fused_stats.NotCompiled):
        _launch_fake(kernel, items)
    assert len(fused_stats._compiling) == 1 and not kernel.launches
    kernel.gate.set()
    assert fused_stats.wait_for_compiles() in (0, 1) and fused_stats.wait_for_compiles() == 0
    _launch_fake(kernel, items)
    [(thread, wargs, wgrid, wkw)] = kernel.warmups
    [(grid, args, kw)] = kernel.launches
    assert thread.startswith("aoti_debug_compile") and wgrid == grid and wkw == kw
    assert len(wargs) == len(args) == 7
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    for w, a in zip(wargs, args):  # Triton's own specialisation of each argument, as its JIT makes it
        assert native_specialize_impl(BaseBackend, w, False, True, True) == \
            native_specialize_impl(BaseBackend, a, False, True, True)
    assert not fused_stats._broken


def test_a_capture_waits_for_its_variant_and_compiles_inline_when_none_is_pending(background):
    """Inside a CUDA-graph capture a launch does not go to torch ops: it waits for its
    variant's background compile, and with none pending compiles inline (no thread)."""
    import threading

    kernel, items = _FakeKernel(), _items()
    with pytest.raises(fused_stats.NotCompiled):
        _launch_fake(kernel, items)
    assert kernel.entered.wait(30)
    threading.Timer(0.2, kernel.gate.set).start()
    _launch_fake(kernel, items, capturing=True)
    assert len(kernel.warmups) == 1 and len(kernel.launches) == 1

    other = _FakeKernel()
    fused_stats._compiling.clear()
    _launch_fake(other, items, capturing=True)
    assert not other.entered.is_set() and len(other.launches) == 1 and not fused_stats._compiling


def test_a_triton_without_per_device_caches_still_compiles_in_the_background(background):
    kernel, items = _FakeKernel(), _items()
    del kernel.device_caches
    with pytest.raises(fused_stats.NotCompiled):
        _launch_fake(kernel, items)
    kernel.gate.set()
    fused_stats.wait_for_compiles()
    _launch_fake(kernel, items)
    assert len(kernel.warmups) == len(kernel.launches) == 1 and not fused_stats._broken


def test_a_failed_background_compile_fails_its_launch_and_marks_it_broken(background):
    kernel, items = _FakeKernel(fail=True), _items()
    with pytest.raises(fused_stats.NotCompiled):
        _launch_fake(kernel, items)
    kernel.gate.set()
    fused_stats.wait_for_compiles()
    with pytest.raises(RuntimeError, match="ptxas failed"):
        _launch_fake(kernel, items)
    assert fused_stats._broken


def test_rows_take_the_torch_op_path_while_their_variant_compiles(background, monkeypatch):
    """summarize: the tensors of a variant still compiling get the torch-op path's rows,
    with no warning and nothing marked broken; once compiled, the kernel's launch."""
    from aoti_debug.runtime import session

    kernel = _FakeKernel()
    monkeypatch.setattr(fused_stats, "_kernel", lambda: kernel)
    monkeypatch.setattr(fused_stats, "enabled_for", lambda device: True)
    tensors = [t for _, t in _items()]
    before = len(session.FAILURES)
    stats, sums = fused_stats.summarize(tensors)
    for i, t in enumerate(tensors):
        exp = device_stats(t)
        assert torch.equal(stats[i], exp) and int(sums[i]) == int(device_checksum(t))
    assert not fused_stats._broken and len(session.FAILURES) == before and not kernel.launches
    kernel.gate.set()
    fused_stats.wait_for_compiles()
    fused_stats.summarize(tensors)
    assert len(kernel.launches) == 1


def test_rows_of_every_group_on_the_torch_op_path_stay_in_their_rows(background, monkeypatch):
    """Every launch group still compiling (or failed): the torch-op path fills each tensor's
    own row, though the groups list their rows in group order (float32 rows 0 and 2, then
    float16 row 1), not row order. (On the GPU the inputs site's weights and biases had
    each other's records on a machine's first call.)"""
    kernel = _FakeKernel()
    monkeypatch.setattr(fused_stats, "_kernel", lambda: kernel)
    monkeypatch.setattr(fused_stats, "enabled_for", lambda device: True)
    torch.manual_seed(0)
    tensors = [torch.randn(3000), torch.randn(37).half(), torch.randn(5, 7)]
    for call in (lambda: fused_stats.summarize(tensors),
                 lambda: fused_stats.unpack(fused_stats.summarize(tensors, into=(torch.zeros(9 * 16, dtype=torch.float64), 8)))):
        stats, sums = call()
        rows = 8 if len(stats) == 16 else 0
        for i, t in enumerate(tensors):
            assert torch.equal(stats[rows + i], device_stats(t)), i
            assert int(sums[rows + i]) == int(device_checksum(t)), i
    assert not kernel.launches
    kernel.gate.set()  # the compiles held at the gate end now, not at their 30 s limit in teardown


def test_inline_launches_wait_for_a_compile_started_ahead(background, monkeypatch):
    """With background compiles off, a launch whose variant is already compiling (started
    ahead by precompile) waits for it instead of taking torch ops or compiling again."""
    import threading

    kernel, items = _FakeKernel(), _items()
    with pytest.raises(fused_stats.NotCompiled):
        _launch_fake(kernel, items)
    assert kernel.entered.wait(30)
    monkeypatch.setattr(fused_stats, "COMPILE_BACKGROUND", False)
    threading.Timer(0.2, kernel.gate.set).start()
    _launch_fake(kernel, items)
    assert len(kernel.warmups) == 1 and len(kernel.launches) == 1 and not fused_stats._broken


def test_precompile_starts_the_variants_a_side_of_those_layouts_launches(background, monkeypatch):
    """precompile, from layouts alone (as a wrapper's codegen knows them), starts the same
    variants, specialised the same way, as summarize of tensors of those layouts: a
    contiguous float32 and float16 tensor, a channels_last activation and a transposed
    weight (the dense kernel), a strided slice (the strided kernel)."""
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    kernel = _FakeKernel()
    for name in ("_kernel_obj", "_dense_kernel_obj", "_perm_kernel_obj"):
        monkeypatch.setattr(fused_stats, name, kernel)
    monkeypatch.setattr(fused_stats, "enabled_for", lambda device: True)
    monkeypatch.setattr(fused_stats, "_sms", lambda device: 4)
    started = []
    monkeypatch.setattr(fused_stats, "_compile", lambda k, device, programs, args, kwargs:
                        started.append((args, kwargs)))
    torch.manual_seed(0)
    tensors = [torch.randn(300, 7), torch.randn(4096).half(),
               torch.randn(2, 16, 6, 6).contiguous(memory_format=torch.channels_last),
               torch.randn(384, 128).t(), torch.randn(64, 40)[:, 3:35]]
    layouts = [(t.dtype, tuple(t.shape), t.stride(), t.storage_offset()) for t in tensors]

    def seen():
        fused_stats.wait_for_compiles()
        keys = {v[1:] for v in fused_stats._compiling}  # (the device's index: 0 against the CPU's None)
        specs = sorted((str(sorted(kw.items())), tuple(native_specialize_impl(BaseBackend, a, False, True, True)
                                                     for a in (args[0], args[1], args[3], args[4], args[5])))
                       for args, kw in started)
        started.clear()
        fused_stats._compiling.clear()
        return keys, specs

    n = fused_stats.precompile(layouts, torch.device("cuda", 0))
    ahead = seen()
    assert n == len(ahead[0]) == len(ahead[1]) >= 4
    fused_stats.summarize(tensors)  # each group NotCompiled: its compile started, its rows torch ops
    assert seen() == ahead
    assert {cols for _c, _v, _b, _a, cols in ahead[0]} >= {0} and any(c < 0 for *_, c in ahead[0]) and \
        any(c > 0 for *_, c in ahead[0])
    assert fused_stats.precompile(layouts, torch.device("cpu")) == 0  # CUDA only


def test_precompile_covers_sides_that_hold_part_of_a_groups_layouts(background, monkeypatch):
    """A variant depends on the alignment of a side's base and of its tensors' offsets
    from it: one slice a float off 16 bytes among the graph's tensors must not leave the
    sides that hold only aligned tensors (16 bytes a vector) or mix them (an aligned base,
    one element a vector) to compile on the model's thread."""
    monkeypatch.setattr(fused_stats, "_kernel_obj", _FakeKernel())
    monkeypatch.setattr(fused_stats, "enabled_for", lambda device: True)
    monkeypatch.setattr(fused_stats, "_sms", lambda device: 4)
    monkeypatch.setattr(fused_stats, "_compile", lambda k, device, programs, args, kwargs: None)
    storage = torch.randn(4096)  # (one allocation: the aligned tensor is the lower address)
    aligned, odd = storage[:1000], storage[2001:3001]
    layouts = [(t.dtype, tuple(t.shape), t.stride(), t.storage_offset()) for t in (odd, aligned)]

    def keys():
        fused_stats.wait_for_compiles()
        found = {v[1:] for v in fused_stats._compiling}  # (the device's index: 0 against the CPU's None)
        fused_stats._compiling.clear()
        return found

    fused_stats.precompile(layouts, torch.device("cuda", 0))
    ahead = keys()
    for side in ([aligned], [odd], [aligned, odd], [odd, aligned]):
        fused_stats.summarize(side)
    met = keys()
    assert len(met) == 3 and met <= ahead, sorted(met - ahead)


def test_a_python_wrappers_module_starts_its_precompiles_at_import_also_from_the_cache(tmp_path, monkeypatch):
    """Codegen: at levels stats and print the Python wrapper's manager collects the static
    layouts of its launches' tensors, and the module hands them to its handle's
    ``precompile`` at import: a graph served by Inductor's FX graph cache, whose codegen
    does not run, starts the same compiles (the GPU test compiles a model twice in one
    process, and its first call compiled on the model's thread while the hook was in
    codegen alone)."""
    import time

    import aoti_debug
    from aoti_debug.codegen.manager import Manager
    from aoti_debug.runtime.hooks import GraphHandle

    collected, calls = [], []

    def as_if_cuda(self):  # (a CPU graph's layouts, handed over as a CUDA graph's would be)
        collected.append(set(self.layouts))
        return (tuple(sorted(self.layouts)), (0,)) if self.layouts else None

    monkeypatch.setattr(Manager, "precompile_layouts", as_if_cuda)
    monkeypatch.setattr(GraphHandle, "precompile", lambda self, layouts, devices: calls.append((layouts, devices)) or 0)
    scale = 1.5 + time.time() % 1  # (a graph no earlier run left in the cache)
    for _ in range(2):
        torch._dynamo.reset()
        with torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=str(tmp_path)), \
                torch._inductor.config.patch(fx_graph_cache=True):
            torch.compile(lambda x, w: (x @ w.t()).relu() * scale)(torch.randn(8, 16), torch.randn(32, 16))
    torch._dynamo.reset()
    assert len(collected) == 1, "the second compile should come from the FX graph cache"
    assert ("float32", (8, 16), (16, 1), 0) in collected[0] and ("float32", (16, 32), (1, 16), 0) in collected[0]
    assert calls == [(tuple(sorted(collected[0])), (0,))] * 2


def test_precompile_layouts_are_a_cuda_graphs_own(monkeypatch):
    from torch._inductor.virtualized import V

    from aoti_debug import config
    from aoti_debug.codegen.manager import Manager

    m = Manager(config.make_compile_settings("stats"))
    m.layouts = {("float32", (8, 16), (16, 1), 0), ("bfloat16", (4,), (1,), 2)}

    class Graph:
        device_types, device_idxs = {"cuda"}, {1, 0}

    with V.set_graph_handler(Graph()):
        assert m.precompile_layouts() == ((("bfloat16", (4,), (1,), 2), ("float32", (8, 16), (16, 1), 0)), (0, 1))
        Graph.device_types = {"cpu"}
        assert m.precompile_layouts() is None
        Graph.device_types, m.layouts = {"cuda"}, set()
        assert m.precompile_layouts() is None


def test_the_handles_precompile_types_the_layouts_for_each_device_and_never_raises(monkeypatch):
    from aoti_debug.runtime import hooks, session

    calls = []
    monkeypatch.setattr(hooks, "_has_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(fused_stats, "precompile", lambda layouts, device: calls.append((layouts, device)) or 3)
    layouts = (("bfloat16", (4,), (1,), 2), ("float32", (8, 16), (16, 1), 0), ("no_such_dtype", (1,), (1,), 0))
    handle = hooks.GraphHandle("g.py", "stats", False)
    assert handle.precompile(layouts, (0, 1, 5)) == 6  # (device 5: not on this machine)
    assert [d for _, d in calls] == [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert calls[0][0] == [(torch.bfloat16, (4,), (1,), 2), (torch.float32, (8, 16), (16, 1), 0)]
    assert hooks.GraphHandle("g.py", "save", False).precompile(layouts, (0,)) == 0 and len(calls) == 2

    def broken(layouts, device):
        raise RuntimeError("no compiler")

    monkeypatch.setattr(fused_stats, "precompile", broken)
    before = len(session.FAILURES)
    assert handle.precompile(layouts, (0,)) == 0
    assert "no compiler" in session.FAILURES[before][1]


def test_the_compile_mode_is_inline_unless_background_is_asked(caplog):
    assert fused_stats._compile_mode(None) == fused_stats._compile_mode(" ") == "inline"
    assert fused_stats._compile_mode("Background ") == "background"
    with caplog.at_level("WARNING", logger="aoti_debug"):
        assert fused_stats._compile_mode("threads") == "inline"
    assert "AOTI_DEBUG_STATS_COMPILE='threads' is not one of inline, background; using inline" in caplog.text


def test_a_process_that_exits_drops_the_compiles_not_started(tmp_path):
    """Exit with compiles queued on the pool: the one running finishes, the queued ones are
    dropped (without it the process would run all of them before it ends)."""
    from tests.conftest import REPO

    script = (
        "import time\n"
        "from aoti_debug.runtime import fused_stats\n"
        "fused_stats.COMPILE_THREADS = 1\n"
        "class K:\n"
        "    def warmup(self, *a, grid, **k):\n"
        "        time.sleep(1.0)\n"
        "        print('compiled', flush=True)\n"
        "for i in range(8):\n"
        "    fused_stats._start_compile(K(), ('v', i), fused_stats.torch.device('cpu'), 1, (), {})\n"
        "time.sleep(0.2)\n"
    )
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=REPO))
    took = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    # (each queued compile prints when it runs: one line, not eight; the time is a hang
    # guard only, the interpreter's import alone takes seconds on a loaded 2-core machine)
    assert r.stdout.count("compiled") == 1 and took < 60, (r.stdout, took)
