"""Comparing two runs: align, plan each pair, read ahead, measure, find the first divergence.

Memory stays near the pair being compared: the manifests are streamed (two runs of one
program side by side, each line read once; others indexed by byte offsets first, and
each launch's lines read again), tensors are memory-mapped one pair at a time and
compared in chunks, and only the pairs that fail are kept unless ``keep_passing`` is set.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time
from typing import Callable, Iterator

from ..config import KernelFilter
from ..errors import DumpError, RecordError
from ..format.reader import RunReader
from .coverage import CoverageCounter
from ..format.schema import Record
from .align import Aligner, OutOfStep, PairedLaunch, Pair, StreamAligner, in_diff
from .value_align import UNMATERIALISED, ValueAligner, reference_mode, usable
from .births import BirthFinder, Births, find_births, provenance_source
from .divergence import DivergenceFinder
from .metrics import Metrics, TensorComparator, compare_checksums, compare_scalars, compare_stats, tolerance
from .prefetch import Prefetcher
from . import verdict as _verdict
from .result import NOT_COMPARED, DiffResult, FirstDivergence, RecordComparison

#: How far ahead of the comparison the prefetch thread may read.
READ_AHEAD_BYTES = 512 << 20
#: The most launches planned ahead of the comparison: a stats-level dump has no files to
#: read ahead, and its plans (records of both runs) would otherwise pile up without bound.
READ_AHEAD_LAUNCHES = 256


@dataclasses.dataclass
class _Plan:
    """How one pair will be compared, decided before any tensor file is read."""

    pair: Pair
    how: str  # values | checksum | stats | value | mismatch | error | only_a | only_b | not compared (below)
    note: str = ""
    paths: tuple[str, ...] = ()
    nbytes: int = 0


class _OneIntraOpThread:
    """While in use, torch ops run on the calling thread only; the setting is restored after.

    The comparison is a stream of small ops on cache-sized chunks (torch.equal and
    dtype conversions among them): fanning each out to an OpenMP pool costs more
    than it gains, and on a busy machine a pool thread that loses its core stalls
    every op (measured 10x slower on 2 shared cores, torch 2.13).

    Torch is imported at the first tensor file (:meth:`ensure`): a diff of stats-level
    dumps never imports it (seconds of start-up and a few hundred MB).
    """

    def __init__(self):
        self._previous: int | None = None

    def ensure(self) -> None:
        if self._previous is None:
            import torch

            self._previous = torch.get_num_threads()
            torch.set_num_threads(1)

    def __enter__(self) -> "_OneIntraOpThread":
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            import torch

            torch.set_num_threads(self._previous)
            self._previous = None


def _as_reader(dump) -> RunReader:
    return dump if isinstance(dump, RunReader) else RunReader(os.fspath(dump))


def _shape(r: Record) -> str:
    return "x".join(map(str, r.shape)) if r.shape else "scalar"


def _plan(pair: Pair, ra: RunReader, rb: RunReader, use_checksums: bool, ignore: KernelFilter | None = None) -> _Plan:
    a, b = pair.a, pair.b
    rec = a if a is not None else b
    if ignore is not None and rec is not None and ignore.matches(rec.kernel, rec.op, rec.arg):
        return _Plan(pair, "ignored", f"matches --ignore {ignore}")
    if pair.how == UNMATERIALISED:
        side, other = ("A", "B") if a is not None else ("B", "A")
        return _Plan(pair, "unpaired", pair.note or f"value of run {side} that run {other} did not materialise "
                                                    f"(fused differently), or whose provenance is unknown")
    if pair.how == "unpaired":
        side = "A" if a is not None else "B"
        return _Plan(pair, "unpaired", f"input only in run {side}: the two compiles pass this kernel "
                                       f"different arguments (one computes or folds it)")
    if a is None:
        return _Plan(pair, "only_b", "only in run B")
    if b is None:
        return _Plan(pair, "only_a", "only in run A")
    uninit = [side for side, r in (("A", a), ("B", b)) if r.uninitialised]
    if uninit:
        return _Plan(pair, "uninitialised", f"run {' and '.join(uninit)}: read before any launch wrote it "
                                            f"(not data; metadata only)")
    if a.volatile or b.volatile:
        return _Plan(pair, "volatile", f"nondeterministic by contract: {a.volatile or b.volatile}")
    if a.kind != b.kind:
        return _Plan(pair, "mismatch", f"kind differs: {a.kind} in A, {b.kind} in B")
    if a.kind != "tensor":
        return _Plan(pair, "value")
    if a.dtype != b.dtype and a.dtype != b.model_dtype:
        return _Plan(pair, "mismatch", f"dtype differs: {a.dtype} in A, {b.dtype} in B")
    reshaped = b.wrapper == "eager" and a.phase == "after"
    if list(a.shape or []) != list(b.shape or []) and not (reshaped and a.numel == b.numel):
        # (Against an eager reference a node's value may be materialised before its own
        # last reshape: compared element by element in order when the counts agree.)
        return _Plan(pair, "mismatch", f"shape differs: {_shape(a)} in A, {_shape(b)} in B")
    if use_checksums and a.checksum and a.checksum == b.checksum:
        return _Plan(pair, "checksum")
    if a.file and b.file:
        try:
            paths = (ra.tensor_path(a), rb.tensor_path(b))
        except RecordError as e:
            return _Plan(pair, "error", str(e))
        nbytes = 0
        for p in paths:
            try:
                nbytes += os.path.getsize(p)
            except OSError:
                pass
        return _Plan(pair, "values", paths=paths, nbytes=nbytes)
    if a.stats is not None and b.stats is not None or (a.checksum and b.checksum):
        return _Plan(pair, "stats")
    side = "A" if (a.stats is None and not a.file) else "B"
    rec = a if side == "A" else b
    why = rec.error or rec.skipped or "neither a tensor file nor stats"
    return _Plan(pair, "error", f"run {side} recorded no values: {why}")


class _Lookahead:
    """Plans launches ahead of the comparison and hands their files to the prefetcher.

    Iterating yields ``(launch, plans)`` in A's order; by then the files of the
    launches after it, up to READ_AHEAD_BYTES, are already being read.
    """

    def __init__(self, launches: Iterator[PairedLaunch], plan: Callable[[Pair], _Plan], prefetcher: Prefetcher | None):
        self._launches = launches
        self._plan = plan
        self._prefetcher = prefetcher
        self._pending: collections.deque = collections.deque()
        self._ahead = 0
        self._ticket = 0

    def _fill(self) -> None:
        while (self._ahead < READ_AHEAD_BYTES and len(self._pending) < READ_AHEAD_LAUNCHES) or not self._pending:
            launch = next(self._launches, None)
            if launch is None:
                return
            plans = [self._plan(p) for p in launch.pairs]
            self._ticket += 1
            if self._prefetcher is not None:
                for pl in plans:
                    for path in pl.paths:
                        self._prefetcher.add(self._ticket, path)
            nbytes = sum(pl.nbytes for pl in plans)
            self._ahead += nbytes
            self._pending.append((launch, plans, self._ticket, nbytes))

    def __iter__(self) -> Iterator[tuple[PairedLaunch, list[_Plan]]]:
        while True:
            self._fill()
            if not self._pending:
                return
            launch, plans, ticket, nbytes = self._pending.popleft()
            if self._prefetcher is not None:
                self._prefetcher.consumed(ticket)
            yield launch, plans
            self._ahead -= nbytes


class _Kept:
    """Counts every pair; keeps the ones a result lists (failures, or all, up to a cap),
    and, when asked, every pair apart from them (``every``)."""

    def __init__(self, keep_passing: bool, limit: int | None, keep_all: bool = False):
        self.keep_passing = keep_passing
        self.limit = limit
        self.rows: list[RecordComparison] = []
        self.every: list[RecordComparison] | None = [] if keep_all else None
        self.counts: collections.Counter = collections.Counter()
        self.dropped = 0

    def add(self, rows: list[RecordComparison]) -> None:
        for rc in rows:
            self.counts[rc.status] += 1
            if self.every is not None:
                self.every.append(rc)
            if rc.status == "pass" and not self.keep_passing:
                continue
            if self.limit is None or len(self.rows) < self.limit or rc.first:
                self.rows.append(rc)
            else:
                self.dropped += 1


def judged_values(comparator: TensorComparator, ta, tb, b: Record, atol: float, rtol: float,
                  factor: float | None) -> tuple[Metrics, str | None, float | None]:
    """A value of A against B's value ``tb`` (of record ``b``), in B's precision and shape;
    against an fp64 reference also its verdict and ratio (:mod:`.verdict`), else None."""
    if ta.dtype != tb.dtype:  # an fp64 reference: compare in its precision
        ta = ta.to(tb.dtype)
    if ta.shape != tb.shape:  # a reference's value before its last reshape
        ta = ta.reshape(tb.shape)
    m = comparator.compare(ta, tb, atol, rtol)
    if _verdict.applies(b):
        return (m, *_verdict.judge(m, b, factor))
    return m, None, None


def judged_stats(a: Record, b: Record, atol: float, rtol: float,
                 factor: float | None) -> tuple[Metrics, str | None, float | None]:
    """:func:`judged_values` from the two records' stats (a lower bound of the error)."""
    m = compare_stats(a, b, atol, rtol)
    if _verdict.applies(b):
        return (m, *_verdict.judge_stats(a, b, factor))
    return m, None, None


