"""Where NaN and Inf are born: launches whose outputs hold non-finite values that none
of their inputs held.

The first record holding NaN/Inf is often not the interesting one: a causal mask is
built as ``full(-inf).triu(1)`` and holds ``-inf`` by design, so "the first non-finite
value" stops there while the kernel that really made NaN (``log`` of a negative, a
LayerNorm over an overflowed row) comes later. A *birth* is judged per launch from
that launch's own records::

    NaN birth   an output (``after``) holds NaN and no input (``before``) held NaN
    Inf birth   an output holds ±Inf and no input held ±Inf

so a launch turning Inf into NaN (``inf - inf``) is a NaN birth, one passing NaN on is
not a birth, and a mask kernel is an Inf birth that never hides a later NaN birth.

Records flagged ``uninitialised`` (memory no launch had written: metadata only) and
``volatile`` (RNG seeds and offsets: integers, nondeterministic by contract) take no
part. Pure: no torch, no pandas (except ``to_frame``), one streaming pass.

    births = find_births(reader.records(), phases=reader.info.phases)
    births.first_nan, births.first_inf, births.nan, births.inf, births.to_dict()
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Callable, Iterable, Literal, Sequence

from ..format.schema import Record

Value = Literal["nan", "inf"]

#: Returns the source ops of the launch that ``record`` belongs to. The hook where
#: provenance plugs in once records or run.json carry it per launch site.
SourceFn = Callable[[Record], Sequence[str]]

#: A launch's records are consecutive in the manifest, or interleaved with other threads'
#: launches numbered close to it. A launch this far behind the newest one of its graph is
#: complete and is judged, so memory stays bounded on runs of millions of launches.
_WINDOW = 4096

_GENERATED = re.compile(r"^(?:cpp|triton(?:_[a-z]+)?|cutedsl|halide|mps|pallas)_fused_(?P<ops>.+?)(?:_\d+)*$")


def provenance_source(reader) -> SourceFn:
    """A :data:`SourceFn` that names a launch by its provenance where the run wrote it
    (``model.h.1.mlp @ modeling_gpt2.py:412 in forward``: module path and source line,
    then the original ATen ops), else as :func:`source_ops` does."""

    def source(record: Record) -> list[str]:
        prov = reader.provenance(record)
        if prov is None:
            return source_ops(record)
        ops = [op.removeprefix("aten.").rsplit(".", 1)[0] for op in prov.aten]
        label = prov.label()
        return ([label] if label else []) + ([", ".join(ops)] if ops else []) or source_ops(record)

    return source


def source_ops(record: Record) -> list[str]:
    """What a launch was made from, as far as its record tells.

    A record's own ``source`` (provenance: original ATen ops) when present; else, for a
    generated kernel, the op names Inductor put in its name (``cpp_fused_log_sub_1`` ->
    ``["log_sub"]``: Inductor joins op names with ``_``, so they are not split); else the
    canonical op of an extern kernel (``aten.addmm``).
    """
    source = getattr(record, "source", None)
    if source:
        return [source] if isinstance(source, str) else [str(s) for s in source]
    m = _GENERATED.match(record.kernel)
    if m:
        return [m.group("ops")]
    return [record.op or record.kernel]


@dataclasses.dataclass
class Birth:
    """One launch that made NaN (or Inf) from inputs that held none."""

    value: Value
    """Which value was born: ``nan`` or ``inf`` (a launch making both is listed twice)."""
    launch: int
    graph: str
    kernel: str
    op: str
    kernel_call: int
    seq: int
    """The first manifest record of the launch that held the value."""
    nan: int
    """NaN elements over all of the launch's outputs."""
    inf: int
    """±Inf elements over all of the launch's outputs."""
    outputs: list[str]
    """Output args holding the born value."""
    inputs: int
    """Input values recorded before the launch (uninitialised and volatile ones aside)."""
    inputs_nan: bool
    inputs_inf: bool
    source: list[str] = dataclasses.field(default_factory=list)
    """What the launch was made from (see :func:`source_ops`)."""
    candidate: bool = False
    """The run recorded outputs only: no input was seen; the launch is the first in its
    graph whose output held the value, which is all that can be said."""

    @property
    def key(self) -> tuple:
        """Alignment key across two runs, like :attr:`Record.key`."""
        return (self.graph, self.op, self.kernel_call, self.value)

    @property
    def inputs_held(self) -> str:
        """What the inputs held, in words: ``finite``, ``Inf``, ``none``, ``not recorded``."""
        if self.candidate:
            return "not recorded"
        if not self.inputs:
            return "none"
        held = [name for name, flag in (("NaN", self.inputs_nan), ("Inf", self.inputs_inf)) if flag]
        return "+".join(held) or "finite"

    def describe(self, graph: str | None = None) -> str:
        """One line; ``graph`` replaces the graph label (e.g. with its title)."""
        name = "NaN" if self.value == "nan" else "Inf"
        what = f"{name} first seen" if self.candidate else f"{name} born"
        count = self.nan if self.value == "nan" else self.inf
        where = f"launch {self.launch} {graph or self.graph} {self.kernel} call {self.kernel_call}"
        if self.candidate:
            why = f"candidate: no earlier {name} in {self.graph}; its inputs were not recorded"
        elif not self.inputs:
            why = "no inputs recorded"
        elif self.inputs_held == "finite":
            why = "from finite inputs"
        else:
            why = f"from inputs holding {self.inputs_held}"
        src = f"; from {', '.join(self.source)}" if self.source else ""
        return f"{what} in {where}: {name.lower()}={count} in {', '.join(self.outputs)} ({why}){src}"

    def __str__(self) -> str:
        return self.describe()

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["inputs_held"] = self.inputs_held
        d["summary"] = str(self)
        return d


