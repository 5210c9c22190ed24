"""Pairing the records of two runs, launch by launch, without loading either manifest.

A launch is known in both runs by ``(graph, kernel stem, occurrence)``: the stem is
the canonical op name, so ``extern_kernels.addmm`` (Python wrapper) and
``aoti_torch_cpu_addmm_out`` (C++ wrapper) meet, and a generated kernel's name without
the position number a compile gave it (:func:`kernel_stem`). Two runs of one program
are read side by side, each line once (:class:`StreamAligner`); where their launches
part, both runs are indexed (byte offsets of their manifest lines per launch counter,
so that launches of concurrent threads may interleave) and their launches taken in
launch order (:class:`Aligner`).

Inside a launch, records pair by position: the n-th value of a given phase and role
in A with the n-th in B, when both runs recorded as many such values; what is left
pairs by ``(arg, phase)``. Position covers names that differ between wrappers
(``arg0_1`` in the Python wrapper, a constant's name in AOTInductor, buffers
numbered differently).
"""

from __future__ import annotations

import array
import dataclasses
import re
from typing import Callable, Iterator

from ..config import KernelFilter
from ..format.reader import RunReader
from ..format.schema import INPUTS_KERNEL, Record


def in_diff(r: Record, kernels: KernelFilter) -> bool:
    """Whether diff compares record ``r``: of a kernel the filter keeps, and not of the
    ``graph_inputs`` launch (its values are compared at each launch that takes them, so a
    run with it pairs launch by launch with a run without it)."""
    return r.kernel != INPUTS_KERNEL and kernels.matches(r.kernel, r.op)


@dataclasses.dataclass
class Pair:
    """One record of A and its counterpart in B; either side is None when unmatched."""

    a: Record | None
    b: Record | None
    how: str = "key"
    """``key`` (same arg and phase), ``position`` (same place in the launch),
    ``unpaired`` (an input of a launch both runs made that only one passed), or ``-``."""
    note: str = ""
    """Why a value was left unpaired, where the aligner knows more than its ``how``."""


@dataclasses.dataclass
class PairedLaunch:
    """One launch of run A (or of B alone) with its paired records, in A's record order."""

    graph: str
    kernel: str
    op: str
    kernel_call: int
    launch_a: int | None
    launch_b: int | None
    pairs: list[Pair]
    end_offset: int = 0
    """Byte offset in A's manifest after this launch (for progress)."""


_NUMBERED = re.compile(r"_\d+$")
#: The most (kernel, op) names whose :func:`in_diff` an aligner remembers.
_MEMO_KERNELS = 1 << 16


def kernel_stem(op: str) -> str:
    """A generated kernel's name without Inductor's position number:
    ``cpp_fused_add_native_layer_norm_3`` -> ``cpp_fused_add_native_layer_norm``.

    The number is the kernel's place in one compile's definition order, which differs
    between compiles of one graph (``torch.compile`` vs ``torch.export`` + AOTInductor
    number the same fused kernels ``_0``/``_1`` the other way round). Op names of extern
    kernels and custom ops (``aten.mm``, ``mylib.op``) carry a namespace and are kept.
    """
    return op if "." in op else _NUMBERED.sub("", op)


@dataclasses.dataclass(slots=True)
class _Group:
    """One launch of a run: where its manifest lines are, and their digests (what
    :meth:`RunReader.records_at` reads them again by, without checking them again)."""

    launch: int
    graph: str
    op: str
    offsets: array.array
    digests: array.array
    end: int

    def records(self, reader: RunReader) -> list[Record]:
        return reader.records_at(self.offsets, self.digests)


class _Wanted:
    """:func:`in_diff` with a filter, remembered per (kernel, op): asked for every line of
    both runs, which name a few hundred kernels."""

    def __init__(self, kernels: KernelFilter):
        self.kernels = kernels
        self._known: dict[tuple[str, str], bool] = {}

    def __call__(self, r: Record) -> bool:
        key = (r.kernel, r.op)
        wanted = self._known.get(key)
        if wanted is None:
            wanted = in_diff(r, self.kernels)
            if len(self._known) < _MEMO_KERNELS:
                self._known[key] = wanted
        return wanted


