"""Dump format version 1: the records, the run header, and file naming.

Every persisted type owns its ``to_dict``/``from_dict``. The Python runtime and the
C++ runtime (emitted into wrappers) both write this layout::

    <dump root>/<run-id>/[rank<N>/]run.json
                                   manifest.jsonl
                                   tensors/<seq>-<phase>-<kernel>-<arg>.pt
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Literal

FORMAT_VERSION = 1
RUN_FILE = "run.json"
MANIFEST_FILE = "manifest.jsonl"
TENSOR_DIR = "tensors"

Role = Literal["input", "output", "inout"]
Kind = Literal["tensor", "scalar", "symint", "none", "other"]

STAT_KEYS = ("min", "max", "mean", "std", "absmax", "nan", "inf")
#: The kernel name of a graph call's read of its weights and other constant inputs, once,
#: before its first launch (levels stats and print, CUDA): every launch that reads one of
#: them takes that record (``"reused"``), so its values are compared there, never here.
INPUTS_KERNEL = "graph_inputs"

_UNSAFE = re.compile(r"[^A-Za-z0-9_.]+")


def sanitize(name: str, limit: int = 80) -> str:
    """File-name-safe form of a kernel or arg name (no ``/``, ``:``, spaces, quotes)."""
    cleaned = _UNSAFE.sub("_", name).strip("._") or "x"
    return cleaned[:limit]


def tensor_filename(seq: int, phase: str, kernel: str, arg: str) -> str:
    """``<seq>-<phase>-<kernel>-<arg>.pt``; seq is zero-padded so names sort by event."""
    return f"{seq:08d}-{phase}-{sanitize(kernel)}-{sanitize(arg, 40)}.pt"


_OVERLOAD_TAIL = re.compile(r"\.(default|Tensor|Scalar|out|self|int|dim|stable|values|input)$")


def canonical_op(kernel: str) -> str:
    """One name for an extern kernel in both wrappers.

    ``extern_kernels.mm`` (Python) and ``aoti_torch_cpu_mm_out`` (C++) both give
    ``aten.mm``; ``torch.ops.mylib.op.default`` gives ``mylib.op``. Generated kernels
    (``triton_*``, ``cpp_fused_*``) are their own canonical name.
    """
    name = kernel.strip()
    if name.startswith("torch.ops."):
        name = name[len("torch.ops."):]
        name = _OVERLOAD_TAIL.sub("", name)
        return name
    if name.startswith("extern_kernels."):
        return "aten." + name[len("extern_kernels."):]
    m = re.match(r"^aoti_torch_(?:cpu|cuda|xpu|mps)_(.+?)(?:_out)?$", name)
    if m:
        return "aten." + m.group(1)
    if name.startswith("at::") or name.startswith("aten::"):
        return "aten." + name.split("::", 1)[1].split(".")[0]
    return name


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return value


def _float_or_none(value: Any) -> float | None:
    # float() also reads the "nan"/"inf"/"-inf" strings that _jsonable writes.
    return None if value is None else float(value)


@dataclasses.dataclass
class Stats:
    """Summary of a tensor's values. min/max/mean/std/absmax are over finite elements."""

    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    absmax: float | None = None
    nan: int = 0
    inf: int = 0

    def to_dict(self) -> dict:
        return {k: _jsonable(getattr(self, k)) for k in STAT_KEYS}

    @classmethod
    def from_dict(cls, d: dict | None) -> "Stats | None":
        if d is None:
            return None
        # Filled in past __init__, without a call per value: a manifest of millions of
        # records builds one per record. float() also reads "nan"/"inf"/"-inf".
        g = d.get
        lo, hi, mean, std, absmax = g("min"), g("max"), g("mean"), g("std"), g("absmax")
        stats = cls.__new__(cls)
        stats.__dict__ = {
            "min": None if lo is None else float(lo), "max": None if hi is None else float(hi),
            "mean": None if mean is None else float(mean), "std": None if std is None else float(std),
            "absmax": None if absmax is None else float(absmax),
            "nan": int(g("nan") or 0), "inf": int(g("inf") or 0),
        }
        return stats