@dataclasses.dataclass
class Births:
    """Every NaN and Inf birth of a run, each list in launch order."""

    nan: list[Birth] = dataclasses.field(default_factory=list)
    inf: list[Birth] = dataclasses.field(default_factory=list)
    phases: tuple[str, ...] = ("before", "after")
    """The sides of a launch the run recorded; a birth needs both."""

    @property
    def first_nan(self) -> Birth | None:
        return self.nan[0] if self.nan else None

    @property
    def first_inf(self) -> Birth | None:
        return self.inf[0] if self.inf else None

    @property
    def complete(self) -> bool:
        """Inputs and outputs were recorded: the births are facts, not candidates."""
        return "before" in self.phases and "after" in self.phases

    @property
    def notes(self) -> list[str]:
        """What can and cannot be concluded from the sides the run recorded."""
        if self.complete:
            return []
        if "after" in self.phases:
            return ["the run recorded outputs only (phases=after): a birth needs inputs too, so each launch listed "
                    "is a candidate, the first in its graph whose output held NaN (or Inf); later launches may "
                    "have made more, unseen"]
        if "before" in self.phases:
            return ["the run recorded inputs only (phases=before): no birth can be named; the first input holding "
                    "NaN/Inf says only that it was born earlier (an earlier launch, or a graph input)"]
        return ["the run recorded no values: no birth can be named"]

    def __str__(self) -> str:
        parts = []
        for name, first, items in (("NaN", self.first_nan, self.nan), ("Inf", self.first_inf, self.inf)):
            if first is not None:
                verb = "first seen" if first.candidate else "born"
                parts.append(f"{name} {verb} in {first.kernel} (launch {first.launch}"
                             + (f", {len(items)} births" if len(items) > 1 else "") + ")")
        if parts:
            return "; ".join(parts)
        return "no NaN/Inf born" if self.complete else "no birth can be named"

    def to_dict(self) -> dict:
        return {
            "phases": list(self.phases), "complete": self.complete, "notes": self.notes,
            "first_nan": self.first_nan.to_dict() if self.first_nan else None,
            "first_inf": self.first_inf.to_dict() if self.first_inf else None,
            "nan": [b.to_dict() for b in self.nan], "inf": [b.to_dict() for b in self.inf],
            "summary": str(self),
        }

    def to_frame(self):
        """NaN births then Inf births, one row each."""
        import pandas as pd

        cols = [f.name for f in dataclasses.fields(Birth)] + ["inputs_held"]
        rows = []
        for b in self.nan + self.inf:
            d = dataclasses.asdict(b)
            d["inputs_held"] = b.inputs_held
            rows.append(d)
        return pd.DataFrame(rows, columns=cols)


class _Launch:
    """What one launch's records said so far."""

    __slots__ = ("graph", "launch", "kernel", "op", "kernel_call", "seq", "source", "inputs", "in_nan", "in_inf",
                 "nan", "inf", "nan_args", "inf_args", "nan_seq", "inf_seq", "nan_earlier", "inf_earlier")

    def __init__(self, r: Record):
        self.graph, self.launch, self.kernel, self.op, self.kernel_call = (
            r.graph, r.launch, r.kernel, r.op, r.kernel_call)
        self.seq = r.seq
        self.source: Sequence[str] | None = None
        self.inputs = 0
        self.in_nan = self.in_inf = False
        self.nan = self.inf = 0
        self.nan_args: list[str] = []
        self.inf_args: list[str] = []
        self.nan_seq = self.inf_seq = 0
        self.nan_earlier = self.inf_earlier = False