class _Scan:
    """One pass over a run's manifest that indexes its launches (:func:`_index`) and, while
    they come in step — each launch's lines together, launches in increasing order, as one
    thread writes them — hands over each launch with its records once it is complete.

    Launches that ran concurrently (a compiled model called from several threads)
    interleave their lines in the manifest: a launch is every line carrying its counter,
    wherever it stands; such a run is out of step, and is paired by its index.
    """

    def __init__(self, reader: RunReader, wanted: Callable[[Record], bool],
                 seen: Callable[[Record], None] | None = None):
        self._wanted = wanted
        self._seen = seen
        self._lines = reader.scan()
        self._groups: dict[tuple, _Group] = {}
        self._names: dict[str, str] = {}  # one string per graph and op name, not one per launch
        self.in_step = True
        """False once a line came out of step (:meth:`launches` then stops)."""

    def _add(self, start: int, stop: int, digest: int, r: Record) -> tuple[_Group, bool]:
        gid = (r.launch, r.graph, r.op)
        g = self._groups.get(gid)
        new = g is None
        if new:  # two kernels under one counter is damage: both stay visible
            names = self._names
            graph, op = names.setdefault(r.graph, r.graph), names.setdefault(r.op, r.op)
            g = self._groups[(r.launch, graph, op)] = _Group(r.launch, graph, op, array.array("q"),
                                                             array.array("q"), stop)
        g.offsets.append(start)
        g.digests.append(digest)
        g.end = stop
        return g, new

    def _next(self) -> Iterator[tuple[_Group, bool, Record]]:
        wanted, seen = self._wanted, self._seen
        for start, stop, digest, r in self._lines:
            if not wanted(r):
                continue
            if seen is not None:
                seen(r)
            g, new = self._add(start, stop, digest, r)
            yield g, new, r

    def launches(self) -> Iterator[tuple[_Group, list[Record]]]:
        """Each launch with its records, in manifest order, while the run is in step."""
        current: _Group | None = None
        records: list[Record] = []
        for g, new, r in self._next():
            if g is not current:
                if not new or (current is not None and g.launch <= current.launch):
                    self.in_step = False
                    return
                if current is not None:
                    yield current, records
                current, records = g, []
            records.append(r)
        if current is not None:
            yield current, records

    def finish(self) -> list[_Group]:
        """The run's launches in launch order, indexing the lines :meth:`launches` left."""
        for _ in self._next():
            pass
        return sorted(self._groups.values(), key=lambda g: g.launch)


def _index(reader: RunReader, wanted, seen: Callable[[Record], None] | None = None) -> list[_Group]:
    """A run's launches in launch order, each with the byte offsets of its lines.

    ``seen`` is called with each wanted record, in manifest order (what else a diff
    learns from a run, it learns in this one pass).
    """
    return _Scan(reader, wanted, seen).finish()


def _key(g: _Group, counts: dict[tuple, int]) -> tuple:
    """``(graph, kernel stem, n-th launch of that stem in the graph)`` of launch ``g``,
    ``counts`` holding the launches of each stem before it: what pairs a launch across
    runs, whatever number each compile gave the kernel."""
    stem = (g.graph, kernel_stem(g.op))
    n = counts.get(stem, 0)
    counts[stem] = n + 1
    return (*stem, n)


def _keyed(groups: list[_Group]) -> Iterator[tuple[tuple, _Group]]:
    """Each launch of ``groups`` (in launch order) with its :func:`_key`."""
    counts: dict[tuple, int] = {}
    for g in groups:
        yield _key(g, counts), g


Seen = tuple[Callable[[Record], None] | None, Callable[[Record], None] | None]