class _Runner:
    """Carries out plans: loads, measures, and says pass or fail."""

    def __init__(self, ra: RunReader, rb: RunReader, atol, rtol, factor: float | None = None,
                 threads: _OneIntraOpThread | None = None):
        self.ra, self.rb = ra, rb
        self.threads = threads or _OneIntraOpThread()
        self.atol, self.rtol = atol, rtol
        self.factor = factor
        self.comparator = TensorComparator()
        self.basis: collections.Counter = collections.Counter()
        self.bytes_read = 0

    def run(self, plan: _Plan) -> RecordComparison:
        a, b = plan.pair.a, plan.pair.b
        rec = a if a is not None else b
        assert rec is not None
        atol, rtol = tolerance(rec.dtype if rec.kind == "tensor" else "float", self.atol, self.rtol)
        rc = RecordComparison(plan.how, a, b, None, plan.pair.how, atol, rtol, plan.note)
        if plan.how in ("only_a", "only_b", "mismatch", "error", *NOT_COMPARED):
            return rc
        if plan.how == "value":
            m = compare_scalars(a, b, self.atol, self.rtol)
            rc.atol, rc.rtol = None, None
        elif plan.how == "checksum":
            m = compare_checksums(a, b)
        elif plan.how == "stats":
            m, rc.verdict, rc.ratio = judged_stats(a, b, atol, rtol, self.factor)
        else:
            self.threads.ensure()
            try:
                ta = self.ra.load_tensor(a)
            except RecordError as e:
                rc.status, rc.note = "error", f"run A: {e}"
                return rc
            try:
                tb = self.rb.load_tensor(b)
            except RecordError as e:
                rc.status, rc.note = "error", f"run B: {e}"
                return rc
            m, rc.verdict, rc.ratio = judged_values(self.comparator, ta, tb, b, atol, rtol, self.factor)
            del ta, tb
            self.bytes_read += plan.nbytes
        self.basis[m.basis] += 1
        rc.metrics = m
        if rc.verdict is not None:  # against float64, the verdict decides, not the tolerance
            m.passed = rc.verdict == _verdict.ROUNDING
        rc.status = "pass" if m.passed else "fail"
        if m.note:
            rc.note = m.note
        return rc


