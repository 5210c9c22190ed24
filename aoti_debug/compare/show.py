"""What a dump holds: runs, graphs, kernels, launches, bytes, value ranges, the first
NaN and the first Inf, and where NaN/Inf were born (see :mod:`.births`).

Built from the manifest alone (one streaming pass per run): no tensor file is read.
"""

from __future__ import annotations

import dataclasses
import math
import os

from ..errors import DumpError
from ..format.reader import RunReader, find_runs, resolve_run
from ..format.schema import Record, RunInfo
from .births import BirthFinder, Births, provenance_source

_ITEMSIZE = {
    "bool": 1, "uint8": 1, "int8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1, "int16": 2, "float16": 2, "bfloat16": 2, "uint16": 2, "complex32": 4,
    "int32": 4, "float32": 4, "uint32": 4, "int64": 8, "float64": 8, "uint64": 8, "complex64": 8,
    "complex128": 16,
}


def _uninitialised(r: Record) -> bool:
    # getattr: the flag is new in the schema; records from older readers lack it.
    return bool(getattr(r, "uninitialised", None))


def graph_title(label: str, info: dict | None) -> str:
    """A graph named for what it is: ``graph3 (backward of 0/0)``, ``graph0 (forward 0/0)``.

    Args:
        label: the graph's label in the records (``graph0``).
        info: its entry in run.json ``graphs`` (``kind``, ``compile_id``), if any.
    """
    kind = (info or {}).get("kind")
    if not kind:
        return label
    cid = (info or {}).get("compile_id")
    if not cid:
        return f"{label} ({kind})"
    return f"{label} ({kind} of {cid})" if kind == "backward" else f"{label} ({kind} {cid})"


def describe_flight(flight: dict | None) -> list[str]:
    """run.json ``flight`` (the flight recorder, docs/format.md) in words; [] without one."""
    if not isinstance(flight, dict):
        return []
    ring = flight.get("ring")
    trigger = flight.get("trigger")
    head = f"flight recorder: ring of {ring} graph call(s)" if ring else "flight recorder: no ring"
    head += f", trigger {trigger}" if trigger else ", no trigger"
    head += (f"; {flight.get('graph_calls', 0)} graph call(s) seen, {flight.get('calls_written', 0)} written, "
             f"{flight.get('calls_dropped', 0)} dropped unwritten")
    if flight.get("records_dropped"):
        head += f", {flight['records_dropped']} record(s) dropped (the ring's record limit)"
    writes = []
    for d in flight.get("dumps") or []:
        calls = d.get("graph_calls")
        span = ""
        if isinstance(calls, list) and len(calls) == 2:
            span = f", call {calls[0]}" if calls[0] == calls[1] else f", calls {calls[0]}-{calls[1]}"
        writes.append(f"{d.get('reason')} ({d.get('records', 0)} records{span})")
    lines = [head, "ring written at: " + ("; ".join(writes) if writes else "never (the process died before)")]
    fired = flight.get("fired")
    if isinstance(fired, dict):
        name = "NaN" if fired.get("value") == "nan" else "Inf"
        lines.append(f"trigger {fired.get('trigger')} fired: {name} born in launch {fired.get('launch')} "
                     f"{fired.get('graph')} {fired.get('kernel')} call {fired.get('kernel_call')} (graph call "
                     f"{fired.get('graph_call')}, seq {fired.get('seq')}): {fired.get('value')}="
                     f"{fired.get(fired.get('value') or 'nan')} in {fired.get('arg')}, inputs "
                     f"{fired.get('inputs_held')}")
        saved = fired.get("saved") or []
        nxt = fired.get("next")
        lines.append(f"saved at once: {', '.join(saved) or 'nothing'}; next occurrence: "
                     + (f"launch {nxt.get('launch')}, {', '.join(nxt.get('saved') or []) or 'nothing saved'}"
                        if isinstance(nxt, dict) else "not reached"))
        lines += [f"not saved: {n}" for n in fired.get("not_saved") or []]
    elif trigger:
        lines.append(f"trigger {trigger} did not fire")
    return lines


