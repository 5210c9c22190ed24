"""Level ``stats`` inside CUDA graphs (``torch.compile(mode="reduce-overhead")``).

While a graph is captured, each instrumented launch side adds the fused stats kernel
to the graph, writing into rows of a per-device arena reserved for that graph for good,
and leaves a template of its records. A wrapper that says where its tensors may be
written next (``defers=True``: a ``pending()`` line before each such launch or line,
``codegen/manager.py``) has its sides' stats launches deferred to that line and merged,
one launch per kind and layout for the run of sides (:meth:`Capture.summarize`). After every replay of the graph, the arena's rows
are copied to the host (one copy pair and one event, on the replay's stream) and the
templates become records with new launch and record numbers: every replay is recorded,
and the model keeps its CUDA graph. An input whose producer's side was captured before
it, written by nothing between (``SiteArg.reuse``), takes the producer's row: no stats
kernel reads it again. Where every side is one a plan keeps (``ring_records.SidePlan``),
a replay is one writer job, a run of planned sides the runtime library writes from the
replay's host copy (:class:`Replay`: a few Python steps a side, not a record dict and a
job per record). Levels save, print and names keep opting out of
CUDA graphs (``codegen/wrapper_lines.wrap_graph_codegen``).

Nothing is allocated, synchronised or compiled while a capture runs: the arena (slots,
partials, counters, pointer tables) is allocated before, outside the graph's memory
pool (``device_ring.private_empty``), at the first instrumented CUDA launch of a
process whose level is ``stats``; the stats kernel's variants were compiled by the
warm-up run that precedes a capture in CUDA-graph trees. Pointer tables are written to
the device when the capture ends, before the first replay.

``torch.cuda.CUDAGraph``'s ``capture_begin``, ``capture_end`` and ``replay`` (public API,
Python methods over ``torch._C._CUDAGraph`` in torch 2.11 and 2.13) are wrapped by
:func:`install`, undone by :func:`uninstall`.
"""

from __future__ import annotations

import array
import functools
import threading
from typing import Any, Sequence

import torch

from . import fused_stats
from . import session as _session
from .device_ring import event_done, fill, private_empty
from .fused_stats import _PERM_TW
from .ring_records import RingFill, SideRun
from .session import Job, warn_once

#: Rows (tensors recorded inside CUDA graphs), partial slots and pointer-table entries
#: of a device's arena: 16384 rows is 1.2 MB of slots; a row's table entry takes at most
#: the strided kernel's (``fused_stats._PERM_TW`` int64), so the whole arena is about 10 MB.
ARENA_ROWS = 16384
ARENA_PROGRAMS = 32768
ARENA_TABLE = _PERM_TW * ARENA_ROWS + 4096
#: The sides of a wrapper that summarises pending sides before anything may write their
#: tensors (``defers=True`` in its header: ``codegen/manager.py``, ``PENDING_LINE``) are
#: captured as one stats launch per run of sides (per kind and layout) where that wrapper
#: line or the capture's end comes: fewer launches, each with its fixed cost (~5.5 us of
#: device time). False: one launch per side, at the side (tests compare both).
DEFER = True
#: What deferred sides may hold: their tensors are not handed out again by the graph's
#: allocator until their stats launch, so this bounds the graph's extra memory.
DEFER_BYTES = 256 << 20

_tls = threading.local()
_arenas: dict[int, "Arena"] = {}
_lock = threading.Lock()
_originals: dict[str, Any] = {}


class Arena:
    """A device's static buffers for stats kernels captured into CUDA graphs."""

    def __init__(self, device: torch.device):
        self.device = device
        self.buf = private_empty(9 * ARENA_ROWS, torch.float64, device)
        self.part = private_empty(9 * ARENA_PROGRAMS, torch.float64, device)
        self.counters = private_empty(ARENA_ROWS, torch.int32, device).zero_()
        self.table = private_empty(ARENA_TABLE, torch.int64, device)
        self.rows_used = 0
        self.table_used = 0


