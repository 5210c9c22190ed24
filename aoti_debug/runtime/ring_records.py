"""The manifest lines of device-ring records written by the runtime library, without the GIL.

At level ``stats`` a CUDA launch side's records wait in the writer's queue for their
device ring segment (:mod:`.device_ring`). Once a segment's values are on the host, the
writer thread hands the runtime library (``codegen/native/ring_records.h``) one array
for a run of such records: per record its numbers (seq, launch, kernel call), the
address of its stats row and checksum in the segment's host copy, and the text of its
constant fields (graph ... numel), encoded here once per distinct value with
``format.writer.encode_record`` itself. The library writes the lines, stats and checksum
spelled as ``encode_record`` spells what ``device_ring.fill`` sets (``append_stats_json``,
the C++ runtime's own), in a ``ctypes.CDLL`` call that releases the GIL: the model's
thread runs while they are formatted. ``tests/test_ring_records.py`` compares the lines
with the dict path's byte for byte.

Most records come from planned launch sides (:class:`SidePlan`). The model's thread
appends the numbers of consecutive planned sides of one segment to one queued job
(:class:`SideRun`, ``Session.submit_planned``) as int64 entries the library reads as
they are: the writer gives it a run with one entry naming the segment's host copy and
one copy of the run's array, and runs no Python per side.

At level print the library also writes a planned side's print lines (the template holds
each record's print texts, ``format.schema.print_parts``), which the writer prints where
the dict path would have.

The dict path stays for what needs the record as a dict: level print's sides not
planned (their lines are printed from the records), the flight recorder (records pass
through its ring), a
record with any other field (the eager reference's ``extra``, an ``error``), a segment
that could not be read back, and a process without the library. A library that fails
warns once; the writer then uses the dict path.
"""

from __future__ import annotations

import array
import ctypes
import struct
import threading
from math import copysign
from typing import Any, Sequence

from torch import Tensor

from ..format.schema import print_parts, print_stats
from ..format.writer import encode_record
from . import device_ring
from .session import Job, warn_once

#: The function of the library (``library.cpp``) and the layout of its ``spec``
#: (``ring_records.h``: kRingLayout, the RingSlot header, kRingRecord numbers a record).
RECORDS_SYMBOL = "aoti_debug_rt_ring_records"
LAYOUT = 7
_HEADER = 7
#: Entry kinds (kRingEntryRecord, kRingEntrySide, kRingEntryLine, kRingEntrySideTaken,
#: kRingEntryBase, kRingEntryBaseSide).
_RECORD, _SIDE, _LINE, _SIDE_TAKEN, _BASE, _BASE_SIDE = 0, 1, 2, 3, 4, 5
#: The int64 of a kRingEntryBaseSide before its taken rows (kRingBaseSide), and their
#: bytes from its numbers (``array.frombytes`` of them: a third of ``array.extend``'s time).
_BASE_SIDE_LEN = 8
_PACK_BASE_SIDE = struct.Struct(f"={_BASE_SIDE_LEN}q").pack
#: Bytes of a line besides its constant texts: numbers, stats (7 values of at most 24
#: characters and their keys), checksum.
_LINE_BYTES = 400
#: ... and of a print line besides its two texts: the launch and the stats.
_PRINT_BYTES = 240
#: How a record's JSON starts and where its kernel call is, with the numbers zero.
_START = '{"seq":0,"launch":0,'
_CALL = ',"kernel_call":0,'
#: The keys a record the library writes may hold: protocol.record's and the tensor's
#: metadata (anything else, such as ``error`` or the eager reference's fields, takes the
#: dict path, where encode_record writes it behind ``numel``).
_PLAIN = frozenset(("seq", "launch", "graph", "wrapper", "kernel", "op", "kernel_call", "phase", "arg", "role",
                    "index", "site", "expr", "volatile", "kind", "dtype", "shape", "stride", "device", "numel",
                    "reused"))
_ABSENT = object()
_MAX_TEXTS = 1 << 16


class RingFill:
    """A ring record's ``finish``: sets its stats and checksum from row ``row`` of
    ``arrival`` (the dict path); ``lines``: the library's :class:`RingLines` that may
    write the record instead, or None."""

    __slots__ = ("arrival", "row", "lines")

    def __init__(self, arrival: Any, row: int, lines: "RingLines | None"):
        self.arrival = arrival
        self.row = row
        self.lines = lines

    def __call__(self, rec: dict) -> None:
        device_ring.fill(rec, self.arrival.values(), self.row)


