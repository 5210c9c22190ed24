"""Replay: run A's own kernel for a launch on B's (the reference's) inputs.

When a compiled run A and its reference B part ways, the first divergent output may
come from a kernel that is wrong (its error is *born* there) or from a correct kernel
fed inputs that already differed (the error is *inherited*). Replay tells them apart:
the launch is cut out of A's generated code (:mod:`.program`), fed B's values of its
inputs, and its outputs compared with B's:

* **own error**: the replayed outputs against B's; what the kernel adds by itself;
* **total error**: A's recorded outputs against B's; own plus inherited.

``culprit`` when the own error is beyond tolerance (against an fp64 reference: the
verdict of :mod:`aoti_debug.compare.verdict`, ``suspect``, decides), ``propagator``
when only the total error is, ``agrees`` when neither is.

Each launch runs in a child process (:mod:`.isolate`): a kernel that crashes (a
signal: a store past its buffer, a segfault), hangs (no result within the timeout) or
raises on B's inputs is a ``culprit`` of its own (``culprit (crashed: SIGABRT)``), and
the launches after it are still judged.

B's value of an input is found the way ``diff`` pairs values (by launch, or by
provenance across fusion and against an eager reference); an input that is the
unchanged output of an earlier launch of A (same checksum, dtype and shape) takes the
counterpart of that output. An input B has no value for is fed A's own, and said so.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections import defaultdict
from typing import Any, Sequence

from ..config import KernelFilter
from ..errors import DumpError, RecordError
from ..format.reader import RunReader
from ..format.schema import Record
from ..format.validate import extent
from ..compare import verdict as _verdict
from ..compare.diff import choose_aligner, judged_stats, judged_values
from ..compare.metrics import Metrics, TensorComparator, tolerance
from ..compare.value_align import reference_mode
from .isolate import DEFAULT_TIMEOUT, OK, UNRUN, Outcome, Sandbox, check_timeout
from .program import Program, ReplayError, program, wrapper_aliases
from .safe import shown
from .trust import Sources

CULPRIT, PROPAGATOR, AGREES, UNJUDGED = "culprit", "propagator", "agrees", "unjudged"


@dataclasses.dataclass
class OutputReplay:
    """One output of a replayed launch."""

    arg: str
    own: Metrics | None
    """The replayed value (on B's inputs) against B's."""
    total: Metrics | None
    """A's recorded value against B's (None when A has no values for it)."""
    own_failed: bool
    total_failed: bool | None
    own_ratio: float | None = None
    """Against an fp64 reference: the own error over eager's own (:func:`verdict.judge`)."""
    total_ratio: float | None = None
    b_launch: int | None = None


@dataclasses.dataclass
class LaunchReplay:
    """One launch of A, replayed."""

    launch: int
    graph: str
    kernel: str
    verdict: str
    outputs: list[OutputReplay] = dataclasses.field(default_factory=list)
    from_b: list[str] = dataclasses.field(default_factory=list)
    """Inputs fed B's values."""
    own: list[str] = dataclasses.field(default_factory=list)
    """Inputs fed A's own values (B has none for them)."""
    inherited: list[str] = dataclasses.field(default_factory=list)
    """Of :attr:`own`, those an earlier launch of A made: they may carry error from
    upstream, so the own error cannot be told from the inherited one."""
    derived: list[str] = dataclasses.field(default_factory=list)
    """Inputs B has no value for, made by replaying their producing launch of A on B's
    inputs (``arg <- launch N``): a value only A materialised (an ``mm`` whose bias is
    added in the next kernel)."""
    chain: list[int] = dataclasses.field(default_factory=list)
    """The launches replayed for :attr:`derived`: a culprit's error is born in them and
    this launch together."""
    module: str | None = None
    source: str | None = None
    note: str = ""
    why: list[str] = dataclasses.field(default_factory=list)
    """Why inputs without a counterpart in B could not be made by replaying their producer."""
    failure: str | None = None
    """How the replayed kernel failed, where it did: ``crashed``, ``hung`` or ``raised``."""
    reason: str = ""
    """The failure in one line: the signal (``SIGABRT``), ``no result in 120 s``, the exception."""

    @property
    def label(self) -> str:
        """The verdict with its failure: ``culprit (crashed: SIGABRT)``."""
        return f"{self.verdict} ({self.failure}: {self.reason})" if self.failure else self.verdict


@dataclasses.dataclass
class ReplayResult:
    path_a: str
    path_b: str
    reference: str | None
    launches: list[LaunchReplay]
    problems: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def culprits(self) -> list[LaunchReplay]:
        return [r for r in self.launches if r.verdict == CULPRIT]

    @property
    def exit_code(self) -> int:
        """1: a culprit was found; 0: none; 2: nothing could be replayed."""
        if self.culprits:
            return 1
        if self.problems and not any(r.verdict != UNJUDGED for r in self.launches):
            return 2
        return 0

    def __str__(self) -> str:
        return render(self)

    def to_dict(self) -> dict:
        def metrics(m: Metrics | None):
            if m is None:
                return None
            return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                    for k, v in dataclasses.asdict(m).items()}

        return {
            "a": self.path_a, "b": self.path_b, "reference": self.reference, "problems": self.problems,
            "notes": self.notes,
            "launches": [{
                **{k: getattr(r, k) for k in ("launch", "graph", "kernel", "verdict", "label", "failure", "reason",
                                              "from_b", "own", "derived", "chain", "module", "source", "note")},
                "outputs": [{"arg": o.arg, "own": metrics(o.own), "total": metrics(o.total),
                             "own_failed": o.own_failed, "total_failed": o.total_failed,
                             "own_ratio": _finite(o.own_ratio), "total_ratio": _finite(o.total_ratio),
                             "b_launch": o.b_launch} for o in r.outputs],
            } for r in self.launches],
        }


