"""What a comparison found: one object per record pair, one for the first divergence,
one for the whole diff. Each is truthy when it passes, prints as one line, and turns
into a pandas DataFrame with ``to_frame()``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..format.schema import Record, RunInfo
from .births import Births
from .metrics import Metrics

#: Statuses of a record pair, in the order the tables sort them.
STATUSES = ("fail", "mismatch", "error", "only_a", "only_b", "volatile", "uninitialised", "ignored", "unpaired",
            "pass")
#: Statuses of pairs listed apart and never compared.
NOT_COMPARED = ("volatile", "uninitialised", "ignored", "unpaired")
#: Statuses that make a diff "incomplete" (exit 2): the runs could not be compared there.
INCOMPLETE = ("mismatch", "error", "only_a", "only_b")

EXIT_EQUAL, EXIT_DIFFERENT, EXIT_BAD_INPUT = 0, 1, 2

#: Columns of :meth:`RecordComparison.to_row` / :meth:`DiffResult.to_frame`.
COLUMNS = (
    "status", "first", "launch_a", "launch_b", "graph", "kernel", "op", "call", "phase", "arg", "role",
    "dtype", "shape", "basis", "max_abs", "max_rel", "mismatch", "cosine", "nan_a", "nan_b", "inf_a",
    "inf_b", "bitwise", "atol", "rtol", "aligned_by", "seq_a", "seq_b", "note", "module", "module_raw", "verdict",
    "ratio",
)


def _g(v: float | None) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return str(v)
    return f"{v:.3g}"


def _json_float(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


@dataclasses.dataclass
class RecordComparison:
    """One record of run A against its counterpart in run B."""

    status: str
    """``pass``, ``fail`` (values differ), ``mismatch`` (shape/dtype/kind differ),
    ``error`` (a side cannot be read), ``only_a`` or ``only_b`` (no counterpart), or
    not compared: ``volatile`` (nondeterministic by contract: an RNG seed or offset),
    ``uninitialised`` (read before any launch wrote its storage: not data),
    ``ignored`` (matched ``diff --ignore``) or ``unpaired`` (an input of a launch both
    runs made that only one run passed: the compiles gave the kernel other arguments)."""
    a: Record | None
    b: Record | None
    metrics: Metrics | None = None
    how: str = "key"
    atol: float | None = None
    rtol: float | None = None
    note: str = ""
    first: bool = False
    """Part of the launch named as the first divergence."""
    module: str | None = None
    """The module path of the value (run A's provenance; B's where A has none)."""
    module_raw: str | None = None
    """That module as Dynamo or export named it (``G['m'].model.layers.0``), where it differs."""
    verdict: str | None = None
    """Against an fp64 reference: ``rounding`` or ``suspect`` (compare/verdict.py)."""
    ratio: float | None = None
    """Against an fp64 reference: the compiled error over eager's own error."""

    def __bool__(self) -> bool:
        return self.status == "pass"

    @property
    def record(self) -> Record:
        return self.a if self.a is not None else self.b  # type: ignore[return-value]

    @property
    def arg(self) -> str:
        a, b = self.a, self.b
        if a is not None and b is not None and a.arg != b.arg:
            return f"{a.arg}~{b.arg}"
        return self.record.arg

    @property
    def kernel(self) -> str:
        a, b = self.a, self.b
        if a is not None and b is not None and a.kernel != b.kernel:
            return f"{a.kernel}~{b.kernel}"
        return self.record.kernel

    @property
    def failed(self) -> bool:
        """Values (or shape/dtype) differ: what the first-divergence search looks at."""
        return self.status in ("fail", "mismatch")

    def __str__(self) -> str:
        r = self.record
        where = f"{r.graph} {self.kernel} call {r.kernel_call} {r.phase} {self.arg}"
        m = self.metrics
        if self.status in ("pass", "fail") and m is not None:
            detail = f"max_abs {_g(m.max_abs)} max_rel {_g(m.max_rel)}"
            if m.mismatch_frac is not None:
                detail += f" mismatched {m.mismatch_frac:.2%}"
            detail += f" ({m.basis})"
        else:
            detail = self.note or self.status
        return f"{self.status.upper()} {where}: {detail}"

    def to_row(self) -> dict:
        """A flat dict: one row of :meth:`DiffResult.to_frame`."""
        r, a, b, m = self.record, self.a, self.b, self.metrics
        row = {
            "status": self.status,
            "first": self.first,
            "launch_a": a.launch if a else None,
            "launch_b": b.launch if b else None,
            "graph": r.graph,
            "kernel": self.kernel,
            "op": r.op,
            "call": r.kernel_call,
            "phase": r.phase,
            "arg": self.arg,
            "role": r.role,
            "dtype": _side(a, b, "dtype"),
            "shape": _side(a, b, "shape"),
            "basis": m.basis if m else None,
            "max_abs": m.max_abs if m else None,
            "max_rel": m.max_rel if m else None,
            "mismatch": m.mismatch_frac if m else None,
            "cosine": m.cosine if m else None,
            "nan_a": m.nan_a if m else (a.stats.nan if a and a.stats else None),
            "nan_b": m.nan_b if m else (b.stats.nan if b and b.stats else None),
            "inf_a": m.inf_a if m else (a.stats.inf if a and a.stats else None),
            "inf_b": m.inf_b if m else (b.stats.inf if b and b.stats else None),
            "bitwise": m.bitwise if m else None,
            "atol": self.atol,
            "rtol": self.rtol,
            "aligned_by": self.how,
            "seq_a": a.seq if a else None,
            "seq_b": b.seq if b else None,
            "note": self.note,
            "module": self.module,
            "module_raw": self.module_raw,
            "verdict": self.verdict,
            "ratio": self.ratio,
        }
        return row