#: The scalar types whose records a plan keeps (the record holds the value itself).
_PLAIN_SCALARS = (bool, int, float, type(None))


class SidePlan:
    """A CUDA launch side at level ``stats`` whose records differ from call to call only
    in their numbers (seq, launch, kernel call) and their tensors' stats: its tensors keep
    the device, dtype, shape and stride of the call the plan was made from, and its other
    values (numels, flags: ``None``, bool, int, float) keep their value (:meth:`matches`).
    A side holding lists or tuples is planned by its flattened values (``hooks._flatten``,
    one per record) and keeps their structure too. Unwritten inputs (metadata only) and
    scalars are *fixed* records, the same at every call; CPU tensors the runtime library
    reads (``host``: an attention kernel's RNG seeds beside its CUDA outputs) are read at
    every call in the model's thread, as the full path reads them; inputs taken from their
    producer's record (``reused``) take its row of that call; the others take a ring row
    each on one CUDA device, in record order. Made by the hooks from that call's records;
    a later call of the side is one :class:`RingSide` job, with no record dict made in the
    model's thread."""

    __slots__ = ("site", "records", "rows", "meta", "ring_at", "device", "lines", "texts", "kept", "structure",
                 "host", "reused", "after", "ring_count", "fast", "prints")

    def __init__(self, site: Any, records: list[dict], values: list[Any], in_ring: list[bool],
                 lines: "RingLines | None", structure: list | None = None, host: list[int] = (),
                 reused: tuple[tuple[int, int, int], ...] = (), prints: bool = False):
        self.site = site
        self.prints = prints
        """Level print: each call's records are printed too (``format.schema.print_line``),
        by the library with its lines (its template holds the print texts) or, on the
        dict path, by the writer as it finishes the side (``Session._finished``)."""
        self.host = tuple(host)
        self.reused = tuple(reused)
        """``(position, producer site, its after position)`` of each record whose stats
        are its producer's row of the same call (``SiteArg.reuse``)."""
        self.after = bool(records) and records[0].get("phase") == "after"
        """The positions of the records whose tensors the hooks summarise on the host at
        every call (their stats and checksum come with the :class:`RingSide`)."""
        self.structure = structure
        """The structure of the side's values (``hooks._flatten``'s: lists and tuples with
        their lengths, nested), or None: no value is a list or tuple."""
        self.records = tuple(dict(rec) for rec in records)
        """Each record's fields, its numbers as the first call's (set per call)."""
        rows: list[int | None] = []
        meta: list[tuple] = []
        next_row = 0
        for v, ring in zip(values, in_ring):
            if isinstance(v, Tensor):
                meta.append((v.dtype, v.shape, v.stride(), v.device))
            elif type(v) in _PLAIN_SCALARS:
                meta.append((None, type(v), v, None))
            else:
                raise ValueError(f"a plan keeps no {type(v).__name__} value")
            rows.append(next_row if ring else None)
            next_row += ring
        self.rows = tuple(rows)
        """The ring row of each record, from the side's first (None: a fixed or host record)."""
        self.ring_count = next_row
        """How many rows of the ring the side takes."""
        self.meta = tuple(meta)
        self.ring_at = None if all(in_ring) else tuple(i for i, ring in enumerate(in_ring) if ring)
        """The positions of the values the ring summarises (None: all)."""
        self.device = next((v.device for v, ring in zip(values, in_ring) if ring), None)
        """The device of the ring values (None: the side has none, every tensor is taken
        from its producer's row)."""
        self.lines = lines
        self.texts: tuple | None = None
        """The library's template of its records (:meth:`RingLines.template`): made once,
        and kept while the plan lives (queued :class:`SideRun` entries point into it)."""
        self.kept: tuple = (None, None, None)
        """``(ring, tensor addresses, launches)``, set as one value (threads running the
        graph on other streams replace it): the stats kernel's kept launches
        (``fused_stats.kept_launches``) for the tensors at those addresses into that ring
        (its device and stream), None (not kept yet) or ``()`` (never: the kernel reads a
        copy). The hooks repeat them while the side's tensors stay where they were."""
        self.fast: tuple | bool | None = None
        """``(ring, *fused_stats.side_spec)`` of :attr:`kept` (the library's C function checks
        the side and repeats its launches in one call; ring None: a side with no stats
        kernel, whose values it checks alone), None (not made yet) or False (it cannot take
        this side); set again whenever :attr:`kept` is."""

    def matches(self, values: Any, structure: list | None = None) -> bool:
        """Whether ``values`` (flattened, in record order) are what the plan was made from:
        tensors with its devices, dtypes, shapes and strides, and the same scalars, held in
        the same ``structure`` (lists and tuples of the same lengths, nested alike)."""
        meta = self.meta
        if len(values) != len(meta) or (structure is not self.structure and structure != self.structure):
            return False  # (None is None: a side with no list, the hot path)
        for v, (dtype, shape, stride, device) in zip(values, meta):
            if dtype is None:  # a scalar: shape is its type, stride its value
                if type(v) is not shape or v != stride or \
                        (shape is float and copysign(1.0, v) != copysign(1.0, stride)):
                    return False  # (-0.0 == 0.0, and their records differ)
            elif type(v) is not Tensor and not isinstance(v, Tensor):
                return False
            elif v.dtype is not dtype or v.shape != shape or v.device != device or v.stride() != stride:
                return False
        return True

    def ring_values(self, values: Any) -> Any:
        """The values the ring summarises, in record order (of ``values``, flattened)."""
        at = self.ring_at
        return values if at is None else [values[i] for i in at]


