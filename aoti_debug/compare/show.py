"""What a dump holds: runs, graphs, kernels, launches, bytes, value ranges, first NaN/Inf.

Built from the manifest alone (one streaming pass per run): no tensor file is read.
"""

from __future__ import annotations

import dataclasses
import math
import os

from ..errors import DumpError
from ..format.reader import RunReader, find_runs, resolve_run
from ..format.schema import Record, RunInfo

_ITEMSIZE = {
    "bool": 1, "uint8": 1, "int8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1, "int16": 2, "float16": 2, "bfloat16": 2, "uint16": 2, "complex32": 4,
    "int32": 4, "float32": 4, "uint32": 4, "int64": 8, "float64": 8, "uint64": 8, "complex64": 8,
    "complex128": 16,
}


def _nonfinite(r: Record) -> bool:
    return r.stats is not None and (r.stats.nan > 0 or r.stats.inf > 0)


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

    def add(self, r: Record) -> None:
        self.records += 1
        self.calls = max(self.calls, r.kernel_call + 1)
        if r.kind == "tensor":
            self.tensors += 1
            self.bytes += (r.numel or 0) * _ITEMSIZE.get(r.dtype or "", 0)
            self.files += bool(r.file) and not r.shared
        s = r.stats
        if s is None or r.phase != "after":
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
    """The first record holding NaN or Inf, and which kernel put it there."""

    record: Record
    producer: str | None
    """The kernel that wrote the value, or None for a graph input / unknown writer."""
    producer_launch: int | None
    explanation: str

    def __str__(self) -> str:
        r, s = self.record, self.record.stats
        return (f"seq {r.seq} launch {r.launch} {r.graph} {r.kernel} call {r.kernel_call} {r.phase} {r.arg} "
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
    first_nonfinite: NonFinite | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return self.first_nonfinite is None and not self.problems

    def __str__(self) -> str:
        text = (f"{self.info.run_id or os.path.basename(self.path)}: level {self.info.level or '?'}, "
                f"{len(self.graphs)} graph(s), {len(self.kernels)} kernel(s), {self.launches} launch(es), "
                f"{self.records} record(s), {format_bytes(self.bytes)} in {self.files} file(s)")
        if self.first_nonfinite is not None:
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
            "kernels": [{k: _json(v) for k, v in dataclasses.asdict(k).items()} for k in self.kernels],
            "first_nonfinite": self.first_nonfinite.to_dict() if self.first_nonfinite else None,
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
    for r in reader.records():
        out.records += 1
        launches.add(r.launch)
        graphs.setdefault(r.graph, None)
        k = kernels.get((r.graph, r.kernel))
        if k is None:
            k = kernels[(r.graph, r.kernel)] = KernelSummary(r.graph, r.kernel, r.op, first_launch=r.launch)
        k.add(r)
        if r.kind == "tensor":
            out.tensors += 1
            out.bytes += (r.numel or 0) * _ITEMSIZE.get(r.dtype or "", 0)
            # A record with ``shared`` points at an earlier record's file (equal values).
            out.files += bool(r.file) and not r.shared
        # An in/out buffer's value before a launch may be uninitialised memory that the
        # kernel overwrites (Inductor passes fresh buffers as in_out_ptr): judge it by
        # its value after the launch instead.
        if out.first_nonfinite is None and _nonfinite(r) and not (r.phase == "before" and r.role == "inout"):
            out.first_nonfinite = _explain(r, last_writer.get((r.graph, r.arg)), "after" in (reader.info.phases or ()))
        if r.phase == "after":
            last_writer[(r.graph, r.arg)] = (r.kernel, r.launch)
    out.launches = len(launches)
    out.graphs = list(graphs)
    out.kernels = sorted(kernels.values(), key=lambda k: k.first_launch)
    out.notes = list(reader.notes)
    out.problems = list(reader.problems)
    return out


def _explain(r: Record, writer: tuple[str, int] | None, outputs_recorded: bool) -> NonFinite:
    if r.phase == "after":
        return NonFinite(r, r.kernel, r.launch, f"produced by {r.kernel} (launch {r.launch}) from finite inputs")
    if not outputs_recorded:
        return NonFinite(r, None, None, f"already in input {r.arg} of {r.kernel}; the run recorded no outputs "
                                        f"(phases=before), so its writer is unknown")
    if writer is None:
        return NonFinite(r, None, None, f"already in input {r.arg} of {r.kernel}: a graph input "
                                        f"(no instrumented kernel wrote it)")
    kernel, launch = writer
    return NonFinite(r, None, None, f"already in input {r.arg} of {r.kernel}; {kernel} (launch {launch}) last wrote "
                                    f"it without NaN/Inf, so an uninstrumented kernel or the caller changed it")


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