@dataclasses.dataclass
class _Pass:
    """One comparison of every pair an aligner gives, and what it found."""

    runner: _Runner
    finder: DivergenceFinder
    kept: _Kept
    looked: CoverageCounter
    launches: int = 0

    def run(self, aligner, plan: Callable[[Pair], _Plan], read_ahead: bool,
            progress: Callable[[int], None] | None) -> None:
        with Prefetcher() as prefetcher:
            for launch, plans in _Lookahead(aligner.launches(), plan, prefetcher if read_ahead else None):
                rows = [self.runner.run(pl) for pl in plans]
                self.launches += 1
                self.finder.observe(launch, rows)
                self.kept.add(rows)
                self.looked.add(rows)
                if progress is not None:
                    progress(launch.end_offset)
            for launch in aligner.only_in_b():
                self.kept.add([self.runner.run(plan(p)) for p in launch.pairs])


ALIGNMENTS = ("auto", "launch", "value")


def choose_aligner(ra: RunReader, rb: RunReader, kfilter: KernelFilter, align: str = "auto") -> Aligner | ValueAligner:
    """The aligner ``diff(align=...)`` pairs A's records with B's by (see :func:`diff`)."""
    return _choose(ra, rb, kfilter, align)[0]


def _choose(ra: RunReader, rb: RunReader, kfilter: KernelFilter, align: str,
            by_launch: Aligner | None = None) -> tuple[Aligner | ValueAligner, Aligner | None]:
    """:func:`choose_aligner`, and the launch aligner it built on the way (or was given:
    ``by_launch``; None when it needs none)."""
    if _by_value(rb, align):
        return ValueAligner(ra, rb, kfilter), None
    by_launch = by_launch or Aligner(ra, rb, kfilter)
    if align == "auto" and _values_fit(ra, rb, by_launch):
        return ValueAligner(ra, rb, kfilter), by_launch
    return by_launch, by_launch


