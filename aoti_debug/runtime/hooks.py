"""What the generated Python wrapper calls around each instrumented launch.

Emitted code (see ``aoti_debug.codegen.python_emitter``) looks like::

    from aoti_debug.runtime.hooks import graph as _aoti_debug_graph
    _aoti_debug = _aoti_debug_graph(globals().get('__file__'), 'save', False, info=(), protocol=2)
    _AD_SITE_3 = _aoti_debug.site(('', 'triton_poi_fused_add_0', ...))
    ...
    _aoti_debug.launch(_AD_SITE_3, (arg0_1, buf2))  # 'triton_poi_fused_add_0'
    triton_poi_fused_add_0.run(arg0_1, buf2, buf3, 16, stream=stream0)
    _aoti_debug.done(_AD_SITE_3, (buf3,))  # 'triton_poi_fused_add_0'

A site is a :class:`~aoti_debug.format.protocol.Site` built once, at module import;
its ``before``/``after`` args (:class:`~aoti_debug.format.protocol.SiteArg`) come in
the order of the values passed. Only inputs (and in-place args) are passed before a
launch and only outputs (and in-place args) after it. An input whose storage nothing
had written yet comes with ``uninitialised`` set and is recorded as metadata only;
``volatile`` holds ``(suffix, reason)`` pairs for values that are nondeterministic by
contract. A wrapper that speaks another protocol version is not recorded (one warning).

An input with ``reuse`` set is, by the wrapper's code, the unchanged output of an earlier
instrumented launch of the same graph call: where that launch's after record went to the
device ring, this record takes its row (``Record.reused``) and the stats kernel does not
read the tensor again. Each thread keeps the rows of its producers' last calls
(``made``), forgotten when the producer launches again; a producer whose record did not
go to the ring leaves none, and its consumers read their inputs.

A CUDA launch side at level stats or print is recorded in full once, then from a plan
of it (``ring_records.SidePlan``: its stats kernel's launches repeated, its records
written from a template); once both sides of a launch have plans, its hooks go straight
to them (``_Express``), asking nothing else until a plan declines the values.

Several Python threads may run compiled graphs at once: the launch number and the
kernel call of the launch a thread is inside are kept per thread, and counters are
taken under one lock.
At level ``names`` every arg that exists when the launch starts is passed before it,
and only its metadata is ever read (``AOTI_DEBUG_NAMES_ARGS``: ``aoti-debug locate``).
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Sequence

import torch

from .. import config
from ..format.protocol import PROTOCOL_VERSION, Site, SiteArg, jsonable, make_site, record
from ..format.schema import arg_line, graph_line, names_line, print_lines, site_line, tensor_filename
from . import cpu_records, cuda_graphs, device_ring, fused_stats, native_stats, ring_records
from . import session as _session
from .session import Job, warn_once
from .stats import device_summary, format_checksum, stats_fields

#: A handle's runtime library before its first record side asked for it.
_UNSET: Any = object()

#: The levels whose CPU records the runtime library may write as text (cpu_records).
_TEXT_LEVELS = ("stats", "print")
#: The levels whose inputs may take their producer's ring row (codegen.manager.REUSE_LEVELS).
_REUSE_LEVELS = ("stats", "print")
#: False: every input is summarised from its own values although its site links it to a
#: producer (tests compare the two within one compile).
REUSE = True

#: Graph labels are handed out under this lock (the counters under the session's own).
_labels = threading.Lock()


def _emit(line: str) -> None:
    _session.emit_text(line + "\n")


_cuda: bool | None = None


def _has_cuda() -> bool:
    """``torch.cuda.is_available()``, asked once per process: it costs about 1 us a call
    and every launch asked it three times."""
    global _cuda
    if _cuda is None:
        _cuda = torch.cuda.is_available()
    return _cuda


_device_name: str | None = None


def _device_label() -> str:
    """The device run.json names: the CUDA device's name once CUDA is up (asked once:
    ``get_device_name`` costs about 7 us, and every launch asks), else ``cpu``."""
    global _device_name
    if _device_name is not None:
        return _device_name
    if _has_cuda() and torch.cuda.is_initialized():
        _device_name = torch.cuda.get_device_name()
        return _device_name
    return "cpu"


def _flatten(arg: str, value: Any, structure: list | None = None) -> list[tuple[str, Any]]:
    """``(record arg name, value)`` of each value ``value`` holds, in record order: the
    elements of a list or tuple, recursively, named ``arg[i]``. ``structure``: a list to
    which what was walked is appended, one entry per node in that order: ``(list or tuple,
    length)`` for a list or tuple, None for a value."""
    if isinstance(value, (list, tuple)):
        if structure is not None:
            structure.append((type(value), len(value)))
        out = []
        for i, v in enumerate(value):
            out.extend(_flatten(f"{arg}[{i}]", v, structure))
        return out
    if structure is not None:
        structure.append(None)
    return [(arg, value)]


def _flat_values(args: Sequence[SiteArg], values: Sequence[Any]) -> tuple[list, list]:
    """The values of a launch side holding lists or tuples, flattened in record order,
    and their structure (``_flatten``'s): what a plan of such a side compares."""
    structure: list = []
    return [v for a, value in zip(args, values) for _name, v in _flatten(a.arg, value, structure)], structure


def _named(args: Sequence[SiteArg], values: Sequence[Any] | None) -> list[tuple[str, str, Any]] | None:
    """``(record arg name, role, value)`` of each flattened value a hook was given."""
    if values is None:
        return None
    return [(name, a.role, v) for a, value in zip(args, values) for name, v in _flatten(a.arg, value)]


#: What ``torch.cuda.is_current_stream_capturing`` calls (asked twice per launch).
_is_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or torch.cuda.is_current_stream_capturing


def _capturing() -> bool:
    return _has_cuda() and _is_capturing()


#: ``torch.cuda.current_device()`` without its lazy-init check, for where CUDA is up
#: already (a planned side's tensors are on it).
_current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


class _Templates(list):
    """Record templates of one launch side; ``simple``: no value is a list or tuple."""

    simple = True
    site: Any = None
    """The site they were made for (the cache key holds its ``id``)."""


class GraphHandle:
    """One compiled graph's view of the session: labels and the launch/done hooks."""

    def __init__(self, origin: str | None, level: str, sync: bool, wrapper: str = "python", info: dict | None = None,
                 native: str | None = None, defers: bool = False):
        self.origin = origin
        self.defers = defers
        """The wrapper calls :meth:`pending` before whatever may write a tensor a side
        read: inside CUDA graphs its sides' stats launches are deferred and merged
        (``cuda_graphs.Capture.summarize``)."""
        self.level = level
        self.sync = sync
        self.wrapper = wrapper
        self.info = dict(info or {})
        """``kind`` (forward/backward/inference) and ``compile_id``, for run.json."""
        self.native = native
        """The runtime library for CPU stats (``native_stats.for_graph``)."""
        self._library = _UNSET
        self._templates: dict[tuple, _Templates] = {}
        self._records = _UNSET
        """The library's record function for CPU sides (``cpu_records``), or None."""
        self._lines = _UNSET
        """The library's writer of device-ring records (``ring_records``), or None."""
        self._plans: dict[tuple[int, str], cpu_records.SidePlan] = {}
        self._last_label: tuple = (None, None, None)
        self._ring_plans: dict[tuple, ring_records.SidePlan] = {}
        """CUDA sides at level stats whose records are made from a plan (``_ring_side``)."""
        self._express: dict[int, _Express] = {}
        """``id(site)`` -> the plans of both sides of a launch whose every side is planned
        (:meth:`_express_launch`): its hooks go straight to them."""
        self._tls = threading.local()
        self._reuse: dict[int, tuple[tuple[int, int, int], ...]] = {}
        """Site number -> ``(arg position, producer site, its after position)`` of each
        input a consumer site may take from its producer (``SiteArg.reuse``)."""
        self._producers: set[int] = set()
        """The sites some consumer takes an output of (their after rows are kept)."""
        self.top_sites = False
        """Some site is in the top-level graph: the flight recorder counts graph calls by them."""

    @property
    def _launch(self) -> int:
        """The launch this thread is inside (set by :meth:`launch`, read by :meth:`done`)."""
        return getattr(self._tls, "launch", 0)

    # -- labels ------------------------------------------------------------------------
    def _label(self, sess: _session.Session, subgraph: str) -> str:
        key = (id(self), subgraph)
        label = sess.graph_labels.get(key)
        if label is None:
            base = sess.graph_labels.get((id(self), ""))
            if base is None:
                base = f"graph{sum(1 for k in sess.graph_labels if k[1] == '')}"
                sess.register_graph((id(self), ""), base, {"wrapper": self.wrapper, "file": self.origin, **self.info})
                if self.level == "names":
                    # Where this graph's code is: `aoti-debug locate` shows the faulting line.
                    _emit(graph_line(base, self.wrapper, self.origin))
            label = base if not subgraph else f"{base}/{subgraph}"
            if subgraph:
                sess.register_graph(key, label, {"wrapper": self.wrapper, "file": self.origin, "subgraph": subgraph,
                                                 **self.info})
        return label

    # -- hooks -------------------------------------------------------------------------
    def site(self, raw: tuple) -> Site | None:
        """The emitted site literal as a :class:`Site` (once per site, at module import)."""
        try:
            site = make_site(raw)
            self.top_sites |= not site.subgraph
            reuse = tuple((i, a.reuse[0], a.reuse[1]) for i, a in enumerate(site.before) if a.reuse)
            if reuse and self.level in _REUSE_LEVELS:
                self._reuse[site.id] = reuse
                self._producers.update(r[1] for r in reuse)
            return site
        except Exception as e:
            # Never fails the import of the wrapper: its launches warn and run unrecorded.
            warn_once(f"site-{type(e).__name__}", f"a launch site of {self.origin} is malformed: {e}")
            return None

    def launch(self, site: Site, values: Sequence[Any]) -> None:
        """Before a kernel launch: count it, name it, record its inputs."""
        try:
            x = self._express.get(id(site))
            if x is not None:
                # (as in done: written out in both hooks, a shared helper would be one more
                # Python frame per hook on the path the library's function exists to shorten)
                express = fused_stats.express_function
                if express:
                    rc = express(x, values, False)
                    if rc == fused_stats.EXPRESS_DONE:
                        return
                    if rc != fused_stats.EXPRESS_DECLINED:
                        self._express_left(x, site, values, rc, False)
                        return
                if self._express_launch(x, site, values):
                    return
            subgraph, kernel = site.subgraph, site.kernel
            sess = _session.current()
            if self.level != "names":
                sess.writer(self.level, _device_label())
            known = self._last_label  # (session, subgraph, label): one lookup without the lock
            if known[0] is sess and known[1] == subgraph:
                label = known[2]
            else:
                with _labels:
                    label = self._label(sess, subgraph)
                self._last_label = (sess, subgraph, label)
            tls = self._tls
            if self.level == "stats" and _capturing():
                tls.label = label
                self._capture(sess, label, site, site.before, values, "before")
                return
            tls.launch, tls.call = sess.next_launch(label, kernel)
            tls.label = label
            if self.level == "names":
                _emit(names_line("before", tls.launch, label, kernel, tls.call))
                if sess.settings.names_args:
                    self._describe(site, values, sys._getframe(1).f_lineno)
                return
            fl = sess.flight
            if fl is not None:
                fl.enter(self, site)
                # The trigger may save this launch's inputs in its done hook.
                tls.inputs = values if fl.armed else None
                # Whether this is the trigger's next occurrence, decided once per launch: the
                # writer thread may fire between its two sides, and half a launch is no repro.
                tls.target = fl.target_is(label, site)
            if site.id in self._producers:
                made = getattr(tls, "made", None)
                if made is not None:
                    made.pop(site.id, None)  # this call's rows, once its after side has them
            self._record(sess, site, site.before, values, "before")
        except Exception as e:
            warn_once(f"hook-{type(e).__name__}", f"instrumentation of {_kernel(site)} failed: {e}")

    def precompile(self, layouts: Sequence[tuple], devices: Sequence[int]) -> int:
        """At module import: start the background compiles of the stats-kernel variants
        that tensors of ``layouts`` (``(dtype name, sizes, strides, storage offset)``, the
        static layouts the wrapper's launches pass) need on CUDA devices ``devices``
        (``fused_stats.precompile``), so that the first call waits for fewer compiles. A
        line of the module, so a graph loaded from Inductor's cache, whose codegen did not
        run, starts them too. The number started; a failure warns once and the first
        launches compile what they need."""
        if self.level not in _REUSE_LEVELS or not layouts or not _has_cuda():
            return 0
        try:
            typed = [(dtype, sizes, strides, offset) for name, sizes, strides, offset in layouts
                     if isinstance(dtype := getattr(torch, str(name), None), torch.dtype)]
            count = torch.cuda.device_count()
            return sum(fused_stats.precompile(typed, torch.device("cuda", int(i))) for i in devices
                       if 0 <= int(i) < count)
        except Exception as e:
            warn_once(f"precompile-{type(e).__name__}", f"{self.origin or 'a compiled graph'}: its stats kernels "
                                                        f"could not be compiled ahead ({e}); its first launches "
                                                        f"compile them")
            return 0

    def pending(self) -> None:
        """Before a launch or line that may write a tensor whose stats a side of the CUDA
        graph being captured deferred: those stats are launched now (outside a capture:
        nothing)."""
        cap = cuda_graphs.current()
        if cap is not None and cap.deferred:
            cap.summarize_pending()

    def done(self, site: Site, values: Sequence[Any], extra: Sequence[dict | None] | None = None) -> None:
        """After a kernel launch: optional device sync, name it, record its outputs.

        ``extra``: fields to add to each value's record, in the order of the flattened
        values (the eager reference's ``model_dtype`` and ``eager_error``)."""
        if self.sync:
            self._synchronize(site)
        try:
            x = self._express.get(id(site))
            if x is not None and extra is None:
                express = fused_stats.express_function
                if express:
                    rc = express(x, values, True)
                    if rc == fused_stats.EXPRESS_DONE:
                        return
                    if rc != fused_stats.EXPRESS_DECLINED:
                        self._express_left(x, site, values, rc, True)
                        return
                if self._express_done(x, site, values):
                    return
            sess = _session.current()
            if self.level == "stats" and _capturing():
                self._capture(sess, self._tls.label, site, site.after, values, "after")
                return
            if self.level == "names":
                tls = self._tls
                _emit(names_line("after", tls.launch, tls.label, site.kernel, tls.call))
                return
            self._record(sess, site, site.after, values, "after", extra)
            fl = sess.flight
            if fl is not None:
                tls = self._tls
                inputs, tls.inputs = getattr(tls, "inputs", None), None
                if fl.pending_for(tls.label, tls.launch):
                    fl.save_birth(sess._writer, _named(site.before, inputs), _named(site.after, values))
        except Exception as e:
            warn_once(f"hook-{type(e).__name__}", f"instrumentation of {_kernel(site)} failed: {e}")

    def _synchronize(self, site: Site) -> None:
        if not (_has_cuda() and torch.cuda.is_initialized()) or _capturing():
            return
        try:
            torch.cuda.synchronize()
        except Exception as e:
            # The model's own device fault: name the kernel that just ran, then let
            # the error propagate as it would have without us.
            _emit(f"[aoti_debug] error after launch={self._launch} kernel={_kernel(site)}: {str(e).splitlines()[0]}")
            raise

    def _describe(self, site: Site, values: Sequence[Any], line: int) -> None:
        """Level names with AOTI_DEBUG_NAMES_ARGS: the launch's line and its args' metadata.

        Reads metadata only (no values, no sync): still safe after a device fault.
        """
        _emit(site_line(self._launch, line, site.source, site.provenance))
        for a, value in zip(site.before, values):
            for name, v in _flatten(a.arg, value):
                _emit(arg_line(self._launch, {"name": name, "role": a.role, **_metadata(v, a.kind_hint)}))

    # -- records -----------------------------------------------------------------------
    def _record(self, sess, site: Site, args: Sequence[SiteArg], values: Sequence[Any], phase: str,
                extra: Sequence[dict | None] | None = None, planned: bool = True) -> None:
        """One launch side's records: from its plan where it has one that takes these
        values, else in full (``planned`` False: in full, its plan declined them already)."""
        if self.level != "stats" and _capturing():  # (launch and done asked already at stats)
            warn_once("cuda-graph", "a CUDA graph is being captured: instrumented launches are not recorded inside it")
            return
        tls = self._tls
        launch, call, label = tls.launch, tls.call, tls.label
        sess.write_site(label, site.id, site.kernel, site.provenance)
        key = (id(site), label, phase)
        plan = self._ring_plans.get(key) if planned else None
        if plan is not None and extra is None and sess.flight is None and plan.site is site:
            flat, structure = values, None
            if plan.structure is not None:  # lists or tuples among them: compared and summarised flattened
                flat, structure = _flat_values(args, values)
            # (a plan with a C function's spec is checked by that function: _planned_rows)
            if (plan.fast or plan.matches(flat, structure)) and self._ring_side(sess, site, plan, flat, launch, call):
                if phase == "after":
                    x = self._express.get(id(site))
                    if x is None or x.sess is not sess:  # (none yet, or made in an earlier session)
                        self._offer_express(sess, site, label, plan)
                return
        # A CPU side the runtime library writes as text in one call. Not with a flight
        # recorder: its ring and trigger take each record through Session.submit.
        if extra is None and self.level in _TEXT_LEVELS and sess.flight is None and \
                self._cpu_lines(sess, site, args, values, phase, label, launch, call):
            return
        tensors: list[tuple[dict, torch.Tensor]] = []
        jobs: list[Job] = []
        templates = self._templates.get(key)
        if templates is None or templates.site is not site or len(templates) != len(values) or \
                any([isinstance(v, (list, tuple)) for v in values]):  # (lists: flattened at every call)
            templates = self._side_templates(key, site, args, values, phase, label)
        first_seq = sess.next_seq(len(templates))
        taken = None  # {arg position: (arrival, ring row, producer site)}
        if phase == "before" and templates.simple and site.id in self._reuse and sess.flight is None:
            reuse = self._reuse[site.id]
            rows = self._taken_rows(reuse)
            if rows is not None:
                taken = {i: (*row, producer) for (i, producer, _at), row in zip(reuse, rows) if row is not None} or None
        for k, (a, tpl, v) in enumerate(zip(args, templates, values) if templates.simple else
                                        self._flat(args, templates, values)):
            rec = tpl.copy()  # the record's constant fields, in their order
            rec["seq"], rec["launch"], rec["kernel_call"] = first_seq + k, launch, call
            if extra is not None and k < len(extra) and extra[k]:
                rec.update(extra[k])
            if isinstance(v, torch.Tensor):
                if a.uninitialised and phase == "before":
                    # Memory no launch had written yet: what it holds is not data. (After
                    # the launch an in-place arg holds what it wrote, as in the C++ runtime.)
                    rec.update(_tensor_meta(v), uninitialised=True)
                    jobs.append(Job(rec))
                elif taken and k in taken:  # its producer's row (same call, written by nothing since)
                    arrival, row, producer = taken[k]
                    rec.update(_tensor_meta(v), reused=producer)
                    jobs.append(Job(rec, arrival, ring_records.RingFill(
                        arrival, row, self._ring_lines() if self.level == "stats" else None)))
                else:
                    tensors.append((rec, v))
            else:
                jobs.append(self._scalar(rec, v, a.kind_hint))
        fl = sess.flight
        if fl is not None and tensors and getattr(tls, "target", False):
            # The launch where the trigger's NaN/Inf was born, again: save both its sides.
            fl.capture(tensors, last=phase == "after" or not site.after)
        if tensors or taken:
            host = self._tensors(sess, tensors, jobs) if tensors else []
            jobs.sort(key=_seq)  # scalars were queued before tensors: the manifest in record order
            if host is not None and extra is None and fl is None:
                # Every tensor in the ring, taken from its producer's row or read by the
                # runtime library: the next calls make this side's records from a plan.
                flat, structure = (values, None) if templates.simple else _flat_values(args, values)
                self._plan(key, site, jobs, flat, structure, tensors, host)
            if phase == "after" and templates.simple and site.id in self._producers:
                self._made(site, jobs, len(values), first_seq)
        if self.level == "print" and jobs:
            self._print_side(sess, jobs)
        if jobs:
            sess.submit_all(jobs)

    # -- inputs taken from their producers' records (SiteArg.reuse) -----------------
    def _taken_rows(self, reuse: tuple[tuple[int, int, int], ...]) -> list[tuple[Any, int] | None] | None:
        """``(arrival, ring row)`` of each input of ``reuse`` (``(arg position, producer
        site, its after position)``, ``SiteArg.reuse``), in its order: its producer's after
        record of this call in the device ring; None for an input whose record is not
        there, and None for all where no producer's is."""
        made = getattr(self._tls, "made", None)
        if not made or not REUSE:
            return None
        out = []
        for _i, producer, at in reuse:
            entry = made.get(producer)
            row = None
            if entry is not None:
                arrival, first, rows = entry
                if at < len(rows) and rows[at] is not None:
                    row = (arrival, first + rows[at])
            out.append(row)
        return out

    def _made(self, site: Site, jobs: list[Job], n: int, first_seq: int) -> None:
        """Keep the ring rows of a producer's after side (one per value; None: not in the
        ring) for the inputs of later launches that take them (``_taken_rows``)."""
        rows: list[int | None] = [None] * n
        arrival = None
        for j in jobs:
            fill = j.finish
            if type(fill) is ring_records.RingFill and fill.arrival is not None:
                rows[j.record["seq"] - first_seq] = fill.row
                arrival = fill.arrival
        if arrival is not None:
            self._made_rows()[site.id] = (arrival, 0, rows)

    def _made_rows(self) -> dict:
        made = getattr(self._tls, "made", None)
        if made is None:
            made = self._tls.made = {}
        return made

    def _side_templates(self, key: tuple, site: Site, args: Sequence[SiteArg], values: Sequence[Any], phase: str,
                        label: str) -> "_Templates":
        """The constant part of each record of one launch side (one dict per flattened
        value), made at its first call: a launch then copies a dict and sets three numbers."""
        base_index = 0 if phase == "before" else len(site.before)
        simple = not any(isinstance(value, (list, tuple)) for value in values)
        templates = _Templates()
        templates.simple, templates.site = simple, site
        for i, (a, value) in enumerate(zip(args, values)):
            for name, _v in _flatten(a.arg, value):
                templates.append(record(seq=0, launch=0, graph=label, wrapper=self.wrapper, kernel=site.kernel,
                                        op=site.op, kernel_call=0, phase=phase, arg=name, role=a.role,
                                        index=base_index + i, expr=a.expr if a.expr and a.expr != a.arg else None,
                                        volatile=a.volatile_reason(name) if a.volatile else None, site=site.id))
        if simple:  # a side holding lists/tuples is flattened at every call (their lengths may vary)
            self._templates[key] = templates
        return templates

    @staticmethod
    def _flat(args: Sequence[SiteArg], templates: list[dict], values: Sequence[Any]):
        """``(arg, template, value)`` per flattened value of a side holding lists/tuples."""
        flat = [(a, v) for a, value in zip(args, values) for _name, v in _flatten(a.arg, value)]
        return [(a, tpl, v) for (a, v), tpl in zip(flat, templates)]

    def _print_side(self, sess, jobs: list[Job]) -> None:
        """Print a side's lines in one write: now if its values are here and nothing is
        queued before it, else when the writer has its values (launch order either way)."""
        if all(j.event is None for j in jobs) and not sess.pending():
            for j in jobs:
                if j.finish is not None:
                    j.finish(j.record)
                    j.finish = None
            _emit(print_lines([j.record for j in jobs]))
            return
        last = jobs[-1]
        records = [j.record for j in jobs]
        finish = last.finish

        def finish_and_print(rec: dict) -> None:
            if finish is not None:
                finish(rec)
            _emit(print_lines(records))

        last.finish = finish_and_print

    def _scalar(self, rec: dict, v: Any, kind_hint: str) -> Job:
        if v is None:
            rec["kind"] = "none"
        elif isinstance(v, (bool, int, float, torch.SymInt, torch.SymFloat, torch.SymBool)):
            rec["kind"] = "symint" if kind_hint == "symint" else "scalar"
            # One policy for non-finite floats in records (the schema's, as in stats).
            rec["value"] = jsonable(v) if isinstance(v, (bool, int, float)) else str(v)
            rec["dtype"] = type(v).__name__
        else:
            rec["kind"] = "other"
            rec["value"] = type(v).__name__
        return Job(rec)

    def _tensors(self, sess, items: list[tuple[dict, torch.Tensor]], jobs: list[Job]) -> list[int] | None:
        """Stats for all tensors of one launch side in one batch: CPU tensors in one call
        of the runtime library, CUDA tensors into a device ring (one kernel launch, read
        back in bulk later), others with one device->host copy. Appends the records' jobs
        to ``jobs``. At level stats, when every tensor the library did not read went into
        the ring: the positions of those it read (the CPU tensors beside a CUDA side's,
        such as an attention kernel's RNG seeds); at level print, when every tensor went
        into the ring: ``[]``; else None."""
        for rec, t in items:
            rec.update(_tensor_meta(t))
        rest = self._native_stats(items)
        saving = self.level == "save" and sess.settings.saves(self._launch)
        if self.level == "save" and not saving:
            for rec, _t in items:
                rec["skipped"] = f"launch {rec['launch']} is not in {config.ENV_SAVE_LAUNCHES}"
        if rest and not saving:
            ring = self._ring_stats(items, rest)
            if ring is not None:
                arrival, rows = ring
                # At level stats the writer thread may have the runtime library write these
                # records' lines (ring_records); level print prints them from the dicts.
                lines = self._ring_lines() if self.level == "stats" else None
                jobs.extend([Job(rec, arrival, ring_records.RingFill(arrival, rows[i], lines))
                             if i in rows else Job(rec) for i, (rec, _t) in enumerate(items)])
                host = [i for i in range(len(items)) if i not in rows]
                # (At level print a side with tensors read on the host is not planned: its
                # host records' print lines come from the dicts alone.)
                return host if self.level == "stats" or (self.level == "print" and not host) else None
        host_stats = self._device_stats(items, rest) if rest else {}
        payloads = [self._host_copy(sess, rec, t) for rec, t in items] if saving else None
        event = None
        if any(items[i][1].device.type != "cpu" for i in rest):
            event = torch.cuda.Event() if _has_cuda() else None
            if event is not None:
                event.record()
        if payloads is None and not host_stats:  # CPU stats: the records are complete
            jobs.extend([Job(rec) for rec, _t in items])
            return None
        for i, (rec, _t) in enumerate(items):
            job_stats = host_stats.get(i)
            payload = payloads[i] if payloads is not None else None
            nbytes = payload[0].numel() * payload[0].element_size() if payload else 0
            finish = _finisher(sess, job_stats, payload, self._native_library() if payload else None) \
                if job_stats is not None or payload is not None else None
            jobs.append(Job(rec, event, finish, nbytes))
        return None

    def _ring_stats(self, items: list[tuple[dict, torch.Tensor]], rows: list[int]):
        """The CUDA tensors ``items[i]``, ``i`` in ``rows``, summarised into the device ring
        of their stream: ``(arrival, {i: ring row})``, or None (not on one CUDA device,
        no fused kernel: the batched host-copy path)."""
        dev0 = items[rows[0]][1].device
        if dev0.type != "cuda" or not device_ring.ENABLED or not fused_stats.enabled_for(dev0):
            return None
        for i in rows:
            if items[i][1].device != dev0:
                return None
        try:
            arrival, first = self._ring_rows(dev0, [items[i][1] for i in rows])
        except Exception as e:
            warn_once(f"ring-{type(e).__name__}", f"device stats ring failed, copying stats per launch side: {e}")
            return None
        return arrival, {i: first + j for j, i in enumerate(rows)}

    def _ring_rows(self, device: torch.device, tensors: Sequence[torch.Tensor]) -> tuple[Any, int]:
        """Stats of ``tensors`` (CUDA, on ``device``) into consecutive rows of the device
        ring of the current stream: ``(the rows' arrival, first row)``."""
        if self.level == "stats" and cuda_graphs.installed():
            cuda_graphs.prepare(device)  # a CUDA-graph capture may follow: its arena, outside the graph pool
        seg, first = device_ring.ring_for(device).reserve(len(tensors))
        fused_stats.summarize(tensors, into=(seg.buf, first))
        return seg.arrival, first

    def _plan(self, key: tuple, site: Site, jobs: list[Job], values: Sequence[Any], structure: list | None,
              tensors: list[tuple[dict, torch.Tensor]], host: list[int]) -> None:
        """Keep a plan of this side (``ring_records.SidePlan``) made from its records, before
        they are queued; none where some value is one a plan does not keep. ``values``: the
        side's flattened values, ``structure`` theirs (``_flat_values``; None: no list or
        tuple); ``tensors[i]`` for ``i`` in ``host``: read by the runtime library, the others
        summarised in the ring."""
        if len(jobs) != len(values):
            return
        read = {id(tensors[i][0]) for i in host}
        ring = {id(rec) for rec, _t in tensors} - read
        records = [j.record for j in jobs]
        producer = {i: (p, at) for i, p, at in self._reuse.get(site.id, ())}
        reused = tuple((k, *producer[k]) for k, r in enumerate(records) if "reused" in r and k in producer)
        old = self._ring_plans.get(key)
        if old is not None and len(old.reused) > len(reused) and old.site is site and old.matches(values, structure):
            return  # a producer's row was missing this once: the plan that takes it stays
        self._express.pop(id(site), None)  # (its plans change)
        try:
            self._ring_plans[key] = ring_records.SidePlan(site, records, list(values), [id(r) in ring for r in records],
                                                          self._ring_lines(), structure,
                                                          [k for k, r in enumerate(records) if id(r) in read], reused,
                                                          prints=self.level == "print")
        except ValueError:
            pass

    def _planned_rows(self, plan: ring_records.SidePlan, values: Sequence[Any]) -> tuple[Any, int] | None:
        """``_ring_rows`` for a planned side: while its tensors are where they were, on the
        same ring, the stats kernel's launches are repeated without ``fused_stats.summarize``
        (which would find them again from the tensors: ~70 us a side in a real model).
        With the plan's spec for the library's C function (``plan.fast``), that one call
        checks the values (``SidePlan.matches`` was not asked) and launches; None: they do
        not match the plan (the side takes the full path)."""
        device = plan.device
        ring = device_ring.ring_for(device)
        fast = plan.fast  # one read: another thread may replace it
        seg, first = ring.reserve(plan.ring_count)
        if fast:
            if fast[0] is ring and not fused_stats._launch_hooks_installed():
                rc = fused_stats.side_function(fast[2], values, seg.addr + 64 * first,
                                               fused_stats.rows_from(first, seg.cap))
                if rc == fused_stats.SIDE_LAUNCHED:
                    return seg.arrival, first
                # (values it cannot read, such as a tensor subclass: this plan stops asking)
                plan.fast = False if rc == fused_stats.SIDE_NOT_HERE else None
            else:  # another stream's ring, or launch hooks: the Python path, which keeps anew
                rc, plan.fast = fused_stats.SIDE_NOT_HERE, None
            if rc == fused_stats.SIDE_MISMATCH or (rc == fused_stats.SIDE_NOT_HERE and not plan.matches(values)):
                return None  # (the rows reserved stay unused)
            if rc >= fused_stats.SIDE_CUDA or rc == fused_stats.SIDE_NO_DRIVER:
                fused_stats._unbind_launcher(-1 if rc == fused_stats.SIDE_NO_DRIVER else rc - fused_stats.SIDE_CUDA)
                if rc >= fused_stats.SIDE_CUDA:  # some launches may have been made: the full path records the side
                    raise RuntimeError(f"cuLaunchKernel failed with CUresult {rc - fused_stats.SIDE_CUDA}")
        values = plan.ring_values(values)
        ptrs = [t.data_ptr() for t in values]
        kept_ring, kept_ptrs, launches = plan.kept  # one read: another thread may replace it
        if launches and kept_ring is ring and ptrs == kept_ptrs and device.index == _current_device() and \
                fused_stats._launch_side(launches, seg.buf, first, seg.cap):
            if fast is None and fused_stats.side_function and plan.structure is None and not plan.host:
                lib = self._native_library()
                spec = fused_stats.side_spec(plan.meta, plan.ring_at, kept_ptrs, launches, device,
                                             lib.codes if lib is not None else {})
                plan.fast = (ring, *spec) if spec else False
            return seg.arrival, first
        fused_stats.summarize(values, into=(seg.buf, first))
        if launches != ():  # (): for good, the kernel reads a copy of some tensor (the plan fixes their layouts)
            plan.kept = (ring, ptrs, fused_stats.kept_launches(values, device))
            plan.fast = None
            lib = self._native_library()
            fused_stats.bind_launcher(lib)  # once: the library's launcher repeats them
            if fused_stats.side_function is None and lib is not None:  # once: ... and the C function checks too
                fused_stats.bind_side_function(lib, cpu_records.values_config(lib.codes))
        return seg.arrival, first

    def _ring_side(self, sess, site: Site, plan: ring_records.SidePlan, values: Sequence[Any], launch: int,
                   call: int) -> bool:
        """A planned side (``SidePlan``; ``values`` flattened, in record order): its stats
        into the ring and its records queued with no record dict made here: its numbers
        appended to the writer's run of planned sides of its segment (``SideRun``: no host
        records, taken rows in the same segment), else one writer job (``RingSide``);
        False: the side takes the full path (the ring failed, that path tries again and
        warns; or an input it takes from its producer is not in the ring this call)."""
        if not device_ring.ENABLED:
            return False
        reused = None
        if plan.reused:
            reused = self._taken_rows(plan.reused)
            if reused is None or None in reused:
                return False
        host = None
        if plan.host:  # its CPU tensors, read by the runtime library now as the full path reads them
            host = self._host_stats([values[k] for k in plan.host])
            if None in host:
                return False  # (the full path summarises them otherwise, and warns where the library failed)
        if plan.device is None:  # every tensor taken from its producer: no stats kernel at all
            try:
                if not self._taken_values_match(plan, values):
                    return False
            except Exception as e:  # the full path records the side
                self._plan_failed(e)
                return False
            arrival, first = reused[-1][0], 0
        else:
            try:
                rows = self._planned_rows(plan, values)
                if rows is None:
                    return False
                arrival, first = rows
            except Exception as e:  # the full path tries the ring again (and warns when it fails too)
                self._plan_failed(e)
                return False
        lines = plan.lines
        if lines is not None and host is None and (reused is None or all([a is arrival for a, _r in reused])) and \
                (plan.texts is not None or self._template(lines, plan)):
            sess.submit_planned(arrival, lines, plan, launch, call, first,
                                () if reused is None else tuple([r for _a, r in reused]))
        else:
            seq = sess.next_seq(len(plan.records))
            sess.submit_side(Job(None, arrival, ring_records.RingSide(plan, seq, launch, call, arrival, first, host,
                                                                      reused)))
        if plan.after and site.id in self._producers and plan.structure is None and plan.device is not None:
            self._made_rows()[site.id] = (arrival, first, plan.rows)
        return True

    def _taken_values_match(self, plan: ring_records.SidePlan, values: Sequence[Any]) -> bool:
        """Whether the values of a side that takes every tensor from its producers are its
        plan's: checked by the library's side function where the plan has its spec
        (``plan.fast``, no launch in it; the callers then skipped ``SidePlan.matches``),
        else already checked by the caller, and the spec made for the next calls."""
        fast = plan.fast
        if fast:
            rc = fused_stats.side_function(fast[2], values, 0, 0)
            if rc == fused_stats.SIDE_LAUNCHED:  # (checked; nothing to launch)
                return True
            if rc == fused_stats.SIDE_MISMATCH:
                return False
            plan.fast = False  # values it cannot read (a tensor subclass): Python checks from now on
            return plan.matches(values)
        if fast is None and fused_stats.side_function and plan.structure is None:
            lib = self._native_library()
            spec = fused_stats.side_spec(plan.meta, (), (), None, None, lib.codes if lib is not None else {})
            plan.fast = (None, *spec) if spec else False
        return True

    # -- launches whose every side is planned ------------------------------------------
    def _offer_express(self, sess, site: Site, label: str, after: ring_records.SidePlan) -> None:
        """Once a launch's after side ran from its plan: where its before side has one too
        (or no values) and nothing else asks the hooks for more (a device sync, a flight
        recorder, values in lists), its next launches go straight to the two plans."""
        if self.sync or sess.flight is not None or after.structure is not None:
            return
        before = None
        if site.before:
            before = self._ring_plans.get((id(site), label, "before"))
            if before is None or before.site is not site or before.structure is not None:
                return
        self._express[id(site)] = _Express(sess, label, before, after, site.id in self._producers,
                                           sess.calls_of(label, site.kernel), self._tls, site.id)

    def _express_launch(self, x: "_Express", site: Site, values: Sequence[Any]) -> bool:
        """:meth:`launch` of a launch with both sides planned: its numbers, then its before
        side from its plan (in full where the plan declines the values). False: the
        session changed or a CUDA graph is being captured (the hook's own path)."""
        sess = _session.current()
        if sess is not x.sess or _capturing():
            return False
        label = x.label
        launch, call = sess.next_launch(label, site.kernel) if x.calls is None else sess.next_launch_in(x.calls)
        tls = self._tls
        tls.launch, tls.call, tls.label = launch, call, label
        if x.producer:
            made = getattr(tls, "made", None)
            if made is not None:
                made.pop(site.id, None)
        plan = x.before
        if plan is not None and not self._express_side(sess, site, plan, values, launch, call):
            self._record(sess, site, site.before, values, "before", planned=False)
        return True

    def _express_done(self, x: "_Express", site: Site, values: Sequence[Any]) -> bool:
        """:meth:`done` of a launch with both sides planned (``_express_launch``)."""
        sess = _session.current()
        if sess is not x.sess or _capturing():
            return False
        tls = self._tls
        if not self._express_side(sess, site, x.after, values, tls.launch, tls.call):
            self._record(sess, site, site.after, values, "after", planned=False)
        return True

    def _express_left(self, x: "_Express", site: Site, values: Sequence[Any], rc: int, after: bool) -> None:
        """The side of an express hook that the library's function (``ring_express.h``)
        numbered and left (``rc``: ``EXPRESS_SIDE_LEFT``, or ``SIDE_CUDA`` + the CUresult of
        its kept launches that failed after some were made): taken from its plan by the
        Python path, else recorded in full, under the numbers it left in this thread."""
        plan, args, phase = (x.after, site.after, "after") if after else (x.before, site.before, "before")
        tls = self._tls
        if rc >= fused_stats.SIDE_CUDA:  # as _planned_rows: the launcher unbound, the plans made anew
            fused_stats._unbind_launcher(rc - fused_stats.SIDE_CUDA)
            self._plan_failed(RuntimeError(f"cuLaunchKernel failed with CUresult {rc - fused_stats.SIDE_CUDA}"))
        elif self._express_side(x.sess, site, plan, values, tls.launch, tls.call):
            return
        self._record(x.sess, site, args, values, phase, planned=False)

    def _plan_failed(self, e: Exception) -> None:
        """A planned side raised: every plan (and express entry) goes; sides are recorded in
        full and planned anew."""
        warn_once(f"ring-plan-{type(e).__name__}", f"a planned launch side failed, recording it in full: {e}")
        self._ring_plans.clear()
        self._express.clear()

    def _express_side(self, sess, site: Site, plan: ring_records.SidePlan, values: Sequence[Any], launch: int,
                      call: int) -> bool:
        """A planned side as :meth:`_record` takes it from its plan (the C function's
        check where the plan has its spec); False: the plan declined the values."""
        return bool(plan.fast or plan.matches(values)) and self._ring_side(sess, site, plan, values, launch, call)

    @staticmethod
    def _template(lines: ring_records.RingLines, plan: ring_records.SidePlan) -> bool:
        """Whether the library's template of ``plan`` could be made (``RingLines.template``,
        here at its first planned call); False where it cannot be: the side is then a
        ``RingSide`` job, and the writer's own attempt warns and takes the dict path."""
        try:
            lines.template(plan)
        except Exception:
            return False
        return True

    def _capture(self, sess, label: str, site: Site, args: Sequence[SiteArg], values: Sequence[Any],
                 phase: str) -> None:
        """One launch side while a CUDA graph is captured (level stats): the stats kernel
        goes into the graph (deferred to the wrapper's next ``pending()`` and merged with
        the sides before it, where the wrapper ``defers``), writing the graph's arena rows (an input its producer's side
        in the graph summarised takes that row); the records are made from a template
        after every replay (``cuda_graphs``), by the runtime library from the side's plan
        when every side of the graph has one (``cuda_graphs.Replay``)."""
        cap = cuda_graphs.current()
        if cap is None or cap.arena is None:
            warn_once("cuda-graph", "a CUDA graph is being captured before any instrumented launch ran outside "
                                    "one: launches inside it are not recorded")
            return
        sess.write_site(label, site.id, site.kernel, site.provenance)
        records: list[dict] = []
        rows: list[int | None] = []
        tensors: list[torch.Tensor] = []
        own: list[int] = []  # the positions of the values this side's stats kernel reads
        templates = self._side_templates((id(site), label, phase), site, args, values, phase, label)
        # An input its producer's after side in this graph summarised, written by nothing
        # since (``SiteArg.reuse``), takes that side's arena row, as outside graphs.
        taken = cap.taken(self, self._reuse[site.id]) if phase == "before" and templates.simple and REUSE and \
            site.id in self._reuse and sess.flight is None else {}
        for k, (a, tpl, v) in enumerate(zip(args, templates, values) if templates.simple else
                                        self._flat(args, templates, values)):
            rec = tpl.copy()  # launch, record and call numbers are set at each replay
            records.append(rec)
            rows.append(None)
            if not isinstance(v, torch.Tensor):
                self._scalar(rec, v, a.kind_hint)
                continue
            rec.update(_tensor_meta(v))
            if a.uninitialised and phase == "before":
                rec["uninitialised"] = True
            elif v.device != cap.arena.device:
                rec["error"] = f"stats: a {v.device} tensor inside a CUDA graph captured on {cap.arena.device}"
            elif k in taken:
                rows[-1], rec["reused"], _at = taken[k]
            else:
                own.append(k)
                tensors.append(v)
        if tensors:
            try:
                first = cap.rows(len(tensors))
                cap.summarize(tensors, first, self.defers)
            except Exception as e:
                warn_once(f"graph-stats-{type(e).__name__}", f"stats inside a CUDA graph failed: {e}")
                for k in own:
                    records[k]["error"] = f"stats: {type(e).__name__}: {e}"
            else:
                for j, k in enumerate(own):
                    rows[k] = first + j
        if phase == "after" and templates.simple and site.id in self._producers:
            cap.made[(id(self), site.id)] = list(rows)
        plan = None
        if templates.simple:
            try:
                plan = ring_records.SidePlan(site, records, list(values),
                                             [r is not None and k not in taken for k, r in enumerate(rows)],
                                             self._ring_lines(),
                                             reused=tuple((k, p, at) for k, (_row, p, at) in taken.items()))
            except ValueError:  # a value a plan does not keep: this graph's replays make dicts
                plan = None
        cap.sides.append(cuda_graphs.Side(self, site, label, phase, records, rows, plan))

    def _native_library(self) -> native_stats.Library | None:
        lib = self._library
        if lib is _UNSET:
            lib = self._library = native_stats.for_graph(self.native)
        return lib

    def _ring_lines(self) -> ring_records.RingLines | None:
        """The library's writer of device-ring records, or None (the dict path)."""
        lines = self._lines
        if lines is _UNSET:
            lines = self._lines = ring_records.for_library(self._native_library())
        return lines

    def _cpu_lines(self, sess, site: Site, args: Sequence[SiteArg], values: Sequence[Any], phase: str, label: str,
                   launch: int, call: int) -> bool:
        """The side's records written as text by the runtime library (one call, one write:
        ``cpu_records``) when every value is one it writes; False: the record dicts' path."""
        records = self._records
        if records is _UNSET:
            lib = self._native_library()
            records = self._records = cpu_records.for_library(lib) if lib is not None else None
        if records is None or sess._writer is None or not values:
            return False
        for value in values:
            if isinstance(value, torch.Tensor):
                if not value.is_cpu:
                    return False  # a device side (the ring's), not one the library writes: ~8 us saved
                break
        if self.level == "print" and sess.pending():
            return False  # its lines would print ahead of sides queued before it (_print_side waits)
        key = (id(site), phase)
        plan = self._plans.get(key)
        if plan is None or plan.site is not site or plan.label != label:
            plan = self._plans[key] = cpu_records.SidePlan(site, phase, label, self.wrapper, self.level == "print")
        # straight into the manifest when nothing is queued before these records
        fd = -1 if sess.pending() else sess._writer.fileno()
        try:
            out = records.values_side(plan, args, values, launch, call, sess.next_seq, fd)
            if out is cpu_records.FLATTEN:  # a list or tuple of values: each flattened value named
                flat = []
                for i, (a, value) in enumerate(zip(args, values)):
                    if isinstance(value, (list, tuple)):
                        flat.extend((i, a, name, v) for name, v in _flatten(a.arg, value))
                    else:
                        flat.append((i, a, a.arg, value))
                out = records.side(plan, flat, launch, call, sess.next_seq, fd) if flat else None
        except OSError as e:
            warn_once("manifest", f"cannot append to manifest in {sess.path!r}: {e}")
            return True
        except Exception as e:
            self._records = None
            warn_once(f"cpu-records-{type(e).__name__}", f"the runtime library could not write CPU records, "
                                                         f"building them in Python: {e}")
            return False
        if out is None:
            return False
        lines, prints = out
        if prints:
            _emit(prints[:-1])  # one write for the side
        if lines is not None:
            sess.write_lines(lines)
        return True

    def _native_stats(self, items: list[tuple[dict, torch.Tensor]]) -> list[int]:
        """Fills the stats and checksum of the CPU tensors the runtime library reads (one
        call for the side); the positions of the others."""
        done = self._host_stats([t for _, t in items], [rec["shape"] for rec, _ in items],
                                [rec["stride"] for rec, _ in items])
        rest = []
        for i, d in enumerate(done):
            if d is None:
                rest.append(i)
            else:
                rec = items[i][0]
                rec["stats"], rec["checksum"] = d
        return rest

    def _host_stats(self, tensors: list[torch.Tensor], shapes: list | None = None,
                    strides: list | None = None) -> list[tuple | None]:
        """``(stats, checksum)`` of each CPU tensor the runtime library reads, in one call;
        None for the others (``native_stats.Library.summarize``)."""
        lib = self._native_library()
        if lib is None:
            return [None] * len(tensors)
        try:
            return lib.summarize(tensors, shapes, strides)
        except Exception as e:
            warn_once(f"native-stats-{type(e).__name__}", f"the runtime library could not summarise CPU tensors, "
                                                          f"using torch ops: {e}")
            return [None] * len(tensors)

    def _device_stats(self, items: list[tuple[dict, torch.Tensor]], rows: list[int]) -> dict[int, tuple]:
        """Stats of ``items[i]`` for ``i`` in ``rows`` with torch ops or the fused kernel, as
        ``{i: (host stats, host checksum)}`` (device tensors: copies still in flight)."""
        summaries: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        packed, dev0 = None, items[rows[0]][1].device
        if fused_stats.enabled_for(dev0) and all(items[i][1].device == dev0 for i in rows):
            try:  # one Triton launch per dtype for the whole side
                packed = fused_stats.summarize([items[i][1] for i in rows], packed=True)
            except Exception as e:
                warn_once("fused-stats", f"batched stats failed, using torch ops: {e}")
        host_stats: dict[int, tuple] = {}
        if packed is not None:
            host = packed  # cpu: only under TRITON_INTERPRET (tests)
            if dev0.type != "cpu":
                host = torch.empty(packed.shape, dtype=packed.dtype, device="cpu", pin_memory=True)
                host.copy_(packed, non_blocking=True)
            hs, hc = fused_stats.unpack(host)
            return {i: (hs[j], hc[j]) for j, i in enumerate(rows)}
        for i in rows:
            rec, t = items[i]
            try:
                summaries[i] = device_summary(t)
            except Exception as e:
                rec["error"] = f"stats: {type(e).__name__}: {e}"
                warn_once(f"stats-{t.dtype}", f"cannot summarise a {t.dtype} tensor on {t.device}: {e}")
        by_device: dict[torch.device, list[int]] = {}
        for i, s in summaries.items():
            by_device.setdefault(s[0].device, []).append(i)
        for device, idx in by_device.items():
            stats = torch.stack([summaries[i][0] for i in idx])
            sums = torch.stack([summaries[i][1] for i in idx])
            if device.type == "cpu":
                hs, hc = stats, sums
            else:
                hs = torch.empty(stats.shape, dtype=stats.dtype, device="cpu", pin_memory=True)
                hc = torch.empty(sums.shape, dtype=sums.dtype, device="cpu", pin_memory=True)
                hs.copy_(stats, non_blocking=True)
                hc.copy_(sums, non_blocking=True)
            for j, i in enumerate(idx):
                host_stats[i] = (hs[j], hc[j])
        return host_stats

    def _host_copy(self, sess, rec: dict, t: torch.Tensor):
        """A host copy of ``t`` as it is now (async for device tensors), or None."""
        limit = sess.settings.max_bytes
        nbytes = t.numel() * t.element_size()
        if limit is not None and sess.bytes_written + nbytes > limit:
            rec["skipped"] = "AOTI_DEBUG_MAX_BYTES reached"
            return None
        sess.bytes_written += nbytes
        try:
            src = t.detach()
            if src.device.type == "cpu":
                host = src.clone(memory_format=torch.contiguous_format)
            else:
                host = torch.empty(src.shape, dtype=src.dtype, device="cpu", pin_memory=True)
                host.copy_(src, non_blocking=True)
        except Exception as e:
            rec["error"] = f"copy: {type(e).__name__}: {e}"
            warn_once(f"copy-{type(e).__name__}", f"cannot copy {rec['arg']} of {rec['kernel']}: {e}")
            return None
        filename = tensor_filename(rec["seq"], rec["phase"], rec["kernel"], rec["arg"])
        return host, filename


def _kernel(site: Any) -> str:
    """The kernel of a site for a warning, whatever the site turned out to be."""
    return getattr(site, "kernel", None) or "a kernel"


_dtype_names: dict[torch.dtype, str] = {}
_device_names: dict[torch.device, str] = {}


def _tensor_meta(t: torch.Tensor) -> dict:
    dtype, device = t.dtype, t.device
    dtype_name = _dtype_names.get(dtype)
    if dtype_name is None:
        dtype_name = _dtype_names[dtype] = str(dtype).replace("torch.", "")
    device_name = _device_names.get(device)
    if device_name is None:
        device_name = _device_names[device] = str(device)
    return {"kind": "tensor", "dtype": dtype_name, "shape": list(t.shape), "stride": list(t.stride()),
            "device": device_name, "numel": t.numel()}


def _metadata(v: Any, kind_hint: str) -> dict:
    if isinstance(v, torch.Tensor):
        meta: dict[str, Any] = {
            "kind": "tensor", "dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape),
            "stride": list(v.stride()) if v.layout == torch.strided else "-", "device": str(v.device),
        }
        try:
            meta["offset"] = v.storage_offset()
            meta["ptr"] = hex(v.data_ptr())
            meta["nbytes"] = v.untyped_storage().nbytes()
        except Exception:  # no storage (sparse, some subclasses): the rest still helps
            pass
        return meta
    if v is None:
        return {"kind": "none"}
    if isinstance(v, (bool, int, float, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return {"kind": "symint" if kind_hint == "symint" else "scalar", "value": v}
    return {"kind": "other", "type": type(v).__name__}


def _fill_stats(rec: dict, hs_hc) -> None:
    if "stats" in rec:  # level print filled them before the record was queued
        return
    hs, hc = hs_hc
    rec["stats"] = stats_fields(*hs.tolist()[:7])
    rec["checksum"] = format_checksum(int(hc))


def _seq(job: Job) -> int:
    return job.record["seq"]


def _finisher(sess, host_stats, payload, library=None):
    """What the writer thread does for one record of the full path: its stats from the
    host copy, its tensor file (written by the runtime ``library`` where it writes it,
    else ``torch.save``)."""

    def finish(rec: dict) -> None:
        if host_stats is not None:
            _fill_stats(rec, host_stats)
        if payload is not None:
            host, filename = payload
            w = sess._writer
            if w is None:
                return
            key = _content_key(rec)
            same = sess.content_files.get(key) if key is not None else None
            if same is not None:
                # Identical values already on disk (a weight read every step, an input
                # that is the unchanged output of an earlier launch): point at that file.
                rec["file"] = same
                rec["shared"] = True
                return
            path = w.tensor_path(filename)
            try:  # created at the run's tensors/ descriptor, never by path (format.writer.RunWriter)
                if library is None or not library.write_pt(filename, host, dir_fd=w.tensor_fd):
                    with w.open_new(f"tensors/{filename}") as fh:
                        torch.save(host, fh)
                rec["file"] = f"tensors/{filename}"
                if key is not None:
                    sess.content_files[key] = rec["file"]
            except Exception as e:
                try:
                    w.remove(f"tensors/{filename}")
                except OSError:
                    pass
                rec["error"] = f"save: {type(e).__name__}: {e}"
                warn_once(f"save-{type(e).__name__}", f"cannot write {path!r}: {e}")

    return finish


def _content_key(rec: dict) -> tuple | None:
    """Identity of a tensor's values: the 64-bit position-weighted checksum plus dtype,
    shape and the exact stats, so that two different tensors share a file only if all of
    these collide."""
    stats = rec.get("stats")
    if not rec.get("checksum") or not stats:
        return None
    return (rec["dtype"], tuple(rec["shape"]), rec["checksum"], stats.get("min"), stats.get("max"),
            stats.get("mean"), stats.get("std"), stats.get("nan"), stats.get("inf"))


class _Express:
    """Both sides of one launch planned (``GraphHandle._offer_express``), in the session
    and graph label they were planned in; ``producer``: some consumer takes its outputs'
    rows; ``calls``: the session's count of the kernel's calls in that graph
    (``Session.calls_of``; None: counted through ``Session.next_launch``)."""

    __slots__ = ("sess", "label", "before", "after", "producer", "calls", "tls", "site_id")

    def __init__(self, sess: Any, label: str, before: ring_records.SidePlan | None, after: ring_records.SidePlan,
                 producer: bool, calls: list[int] | None = None, tls: Any = None, site_id: int = -1):
        self.sess, self.label, self.before, self.after, self.producer = sess, label, before, after, producer
        self.calls = calls
        self.tls, self.site_id = tls, site_id
        """The graph handle's thread state and the launch's site number (for the library's
        function, ``ring_express.h``, which reads and sets them as the hooks do)."""


class _Unrecorded(GraphHandle):
    """The handle of a wrapper that speaks another protocol version: its sites are not
    read (their fields may mean something else), its launches run unrecorded."""

    def site(self, raw: tuple) -> tuple:
        return raw

    def launch(self, site: Any, values: Sequence[Any]) -> None:
        pass

    def done(self, site: Any, values: Sequence[Any]) -> None:
        pass

    def precompile(self, layouts: Sequence[tuple], devices: Sequence[int]) -> int:
        return 0


def graph(origin: str | None, level: str, sync: bool, wrapper: str = "python", info: tuple = (),
          protocol: int | None = None, native: str | None = None, defers: bool = False,
          **newer: Any) -> GraphHandle:
    """The handle for one generated module (called once, at module import).

    Args:
        info: ``(key, value)`` pairs describing the graph (``kind``, ``compile_id``).
        protocol: the :data:`~aoti_debug.format.protocol.PROTOCOL_VERSION` the emitter
            spoke; None from wrappers of protocol 1, which did not pass it.
        native: the runtime library that summarises CPU tensors (``native_stats``),
            ``""`` where the compile could not build it, None for torch ops.
        defers: the wrapper calls ``pending()`` before whatever may write a tensor a side
            read (``codegen/manager.py``, ``PENDING_LINE``): its sides' stats launches
            inside CUDA graphs may wait for it; wrappers that do not pass it never defer.
        newer: arguments a later protocol may pass; such a wrapper is not recorded.
    """
    if protocol != PROTOCOL_VERSION:
        warn_once(f"protocol-{protocol}",
                  f"{origin or 'a compiled graph'} was generated by another aoti_debug version (site protocol "
                  f"{protocol or 1}, this runtime reads {PROTOCOL_VERSION}): its launches are not recorded; "
                  f"recompile it (e.g. clear the Inductor cache) to record them")
        return _Unrecorded(origin, level, sync, wrapper)
    if level == "stats" and _has_cuda():
        cuda_graphs.install()  # a graph captured under mode="reduce-overhead" records every replay
    return GraphHandle(origin, level, sync, wrapper, dict(info), native, defers)