def _side(a: Record | None, b: Record | None, field: str) -> str:
    def fmt(r):
        v = getattr(r, field)
        if v is None:
            return "-"
        return "x".join(str(d) for d in v) if isinstance(v, list) else str(v)

    if a is not None and b is not None:
        fa, fb = fmt(a), fmt(b)
        return fa if fa == fb else f"{fa} vs {fb}"
    return fmt(a if a is not None else b)


@dataclasses.dataclass
class FirstDivergence:
    """The earliest launch of run A where the values part ways.

    ``kind`` is ``born`` (its outputs differ while all its inputs match: the error is
    made here) or ``input`` (an input differs that no earlier instrumented launch
    wrote with a difference: a graph input or weight, entering at this launch).
    """

    launch: int
    launch_b: int | None
    graph: str
    kernel: str
    op: str
    kernel_call: int
    kind: str
    outputs: list[str]
    inputs: list[str]
    max_abs: float | None = None
    module: str = ""
    """The module path of the launch (run A's provenance: ``model.layers.1.mlp``)."""
    source: str = ""
    """The user's source line it came from (``file:line in func``)."""
    code: str = ""
    """The code on that line."""
    verdict: str | None = None
    """Against an fp64 reference: ``suspect`` (its error is far beyond eager's own)."""
    ratio: float | None = None
    """Against an fp64 reference: the largest compiled error over eager's own error of
    its differing outputs."""
    group: str = ""
    """Where the runs fused differently around it: the launches of A and of B that hold
    each other's values (``3,4 ~ 5``), compared as one unit."""

    def __bool__(self) -> bool:
        return True

    def __str__(self) -> str:
        where = f"launch {self.launch} {self.graph} {self.kernel} (call {self.kernel_call})"
        outs = ", ".join(self.outputs) or "-"
        if self.kind == "born":
            if self.verdict is not None:
                return f"{where}: output {outs} is {self.verdict}: its error against float64 is " \
                       f"{_g(self.ratio)}x eager's own while every input matches" + self._at()
            return f"{where}: output {outs} differs (max_abs {_g(self.max_abs)}) while every input matches" \
                + self._at()
        ins = ", ".join(self.inputs)
        tail = f"; output {outs} differs (max_abs {_g(self.max_abs)})" if self.outputs else ""
        return f"{where}: input {ins} already differs and no earlier launch wrote it differently " \
               f"(a graph input or weight){tail}" + self._at()

    def _at(self) -> str:
        """`` in model.h.1.ln_2 at modeling_gpt2.py:412 in forward``, where known."""
        from ..format.provenance import short_source

        parts = ([f" in {self.module}"] if self.module else []) + \
            ([f" at {short_source(self.source)}"] if self.source else [])
        text = ";" + "".join(parts) if parts else ""
        if self.group:
            text += f"; fused differently: launches {self.group.replace(' ~ ', ' of A ~ ')} of B"
        return text

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["max_abs"] = _json_float(self.max_abs)
        d["ratio"] = _json_float(self.ratio)
        d["summary"] = str(self)
        return d