@dataclasses.dataclass
class KernelSummary:
    """One kernel of one graph: how often it ran and the range of what it wrote."""

    graph: str
    kernel: str
    op: str
    calls: int = 0
    records: int = 0
    tensors: int = 0
    bytes: int = 0
    files: int = 0
    min: float | None = None
    max: float | None = None
    absmax: float | None = None
    nan: int = 0
    inf: int = 0
    first_launch: int = 0
    nan_births: int = 0
    """Launches of this kernel that made NaN from inputs without NaN."""
    inf_births: int = 0
    """Launches of this kernel that made Inf from inputs without Inf."""
    module: str = ""
    """Module path its launches came from (provenance); ``several (N)`` for an extern
    kernel called from N modules."""

    module_raw: str = ""
    """That module as Dynamo or export named it, where it differs (one module only)."""

    def add_module(self, module: str, raw: str = "") -> None:
        seen = self.__dict__.setdefault("_modules", set())  # not a field: rows and JSON leave it out
        if module and module not in seen:
            seen.add(module)
            self.module = module if len(seen) == 1 else f"several ({len(seen)})"
            self.module_raw = raw if len(seen) == 1 else ""

    def add(self, r: Record) -> None:
        self.records += 1
        self.calls = max(self.calls, r.kernel_call + 1)
        if r.kind == "tensor":
            self.tensors += 1
            self.bytes += (r.numel or 0) * _ITEMSIZE.get(r.dtype or "", 0)
            self.files += bool(r.file) and not r.shared
        s = r.stats
        if s is None or r.phase != "after" or _uninitialised(r):
            return
        self.nan += s.nan
        self.inf += s.inf
        if s.min is not None:
            self.min = s.min if self.min is None else min(self.min, s.min)
        if s.max is not None:
            self.max = s.max if self.max is None else max(self.max, s.max)
        if s.absmax is not None:
            self.absmax = s.absmax if self.absmax is None else max(self.absmax, s.absmax)


@dataclasses.dataclass
class NonFinite:
    """The first record holding NaN (or Inf), and which kernel put it there."""

    record: Record
    producer: str | None
    """The kernel that wrote the value, or None for a graph input / unknown writer."""
    producer_launch: int | None
    explanation: str
    graph_title: str | None = None
    """The graph as :func:`graph_title` names it."""

    def __str__(self) -> str:
        r, s = self.record, self.record.stats
        return (f"seq {r.seq} launch {r.launch} {self.graph_title or r.graph} {r.kernel} call {r.kernel_call} "
                f"{r.phase} {r.arg} "
                f"(nan={s.nan if s else '?'} inf={s.inf if s else '?'}): {self.explanation}")

    def to_dict(self) -> dict:
        r = self.record
        return {"seq": r.seq, "launch": r.launch, "graph": r.graph, "kernel": r.kernel, "kernel_call": r.kernel_call,
                "phase": r.phase, "arg": r.arg, "nan": r.stats.nan if r.stats else None,
                "inf": r.stats.inf if r.stats else None, "producer": self.producer,
                "producer_launch": self.producer_launch, "summary": str(self)}