@dataclasses.dataclass
class Record:
    """One instrumented value at one side of one launch (a manifest line)."""

    seq: int
    launch: int
    graph: str
    wrapper: str
    kernel: str
    op: str
    kernel_call: int
    phase: str
    arg: str
    role: str = "input"
    kind: str = "tensor"
    index: int = 0
    """Position of this value among the launch's recorded args (both phases)."""
    expr: str | None = None
    """The wrapper expression that produced the value (e.g. a reinterpret_tensor view)."""
    dtype: str | None = None
    shape: list[int] | None = None
    stride: list[int] | None = None
    device: str | None = None
    numel: int | None = None
    stats: Stats | None = None
    checksum: str | None = None
    file: str | None = None
    value: Any = None
    """The value of a scalar or symint arg."""
    error: str | None = None
    """Why this value could not be recorded in full (the model ran on regardless)."""
    skipped: str | None = None
    """Why the tensor file was not written although the level asked for it."""
    shared: bool | None = None
    """True when ``file`` was written for an earlier record with identical values."""
    uninitialised: bool | None = None
    """True when the storage was read before any launch (or the caller) wrote it: the
    record holds metadata only and is never compared nor counted as NaN/Inf."""
    volatile: str | None = None
    """Why the value is nondeterministic by contract (an RNG seed): listed, not compared."""
    reused: int | None = None
    """An input whose stats and checksum were not read again but taken from the ``after``
    record of the launch that wrote it (this site number, same graph call), which no
    launch wrote since by the wrapper's code (``AOTI_DEBUG_REUSE=0`` reads every input)."""
    site: int | None = None
    """The launch site's number in its graph's wrapper: its provenance is the line of
    ``sites.jsonl`` with this ``graph`` and ``site`` (format.provenance)."""
    model_dtype: str | None = None
    """An fp64 reference (``aoti_debug.eager``): the dtype the value has in the model,
    which ``dtype`` (float64) is not."""
    eager_error: float | str | None = None
    """An fp64 reference: the RMS error of the model-dtype eager value against this
    float64 one (eager's own error, which a compiled value's is judged against)."""

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["stats"] = self.stats.to_dict() if self.stats is not None else None
        d["value"] = _jsonable(self.value)
        return {k: v for k, v in d.items() if v is not None or k in ("stats",)}

    @classmethod
    def from_dict(cls, d: dict) -> "Record":
        """The record of one manifest line, checked against the format first.

        Keys this version does not know are ignored (a newer writer of version 1).

        Raises:
            RecordError: a field is missing, of the wrong type, out of range or at odds
                with another (one line naming it; see :mod:`.validate`).
        """
        from .validate import check_record  # validate imports this module

        check_record(d)
        return cls.from_checked(d)

    @classmethod
    def from_checked(cls, d: dict) -> "Record":
        """:meth:`from_dict` of a dict that :func:`.validate.check_record` passed already
        (a manifest line read again, unchanged since it was checked)."""
        # Filled in past __init__ (a third of the cost of a line): the fields' defaults,
        # then the line's values, which the check found to fit their fields.
        values = {**_RECORD_DEFAULTS, **d}
        if len(values) != len(_RECORD_DEFAULTS):  # keys this version does not know
            values = {k: v for k, v in values.items() if k in _RECORD_DEFAULTS}
        values["stats"] = Stats.from_dict(d.get("stats"))
        if "op" not in d:
            values["op"] = d["kernel"]
        record = cls.__new__(cls)
        record.__dict__ = values
        return record

    @property
    def key(self) -> tuple:
        """Alignment key across two runs (DESIGN.md: graph, kernel, kernel_call, arg, phase)."""
        return (self.graph, self.op, self.kernel_call, self.arg, self.phase)


@dataclasses.dataclass
class RunInfo:
    """The header of a run (``run.json``)."""

    format_version: int
    run_id: str
    level: str
    pid: int
    start_time: str
    aoti_debug_version: str = ""
    torch_version: str = ""
    device: str = ""
    kernels: str = ""
    phases: list[str] = dataclasses.field(default_factory=lambda: ["before", "after"])
    sync: bool = False
    argv: list[str] = dataclasses.field(default_factory=list)
    rank: int = 0
    world_size: int = 1
    hostname: str = ""
    uid: int | None = None
    """The user id of the recording process (None: not known, e.g. an older dump):
    replay asks before running code from a dump of another user or machine."""
    writer: str = "python"
    graphs: dict = dataclasses.field(default_factory=dict)
    """graph label -> what it is: ``wrapper``, ``file``, ``subgraph``, ``kind``
    (forward/backward/inference) and Dynamo's ``compile_id``, where known."""
    warnings: list[str] = dataclasses.field(default_factory=list)
    """What went wrong while recording this run, one message per kind of problem."""
    flight: dict | None = None
    """The flight recorder, when one was in use (``AOTI_DEBUG_RING``/``AOTI_DEBUG_TRIGGER``):
    ring size, graph calls seen, written and dropped, each time the ring was written and
    why, and what the trigger fired on (docs/format.md "Flight recorder"). Absent
    otherwise: the manifest then holds every record."""

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        if d["flight"] is None:
            del d["flight"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RunInfo":
        """The header of a run, checked against the format first.

        Raises:
            DumpError: a field is missing, of the wrong type or out of range.
        """
        from .validate import check_run_info  # validate imports this module

        check_run_info(d)
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})


_RECORD_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(Record))
#: Every Record field with what a manifest line without it means (``op``: the kernel's name).
_RECORD_DEFAULTS = {f.name: (None if f.default is dataclasses.MISSING else f.default)
                    for f in dataclasses.fields(Record)} | {"wrapper": "python", "kernel_call": 0}
#: Record fields only the eager reference (Python) writes: the C++ runtime has no names for them.
REFERENCE_ONLY_FIELDS = frozenset({"model_dtype", "eager_error"})


