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
different meaning are never paired silently. Values whose keys are not unique within
a run are listed apart as ambiguous.

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
#: ``Pair.how`` of a value only one run materialised, and of one whose key repeats.
UNMATERIALISED = "unmaterialised"
AMBIGUOUS = "ambiguous"


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


def _keys(reader: RunReader, wanted) -> tuple[dict[int, tuple], Counter]:
    """Byte offset of each keyed record -> its key (with ``repeat``), and how often each
    key-with-repeat occurs (more than once: ambiguous)."""
    keys: dict[int, tuple] = {}
    repeats: Counter = Counter()
    seen: Counter = Counter()
    written: set = set()
    for start, _stop, r in reader.entries():
        if not wanted(r):
            continue
        key = value_key(reader, r, written)
        if r.phase == "after":
            written.add((r.graph, r.arg))
        if key is None:
            continue
        full = (*key, repeats[key])
        repeats[key] += 1
        keys[start] = full
        seen[full] += 1
    return keys, seen


def usable(reader: RunReader) -> bool:
    """Whether the run wrote provenance (``sites.jsonl``) to pair values by."""
    return bool(reader.sites)


class ValueAligner:
    """Streams :class:`PairedLaunch` es of A, each record paired by :func:`value_key`."""

    def __init__(self, a: RunReader, b: RunReader, kernels: KernelFilter | None = None):
        self.a = a
        self.b = b
        self.kernels = kernels or KernelFilter()
        wanted = lambda r: self.kernels.matches(r.kernel, r.op)  # noqa: E731
        self._wanted = wanted
        keys_b, seen_b = _keys(b, wanted)
        self._b: dict[tuple, int] = {k: off for off, k in keys_b.items() if seen_b[k] == 1}
        self._b_keys = keys_b
        self._ambiguous_b = {k for k, n in seen_b.items() if n > 1}
        self._used: set[tuple] = set()

    def launches(self) -> Iterator[PairedLaunch]:
        keys_a, seen_a = _keys(self.a, self._wanted)
        groups: dict[tuple, list[tuple[int, int, Record]]] = defaultdict(list)
        ends: dict[tuple, int] = {}
        for start, stop, r in self.a.entries():
            if self._wanted(r):
                groups[(r.launch, r.graph, r.op)].append((start, stop, r))
                ends[(r.launch, r.graph, r.op)] = stop
        for gkey in sorted(groups, key=lambda k: k[0]):
            entries = groups[gkey]
            pairs, launch_b = [], None
            for start, _stop, r in entries:
                key = keys_a.get(start)
                if key is None:
                    pairs.append(Pair(r, None, UNMATERIALISED))
                elif seen_a[key] > 1 or key in self._ambiguous_b:
                    pairs.append(Pair(r, None, AMBIGUOUS))
                elif key in self._b and key not in self._used:
                    self._used.add(key)
                    rb = self.b.record_at(self._b[key])
                    launch_b = rb.launch if launch_b is None else launch_b
                    pairs.append(Pair(r, rb, "provenance"))
                else:
                    pairs.append(Pair(r, None, UNMATERIALISED))
            first = entries[0][2]
            yield PairedLaunch(first.graph, first.kernel, first.op, first.kernel_call, first.launch, launch_b,
                               pairs, ends[gkey])

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
