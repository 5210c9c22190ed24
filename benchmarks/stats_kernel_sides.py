"""Device time of the stats kernels over one real step's launch sides, for kernel variants.

    CXX=/usr/bin/g++ PYTHONPATH=. python3 benchmarks/stats_kernel_sides.py --model transformer \
        [--per-side] [--variant NAME=PATH[:RBLOCK[:PER_SM[:MIN_TILES[:BLOCK[:WARPS]]]]]] ...
        [--strided NAME] [--calls 20] [--overlap]

Compiles the model at level stats (Python wrapper), records the tensors of every launch
side its first call summarises (shapes, strides, dtypes, offsets: the stats kernels' real
work, the strided views included), rebuilds them on fresh random storage, and times
``fused_stats.summarize`` over all of them per step (torch.profiler, device time of the
stats kernels), first with the package's own kernels, then with each variant module (a
copy of ``runtime/fused_stats_kernels.py``, or a ``.patch`` of it, as ``git diff`` writes
it, applied to the package's). Prints per variant the device time per step,
the bytes read per second, and whether min/max/absmax/nan/inf and the checksums are bit for
bit those of the package's kernels (mean/std: the largest relative difference).
``--strided NAME`` adds the package's kernels with tensors that fill a dense block in
another order (channels_last) read by the strided kernel instead of the dense one.
``--overlap`` then times, on the device alone, the uninstrumented compiled model, the
step's stats launches, both on one stream, and both on two streams with nothing ordering
them: the bound of a second stream for the stats kernels (:func:`overlap`). CUDA only.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.overhead_row import MODELS, build_model, quiet  # noqa: E402


def record_sides(model_name: str, preset: str) -> list[list[tuple]]:
    """The launch sides the first instrumented call summarises: per side, per tensor
    ``(shape, stride, dtype, storage offset, storage elements)``."""
    import torch

    import aoti_debug
    from aoti_debug.runtime import fused_stats as fs

    sides: list[list[tuple]] = []
    real = fs.summarize

    def spy(tensors, *a, **k):
        sides.append([(tuple(t.shape), tuple(t.stride()), t.dtype, t.storage_offset(),
                       t.untyped_storage().nbytes() // t.element_size()) for t in tensors])
        return real(tensors, *a, **k)

    os.environ.setdefault("AOTI_DEBUG_DIR", tempfile.mkdtemp(prefix="aoti_debug_sides_"))
    model, x, _ = build_model(model_name, preset, "cuda")
    with torch.no_grad(), quiet():
        aoti_debug.enable("stats")
        fn = torch.compile(model)
        fs.summarize = spy
        try:
            fn(x)
            torch.cuda.synchronize()
            aoti_debug.flush()
        finally:
            fs.summarize = real
        aoti_debug.disable()
    torch._dynamo.reset()
    return sides


def rebuild(sides: list[list[tuple]]) -> list[list]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    out = []
    for side in sides:
        ts = []
        for shape, stride, dtype, offset, size in side:
            if dtype.is_floating_point:
                store = torch.randn(size, device="cuda", generator=g).to(dtype)
            elif dtype == torch.bool:
                store = torch.rand(size, device="cuda", generator=g) > 0.5
            else:
                store = torch.randint(-100, 100, (size,), device="cuda", generator=g).to(dtype)
            ts.append(store.as_strided(shape, stride, offset))
        out.append(ts)
    return out


def _package_settings() -> tuple[int, int, int, int, int]:
    from aoti_debug.runtime import fused_stats as fs

    return fs._RBLOCK, fs.PROGRAMS_PER_SM, fs.MIN_TILES, fs.BLOCK, fs.NUM_WARPS


#: The package's own RBLOCK, programs per SM, minimum tiles, tile and warps (a variant's defaults).
_PACKAGE = _package_settings()


def patched_kernels(patch: str) -> str:
    """The package's kernels module with ``patch`` (a unified diff of it) applied, in a
    temporary file: its path."""
    import subprocess

    from aoti_debug.runtime import fused_stats_kernels

    out = os.path.join(tempfile.mkdtemp(prefix="stats_variant_"), os.path.splitext(os.path.basename(patch))[0] + ".py")
    proc = subprocess.run(["patch", "-s", "-o", out, fused_stats_kernels.__file__, patch], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"stats_kernel_sides.py: {patch} does not apply to the package's kernels: "
                         f"{(proc.stdout + proc.stderr).strip()}")
    return out


def use_kernels(path: str | None, rblock: int | None = None, per_sm: int | None = None, min_tiles: int | None = None,
                block: int | None = None, warps: int | None = None, dense: bool = True) -> None:
    from aoti_debug.runtime import fused_stats as fs

    if path is None:
        from aoti_debug.runtime import fused_stats_kernels as mod
    else:
        if path.endswith(".patch"):
            path = patched_kernels(path)
        name = "stats_variant_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    fs._kernel()
    fs._kernel_obj, fs._perm_kernel_obj = mod._stats_kernel, mod._stats_kernel_perm
    # a module without the dense kernel (older kernels): dense permutations by the strided one
    fs._dense_kernel_obj = getattr(mod, "_stats_kernel_dense", None)
    fs.DENSE_READS = fs._dense_kernel_obj is not None and dense
    fs._RBLOCK = rblock or _PACKAGE[0]
    fs.PROGRAMS_PER_SM = per_sm or _PACKAGE[1]
    fs.MIN_TILES = min_tiles or _PACKAGE[2]
    fs.BLOCK = block or _PACKAGE[3]
    fs.NUM_WARPS = warps or _PACKAGE[4]
    fs._compiled.clear()
    fs._sides.clear()


def step(sides: list[list], out) -> None:
    """One step's stats launches: every side summarised into ``out``'s first rows."""
    from aoti_debug.runtime import fused_stats as fs

    for ts in sides:
        fs.summarize(ts, into=(out, 0))


def run(sides: list[list], out, calls: int) -> tuple[float, list]:
    """Device ms per step of the stats kernels, and each side's packed rows."""
    import torch

    from aoti_debug.runtime import fused_stats as fs

    for _ in range(3):
        step(sides, out)
    torch.cuda.synchronize()
    rows = []
    for ts in sides:  # each side's rows, read back one side at a time
        fs.summarize(ts, into=(out, 0))
        s, c = fs.unpack(out)
        rows.append((s[: len(ts)].clone(), c[: len(ts)].clone()))
    return device_us(lambda: step(sides, out), calls) / 1e3, rows


