"""The flight recorder: the last N graph calls' records in memory, written when it matters.

With ``AOTI_DEBUG_RING=N`` the session hands every finished record to
:class:`FlightRecorder` instead of the manifest. The recorder keeps the records of the
last ``N`` *graph calls* and writes them (ordinary manifest lines, in ``seq`` order)
when the process exits (normally or through an uncaught exception, e.g. a CUDA error
raised from the model), on SIGTERM/SIGINT (its handler chains to the one it replaced),
and when a trigger fires. ``run.json`` ``flight`` says that a ring was in use, its size,
how many graph calls were dropped unwritten, each time the ring was written and why,
and what the trigger fired on.

A *graph call* is one call of a compiled wrapper's ``call``. It is seen at run time,
without a hook of its own: within one call the launches of a wrapper's top-level code
run in the order of their site numbers (its ``call`` is straight-line code; loops and
branches live in subgraphs), so a launch of a top-level site whose number is not above
the last one that thread launched in that wrapper starts the next call; so does the
graph inputs' launch (``schema.INPUTS_KERNEL``), which codegen puts before every call's
first launch whatever number it took, and the launch after it continues that call. A wrapper whose
launches all sit in subgraphs counts each pass over a subgraph as a call. Calls of all
graphs share one ring, in the order they start: a training step with one forward and
one backward graph is two graph calls.

Memory is bounded: ``N`` calls and at most :data:`MAX_RING_RECORDS` records in all
(older calls leave the ring first; a single call larger than that loses its oldest
records, counted in ``records_dropped``). Records of a call are freed once written.

``AOTI_DEBUG_TRIGGER=nonfinite`` watches for the first NaN/Inf *birth* (a launch whose
outputs hold NaN/Inf that none of its recorded inputs held: ``compare/births.py``'s
definition, judged here as the records arrive). An Inf birth at the first call of a
kernel is taken as by design (a causal mask is ``full(-inf).triu(1)``) and does not fire.
When it fires, the tensors of the birth launch are saved

* at once, where the stats arrive while the launch's values are still live: on the
  CPU, where stats are ready when the launch's ``done`` hook runs, its outputs and its
  read-only inputs are saved there (an ``inout`` arg's input value is gone);
* and, in full (both phases), at the next launch of the same site,

then the ring is written. On a GPU the stats arrive after the values are gone: only the
next occurrence is saved. At level ``save`` every value of a kept call already has its
file; the files of a call that leaves the ring unwritten are deleted (unless a kept
record shares them), so the dump holds files only for records it holds.
"""

from __future__ import annotations

import collections
import os
import signal
import threading
import time
from typing import Any, Callable, Sequence

import torch

from ..format.schema import INPUTS_KERNEL, TENSOR_DIR, tensor_filename

#: The ring never holds more records than this (about 1-2 KB each in memory).
MAX_RING_RECORDS = 100_000
#: Launches the birth watch remembers while their outputs may still come.
_WATCH_WINDOW = 256
#: Graph calls the model may run ahead of the records that arrived (a GPU's queue)
#: before the oldest calls leave the ring regardless.
_MAX_AHEAD = 4096
#: How many writes of the ring run.json lists (the latest ones).
_MAX_DUMPS_LISTED = 32
#: The record key that carries a host copy from the model thread to where records are
#: finished (popped before the record is written).
COPY_KEY = "_flight_copy"
#: Signals whose handler writes the ring before passing the signal on.
SIGNALS = ("SIGTERM", "SIGINT")

Warn = Callable[[str, str], None]


class GraphCall:
    """One graph call's records that are not written yet."""

    __slots__ = ("number", "pending", "written", "dropped", "lost")

    def __init__(self, number: int):
        self.number = number
        self.pending: list[dict] = []
        self.written = False
        """Some of its records are in the manifest."""
        self.dropped = False
        """It left the ring."""
        self.lost = False
        """It left the ring with records never written (counted in ``calls_dropped``)."""


class _Launch:
    __slots__ = ("inputs", "in_nan", "in_inf", "records", "call")

    def __init__(self, call: int | None):
        self.inputs = 0
        self.in_nan = self.in_inf = False
        self.records: list[dict] = []
        self.call = call