class Aligner:
    """Streams :class:`PairedLaunch` es of A paired with B; then :meth:`only_in_b` lists the rest.

    Launches pair by ``(graph, kernel stem, occurrence)`` (:func:`kernel_stem`): the
    n-th launch of a kernel in a graph of A with the n-th of that kernel in B. Both runs
    are indexed first (a pass over each manifest), then each launch's lines read again.
    """

    def __init__(self, a: RunReader, b: RunReader, kernels: KernelFilter | None = None, seen: Seen | None = None,
                 indexes: tuple[list[_Group], list[_Group]] | None = None):
        """
        Args:
            kernels: which launches are compared (:func:`in_diff`).
            seen: called with each compared record of A (first) and of B (second), in
                manifest order, while the runs are indexed: one pass over each manifest
                serves the alignment and whatever else looks at every record (births).
            indexes: both runs' launches, indexed already (:meth:`StreamAligner.aligner`).
        """
        self.a = a
        self.b = b
        self.kernels = kernels or KernelFilter()
        self._seen = seen or (None, None)
        self._wanted = _Wanted(self.kernels)
        self._b_index: dict[tuple, _Group] = dict(_keyed(indexes[1] if indexes is not None else
                                                         _index(b, self._wanted, self._seen[1])))
        self._b_used: set[tuple] = set()
        self._a_keyed: list[tuple[tuple, _Group]] | None = list(_keyed(indexes[0])) if indexes is not None else None

    @property
    def indexed(self) -> bool:
        """Whether both runs were indexed (so ``seen`` was given every record of both)."""
        return self._a_keyed is not None

    def _keyed_a(self) -> list[tuple[tuple, _Group]]:
        """A's launches with their keys (A's manifest is indexed once)."""
        if self._a_keyed is None:
            self._a_keyed = list(_keyed(_index(self.a, self._wanted, self._seen[0])))
        return self._a_keyed

    def same_launches(self) -> bool:
        """Whether both runs made the same launches (graph, kernel stem, occurrence)."""
        return {key for key, _g in self._keyed_a()} == set(self._b_index)

    def _take_b(self, key: tuple) -> tuple[int | None, list[Record]]:
        g = self._b_index.get(key)
        if g is None or key in self._b_used:
            return None, []
        self._b_used.add(key)
        return g.launch, g.records(self.b)

    def launches(self) -> Iterator[PairedLaunch]:
        """A's launches in launch order, each with its B counterpart."""
        for key, g in self._keyed_a():
            recs_a = g.records(self.a)
            first = recs_a[0]
            launch_b, recs_b = self._take_b(key)
            yield PairedLaunch(first.graph, first.kernel, first.op, first.kernel_call, first.launch, launch_b,
                         pair_records(recs_a, recs_b), g.end)

    def only_in_b(self) -> Iterator[PairedLaunch]:
        """B's launches that no launch of A took (call after :meth:`launches` is done)."""
        for key, g in self._b_index.items():
            if key in self._b_used:
                continue
            yield _only_b(g, g.records(self.b))


def _only_b(g: _Group, recs: list[Record]) -> PairedLaunch:
    first = recs[0]
    return PairedLaunch(first.graph, first.kernel, first.op, first.kernel_call, None, g.launch,
                        [Pair(None, r, "-") for r in recs])


class OutOfStep(Exception):
    """Two runs whose launches a :class:`StreamAligner` cannot pair side by side."""


class StreamAligner:
    """:class:`Aligner`'s pairs in one pass over both manifests, read side by side.

    For runs in step (:class:`_Scan`: each launch's lines together, in launch order) whose
    launches pair one with one in the same order — two runs of one program, or of two
    compiles of it that fused alike — the n-th launch of A is the n-th of B: each is
    compared as soon as both are read, and no line is read twice. Where the runs part
    (a launch of one run that the other makes elsewhere or not at all, lines of
    concurrent launches interleaved, and with ``exact`` any launch of B left over) the
    pairs said so far are void: :meth:`launches` or :meth:`only_in_b` raise
    :class:`OutOfStep`, and :meth:`aligner` gives the :class:`Aligner` of both runs,
    from the indexes this pass built (the pass goes on to the end of both manifests).
    """

    def __init__(self, a: RunReader, b: RunReader, kernels: KernelFilter | None = None, seen: Seen | None = None,
                 exact: bool = False):
        """
        Args:
            kernels, seen: as for :class:`Aligner` (``seen`` is given every record of a
                run once, whether the runs are in step or not).
            exact: launches of B left over after A's are out of step too (a caller that
                would pair such runs otherwise: by value).
        """
        self.a = a
        self.b = b
        self.kernels = kernels or KernelFilter()
        seen = seen or (None, None)
        wanted = _Wanted(self.kernels)
        self._scan_a = _Scan(a, wanted, seen[0])
        self._scan_b = _Scan(b, wanted, seen[1])
        self._b_launches = self._scan_b.launches()
        self._b_counts: dict[tuple, int] = {}
        self._exact = exact

    def launches(self) -> Iterator[PairedLaunch]:
        """A's launches in launch order, each with its B counterpart.

        Raises:
            OutOfStep: the runs are not in step (see the class).
        """
        counts: dict[tuple, int] = {}
        for g, recs_a in self._scan_a.launches():
            key = _key(g, counts)
            nxt = next(self._b_launches, None)
            if nxt is None or _key(nxt[0], self._b_counts) != key:
                raise OutOfStep(f"launch {g.launch} of run A")
            gb, recs_b = nxt
            first = recs_a[0]
            yield PairedLaunch(first.graph, first.kernel, first.op, first.kernel_call, first.launch, gb.launch,
                               pair_records(recs_a, recs_b), g.end)
        if not self._scan_a.in_step:
            raise OutOfStep("run A")

    def only_in_b(self) -> Iterator[PairedLaunch]:
        """B's launches after the last one A took (call after :meth:`launches` is done).

        Raises:
            OutOfStep: as :meth:`launches`.
        """
        for g, recs in self._b_launches:
            if self._exact:
                raise OutOfStep(f"launch {g.launch} of run B")
            yield _only_b(g, recs)
        if not self._scan_b.in_step:
            raise OutOfStep("run B")

    def aligner(self) -> Aligner:
        """The :class:`Aligner` of the two runs (after :class:`OutOfStep`), indexed by this pass."""
        return Aligner(self.a, self.b, self.kernels, indexes=(self._scan_a.finish(), self._scan_b.finish()))