def _by_value(rb: RunReader, align: str) -> bool:
    """Whether values are paired by provenance whatever the runs' launches."""
    return align == "value" or (align == "auto" and reference_mode(rb.info) is not None)


def _filters(reader: RunReader) -> set[str]:
    """The kernel filters a run recorded with (run.json's, and each graph's)."""
    found = {str(reader.info.kernels or "")}
    for g in reader.info.graphs.values():
        if isinstance(g, dict):
            found.add(str(g.get("kernels") or ""))
    return found


def _values_fit(ra: RunReader, rb: RunReader, by_launch: Aligner) -> bool:
    """``align="auto"``: pair by value? Only where the runs' kernels differ (the indexes of
    ``by_launch``, the launch-level aligner, say so), both wrote provenance, and both used
    one kernel filter (other filters, not other kernels: their difference is the finding)."""
    return usable(ra) and usable(rb) and _filters(ra) == _filters(rb) and not by_launch.same_launches()

def _attach_provenance(ra: RunReader, rb: RunReader, rows: list[RecordComparison],
                       first: FirstDivergence | None) -> None:
    """Module paths on the listed rows and the first divergence's module and source line,
    from run A's provenance (B's where A's dump has none: an older writer)."""

    def origin(rc: RecordComparison):
        for reader, rec in ((ra, rc.a), (rb, rc.b)):
            prov = reader.provenance(rec) if rec is not None else None
            if prov is not None:
                return prov, rec
        return None, None

    def from_b(rc: RecordComparison):
        """B's value of ``rc`` where it names a module and A's does not (a compiled
        backward's node keeps its forward module in B, an fp64 reference, only)."""
        prov = rb.provenance(rc.b) if rc.b is not None else None
        value = prov.output(rc.b.arg) if prov is not None else None
        return value if value is not None and value.module else None

    for rc in rows:
        prov, rec = origin(rc)
        if prov is not None:
            value = prov.output(rec.arg)
            rc.module = (value.module if value is not None and value.module else prov.module) or None
            rc.module_raw = (value.module_raw if value is not None and value.module else prov.module_raw) or None
        if not rc.module and (value_b := from_b(rc)) is not None:
            rc.module, rc.module_raw = value_b.module, value_b.module_raw
    if first is None:
        return
    for rc in rows:
        if rc.first and rc.a is not None and rc.a.launch == first.launch:
            prov, _rec = origin(rc)
            if prov is None:
                continue
            # A differing weight or graph input: the module whose node reads it (the
            # BatchNorm of a conv+bn+relu kernel); else the value that differs (its FX
            # node); else the launch as a whole.
            named = [prov.input(x) for x in first.inputs] if first.kind == "input" else []
            named += [prov.output(x) for x in first.outputs]
            value = next((v for v in named if v is not None and v.module), None)
            if value is None and not prov.module:
                value = from_b(rc)
            if value is not None:
                first.module, first.source, first.code = value.module, value.source, value.code
            else:
                first.module, first.source, first.code = prov.module, prov.source, prov.code
            return