class BirthWatch:
    """The first NaN/Inf birth among records as they arrive (launch sides in order)."""

    def __init__(self) -> None:
        self._open: collections.OrderedDict[tuple[str, int], _Launch] = collections.OrderedDict()
        self._inf_by_design: set[tuple[str, Any]] = set()

    def records_of(self, graph: str, launch: int) -> list[dict]:
        st = self._open.get((graph, launch))
        return list(st.records) if st is not None else []

    def observe(self, rec: dict, call: int | None) -> dict | None:
        """The birth ``rec`` shows (a dict for run.json ``flight.fired``), or None."""
        phase = rec.get("phase")
        if phase not in ("before", "after"):
            return None
        key = (rec.get("graph", ""), rec.get("launch", 0))
        st = self._open.get(key)
        if st is None:
            st = self._open[key] = _Launch(call)
            while len(self._open) > _WATCH_WINDOW:
                self._open.popitem(last=False)
        st.records.append(rec)
        if rec.get("uninitialised") or rec.get("volatile"):
            return None
        s = rec.get("stats") or {}
        nan, inf = int(s.get("nan") or 0), int(s.get("inf") or 0)
        if phase == "before":
            st.inputs += 1
            st.in_nan |= nan > 0
            st.in_inf |= inf > 0
            return None
        value = "nan" if nan and not st.in_nan else "inf" if inf and not st.in_inf else None
        if value == "inf":
            where = (key[0], rec.get("site", rec.get("kernel")))
            if rec.get("kernel_call") == 0 or where in self._inf_by_design:
                self._inf_by_design.add(where)  # made at its first call: by design (a mask)
                return None
        if value is None:
            return None
        held = [n for n, flag in (("NaN", st.in_nan), ("Inf", st.in_inf)) if flag]
        return {"trigger": "nonfinite", "value": value, "graph": key[0], "launch": key[1],
                "kernel": rec.get("kernel"), "kernel_call": rec.get("kernel_call"), "site": rec.get("site"),
                "seq": rec.get("seq"), "arg": rec.get("arg"), "nan": nan, "inf": inf, "graph_call": call,
                "inputs": st.inputs, "inputs_held": "+".join(held) or ("finite" if st.inputs else "none"),
                "saved": [], "not_saved": [], "next": None}


class _Critical:
    """A change of the ring on the main thread, which a fatal signal's handler (run on that
    thread, between any two bytecodes) must not see half made: the handler waits for its
    end (:meth:`FlightRecorder._on_signal`)."""

    __slots__ = ("fl",)

    def __init__(self, fl: "FlightRecorder"):
        self.fl = fl

    def __enter__(self) -> None:
        tls = self.fl._tls
        tls.critical = getattr(tls, "critical", 0) + 1

    def __exit__(self, *exc) -> None:
        fl = self.fl
        fl._tls.critical -= 1
        if fl._tls.critical == 0 and fl._held_signal is not None and \
                threading.current_thread() is threading.main_thread():
            signum, fl._held_signal = fl._held_signal, None
            fl._on_signal(signum, None)


