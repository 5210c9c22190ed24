"""A cpp_wrapper step on the GPU and its device time by kind of kernel, one configuration per process.

    python benchmarks/cpp_step.py --model transformer --mode base|stats [--no-reuse] [--blocks 6] [--steps 10]
    python benchmarks/cpp_step.py --model resnet18 --launches     # what each stats launch of a call reads

Compiles the model (``benchmarks/overhead_row.build_model``) with ``cpp_wrapper=True``,
uninstrumented (``base``) or at level ``stats`` (``--no-reuse``: every input read, none
taken from its producer's record: ``aoti_debug.enable(reuse=False)``), runs three warm-up steps, then
``--blocks`` blocks of ``--steps`` steps in lockstep (each step ends when the device is
done and, at ``stats``, its records are written: ``aoti_debug.flush()``) and prints the
median of the blocks' median step. At ``stats`` it then profiles ten steps and prints
the device time per step of the model's kernels, the contiguous stats kernel, the strided
one and the device copies (``elementwise_kernel``: what the C++ runtime made of strided
tensors before it read them in place). It also prints the median parts of a lockstep
step: the call's return (the host's issue time), the wait for the device, the flush. A
process per configuration: Dynamo would recompile a base model once aoti_debug is
enabled. Compare checkouts by alternating their processes on one machine in one sitting
(absolute times only from the GPU).

``--launches`` (level stats, no timing): the C++ runtime's device trace
(``AOTI_DEBUG_TRACE_DEVICE=1``) over one graph call after three warm-up calls, a line per
stats launch: the pack kernel's form (contiguous, dense and its tile, strided and its
tile width; vectorised or not), its tensors and programs, and the launch side after which
it went (where a waiting run went: the last side that joined it).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.overhead_row import MODELS, build_model  # noqa: E402


def _kind(name: str) -> str:
    if name == "_stats_kernel":
        return "contiguous stats kernel"
    if name == "_stats_kernel_perm":
        return "strided stats kernel"
    if name == "_stats_kernel_dense":
        return "dense stats kernel"
    if "elementwise_kernel" in name:
        return "device copies (elementwise_kernel)"
    return "model"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="transformer")
    p.add_argument("--mode", choices=["base", "stats"], default="stats")
    p.add_argument("--blocks", type=int, default=6)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--no-reuse", action="store_true", help="read every input, none taken from its producer")
    p.add_argument("--launches", action="store_true",
                   help="level stats: list one call's stats launches (kernel form, tensors, side) instead of timing")
    args = p.parse_args()
    if args.launches:
        os.environ["AOTI_DEBUG_TRACE_DEVICE"] = "1"  # (read at the runtime's first device launch)

    import torch
    from torch.profiler import ProfilerActivity, profile

    import aoti_debug

    if not torch.cuda.is_available():
        print("cpp_step.py: needs a CUDA device", file=sys.stderr)
        return 2
    os.environ.setdefault("AOTI_DEBUG_DIR", tempfile.mkdtemp(prefix="aoti_debug_cpp_step_"))
    model, x, source = build_model(args.model, "full", "cuda")

    parts: dict[str, list[float]] = collections.defaultdict(list)

    def block(fn) -> float:
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            fn(x)
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            aoti_debug.flush()
            t3 = time.perf_counter()
            times.append(t3 - t0)
            parts["issue"].append(t1 - t0)
            parts["wait"].append(t2 - t1)
            parts["flush"].append(t3 - t2)
        return statistics.median(times) * 1e3

    with torch.no_grad(), torch._inductor.config.patch(cpp_wrapper=True):
        if args.mode == "stats" or args.launches:
            aoti_debug.enable("stats", reuse=not args.no_reuse)
        fn = torch.compile(model)
        if args.launches:
            return launches(fn, x, source)
        for _ in range(3):
            fn(x)
        torch.cuda.synchronize()
        aoti_debug.flush()
        blocks = [block(fn) for _ in range(args.blocks)]
        mode = args.mode + (" (no reuse)" if args.no_reuse and args.mode != "base" else "")
        print(f"{source}, cpp_wrapper, {mode}, {torch.cuda.get_device_name()}, torch {torch.__version__}: "
              f"{statistics.median(blocks):.3f} ms/step (blocks: {' '.join(f'{b:.2f}' for b in blocks)})")
        print("  step parts, median ms: " + ", ".join(f"{k} {statistics.median(v) * 1e3:.3f}" for k, v in parts.items()))
        if args.mode == "base":
            return 0
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                fn(x)
            torch.cuda.synchronize()
    per_kind: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type.name == "CUDA":
            entry = per_kind[_kind(e.name)]
            entry[0] += e.device_time_total
            entry[1] += 1
    for kind, (us, n) in sorted(per_kind.items(), key=lambda kv: -kv[1][0]):
        print(f"  {us / 10:9.1f} us/step {n / 10:6.1f} launches/step  {kind}")
    return 0


_LAUNCH = re.compile(r"launch kernel (\d+) after (\S+): grid (\d+), block \d+, shared \d+, k (\d+)")


def _form(kernel: dict) -> str:
    vec = f"vec {kernel['vec']}"
    if kernel["cols"]:
        return f"strided, tile width {kernel['cols']}, {vec}"
    if kernel["dense"]:
        return f"dense, tile {kernel['dense']}, {vec}"
    return f"contiguous, {vec}"


def launches(fn, x, source: str) -> int:
    """``--launches``: the trace of one call after three, read back from fd 2."""
    import torch

    import aoti_debug
    from aoti_debug.codegen import device_stats

    capability = device_stats.capability()
    pack = device_stats.pack_path(capability) if capability else None
    if pack is None:
        print("cpp_step.py: no stats pack for this GPU (see the warning above)", file=sys.stderr)
        return 2
    with open(pack, "rb") as f:
        kernels = device_stats.read_pack(f.read())["kernels"]
    with tempfile.TemporaryFile(mode="w+b") as log:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            for _ in range(3):
                fn(x)
            torch.cuda.synchronize()
            aoti_debug.flush()
            os.write(2, b"@@ the call\n")
            fn(x)
            torch.cuda.synchronize()
            aoti_debug.flush()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        text = log.read().decode(errors="replace")
    lines = text.split("@@ the call\n", 1)[-1].splitlines()
    found = [m for m in map(_LAUNCH.search, lines) if m]
    if not found:
        print(f"cpp_step.py: the call made no stats launch ({len(lines)} trace lines after the warm-up)",
              file=sys.stderr)
        return 1
    print(f"{source}, cpp_wrapper, stats: {len(found)} stats launches in one call")
    per_form: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for m in found:
        index, after, grid, k = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
        form = _form(kernels[index]) if index < len(kernels) else f"pack kernel {index}"
        per_form[form][0] += 1
        per_form[form][1] += k
        print(f"  {form:32s} tensors {k:4d}  programs {grid:5d}  after {after}")
    print("  by form: " + "; ".join(f"{form}: {n} launches, {k} tensors" for form, (n, k) in per_form.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