def _slots(recs: list[Record]) -> dict[tuple, list[int]]:
    """Indices of ``recs`` per (phase, role), in the order the launch passed them."""
    order = sorted([(r.index, r.seq, i) for i, r in enumerate(recs)])  # i: ties stay in record order
    slots: dict[tuple, list[int]] = {}
    for _index_, _seq, i in order:
        r = recs[i]
        slots.setdefault((r.phase, r.role), []).append(i)
    return slots


def _same_kind(a: Record, b: Record) -> bool:
    return a.kind == b.kind and a.dtype == b.dtype and a.shape == b.shape


def _same_value(a: Record, b: Record) -> bool:
    return _same_kind(a, b) and a.checksum is not None and a.checksum == b.checksum


def pair_records(recs_a: list[Record], recs_b: list[Record]) -> list[Pair]:
    """Pair one launch's records.

    Per phase and role: by position where both runs recorded as many values, because
    buffer names are local to one generated wrapper (the Python and the C++ wrapper, or
    two compiles with other settings, number their buffers differently) while one
    kernel's arguments come in its signature's order. Where the counts differ (two
    compiles gave the kernel different arguments: an input passed in one, computed or
    folded in the other), values pair by identical content, then by name, then in order
    — only values of the same kind, dtype and shape, so values of different meaning are
    never paired. An input left over in a launch that both runs made is ``unpaired``:
    the other compile did not pass it.
    """
    match_a: list[int | None] = [None] * len(recs_a)
    used_b = [False] * len(recs_b)
    slots_b = _slots(recs_b)

    def take(i: int, j: int) -> None:
        match_a[i] = j
        used_b[j] = True

    for slot, idx_a in _slots(recs_a).items():
        idx_b = slots_b.get(slot, [])
        if len(idx_a) == len(idx_b):
            for i, j in zip(idx_a, idx_b):
                match_a[i] = j
                used_b[j] = True
            continue
        for rule in (_same_value, lambda a, b: a.arg == b.arg and _same_kind(a, b), _same_kind):
            for i in idx_a:
                if match_a[i] is None:
                    j = next((j for j in idx_b if not used_b[j] and rule(recs_a[i], recs_b[j])), None)
                    if j is not None:
                        take(i, j)
    both = bool(recs_a) and bool(recs_b)

    def alone(r: Record) -> str:
        return "unpaired" if both and r.phase == "before" else "-"

    pairs = []
    for r, j in zip(recs_a, match_a):
        if j is None:
            pairs.append(Pair(r, None, alone(r)))
        else:
            pairs.append(Pair(r, recs_b[j], "key" if recs_b[j].arg == r.arg else "position"))
    pairs.extend(Pair(None, r, alone(r)) for j, r in enumerate(recs_b) if not used_b[j])
    return pairs