@dataclasses.dataclass
class RunSummary:
    """One run. Truthy when it holds no NaN/Inf and no damage."""

    path: str
    info: RunInfo
    records: int = 0
    launches: int = 0
    tensors: int = 0
    bytes: int = 0
    files: int = 0
    graphs: list[str] = dataclasses.field(default_factory=list)
    kernels: list[KernelSummary] = dataclasses.field(default_factory=list)
    first_nan: NonFinite | None = None
    first_inf: NonFinite | None = None
    births: Births = dataclasses.field(default_factory=Births)
    notes: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return self.first_nan is None and self.first_inf is None and not self.problems

    @property
    def first_nonfinite(self) -> NonFinite | None:
        """The earlier of :attr:`first_nan` and :attr:`first_inf`."""
        found = [nf for nf in (self.first_nan, self.first_inf) if nf is not None]
        return min(found, key=lambda nf: nf.record.seq) if found else None

    def graph_title(self, label: str) -> str:
        """``label`` named for what the graph is (see :func:`graph_title`)."""
        return graph_title(label, (self.info.graphs or {}).get(label))

    def __str__(self) -> str:
        text = (f"{self.info.run_id or os.path.basename(self.path)}: level {self.info.level or '?'}, "
                f"{len(self.graphs)} graph(s), {len(self.kernels)} kernel(s), {self.launches} launch(es), "
                f"{self.records} record(s), {format_bytes(self.bytes)} in {self.files} file(s)")
        if self.births.nan or self.births.inf:
            text += f"; {self.births}"
        elif self.first_nonfinite is not None:
            text += f"; first NaN/Inf in {self.first_nonfinite.record.kernel}"
        return text

    def to_frame(self):
        """Per kernel, in order of first launch."""
        import pandas as pd

        rows = [dataclasses.asdict(k) for k in self.kernels]
        cols = [f.name for f in dataclasses.fields(KernelSummary)]
        return pd.DataFrame(rows, columns=cols)

    def to_dict(self) -> dict:
        return {
            "path": self.path, "run_id": self.info.run_id, "level": self.info.level, "writer": self.info.writer,
            "device": self.info.device, "torch_version": self.info.torch_version, "rank": self.info.rank,
            "world_size": self.info.world_size, "records": self.records, "launches": self.launches,
            "tensors": self.tensors, "bytes": self.bytes, "files": self.files, "graphs": self.graphs,
            "graph_titles": {g: self.graph_title(g) for g in self.graphs},
            "kernels": [{k: _json(v) for k, v in dataclasses.asdict(k).items()} for k in self.kernels],
            "first_nonfinite": self.first_nonfinite.to_dict() if self.first_nonfinite else None,
            "first_nan": self.first_nan.to_dict() if self.first_nan else None,
            "first_inf": self.first_inf.to_dict() if self.first_inf else None,
            "births": self.births.to_dict(), "flight": self.info.flight,
            "notes": self.notes, "problems": self.problems, "summary": str(self),
        }


@dataclasses.dataclass
class ShowResult:
    """Every run under the path given to ``show``."""

    path: str
    runs: list[RunSummary]

    def __bool__(self) -> bool:
        return all(self.runs)

    @property
    def exit_code(self) -> int:
        """2 when a run is damaged, else 0 (NaN/Inf are a finding, not an error)."""
        return 2 if any(r.problems for r in self.runs) else 0

    def __str__(self) -> str:
        if len(self.runs) == 1:
            return str(self.runs[0])
        return f"{self.path}: {len(self.runs)} runs"

    def to_frame(self):
        """All runs' kernel tables, with a ``run`` column."""
        import pandas as pd

        frames = []
        for r in self.runs:
            f = r.to_frame()
            f.insert(0, "run", r.info.run_id or os.path.basename(r.path))
            frames.append(f)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def to_dict(self) -> dict:
        return {"path": self.path, "runs": [r.to_dict() for r in self.runs]}