class RingSide:
    """One call of a planned side (:class:`SidePlan`) as one writer job's ``finish``:
    its first record number, launch, kernel call, first ring row (the side's rows are
    consecutive, in record order), ``host``: the ``(stats, checksum)`` of each of the
    plan's host records, in its order (None: it has none), and ``reused``: the
    ``(arrival, row)`` of each of its records taken from a producer, in the plan's order."""

    __slots__ = ("plan", "seq", "launch", "call", "arrival", "row", "lines", "host", "reused")

    def __init__(self, plan: SidePlan, seq: int, launch: int, call: int, arrival: Any, row: int,
                 host: list[tuple] | None = None, reused: list[tuple[Any, int]] | None = None):
        self.plan = plan
        self.seq = seq
        self.launch = launch
        self.call = call
        self.arrival = arrival
        self.row = row
        self.lines = plan.lines
        self.host = host
        self.reused = reused

    def record(self, k: int) -> dict:
        """Record ``k`` with this call's numbers (and stats, a host record): complete but
        for a ring record's stats."""
        rec = self.plan.records[k].copy()
        rec["seq"], rec["launch"], rec["kernel_call"] = self.seq + k, self.launch, self.call
        if self.host is not None and k in self.plan.host:
            rec["stats"], rec["checksum"] = self.host[self.plan.host.index(k)]
        return rec

    @property
    def prints(self) -> bool:
        """Its records are printed too (level print)."""
        return self.plan.prints

    def jobs(self) -> list[Job]:
        """The side's records as the dict path's jobs (``Session._finish``): a ring record
        waiting for its row (:class:`RingFill`), the others complete."""
        arrival = self.arrival
        taken = self._taken()
        jobs = []
        for k, at in enumerate(self.plan.rows):
            if at is not None:
                jobs.append(Job(self.record(k), arrival, RingFill(arrival, self.row + at, None)))
            elif k in taken:
                producer, row = taken[k]
                jobs.append(Job(self.record(k), producer, RingFill(producer, row, None)))
            else:
                jobs.append(Job(self.record(k)))
        return jobs

    def _taken(self) -> dict[int, tuple[Any, int]]:
        """``{position: (arrival, row)}`` of the records taken from their producers."""
        if not self.reused:
            return {}
        return {k: found for (k, _p, _at), found in zip(self.plan.reused, self.reused)}