def prepare(device: torch.device) -> Arena | None:
    """The arena of ``device``, allocated now if it is not (never while capturing)."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    arena = _arenas.get(idx)
    if arena is None and not torch.cuda.is_current_stream_capturing():
        with _lock:
            arena = _arenas.get(idx)
            if arena is None:
                arena = _arenas[idx] = Arena(torch.device("cuda", idx))
    return arena


class Side:
    """One launch side recorded inside a graph: record templates, their arena rows (a
    row of this side's stats kernel, or one taken from a producer's side), and its
    records as a plan (``ring_records.SidePlan``: what the runtime library writes), or
    None."""

    __slots__ = ("handle", "site", "label", "phase", "records", "rows", "plan")

    def __init__(self, handle: Any, site: Any, label: str, phase: str, records: list[dict], rows: list[int | None],
                 plan: Any = None):
        self.handle, self.site, self.label, self.phase = handle, site, label, phase
        self.records, self.rows, self.plan = records, rows, plan


class Capture:
    """What one CUDA graph records: its sides in launch order and its arena rows."""

    def __init__(self, arena: Arena | None):
        self.arena = arena
        self.sides: list[Side] = []
        self.first_row = arena.rows_used if arena is not None else 0
        self.last_row = self.first_row
        self.tables: list[tuple[int, list[int]]] = []  # (offset, values) written at capture end
        self.made: dict[tuple[int, int], list[int | None]] = {}
        """The arena row of each value of a producer's after side (``(id of its graph
        handle, site id)`` -> rows; None: not in the arena), for the inputs of later
        launches of the same compiled graph that take them (one CUDA graph may hold the
        launches of several, whose site ids are their own)."""
        self.replay: Replay | None = None
        """Its records as one run of planned sides a replay (None: made as dicts)."""
        self.deferred: list[tuple[Sequence[torch.Tensor], int]] = []
        """The sides whose stats launch is deferred: their tensors (held until it, so the
        graph's allocator hands none of their memory out again meanwhile) and first rows
        (consecutive: each side's rows follow the last's)."""
        self.deferred_bytes = 0
        self.deferred_stream: Any = None
        """The stream the deferred sides' launches ran on (their stats launch goes there)."""
        self.failure: str | None = None
        """Why a deferred stats launch failed (every record of the graph then says so)."""

    # -- deferred sides --------------------------------------------------------------------
    def summarize(self, tensors: Sequence[torch.Tensor], first: int, defer: bool) -> None:
        """Stats of one side's ``tensors`` into arena rows ``first..``: deferred (``defer``:
        the side's wrapper summarises what is pending before anything may write it,
        ``DEFER``) and launched with the sides after it as one stats launch, or launched now."""
        # A side with a tensor off 16 bytes goes alone: in a merged launch its alignment
        # would decide the kernel variant of the others too, one the warm-up may not have
        # compiled (nothing is compiled during a capture).
        if not (defer and DEFER) or any(t.data_ptr() % 16 for t in tensors):
            self.summarize_pending()  # (rows stay in launch order; nothing waits behind a side)
            fused_stats.summarize(tensors, into=(self.arena.buf, first), static=self)
            return
        nbytes = sum(t.untyped_storage().nbytes() for t in tensors)
        stream = _current_stream(self.arena.device)
        if self.deferred:
            last, last_first = self.deferred[-1]
            if first != last_first + len(last) or self.deferred_bytes + nbytes > DEFER_BYTES \
                    or stream != self.deferred_stream:
                self.summarize_pending()
        self.deferred_stream = stream  # (a run's sides were launched on one stream)
        self.deferred.append((tensors, first))
        self.deferred_bytes += nbytes

    def summarize_pending(self) -> None:
        """The deferred sides' stats, as one launch per kind and layout, into their
        (consecutive) rows; their tensors are let go. Where that fails (the arena's partial
        slots or tables cannot take the merged launch), one launch a side; where a side's
        fails too, every record of the graph says so (``finish``: a consumer may have taken
        a row it left unwritten)."""
        if not self.deferred:
            return
        deferred, self.deferred, self.deferred_bytes = self.deferred, [], 0
        here = _current_stream(self.arena.device)
        if here == self.deferred_stream:
            self._launch_run(deferred)
            return
        # Another stream now (a wrapper whose graph runs on several: torch.cuda.stream in
        # the model): the run goes on the stream of its sides' launches, and what follows
        # on this one waits for it.
        with _on_stream(self.deferred_stream):
            self._launch_run(deferred)
        here.wait_stream(self.deferred_stream)

    def _launch_run(self, deferred: list[tuple[Sequence[torch.Tensor], int]]) -> None:
        buf = self.arena.buf
        try:
            fused_stats.summarize([t for ts, _ in deferred for t in ts], into=(buf, deferred[0][1]), static=self)
            return
        except Exception:
            pass
        for tensors, first in deferred:
            try:
                fused_stats.summarize(tensors, into=(buf, first), static=self)
            except Exception as e:
                self.failure = self.failure or f"stats: {type(e).__name__}: {e}"
                warn_once(f"graph-stats-{type(e).__name__}", f"stats inside a CUDA graph failed: {e}")

    # -- while capturing (fused_stats asks through the `static` protocol) ------------------
    def rows(self, k: int) -> int:
        arena = self.arena
        if arena is None or arena.rows_used + k > ARENA_ROWS:
            raise RuntimeError(f"the CUDA-graph stats arena ({ARENA_ROWS} tensors) is full")
        first = arena.rows_used
        arena.rows_used += k
        return first

    def table_for(self, values: list[int]) -> torch.Tensor:
        arena = self.arena
        n = len(values)
        at = arena.table_used
        if at + n > ARENA_TABLE:
            raise RuntimeError("the CUDA-graph stats arena's pointer tables are full")
        # Offsets stay 16-byte aligned: Triton specialises pointer arguments on that, and
        # a variant the warm-up did not compile must not be compiled during a capture.
        arena.table_used = at + n + (n & 1)
        self.tables.append((at, values))
        return arena.table[at: at + n]

    def scratch(self, programs: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        arena = self.arena
        if programs > ARENA_PROGRAMS or rows > ARENA_ROWS:
            raise RuntimeError("a launch side needs more partial slots than the CUDA-graph stats arena has")
        return arena.part, arena.counters

    def taken(self, handle: Any, reuse: Sequence[tuple[int, int, int]]) -> dict[int, tuple[int, int, int]]:
        """``{arg position: (arena row, producer site, its after position)}`` of the inputs of ``reuse``
        (``(arg position, producer site, its after position)``, ``SiteArg.reuse``: written
        by nothing between) whose producer's after side in this graph, of the compiled
        graph of ``handle``, has that row."""
        out = {}
        for i, producer, at in reuse:
            rows = self.made.get((id(handle), producer))
            if rows is not None and at < len(rows) and rows[at] is not None:
                out[i] = (rows[at], producer, at)
        return out

    def finish(self) -> None:
        """The capture ended: write its pointer tables to the device (before any replay)."""
        arena = self.arena
        self.last_row = arena.rows_used
        for at, values in self.tables:
            # from pageable memory: the copy has reached the device when copy_ returns
            arena.table[at: at + len(values)].copy_(torch.tensor(values, dtype=torch.int64, device="cpu"))
        self.tables = []
        self.made = {}
        if self.failure is not None:  # (no row of this graph is trusted: a record may have taken any)
            for side in self.sides:
                side.plan = None
                for k, row in enumerate(side.rows):
                    if row is not None:
                        side.rows[k] = None
                        side.records[k].pop("reused", None)
                        side.records[k]["error"] = self.failure
            return
        try:
            self.replay = Replay.of(self)
        except Exception as e:  # its replays' records are made as dicts
            warn_once(f"graph-plan-{type(e).__name__}", f"CUDA graph replays are recorded in Python: {e}")

    # -- after each replay --------------------------------------------------------------
    def emit(self) -> None:
        """Records of one replay: copy the rows back (async) and queue the records: one
        job the runtime library writes (:class:`Replay`), or a dict each (a flight
        recorder takes records one by one)."""
        sess = _session.current()
        arena = self.arena
        n = self.last_row - self.first_row
        values = _Values.copy(arena, self.first_row, n) if n else None
        replay = self.replay
        if replay is not None and values is not None and sess.flight is None:
            replay.emit(sess, values)
            return
        jobs: list[Job] = []
        fl = sess.flight
        call = 0
        launch = 0
        for side in self.sides:
            if side.phase == "before":
                if fl is not None:
                    fl.enter(side.handle, side.site)
                launch, call = sess.next_launch(side.label, side.site.kernel)
            first = sess.next_seq(len(side.records))
            for k, (tpl, row) in enumerate(zip(side.records, side.rows)):
                rec = dict(tpl)
                rec["seq"], rec["launch"], rec["kernel_call"] = first + k, launch, call
                if row is None:
                    jobs.append(Job(rec))
                else:  # the runtime library may write the line from the writer thread (ring_records)
                    jobs.append(Job(rec, values, RingFill(values, row - self.first_row, side.handle._ring_lines())))
        if jobs:
            sess.submit_all(jobs)


class Replay:
    """A captured graph's records as one run of planned sides (``ring_records.SideRun``),
    made once when the capture ends. A replay takes its numbers in one step
    (``Session.next_block``), sets them in a copy of the run's entries and queues one
    job: no record dict, no Python per record; the runtime library writes the lines from
    the replay's host copy (the dict path, if it fails, reads the same rows)."""

    __slots__ = ("lines", "plans", "entries", "slots", "keys", "records", "size", "_cells")

    def __init__(self, lines: Any, plans: list, entries: array.array, slots: list[tuple[int, int, int, int, int]],
                 keys: list[tuple[str, str, int]], records: int, size: int):
        self.lines, self.plans, self.entries = lines, plans, entries
        self.slots = slots
        """Per side: its entry's index, its first record's number, its launch's and its
        kernel's (the index in ``keys``) and the kernel's call, from the replay's first
        (launch -1: no launch before it, numbered 0 as the dict path numbers it)."""
        self.keys = keys
        """``(graph, kernel, launches a replay)`` of each kernel the graph launches."""
        self.records, self.size = records, size
        self._cells: tuple[Any, list] = (None, [])

    @classmethod
    def of(cls, cap: Capture) -> "Replay | None":
        """The replay plan of ``cap``, or None where a side has no plan or the runtime
        library does not write its records."""
        plans = [side.plan for side in cap.sides]
        lines = plans[0].lines if plans and plans[0] is not None else None
        if lines is None or any(p is None or p.lines is not lines for p in plans):
            return None
        entries = array.array("q")
        slots = []
        keys: dict[tuple[str, str], int] = {}
        counts: list[int] = []
        seq = size = 0
        launch = key = call = -1
        for side, plan in zip(cap.sides, plans):
            texts = lines.template(plan)
            if side.phase == "before":
                launch += 1
                key = keys.setdefault((side.label, side.site.kernel), len(keys))
                if key == len(counts):
                    counts.append(0)
                call = counts[key]
                counts[key] += 1
            rows = side.rows
            ring = [rows[k] for k, at in enumerate(plan.rows) if at is not None]
            first = ring[0] - cap.first_row if ring else 0
            taken = [rows[k] - cap.first_row for k, _p, _at in plan.reused]
            slots.append((len(entries), seq, launch, key, call))
            entries.extend(SideRun.entry(plan, first, taken))
            seq += len(plan.records)
            size += texts[4]
        return cls(lines, plans, entries, slots, [(*k, counts[i]) for k, i in keys.items()], seq, size)

    def emit(self, sess: Any, values: "_Values") -> None:
        """Queue one replay's records (``values``: its host copy)."""
        owner, cells = self._cells
        if owner is not sess:
            cells = [(sess.calls_of(graph, kernel), n) for graph, kernel, n in self.keys]
            self._cells = (sess, cells)
        seq, launch, calls = sess.next_block(self.records, cells)
        e = array.array("q", self.entries)
        for at, s, ln, key, call in self.slots:
            e[at + 1] = seq + s
            if ln >= 0:
                e[at + 2] = launch + ln
                e[at + 3] = calls[key] + call
        sess.submit_side(Job(None, values, SideRun.whole(values, self.lines, e, self.plans, self.size)))


class _Values:
    """The host copy of one replay's arena rows (``host``: ``n`` stats rows of 8 float64,
    then ``n`` int64 checksums) and the ``event`` after which it is there; the event its
    records' jobs wait on."""

    def __init__(self, host: torch.Tensor, n: int, event: Any):
        self._n = n
        self._host = host
        self._event = event
        self._arrived = False
        self._lists: tuple[list, list] | None = None
        self._lock = threading.Lock()

    @classmethod
    def copy(cls, arena: Arena, first: int, n: int) -> "_Values":
        """Rows ``first .. first + n - 1`` of ``arena`` copied to pinned memory on the current
        stream (two copies and an event, nothing waited for)."""
        host = torch.empty(9 * n, dtype=torch.float64, device="cpu", pin_memory=True)
        host[: 8 * n].copy_(arena.buf[8 * first: 8 * (first + n)], non_blocking=True)
        host[8 * n:].copy_(arena.buf[8 * ARENA_ROWS + first: 8 * ARENA_ROWS + first + n], non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return cls(host, n, event)

    def synchronize(self) -> None:
        """Wait for the copy (once)."""
        if not self._arrived:
            self._event.synchronize()
            self._arrived = True

    def arrived(self) -> bool:
        """The copy is done: waiting for it is no wait."""
        return self._arrived or event_done(self._event)

    def values(self) -> tuple[list, list]:
        """``(stats rows, checksums)`` as Python lists (the dict path: ``device_ring.fill``),
        made once; the runtime library reads the host copy itself (:meth:`host`)."""
        if self._lists is None:
            self.synchronize()
            with self._lock:
                if self._lists is None:
                    n = self._n
                    self._lists = (self._host[: 8 * n].view(n, 8).tolist(),
                                   self._host[8 * n:].view(torch.int64).tolist())
        return self._lists

    def host(self) -> tuple[int, int]:
        """Addresses of the host copy, as :meth:`device_ring.Arrival.host` gives them."""
        self.synchronize()
        at = self._host.data_ptr()
        return at, at + 64 * self._n

    def row_count(self) -> int:
        """The number of rows in the host copy (those :meth:`host` addresses)."""
        return self._n

    def fill(self, row: int, rec: dict) -> None:
        fill(rec, self.values(), row)


def _current_stream(device: torch.device) -> Any:
    return torch.cuda.current_stream(device)


def _on_stream(stream: Any) -> Any:
    return torch.cuda.stream(stream)


def current() -> Capture | None:
    """The capture this thread is inside (set by the wrapped ``capture_begin``)."""
    return getattr(_tls, "capture", None)


# --------------------------------------------------------------------------- the patch


def _capture_begin(original):
    @functools.wraps(original)
    def capture_begin(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        try:
            dev = torch.cuda.current_device()
            _tls.capture = Capture(_arenas.get(dev))
        except Exception as e:  # never in the way of the user's capture
            _tls.capture = None
            warn_once(f"graph-capture-{type(e).__name__}", f"CUDA graph capture not instrumented: {e}")
        return result

    return capture_begin


def _capture_end(original):
    @functools.wraps(original)
    def capture_end(self, *args, **kwargs):
        cap = getattr(_tls, "capture", None)
        _tls.capture = None
        if cap is not None and cap.deferred:
            try:
                cap.summarize_pending()  # (inside the graph: before its capture ends)
            except Exception as e:
                cap.failure = cap.failure or f"stats: {type(e).__name__}: {e}"
        result = original(self, *args, **kwargs)
        self._aoti_debug_capture = None
        if cap is not None and cap.sides:
            try:
                cap.finish()
                self._aoti_debug_capture = cap
            except Exception as e:
                warn_once(f"graph-finish-{type(e).__name__}", f"launches inside a CUDA graph are not recorded: {e}")
        return result

    return capture_end


def _replay(original):
    @functools.wraps(original)
    def replay(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        cap = getattr(self, "_aoti_debug_capture", None)
        if cap is not None:
            try:
                cap.emit()
            except Exception as e:
                warn_once(f"graph-replay-{type(e).__name__}", f"a CUDA graph replay was not recorded: {e}")
        return result

    return replay


_WRAPS = {"capture_begin": _capture_begin, "capture_end": _capture_end, "replay": _replay}


def install() -> bool:
    """Wrap ``torch.cuda.CUDAGraph``'s capture and replay (idempotent); False without CUDA graphs."""
    cls = getattr(torch.cuda, "CUDAGraph", None)
    if cls is None:
        return False
    with _lock:
        if _originals:
            return True
        for name, wrap in _WRAPS.items():
            original = cls.__dict__.get(name)
            if original is None:  # a torch whose CUDAGraph does not define it in Python
                for done in list(_originals):
                    setattr(cls, done, _originals.pop(done))
                return False
            _originals[name] = original
            setattr(cls, name, wrap(original))
    return True


def uninstall() -> None:
    """Undo :func:`install` (idempotent)."""
    cls = getattr(torch.cuda, "CUDAGraph", None)
    with _lock:
        for name, original in list(_originals.items()):
            setattr(cls, name, original)
        _originals.clear()


def installed() -> bool:
    return bool(_originals)
