"""The host cost of express launches (every side planned) at level stats, on any machine.

    python benchmarks/express_cost.py [--launches 20] [--rounds 30] [--steps 50] [--path c,python]

A chain of ``--launches`` launches, ResNet-like: each reads a weight and takes its
input from the previous launch's output (``SiteArg.reuse``), and writes one output.
The first steps run the full path into a fake ring of host rows (as the tests' fake ring
does) and plan every side; from then on the hooks take the express path of a CUDA
model, through the runtime library's C function of both hooks (``--path c``:
``ring_express.h``, the hooks' default where the library has it) or through the hooks'
Python (``--path python``: ``GraphHandle._express_launch``, the library's side function
replaced by a stub that answers "launched"), with a ring that reserves rows without a
device (registered as the ring of a CUDA stream). The C path checks every value against
its plan's spec as on a GPU; its spec has no kernel launch (no device here). What is
timed is the hooks' own work: numbering, the taken rows, the reservation, the records'
numbers, the run entry; no kernel launch and no device. The writer thread is not started
(the queue is dropped at each round's end). Prints, per path, the median and the
minimum over ``--rounds`` of microseconds per launch (both hooks), the paths' rounds
alternated. Compare runs of two checkouts in one sitting, alternated: on a shared host
the minimum moves less than the median. Exits 1 where the launches stop going express
(or, on the C path, leave the C function).
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

    def __init__(self, device_ring, cap: int = 1 << 22):
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
    p.add_argument("--path", default="c,python", help="c, python or both (their rounds alternated)")
    args = p.parse_args()
    paths = [x.strip() for x in args.path.split(",") if x.strip()]
    if not paths or set(paths) - {"c", "python"}:
        p.error(f"--path: c, python or both, not {args.path!r}")
    os.environ.setdefault("AOTI_DEBUG_DIR", tempfile.mkdtemp(prefix="aoti_debug_express_"))

    import torch

    from aoti_debug.codegen import native_library
    from aoti_debug.format.protocol import PROTOCOL_VERSION, Site, SiteArg
    from aoti_debug.runtime import cpu_records, device_ring, fused_stats, hooks, native_stats, session

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
    saved_fs = {name: getattr(fused_stats, name)
                for name in ("side_function", "express_function", "_launch_hooks_installed")}
    saved_ring = (device_ring.ring_for, device_ring._raw_stream, dict(device_ring._rings))
    saved_start = session.Session._start
    try:
        # Warm-up: the full path into the fake ring (no tensor read on the host), planning each side.
        h._ring_stats = lambda self, items, rows: (lambda a, f: (a, {i: f + j for j, i in enumerate(rows)}))(
            *ring.rows([items[i][1] for i in rows]))
        h._ring_rows = lambda self, device, tensors: ring.rows(tensors)
        h._planned_rows = lambda self, plan, values: ring.rows(plan.ring_values(values))
        h._host_stats = lambda self, tensors, shapes=None, strides=None: [None] * len(tensors)
        session.Session._start = lambda self: None  # no writer: the hooks alone are timed
        fused_stats.express_function = False  # (bound below)
        g = hooks.graph(None, "stats", False, protocol=PROTOCOL_VERSION, native=lib.path)
        g._records = None  # CPU tensors take the (fake) ring, as CUDA ones take the device's
        known = [g.site(tuple(s)) for s in sites]

        def step() -> None:
            for (_site, before, after), site in zip(sides, known):
                g.launch(site, before)
                g.done(site, after)

        for _ in range(3):
            step()
        for name in ("_ring_stats", "_ring_rows", "_planned_rows"):
            setattr(h, name, saved[name])
        # The ring of stream 0 of CUDA device 0, as the C function finds a ring.
        device_ring.ring_for = lambda device: ring
        device_ring._raw_stream = lambda index: 0
        device_ring._rings[(0, 0)] = ring
        fused_stats._launch_hooks_installed = lambda: False
        fused_stats.side_function = None
        fused_stats.bind_side_function(lib, cpu_records.values_config(lib.codes))
        c_side, c_express = fused_stats.side_function, fused_stats.express_function
        if "c" in paths and not c_express:
            print("express_cost.py: the runtime library has no express function here (Python's headers, or "
                  "torch's tensor layout, not found when it was built)", file=sys.stderr)
            return 2
        plans = list(g._ring_plans.values())
        values_of = {}
        for (_s, before, after), site in zip(sides, known):
            values_of[(id(site), "before")], values_of[(id(site), "after")] = before, after
        specs = {}
        cuda0 = torch.device("cuda", 0)
        for plan in plans:
            values = values_of[(id(plan.site), "after" if plan.after else "before")]
            if plan.device is not None:
                plan.device = cuda0  # (a CUDA model's ring values; the spec still checks these CPU tensors)
            ptrs = [t.data_ptr() for t in plan.ring_values(values)]
            spec = fused_stats.side_spec(plan.meta, plan.ring_at, ptrs, None, None, lib.codes)
            if not spec:
                print("express_cost.py: a plan has no spec for the library's function", file=sys.stderr)
                return 1
            specs[id(plan)] = (None if plan.device is None else ring, *spec)
        if len(g._express) != n or len(plans) != 2 * n:
            print(f"express_cost.py: {len(g._express)} express launches and {len(plans)} plans, "
                  f"not {n} and {2 * n}: the bench no longer reaches the express path", file=sys.stderr)
            return 1

        def use(name: str) -> None:
            if name == "c":  # the library's functions, each plan with its spec
                fused_stats.side_function, fused_stats.express_function = c_side, c_express
                for plan in plans:
                    plan.fast = specs[id(plan)]
                sess._thread = threading.current_thread()  # (a writer, as the C function appends to its run)
            else:  # the hooks' Python, the C side function stubbed
                fused_stats.express_function = False
                fused_stats.side_function = lambda spec, values, out, rows: fused_stats.SIDE_LAUNCHED
                for plan in plans:
                    plan.fast = (None if plan.device is None else ring, None, 0, None)
                sess._thread = None

        times: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(args.rounds):
            for name in paths:
                use(name)
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    step()
                times[name].append((time.perf_counter() - t0) / (args.steps * n) * 1e6)
                with sess._queue_lock:
                    sess._queue.clear()
                    sess._open_run = None
                ring.current.used = 0
                if not all(plan.fast for plan in plans) or len(g._express) != n:
                    print(f"express_cost.py: a launch left the express path ({name})", file=sys.stderr)
                    return 1
                left = fused_stats.express_left(reset=True)
                if name == "c" and left:
                    print(f"express_cost.py: hooks left the C function (ring_express.h line: count): {left}",
                          file=sys.stderr)
                    return 1
    finally:
        for name, fn in saved.items():
            setattr(h, name, fn)
        for name, fn in saved_fs.items():
            setattr(fused_stats, name, fn)
        device_ring.ring_for, device_ring._raw_stream = saved_ring[:2]
        device_ring._rings.clear()
        device_ring._rings.update(saved_ring[2])
        session.Session._start = saved_start
        sess._thread = None
        with sess._queue_lock:
            sess._queue.clear()
            sess._open_run = None
    for name in paths:
        label = "C function" if name == "c" else "Python hooks"
        print(f"{n} express launches a step (each: a taken input and a weight before, one output after), "
              f"{args.steps} steps x {args.rounds} rounds, torch {torch.__version__}, {label}: "
              f"median {statistics.median(times[name]):.2f} us a launch (both hooks), min {min(times[name]):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