class SideRun:
    """Consecutive planned sides of one arrival as one writer job's ``finish``
    (``Session.submit_planned``): sides of plans of one :class:`RingLines` with no host
    records whose taken rows, if any, are rows of that arrival too. The model's thread
    appends each side's numbers (:meth:`add`) until the writer takes the job; later sides
    start another run. The writer hands the library ``entries`` as they are, after one
    kRingEntryBase naming the arrival's host copy (:meth:`RingLines.encode`)."""

    __slots__ = ("arrival", "lines", "entries", "plans", "size")

    def __init__(self, arrival: Any, lines: "RingLines"):
        self.arrival = arrival
        self.lines = lines
        self.entries = array.array("q")
        """A kRingEntryBaseSide per side (``ring_records.h``): its first seq, launch, kernel
        call, first row, its plan's template (address, records), the number of its taken
        rows and their rows."""
        self.plans: list[SidePlan] = []
        """Each side's plan, in order: they hold the templates ``entries`` point into."""
        self.size = 0
        """Bytes the sides' lines may take."""

    @classmethod
    def whole(cls, arrival: Any, lines: "RingLines", entries: array.array, plans: list[SidePlan],
              size: int) -> "SideRun":
        """A run made in one piece (a CUDA graph's replay: ``cuda_graphs.Replay``):
        ``entries`` as :meth:`add` would have appended them for ``plans``."""
        run = cls(arrival, lines)
        run.entries, run.plans, run.size = entries, plans, size
        return run

    def add(self, plan: SidePlan, seq: int, launch: int, call: int, row: int, taken: tuple[int, ...] = ()) -> None:
        """One call of ``plan``, whose template :meth:`RingLines.template` made: its first
        record number, launch, kernel call, first row and the rows its taken records take
        (in the plan's ``reused`` order), all in this run's arrival."""
        texts = plan.texts
        if taken:
            self.entries.frombytes(struct.pack(f"={_BASE_SIDE_LEN + len(taken)}q",
                                               *self.entry(plan, row, taken, seq, launch, call)))
        else:
            self.entries.frombytes(_PACK_BASE_SIDE(_BASE_SIDE, seq, launch, call, row, texts[2], texts[3], 0))
        self.plans.append(plan)
        self.size += texts[4]

    @staticmethod
    def entry(plan: SidePlan, row: int, taken: Sequence[int] = (), seq: int = 0, launch: int = 0,
              call: int = 0) -> tuple[int, ...]:
        """The kRingEntryBaseSide of one call of ``plan`` (its template made): what :meth:`add`
        appends (a side without taken rows packed at once, the hot path)."""
        texts = plan.texts
        return (_BASE_SIDE, seq, launch, call, row, texts[2], texts[3], len(taken), *taken)

    def sides(self) -> list[RingSide]:
        """The run's sides as the :class:`RingSide` each would have been queued as."""
        out = []
        e = self.entries
        at = 0
        arrival = self.arrival
        for plan in self.plans:
            n = e[at + 7]
            taken = [(arrival, row) for row in e[at + _BASE_SIDE_LEN: at + _BASE_SIDE_LEN + n]] if plan.reused else None
            out.append(RingSide(plan, e[at + 1], e[at + 2], e[at + 3], arrival, e[at + 4], None, taken))
            at += _BASE_SIDE_LEN + n
        return out

    @property
    def prints(self) -> bool:
        """Some of its sides' records are printed too (level print)."""
        return any([plan.prints for plan in self.plans])

    def jobs(self) -> list[Job]:
        """The run's records as the dict path's jobs, in order (:meth:`RingSide.jobs`)."""
        return [job for side in self.sides() for job in side.jobs()]


_template_lock = threading.Lock()


