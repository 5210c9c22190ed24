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

**Against an eager reference** (B recorded by ``aoti-debug run --reference``,
:mod:`aoti_debug.eager`), B's values are those of the Dynamo graph's own nodes, and a
compiled value is known by the node it belongs to (``instance``):

    (kind, graph, instance, dtype in the model, shape, repeat)

where ``graph`` is the graph's Dynamo compile id and class (``f0/1``: forward or
inference, ``b0/1``: backward), so that every recompiled version of a frame meets the
reference's run of that version, and a compiled graph the reference has no graph for is
listed with the reason; where a run has no compile ids (or none in common with the
other), its place among the run's graphs of its class. In a backward graph, ``instance``
is the value's node in the backward graph (AOTAutograd traced it alike in both runs;
a forward node recomputed there keeps its Dynamo node). One
node decomposes into several post-grad nodes, and a kernel may materialise more than
one of them with the node's shape (an attention kernel's copy of its input, then its
output): the value of the node is the last one made, by the launch site that makes it
latest; the earlier ones are unpaired. Two values of one site with one key (a
LayerNorm's weight and bias, both read by its node) cannot be told apart and are left
unpaired on both sides, but in a training graph, where a LayerNorm's kernel also writes
its normalised input for the backward, the value a later launch reads is the node's.
Values of the reference that the compiled run fused away are counted, not listed.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Iterator

from ..config import KernelFilter
from ..format.reader import RunReader
from ..format.schema import Record, RunInfo
from .align import Pair, PairedLaunch, in_diff

_NUMBERED = re.compile(r"_\d+$")
#: ``Pair.how`` of a value only one run materialised.
UNMATERIALISED = "unmaterialised"


def reference_mode(info: RunInfo) -> str | None:
    """``eager`` or ``fp64`` when the run with header ``info`` is an eager reference
    (``aoti_debug.eager``), else None."""
    modes = {g.get("reference") for g in info.graphs.values()
             if isinstance(g, dict) and g.get("wrapper") == "eager"}
    modes.discard(None)
    return "fp64" if "fp64" in modes else ("eager" if modes else None)


def _base_graphs(reader: RunReader) -> list[str]:
    """The run's graph labels without subgraphs, in the order the run made them."""

    def number(label: str) -> int:
        digits = re.sub(r"\D", "", label.split("/", 1)[0])
        return int(digits) if digits else 1 << 30

    return sorted((g for g in reader.info.graphs if "/" not in g), key=lambda g: (number(g), g))


def _graph_info(reader: RunReader, label: str) -> dict:
    info = reader.info.graphs.get(label)
    return info if isinstance(info, dict) else {}


def _compile_id(reader: RunReader, label: str) -> str:
    cid = _graph_info(reader, label).get("compile_id")
    return cid if isinstance(cid, str) else ""


def by_compile_id(a: RunReader, b: RunReader) -> bool:
    """Whether graphs pair by Dynamo compile id: every graph of both runs has one, and
    the runs share one at least (else by their places among forward and among backward
    graphs: a run whose ids are all another process's)."""
    ids = []
    for reader in (a, b):
        found = [_compile_id(reader, g) for g in _base_graphs(reader)]
        if not found or not all(found):
            return False
        ids.append(set(found))
    return bool(ids[0] & ids[1])


def _graph_ids(reader: RunReader, by_compile: bool = False) -> dict[str, str]:
    """Graph label -> what it is among the run's graphs (a subgraph keeps its suffix):
    forward and inference graphs ``f``, backward graphs ``b``, each numbered by their
    place among graphs of their class (``f0``, ``b0``, ``f1``: a forward and its backward
    pair by position) or, ``by_compile``, named by their Dynamo compile id (``f0/1``,
    ``b0/1``: every recompiled version of a frame meets its own)."""
    ids: dict[str, str] = {}
    seen: Counter = Counter()
    for label in _base_graphs(reader):
        cls = "b" if _graph_info(reader, label).get("kind") == "backward" else "f"
        base = f"{cls}{_compile_id(reader, label)}" if by_compile else cls
        n = seen[base]
        seen[base] += 1
        ids[label] = (base if n == 0 else f"{base}#{n}") if by_compile else f"{cls}{n}"
    for label in reader.info.graphs:
        base, sep, sub = label.partition("/")
        if sep and base in ids:
            ids[label] = f"{ids[base]}/{sub}"
    return ids


def _describe_graph(reader: RunReader, label: str) -> str:
    info = _graph_info(reader, label)
    kind, cid = info.get("kind") or "graph", _compile_id(reader, label)
    return f"{kind} graph {label}" + (f" of compile {cid}" if cid else "")


def reference_key(reader: RunReader, r: Record, written: set, graph_ids: dict[str, str]) -> tuple | None:
    """What the value of record ``r`` is in the terms of an eager reference: the Dynamo
    node it belongs to (in a backward graph, its node there); None when its run did not
    say.

    ``graph_ids``: :func:`_graph_ids` of the run (a graph not in it is not keyed)."""
    gid = graph_ids.get(r.graph)
    prov = reader.provenance(r)
    if gid is None or prov is None or r.kind != "tensor":
        return None
    base = r.arg.split("[", 1)[0]  # an element of a returned tuple: the tuple's node
    if r.phase == "after":
        origin, kind = prov.output(r.arg) or prov.output(base), "value"
    elif (r.graph, r.arg) not in written and _row_major(r) and not _saved_activation(gid, base):
        # (A weight read through a transposing view holds other values than the weight
        # itself, in a square shape even the same shape: only plain reads are keyed.)
        origin, kind = prov.input(r.arg) or prov.input(base), "input"
    else:
        return None
    # A backward graph's own nodes come from no Dynamo node: they are known by their
    # node in the backward graph, named alike in both runs (AOTAutograd traced both
    # from one Dynamo graph); a forward node recomputed there by its Dynamo node.
    if origin is None or origin.inner:
        return None
    instance = origin.instance or (origin.node if gid.startswith("b") else "")
    if not instance:
        return None
    # A value by numel, not shape: a node's value may be materialised before its last
    # reshape (a linear's mm output, viewed to the batch shape by the same node). An
    # input by shape: a launch may read a weight through a transposing view.
    size = r.numel if kind == "value" else tuple(r.shape or ())
    return (kind, gid, instance, r.model_dtype or r.dtype, size)


#: The inputs of a backward graph that are no forward value: parameters and graph inputs
#: (AOTAutograd's ``primals_N``) and the incoming gradients (``tangents_N``).
_BACKWARD_OWN_INPUTS = ("primals_", "tangents_")


def _saved_activation(gid: str, arg: str) -> bool:
    """Whether ``arg``, read by a launch of graph ``gid``, is a forward value a backward
    graph was handed (``add_19``, ``rsqrt_2``): compared where the forward made it, by
    the verdict against float64; read again here, it is no value of its own (in bfloat16
    a tolerance would call the compiled forward's rounding a difference)."""
    return gid.startswith("b") and not arg.startswith(_BACKWARD_OWN_INPUTS)


def _row_major(r: Record) -> bool:
    """Whether the tensor of ``r`` is laid out as its shape says, row by row."""
    expected, step = [], 1
    for size in reversed(r.shape or []):
        expected.append(step)
        step *= max(size, 1)
    expected.reverse()
    return all(s == e for s, e, n in zip(r.stride or [], expected, r.shape or []) if n > 1)


def value_key(reader: RunReader, r: Record, written: set, by_instance: bool = True) -> tuple | None:
    """What the value of record ``r`` is, by provenance; None when its run did not say.

    ``written``: ``(graph, arg)`` of the values launches of this run wrote so far (an
    input that none wrote is a graph input or weight). ``by_instance``: key by the
    Dynamo node too (False: the runs name their nodes differently)."""
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
    # Without the Dynamo node, the user's source line keeps the values of one module
    # apart (a LayerNorm's add and the residual add around it).
    return (kind, r.graph, origin.module, origin.aten, origin.instance if by_instance else "@" + origin.source,
            _NUMBERED.sub("", origin.node), r.dtype, tuple(r.shape or ()))


class _Scan:
    """One pass over a run's manifest: each keyed record's key (with ``repeat``, so
    unique in the run) by byte offset, and the records grouped by launch.

    ``reference``: key by :func:`reference_key`, and keep only the last producer of
    each key (``why`` says why the others are not keyed)."""

    def __init__(self, reader: RunReader, wanted, reference: bool = False, by_instance: bool = True,
                 graph_ids: dict[str, str] | None = None, unmatched: dict[str, str] | None = None):
        self.keys: dict[int, tuple] = {}
        self.why: dict[int, str] = {}
        self.launches: dict[tuple, list[tuple[int, int, Record]]] = defaultdict(list)
        repeats: Counter = Counter()
        written: set = set()
        graph_ids = (_graph_ids(reader) if graph_ids is None else graph_ids) if reference else {}
        unmatched = unmatched or {}
        found: list[tuple[int, tuple, tuple]] = []
        first_launch: dict[tuple, int] = {}
        made_by: dict[tuple, tuple] = {}
        read_later: set[tuple] = set()
        for start, stop, r in reader.entries():
            if not wanted(r):
                continue
            self.launches[(r.launch, r.graph, r.op)].append((start, stop, r))
            if reference:
                key = reference_key(reader, r, written, graph_ids)
                if r.phase == "before" and (r.graph, r.arg) in made_by:
                    read_later.add(made_by[(r.graph, r.arg)])
            else:
                key = value_key(reader, r, written, by_instance)
            if r.phase == "after":
                written.add((r.graph, r.arg))
                if reference:
                    made_by[(r.graph, r.arg)] = (r.graph, r.site, r.phase, r.index)
            if key is not None and r.graph in unmatched:
                self.why[start] = unmatched[r.graph]
                continue
            if key is None:
                if reference:
                    self._explain(reader, r, start, graph_ids.get(r.graph, ""))
                continue
            if not reference:
                self.keys[start] = (*key, repeats[key])
                repeats[key] += 1
                continue
            producer = (r.graph, r.site, r.phase, r.index)
            first_launch.setdefault(producer, r.launch)
            found.append((start, key, producer))
        if reference:
            training = {g for g in reader.info.graphs if _graph_info(reader, g).get("kind") in ("forward", "backward")}
            self._keep_last(found, first_launch, repeats, read_later, training)

    def _explain(self, reader: RunReader, r: Record, start: int, gid: str = "") -> None:
        if r.phase == "before" and _saved_activation(gid, r.arg.split("[", 1)[0]):
            self.why[start] = ("a forward value the backward graph was handed: compared where the forward "
                               "graph made it")
            return
        prov = reader.provenance(r) if r.phase == "after" else None
        origin = prov.output(r.arg) or prov.output(r.arg.split("[", 1)[0]) if prov is not None else None
        if origin is not None and origin.inner:
            self.why[start] = (f"made on the way to node {origin.instance}'s value, not that value (a step "
                               f"inside its computation): the reference has no such value")

    def _keep_last(self, found, first_launch: dict, repeats: Counter, read_later: set = frozenset(),
                   training: set = frozenset()) -> None:
        """Keep each key's last producer. In a training graph one launch may make two
        values of one node with its shape (a LayerNorm's output, and its normalised input
        saved for the backward): the one a later launch of the graph reads is the node's
        value, the other only leaves the graph."""
        producers: dict[tuple, set] = defaultdict(set)
        for _start, key, producer in found:
            producers[key].add(producer)
        chosen: dict[tuple, tuple | None] = {}
        saved: set[tuple] = set()
        for key, made in producers.items():
            last = max(made, key=lambda p: (first_launch[p], p[3]))
            same_site = [p for p in made if p[:2] == last[:2]]
            pick = None if len(same_site) > 1 else last
            if pick is None and key[0] == "value" and last[0] in training:
                used = [p for p in same_site if p in read_later]
                if len(used) == 1:
                    pick = used[0]
                    saved.update(p for p in same_site if p != pick)
            chosen[key] = pick
        for start, key, producer in found:
            pick = chosen[key]
            if pick is None:
                self.why[start] = (f"{key[0]} of node {key[2]}: the launch has more than one value of this "
                                   f"dtype and shape for that node, which cannot be told apart")
            elif producer in saved:
                self.why[start] = (f"made beside the value of node {key[2]} that is compared, and read by no "
                                   f"later launch of the graph (kept for the backward): a step inside the node")
            elif producer != pick and key[0] == "input":
                self.why[start] = f"read again by the launch that is compared for node {key[2]}"
            elif producer != pick:
                self.why[start] = f"made before the value of node {key[2]} that is compared (a step inside it)"
            else:
                self.keys[start] = (*key, repeats[key])
                repeats[key] += 1


def _instances(scan: "_Scan") -> set[str]:
    """The Dynamo node names a scan's keys hold (index 4 of :func:`value_key`)."""
    return {k[4] for k in scan.keys.values() if len(k) > 5 and k[4] and not k[4].startswith("@")}


def _pair_across_sources(a: "_Scan", b: "_Scan") -> None:
    """Values that the source line alone keeps apart: ``torch.export`` names the innermost
    frame of a module's own code (``normalization.py:228`` for a LayerNorm), Dynamo the
    line that called it (``modeling_gpt2.py:619``). Where a value's key without repeat is
    in one run only, it is keyed again without its source line, and such values pair, the
    n-th with the n-th, where both runs made equally many of them (else
    :func:`_drop_uneven` leaves them unpaired)."""
    seen_a = {k[:-1] for k in a.keys.values()}
    seen_b = {k[:-1] for k in b.keys.values()}
    left_a = [(start, k) for start, k in a.keys.items() if k[:-1] not in seen_b]
    left_b = [(start, k) for start, k in b.keys.items() if k[:-1] not in seen_a]

    def plain(k: tuple) -> tuple:
        return (*k[:4], "@*", *k[5:-1])

    count_a = Counter(plain(k) for _s, k in left_a)
    count_b = Counter(plain(k) for _s, k in left_b)
    for scan, left in ((a, left_a), (b, left_b)):
        repeats: Counter = Counter()
        for start, k in left:
            key = plain(k)
            if count_a[key] == count_b[key]:
                scan.keys[start] = (*key, repeats[key])
                repeats[key] += 1


def _drop_uneven(a: "_Scan", b: "_Scan") -> None:
    """Keys without the Dynamo node may repeat inside one run (one line of code, several
    values of one kind and shape): where the two runs made a key a different number of
    times, the n-th of one need not be the n-th of the other, and the key pairs nothing."""
    count_a = Counter(k[:-1] for k in a.keys.values())
    count_b = Counter(k[:-1] for k in b.keys.values())
    for scan in (a, b):
        for start, key in list(scan.keys.items()):
            if count_a[key[:-1]] != count_b[key[:-1]]:
                del scan.keys[start]
                scan.why[start] = (f"the two runs made {count_a[key[:-1]]} and {count_b[key[:-1]]} values of this "
                                   f"kind at {key[2] or 'this module'} ({key[4][1:] or 'no source line'}): which "
                                   f"is which cannot be told")


def usable(reader: RunReader) -> bool:
    """Whether the run wrote provenance (``sites.jsonl``) to pair values by."""
    return bool(reader.sites)


class ValueAligner:
    """Streams :class:`PairedLaunch` es of A, each record paired by :func:`value_key`."""

    def __init__(self, a: RunReader, b: RunReader, kernels: KernelFilter | None = None):
        self.a = a
        self.b = b
        self.kernels = kernels or KernelFilter()
        self.reference = reference_mode(b.info)
        """B's reference mode (``eager``/``fp64``) when B is an eager reference, else None."""
        ids_a = ids_b = None
        unmatched: dict[str, str] = {}
        self.by_compile_id = False
        """Against a reference: graphs pair by Dynamo compile id (else by their places
        among forward and among backward graphs)."""
        if self.reference:
            self.by_compile_id = by_compile_id(a, b)
            ids_a, ids_b = _graph_ids(a, self.by_compile_id), _graph_ids(b, self.by_compile_id)
            unmatched = self._unmatched(ids_a, ids_b)
        b_scan = _Scan(b, self._wanted if not self.reference else lambda r: True, bool(self.reference),
                       graph_ids=ids_b)
        a_scan = _Scan(a, self._wanted, bool(self.reference), graph_ids=ids_a, unmatched=unmatched)
        self.by_instance = True
        """False when the runs share no Dynamo node name (``torch.export`` against
        ``torch.compile``): values are then keyed without it."""
        if not self.reference and not _instances(a_scan) & _instances(b_scan) and _instances(a_scan):
            self.by_instance = False
            b_scan, a_scan = _Scan(b, self._wanted, by_instance=False), _Scan(a, self._wanted, by_instance=False)
            _pair_across_sources(a_scan, b_scan)
            _drop_uneven(a_scan, b_scan)
        self._a_scan = a_scan
        self._b: dict[tuple, int] = {k: off for off, k in b_scan.keys.items()}
        self._used: set[tuple] = set()
        self.reference_only = 0
        """Values of the reference that no value of A took (fused away in A); counted."""
        self._edges: list[tuple[int, int]] = []

    def _wanted(self, r: Record) -> bool:
        return in_diff(r, self.kernels)

    def _unmatched(self, ids_a: dict[str, str], ids_b: dict[str, str]) -> dict[str, str]:
        """A's graphs that the reference has no graph for -> why (each value of them is
        listed unpaired with it)."""
        have = set(ids_b.values())
        out = {}
        for label, gid in ids_a.items():
            if gid in have:
                continue
            what = _describe_graph(self.a, label)
            if self.by_compile_id:
                out[label] = (f"the reference recorded no {what.split(' graph', 1)[0]} graph of this compile: "
                              f"{what} has no counterpart (a frame the reference compiled otherwise, or a "
                              f"backward it did not run)")
            else:
                out[label] = f"the reference recorded fewer graphs of this kind: {what} has no counterpart"
        return out

    def launches(self) -> Iterator[PairedLaunch]:
        scan = self._a_scan
        for gkey in sorted(scan.launches, key=lambda k: k[0]):
            entries = scan.launches[gkey]
            pairs, launch_b = [], None
            for start, _stop, r in entries:
                key = scan.keys.get(start)
                off = self._b.get(key) if key is not None else None
                if off is None:
                    pairs.append(Pair(r, None, UNMATERIALISED, scan.why.get(start, "")))
                    continue
                self._used.add(key)
                rb = self.b.record_at(off)
                launch_b = rb.launch if launch_b is None else launch_b
                self._edges.append((r.launch, rb.launch))
                pairs.append(Pair(r, rb, "provenance"))
            first = entries[0][2]
            yield PairedLaunch(first.graph, first.kernel, first.op, first.kernel_call, first.launch, launch_b,
                               pairs, entries[-1][1])

    def components(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """Launches that fused differently, as units: the connected components of "a value
        of A launch x is paired with a value of B launch y" that are not one launch
        against one (``(A launches, B launches)``, in launch order). Complete once
        :meth:`launches` has been consumed."""
        parent: dict[tuple[str, int], tuple[str, int]] = {}

        def find(x):
            parent.setdefault(x, x)
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for la, lb in self._edges:
            parent[find(("a", la))] = find(("b", lb))
        groups: dict[tuple, list[tuple[str, int]]] = defaultdict(list)
        for node in list(parent):
            groups[find(node)].append(node)
        out = []
        for members in groups.values():
            side_a = tuple(sorted(n for s, n in members if s == "a"))
            side_b = tuple(sorted(n for s, n in members if s == "b"))
            if len(side_a) > 1 or len(side_b) > 1:
                out.append((side_a, side_b))
        return sorted(out)

    def only_in_b(self) -> Iterator[PairedLaunch]:
        """B's keyed values that no value of A took, per B launch (listed, not compared;
        an eager reference's are counted in :attr:`reference_only`, not listed)."""
        left: dict[int, list[Record]] = defaultdict(list)
        if self.reference:
            self.reference_only = sum(1 for key in self._b if key not in self._used)
            return
        for key, off in self._b.items():
            if key not in self._used:
                r = self.b.record_at(off)
                left[r.launch].append(r)
        for launch in sorted(left):
            recs = left[launch]
            first = recs[0]
            yield PairedLaunch(first.graph, first.kernel, first.op, first.kernel_call, None, launch,
                               [Pair(None, r, UNMATERIALISED) for r in recs])