def _finite(v: float | None) -> float | str | None:
    if v is None or math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else "inf"


# ------------------------------------------------------------------------------ pairing
def _content(r: Record) -> tuple | None:
    if r.kind != "tensor" or not r.checksum or r.uninitialised:
        return None
    return (r.checksum, r.dtype, r.numel)  # a reshaping view keeps the row-major checksum


_VIEW = re.compile(r"^reinterpret_tensor\((\w+), \(([\d, ]*)\), \(([\d, ]*)\), (\d+)\)$")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", "").split(",") if x]


@dataclasses.dataclass
class Counterparts:
    """Where B's values of the target launches' records are."""

    records: dict[int, list[Record]]
    """A's records by launch, up to the last launch asked about (:func:`launch_records`)."""
    paired: dict[int, Record] = dataclasses.field(default_factory=dict)
    """A's record (by ``seq``) -> B's record of the same value."""
    views: dict[int, tuple[Record, Record, list[int], list[int], int]] = dataclasses.field(default_factory=dict)
    """A's input read through ``reinterpret_tensor(buf, size, stride, offset)`` of an
    output B has: -> (A's record of that output, B's, size, stride, offset)."""
    made_by_a: set[int] = dataclasses.field(default_factory=set)
    """A's inputs that an earlier launch of A wrote (they may carry inherited error)."""
    producers: dict[int, tuple[Record, tuple[list[int], list[int], int] | None]] = dataclasses.field(
        default_factory=dict)
    """A's input -> A's record of the output it is (or is a ``reinterpret_tensor`` view of)."""

    def get(self, seq: int) -> Record | None:
        return self.paired.get(seq)