class RingLines:
    """One runtime library's ring-record function and the constant texts it was given."""

    def __init__(self, library: Any):
        fn = ctypes.CDLL(library.path, mode=ctypes.RTLD_LOCAL, handle=library._lib._handle)[RECORDS_SYMBOL]
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p]
        self._fn = fn  # a CDLL function: the GIL is released for the call
        self.failed = False
        self._ready: Any = None
        """The last arrival whose values were found on the host."""
        #: encode_record's key of a record's constant fields -> (head, body, their addresses)
        self._texts: dict[tuple, tuple] = {}

    def takes(self, job: Job) -> bool:
        """Whether the library may write ``job``'s line: a plain record whose values are on
        the host (this waits for them, as the dict path's ``synchronize`` does)."""
        if self.failed or (job.record is not None and not _PLAIN.issuperset(job.record)):
            return False  # (a RingSide's or SideRun's records are plain, or encoded whole here: SidePlan)
        arrival = job.event
        try:
            if arrival is not self._ready:
                arrival.host()
                self._ready = arrival
            if type(job.finish) is RingSide and job.finish.reused:  # the rows it takes, maybe from earlier segments
                for producer, _at in job.finish.reused:
                    if producer is not arrival:
                        producer.host()
        except Exception:
            return False  # not readable (the dict path records the error), or no host copy
        return True

    def _text(self, rec: dict, key: tuple) -> tuple:
        """The constant texts of ``rec`` as ``(head, body, head address, length, body
        address, length, bytes a line may take)``, encoded once per ``key``."""
        head, body = _split({k: v for k, v in rec.items() if k in _PLAIN})
        found = (head, body, _address(head), len(head), _address(body), len(body), len(head) + len(body) + _LINE_BYTES)
        if len(self._texts) >= _MAX_TEXTS:
            self._texts.clear()  # texts in use are held by their callers
        self._texts[key] = found
        return found

    def _texts_of(self, rec: dict) -> tuple:
        key = (rec["graph"], rec["wrapper"], rec["kernel"], rec["op"], rec["phase"], rec["arg"], rec["role"],
               rec["index"], rec.get("site", _ABSENT), rec.get("expr", _ABSENT), rec.get("volatile", _ABSENT),
               rec["kind"], rec["dtype"], tuple(rec["shape"]), tuple(rec["stride"]), rec["device"], rec["numel"],
               rec.get("reused", _ABSENT))
        return self._texts.get(key) or self._text(rec, key)

    def run(self, arrival: Any) -> SideRun:
        """A new, empty run of planned sides of ``arrival`` written by this library."""
        return SideRun(arrival, self)

    def template(self, plan: SidePlan) -> tuple:
        """``plan.texts`` (:meth:`_plan_texts`), made at its first use, by the model's
        thread (a planned side appended to a :class:`SideRun`) or the writer's (a
        :class:`RingSide`), and never replaced: queued runs hold its template's address."""
        found = plan.texts
        if found is None or found[0] is not self:
            with _template_lock:  # (two threads running one graph: one template)
                found = plan.texts
                if found is None or found[0] is not self:
                    found = plan.texts = self._plan_texts(plan)
        return found

    def _plan_texts(self, plan: SidePlan) -> tuple:
        """A planned side's records as the library's template (``ring_records.h``,
        kRingEntrySide): ``(self, template, its address, records, bytes a call may take,
        the texts it points into (one per record), its print texts)``; the print texts
        (``format.schema.print_parts``) of a plan at level print, or none (length 0)."""
        template = array.array("q")
        texts = []
        printed = []  # (the print texts: kept alive with the template)
        size = 0
        taken = {k: j for j, (k, _p, _at) in enumerate(plan.reused)}
        for k, (rec, at) in enumerate(zip(plan.records, plan.rows)):
            fixed = at is None and k not in taken
            if fixed:  # a fixed record (a scalar, an unwritten input): its line has no stats
                head, body = _split(rec)
                found = (head, body, _address(head), len(head), _address(body), len(body),
                         len(head) + len(body) + _LINE_BYTES)
            else:
                found = self._texts_of(rec)
            texts.append(found)
            size += found[6]
            row = at if at is not None else -2 - taken[k] if k in taken else -1  # (-2 - j: taken row j)
            template.extend((k, row, found[2], found[3], found[4], found[5]))
            if plan.prints:
                prefix, suffix, tensor = print_parts(rec)
                if fixed and tensor:  # memory no launch wrote: no stats, written as such
                    suffix += print_stats({})
                before, after = prefix.encode(), suffix.encode()
                printed.append((before, after))
                size += len(before) + len(after) + _PRINT_BYTES
                template.extend((_address(before), len(before), _address(after), len(after)))
            else:
                template.extend((0, 0, 0, 0))
        return self, template, template.buffer_info()[0], len(texts), size, texts, printed

    @staticmethod
    def _host_side(fill: "RingSide", found: tuple, stats: int, sums: int, add: Any, keep: list) -> int:
        """The entries of a planned side with host records (``SidePlan.host``) or records
        taken from their producers (``SidePlan.reused``): a record entry for each ring
        record and each taken one (its producer's row), this call's line for each host
        record (its stats came with the side) and for each fixed one. Their number."""
        host = fill.plan.host
        taken = fill._taken()
        for k, (texts, at) in enumerate(zip(found[5], fill.plan.rows)):
            if at is not None:
                add((_RECORD, fill.seq + k, fill.launch, fill.call, stats + 64 * at, sums + 8 * at, texts[2],
                     texts[3], texts[4], texts[5]))
                continue
            if k in taken:
                producer, row = taken[k]
                p_stats, p_sums = producer.host()
                add((_RECORD, fill.seq + k, fill.launch, fill.call, p_stats + 64 * row, p_sums + 8 * row, texts[2],
                     texts[3], texts[4], texts[5]))
                continue
            if k in host:
                line = encode_record(fill.record(k)).encode("ascii") + b"\n"
            else:
                line = b'{"seq":%d,"launch":%d,%s,"kernel_call":%d,%s}\n' % (fill.seq + k, fill.launch, texts[0],
                                                                             fill.call, texts[1])
            keep.append(line)
            add((_LINE, _address(line), len(line)))
        return len(found[5])

    def encode(self, jobs: list[Job]) -> tuple[bytes, bytes] | None:
        """The manifest lines of ``jobs`` (each :meth:`takes`), in their order, and the print
        lines of those of planned sides at level print (UTF-8); None when the library
        failed (one warning; the caller's dict path writes them, as it will all later
        records)."""
        spec = array.array("q", (LAYOUT, 0, 0, 0, 0, 0, 0))
        add = spec.extend
        keep = []
        size = 0
        count = 0
        last: Any = None
        try:
            for job in jobs:
                rec, fill = job.record, job.finish
                if fill.arrival is not last:
                    last = fill.arrival
                    stats, sums = last.host()
                if type(fill) is SideRun:  # planned sides of one segment: its host copy, then their entries
                    add((_BASE, stats, sums, last.row_count()))
                    add(fill.entries)
                    count += 1 + len(fill.plans)
                    size += fill.size
                    continue
                row = fill.row
                if rec is None:  # a planned side: one entry, its records' texts the plan's template
                    found = self.template(fill.plan)
                    size += found[4]
                    if not fill.plan.host and not fill.plan.reused:
                        add((_SIDE, fill.seq, fill.launch, fill.call, stats + 64 * row, sums + 8 * row, found[2],
                             found[3]))
                        count += 1
                    elif not fill.plan.host:
                        # Its taken rows, in its own segment's host copy or an earlier one's: one entry.
                        taken = array.array("q")
                        for producer, at in fill.reused:
                            p_stats, p_sums = (stats, sums) if producer is last else producer.host()
                            taken.extend((p_stats + 64 * at, p_sums + 8 * at))
                        keep.append(taken)
                        add((_SIDE_TAKEN, fill.seq, fill.launch, fill.call, stats + 64 * row, sums + 8 * row,
                             found[2], found[3], taken.buffer_info()[0], len(fill.reused)))
                        count += 1
                    else:  # with host records (this call's CPU stats; taken ones too): an entry per record
                        count += self._host_side(fill, found, stats + 64 * row, sums + 8 * row, add, keep)
                else:
                    found = self._texts_of(rec)
                    size += found[6]
                    add((_RECORD, rec["seq"], rec["launch"], rec["kernel_call"], stats + 64 * row, sums + 8 * row,
                         found[2], found[3], found[4], found[5]))
                    count += 1
                keep.append(found)
            out = bytearray(size)
            spec[1] = len(spec)
            spec[2] = count
            spec[3] = _address_of(out)
            spec[4] = size
            rc = self._fn(spec.buffer_info()[0])
            if rc != 0:
                raise RuntimeError(f"{RECORDS_SYMBOL} returned {rc}")
            view = memoryview(out)
            return bytes(view[:spec[5]]), bytes(view[spec[5]:spec[6]])
        except Exception as e:
            self.failed = True
            warn_once(f"ring-records-{type(e).__name__}", f"the runtime library could not write device-ring "
                                                           f"records, encoding them in Python: {e}")
            return None