#: Level ``print`` lines (stderr), one per record of a launch side, in record order: a
#: tensor's metadata and stats, a scalar's value. The runtime library writes the same
#: lines (``cpu_records.h``, ``ring_records.h``: ``append_print_stats``).
def print_parts(rec: dict) -> tuple[str, str, bool]:
    """``(before the launch number, after it, whether the stats follow)`` of ``rec``'s
    print line: the texts that stay the same from one call of a launch to the next."""
    prefix = f"[aoti_debug] {rec['phase']:<6} {rec['kernel']} launch="
    if rec.get("kind") != "tensor":
        return prefix, f" {rec['arg']} = {rec.get('value')}", False
    shape = "x".join(str(d) for d in rec.get("shape", [])) or "scalar"
    return prefix, f" {rec['arg']} ({rec['role']}) {rec.get('dtype')}[{shape}] {rec.get('device')}", True


def print_stats(stats: dict) -> str:
    """A print line's stats; ``{}``: a tensor without stats (memory no launch wrote)."""
    return (f" min={_fmt6(stats.get('min'))} max={_fmt6(stats.get('max'))} mean={_fmt6(stats.get('mean'))} "
            f"std={_fmt6(stats.get('std'))} absmax={_fmt6(stats.get('absmax'))} nan={stats.get('nan', 0)} "
            f"inf={stats.get('inf', 0)}")


def print_line(rec: dict) -> str:
    prefix, suffix, tensor = print_parts(rec)
    line = f"{prefix}{rec['launch']}{suffix}"
    return line + print_stats(rec.get("stats") or {}) if tensor else line


def print_lines(records: list[dict]) -> str:
    """A launch side's print lines, without the last newline."""
    return "\n".join([print_line(rec) for rec in records])


def _fmt6(v: Any) -> str:
    return "-" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v))


#: Level ``names`` lines (stderr, flushed); the C++ runtime prints the same format and
#: ``aoti-debug locate`` parses it with NAMES_RE.
def names_line(phase: str, launch: int, graph: str, kernel: str, call: int) -> str:
    return f"[aoti_debug] {phase} launch={launch} graph={graph} kernel={kernel} call={call}"


NAMES_RE = re.compile(
    r"^\[aoti_debug\] (?P<phase>before|after) launch=(?P<launch>\d+) graph=(?P<graph>\S+) "
    r"kernel=(?P<kernel>\S+) call=(?P<call>\d+)\s*$"
)
ERROR_RE = re.compile(r"^\[aoti_debug\] error after launch=(?P<launch>\d+) kernel=(?P<kernel>\S+): (?P<error>.*)$")


#: Level ``names`` also prints, once per graph before its first launch, where its code is.
#: ``file`` is the wrapper's path (Python: the module's ``__file__``; C++: ``__FILE__`` of
#: the wrapper source, or the ``.so``); it may contain spaces, so it comes last.
def graph_line(graph: str, wrapper: str, file: str | None) -> str:
    return f"[aoti_debug] graph={graph} wrapper={wrapper} file={file or ''}"


GRAPH_RE = re.compile(r"^\[aoti_debug\] graph=(?P<graph>\S+) wrapper=(?P<wrapper>\S+) file=(?P<file>.*)$")


#: With ``AOTI_DEBUG_NAMES_ARGS=1``, right after each ``before`` line: the launch's line in
#: the wrapper file (0: unknown) and what Inductor says it was made from.
def site_line(launch: int, line: int | None, source: str | None, provenance: str = "") -> str:
    """``provenance``: the site's provenance JSON (format.provenance: it holds no space)."""
    text = " ".join((source or "").split())
    prov = f" prov={provenance}" if provenance and " " not in provenance else ""
    return f"[aoti_debug] site launch={launch} line={line or 0}{prov} from={text}"


SITE_RE = re.compile(r"^\[aoti_debug\] site launch=(?P<launch>\d+) line=(?P<line>\d+)(?: prov=(?P<prov>\S+))?"
                     r" from=(?P<source>.*)$")


#: ... then one line per arg the launch is given: ``key=value`` fields, no spaces in values
#: (``name role kind`` always; tensors add ``dtype shape stride offset device ptr nbytes``,
#: shapes as ``[8,4]``; scalars ``value``).
def arg_line(launch: int, fields: dict) -> str:
    parts = " ".join(f"{k}={_field(v)}" for k, v in fields.items())
    return f"[aoti_debug] arg launch={launch} {parts}"


ARG_RE = re.compile(r"^\[aoti_debug\] arg launch=(?P<launch>\d+) (?P<fields>.*)$")
_FIELD_RE = re.compile(r"(\w+)=(\S*)")


def _field(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(str(v) for v in value) + "]"
    return "_".join(str(value).split()) or "-"


def parse_fields(text: str) -> dict[str, str]:
    """The ``key=value`` fields of an ``arg`` line, as strings."""
    return dict(_FIELD_RE.findall(text))
