"""Host time of each part of the Python runtime's hooks inside a running model, at level stats.

    python benchmarks/hook_parts.py [--model transformer|resnet18] [--steps 20] [--device cuda]

``side_cost.py`` times the parts of one launch side alone; inside a model every part
costs more (on the H100, 2-3x: the model's launches share the host's caches). This
compiles the model with level stats (Python wrapper), runs warm-up steps, then wraps
each listed function of the hooks with a timer and runs ``--steps`` steps back to back.
It prints the step's issue time (the timers' own cost included) and, per function,
calls per step, mean microseconds per call (nested calls included) and milliseconds per
step, sorted by the last. Absolute times only from the GPU machine.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.overhead_row import MODELS, build_model  # noqa: E402


def timed_parts():
    """``(owner, attribute)`` of each part timed: the hooks, the planned and full record
    paths, the stats kernel's launch (the library's planned side function, ``ring_side.h``,
    is wrapped as bound after the warm-up steps) and the session's bookkeeping."""
    from aoti_debug.runtime import cuda_graphs, device_ring, fused_stats, hooks, ring_records, session

    h, s = hooks.GraphHandle, session.Session
    return [(h, "launch"), (h, "done"), (h, "_record"), (h, "_ring_side"), (h, "_planned_rows"), (h, "_ring_rows"),
            (h, "_express_launch"), (h, "_express_done"), (h, "_express_side"),
            (h, "_tensors"), (h, "_label"), (fused_stats, "summarize"), (fused_stats, "_side_key"),
            (fused_stats, "kept_launches"), (fused_stats, "_launch_side"), (fused_stats, "side_function"),
            (fused_stats, "express_function"), (fused_stats, "_run"), (device_ring, "_raw_stream"),
            (fused_stats, "_launch_hooks_installed"), (device_ring, "ring_for"), (device_ring.Ring, "reserve"),
            (s, "submit_side"), (s, "submit_planned"), (s, "submit_all"), (s, "next_launch"), (s, "next_seq"),
            (s, "write_site"), (session, "current"), (ring_records.SidePlan, "matches"), (cuda_graphs, "prepare"),
            (hooks, "_capturing"), (hooks, "_is_capturing")]


def wrap(owner, attr: str, acc: dict) -> None:
    f = getattr(owner, attr)
    if not callable(f):  # (fused_stats.side_function where the library has none: False)
        return
    key = f"{getattr(owner, '__name__', owner)}.{attr}"

    def timed(*args, **kwargs):
        t0 = time.perf_counter_ns()
        try:
            return f(*args, **kwargs)
        finally:
            entry = acc[key]
            entry[0] += time.perf_counter_ns() - t0
            entry[1] += 1

    setattr(owner, attr, timed)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="transformer")
    p.add_argument("--preset", choices=["full", "small", "tiny"], default="full")
    p.add_argument("--device", default=None, help="cuda (default where available) or cpu")
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()

    import torch

    import aoti_debug

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    os.environ.setdefault("AOTI_DEBUG_DIR", tempfile.mkdtemp(prefix="aoti_debug_parts_"))

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()
        aoti_debug.flush()

    model, x, source = build_model(args.model, args.preset, device)
    acc: dict = collections.defaultdict(lambda: [0, 0])

    def issue_of(fn, before_timing=None) -> float:
        """Seconds to issue one of ``args.steps`` steps back to back, after four warm-up
        steps (``before_timing`` runs between)."""
        for _ in range(4):
            fn(x)
        sync()
        if before_timing is not None:
            before_timing()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            fn(x)
        seconds = (time.perf_counter() - t0) / args.steps
        sync()
        return seconds

    def wrap_parts() -> None:
        for owner, attr in timed_parts():
            wrap(owner, attr, acc)

    with torch.no_grad():
        base_issue = issue_of(torch.compile(model))  # the uninstrumented step, for the difference
        torch._dynamo.reset()
        aoti_debug.enable("stats")
        issue = issue_of(torch.compile(model), wrap_parts)
    n = args.steps
    print(f"{source} on {torch.cuda.get_device_name() if device == 'cuda' else 'CPU'}, level stats, "
          f"torch {torch.__version__}, {n} steps back to back")
    print(f"issue {issue * 1e3:.3f} ms/step (the timers' cost included), uninstrumented {base_issue * 1e3:.3f}")
    for key, (ns, calls) in sorted(acc.items(), key=lambda kv: -kv[1][0]):
        print(f"  {key:<44} {calls / n:7.1f}/step {ns / max(calls, 1) / 1e3:9.2f} us/call {ns / n / 1e6:8.3f} ms/step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
