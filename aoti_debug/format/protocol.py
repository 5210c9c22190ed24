"""The protocol between generated Python wrappers and the runtime: sites and records.

Defined once, here, in the format room, so that the emitter (codegen, at compile time)
and the hooks (runtime, inside the user's model) share it without either importing
the other. The emitter builds a :class:`Site` per instrumented launch and writes it
into the wrapper's header as a literal, once::

    _aoti_debug = _aoti_debug_graph(globals().get('__file__'), 'save', False, info=(), protocol=2)
    _AD_SITE_0 = _aoti_debug.site(('', 'triton_poi_fused_add_0', ..., None))
    ...
    _aoti_debug.launch(_AD_SITE_0, (arg0_1, 16))  # 'triton_poi_fused_add_0'

``site`` turns the literal into a :class:`Site` at module import (NamedTuples are
tuples: the literal is the site, field by field), and the hooks read it by attribute
name. A wrapper written by another aoti_debug passes another ``protocol`` (or none:
version 1 had untyped tuples): the runtime then warns once and records nothing for it
rather than misreading positions.

Records: :func:`record` starts every manifest line the Python runtime writes, with
:class:`~aoti_debug.format.schema.Record`'s field names; non-finite floats in records
(stats and scalar values) go through :func:`jsonable`, the schema's one policy.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from .schema import Record, _jsonable

#: Bump when the meaning or order of a field of :class:`Site` / :class:`SiteArg`, or the
#: calls the emitted code makes, change. 1: the untyped tuples (no version passed);
#: 3 added the site's number and provenance; 4 the runtime library's path (``native=``);
#: 5 an input's producer (:attr:`SiteArg.reuse`); 6 the handle's ``pending()`` before what
#: may write a tensor whose stats a side deferred, and ``defers=`` (``runtime/cuda_graphs``);
#: 7 the handle's ``precompile(layouts, devices)`` at import (the stats kernels compiled ahead).
PROTOCOL_VERSION = 7

#: The keys a manifest record may have (what ``Record.from_dict`` reads).
RECORD_FIELDS = frozenset(f.name for f in dataclasses.fields(Record))


class SiteArg(NamedTuple):
    """One value a launch passes to a hook, in the order the values are passed."""

    arg: str
    """Record name (``Record.arg``): buffer / input / param name, unique in the launch."""
    role: str
    """``input``, ``output`` or ``inout`` (``schema.Role``)."""
    kind_hint: str
    """What codegen knows: ``tensor``, ``symint``, ``scalar`` or ``unknown`` (decided at run
    time; a ``symint`` hint makes an int value a ``symint`` record)."""
    expr: str
    """The wrapper expression that evaluates to the value (``Record.expr`` when it differs)."""
    uninitialised: bool = False
    """Storage read before any launch or the caller wrote it: its value passed before the
    launch is recorded as metadata only (after it, an in-place arg holds what it wrote)."""
    volatile: tuple[tuple[str, str], ...] = ()
    """``(suffix, reason)`` pairs for parts that are nondeterministic by contract: ``""``
    is the whole value, ``"[2]"`` the third element of a returned tuple."""
    reuse: tuple[int, int] = ()
    """An input that is, by the wrapper's code, the unchanged output of an earlier
    instrumented launch of this graph: ``(that launch's site, the position of the value
    among its site's after args)``. At the levels that summarise in the device ring the
    runtime takes that record's stats for this one (``Record.reused``) instead of reading
    the tensor again; ``()``: read it."""

    def volatile_reason(self, name: str) -> str | None:
        """The reason recorded for ``name`` (this arg, or ``arg[i]...`` inside it), if volatile."""
        if not self.volatile:
            return None
        suffix = name[len(self.arg):]
        for part, reason in self.volatile:
            if part == "" or part == suffix:
                return reason
        return None


class Site(NamedTuple):
    """One instrumented launch: what the hooks need besides the values themselves."""

    subgraph: str
    """Subgraph name (``""`` for the top-level graph); the record's ``graph`` label adds it."""
    kernel: str
    """The kernel as the wrapper calls it (``Record.kernel``)."""
    op: str
    """Canonical op name (``schema.canonical_op``) that aligns wrappers (``Record.op``)."""
    before: tuple[SiteArg, ...] = ()
    """The values passed to ``launch``: inputs and in-place args (level names: all that exist)."""
    after: tuple[SiteArg, ...] = ()
    """The values passed to ``done``: outputs and in-place args."""
    source: str | None = None
    """What the kernel was made from (fused nodes, ATen ops), where known."""
    id: int = -1
    """The site's number in its wrapper (``Record.site``; ``-1``: not numbered)."""
    provenance: str = ""
    """What it was made from in the user's terms: ``format.provenance.Provenance`` as
    JSON, written once per run into ``sites.jsonl`` ("" when Inductor said nothing)."""


def make_site(raw: tuple) -> Site:
    """A :class:`Site` from its literal (nested plain tuples, as ``repr`` writes a Site).

    Raises:
        TypeError: ``raw`` does not have the fields of this protocol version.
    """
    subgraph, kernel, op, before, after, source, site_id, provenance = raw
    return Site(subgraph, kernel, op, tuple(SiteArg._make(a) for a in before),
                tuple(SiteArg._make(a) for a in after), source, int(site_id), str(provenance))


def jsonable(value: Any) -> Any:
    """A record value as JSON holds it: NaN and +-Inf floats as ``"nan"``, ``"inf"``,
    ``"-inf"`` (``schema._jsonable``, which ``Stats.to_dict`` and ``Record.to_dict`` use);
    anything else unchanged."""
    return _jsonable(value)


def record(*, seq: int, launch: int, graph: str, wrapper: str, kernel: str, op: str, kernel_call: int,
           phase: str, arg: str, role: str, index: int, expr: str | None = None,
           volatile: str | None = None, site: int = -1) -> dict:
    """A new manifest record (a dict, filled in further as values become known).

    Its keys are :class:`Record` fields, optional ones only when set, so that a finished
    record is what ``Record.to_dict`` writes for it, except that ``to_dict`` always
    writes ``stats`` (null) where a record without values (uninitialised, a scalar)
    leaves it out, as the C++ runtime does.
    """
    rec = {"seq": seq, "launch": launch, "graph": graph, "wrapper": wrapper, "kernel": kernel, "op": op,
           "kernel_call": kernel_call, "phase": phase, "arg": arg, "role": role, "index": index}
    if site >= 0:
        rec["site"] = site
    if expr is not None:
        rec["expr"] = expr
    if volatile is not None:
        rec["volatile"] = volatile
    return rec