def _counterparts(ra: RunReader, rb: RunReader | None, records: dict[int, list[Record]],
                  sources: Sources | None = None) -> Counterparts:
    """B's record of each of A's ``records`` (:func:`launch_records`); none without B.

    Args:
        sources: A's verified generated sources, whose aliases (``buf31 = buf30[0]``)
            pair more values; None: without them."""
    found = Counterparts(records)
    if rb is None or not records:
        return found
    last = max(records)
    paired = found.paired
    for launch in choose_aligner(ra, rb, KernelFilter()).launches():
        for p in launch.pairs:
            if p.a is not None and p.b is not None and p.a.launch <= last:
                paired[p.a.seq] = p.b
    # An input that is the unchanged output of an earlier launch of A takes that
    # output's counterpart (value pairing keys a node's value where it is made); one
    # read through a view of such an output, the same view of it.
    made: dict[tuple, int] = {}
    written: dict[tuple[str, str], Record] = {}
    aliases: dict[str, dict] = {}

    def writer_of(graph: str, name: str, view):
        """The last record of A that wrote ``name`` (through the wrapper's aliases), and
        the view of it that ``name`` is (None: the value itself, as its record holds it)."""
        if graph not in aliases:
            aliases[graph] = wrapper_aliases(sources, graph) if sources is not None else {}
        for _ in range(8):
            rec = written.get((graph, name))
            if rec is not None or name not in aliases[graph]:
                return rec, view
            name, alias_view = aliases[graph][name]
            if alias_view is not None:
                if view is not None:
                    return None, None  # a view of a view: not composed
                view = alias_view
        return None, None

    for r in (r for n in sorted(records) for r in records[n]):
        if r.phase == "before" and r.kind == "tensor":
            expr = _VIEW.match(r.expr or "")
            spec = (_ints(expr.group(2)), _ints(expr.group(3)), int(expr.group(4))) if expr else None
            base, view = writer_of(r.graph, expr.group(1) if expr else r.arg, spec)
            origin = ra.provenance(r)
            if base is not None or origin is None or origin.input(r.arg) is None:
                found.made_by_a.add(r.seq)  # not a graph input or weight
            if base is not None:
                found.producers[r.seq] = (base, view)
            key = _content(r)
            producer = made.get(key) if key is not None else None
            if r.seq not in paired and producer is not None and producer in paired:
                paired[r.seq] = paired[producer]
            elif r.seq not in paired and view and base is not None and base.seq in paired:
                found.views[r.seq] = (base, paired[base.seq], *view)
        if r.phase == "after" and r.kind == "tensor":
            written[(r.graph, r.arg)] = r
            if _content(r) is not None:
                made[_content(r)] = r.seq
    return found


def divergent_launches(result, k: int) -> list[int]:
    """A's first ``k`` launches with an output that differs from B's, by a ``DiffResult``."""
    found = sorted({rc.a.launch for rc in result.records
                    if rc.a is not None and rc.a.phase == "after" and rc.status == "fail"})
    return found[:k]


# ------------------------------------------------------------------------------ replay
def _torch_dtype(name: str):
    import torch

    dtype = getattr(torch, name or "", None)
    if not isinstance(dtype, torch.dtype):
        raise ReplayError(f"unknown dtype {name!r}")
    return dtype


def _device(rec: Record):
    import torch

    device = torch.device(rec.device or "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ReplayError(f"{rec.kernel} ran on {device}, and this machine has no CUDA device: replay it there")
    return device


def _room(device) -> int | None:
    """Bytes free for a new tensor on ``device`` (None: unknown)."""
    import torch

    try:
        if device.type == "cuda":
            return torch.cuda.mem_get_info(device)[0]
        if device.type == "cpu":
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, RuntimeError):
        pass
    return None