def device_us(fn, calls: int) -> float:
    """Device time (us) of the stats kernels in one call of ``fn``, the mean of ``calls``."""
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum(e.device_time_total for e in prof.key_averages() if "_stats_kernel" in e.key) / calls


def per_side(sides: list[list], out, calls: int = 10) -> None:
    """Each side's stats kernels alone: device us, MiB, GB/s, strided or not."""
    import torch

    from aoti_debug.runtime import fused_stats as fs

    for i, ts in enumerate(sides):
        for _ in range(2):
            fs.summarize(ts, into=(out, 0))
        torch.cuda.synchronize()
        us = device_us(lambda ts=ts: fs.summarize(ts, into=(out, 0)), calls)
        mib = sum(t.numel() * t.element_size() for t in ts) / 2**20
        strided = sum(1 for t in ts if not t.is_contiguous())
        print(f"  side {i:3d}: {len(ts)} tensors ({strided} strided) {mib:8.2f} MiB {us:8.1f} us "
              f"{mib * 2**20 / max(us, 1e-9) / 1e3:6.0f} GB/s  "
              + " ".join(f"{tuple(t.shape)}{'' if t.is_contiguous() else tuple(t.stride())}" for t in ts), flush=True)


def _gate_cycles(ms: float) -> int:
    """GPU clock cycles ``torch.cuda._sleep`` spins for about ``ms`` milliseconds (measured)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 1_000_000
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return int(cycles * ms / max(start.elapsed_time(end), 1e-3))


def overlap(model_name: str, preset: str, sides: list[list], out, calls: int) -> None:
    """``--overlap``: device ms of the uninstrumented compiled model, of the step's stats
    launches (the kernels ``use_kernels`` last set: the package's, from ``main``), of both
    on one stream, and of both on two streams (the model on the current one, the stats on
    another, nothing ordering them): the last is the most a second stats stream could
    hide, the bound of that design. Each step is queued behind a spin kernel long enough for the host to queue all of it, so
    the times are the device's, not the host's issue rate. Median over ``calls`` steps."""
    import statistics

    import torch

    model, x, _ = build_model(model_name, preset, "cuda")
    with torch.no_grad():
        fn = torch.compile(model)
        for _ in range(3):
            fn(x)
        main, side = torch.cuda.current_stream(), torch.cuda.Stream()
        with torch.cuda.stream(side):
            for _ in range(3):
                step(sides, out)
        torch.cuda.synchronize()
        gate = _gate_cycles(20.0)

        def timed(kind: str) -> float:
            begin, done, side_done = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            torch.cuda._sleep(gate)  # the host queues everything below meanwhile
            begin.record()
            if kind in ("model", "serial", "two streams"):
                fn(x)
            if kind in ("stats", "serial"):
                step(sides, out)
            if kind == "two streams":
                side.wait_event(begin)
                with torch.cuda.stream(side):
                    step(sides, out)
                    side_done.record()
                main.wait_event(side_done)
            done.record()
            done.synchronize()
            return begin.elapsed_time(done)

        kinds = ("model", "stats", "serial", "two streams")
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(calls):
            for kind in kinds:  # interleaved: the device's clocks move alike for all
                times[kind].append(timed(kind))
    ms = {k: statistics.median(v) for k, v in times.items()}
    print(f"overlap ({calls} steps each, device ms, median): model {ms['model']:.3f}, stats {ms['stats']:.3f}, "
          f"serial {ms['serial']:.3f} ({ms['serial'] / ms['model']:.2f}x the model), "
          f"two streams {ms['two streams']:.3f} ({ms['two streams'] / ms['model']:.2f}x the model)", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="transformer")
    p.add_argument("--preset", choices=["full", "small", "tiny"], default="full")
    p.add_argument("--variant", action="append", default=[],
                   help="name=path of a kernels module[:RBLOCK[:programs per SM[:min tiles[:BLOCK[:warps]]]]] "
                        "(repeatable)")
    p.add_argument("--strided", metavar="NAME", default=None,
                   help="also time the package's kernels with dense permutations read by the strided kernel")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--per-side", action="store_true", help="also time each side alone (package kernels)")
    p.add_argument("--rounds", type=int, default=2, help="every variant this many times, alternating")
    p.add_argument("--overlap", action="store_true",
                   help="also time the model and its stats launches on one stream and on two (device ms)")
    args = p.parse_args()
    import torch

    from aoti_debug.runtime import fused_stats as fs

    if not torch.cuda.is_available():
        print("stats_kernel_sides.py needs a CUDA device", file=sys.stderr)
        return 2
    recorded = record_sides(args.model, args.preset)
    sides = rebuild(recorded)
    nbytes = sum(t.numel() * t.element_size() for ts in sides for t in ts)
    k = max(len(ts) for ts in sides)
    out = torch.zeros(9 * (k + 8), dtype=torch.float64, device="cuda")
    print(f"{args.model}: {len(sides)} sides, {sum(len(ts) for ts in sides)} tensors, {nbytes / 2**20:.1f} MiB a step; "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    if args.per_side:
        use_kernels(None, None)
        per_side(sides, out)
    variants = [("package", None, ())]
    for v in args.variant:
        name, rest = v.split("=", 1)
        path, *nums = rest.split(":")
        variants.append((name, path, tuple(int(n) for n in nums)))
    if args.strided:
        variants.append((args.strided, None, (0, 0, 0, 0, 0, False)))
    ref = None
    for r in range(args.rounds):
        for name, path, nums in variants:
            use_kernels(path, *nums)
            ms, rows = run(sides, out, args.calls)
            if ref is None:
                ref = rows
            exact = all(torch.equal(a[1], b[1]) and torch.equal(a[0][:, [0, 1, 4, 5, 6, 7]].nan_to_num(7.0),
                                                                b[0][:, [0, 1, 4, 5, 6, 7]].nan_to_num(7.0))
                        for a, b in zip(ref, rows))
            regs = sorted({(c.name if hasattr(c, "name") else "?", getattr(c, "n_regs", -1), getattr(c, "n_spills", -1))
                           for c in fs._compiled.values()})
            rel = max(float(((a[0][:, 2:4] - b[0][:, 2:4]).abs() / b[0][:, 2:4].abs().clamp_min(1e-300))
                            .nan_to_num(0.0).max()) for a, b in zip(ref, rows))
            print(f"round {r} {name:<12} {ms:7.3f} ms/step  {nbytes / ms / 1e6:6.0f} GB/s  "
                  f"exact fields {'same' if exact else 'DIFFER'}  mean/std rel diff {rel:.1e}  regs/spills {regs}", flush=True)
    use_kernels(None, None)
    if args.overlap:
        overlap(args.model, args.preset, sides, out, args.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