@dataclasses.dataclass
class DiffResult:
    """The comparison of two runs. Truthy when they are equal within tolerance."""

    path_a: str
    path_b: str
    info_a: RunInfo
    info_b: RunInfo
    records: list[RecordComparison]
    """Every pair that did not pass, plus the passing ones when they were kept."""
    counts: dict[str, int]
    basis: dict[str, int]
    """How many pairs were compared by values, checksum, stats or value."""
    first_divergence: FirstDivergence | None = None
    problems: list[str] = dataclasses.field(default_factory=list)
    """Damage in either dump (unreadable manifest lines), one line each."""
    notes: list[str] = dataclasses.field(default_factory=list)
    atol: float | None = None
    rtol: float | None = None
    kernels: str = ""
    launches: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    kept_passing: bool = True
    rounding_factor: float | None = None
    """Against an fp64 reference: the largest error ratio still called ``rounding``."""
    low_precision_factor: float | None = None
    """Against an fp64 reference with the default factors: the one of bfloat16, float16
    and float8 values (:data:`rounding_factor` is then that of the others)."""
    dropped: int = 0
    """Pairs counted but not kept in ``records`` (``max_records``)."""
    compared: list[RecordComparison] | None = None
    """Every pair in the order compared, passing or not, when ``diff(keep_all=True)``
    asked for them apart from ``records`` (the plot draws these); else None."""
    births_a: Births | None = None
    """Where run A made NaN/Inf from inputs that held none (compare/births.py)."""
    births_b: Births | None = None
    birth_differences: list[str] = dataclasses.field(default_factory=list)
    """NaN/Inf births one run has and the other has not, one line each."""
    coverage: Any = None
    """The values run A materialised, how many were compared, and the modules where none
    was (a :class:`aoti_debug.compare.coverage.Coverage`); None for a result built by hand."""

    @property
    def exit_code(self) -> int:
        """0 equal within tolerance, 1 different, 2 the dumps could not be fully compared."""
        if self.problems or any(self.counts.get(s, 0) for s in INCOMPLETE):
            return EXIT_BAD_INPUT
        if self.counts.get("fail", 0):
            return EXIT_DIFFERENT
        if self.coverage is not None and self.coverage.blind:
            return EXIT_BAD_INPUT  # equal where it looked, but it did not look everywhere
        return EXIT_EQUAL

    def __bool__(self) -> bool:
        return self.exit_code == EXIT_EQUAL

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def verdict(self) -> str:
        return {EXIT_EQUAL: "EQUAL", EXIT_DIFFERENT: "DIFFERENT", EXIT_BAD_INPUT: "INCOMPLETE"}[self.exit_code]

    @property
    def stats_only(self) -> bool:
        """No pair was compared element by element because a side has no tensor files
        (a stats-level dump): equal checksums or recorded stats decided every pair."""
        stats_level = "stats" in (self.info_a.level, self.info_b.level)
        return stats_level and not self.basis.get("values")

    def count_line(self) -> str:
        parts = [f"{self.counts[s]} {s.replace('_', ' ')}" for s in STATUSES if self.counts.get(s)]
        return ", ".join(parts) or "nothing to compare"

    def basis_line(self) -> str:
        names = {"values": "by values (tensor files)", "checksum": "by equal checksums",
                 "stats": "by recorded stats and checksums (no tensor files)", "value": "scalars by value"}
        parts = [f"{n} {names.get(k, k)}" for k, n in self.basis.items() if n]
        return "compared " + (", ".join(parts) if parts else "nothing")

    def __str__(self) -> str:
        text = f"{self.verdict}: {self.count_line()}"
        if self.coverage is not None and self.coverage.blind:
            text += f"; {self.coverage.blind_line(3)}"
        if self.first_divergence is not None:
            text += f"; first divergence at {self.first_divergence}"
        return text

    @property
    def only_a(self) -> list[RecordComparison]:
        return [r for r in self.records if r.status == "only_a"]

    @property
    def only_b(self) -> list[RecordComparison]:
        return [r for r in self.records if r.status == "only_b"]

    def every_pair(self) -> list[RecordComparison]:
        """Every pair the diff kept: all of them with ``keep_all``, else ``records``."""
        return self.compared if self.compared is not None else self.records

    def failures(self) -> list[RecordComparison]:
        """Pairs that differ or could not be compared (not those listed apart as
        volatile, uninitialised or ignored)."""
        return [r for r in self.records if r.status not in ("pass", *NOT_COMPARED)]

    def ordered(self) -> list[RecordComparison]:
        """The first divergence's records on top, then the rest in A's order, then B-only."""
        def key(rc: RecordComparison):
            a, b = rc.a, rc.b
            return (not rc.first, a is None, a.seq if a else 0, b.seq if b else 0)

        return sorted(self.records, key=key)

    def to_frame(self):
        """A pandas DataFrame, one row per kept pair, first divergence first."""
        import pandas as pd

        rows = [rc.to_row() for rc in self.ordered()]
        return pd.DataFrame(rows, columns=list(COLUMNS))

    def to_dict(self) -> dict:
        """Everything, JSON-able (infinities as strings)."""
        return {
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "summary": str(self),
            "a": {"path": self.path_a, "run_id": self.info_a.run_id, "level": self.info_a.level,
                  "writer": self.info_a.writer},
            "b": {"path": self.path_b, "run_id": self.info_b.run_id, "level": self.info_b.level,
                  "writer": self.info_b.writer},
            "counts": dict(self.counts),
            "basis": dict(self.basis),
            "stats_only": self.stats_only,
            "first_divergence": self.first_divergence.to_dict() if self.first_divergence else None,
            "problems": list(self.problems),
            "notes": list(self.notes),
            "atol": self.atol,
            "rtol": self.rtol,
            "kernels": self.kernels,
            "launches": self.launches,
            "bytes_read": self.bytes_read,
            "seconds": self.seconds,
            "dropped": self.dropped,
            "births_a": self.births_a.to_dict() if self.births_a is not None else None,
            "births_b": self.births_b.to_dict() if self.births_b is not None else None,
            "birth_differences": list(self.birth_differences),
            "coverage": self.coverage.to_dict() if self.coverage is not None else None,
            "records": [{k: _json_float(v) for k, v in rc.to_row().items()} for rc in self.ordered()],
        }