class BirthFinder:
    """Streaming :func:`find_births`: :meth:`add` each record in manifest order, then :meth:`result`."""

    def __init__(self, phases: Iterable[str] | None = None, source: SourceFn = source_ops):
        """
        Args:
            phases: the sides the run recorded (run.json ``phases``); None: whatever
                sides the records show.
            source: the source ops of a launch, given one of its records.
        """
        self._phases = tuple(phases) if phases is not None else None
        self._source = source
        self._seen: set[str] = set()
        #: graph -> launch -> state, oldest first (launch numbers rise in manifest order).
        self._open: dict[str, collections.OrderedDict[int, _Launch]] = {}
        #: graph -> first launch holding NaN (Inf) in any record: "earlier" for after-only runs.
        self._first_nan: dict[str, int] = {}
        self._first_inf: dict[str, int] = {}
        self._done: list[_Launch] = []

    def add(self, r: Record) -> None:
        if r.phase not in ("before", "after"):
            return
        self._seen.add(r.phase)
        if getattr(r, "uninitialised", None) or getattr(r, "volatile", None):
            return
        graph = self._open.get(r.graph)
        if graph is None:
            graph = self._open[r.graph] = collections.OrderedDict()
        st = graph.get(r.launch)
        if st is None:
            st = graph[r.launch] = _Launch(r)
            # Oldest first: stop at the first open launch still inside the window.
            while graph and next(iter(graph)) < r.launch - _WINDOW:
                old = graph.popitem(last=False)[1]
                if old.nan_args or old.inf_args:
                    self._done.append(old)
        s = r.stats
        nan, inf = (s.nan, s.inf) if s is not None else (0, 0)
        if r.phase == "before":
            st.inputs += 1
            st.in_nan |= nan > 0
            st.in_inf |= inf > 0
        else:
            if nan:
                if not st.nan_args:
                    st.nan_seq = r.seq
                    st.nan_earlier = self._first_nan.get(r.graph, r.launch) != r.launch
                st.nan += nan
                st.nan_args.append(r.arg)
            if inf:
                if not st.inf_args:
                    st.inf_seq = r.seq
                    st.inf_earlier = self._first_inf.get(r.graph, r.launch) != r.launch
                st.inf += inf
                st.inf_args.append(r.arg)
            if (nan or inf) and st.source is None:
                st.source = list(self._source(r))
        if nan:
            self._first_nan.setdefault(r.graph, r.launch)
        if inf:
            self._first_inf.setdefault(r.graph, r.launch)

    def result(self) -> Births:
        """The births among the records added so far."""
        phases = self._phases if self._phases is not None else tuple(p for p in ("before", "after") if p in self._seen)
        births = Births(phases=phases)
        if "after" not in phases:
            return births
        both = "before" in phases
        launches = self._done + [st for graph in self._open.values() for st in graph.values()
                                 if st.nan_args or st.inf_args]
        launches.sort(key=lambda st: (st.launch, st.seq))
        for st in launches:
            if st.nan_args and (not st.in_nan if both else not st.nan_earlier):
                births.nan.append(self._birth(st, "nan", not both))
            if st.inf_args and (not st.in_inf if both else not st.inf_earlier):
                births.inf.append(self._birth(st, "inf", not both))
        return births

    @staticmethod
    def _birth(st: _Launch, value: Value, candidate: bool) -> Birth:
        return Birth(value=value, launch=st.launch, graph=st.graph, kernel=st.kernel, op=st.op,
                     kernel_call=st.kernel_call, seq=st.nan_seq if value == "nan" else st.inf_seq, nan=st.nan,
                     inf=st.inf, outputs=list(st.nan_args if value == "nan" else st.inf_args), inputs=st.inputs,
                     inputs_nan=st.in_nan, inputs_inf=st.in_inf, source=list(st.source or ()), candidate=candidate)


def find_births(records: Iterable[Record], phases: Iterable[str] | None = None,
                source: SourceFn = source_ops) -> Births:
    """Every NaN and Inf birth among ``records`` (one pass, manifest order).

    Records of one launch are grouped by ``(graph, launch)``, so launches of several
    threads may interleave.

    Args:
        records: a run's records, in manifest order.
        phases: the sides the run recorded (``RunInfo.phases``); None: inferred.
        source: the source ops of a launch, given one of its records (provenance hook).
    """
    finder = BirthFinder(phases, source)
    for r in records:
        finder.add(r)
    return finder.result()
