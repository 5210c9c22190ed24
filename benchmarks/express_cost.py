"""The Python of express launches (every side planned) at level stats, on any machine.

    python benchmarks/express_cost.py [--launches 20] [--rounds 30] [--steps 50]

A chain of ``--launches`` launches, ResNet-like: each reads a weight and takes its
input from the previous launch's output (``SiteArg.reuse``), and writes one output.
The first steps run the full path into a fake ring of host rows (as the tests' fake ring
does) and plan every side; from then on the hooks take the express path of a CUDA
model (``GraphHandle._express_launch``), with the library's side function replaced by a
stub that answers "launched" and a ring that reserves rows without a device. What is
timed is the hooks' own Python: numbering, the taken rows, the reservation, the
records' numbers, the run entry; no kernel launch and no device. The writer thread is
not started (the queue is dropped at the end). Prints the median and the minimum over
``--rounds`` of microseconds per launch (both hooks). Compare runs of two checkouts in
one sitting, alternated: on a shared host the minimum moves less than the median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


class _Segment:
    """What a planned side needs of a ring segment: its rows' address and count, its arrival."""

    def __init__(self, device_ring, cap: int):
        self.addr, self.cap, self.used, self.buf = 0, cap, 0, None
        self.shipped_rows = 0
        self.arrival = device_ring.Arrival(self)

    def release(self) -> None:
        pass


class _FakeRing:
    """``device_ring.Ring.reserve`` without a device: rows aligned to 8, wrapping around."""

    def __init__(self, device_ring, cap: int = 1 << 16):
        self.current = _Segment(device_ring, cap)
        self._lock = threading.Lock()

    def reserve(self, k: int):
        with self._lock:
            seg = self.current
            used = (seg.used + 7) & ~7
            if used + k > seg.cap:
                used = 0
            seg.used = used + k
            return seg, used

    def rows(self, tensors) -> tuple:
        seg, first = self.reserve(len(tensors))
        return seg.arrival, first


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--launches", type=int, default=20)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--steps", type=int, default=50, help="steps per round")
    args = p.parse_args()
    os.environ.setdefault("AOTI_DEBUG_DIR", tempfile.mkdtemp(prefix="aoti_debug_express_"))

    import torch

    from aoti_debug.codegen import native_library
    from aoti_debug.format.protocol import PROTOCOL_VERSION, Site, SiteArg
    from aoti_debug.runtime import device_ring, fused_stats, hooks, native_stats, session

    path = native_library.stats_library_path()
    if not path:
        print("express_cost.py: the runtime library could not be built (a C++ compiler?)", file=sys.stderr)
        return 2
    lib = native_stats.load(path)
    n = args.launches
    sites = []
    for i in range(n):
        before = [SiteArg(f"w{i}", "input", "tensor", f"w{i}")]
        if i:
            before.insert(0, SiteArg(f"buf{i - 1}", "input", "tensor", f"buf{i - 1}", reuse=(i - 1, 0)))
        sites.append(Site("", f"triton_poi_fused_{i}", "k", tuple(before),
                          (SiteArg(f"buf{i}", "output", "tensor", f"buf{i}"),), None, i, ""))
    g0 = torch.Generator().manual_seed(0)
    weights = [torch.randn(64, generator=g0) for _ in range(n)]
    bufs = [torch.randn(64, generator=g0) for _ in range(n)]
    sides = [(s, ([bufs[i - 1]] if i else []) + [weights[i]], [bufs[i]]) for i, s in enumerate(sites)]

    session.reset()
    sess = session.current()
    ring = _FakeRing(device_ring)
    h = hooks.GraphHandle
    saved = {name: getattr(h, name) for name in ("_ring_stats", "_ring_rows", "_planned_rows", "_host_stats")}
    saved_fs = {name: getattr(fused_stats, name) for name in ("side_function", "_launch_hooks_installed")}
    saved_ring_for, saved_start = device_ring.ring_for, session.Session._start
    try:
        # Warm-up: the full path into the fake ring (no tensor read on the host), planning each side.
        h._ring_stats = lambda self, items, rows: (lambda a, f: (a, {i: f + j for j, i in enumerate(rows)}))(
            *ring.rows([items[i][1] for i in rows]))
        h._ring_rows = lambda self, device, tensors: ring.rows(tensors)
        h._planned_rows = lambda self, plan, values: ring.rows(plan.ring_values(values))
        h._host_stats = lambda self, tensors, shapes=None, strides=None: [None] * len(tensors)
        session.Session._start = lambda self: None  # no writer: the hooks alone are timed
        g = hooks.graph(None, "stats", False, protocol=PROTOCOL_VERSION, native=lib.path)
        g._records = None  # CPU tensors take the (fake) ring, as CUDA ones take the device's
        known = [g.site(tuple(s)) for s in sites]

        def step() -> None:
            for (_site, before, after), site in zip(sides, known):
                g.launch(site, before)
                g.done(site, after)

        for _ in range(3):
            step()
        # The express path of a CUDA model: the real _planned_rows, a stub for the C call.
        for name in ("_ring_stats", "_ring_rows", "_planned_rows"):
            setattr(h, name, saved[name])
        device_ring.ring_for = lambda device: ring
        fused_stats.side_function = lambda spec, values, out, rows: fused_stats.SIDE_LAUNCHED
        fused_stats._launch_hooks_installed = lambda: False
        plans = list(g._ring_plans.values())
        for plan in plans:
            plan.fast = (None if plan.device is None else ring, None, 0, None)
        if len(g._express) != n or len(plans) != 2 * n:
            print(f"express_cost.py: {len(g._express)} express launches and {len(plans)} plans, "
                  f"not {n} and {2 * n}: the bench no longer reaches the express path", file=sys.stderr)
            return 1
        times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            times.append((time.perf_counter() - t0) / (args.steps * n) * 1e6)
            with sess._queue_lock:
                sess._queue.clear()
                sess._open_run = None
            if not all(plan.fast for plan in plans):
                print("express_cost.py: a plan left the express path", file=sys.stderr)
                return 1
    finally:
        for name, fn in saved.items():
            setattr(h, name, fn)
        for name, fn in saved_fs.items():
            setattr(fused_stats, name, fn)
        device_ring.ring_for, session.Session._start = saved_ring_for, saved_start
        with sess._queue_lock:
            sess._queue.clear()
            sess._open_run = None
    print(f"{n} express launches a step (each: a taken input and a weight before, one output after), "
          f"{args.steps} steps x {args.rounds} rounds, torch {torch.__version__}: "
          f"median {statistics.median(times):.2f} us a launch (both hooks), min {min(times):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