def _split(rec: dict) -> tuple[bytes, bytes]:
    """``encode_record``'s line of ``rec`` as the texts around its numbers (seq, launch,
    kernel call): ``(head, body)``, the line being ``{"seq":S,"launch":L,`` head
    ``,"kernel_call":C,`` body ``}``. A fixed record's (a planned side's scalar or
    unwritten input) is written so; a ring record's body is followed by its stats."""
    text = encode_record({**rec, "seq": 0, "launch": 0, "kernel_call": 0})
    if not text.startswith(_START):
        raise ValueError(f"records start otherwise than the runtime library writes them: {text[:40]!r}")
    at = text.index(_CALL)  # a key: quotes inside string values are escaped
    return text[len(_START):at].encode("ascii"), text[at + len(_CALL):-1].encode("ascii")


def _address(text: bytes) -> int:
    return ctypes.cast(text, ctypes.c_void_p).value or 0


def _address_of(buf: bytearray) -> int:
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf)) if buf else 0


_lock = threading.Lock()
_UNSET: Any = object()


def for_library(library: Any) -> RingLines | None:
    """The ring-record writer of a loaded :class:`~aoti_debug.runtime.native_stats.Library`
    (one per library), or None when it has none (a library built from older sources)."""
    if library is None:
        return None
    found = getattr(library, "ring_lines", _UNSET)
    if found is not _UNSET:
        return found
    with _lock:
        if getattr(library, "ring_lines", _UNSET) is _UNSET:
            try:
                library.ring_lines = RingLines(library)
            except (AttributeError, OSError):
                library.ring_lines = None
        return library.ring_lines