def materialise(rec: Record, value: Any):
    """A tensor with ``rec``'s dtype, shape, strides and device holding ``value`` (any
    tensor of its element count; zeros where ``value`` is None).

    Raises:
        ReplayError: the tensor would not fit in the device's free memory (a dump may
            declare any size up to validate's bound; nothing is allocated then).
    """
    import torch

    shape, stride = list(rec.shape or []), list(rec.stride or [])
    dtype, device = _torch_dtype(rec.dtype), _device(rec)
    need = extent(shape, stride) * dtype.itemsize
    room = _room(device)
    if room is not None and need > room:
        raise ReplayError(f"{rec.arg} of launch {rec.launch} needs {need / 2**30:.1f} GiB and {device} has "
                          f"{room / 2**30:.1f} GiB free: replay it on a machine with more memory")
    try:
        out = torch.empty_strided(shape, stride, dtype=dtype, device=device)
    except RuntimeError as e:  # out of memory, or an allocator limit below the free memory
        raise ReplayError(f"{rec.arg} of launch {rec.launch}: cannot allocate {need / 2**30:.1f} GiB on {device} "
                          f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    if value is None:
        return out.zero_()
    value = value.reshape(shape) if list(value.shape) != shape else value
    try:
        out.copy_(value)
    except RuntimeError:  # overlapping strides (an expanded view): keep the values, dense
        out = value.to(device=out.device, dtype=out.dtype).contiguous()
    return out


def _scalar(rec: Record) -> Any:
    if rec.kind == "none":
        return None
    v = rec.value
    if isinstance(v, str) and v in ("nan", "inf", "-inf"):
        return float(v)
    if rec.dtype == "bool" and isinstance(v, (int, bool)):
        return bool(v)
    if rec.dtype == "int" or rec.kind == "symint":
        try:
            return int(v)
        except (TypeError, ValueError):
            raise ReplayError(f"{rec.arg} of {rec.kernel} is the symbolic {v!r}: not replayable") from None
    return v


class _Replayer:
    def __init__(self, ra: RunReader, rb: RunReader, atol, rtol, factor: float | None, sources: Sources | None = None,
                 timeout: float = DEFAULT_TIMEOUT):
        self.ra, self.rb = ra, rb
        self.sources = sources if sources is not None else Sources(ra)
        """A's generated code, as replay may run it (checked copies, :mod:`.trust`)."""
        self.atol, self.rtol, self.factor = atol, rtol, factor
        self.comparator = TensorComparator()
        self.programs: dict[tuple[str, int, str], Program] = {}
        self.sandbox = Sandbox(timeout)
        """Where each replayed launch runs: a child process (:mod:`.isolate`)."""
        self._derived: dict[int, Any] = {}
        self._why: dict[int, str] = {}

    def close(self) -> None:
        self.sandbox.close()

    def program_of(self, records: list[Record]) -> Program:
        first = records[0]
        key = (first.graph, first.site if first.site is not None else -1, first.kernel)
        if key not in self.programs:
            self.programs[key] = program(self.sources, records)
        return self.programs[key]

    def run(self, prog: Program, values: dict[str, Any]) -> Outcome:
        """``prog``'s launch on ``values``, in a child process (its crash is an outcome)."""
        return self.sandbox.run(prog.module_source(), prog.kernel, prog.origin, [values[p] for p in prog.params])

    def derive(self, out: Record, paired: Counterparts, lr: LaunchReplay, depth: int):
        """A's output ``out`` as its launch computes it from B's inputs, or None."""
        if out.seq not in self._derived:
            self._derived[out.seq] = None
            sub = LaunchReplay(out.launch, out.graph, out.kernel, UNJUDGED)
            try:
                prog = self.program_of(paired.records[out.launch])
                values = self.inputs(prog, paired, sub, depth + 1)
                if sub.inherited:
                    self._why[out.seq] = f"launch {out.launch} was itself fed A's own {', '.join(sub.inherited)}"
                else:
                    outcome = self.run(prog, values)
                    if outcome.status == OK:
                        self._derived[out.seq] = ((outcome.outputs or {}).get(out.arg), sub.chain)
                    else:
                        how = "failed" if outcome.status == UNRUN else outcome.status
                        self._why[out.seq] = f"replaying launch {out.launch} {how}: {outcome.reason}"
            except Exception as e:  # the producer cannot be replayed: the input stays A's own
                self._why[out.seq] = f"replaying launch {out.launch} failed: {type(e).__name__}: {e}"
        found = self._derived[out.seq]
        if found is None:
            if out.seq in self._why:
                lr.why.append(self._why[out.seq])
            return None
        value, chain = found
        for n in (*chain, out.launch):
            if n not in lr.chain:
                lr.chain.append(n)
        return value

    def _load(self, reader: RunReader, rec: Record | None):
        if rec is None or not rec.file:
            return None
        try:
            return reader.load_tensor(rec, mmap=False)
        except RecordError:
            return None

    def inputs(self, prog: Program, paired: Counterparts, lr: LaunchReplay, depth: int = 0) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for v in prog.values.values():
            if v.before is None:
                if v.name in prog.params:  # an output the kernel writes: fresh memory
                    values[v.name] = materialise(v.after, None) if v.after.kind == "tensor" else _scalar(v.after)
                continue
            rec = v.before
            if rec.kind != "tensor":
                values[v.name] = _scalar(rec)
                continue
            if rec.uninitialised:
                values[v.name] = materialise(rec, None)
                continue
            b = paired.get(rec.seq)
            tb = self._load(self.rb, b)
            if tb is not None and tb.numel() == (rec.numel if rec.numel is not None else tb.numel()):
                values[v.name] = materialise(rec, tb)
                lr.from_b.append(rec.arg)
                continue
            view = paired.views.get(rec.seq)
            tb = self._load(self.rb, view[1]) if view is not None else None
            if tb is not None and tb.numel() == view[0].numel:
                base = materialise(view[0], tb)
                values[v.name] = materialise(rec, base.as_strided(view[2], view[3], view[4]))
                lr.from_b.append(rec.arg)
                continue
            producer = paired.producers.get(rec.seq)
            made = self.derive(producer[0], paired, lr, depth) if producer is not None and depth < 4 else None
            if made is not None and hasattr(made, "as_strided"):
                view = producer[1]
                values[v.name] = materialise(rec, made.as_strided(*view) if view else made)
                lr.derived.append(f"{rec.arg} <- launch {producer[0].launch}")
                continue
            ta = self._load(self.ra, rec)
            if ta is None:
                why = rec.skipped or ("level " + self.ra.info.level if not rec.file else rec.error or "unreadable")
                raise ReplayError(f"input {rec.arg} of launch {rec.launch} has no values in either dump ({why}): "
                                  f"re-run A with `aoti-debug run --level save --save-launches {rec.launch}`")
            values[v.name] = materialise(rec, ta)
            lr.own.append(rec.arg)
            if rec.seq in paired.made_by_a:
                lr.inherited.append(rec.arg)
                if producer is None:
                    lr.why.append(f"no launch of A is known to have written {rec.arg}")
        for name, elements in prog.lists.items():
            values[name] = [values.pop(e) for e in elements]
        return values

    def judge(self, arg: str, out_a: Record, replayed: Any, paired: Counterparts) -> OutputReplay | None:
        b = paired.get(out_a.seq)
        tb = self._load(self.rb, b)
        if b is None or tb is None or not hasattr(replayed, "shape"):
            return None
        atol, rtol = tolerance(out_a.dtype, self.atol, self.rtol)

        def failed(judged) -> tuple[Metrics, bool, float | None]:
            m, verdict, ratio = judged  # against fp64 the verdict decides, as in diff
            return m, (verdict == _verdict.SUSPECT) if verdict is not None else not m.passed, ratio

        own, own_failed, own_ratio = failed(judged_values(self.comparator, replayed.detach().to("cpu"), tb, b,
                                                          atol, rtol, self.factor))
        ta = self._load(self.ra, out_a)
        total = total_failed = total_ratio = None
        if ta is not None:
            total, total_failed, total_ratio = failed(judged_values(self.comparator, ta, tb, b, atol, rtol,
                                                                    self.factor))
        elif out_a.stats is not None and b.stats is not None:  # A at level stats: a lower bound
            total, total_failed, total_ratio = failed(judged_stats(out_a, b, atol, rtol, self.factor))
        return OutputReplay(arg, own, total, own_failed, total_failed, own_ratio, total_ratio, b.launch)

    def replay(self, records: list[Record], paired: Counterparts) -> LaunchReplay:
        first = records[0]
        lr = LaunchReplay(first.launch, first.graph, first.kernel, UNJUDGED)
        origin = self.ra.provenance(first)
        if origin is not None:
            lr.module, lr.source = origin.module or None, origin.source or None
        try:
            prog = self.program_of(records)
            values = self.inputs(prog, paired, lr)
        except ReplayError as e:
            lr.note = str(e)
            return lr
        except Exception as e:  # its inputs cannot be made (a value the dump holds does not fit)
            lr.note = f"making its inputs raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            return lr
        outcome = self.run(prog, values)
        if outcome.status == UNRUN:
            lr.note = outcome.reason
            return lr
        if outcome.failed:
            # A kernel that crashes, hangs or raises on the reference's own inputs is
            # where the error is born; on A's own values made upstream, it may have
            # inherited the cause.
            lr.failure, lr.reason = outcome.status, outcome.reason
            words = f"; its last output: {outcome.last_words}" if outcome.last_words else ""
            if lr.inherited:
                lr.note = (f"it {outcome.status} ({outcome.reason}), but was fed A's own "
                           f"{', '.join(lr.inherited)} (made by an earlier launch, without a counterpart in B): "
                           f"what it inherited may be the cause" + "".join(f"; {w}" for w in lr.why) + words)
            else:
                lr.verdict = CULPRIT
                lr.note = f"it {outcome.status} on B's inputs ({outcome.reason}){words}"
            return lr
        outputs = outcome.outputs or {}
        for rec in records:
            if rec.phase != "after" or rec.kind != "tensor" or rec.volatile:
                continue
            result = self.judge(rec.arg, rec, outputs.get(rec.arg), paired)
            if result is not None:
                lr.outputs.append(result)
        if not lr.outputs:
            lr.note = "B has no values for any of its outputs (fused away in B, or B has no tensor files)"
        elif any(o.own_failed for o in lr.outputs) and lr.inherited:
            lr.note = (f"beyond tolerance, but fed A's own {', '.join(lr.inherited)} (made by an earlier launch, "
                       f"without a counterpart in B): its own error cannot be told from what it inherited"
                       + "".join(f"; {w}" for w in lr.why))
        elif any(o.own_failed for o in lr.outputs):
            lr.verdict = CULPRIT
            if lr.chain:
                lr.note = (f"born in launches {', '.join(map(str, lr.chain))} and {lr.launch} together: "
                           f"the reference has no value between them")
        elif any(o.total_failed for o in lr.outputs):
            lr.verdict = PROPAGATOR
        else:
            lr.verdict = AGREES
        return lr


def _as_reader(path) -> RunReader:
    return path if isinstance(path, RunReader) else RunReader(str(path))


def launch_records(reader: RunReader, last: int) -> dict[int, list[Record]]:
    """A run's records of launches 1..``last``, by launch, each launch's in ``seq`` order
    (one pass over the manifest: the launches replayed and those their inputs came from)."""
    found: dict[int, list[Record]] = defaultdict(list)
    for r in reader.records():
        if r.launch <= last:
            found[r.launch].append(r)
    for recs in found.values():
        recs.sort(key=lambda r: r.seq)
    return dict(found)


def _nonempty(reader: RunReader, which: str) -> None:
    if next(iter(reader.records()), None) is None:
        raise DumpError(f"run {which} ({shown(reader.path)}) has no records (an empty manifest): nothing to replay "
                        f"or judge")


def replay(a, b, *, launches: Sequence[int] | None = None, first: int | None = None, atol: float | None = None,
           rtol: float | None = None, rounding_factor: float | None = None, trust: bool = False,
           confirm=None, say=None, timeout: float = DEFAULT_TIMEOUT) -> ReplayResult:
    """Replay launches of run A on run B's values (see the module's docstring).

    Args:
        launches: A's launch numbers; by default (and with ``first``) the first
            ``first`` (1) launches whose outputs differ from B's.
        rounding_factor: against an fp64 reference, how many times eager's own error
            an own error may be and stay rounding; None: fitted to the model's dtype
            (:func:`aoti_debug.compare.verdict.factor_for`), as ``diff`` judges.
        trust, confirm, say: who may run A's generated code (:class:`.trust.Sources`):
            by default only the dump's verified copies, of a dump this user recorded
            on this machine.
        timeout: seconds a replayed kernel may run (each runs in a child process)
            before it is a ``culprit (hung: ...)``; compiling it may take
            :data:`.isolate.SETUP_TIMEOUT` or this, whichever is longer.

    Raises:
        DumpError: a path is not a usable dump (or holds no records), or a launch is not in A.
        ReplayError: A's generated code may not be run (no verified copy, a hash that
            does not match, another user's or machine's dump without ``trust``).
        ConfigError: ``timeout`` is not a positive, finite number of seconds.
        ToleranceError: a tolerance is NaN, infinite or negative (the factor not > 0).
    """
    from ..compare.tolerances import check_tolerances  # NaN would judge no kernel a culprit

    check_tolerances(atol, rtol, rounding_factor)
    timeout = check_timeout(timeout)
    ra, rb = _as_reader(a), _as_reader(b)
    replayer = None
    try:
        _nonempty(ra, "A")
        _nonempty(rb, "B")
        if reference_mode(ra.info) and not reference_mode(rb.info):
            raise DumpError(f"{ra.path} is an eager reference: give it second (aoti-debug replay COMPILED REFERENCE)")
        problems: list[str] = []
        notes: list[str] = []
        if launches is None:
            from ..compare.diff import diff

            compared = diff(ra.path, rb.path, atol=atol, rtol=rtol, keep_passing=False,
                            rounding_factor=rounding_factor)
            launches = divergent_launches(compared, first or 1)
            if not launches:
                notes.append("no output of A differs from B's: nothing to replay")
        records = launch_records(ra, max(launches, default=0))
        missing = [n for n in launches if n not in records]
        if missing:
            raise DumpError(f"{ra.path} has no launch {', '.join(map(str, missing))} "
                            f"(it has launches 1..{max((r.launch for r in ra.records()), default=0)})")
        if rb.info.level != "save":
            problems.append(f"run B was recorded at level {rb.info.level}: replay feeds and compares B's tensor "
                            f"files (record it at level save)")
        if ra.info.level != "save":
            notes.append(f"run A was recorded at level {ra.info.level}: its total error is judged from its stats")
        sources = Sources(ra, trust=trust, confirm=confirm, say=say)
        # Before anything runs: what would run is A's own verified code, or nothing.
        if launches:
            sources.vouch({r.graph for recs in records.values() for r in recs})
        replayer = _Replayer(ra, rb, atol, rtol, rounding_factor, sources, timeout)
        paired = _counterparts(ra, rb, records, sources)
        results = [replayer.replay(records[n], paired) for n in sorted(set(launches))]
        for r in results:
            if r.verdict == UNJUDGED and r.note:
                problems.append(f"launch {r.launch} ({r.kernel}): {r.note}")
        return ReplayResult(ra.path, rb.path, reference_mode(rb.info), results, problems, notes)
    finally:
        if replayer is not None:
            replayer.close()
        ra.close()
        rb.close()


# ------------------------------------------------------------------------------ text
def _g(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}"


def render(result: ReplayResult) -> str:
    ref = f"eager reference ({result.reference})" if result.reference else "run B"
    lines = [f"replay of {result.path_a} on the inputs of {ref} {result.path_b}"]
    against_fp64 = result.reference == "fp64"
    for r in result.launches:
        where = f" in {r.module}" if r.module else ""
        failure = f" ({r.failure}: {r.reason})" if r.failure else ""
        lines.append(f"launch {r.launch} {r.kernel} ({r.graph}){where}: {r.verdict.upper()}{failure}")
        if r.from_b or r.own or r.derived:
            fed = f"  inputs from B: {', '.join(r.from_b) or '-'}"
            if r.derived:
                fed += f"; replayed on B's inputs: {', '.join(r.derived)}"
            if r.own:
                fed += f"; A's own (B has none): {', '.join(r.own)}"
            lines.append(fed)
        if r.outputs:
            head = ("    output", "own rms err", "own max abs", "total rms err", "total max abs")
            if against_fp64:
                head += ("own x eager", "total x eager")
            rows = [head]
            for o in r.outputs:
                row = (f"    {o.arg}", _g(o.own.rmse if o.own else None), _g(o.own.max_abs if o.own else None),
                       _g(o.total.rmse if o.total else None), _g(o.total.max_abs if o.total else None))
                if against_fp64:
                    row += (_g(o.own_ratio), _g(o.total_ratio))
                rows.append(row)
            widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
            lines.extend("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)
        if r.note:
            lines.append(f"  {r.note}")
    culprits = result.culprits
    if culprits:
        c = culprits[0]
        why = (f"it {c.failure} on B's own inputs ({c.reason})" if c.failure
               else "its error is born there (beyond tolerance on B's own inputs)")
        lines.append(f"culprit: launch {c.launch} {c.kernel}{' in ' + c.module if c.module else ''}"
                     f"{' at ' + c.source if c.source else ''}: {why}")
    elif any(r.verdict == PROPAGATOR for r in result.launches):
        lines.append("no culprit among these: each kernel is right on B's inputs and passes on error it was fed; "
                     "replay earlier launches (--first K, or --launch N)")
    for n in result.notes:
        lines.append(f"note: {n}")
    for p in result.problems:
        lines.append(f"problem: {p}")
    # A dump's names may hold newlines or bytes that are no text: each line stays one line.
    return "\n".join(_readable(line) for line in lines)


def _readable(text: str) -> str:
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
