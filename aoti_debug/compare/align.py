"""Pairing the records of two runs, launch by launch, without loading either manifest.

A launch is known in both runs by ``(graph, kernel stem, occurrence)``: the stem is
the canonical op name, so ``extern_kernels.addmm`` (Python wrapper) and
``aoti_torch_cpu_addmm_out`` (C++ wrapper) meet, and a generated kernel's name without
the position number a compile gave it (:func:`kernel_stem`). Both runs are indexed
once (byte offsets of their manifest lines per launch counter, so that launches of
concurrent threads may interleave) and their launches taken in launch order.

Inside a launch, records pair by position: the n-th value of a given phase and role
in A with the n-th in B, when both runs recorded as many such values; what is left
pairs by ``(arg, phase)``. Position covers names that differ between wrappers
(``arg0_1`` in the Python wrapper, a constant's name in AOTInductor, buffers
numbered differently).
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from typing import Iterator

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


def kernel_stem(op: str) -> str:
    """A generated kernel's name without Inductor's position number:
    ``cpp_fused_add_native_layer_norm_3`` -> ``cpp_fused_add_native_layer_norm``.

    The number is the kernel's place in one compile's definition order, which differs
    between compiles of one graph (``torch.compile`` vs ``torch.export`` + AOTInductor
    number the same fused kernels ``_0``/``_1`` the other way round). Op names of extern
    kernels and custom ops (``aten.mm``, ``mylib.op``) carry a namespace and are kept.
    """
    return op if "." in op else _NUMBERED.sub("", op)


@dataclasses.dataclass
class _Group:
    """One launch of a run: where its manifest lines are."""

    launch: int
    graph: str
    op: str
    offsets: list[int]
    end: int


def _index(reader: RunReader, wanted) -> list[_Group]:
    """A run's launches in launch order, each with the byte offsets of its lines.

    Launches that ran concurrently (a compiled model called from several threads)
    interleave their lines in the manifest: a launch is every line carrying its
    counter, wherever it stands.
    """
    groups: dict[tuple, _Group] = {}
    for start, stop, r in reader.entries():
        if not wanted(r):
            continue
        g = groups.get((r.launch, r.graph, r.op))
        if g is None:  # two kernels under one counter is damage: both stay visible
            g = groups[(r.launch, r.graph, r.op)] = _Group(r.launch, r.graph, r.op, [], stop)
        g.offsets.append(start)
        g.end = stop
    return sorted(groups.values(), key=lambda g: g.launch)


def _keyed(groups: list[_Group]) -> Iterator[tuple[tuple, _Group]]:
    """``(graph, kernel stem, n-th launch of that stem in the graph)`` for each launch:
    what pairs a launch across runs, whatever number each compile gave the kernel."""
    seen: dict[tuple, int] = defaultdict(int)
    for g in groups:
        stem = (g.graph, kernel_stem(g.op))
        yield (*stem, seen[stem]), g
        seen[stem] += 1


class Aligner:
    """Streams :class:`PairedLaunch` es of A paired with B; then :meth:`only_in_b` lists the rest.

    Launches pair by ``(graph, kernel stem, occurrence)`` (:func:`kernel_stem`): the
    n-th launch of a kernel in a graph of A with the n-th of that kernel in B.
    """

    def __init__(self, a: RunReader, b: RunReader, kernels: KernelFilter | None = None):
        self.a = a
        self.b = b
        self.kernels = kernels or KernelFilter()
        self._b_index: dict[tuple, _Group] = dict(_keyed(_index(b, self._wanted)))
        self._b_used: set[tuple] = set()
        self._a_keyed: list[tuple[tuple, _Group]] | None = None

    def _keyed_a(self) -> list[tuple[tuple, _Group]]:
        """A's launches with their keys (A's manifest is indexed once)."""
        if self._a_keyed is None:
            self._a_keyed = list(_keyed(_index(self.a, self._wanted)))
        return self._a_keyed

    def same_launches(self) -> bool:
        """Whether both runs made the same launches (graph, kernel stem, occurrence)."""
        return {key for key, _g in self._keyed_a()} == set(self._b_index)

    def _wanted(self, r: Record) -> bool:
        return in_diff(r, self.kernels)

    def _take_b(self, key: tuple) -> tuple[int | None, list[Record]]:
        g = self._b_index.get(key)
        if g is None or key in self._b_used:
            return None, []
        self._b_used.add(key)
        return g.launch, [self.b.record_at(o) for o in g.offsets]

    def launches(self) -> Iterator[PairedLaunch]:
        """A's launches in launch order, each with its B counterpart."""
        for key, g in self._keyed_a():
            recs_a = [self.a.record_at(o) for o in g.offsets]
            first = recs_a[0]
            launch_b, recs_b = self._take_b(key)
            yield PairedLaunch(first.graph, first.kernel, first.op, first.kernel_call, first.launch, launch_b,
                         pair_records(recs_a, recs_b), g.end)

    def only_in_b(self) -> Iterator[PairedLaunch]:
        """B's launches that no launch of A took (call after :meth:`launches` is done)."""
        for key, g in self._b_index.items():
            if key in self._b_used:
                continue
            recs = [self.b.record_at(o) for o in g.offsets]
            first = recs[0]
            yield PairedLaunch(first.graph, first.kernel, first.op, first.kernel_call, None, g.launch,
                         [Pair(None, r, "-") for r in recs])


def _slot(r: Record) -> tuple:
    return (r.phase, r.role)


def _slots(recs: list[Record]) -> dict[tuple, list[int]]:
    """Indices of ``recs`` per (phase, role), in the order the launch passed them."""
    slots: dict[tuple, list[int]] = defaultdict(list)
    for i, r in sorted(enumerate(recs), key=lambda t: (t[1].index, t[1].seq)):
        slots[_slot(r)].append(i)
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
                take(i, j)
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
