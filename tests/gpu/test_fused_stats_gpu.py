"""fused_stats.summarize() compiled on CUDA against the torch-op path (stats.py).

The same cases as tests/test_fused_stats.py (which runs them in Triton's interpreter),
plus large tensors, many programs per tensor (the last-program combination under real
concurrency), no host sync, side streams. Run with tools/gpu/run_gpu_tests.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from aoti_debug.runtime import fused_stats, session
from aoti_debug.runtime.stats import device_checksum, device_stats

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

triton = pytest.importorskip("triton", reason="triton is not installed")

from tests.test_fused_stats import check, make_cases, make_permuted_cases, read_in_place  # noqa: E402

CASES = make_cases("cuda") if torch.cuda.is_available() else []
BIG = [c for c in CASES if c[1].numel() > 200]
PERMUTED = make_permuted_cases("cuda") if torch.cuda.is_available() else []


@pytest.fixture(scope="module", autouse=True)
def compiled():
    kernel = fused_stats._kernel()
    if kernel is None:
        pytest.skip("triton is not usable here")
    if fused_stats._interpreted:
        pytest.skip("TRITON_INTERPRET is set: the kernel would not be compiled")
    assert fused_stats.enabled_for(torch.device("cuda"))
    before = len(session.FAILURES)
    yield kernel
    failures = [f for f in session.FAILURES[before:] if f[0].startswith("fused-stats")]
    assert not failures, failures
    assert not fused_stats._broken


@pytest.mark.parametrize("name,t", CASES, ids=[n for n, _ in CASES])
def test_each_case(name, t):
    check([t], [name])


@pytest.mark.parametrize("name,t", BIG, ids=[n for n, _ in BIG])
def test_each_case_many_programs(name, t):
    # default tile size (other sizes would compile every kernel again): one tile per program
    check([t], [name], _min_tiles=1, _max_programs=2)
    check([t], [name], _min_tiles=1, _max_programs=1000)


def test_all_cases_in_one_batch():
    names = [n for n, _ in CASES]
    tensors = [t for _, t in CASES]
    check(tensors, names)
    check(tensors, names, _min_tiles=1, _max_programs=16)


def test_large_tensors():
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(8 * 256, 4096, device="cuda", generator=g)
    h = (torch.randn(2048, 1024, device="cuda", generator=g) * 100).to(torch.bfloat16)
    i = torch.randint(-(2**40), 2**40, (4 << 20,), device="cuda", generator=g)
    f = torch.randn(16 << 20, device="cuda", generator=g).half()
    f[::1001] = float("nan")
    f[7::3001] = float("-inf")
    off = 1e3 + torch.randn(3 << 20, device="cuda", dtype=torch.float64, generator=g)
    check([x, h, i, f, off], ["fp32-8M", "bf16-2M", "int64-4M", "fp16-16M-nan", "fp64-offset"])


def test_last_program_combination_under_concurrency():
    """Many tensors with many programs each, repeated: a memory-ordering bug in the
    ticket/last-program pattern would show as a wrong row now and then."""
    g = torch.Generator(device="cuda").manual_seed(2)
    ts = [torch.randn(1 << 18, device="cuda", generator=g) + j for j in range(48)]
    exp_s = torch.stack([device_stats(t) for t in ts])
    exp_c = torch.stack([device_checksum(t) for t in ts])
    for _ in range(30):
        s, c = fused_stats.summarize(ts, _min_tiles=1, _max_programs=1024)
        assert torch.equal(c, exp_c)
        torch.testing.assert_close(s, exp_s, rtol=1e-9, atol=1e-9)


def test_transformer_like_batches_repeat():
    g = torch.Generator(device="cuda").manual_seed(3)
    shapes = [(2048, 1024), (2048, 4096), (1024, 1024), (4096, 1024), (1024,), (2048,), (8, 16, 256, 64)]
    ts = [torch.randn(s, device="cuda", generator=g) for s in shapes * 6]
    sides = [ts[i:i + 3] for i in range(0, len(ts), 3)]
    first = [fused_stats.summarize(side, packed=True).clone() for side in sides]
    for _ in range(3):
        again = [fused_stats.summarize(side, packed=True) for side in sides]
        for a, b in zip(first, again):
            assert torch.equal(a.view(torch.int64), b.view(torch.int64))
    for side in sides[:4]:
        check(side, [str(tuple(t.shape)) for t in side])


def test_no_host_sync():
    ts = [torch.randn(1000, 33, device="cuda"), torch.arange(77, device="cuda"), torch.randn(5, 7, device="cuda").t()]
    fused_stats.summarize(ts)  # compile outside the check
    fresh = [torch.randn(4099, device="cuda"), torch.ones(3, dtype=torch.bool, device="cuda"), torch.randn(9, 9, device="cuda").t()]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fused_stats.summarize(fresh)  # new addresses: the table goes up with a non-blocking copy
        fused_stats.summarize(fresh, packed=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    check(fresh, ["f32", "bool", "f32-t"])


def test_side_stream():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        ts = [torch.randn(50000, device="cuda"), torch.randn(300, 301, device="cuda").t()]
        stats, sums = fused_stats.summarize(ts, _min_tiles=1, _max_programs=64)
    s.synchronize()
    for i, t in enumerate(ts):
        assert int(sums[i]) == int(device_checksum(t))
        torch.testing.assert_close(stats[i], device_stats(t), rtol=1e-9, atol=1e-12)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_other_device():
    ts = [torch.randn(10000, device="cuda:1"), torch.arange(10, device="cuda:1")]
    assert torch.cuda.current_device() == 0
    check(ts, ["f32", "i64"])


def test_direct_launch_equals_the_jit_launch():
    """A variant's second launch skips Triton's JIT dispatch (``_direct_launch``): the same
    rows, bit for bit, as its first (JIT) launch and as the torch-op path, for every case."""
    tensors = [t for _name, t in CASES]
    fused_stats._compiled.clear()
    first = fused_stats.summarize(tensors, packed=True).clone()
    assert fused_stats._compiled, "no variant was kept for direct launches"
    calls = []
    real = fused_stats._direct_launch
    fused_stats._direct_launch = lambda *a: calls.append(a[1]) or real(*a)
    try:
        again = fused_stats.summarize(tensors, packed=True)
    finally:
        fused_stats._direct_launch = real
    torch.cuda.synchronize()
    assert calls, "the second launch did not take the direct path"
    assert torch.equal(first.view(torch.int64), again.view(torch.int64))
    check(tensors, [n for n, _ in CASES])  # direct launches again, against the torch-op path


def test_a_side_seen_before_launches_again_with_the_same_rows():
    """A ring side whose tensors are where they were (``_sides``) repeats its launches
    without planning: the rows equal the planned launch's, bit for bit, at another ring
    row, after its values changed, and a moved tensor takes the planned path again."""
    tensors = [t for _name, t in CASES
               if t.dtype in fused_stats._KINDS and t.is_contiguous() and t.data_ptr() % t.element_size() == 0][:16]
    assert len(tensors) >= 4
    buf = torch.zeros(9 * 64, dtype=torch.float64, device="cuda")
    fused_stats._sides.clear()
    fused_stats.summarize(tensors, into=(buf, 0))  # JIT launches: variants kept
    fused_stats.summarize(tensors, into=(buf, 0))  # direct launches: the side kept
    assert len(fused_stats._sides) == 1
    planned = fused_stats.summarize(tensors, packed=True).clone()
    calls = []
    real = fused_stats._launch
    fused_stats._launch = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        fused_stats.summarize(tensors, into=(buf, 16))
        torch.cuda.synchronize()
        assert not calls, "a side seen before was planned again"
        k = len(tensors)
        got = torch.cat([buf[8 * 16: 8 * (16 + k)], buf[8 * 64 + 16: 8 * 64 + 16 + k]])
        assert torch.equal(got.view(torch.int64), planned.view(torch.int64))
        tensors[0].mul_(-3)  # new values, same place: the same launches read them
        fused_stats.summarize(tensors, into=(buf, 24))
        assert not calls
        moved = [tensors[0].clone(), *tensors[1:]]
        fused_stats.summarize(moved, into=(buf, 32))
        assert calls, "a moved tensor did not take the planned path"
        # A strided tensor with gaps: its contiguous copy is what the key holds (the caching
        # allocator gives it the same block again: seen before at the third call); a
        # permuted-dense one is read in place, keyed by its own address and layout.
        for strided in ([torch.randn(64, 96, device="cuda")[:, ::2], *tensors[1:4]],
                        [torch.randn(64, 48, device="cuda").t(), *tensors[1:3],
                         torch.randn(2, 16, 5, 5, device="cuda").to(memory_format=torch.channels_last)]):
            for at in (40, 48, 56):
                calls.clear()
                fused_stats.summarize(strided, into=(buf, at))
            assert not calls, "a side with a strided tensor was planned at every call"
            torch.cuda.synchronize()
            got = torch.cat([buf[8 * 56: 8 * 60], buf[8 * 64 + 56: 8 * 64 + 60]])
            assert torch.equal(got.view(torch.int64), fused_stats.summarize(strided, packed=True).view(torch.int64))
            check(strided, ["strided"] * 4)
    finally:
        fused_stats._launch = real
    torch.cuda.synchronize()
    check(tensors, ["t"] * len(tensors))


def test_launch_hooks_still_see_every_launch():
    """With a Triton launch hook installed (a profiler such as Proton), launches go through
    the JIT path, which calls it."""
    from triton import knobs

    t = torch.randn(4096, device="cuda")
    fused_stats.summarize([t])  # compiled and kept
    seen = []

    def hook(metadata):
        seen.append(metadata)

    knobs.runtime.launch_enter_hook.add(hook)
    try:
        fused_stats.summarize([t])
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    torch.cuda.synchronize()
    assert seen


# ------------------------------------------------------------------------- permuted-dense layouts


@pytest.mark.parametrize("name,t", PERMUTED, ids=[n for n, _ in PERMUTED])
def test_permuted_case(name, t):
    check([t], [name])
    check([t], [name], _min_tiles=1, _max_programs=1000)


def _large_permuted() -> list[tuple[str, torch.Tensor]]:
    """Layouts met in models, at model sizes (many programs per tensor)."""
    g = torch.Generator(device="cuda").manual_seed(4)

    def rnd(*shape, dtype=torch.float32):
        return torch.randn(shape, device="cuda", generator=g).to(dtype)

    cl = torch.channels_last
    x = rnd(32, 64, 56, 56, dtype=torch.float16).to(memory_format=cl)
    flat = x.permute(0, 2, 3, 1).view(-1)  # the memory order
    flat[::997] = float("nan")
    flat[5::3001] = float("-inf")
    storage = rnd(7 + 8 * 512 * 12 * 64, dtype=torch.bfloat16)
    qkv = rnd(8, 512, 3 * 12 * 64, dtype=torch.bfloat16)  # a fused QKV projection's output [B, S, 3*H*D]
    q, k, v = (qkv[..., i * 768:(i + 1) * 768].view(8, 512, 12, 64).transpose(1, 2) for i in range(3))
    return [
        ("fp16 channels_last 32x64x56x56 nan/inf", x),
        ("fp32 channels_last 16x256x14x14", rnd(16, 256, 14, 14).to(memory_format=cl)),
        ("bf16 channels_last 8x512x7x7", rnd(8, 512, 7, 7, dtype=torch.bfloat16).to(memory_format=cl)),
        ("fp32 channels_last input 8x3x224x224", rnd(8, 3, 224, 224).to(memory_format=cl)),
        ("bf16 channels_last_3d 4x32x8x32x32",
         rnd(4, 32, 8, 32, 32, dtype=torch.bfloat16).to(memory_format=torch.channels_last_3d)),
        ("bf16 weight 4096x1024 transposed", rnd(4096, 1024, dtype=torch.bfloat16).t()),
        ("fp32 weight 1000x768 transposed", rnd(1000, 768).t()),
        ("fp16 attention 8x512x12x64 -> BHSD", rnd(8, 512, 12, 64, dtype=torch.float16).permute(0, 2, 1, 3)),
        ("fp16 attention k^T", rnd(8, 512, 12, 64, dtype=torch.float16).permute(0, 2, 3, 1)),
        ("bf16 attention, storage offset 7",
         storage[7:].view(8, 512, 12, 64).permute(0, 2, 1, 3)),
        ("int8 channels_last", torch.randint(-128, 128, (16, 128, 28, 28), device="cuda", dtype=torch.int8,
                                             generator=g).to(memory_format=cl)),
        ("int64 transposed", torch.randint(-(2**40), 2**40, (3000, 1500), device="cuda", generator=g).t()),
        ("float8_e4m3fn transposed", rnd(2048, 1536).to(torch.float8_e4m3fn).t()),
        ("complex64 transposed", torch.complex(rnd(1024, 700), rnd(1024, 700)).t()),
        ("bool channels_last", (rnd(8, 32, 40, 40) > 0).to(memory_format=cl)),
        ("gapped bf16 q of a fused QKV 8x512x2304", q),
        ("gapped bf16 k of a fused QKV", k),
        ("gapped bf16 v of a fused QKV", v),
        ("gapped fp32 mask 8x1x512x512 expanded to 12 heads", rnd(8, 1, 512, 512).expand(8, 12, 512, 512)),
        ("gapped fp16 rows of 1000, 1003 apart (no vectors)", rnd(4096, 1003, dtype=torch.float16)[:, 2:1002]),
        ("gapped int8 select of channels_last", torch.randint(-128, 128, (16, 128, 28, 28), device="cuda",
                                                             dtype=torch.int8, generator=g)
         .to(memory_format=cl)[:, :, 3]),
        ("gapped fp32 narrow of a transposed weight", rnd(1000, 768).t().narrow(1, 100, 800)),
    ]


def test_large_permuted_layouts_equal_the_contiguous_path():
    """Read in place at model sizes, one program per tile or the default chunks: the
    checksum, min, max, absmax and counts equal the contiguous copy's bit for bit (and the
    torch path's), mean and std to the usual tolerance."""
    cases = _large_permuted()
    ts = [t for _, t in cases]
    names = [n for n, _ in cases]
    assert all(read_in_place(t) for t in ts), [n for n, t in cases if not read_in_place(t)]
    for kw in ({}, {"_min_tiles": 1, "_max_programs": 100000}):
        got_s, got_c = fused_stats.summarize(ts, **kw)
        exp_s, exp_c = fused_stats.summarize([t.contiguous() for t in ts], **kw)
        bad = [n for n, a, b in zip(names, got_c.tolist(), exp_c.tolist()) if a != b]
        assert not bad, f"checksums differ: {bad}"
        exact = [0, 1, 4, 5, 6, 7]
        torch.testing.assert_close(got_s[:, exact], exp_s[:, exact], rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(got_s[:, 2:4], exp_s[:, 2:4], rtol=1e-9, atol=1e-9, equal_nan=True)
    check(ts, names)
    check(ts, names, _min_tiles=1, _max_programs=100000)


def test_permuted_tensors_are_not_copied():
    """Once a side's kernels are compiled and its table is on the device, summarizing
    permuted and gapped tensors into a ring allocates nothing and runs nothing but the
    strided and the dense kernel (no copy kernel)."""
    cases = _large_permuted()
    ts = [t for _, t in cases[:6]] + [t for name, t in cases if name.startswith("gapped")]
    buf = torch.zeros(9 * 16, dtype=torch.float64, device="cuda")
    fused_stats.summarize(ts, into=(buf, 0), _min_tiles=1, _max_programs=4096)  # compile, table, scratch
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    fused_stats.summarize(ts, into=(buf, 0), _min_tiles=1, _max_programs=4096)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fused_stats.summarize(ts, into=(buf, 0), _min_tiles=1, _max_programs=4096)
        torch.cuda.synchronize()
    kernels = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
    assert kernels == {"_stats_kernel_perm", "_stats_kernel_dense"}, kernels  # channels_last: the dense one
    # and the copies it no longer makes would show there
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fused_stats.summarize([t.contiguous() for t in ts], into=(buf, 0))
        torch.cuda.synchronize()
    assert len({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}) > 1


def test_expanded_past_int32_elements():
    """A stride-0 view of more than 2**31 elements over 64 KiB (int64 element indices and
    offsets in the strided kernel), against closed forms: the torch path would copy 2 GB.
    Element (r, c) is x[c], of logical index r*C + c."""
    g = torch.Generator(device="cuda").manual_seed(3)
    cols, rows = 2 ** 16, 2 ** 15 + 3
    x = torch.randint(-128, 128, (cols,), device="cuda", dtype=torch.int8, generator=g)
    t = x.expand(rows, cols)
    assert t.numel() > 2 ** 31 and read_in_place(t)
    stats, sums = fused_stats.summarize([t])
    xs = x.cpu().tolist()
    total = sum((v & 0xFF) * (rows * (2 * c + 1) + cols * rows * (rows - 1)) for c, v in enumerate(xs)) % 2 ** 64
    assert int(sums[0]) == total - (2 ** 64 if total >= 2 ** 63 else 0)
    n = rows * cols
    mean = sum(xs) / cols
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in xs) * rows / (n - 1))
    got = stats[0].cpu().tolist()
    assert got[0] == min(xs) and got[1] == max(xs) and got[4] == max(abs(min(xs)), abs(max(xs)))
    assert got[5:] == [0.0, 0.0, float(n)]
    assert math.isclose(got[2], mean, rel_tol=1e-12, abs_tol=1e-12 * 128)
    assert math.isclose(got[3], std, rel_tol=1e-9)
