"""Where a lockstep step's flush goes: timestamps inside ``aoti_debug.flush()`` at level stats.

    python benchmarks/flush_parts.py [--model transformer|resnet18] [--steps 30]

A lockstep step (records on disk at every step, as ``overhead.py`` and
``profile_step.py`` time it) ends with the device synchronised and a flush: the device
ring's segment is shipped (``Ring._ship``, model thread), the writer thread waits for
its copy (``Arrival.synchronize``, the CUDA event inside it), encodes the queued sides
(``Session._encode``) and appends them to the manifest (``Session._append_text``). This
compiles the model (Python wrapper, CUDA), runs warm-up steps, wraps those functions with
timers, and prints for each entry and exit the median microseconds after the flush
began over ``--steps`` lockstep steps, in order, with the thread that ran it. A
function's ``#k`` is its k-th entry or exit within one flush (the writer's first batch
may have begun before the flush: only what happens inside it is shown). Absolute times
only from the GPU machine.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.overhead_row import MODELS, build_model  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="transformer")
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("flush_parts.py: needs a CUDA device (the device ring); run it on the GPU machine", file=sys.stderr)
        return 2

    import aoti_debug
    from aoti_debug.runtime import device_ring, session

    os.environ.setdefault("AOTI_DEBUG_DIR", tempfile.mkdtemp(prefix="aoti_debug_flush_"))
    events: list[tuple[float, str, str]] = []

    def timed(owner, attr: str, name: str) -> None:
        fn = getattr(owner, attr)

        def wrapper(*a, **k):
            events.append((time.perf_counter(), f"{name} >", threading.current_thread().name))
            try:
                return fn(*a, **k)
            finally:
                events.append((time.perf_counter(), f"{name} <", threading.current_thread().name))

        setattr(owner, attr, wrapper)

    timed(device_ring.Ring, "_ship", "ship")
    timed(device_ring.Arrival, "synchronize", "arrival")
    timed(torch.cuda.Event, "synchronize", "cuda event")
    timed(session.Session, "_encode", "encode")
    timed(session.Session, "_append_text", "write")
    timed(session.Session, "flush", "flush")

    model, x, source = build_model(args.model, "full", "cuda")
    inputs = [torch.randn_like(x) for _ in range(args.steps)]
    at: dict[str, list[float]] = collections.defaultdict(list)
    totals = []
    with torch.no_grad():
        aoti_debug.enable("stats")
        fn = torch.compile(model)
        for _ in range(4):
            fn(x)
            torch.cuda.synchronize()
            aoti_debug.flush()
        for xi in inputs:
            fn(xi)
            torch.cuda.synchronize()
            events.clear()
            t0 = time.perf_counter()
            aoti_debug.flush()
            totals.append((time.perf_counter() - t0) * 1e6)
            seen: collections.Counter = collections.Counter()
            for t, name, thread in list(events):
                seen[name] += 1
                at[f"{name} #{seen[name]}  [{thread}]"].append((t - t0) * 1e6)
    print(f"{source} on {torch.cuda.get_device_name()}, level stats, torch {torch.__version__}: "
          f"flush median {statistics.median(totals):.0f} us (min {min(totals):.0f}, max {max(totals):.0f}), "
          f"{len(totals)} lockstep steps")
    print("median us after the flush began:")
    for key, ts in sorted(at.items(), key=lambda kv: statistics.median(kv[1])):
        print(f"  {statistics.median(ts):7.0f}  {key}  ({len(ts)} of {len(totals)} flushes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