def diff(
    a,
    b,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    kernels: str | None = None,
    ignore: str | list[str] | tuple[str, ...] | None = None,
    keep_passing: bool = True,
    max_records: int | None = None,
    keep_all: bool = False,
    use_checksums: bool = True,
    progress: Callable[[int, int], None] | None = None,
    read_ahead: bool = True,
    align: str = "auto",
    rounding_factor: float | None = None,
) -> DiffResult:
    """Compare run A against run B (the reference) and name the first divergence.

    Args:
        a, b: run directories, dump roots holding exactly one run, or open readers.
        atol, rtol: tolerances for every pair; None takes each dtype's default.
        kernels: comma-separated globs on kernel or op names (``!pat`` excludes).
        ignore: globs (a comma-separated string or a list) on kernel, op or arg names of
            values known to be noise: listed as ``ignored``, never compared.
        keep_passing: keep passing pairs in ``records`` (else failures only).
        max_records: keep at most this many pairs in ``records`` (the first
            divergence's always); the rest are only counted. None keeps all.
        keep_all: also keep every pair, whatever ``keep_passing`` and ``max_records``
            say, in ``result.compared`` (what a plot draws); ``records`` is unchanged.
        use_checksums: equal checksums prove bitwise equality without reading files.
        progress: called with (bytes of A's manifest done, its size) after each launch.
        read_ahead: have the kernel read upcoming tensor files (a background thread).
        align: ``launch`` pairs launches by kernel (same kernels in both runs: two runs
            of one artifact, two wrappers of one graph); ``value`` pairs values by
            provenance wherever each run materialised them (kernels fused differently:
            other compile settings; :mod:`.value_align`); ``auto`` takes ``value`` when
            the runs' kernels differ, both wrote provenance and both recorded with the
            same kernel filter, else ``launch``. Against an eager reference (B recorded
            by ``aoti-debug run --reference``) values are always paired by provenance.
        rounding_factor: against an fp64 reference, a value is ``rounding`` while its
            error is at most this many times eager's own; None fits it to each value's
            model dtype (8, and 3 in bfloat16, float16 and float8: compare/verdict.py).

    Raises:
        DumpError: a path is not a usable dump (missing, several runs, newer format).
        ToleranceError: a tolerance is NaN, infinite or negative (the factor not > 0).
    """
    from .tolerances import check_tolerances  # before anything is read: NaN would pass every value

    check_tolerances(atol, rtol, rounding_factor)
    if align not in ALIGNMENTS:
        raise ValueError(f"align must be one of {', '.join(ALIGNMENTS)}, not {align!r}")
    if rounding_factor is not None and not 0 < rounding_factor < float("inf"):
        raise ValueError(f"rounding_factor must be positive, not {rounding_factor}")
    started = time.perf_counter()
    ra, rb = _as_reader(a), _as_reader(b)
    reference = reference_mode(rb.info)
    if reference_mode(ra.info) and not reference:
        ra.close()
        rb.close()
        raise DumpError(f"{ra.path} is an eager reference: give it second (aoti-debug diff COMPILED REFERENCE)")
    kfilter = KernelFilter.parse(kernels)
    patterns = ",".join(ignore) if isinstance(ignore, (list, tuple)) else (ignore or "")
    ignored = KernelFilter.parse(patterns) if patterns else None
    threads = _OneIntraOpThread()
    # Births are found in the pass that pairs the launches, where there is one.
    finders = tuple(BirthFinder(r.info.phases, provenance_source(r)) for r in (ra, rb))
    total = ra.manifest_bytes

    def compare(aligner) -> _Pass:
        done = _Pass(_Runner(ra, rb, atol, rtol, rounding_factor, threads), DivergenceFinder(),
                     _Kept(keep_passing, max_records, keep_all), CoverageCounter(ra))
        done.run(aligner, lambda p: _plan(p, ra, rb, use_checksums, ignored), read_ahead,
                 progress and (lambda pos: progress(pos, total)))
        return done

    try:
        with threads:
            if _by_value(rb, align):
                aligner, fed = ValueAligner(ra, rb, kfilter), False
                done = compare(aligner)
            else:
                # Runs in step are paired in one pass over each; others by their indexes,
                # which that pass built (it reads both to the end), and by value where
                # their launches differ (choose_aligner).
                exact = align == "auto" and usable(ra) and usable(rb) and _filters(ra) == _filters(rb)
                stream = StreamAligner(ra, rb, kfilter, (finders[0].add, finders[1].add), exact)
                aligner, fed = stream, True
                try:
                    done = compare(stream)
                except OutOfStep:
                    aligner = _choose(ra, rb, kfilter, align, stream.aligner())[0]
                    done = compare(aligner)
        if progress is not None:
            progress(total, total)
    finally:
        ra.close()
        rb.close()
    mode = "value" if isinstance(aligner, ValueAligner) else "launch"
    runner, finder, kept, looked, launches = done.runner, done.finder, done.kept, done.looked, done.launches
    _attach_provenance(ra, rb, kept.every if kept.every is not None else kept.rows, finder.first)
    if fed:
        births_a, births_b = (f.result() for f in finders)
    else:
        births_a, births_b = (find_births(_records(r, kfilter), r.info.phases, provenance_source(r)) for r in (ra, rb))
    notes = [f"run A: {n}" for n in ra.notes] + [f"run B: {n}" for n in rb.notes]
    problems = [f"run A: {p}" for p in ra.problems] + [f"run B: {p}" for p in rb.problems]
    notes.extend(_level_notes(ra, rb, runner.basis))
    if mode == "value":
        more_notes, more_problems = _value_notes(aligner, reference, rounding_factor, kept.counts, finder.first)
        notes.extend(more_notes)
        problems.extend(more_problems)
    notes.extend(_kernel_set_notes(kept.rows))
    notes.append(looked.coverage.line())
    if looked.coverage.blind:
        notes.append(f"{looked.coverage.blind_line()}: those modules made values, and not one of them was "
                     f"compared (not EQUAL: nothing says they are right)")
    return DiffResult(
        path_a=ra.path, path_b=rb.path, info_a=ra.info, info_b=rb.info, records=kept.rows, counts=dict(kept.counts),
        basis=dict(runner.basis), first_divergence=finder.first, problems=problems, notes=notes,
        atol=atol, rtol=rtol, kernels=str(kfilter), launches=launches, bytes_read=runner.bytes_read,
        seconds=time.perf_counter() - started, kept_passing=keep_passing,
        rounding_factor=_verdict.factor_for(None, rounding_factor) if reference == "fp64" else None,
        low_precision_factor=(_verdict.LOW_PRECISION_FACTOR if rounding_factor is None else None)
        if reference == "fp64" else None, dropped=kept.dropped, compared=kept.every,
        births_a=births_a, births_b=births_b,
        # (Births pair by kernel and value: an eager reference has neither.)
        birth_differences=birth_differences(births_a, births_b) if reference is None else [],
        coverage=looked.coverage,
    )


