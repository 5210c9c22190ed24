"""Pairing the records of two runs, launch by launch, without loading either manifest.

A launch is known in both runs by ``(graph, op, kernel_call)``: ``op`` is the
canonical op name, so ``extern_kernels.addmm`` (Python wrapper) and
``aoti_torch_cpu_addmm_out`` (C++ wrapper) meet. Both runs are indexed once (byte
offsets of their manifest lines per launch counter, so that launches of concurrent
threads may interleave); A's launches are taken in order of first appearance and
each is paired with the next unused launch of B with that key.

Inside a launch, records pair by position: the n-th value of a given phase and role
in A with the n-th in B, when both runs recorded as many such values; what is left
pairs by ``(arg, phase)``. Position covers names that differ between wrappers
(``arg0_1`` in the Python wrapper, a constant's name in AOTInductor, buffers
numbered differently).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Iterator

from ..config import KernelFilter
from ..format.reader import RunReader
from ..format.schema import Record


@dataclasses.dataclass
class Pair:
    """One record of A and its counterpart in B; either side is None when unmatched."""

    a: Record | None
    b: Record | None
    how: str = "key"
    """``key`` (same arg and phase), ``position`` (same place in the launch), or ``-``."""


@dataclasses.dataclass
class Launch:
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


def launch_key(r: Record) -> tuple:
    return (r.graph, r.op, r.kernel_call)


class Aligner:
    """Streams :class:`Launch` es of A paired with B; then :meth:`only_in_b` lists the rest."""

    def __init__(self, a: RunReader, b: RunReader, kernels: KernelFilter | None = None):
        self.a = a
        self.b = b
        self.kernels = kernels or KernelFilter()
        # (graph, op, kernel_call) -> [(B launch counter, [line offsets])] in B's order.
        self._b_index: dict[tuple, list[tuple[int, list[int]]]] = defaultdict(list)
        self._b_used: set[tuple[tuple, int]] = set()
        self._index_b()

    def _wanted(self, r: Record) -> bool:
        return self.kernels.matches(r.kernel, r.op)

    def _index_b(self) -> None:
        where: dict[tuple[tuple, int], list[int]] = {}
        for start, _end, r in self.b.entries():
            if not self._wanted(r):
                continue
            key = launch_key(r)
            slot = where.get((key, r.launch))
            if slot is None:
                slot = where[(key, r.launch)] = []
                self._b_index[key].append((r.launch, slot))
            slot.append(start)

    def _take_b(self, key: tuple) -> tuple[int | None, list[Record]]:
        for launch, offsets in self._b_index.get(key, ()):
            if (key, launch) not in self._b_used:
                self._b_used.add((key, launch))
                return launch, [self.b.record_at(o) for o in offsets]
        return None, []

    def _a_launches(self) -> Iterator[tuple[list[Record], int]]:
        """A's records grouped by launch counter, launches in order of first appearance.

        Launches that ran concurrently (a compiled model called from several threads)
        interleave their lines in the manifest: a launch is every line carrying its
        counter, wherever it stands. A is indexed by byte offsets first, as B is.
        """
        groups: dict[int, list[int]] = {}
        ends: dict[int, int] = {}
        for start, stop, r in self.a.entries():
            if not self._wanted(r):
                continue
            groups.setdefault(r.launch, []).append(start)
            ends[r.launch] = stop
        for launch, offsets in groups.items():
            recs = [self.a.record_at(o) for o in offsets]
            first = launch_key(recs[0])
            same = [r for r in recs if launch_key(r) == first]
            yield same, ends[launch]
            if len(same) < len(recs):  # damaged: one counter on two kernels; keep both visible
                yield [r for r in recs if launch_key(r) != first], ends[launch]

    def launches(self) -> Iterator[Launch]:
        """A's launches in manifest (= launch) order, each with its B counterpart."""
        for recs_a, end in self._a_launches():
            first = recs_a[0]
            launch_b, recs_b = self._take_b(launch_key(first))
            yield Launch(first.graph, first.kernel, first.op, first.kernel_call, first.launch, launch_b,
                         pair_records(recs_a, recs_b), end)

    def only_in_b(self) -> Iterator[Launch]:
        """B's launches that no launch of A took (call after :meth:`launches` is done)."""
        for key, slots in self._b_index.items():
            for launch, offsets in slots:
                if (key, launch) in self._b_used:
                    continue
                recs = [self.b.record_at(o) for o in offsets]
                first = recs[0]
                yield Launch(first.graph, first.kernel, first.op, first.kernel_call, None, launch,
                             [Pair(None, r, "-") for r in recs])


def _slot(r: Record) -> tuple:
    return (r.phase, r.role)


def _slots(recs: list[Record]) -> dict[tuple, list[int]]:
    """Indices of ``recs`` per (phase, role), in the order the launch passed them."""
    slots: dict[tuple, list[int]] = defaultdict(list)
    for i, r in sorted(enumerate(recs), key=lambda t: (t[1].index, t[1].seq)):
        slots[_slot(r)].append(i)
    return slots


def pair_records(recs_a: list[Record], recs_b: list[Record]) -> list[Pair]:
    """Pair one launch's records: by position where both runs recorded as many values of
    a phase and role, else by (arg, phase).

    Position comes first because buffer names are local to one generated wrapper: the
    Python and the C++ wrapper (or two compiles with different settings) number their
    buffers differently, so ``buf7`` in one may be another tensor than ``buf7`` in the
    other, while one kernel's arguments always come in its signature's order.
    """
    match_a: list[int | None] = [None] * len(recs_a)
    used_b = [False] * len(recs_b)
    slots_b = _slots(recs_b)
    for slot, idx_a in _slots(recs_a).items():
        idx_b = slots_b.get(slot, [])
        if len(idx_a) == len(idx_b):
            for i, j in zip(idx_a, idx_b):
                match_a[i] = j
                used_b[j] = True
    if not all(used_b) or any(j is None for j in match_a):
        by_name: dict[tuple, list[int]] = defaultdict(list)
        for j, r in enumerate(recs_b):
            if not used_b[j]:
                by_name[(r.arg, r.phase)].append(j)
        for i, r in enumerate(recs_a):
            js = by_name.get((r.arg, r.phase)) if match_a[i] is None else None
            if js:
                j = js.pop(0)
                match_a[i] = j
                used_b[j] = True
    pairs = []
    for r, j in zip(recs_a, match_a):
        if j is None:
            pairs.append(Pair(r, None, "-"))
        else:
            pairs.append(Pair(r, recs_b[j], "key" if recs_b[j].arg == r.arg else "position"))
    pairs.extend(Pair(None, r, "-") for j, r in enumerate(recs_b) if not used_b[j])
    return pairs
