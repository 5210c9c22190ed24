"""The bookkeeping of express launches (``hooks.GraphHandle._express``), on CPU with plans
made by hand: which launches get an entry, that a change of plan retires it, and that a
side its plan declines is recorded in full once, under its launch's own numbers. The
express sides themselves (the library's C function, the device ring) are checked on the
GPU (tests/gpu/test_device_ring_gpu.py: counted per call, records bit for bit)."""

from __future__ import annotations

import os
import threading
import time
import types

import pytest
import torch

from aoti_debug.format.protocol import make_site
from aoti_debug.runtime import fused_stats, hooks, ring_records, session
from aoti_debug.runtime.session import Job

pytestmark = pytest.mark.quick  # compiles nothing: make check runs it

LABEL = "graph0"


def _site(site_id: int = 3, before: bool = True):
    inputs = (("x", "input", "tensor", "arg0_1", False, (), ()),) if before else ()
    return make_site(("", "k", "k", inputs, (("buf0", "output", "tensor", "buf0", False, (), ()),), "src", site_id,
                      ""))


def _plan(site, phase: str, t: torch.Tensor) -> ring_records.SidePlan:
    return ring_records.SidePlan(site, [{"phase": phase}], [t], [True], None)


@pytest.fixture
def sess(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTI_DEBUG_DIR", str(tmp_path))
    session.reset()
    yield session.current()
    session.reset()


def test_a_launch_goes_express_once_both_sides_have_plans(sess):
    g = hooks.GraphHandle(None, "stats", False)
    site, t = _site(), torch.zeros(2)
    after = _plan(site, "after", t)
    g._offer_express(sess, site, LABEL, after)
    assert id(site) not in g._express, "its before side has no plan yet"
    before = g._ring_plans[(id(site), LABEL, "before")] = _plan(site, "before", t)
    g._offer_express(sess, site, LABEL, after)
    x = g._express[id(site)]
    assert (x.sess, x.label, x.before, x.after, x.producer) == (sess, LABEL, before, after, False)
    # A launch that passes nothing before it: its after side's plan alone.
    bare = _site(4, before=False)
    g._offer_express(sess, bare, LABEL, _plan(bare, "after", t))
    assert g._express[id(bare)].before is None

    # What asks the hooks for more keeps their own path: a device sync after each
    # launch, a flight recorder, a plan of values in lists or tuples.
    synced = hooks.GraphHandle(None, "stats", True)
    synced._ring_plans[(id(site), LABEL, "before")] = before
    synced._offer_express(sess, site, LABEL, after)
    assert not synced._express
    listed = _plan(site, "after", t)
    listed.structure = [(tuple, 1), None]
    g._express.clear()
    g._offer_express(sess, site, LABEL, listed)
    assert not g._express
    recording = types.SimpleNamespace(flight=object())  # (a session with a flight recorder, as the offer sees it)
    g._offer_express(recording, site, LABEL, after)
    assert not g._express


def test_a_new_plan_retires_the_entry_and_a_failed_one_clears_all(sess):
    g = hooks.GraphHandle(None, "stats", False)
    site, other, t = _site(), _site(5), torch.zeros(2)
    for s in (site, other):
        g._express[id(s)] = hooks._Express(sess, LABEL, None, _plan(s, "after", t), False)
    rec = {"phase": "before", "arg": "x"}
    g._plan((id(site), LABEL, "before"), site, [Job(rec)], [t], None, [(rec, t)], [])
    assert (id(site), LABEL, "before") in g._ring_plans
    assert id(site) not in g._express and id(other) in g._express
    g._plan_failed(RuntimeError("a launch failed"))
    assert not g._express and not g._ring_plans


def test_a_declined_side_is_recorded_in_full_under_its_launchs_numbers(sess, monkeypatch):
    g = hooks.GraphHandle(None, "stats", False)
    site, t = _site(), torch.zeros(2)
    g._express[id(site)] = hooks._Express(sess, LABEL, _plan(site, "before", t), _plan(site, "after", t), False)
    recorded = []

    def record(self, sess, site, args, values, phase, extra=None, planned=True):
        tls = self._tls
        recorded.append((phase, planned, tls.launch, tls.call, tls.label, len(args)))

    monkeypatch.setattr(hooks.GraphHandle, "_express_side", lambda self, *args: False)
    monkeypatch.setattr(hooks.GraphHandle, "_record", record)
    for _ in range(2):
        g.launch(site, (t,))
        g.done(site, (t,))
    assert recorded == [("before", False, 1, 0, LABEL, 1), ("after", False, 1, 0, LABEL, 1),
                        ("before", False, 2, 1, LABEL, 1), ("after", False, 2, 1, LABEL, 1)]

    # In a new session (a new run) the entry made in the old one is not used: the hooks'
    # own path, whose plans then offer it again.
    session.reset()
    recorded.clear()
    g.launch(site, (t,))
    g.done(site, (t,))
    assert recorded == [("before", True, 1, 0, LABEL, 1), ("after", True, 1, 0, LABEL, 1)]


# -- the express hooks in the runtime library (ring_express.h) ---------------------------
# The library's function does what _express_launch / _express_done and the planned side
# under them do in Python; here both run the same steps of a chain of launches into a
# ring without a device (registered as the ring of stream 0 of CUDA device 0, its specs
# checking these CPU tensors and making no launch), and leave the same state: the queued
# runs' entries and plans, the session's numbers, the rows producers keep for consumers.
# Their launches (the same spec and rows handed to the same C call) are the GPU tests'
# (tests/gpu/test_device_ring_gpu.py: records bit for bit).


class _Segment:
    """What the hooks (and ring_express.h) read of a device ring segment."""

    def __init__(self, cap: int, addr: int):
        from aoti_debug.runtime import device_ring

        self.addr, self.cap, self.used = addr, cap, 0
        self.arrival = device_ring.Arrival(self)

    def release(self) -> None:
        pass


class _Ring:
    """``device_ring.Ring.reserve`` without a device: a segment too full for a side is
    replaced by a fresh one (a new arrival), as shipping it does."""

    def __init__(self, cap: int):
        self._lock = threading.Lock()
        self.cap = cap
        self.segments = [_Segment(cap, 1 << 20)]
        self.current = self.segments[0]

    def ship(self) -> None:
        """Ship the segment being filled (a flush ships every ring)."""
        with self._lock:
            seg = self.current
            if seg.used and not seg.arrival.ready():
                self._ship(seg)

    def _ship(self, seg: _Segment) -> None:
        # Its "device" rows as they arrive: each value its row's own number (the segment's
        # rows numbered from its address), so that a record's stats say which row it read.
        seg.shipped_rows = seg.used
        host = torch.arange(9 * seg.cap, dtype=torch.float64) + seg.addr
        seg.arrival.ship(types.SimpleNamespace(synchronize=lambda: None), host)

    def reserve(self, k: int):
        with self._lock:
            seg = self.current
            seg.used = (seg.used + 7) & ~7
            if seg.used + k > seg.cap:
                self._ship(seg)
                seg = self.current = _Segment(self.cap, (1 << 20) * (len(self.segments) + 1))
                self.segments.append(seg)
            first = seg.used
            seg.used += k
            return seg, first


def _chain_sites(n: int = 4):
    """Launch 0 reads its weight; launch i>0 takes launch i-1's output, reads its weight and
    passes an int; the last launch takes the outputs of launches n-1 and 0 alone (a side
    with no stats kernel, its two rows maybe in two segments: a residual add). Each writes
    one output."""
    raw = []
    for i in range(n):
        before = [(f"w{i}", "input", "tensor", f"w{i}", False, (), ())]
        if i:
            before = [(f"buf{i - 1}", "input", "tensor", f"buf{i - 1}", False, (), (i - 1, 0)), *before,
                      ("s", "input", "scalar", "3", False, (), ())]
        raw.append(("", f"triton_poi_fused_{i}", "k", tuple(before),
                    ((f"buf{i}", "output", "tensor", f"buf{i}", False, (), ()),), "src", i, ""))
    raw.append(("", "triton_poi_fused_last", "k", ((f"buf{n - 1}", "input", "tensor", f"buf{n - 1}", False, (), (n - 1, 0)),
                                                  ("buf0", "input", "tensor", "buf0", False, (), (0, 0))),
                ((f"buf{n}", "output", "tensor", f"buf{n}", False, (), ()),), "src", n, ""))
    return raw


def _chain_values(n: int = 4):
    g0 = torch.Generator().manual_seed(0)
    weights = [torch.randn(8, generator=g0) for _ in range(n)]
    bufs = [torch.randn(8, generator=g0) for _ in range(n + 1)]
    sides = [(([bufs[i - 1]] if i else []) + [weights[i]] + ([3] if i else []), [bufs[i]]) for i in range(n)]
    return sides + [([bufs[n - 1], bufs[0]], [bufs[n]])]


def _run_express(library, monkeypatch, path: str, steps: int = 6, cap: int = 1 << 12, during=None,
                 write: bool = False):
    """The state ``steps`` express steps of the chain leave, through the library's express
    function (``path`` "c") or the hooks' Python around the library's side function
    ("python"); ``during(step, g)`` runs before each step. ``write``: the manifest the
    session's writer wrote of them (and of the warm-up), its rows shipped as they fill and
    at the flush, instead."""
    from aoti_debug.format.protocol import PROTOCOL_VERSION
    from aoti_debug.runtime import cpu_records, device_ring

    _runs[0] += 1  # a run directory of its own (a session numbers its records after those there)
    monkeypatch.setenv("AOTI_DEBUG_DIR", os.path.join(os.environ["AOTI_DEBUG_DIR"], f"{path}-{_runs[0]}"))
    session.reset()
    ring = _Ring(cap)
    if write:
        monkeypatch.setattr(session, "BEFORE_FLUSH", [ring.ship])
    else:
        monkeypatch.setattr(session.Session, "_start", lambda self: None)  # no writer: the queue is compared
    sess = session.current()
    h = hooks.GraphHandle
    with monkeypatch.context() as mp:
        # Warm-up: the full path into the fake ring, planning each side.
        mp.setattr(h, "_ring_stats", lambda self, items, rows: (lambda seg, f: (
            seg.arrival, {i: f + j for j, i in enumerate(rows)}))(*ring.reserve(len(rows))))
        mp.setattr(h, "_ring_rows", lambda self, device, tensors: (lambda seg, f: (seg.arrival, f))(
            *ring.reserve(len(tensors))))
        mp.setattr(h, "_planned_rows", lambda self, plan, values: (lambda seg, f: (seg.arrival, f))(
            *ring.reserve(plan.ring_count)))
        mp.setattr(h, "_host_stats", lambda self, tensors, shapes=None, strides=None: [None] * len(tensors))
        mp.setattr(fused_stats, "side_function", False)
        mp.setattr(fused_stats, "express_function", False)
        g = hooks.graph(None, "stats", False, protocol=PROTOCOL_VERSION, native=library.path)
        g._records = None  # CPU tensors take the (fake) ring, as CUDA ones take the device's
        sites = [g.site(raw) for raw in _chain_sites()]
        values = _chain_values()

        def step() -> None:
            for site, (before, after) in zip(sites, values):
                g.launch(site, before)
                g.done(site, after)

        for _ in range(3):
            step()
    assert len(g._express) == len(sites), "the chain no longer reaches the express path"
    if not write:
        with sess._queue_lock:  # (the warm-up's records)
            sess._queue.clear()
            sess._open_run = None
        # (a writer, for the C function appends to its open run only where one runs)
        monkeypatch.setattr(sess, "_thread", types.SimpleNamespace(join=lambda timeout=None: None))
    # The ring of stream 0 of CUDA device 0; each plan with the library's spec (no launch).
    monkeypatch.setattr(device_ring, "ring_for", lambda device: ring)
    monkeypatch.setattr(device_ring, "_raw_stream", lambda index: 0)
    monkeypatch.setitem(device_ring._rings, (0, 0), ring)
    monkeypatch.setattr(fused_stats, "_launch_hooks_installed", lambda: False)
    monkeypatch.setattr(fused_stats, "side_function", None)
    monkeypatch.setattr(fused_stats, "express_function", None)
    fused_stats.bind_side_function(library, cpu_records.values_config(library.codes))
    if not fused_stats.express_function:
        pytest.fail("the runtime library was built without its express function (Python headers, tensor layout)")
    if path == "python":
        monkeypatch.setattr(fused_stats, "express_function", False)
    by_plan = {}
    for site, (before, after) in zip(sites, values):
        by_plan[(id(site), "before")], by_plan[(id(site), "after")] = before, after
    for plan in g._ring_plans.values():
        vals = by_plan[(id(plan.site), "after" if plan.after else "before")]
        if plan.device is not None:
            plan.device = torch.device("cuda", 0)
        spec = fused_stats.side_spec(plan.meta, plan.ring_at, [t.data_ptr() for t in plan.ring_values(vals)], None,
                                     None, library.codes)
        assert spec
        plan.fast = (None if plan.device is None else ring, *spec)
    for n in range(steps):
        if during is not None:
            during(n, g)
        step()
    if write:
        session.flush()
        with open(os.path.join(session.dump_path(), "manifest.jsonl"), "rb") as f:
            return f.read()
    arrivals: dict[int, int] = {}

    def arrival(a) -> int:
        return arrivals.setdefault(id(a), len(arrivals))

    try:
        queue = []
        for job in sess._queue:
            fill = job.finish
            if isinstance(fill, ring_records.SideRun):
                queue.append((arrival(job.event), list(fill.entries), [id(p) for p in fill.plans], fill.size))
            else:  # a side whose taken rows are another segment's: a job of its own
                assert isinstance(fill, ring_records.RingSide), type(fill)
                queue.append((arrival(job.event), [fill.seq, fill.launch, fill.call, fill.row,
                                                   [(arrival(a), r) for a, r in fill.reused or ()]],
                              [id(fill.plan)], None))
        made = {k: (arrival(a), first, rows) for k, (a, first, rows) in g._tls.made.items()}
        state = dict(queue=queue, made=made, seq=sess.seq, launch=sess.launch, tls=(g._tls.launch, g._tls.call),
                     calls=sorted((k, cell[0]) for k, cell in sess.kernel_calls.items()),
                     rows=[(s.addr, s.used) for s in ring.segments])
    finally:
        with sess._queue_lock:  # (nothing a writer would wait for at the session's close)
            sess._queue.clear()
            sess._open_run = None
        monkeypatch.setattr(sess, "_thread", None)
    return state


_runs = [0]


def _normal(state: dict) -> dict:
    """A run's state without its plans' identities and their templates' addresses (each
    run's graph plans its own): every entry's other numbers."""
    queue = []
    for arrival, entries, _plans, size in state["queue"]:
        if size is None:  # a RingSide
            queue.append((arrival, entries, size))
            continue
        entries, at = list(entries), 0
        while at < len(entries):  # kRingEntryBaseSide: tag, seq, launch, call, row, template, records, taken...
            assert entries[at] == ring_records._BASE_SIDE
            entries[at + 5] = 0
            at += ring_records._BASE_SIDE_LEN + entries[at + 7]
        queue.append((arrival, entries, size))
    return {**state, "queue": queue}


def test_the_library_express_hooks_leave_the_python_hooks_state(library, fresh_session, monkeypatch):
    left = []
    monkeypatch.setattr(hooks.GraphHandle, "_express_left", lambda self, *a: left.append(a))
    c = _run_express(library, monkeypatch, "c")
    assert not left, "a side left the C function"
    python = _run_express(library, monkeypatch, "python")
    assert _normal(c) == _normal(python)
    assert len(c["queue"]) == 1 and len(c["queue"][0][2]) == 6 * 10  # one run: both sides of 5 launches, 6 steps
    assert c["made"] and c["seq"] > c["launch"] > 0


def test_segment_turnover_and_a_held_lock_go_through_the_python_path(library, fresh_session, monkeypatch):
    """A segment too full for a side (the Python path ships it and takes another) and a
    lock held by another thread (the Python path waits for it): the same state as the
    hooks' Python leaves, with the sides that left the C function taken by Python."""
    left = []
    express_left = hooks.GraphHandle._express_left
    monkeypatch.setattr(hooks.GraphHandle, "_express_left",
                        lambda self, *a: left.append(a[3]) or express_left(self, *a))
    held = threading.Event()

    def hold(step, g):
        if step == 2:  # the session's counters' lock, held for a moment by another thread
            lock = session.current()._count_lock

            def hold_it():
                with lock:
                    held.set()
                    time.sleep(0.05)

            threading.Thread(target=hold_it).start()
            held.wait()

    c = _run_express(library, monkeypatch, "c", cap=40, during=hold)
    python = _run_express(library, monkeypatch, "python", cap=40, during=hold)
    assert _normal(c) == _normal(python)
    assert len(c["rows"]) > 3 and len(c["queue"]) > 3  # segments turned over, a run each
    assert left and set(left) == {fused_stats.EXPRESS_SIDE_LEFT}


class _Chain:
    """Triton 3.6's ``HookChain`` as the hooks read it: its hooks in ``calls``."""

    def __init__(self, *calls):
        self.calls = list(calls)


@pytest.mark.parametrize("enter,exit_,leaves", [(None, None, False), ("empty", "empty", False), ("hook", None, True),
                                                ("empty", "hook", True)],
                         ids=["none", "empty-chains", "enter-hook", "exit-hook"])
def test_triton_launch_hooks_send_launching_sides_to_python(library, fresh_session, monkeypatch, enter, exit_,
                                                            leaves):
    """The library's function reads Triton's launch hook slots from the knobs
    ``fused_stats._launch_hooks_installed`` found, as it does: a slot that is None or an
    empty chain lets the library launch; a hook in either slot (a profiler such as
    Proton) sends every side that launches to the Python path, from the next side on."""
    slot = {None: None, "empty": _Chain(), "hook": _Chain(print)}
    left = []
    express_left = hooks.GraphHandle._express_left
    monkeypatch.setattr(hooks.GraphHandle, "_express_left",
                        lambda self, *a: left.append(a[3]) or express_left(self, *a))
    steps = []

    def install(step, g):
        if step == 3:
            monkeypatch.setattr(fused_stats, "_knobs",
                                types.SimpleNamespace(launch_enter_hook=slot[enter], launch_exit_hook=slot[exit_]))
        steps.append(len(left))

    _run_express(library, monkeypatch, "c", during=install)
    assert steps[3] == 0, "a side left the C function before a hook was installed"
    if leaves:  # steps 3-5, each the same sides: those that launch (every after side, the before sides reading)
        each = len(left) // 3
        assert each >= 5 and steps[3:] == [0, each, 2 * each] and len(left) == 3 * each, (steps, len(left))
        assert set(left) == {fused_stats.EXPRESS_SIDE_LEFT}
    else:
        assert not left


def test_the_library_express_hooks_write_the_python_hooks_manifest(library, fresh_session, monkeypatch):
    """The writer's manifest of the steps, through the runtime library's encoder: the same
    bytes from both paths (each record's stats the row it read), segments turning over."""
    c = _run_express(library, monkeypatch, "c", cap=64, write=True)
    python = _run_express(library, monkeypatch, "python", cap=64, write=True)
    assert c == python
    lines = c.decode().splitlines()
    assert len(lines) == 9 * 17 and not session.FAILURES, session.FAILURES[:3]
    assert sum('"reused"' in line for line in lines) == 9 * 5  # each consumer's input: its producer's row