def _value_notes(aligner: ValueAligner, reference: str | None, rounding_factor: float | None, counts,
                 first: FirstDivergence | None) -> tuple[list[str], list[str]]:
    """What a diff paired by value says about its pairing (notes), and the problem of a
    pairing that paired nothing; names the first divergence's group of launches that
    fused differently."""
    notes: list[str] = []
    problems: list[str] = []
    if reference is not None:
        notes.append(f"run B is an eager reference ({reference}): each value of run A is paired with the value "
                     f"of the FX node it belongs to; {aligner.reference_only} values of the reference that run A "
                     f"fused away are not listed")
        if reference == "fp64":
            notes.append(f"against float64: a value is rounding while its RMS error is at most "
                         f"{_verdict.describe_factor(rounding_factor)}, else suspect")
    else:
        notes.append("the runs' kernels differ: values paired by provenance (module path, ATen op, FX node), "
                     "each compared where both runs materialised it; the rest is listed as unpaired")
        if not aligner.by_instance:
            notes.append("the runs name their FX nodes differently (torch.export against torch.compile): values "
                         "paired by module path, source line, ATen op and node kind, the n-th with the n-th; "
                         "kinds the runs made a different number of times are left unpaired")
    components = aligner.components()
    if components:
        notes.append(f"{len(components)} group(s) of launches fused differently in the two runs, each compared "
                     f"as one unit (A launches ~ B launches): "
                     + "; ".join(_group_text(c) for c in components[:5]) + (" ..." if len(components) > 5 else ""))
        for side_a, side_b in components:
            if first is not None and first.launch in side_a:
                first.group = _group_text((side_a, side_b))
    compared = sum(counts.get(s, 0) for s in ("pass", "fail", "mismatch", "error"))
    if not compared and counts.get("unpaired"):
        problems.append("no value of run A could be paired with one of run B by provenance: the runs do not "
                        "share their graphs (another model, or dumps without provenance); nothing was compared")
    return notes, problems