def _json(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def format_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def summarize_run(reader: RunReader) -> RunSummary:
    """One streaming pass over a run's manifest."""
    out = RunSummary(path=reader.path, info=reader.info)
    kernels: dict[tuple, KernelSummary] = {}
    graphs: dict[str, None] = {}
    launches: set[int] = set()
    last_writer: dict[tuple, tuple[str, int]] = {}
    births = BirthFinder(reader.info.phases, source=provenance_source(reader))
    first: dict[str, tuple[Record, tuple[str, int] | None] | None] = {"nan": None, "inf": None}
    for r in reader.records():
        out.records += 1
        launches.add(r.launch)
        graphs.setdefault(r.graph, None)
        k = kernels.get((r.graph, r.kernel))
        if k is None:
            k = kernels[(r.graph, r.kernel)] = KernelSummary(r.graph, r.kernel, r.op, first_launch=r.launch)
        k.add(r)
        if r.site is not None and r.phase == "after":
            prov = reader.provenance(r)
            if prov is not None:
                k.add_module(prov.module, prov.module_raw)
        if r.kind == "tensor":
            out.tensors += 1
            out.bytes += (r.numel or 0) * _ITEMSIZE.get(r.dtype or "", 0)
            # A record with ``shared`` points at an earlier record's file (equal values).
            out.files += bool(r.file) and not r.shared
        births.add(r)
        # Memory no launch had written is flagged by the runtimes (metadata only): never NaN/Inf.
        s = r.stats
        if s is not None and not _uninitialised(r):
            if first["nan"] is None and s.nan > 0:
                first["nan"] = (r, last_writer.get((r.graph, r.arg)))
            if first["inf"] is None and s.inf > 0:
                first["inf"] = (r, last_writer.get((r.graph, r.arg)))
        if r.phase == "after":
            last_writer[(r.graph, r.arg)] = (r.kernel, r.launch)
    out.launches = len(launches)
    out.graphs = list(graphs)
    out.births = births.result()
    phases = reader.info.phases or ()
    if first["nan"] is not None:
        out.first_nan = _explain(*first["nan"], "nan", phases, out.births, out.graph_title(first["nan"][0].graph))
    if first["inf"] is not None:
        out.first_inf = _explain(*first["inf"], "inf", phases, out.births, out.graph_title(first["inf"][0].graph))
    for b in out.births.nan + out.births.inf:
        k = kernels.get((b.graph, b.kernel))
        if k is not None:
            k.nan_births += b.value == "nan"
            k.inf_births += b.value == "inf"
    out.kernels = sorted(kernels.values(), key=lambda k: k.first_launch)
    out.notes = list(reader.notes)
    out.problems = list(reader.problems)
    return out


def _explain(r: Record, writer: tuple[str, int] | None, value: str, phases, births: Births,
             title: str | None) -> NonFinite:
    if r.phase == "after":
        if "before" not in phases:
            return NonFinite(r, r.kernel, r.launch, f"first seen in output {r.arg} of {r.kernel} (launch {r.launch}); "
                                                    f"the run recorded no inputs (phases=after), so whether it was "
                                                    f"born there is unknown", title)
        born = next((b for b in (births.nan if value == "nan" else births.inf)
                     if (b.graph, b.launch) == (r.graph, r.launch)), None)
        held = born.inputs_held if born is not None else "finite"
        inputs = {"finite": "from finite inputs", "none": "with no inputs recorded"}.get(
            held, f"from inputs holding {held}")
        return NonFinite(r, r.kernel, r.launch, f"produced by {r.kernel} (launch {r.launch}) {inputs}", title)
    if "after" not in phases:
        return NonFinite(r, None, None, f"already in input {r.arg} of {r.kernel}; the run recorded no outputs "
                                        f"(phases=before), so its writer is unknown", title)
    if writer is None:
        return NonFinite(r, None, None, f"already in input {r.arg} of {r.kernel}: a graph input "
                                        f"(no instrumented kernel wrote it)", title)
    kernel, launch = writer
    return NonFinite(r, None, None, f"already in input {r.arg} of {r.kernel}; {kernel} (launch {launch}) last wrote "
                                    f"it without NaN/Inf, so an uninstrumented kernel or the caller changed it",
                     title)


def summarize(path: str) -> ShowResult:
    """Summaries of the run at ``path``, or of every run under a dump root.

    Raises:
        DumpError: the path is missing or holds no run.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DumpError(f"{path}: no such file or directory")
    runs = find_runs(path)
    if not runs:
        resolve_run(path)  # raises the precise message
        raise DumpError(f"{path}: not an aoti_debug dump")
    summaries = []
    for run in runs:
        with RunReader(run) as reader:
            summaries.append(summarize_run(reader))
    return ShowResult(path=path, runs=summaries)
