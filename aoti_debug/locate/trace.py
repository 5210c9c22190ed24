"""What a run at level ``names`` told us, line by line: launches started, completed, failed.

The runtime (Python and C++) prints ``before``/``after`` lines around every launch and
an ``error`` line when the post-launch sync fails (``format.schema``). A :class:`Trace`
keeps only what locating a fault needs: the launches still in flight, counters, the
first error, the graphs' files, and the tail of everything else the command printed
(its error message and any Python traceback into the generated wrapper).
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any

from ..format.schema import ARG_RE, ERROR_RE, GRAPH_RE, NAMES_RE, SITE_RE, parse_fields


#: ``File "...", line N, in f`` (tracebacks) and ``File "...", line N in f`` (faulthandler).
FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>\S+)')
#: How many ordinary output lines (and traceback frames) to keep.
TAIL_LINES = 200
#: Launches that raised and were abandoned while the run went on are kept up to this many.
MAX_UNFINISHED = 1000


@dataclasses.dataclass
class LaunchState:
    """One launch as the stream described it."""

    launch: int
    kernel: str
    graph: str = ""
    call: int = 0
    completed_before: int = 0
    """Launches that had completed when this one started."""
    seq: int = 0
    """Arrival order of its ``before`` line (launch numbers of the Python and the C++
    runtime are separate counters, so only arrival order compares across them)."""
    line: int | None = None
    """Line of the launch in the wrapper file (runtime ``site`` line), where printed."""
    source: str | None = None
    """What Inductor says the kernel was made from (runtime ``site`` line), where printed."""
    module: str | None = None
    """Module path of the launch (its provenance, runtime ``site`` line), where printed."""
    user_line: str | None = None
    """The user's source line it was compiled from (provenance), where printed."""
    args: list[dict] = dataclasses.field(default_factory=list)
    """Metadata of each arg at the launch (runtime ``arg`` lines): name, role, kind, dtype, shape..."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "LaunchState":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})


@dataclasses.dataclass
class Frame:
    """One frame of a Python traceback or faulthandler dump in the command's output."""

    file: str
    line: int
    func: str


class Trace:
    """Incremental reader of a run's output; :meth:`feed` every line in arrival order."""

    def __init__(self) -> None:
        #: label -> [{"wrapper", "file"}], newest first (the Python and the C++ runtime
        #: label their graphs independently, so one process can print a label twice).
        self.graphs: dict[str, list[dict[str, str]]] = {}
        #: (launch, kernel) -> state: the runtimes' launch counters are separate, and
        #: the ``after`` and ``error`` lines carry both.
        self.in_flight: dict[tuple[int, str], LaunchState] = {}
        self.started = 0
        self.completed = 0
        self.last_completed: LaunchState | None = None
        self.last_started: LaunchState | None = None
        self.error: tuple[LaunchState, str] | None = None
        """The first failed post-launch sync: the launch and the device's message."""
        self.completed_at_error: int | None = None
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.frames: collections.deque[Frame] = collections.deque(maxlen=TAIL_LINES)

    # -- input ---------------------------------------------------------------------------
    def feed(self, line: str) -> bool:
        """Take one line; True when it was an aoti_debug line (not the command's own output)."""
        line = line.rstrip("\r\n")
        if not line.startswith("[aoti_debug] "):
            self._output(line)
            return False
        m = NAMES_RE.match(line)
        if m:
            self._names(m)
            return True
        m = ERROR_RE.match(line)
        if m:
            self._error(int(m["launch"]), m["kernel"], m["error"])
            return True
        m = GRAPH_RE.match(line)
        if m:
            self.graphs.setdefault(m["graph"], []).insert(0, {"wrapper": m["wrapper"], "file": m["file"].strip()})
            return True
        m = SITE_RE.match(line)
        if m:
            state = self._described(int(m["launch"]))
            if state is not None:
                state.line = int(m["line"]) or None
                state.source = (m["source"] or "").strip() or None
                if m["prov"]:
                    _provenance(state, m["prov"])
            return True
        m = ARG_RE.match(line)
        if m:
            state = self._described(int(m["launch"]))
            if state is not None:
                state.args.append(_arg_fields(parse_fields(m["fields"])))
            return True
        # Warnings and anything else from aoti_debug: worth keeping next to the command's output.
        self._output(line)
        return False

    def _names(self, m: re.Match) -> None:
        launch = int(m["launch"])
        if m["phase"] == "before":
            self.started += 1
            state = LaunchState(launch=launch, kernel=m["kernel"], graph=m["graph"], call=int(m["call"]),
                                completed_before=self.completed, seq=self.started)
            self.last_started = state
            if len(self.in_flight) >= MAX_UNFINISHED:
                oldest = min(self.in_flight, key=lambda k: self.in_flight[k].seq)
                self.in_flight.pop(oldest)
            self.in_flight[(launch, state.kernel)] = state
        else:
            self.completed += 1
            state = self.in_flight.pop((launch, m["kernel"]), None)
            if state is None:
                state = LaunchState(launch=launch, kernel=m["kernel"], graph=m["graph"], call=int(m["call"]))
            self.last_completed = state

    def _error(self, launch: int, kernel: str, message: str) -> None:
        if self.error is not None:
            return  # device errors are sticky: the first one is the cause
        state = self.in_flight.get((launch, kernel)) or LaunchState(launch=launch, kernel=kernel)
        self.error = (state, message.strip())
        self.completed_at_error = self.completed

    def _output(self, line: str) -> None:
        self.tail.append(line)
        m = FRAME_RE.match(line)
        if m:
            self.frames.append(Frame(m["file"], int(m["line"]), m["func"]))

    # -- questions -----------------------------------------------------------------------
    @property
    def seen_any(self) -> bool:
        return self.started > 0

    def unfinished(self) -> list[LaunchState]:
        """Launches that started and never completed, innermost (latest) first."""
        return sorted(self.in_flight.values(), key=lambda s: s.seq, reverse=True)

    def _described(self, launch: int) -> LaunchState | None:
        """The launch a ``site``/``arg`` line describes: they follow its ``before`` line."""
        s = self.last_started
        return s if s is not None and s.launch == launch else None

    def graph_files(self, graph: str) -> list[tuple[str, str]]:
        """(wrapper kind, file) of each graph printed with this label, newest first; a
        subgraph lives in its parent's file."""
        infos = self.graphs.get(graph) or self.graphs.get(graph.split("/", 1)[0]) or []
        return [(i["wrapper"], i["file"]) for i in infos if i.get("file")]


def _arg_fields(raw: dict[str, str]) -> dict[str, Any]:
    """Typed metadata of one arg from an ``arg`` line's ``key=value`` fields."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ("shape", "stride"):
            inner = value.strip("[]()")
            try:
                out[key] = [int(x) for x in inner.split(",") if x.strip()]
            except ValueError:
                out[key] = value
        elif key in ("offset", "nbytes", "numel"):
            try:
                out[key] = int(value)
            except ValueError:
                out[key] = value
        else:
            out[key] = value
    return out


def _provenance(state: LaunchState, text: str) -> None:
    """Module path and user line from a ``site`` line's ``prov=`` JSON (ignored if damaged)."""
    import json

    from ..format.provenance import Provenance, short_source

    try:
        prov = Provenance.from_dict(json.loads(text))
    except (ValueError, TypeError, AttributeError, RecursionError):
        return
    state.module = prov.module or None
    if prov.source:
        state.user_line = short_source(prov.source) + (f": {prov.code}" if prov.code else "")
