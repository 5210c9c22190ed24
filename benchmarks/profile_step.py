"""Where an instrumented step's host time goes: the model thread's profile and the writer
thread's CPU time, for one level of one model.

    python benchmarks/profile_step.py --model transformer --level stats [--steps 20] [--top 25]

Compiles the model once with the level on (Python wrapper), runs warm-up steps, then
prints: the median step in lockstep (records on disk each step) and back to back, the
uninstrumented step for the ratio, the CPU seconds the writer thread used per step, and
the model thread's cProfile over the lockstep steps (sorted by own time). Each number is
from this one process; ratios only (absolute times only from the GPU machine).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import overhead_row  # noqa: E402
from benchmarks.overhead_row import MODELS, build_model, quiet  # noqa: E402


def thread_cpu_s(name: str) -> float | None:
    """CPU seconds (user + system) used so far by this process's thread called ``name``."""
    t = next((t for t in threading.enumerate() if t.name == name), None)
    if t is None or t.native_id is None:
        return None
    try:
        with open(f"/proc/self/task/{t.native_id}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def top(prof: cProfile.Profile, order: str, n: int) -> str:
    """The profile's ``n`` top lines by ``order``, from its column header on."""
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats(order).print_stats(n)
    text = out.getvalue()
    return text[text.find("   ncalls"):] if "   ncalls" in text else text


def stats_kernel_variants() -> int | None:
    """How many variants of the fused stats kernel Triton compiled in this process (None:
    not used, or a Triton whose JIT keeps them elsewhere)."""
    from aoti_debug.runtime import fused_stats

    kernel = fused_stats._kernel_obj
    caches = getattr(kernel, "device_caches", None)
    if not caches:
        return None
    try:
        return sum(len(c[0]) for c in caches.values())
    except (TypeError, IndexError):
        return None


def timeline(fn, inputs, sync) -> str:
    """The device's view of ``fn`` over ``inputs`` back to back: the wall time per step,
    the kernels' summed time per step by kind (the stats kernel, copies and fills, the
    model's), and the device's idle share of the wall time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        t0 = time.perf_counter()
        for xi in inputs:
            fn(xi)
        sync()
        wall = (time.perf_counter() - t0) / len(inputs)
    kinds: dict[str, list[float]] = {}
    spans = []
    for e in p.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        name = e.name
        copy = name.startswith(("Memcpy", "Memset")) or "copy" in name.lower() or "fill" in name.lower()
        kind = "stats kernel" if "_stats_kernel" in name else "copies/fills" if copy else "model kernels"
        kinds.setdefault(kind, []).append(e.time_range.elapsed_us() / 1e3)
        spans.append((e.time_range.start, e.time_range.end))
    busy, end = 0.0, None
    for s, t in sorted(spans):  # the union of kernel intervals (us)
        if end is None or s > end:
            busy += t - s
            end = t
        elif t > end:
            busy += t - end
            end = t
    n = len(inputs)
    lines = [f"  wall {wall * 1e3:.3f}; device busy {busy / 1e3 / n:.3f} ({busy / 1e3 / n / (wall * 1e3):.0%} of wall)"]
    for kind, times in sorted(kinds.items()):
        lines.append(f"  {kind:<14} {sum(times) / n:8.3f} in {len(times) / n:.0f} kernels")
    top_names: dict[str, float] = {}
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            top_names[e.name[:60]] = top_names.get(e.name[:60], 0.0) + e.time_range.elapsed_us() / 1e3
    for name, ms in sorted(top_names.items(), key=lambda kv: -kv[1])[:8]:
        lines.append(f"    {ms / n:8.3f}  {name}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="transformer")
    p.add_argument("--preset", choices=["full", "small", "tiny"], default="full")
    p.add_argument("--device", default=None, help="cuda (default where available) or cpu")
    p.add_argument("--level", default="stats", choices=["stats", "print", "names", "save"])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--first-call", action="store_true",
                   help="also profile the instrumented compile and first call (sorted by cumulative time)")
    p.add_argument("--breakdown", action="store_true",
                   help="also where a lockstep step's time goes: issuing it (host), the device finishing "
                        "after that, and the records' flush after the device is done, base and instrumented")
    p.add_argument("--timeline", action="store_true",
                   help="also the device's view of back-to-back steps (torch.profiler): kernel time per step "
                        "by kind, base and instrumented")
    p.add_argument("--mode", default=None, choices=["reduce-overhead"],
                   help="torch.compile's mode, base and instrumented (reduce-overhead: CUDA graphs; level "
                        "stats records every replay)")
    p.add_argument("--no-reuse", action="store_true",
                   help="read every input again, none from the record of the launch that wrote it "
                        "(aoti_debug.enable(reuse=False), AOTI_DEBUG_REUSE=0)")
    args = p.parse_args()

    import torch

    import aoti_debug

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    os.environ.setdefault("AOTI_DEBUG_DIR", tempfile.mkdtemp(prefix="aoti_debug_profile_"))

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()
        aoti_debug.flush()

    model, x, source = build_model(args.model, args.preset, device)
    inputs = [torch.randn_like(x) for _ in range(args.steps)]

    def lockstep(fn) -> list[float]:
        return overhead_row.lockstep(fn, inputs, sync)

    def breakdown(fn) -> tuple[float, float, float]:
        """Median ms of each part of a lockstep step: issue, device lag, flush after it."""
        parts: list[tuple[float, float, float]] = []
        for xi in inputs:
            t0 = time.perf_counter()
            fn(xi)
            t1 = time.perf_counter()
            if device == "cuda":
                torch.cuda.synchronize()
            t2 = time.perf_counter()
            aoti_debug.flush()
            parts.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
        return tuple(statistics.median(p[i] for p in parts) * 1e3 for i in range(3))

    timelines = []
    breakdowns = []
    with torch.no_grad():
        base = torch.compile(model, mode=args.mode)
        base(x)
        sync()
        base_step = statistics.median(lockstep(base))
        if args.timeline and device == "cuda":
            timelines.append(("base", timeline(base, inputs, sync)))
        if args.breakdown:
            breakdowns.append(("base", breakdown(base)))
        torch._dynamo.reset()
        aoti_debug.enable(args.level, reuse=not args.no_reuse)
        fn = torch.compile(model, mode=args.mode)
        first_prof = cProfile.Profile() if args.first_call else None
        t0 = time.perf_counter()
        if first_prof is not None:
            first_prof.enable()
        fn(x)
        sync()
        if first_prof is not None:
            first_prof.disable()
        first_call = time.perf_counter() - t0
        with quiet():
            for _ in range(3):
                fn(x)
            sync()
            step = statistics.median(lockstep(fn))
            w0 = thread_cpu_s("aoti_debug-writer")
            t0 = time.perf_counter()
            for xi in inputs:
                fn(xi)
            sync()
            steady = (time.perf_counter() - t0) / len(inputs)
            w1 = thread_cpu_s("aoti_debug-writer")
            prof = cProfile.Profile()
            prof.enable()
            lockstep(fn)
            prof.disable()
            if args.timeline and device == "cuda":
                timelines.append((f"ours {args.level}", timeline(fn, inputs, sync)))
            if args.breakdown:
                breakdowns.append((f"ours {args.level}", breakdown(fn)))
    print(f"{source} on {torch.cuda.get_device_name() if device == 'cuda' else 'CPU'}, level {args.level}"
          f"{' (no reuse)' if args.no_reuse else ''}{f', mode {args.mode}' if args.mode else ''}, torch {torch.__version__}, {len(inputs)} steps")
    print(f"base step {base_step * 1e3:.3f} ms; instrumented {step * 1e3:.3f} ms ({step / base_step:.2f}x), "
          f"back to back {steady * 1e3:.3f} ms ({steady / base_step:.2f}x); first call {first_call:.1f} s")
    if w0 is not None and w1 is not None:
        print(f"writer thread CPU: {(w1 - w0) / len(inputs) * 1e3:.3f} ms per step (back to back)")
    if first_prof is not None:
        print(f"compile and first call, cProfile (cumulative), {first_call:.1f} s:")
        print(top(first_prof, "cumulative", 2 * args.top))
        print(top(first_prof, "tottime", args.top))
    variants = stats_kernel_variants()
    if variants is not None:
        print(f"fused stats kernel: {variants} compiled variants in this process")
    for name, (issue, lag, tail) in breakdowns:
        print(f"lockstep step, {name}: issue {issue:.3f} ms, device after it {lag:.3f} ms, flush after that "
              f"{tail:.3f} ms (medians)")
    for name, lines in timelines:
        print(f"device timeline, {name}, {len(inputs)} steps back to back (torch.profiler), ms per step:")
        print(lines)
    print(f"cProfile over {len(inputs)} lockstep steps, all threads (cProfile's own cost inflates these):")
    print(top(prof, "tottime", args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