def _group_text(component) -> str:
    side_a, side_b = component
    return f"{','.join(map(str, side_a))} ~ {','.join(map(str, side_b))}"


def _records(reader: RunReader, kfilter: KernelFilter):
    return (r for r in reader.records() if in_diff(r, kfilter))


def birth_differences(a: Births, b: Births) -> list[str]:
    """One line per NaN/Inf birth that the two runs do not share, paired by
    (graph, op, call, value): where one run makes non-finite values and the other not."""
    lines = []
    for side, mine, other in (("A", a, b), ("B", b, a)):
        theirs = {x.key for x in other.nan + other.inf}
        for birth in sorted(mine.nan + mine.inf, key=lambda x: (x.launch, x.value)):
            if birth.key not in theirs:
                lines.append(f"only in run {side}: {birth}")
    return lines


def _level_notes(ra: RunReader, rb: RunReader, basis: collections.Counter) -> list[str]:
    notes = []
    for side, r in (("A", ra), ("B", rb)):
        if r.info.level == "stats":
            notes.append(f"run {side} is a stats-level dump (no tensor files): "
                         f"pairs are compared by their recorded stats and checksums")
    if basis.get("stats") and not notes:
        notes.append(f"{basis['stats']} pairs had no tensor file on one side: compared by recorded stats and checksums")
    return notes


def _kernel_set_notes(rows: list[RecordComparison]) -> list[str]:
    notes = []
    for status, side, other in (("only_a", "A", "B"), ("only_b", "B", "A")):
        only = [rc for rc in rows if rc.status == status]
        kernels = sorted({rc.record.kernel for rc in only})
        if kernels:
            shown = ", ".join(kernels[:6]) + (f" and {len(kernels) - 6} more" if len(kernels) > 6 else "")
            notes.append(f"{len(only)} record(s) of run {side} have no counterpart in run {other} (kernels: {shown})")
    return notes