class FlightRecorder:
    """The ring of graph calls, the trigger, and the writes of the ring (one per session)."""

    def __init__(self, ring: int | None, trigger: str | None, warn: Warn):
        self.ring_size = ring
        self.trigger = trigger
        self._warn = warn
        self.pid = os.getpid()
        self._lock = threading.RLock()
        self._tls = threading.local()
        self._ring: collections.deque[GraphCall] = collections.deque()
        self._records = 0
        self.calls = 0
        self.calls_written = 0
        self.calls_dropped = 0
        self.records_dropped = 0
        self.dumps: list[dict] = []
        self.fired: dict | None = None
        self._watch = BirthWatch() if trigger else None
        self._target: tuple[str, Any, str] | None = None
        """(graph, site, kernel) whose next launch is saved in full."""
        self._pending: dict | None = None
        """A birth found while its launch's ``done`` hook still runs (saved there, then written)."""
        self._pending_thread = 0
        self._copies = 0
        self._dump_when_saved = False
        self._refs: collections.Counter[str] = collections.Counter()
        self._permanent: set[str] = set()
        self._graveyard: list[dict] = []
        self._previous: dict[int, Any] = {}
        self._signals_tried = False
        self._held_signal: int | None = None
        """A fatal signal that arrived inside a change of the ring (:class:`_Critical`),
        handled at its end."""
        self._critical = _Critical(self)
        self.on_fatal: Callable[[str], None] | None = None
        """Set by the session: finish queued records, write the ring and run.json."""
        self.publish: Callable[[], None] | None = None
        """Set by the session: rewrite run.json (its ``flight`` is :meth:`summary`)."""

    # -- state for run.json ---------------------------------------------------------------
    def summary(self) -> dict:
        with self._lock:
            return {"ring": self.ring_size, "trigger": self.trigger, "max_records": MAX_RING_RECORDS,
                    "graph_calls": self.calls, "calls_in_ring": len(self._ring), "calls_written": self.calls_written,
                    "calls_dropped": self.calls_dropped, "records_dropped": self.records_dropped,
                    "signals": [signal.Signals(s).name for s in self._previous], "dumps": list(self.dumps),
                    "fired": self.fired}

    @property
    def armed(self) -> bool:
        """The trigger can still fire: launches keep their input values until ``done``."""
        return self._watch is not None and self.fired is None

    # -- graph calls (the model's threads) --------------------------------------------------
    def enter(self, handle: Any, site: Any) -> None:
        """A launch of ``site`` of the wrapper ``handle`` starts: maybe the next graph call."""
        if self._pending is not None and self._pending_thread == threading.get_ident():
            self._write_pending()
        if self.ring_size is not None and not self._signals_tried and \
                threading.current_thread() is threading.main_thread():
            self.install_signal_handlers()
        top = getattr(handle, "top_sites", True)
        if site.subgraph and top:
            return
        last = getattr(self._tls, "last", None)
        if last is None:
            last = self._tls.last = {}
        key = (id(handle), "" if top else site.subgraph)
        before = last.get(key)
        starts = site.kernel == INPUTS_KERNEL  # (its number may be above the first launch's)
        last[key] = -1 if starts else site.id
        if starts or before is None or site.id <= before or getattr(self._tls, "call", None) is None:
            self._new_call()

    def _new_call(self) -> None:
        with self._critical, self._lock:
            self.calls += 1
            call = GraphCall(self.calls)
            self._ring.append(call)
            # Calls leave the ring as their successors' records arrive (take), not as
            # they start: on a GPU the records come well after the launches, and the
            # ring must hold the N calls up to the record a trigger fires on. Without a
            # ring (a trigger alone) records are written as they come: calls are counted.
            keep = self.ring_size + _MAX_AHEAD if self.ring_size is not None else 1
            while len(self._ring) > keep:
                self._drop(self._ring.popleft())
        self._tls.call = call

    def current(self) -> GraphCall | None:
        """The graph call the calling thread is in."""
        return getattr(self._tls, "call", None)

    def _drop(self, call: GraphCall) -> None:
        call.dropped = True
        if call.pending:
            call.lost = True
            self.calls_dropped += 1
            self._records -= len(call.pending)
            self._graveyard.extend(r for r in call.pending if r.get("file"))
            call.pending = []

    # -- records (the writer thread, or a model thread while the writer is idle) -----------
    def take(self, record: dict, call: GraphCall | None, writer: Any, inline: bool,
             forget: Callable[[str], None]) -> bool:
        """A finished record. Returns True when the ring keeps it (the caller must not write it).

        Args:
            writer: the run's ``RunWriter`` (None: the run directory could not be made).
            inline: called by the model thread inside the launch's hook (the values are live).
            forget: drops a tensor file from the session's content index when it is deleted.
        """
        copy = record.pop(COPY_KEY, None)
        if copy is not None:
            self._save_copy(writer, record, copy)
        if self._watch is not None and self.fired is None:
            birth = self._watch.observe(record, call.number if call is not None else None)
            if birth is not None:
                self._fire(birth, writer, inline)
        if self.ring_size is None or call is None:
            return False
        with self._critical, self._lock:
            if self._graveyard:
                self.bury(writer, forget)
            if call.dropped:
                if not call.lost:
                    call.lost = True
                    self.calls_dropped += 1
                if record.get("file"):  # counted as kept, then buried: a kept sharer keeps the file
                    self._refs[record["file"]] += 1
                    self._graveyard.append(record)
                return True
            # The record joins its call before older calls leave: a fatal signal handled on
            # this thread between the two (the handler's write re-enters the lock) finds
            # the newest calls whole, never the new call still empty and the one before
            # it gone (write takes the newest ring_size calls).
            call.pending.append(record)
            self._records += 1
            if record.get("file"):
                self._refs[record["file"]] += 1
            while self._ring and self._ring[0].number <= call.number - self.ring_size:
                self._drop(self._ring.popleft())
            # Older calls leave first (never calls started after this one: their records
            # are still to come); then this call's oldest records.
            while self._records > MAX_RING_RECORDS and self._ring[0] is not call:
                self._drop(self._ring.popleft())
            if self._records > MAX_RING_RECORDS and call.pending:
                gone = call.pending.pop(0)
                self._records -= 1
                self.records_dropped += 1
                if gone.get("file"):
                    self._graveyard.append(gone)
        if self._dump_when_saved and self._copies == 0:
            self._dump_when_saved = False
            self.write(writer, "nonfinite: next occurrence saved")
        return True

    def bury(self, writer: Any, forget: Callable[[str], None]) -> None:
        """Delete the tensor files of records that left the ring unwritten (level save).
        Only where no tensor file is being written meanwhile: :meth:`take`, or at close."""
        with self._lock:
            gone, self._graveyard = self._graveyard, []
        for rec in gone:
            name = rec["file"]
            self._refs[name] -= 1
            if self._refs[name] > 0 or name in self._permanent:
                continue
            del self._refs[name]
            forget(name)
            if writer is not None:
                try:
                    writer.remove(name)
                except OSError:
                    pass

    # -- the trigger ------------------------------------------------------------------------
    def _fire(self, birth: dict, writer: Any, inline: bool) -> None:
        self.fired = birth
        self._target = (birth["graph"], birth["site"], birth["kernel"])
        if inline and self.ring_size is not None:
            self._pending = birth  # the launch's done hook saves its live values, then writes
            self._pending_thread = threading.get_ident()
        else:
            if inline:
                birth["not_saved"].append("at once: without a ring the launch's records are already written")
            else:
                birth["not_saved"].append("at once: the stats arrived after the launch's values were released")
            self.write(writer, "nonfinite")

    def pending_for(self, graph: str, launch: int) -> bool:
        p = self._pending
        return p is not None and p["graph"] == graph and p["launch"] == launch

    def save_birth(self, writer: Any, before: Sequence[tuple[str, str, Any]] | None,
                   after: Sequence[tuple[str, str, Any]]) -> None:
        """In the birth launch's ``done`` hook: save its live values, then write the ring.

        Args:
            before: ``(arg, role, value)`` of the values given to its ``launch`` hook.
            after: ``(arg, role, value)`` of the values given to its ``done`` hook.
        """
        birth, self._pending = self._pending, None
        if birth is None:
            return
        recs = {(r["phase"], r["arg"]): r for r in self._watch.records_of(birth["graph"], birth["launch"])}
        for phase, values in (("before", before or ()), ("after", after)):
            for name, role, value in values:
                rec = recs.get((phase, name))
                if rec is None or not isinstance(value, torch.Tensor) or rec.get("uninitialised"):
                    continue
                if phase == "before" and role != "input":
                    birth["not_saved"].append(f"{name} before: the launch wrote it ({role}); see the next occurrence")
                    continue
                if self._save(writer, rec, value):
                    birth["saved"].append(rec["file"])
        self.write(writer, "nonfinite")

    def _write_pending(self) -> None:
        """A birth whose ``done`` hook never saved it (the hook failed): write the ring anyway."""
        birth, self._pending = self._pending, None
        if birth is not None and self.on_fatal is not None:
            birth["not_saved"].append("at once: the launch's done hook did not run")
            self.on_fatal("nonfinite")

    def target_is(self, graph: str, site: Any) -> bool:
        """Whether a launch of ``site`` (a protocol Site) in ``graph`` is to be saved in full."""
        t = self._target
        return t is not None and t[0] == graph and t[1] == (site.id if site.id >= 0 else None) and t[2] == site.kernel

    def capture(self, items: Sequence[tuple[dict, torch.Tensor]], last: bool) -> None:
        """Host copies of one side of the target's next launch, carried on its records
        (saved where the records are finished: :meth:`take`). ``last``: its final side."""
        if self.fired is not None and self.fired["next"] is None and items:
            self.fired["next"] = {"launch": items[0][0]["launch"], "saved": []}
        for rec, t in items:
            try:
                src = t.detach()
                if src.device.type == "cpu":
                    host = src.clone(memory_format=torch.contiguous_format)
                else:  # the launch's event (hooks) orders the copy before the record is finished
                    host = torch.empty(src.shape, dtype=src.dtype, device="cpu", pin_memory=True)
                    host.copy_(src, non_blocking=True)
            except Exception as e:
                self._warn("flight-copy", f"flight recorder: cannot copy {rec.get('arg')} of {rec.get('kernel')}: {e}")
                continue
            rec[COPY_KEY] = host
            with self._lock:
                self._copies += 1
        if last:
            self._target = None
            self._dump_when_saved = True

    def _save_copy(self, writer: Any, rec: dict, host: torch.Tensor) -> None:
        with self._lock:
            self._copies -= 1
        if self._save(writer, rec, host) and self.fired is not None and self.fired.get("next") is not None:
            self.fired["next"]["saved"].append(rec["file"])

    def _save(self, writer: Any, rec: dict, value: torch.Tensor) -> bool:
        """Write ``value`` as ``rec``'s tensor file (unless it has one); True when it has one now."""
        if rec.get("file"):
            return True
        if writer is None:
            return False
        filename = tensor_filename(rec["seq"], rec["phase"], rec["kernel"], rec["arg"])
        path = writer.tensor_path(filename)
        try:
            with writer.open_new(f"{TENSOR_DIR}/{filename}") as fh:  # at the run's descriptor, never by path
                torch.save(value.detach().to("cpu").contiguous(), fh)
        except Exception as e:
            self._warn(f"flight-save-{type(e).__name__}", f"flight recorder: cannot write {path!r}: {e}")
            return False
        rec["file"] = f"{TENSOR_DIR}/{filename}"
        rec.pop("shared", None)
        return True

    # -- writing the ring -------------------------------------------------------------------
    def write(self, writer: Any, reason: str) -> int:
        """Append the ring's unwritten records to the manifest (``seq`` order); how many."""
        with self._critical, self._lock:
            live = [c for c in self._ring if c.pending]
            if self.ring_size is not None and len(live) > self.ring_size:
                for c in live[:-self.ring_size]:  # left the window (a write inside take): as dropped
                    self._drop(c)
                live = live[-self.ring_size:]
            recs = sorted((r for c in live for r in c.pending), key=lambda r: r["seq"])
            calls = [c.number for c in live]
            if writer is not None and recs:
                try:
                    writer.append_all(recs)
                except Exception as e:
                    self._warn("flight-write", f"flight recorder: cannot append the ring to the manifest: {e}")
                    return 0
            for c in live:
                self.calls_written += not c.written
                c.written = True
                c.pending = []
            self._permanent.update(r["file"] for r in recs if r.get("file"))
            self._records = 0
            self.dumps.append({"reason": reason, "records": len(recs),
                               "graph_calls": [calls[0], calls[-1]] if calls else None,
                               "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
            del self.dumps[:-_MAX_DUMPS_LISTED]
        if self.publish is not None:
            self.publish()
        return len(recs)

    # -- signals ----------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """Write the ring on SIGTERM/SIGINT, then pass the signal on (main thread only)."""
        if self._signals_tried or threading.current_thread() is not threading.main_thread():
            return
        self._signals_tried = True
        for name in SIGNALS:
            sig = getattr(signal, name)
            try:
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._on_signal)
            except (ValueError, OSError) as e:
                self._previous.pop(sig, None)
                self._warn(f"flight-signal-{name}", f"flight recorder: cannot handle {name}: {e}")

    def uninstall_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, prev in list(self._previous.items()):
            try:
                if signal.getsignal(sig) == self._on_signal:
                    signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
            except (ValueError, OSError):
                pass

    def _on_signal(self, signum: int, frame: Any) -> Any:
        if getattr(self._tls, "critical", 0) and threading.current_thread() is threading.main_thread():
            # Inside a change of the ring (a call leaving it, a record joining one): the
            # ring and its counts would be written half changed. Handled at its end.
            self._held_signal = signum
            return None
        if os.getpid() == self.pid and self.on_fatal is not None:
            try:
                self.on_fatal(f"signal {signal.Signals(signum).name}")
            except Exception:
                pass  # the signal still goes where it was going
        prev = self._previous.get(signum)
        if callable(prev):
            return prev(signum, frame)
        if prev == signal.SIG_IGN:
            return None
        # SIG_DFL (or a handler set outside Python): die of the signal as without us.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return None
