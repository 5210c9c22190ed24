"""Pairing two runs value by value, by provenance, where their kernels fused differently.

Two compiles of one model with other settings (``max-autotune``, a fusion threshold,
the Python wrapper against ``cpp_wrapper``) run different kernels: the launch-level
aligner (:mod:`.align`) would pair a LayerNorm kernel of one with an attention kernel
of the other. Here a value is known by what it is — the FX node it materialises
(``sites.jsonl``, :mod:`aoti_debug.format.provenance`):

    (graph, module path, original ATen op, Dynamo instance, node stem, dtype, shape, repeat)

``instance`` is the Dynamo graph node the value was decomposed from (shared by the
post-grad nodes of one ATen call), the node stem its post-grad op (``add_13`` ->
``add``), ``repeat`` counts earlier values with the same key (graph calls, loops).
A graph input or weight a launch reads is keyed by the fused node that reads it.
Values only one run materialised (fused away in the other) are listed ``unpaired``,
never compared; a key never pairs values of another dtype or shape, so values of
different meaning are never paired silently. With ``repeat`` every key is unique in its
run: the n-th value with a key in A meets the n-th in B.

Each launch of A is yielded with its records paired wherever their counterparts sit
in B, so the rest of the diff (plans, metrics, first divergence) is unchanged.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Iterator

from ..config import KernelFilter
from ..format.reader import RunReader
from ..format.schema import Record
from .align import Pair, PairedLaunch

_NUMBERED = re.compile(r"_\d+$")
#: ``Pair.how`` of a value only one run materialised.
UNMATERIALISED = "unmaterialised"


def value_key(reader: RunReader, r: Record, written: set) -> tuple | None:
    """What the value of record ``r`` is, by provenance; None when its run did not say.

    ``written``: ``(graph, arg)`` of the values launches of this run wrote so far (an
    input that none wrote is a graph input or weight)."""
    prov = reader.provenance(r)
    if prov is None:
        return None
    if r.phase == "after":
        origin, kind = prov.output(r.arg), "value"
    elif (r.graph, r.arg) not in written:
        origin, kind = prov.input(r.arg), "input"
    else:
        return None  # an intermediate read again: compared where it was made
    if origin is None or not origin.module and not origin.instance:
        return None
    return (kind, r.graph, origin.module, origin.aten, origin.instance, _NUMBERED.sub("", origin.node),
            r.dtype, tuple(r.shape or ()))


class _Scan:
    """One pass over a run's manifest: each keyed record's key (with ``repeat``, so
    unique in the run) by byte offset, and the records grouped by launch."""

    def __init__(self, reader: RunReader, wanted):
        self.keys: dict[int, tuple] = {}
        self.launches: dict[tuple, list[tuple[int, int, Record]]] = defaultdict(list)
        repeats: Counter = Counter()
        written: set = set()
        for start, stop, r in reader.entries():
            if not wanted(r):
                continue
            self.launches[(r.launch, r.graph, r.op)].append((start, stop, r))
            key = value_key(reader, r, written)
            if r.phase == "after":
                written.add((r.graph, r.arg))
            if key is not None:
                self.keys[start] = (*key, repeats[key])
                repeats[key] += 1


def usable(reader: RunReader) -> bool:
    """Whether the run wrote provenance (``sites.jsonl``) to pair values by."""
    return bool(reader.sites)


class ValueAligner:
    """Streams :class:`PairedLaunch` es of A, each record paired by :func:`value_key`."""

    def __init__(self, a: RunReader, b: RunReader, kernels: KernelFilter | None = None):
        self.a = a
        self.b = b
        self.kernels = kernels or KernelFilter()
        self._b: dict[tuple, int] = {k: off for off, k in _Scan(b, self._wanted).keys.items()}
        self._used: set[tuple] = set()

    def _wanted(self, r: Record) -> bool:
        return self.kernels.matches(r.kernel, r.op)

    def launches(self) -> Iterator[PairedLaunch]:
        scan = _Scan(self.a, self._wanted)
        for gkey in sorted(scan.launches, key=lambda k: k[0]):
            entries = scan.launches[gkey]
            pairs, launch_b = [], None
            for start, _stop, r in entries:
                key = scan.keys.get(start)
                off = self._b.get(key) if key is not None else None
                if off is None:
                    pairs.append(Pair(r, None, UNMATERIALISED))
                    continue
                self._used.add(key)
                rb = self.b.record_at(off)
                launch_b = rb.launch if launch_b is None else launch_b
                pairs.append(Pair(r, rb, "provenance"))
            first = entries[0][2]
            yield PairedLaunch(first.graph, first.kernel, first.op, first.kernel_call, first.launch, launch_b,
                               pairs, entries[-1][1])

    def only_in_b(self) -> Iterator[PairedLaunch]:
        """B's keyed values that no value of A took, per B launch (listed, not compared)."""
        left: dict[int, list[Record]] = defaultdict(list)
        for key, off in self._b.items():
            if key not in self._used:
                r = self.b.record_at(off)
                left[r.launch].append(r)
        for launch in sorted(left):
            recs = left[launch]
            first = recs[0]
            yield PairedLaunch(first.graph, first.kernel, first.op, first.kernel_call, None, launch,
                               [Pair(None, r, UNMATERIALISED) for r in recs])
