"""Device-ring records written by the runtime library from the writer thread
(runtime/ring_records.py, native/ring_records.h): the same manifest, byte for byte, as
the record dicts' path, in record order, for every kind of side; the dict path where a
record needs it (print, extra fields, errors, no library, a failing library)."""

from __future__ import annotations

import functools
import os
import threading
import types

import pytest
import torch

import aoti_debug
from aoti_debug.format import schema, writer
from aoti_debug.format.protocol import PROTOCOL_VERSION, Site, SiteArg
from aoti_debug.runtime import device_ring, hooks, ring_records, session
from aoti_debug.runtime.stats import device_summary

pytestmark = pytest.mark.quick  # compiles nothing: make check runs it

#: Stats rows the fake ring writes for every third tensor: what a device may hand back.
_ODD_ROWS = [
    (-0.0, 0.0, -0.0, 0.0, 0.0, 0.0, 0.0),
    (float("nan"), float("nan"), float("nan"), float("nan"), float("nan"), 12.0, 0.0),
    (-float("inf"), float("inf"), float("inf"), float("inf"), float("inf"), 0.0, 7.0),
    (-1.7976931348623157e308, 1.7976931348623157e308, 1e300, 5e-324, 1e22, 0.0, 2.0 ** 40),
    (1.0, 3.0, 0.1 + 0.2, 1 / 3, 123456789.125, 1.0, 2.0),
]


class _Done:
    def synchronize(self):
        pass


class _Broken:
    def synchronize(self):
        raise RuntimeError("an illegal memory access was encountered")


class _HostRing:
    """The device ring's contract on CPU tensors, through the real :class:`device_ring.Arrival`:
    rows summarised into a host segment now, readable only once a flush ships it."""

    def __init__(self, cap: int = 1 << 14, odd: bool = True, broken: bool = False, ship_every: int = 0):
        self.cap = cap
        self.odd = odd
        self.broken = broken
        self.ship_every = ship_every  # segments of this many rows, shipped when full (0: one segment)
        self.total = 0  # rows made in all segments (the odd rows' pattern follows it)
        self._fresh()

    def _fresh(self):
        self.segment = types.SimpleNamespace(cap=self.cap, host=torch.zeros(9 * self.cap, dtype=torch.float64),
                                             shipped_rows=0, release=lambda: None)
        self.arrival = device_ring.Arrival(self.segment)
        self.used = 0

    def rows(self, handle, device, tensors):
        """``GraphHandle._ring_rows``: the rows of a side (a planned side's too)."""
        if self.ship_every and self.used >= self.ship_every:
            self.ship()
            self._fresh()
        seg, first = self.segment, self.used
        sums = seg.host[8 * seg.cap:].view(torch.int64)
        for j, t in enumerate(tensors):
            s, c = device_summary(t)
            row = s.tolist()
            at, n = first + j, self.total + j
            if self.odd and n % 3 == 2:
                row = [*_ODD_ROWS[(n // 3) % len(_ODD_ROWS)], 1.0]
            seg.host[8 * at: 8 * at + 8] = torch.tensor(row, dtype=torch.float64)
            sums[at] = -int(c) - 1 if self.odd and n % 2 else int(c)  # negative checksums too
        self.used += len(tensors)
        self.total += len(tensors)
        return self.arrival, first

    def stats(self, handle, items, rows):
        """``GraphHandle._ring_stats``, which asks for CUDA tensors."""
        arrival, first = self.rows(handle, None, [items[i][1] for i in rows])
        return arrival, {i: first + j for j, i in enumerate(rows)}

    def ship(self):
        self.segment.shipped_rows = self.used
        self.arrival.ship(_Broken() if self.broken else _Done(), self.segment.host)


def _arg(name, role="input", kind="tensor", expr=None, unwritten=False, volatile=()):
    return SiteArg(name, role, kind, expr or name, unwritten, volatile)


@functools.cache
def _sites() -> tuple[Site, ...]:
    """The sites of :func:`_sides`, made once as a wrapper makes them (at its import)."""
    mm = Site("", "extern_kernels.addmm", "addmm", (_arg("b"), _arg("x"), _arg("w", expr="reinterpret_tensor(w, (16, 16))")),
              (_arg("buf0", "output"),), None, 1, "")
    fused = Site("", "triton_per_fused_\"layer_norm\u00e9_1", "k", (_arg("buf0", "inout"), _arg("ks0", kind="symint"),
                 _arg("eps", kind="scalar"), _arg("none", kind="unknown"), _arg("buf9", unwritten=True)),
                 (_arg("buf0", "inout"), _arg("outs", "output", "unknown", volatile=(("[1]", "rng seed"),))), None, 2, "")
    sub = Site("cond_true_0", "triton_poi_fused_add_2", "k", (_arg("xs", kind="unknown"),), (_arg("y", "output"),),
               None, -1, "")
    return mm, fused, sub


def _sides(step: int = 0):
    """Transformer-like launch sides: (site, before values, after values)."""
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(8, 16, generator=g), torch.randn(16, 16, generator=g), torch.randn(16, generator=g)
    mm, fused, sub = _sites()
    return [
        (mm, [b, x, w.t()], [torch.randn(8, 16, generator=g)]),
        (fused, [x.bfloat16(), 5, 1e-5, None, torch.empty(3)],
         [x.half(), (torch.ones(2), 7, None, (torch.zeros(0, 3),))]),
        (sub, [[x[::2], torch.arange(6), x[1]]], [torch.tensor(2.5)]),
    ]


def _host_stats(host: bool):
    """``GraphHandle._host_stats`` reading no tensor (every tensor takes the fake ring), or
    with ``host`` the int64 tensors alone, as the runtime library reads a CUDA side's CPU
    tensors (an attention kernel's RNG seeds) beside the ring's."""
    real = hooks.GraphHandle._host_stats

    def read(self, tensors, shapes=None, strides=None):
        at = [i for i, t in enumerate(tensors) if host and t.dtype == torch.int64]
        out = [None] * len(tensors)
        for i, found in zip(at, real(self, [tensors[i] for i in at])):
            out[i] = found
        return out

    return read


_runs = [0]


def _run(library, native: bool, steps: int = 3, level: str = "stats", extra=None, broken=False, odd=True,
         cpu_side: bool = True, plans: bool = True, sides=None, host: bool = False, ship_every: int = 0,
         hold_writer: bool = False) -> bytes:
    """The manifest bytes of ``steps`` calls of the sides, with ring records written by the
    library (``native``) or by the dicts, in a run directory of their own; ``plans``
    False: no side is made from a plan (``GraphHandle._ring_side``), every record is a dict
    in the model's thread first; ``host``: int64 tensors read by the runtime library (:func:`_host_stats`);
    ``ship_every``: a segment is shipped once it holds that many rows (0: at the flush alone);
    ``hold_writer``: the writer thread starts at the flush, finding every segment shipped."""
    _runs[0] += 1  # a directory of its own: two runs of one process in one may share a run id
    os.environ["AOTI_DEBUG_DIR"] = os.path.join(os.environ["AOTI_DEBUG_DIR"],
                                                f"{'native' if native else 'dicts'}-{'plans' if plans else 'full'}"
                                                f"-{_runs[0]}")
    session.reset()
    ring = _HostRing(odd=odd, broken=broken, ship_every=ship_every)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(hooks.GraphHandle, "_ring_stats", lambda self, items, rows: ring.stats(self, items, rows))
        mp.setattr(hooks.GraphHandle, "_ring_rows", lambda self, device, tensors: ring.rows(self, device, tensors))
        mp.setattr(hooks.GraphHandle, "_planned_rows",
                   lambda self, plan, ts: ring.rows(self, plan.device, plan.ring_values(ts)))
        if not plans:
            mp.setattr(hooks.GraphHandle, "_ring_side", lambda self, *a: False)
        mp.setattr(hooks.GraphHandle, "_host_stats", _host_stats(host))
        mp.setattr(session, "BEFORE_FLUSH", [ring.ship])
        start = session.Session._start
        if hold_writer:
            mp.setattr(session.Session, "_start", lambda self: None)
        g = hooks.graph(None, level, False, protocol=PROTOCOL_VERSION, native=library.path if library else None)
        g._records = None  # CPU sides as dicts: their tensors take the (fake) ring
        if not native:
            g._lines = None
        plain = Site("", "cpp_fused_scalar_3", "k", (_arg("n", kind="scalar"),), (_arg("m", kind="scalar"),), None, 3, "")
        known: dict[int, Site] = {}
        for step in range(steps):  # every site literal first, as a wrapper's import passes them
            for site, _before, _after in (sides or _sides)(step):
                if id(site) not in known:
                    known[id(site)] = g.site(tuple(site))
        for step in range(steps):
            for site, before, after in (sides or _sides)(step):
                site = known[id(site)]
                g.launch(site, before)
                if after is not None:  # (None: the launch never returned)
                    g.done(site, after, extra)
                if cpu_side:  # records with nothing to wait for, between ring records
                    g.launch(plain, (3,))
                    g.done(plain, (4.5,))
        if hold_writer:
            ring.ship()
            start(session.current())
        aoti_debug.flush()
        path = session.dump_path()
        with open(os.path.join(path, schema.MANIFEST_FILE), "rb") as f:
            data = f.read()
    finally:
        mp.undo()
        session.reset()
        os.environ["AOTI_DEBUG_DIR"] = os.path.dirname(os.environ["AOTI_DEBUG_DIR"])
    return data


def _records_of(job) -> int:
    """The records of a writer job: one, a planned side's, or those of a run of sides."""
    if job.record is not None:
        return 1
    if type(job.finish) is ring_records.SideRun:
        return sum(len(plan.records) for plan in job.finish.plans)
    return len(job.finish.plan.records)


def _count_native(monkeypatch) -> list[int]:
    """Records given to the library to write (a planned side's job holds all of its records)."""
    calls = [0]
    encode = ring_records.RingLines.encode

    def counted(self, jobs):
        calls[0] += sum(map(_records_of, jobs))
        return encode(self, jobs)

    monkeypatch.setattr(ring_records.RingLines, "encode", counted)
    return calls


def test_the_library_writes_the_dict_paths_manifest_byte_for_byte(library, fresh_session, monkeypatch):
    calls = _count_native(monkeypatch)
    native = _run(library, True)
    assert calls[0] > 30, "the library wrote no ring records"
    dicts = _run(library, False)
    assert native == dicts
    import json

    recs = [json.loads(line) for line in native.decode("ascii").splitlines()]
    assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))  # record order
    stats = [r["stats"] for r in recs if "stats" in r]
    assert {"min": 0.0 * -1, "max": 0.0, "mean": -0.0, "std": 0.0, "absmax": 0.0, "nan": 0, "inf": 0} in stats
    assert any(s["mean"] == "inf" for s in stats) and any(s["min"] is None for s in stats)
    assert any(s["inf"] == 2 ** 40 for s in stats)
    assert b'"min":-0.0' in native and b'"max":1.7976931348623157e+308' in native


@pytest.mark.parametrize("level,sides,ship_every", [("stats", None, 0), ("print", None, 0), ("stats", "taking", 0),
                                                    ("stats", "taking", 40)],
                         ids=["sides", "print", "taking", "taking-segments"])
def test_a_call_of_many_records_over_several_segments_is_the_dict_paths(library, fresh_session, monkeypatch, capfd,
                                                                          level, sides, ship_every):
    """One library call of many records (the writer started at the flush finds every
    segment shipped): planned sides, sides taking their producers' rows, segments shipped
    as they fill (a call holding several segments, each entry read from its segment's
    base), print lines: the bytes of the dict path's records and prints."""
    calls = []
    encode = ring_records.RingLines.encode
    monkeypatch.setattr(ring_records.RingLines, "encode", lambda self, jobs: calls.append(
        (sum(map(_records_of, jobs)), len({id(j.event) for j in jobs}))) or encode(self, jobs))
    made = _reuse_sides(True) if sides else None
    kw = dict(steps=12, level=level, cpu_side=False, sides=made, ship_every=ship_every, hold_writer=True)
    native = _run(library, True, **kw)
    native_prints = capfd.readouterr().err
    records, segments = max(calls)
    assert records > 64, f"no call of many records: {calls}"
    assert segments > 1 if ship_every else segments == 1
    assert native == _run(library, False, **kw)
    assert native_prints == capfd.readouterr().err
    if level == "print":
        assert native_prints.count("\n") == native.count(b"\n")


def test_print_level_plans_a_side_taking_every_input(library, fresh_session, monkeypatch, capfd):
    """A side whose tensors are all taken from their producers' rows (mul's inputs) is
    planned at level print as at level stats (it was not: every call took the full
    path and printed from the dicts); its lines and print lines are the full path's."""
    planned = _count_planned(monkeypatch)
    kw = dict(steps=4, level="print", cpu_side=False, sides=_reuse_sides(True))
    native = _run(library, True, **kw)
    err = capfd.readouterr().err
    assert ("triton_poi_fused_mul_1", "before", 3) in planned, planned
    assert len(planned) == 3 * 6, planned  # steps 2-4, both sides of the three launches
    assert native == _run(library, True, plans=False, **kw)
    assert err == capfd.readouterr().err
    assert err.count("\n") == native.count(b"\n")


def test_writer_keys_agree():
    assert ring_records._PLAIN == writer._KEPT


def test_ring_records_alone_in_order(library, fresh_session, monkeypatch):
    calls = _count_native(monkeypatch)
    native = _run(library, True, steps=5, cpu_side=False, odd=False)
    assert calls[0] > 0
    assert native == _run(library, False, steps=5, cpu_side=False, odd=False)


def test_extra_fields_take_the_dict_path(library, fresh_session, monkeypatch):
    calls = _count_native(monkeypatch)
    extra = [{"model_dtype": "float64"}, {"eager_error": None}]
    native = _run(library, True, extra=extra)
    assert native == _run(library, False, extra=extra)
    assert b'"model_dtype":"float64"' in native
    assert calls[0] > 0  # the sides without extra fields (before) still go to the library


@pytest.mark.parametrize("host", [False, True], ids=["ring", "host"])
def test_print_level_prints_planned_sides_as_the_full_path_does(library, fresh_session, monkeypatch, capfd, host):
    """At level print the library writes a planned side's print lines with its manifest
    lines: stderr and the manifest byte for byte as the dict path of the same plans and
    as the full path (no plans) give them, in launch order, odd stats included (-0, NaN,
    +-inf, the largest doubles). A side with tensors read on the host is not planned."""
    calls = _count_native(monkeypatch)
    planned = _count_planned(monkeypatch)
    native = _run(library, True, level="print", steps=4, host=host)
    err = capfd.readouterr().err
    assert calls[0] > 30, "the library wrote no planned side's records"
    assert len(planned) == (3 * 5 if host else 3 * 6), planned  # (with host: the list side is not planned)
    assert native == _run(library, False, level="print", steps=4, host=host)
    assert err == capfd.readouterr().err
    assert native == _run(library, True, level="print", steps=4, host=host, plans=False)
    assert err == capfd.readouterr().err
    lines = err.splitlines()
    assert len(lines) == native.count(b"\n") and all(line.startswith("[aoti_debug] ") for line in lines)
    assert any("min=-0 max=0 mean=-0" in line for line in lines) and any("min=- max=-" in line for line in lines)
    assert any("mean=inf" in line for line in lines) and any("max=1.79769e+308" in line for line in lines)
    assert any("layer_norm\u00e9" in line for line in lines)  # a kernel name beyond ASCII


def test_no_side_is_planned_at_level_save(library, fresh_session, monkeypatch):
    """Level save outside AOTI_DEBUG_SAVE_LAUNCHES summarises a side in the ring, as
    stats does, but never plans it: a later launch may be one to save."""
    import json

    from aoti_debug import config

    planned = _count_planned(monkeypatch)
    monkeypatch.setenv(config.ENV_SAVE_LAUNCHES, "10")  # (the last step's addmm: 3 launches a step)
    data = _run(library, True, level="save", steps=4, cpu_side=False)
    assert planned == []
    recs = [json.loads(line) for line in data.decode().splitlines()]
    saved = [r for r in recs if r["launch"] == 10 and r["kind"] == "tensor"]
    assert saved and all("file" in r for r in saved), saved
    assert all("skipped" in r for r in recs
               if r["launch"] != 10 and r["kind"] == "tensor" and not r.get("uninitialised"))


def test_a_ring_that_cannot_be_read_records_the_error(library, fresh_session, monkeypatch, capfd):
    native = _run(library, True, broken=True)
    assert native == _run(library, False, broken=True)
    assert b"illegal memory access" in native


def test_without_the_library_the_dicts_write(fresh_session, library, monkeypatch):
    monkeypatch.setattr(hooks.native_stats, "for_graph", lambda path: None)
    calls = _count_native(monkeypatch)
    native = _run(library, True)
    assert calls[0] == 0
    assert native == _run(library, False)
    assert ring_records.for_library(None) is None
    assert ring_records.for_library(types.SimpleNamespace(path="/nonexistent.so")) is None


def test_a_failing_library_warns_once_and_the_dicts_write(library, fresh_session, monkeypatch, capfd):
    lines = ring_records.for_library(library)
    monkeypatch.setattr(lines, "_fn", lambda spec: -2)
    monkeypatch.setattr(lines, "failed", False)
    native = _run(library, True)
    err = capfd.readouterr().err
    assert err.count("could not write device-ring records") == 1, err
    assert native == _run(library, False)
    assert lines.failed


def test_the_call_releases_the_gil(library):
    """A CDLL function, not a PyDLL one: ctypes releases the GIL for the call."""
    import ctypes

    lines = ring_records.for_library(library)
    assert not lines._fn._flags_ & ctypes._FUNCFLAG_PYTHONAPI


def test_the_library_refuses_a_malformed_spec(library):
    """aoti_debug_rt_ring_records checks what it is given (ring_records.h): another layout
    -5, an entry past the spec's end, an unknown entry kind or a null pointer -1, a buffer
    too small -3 with the bytes needed; a side entry writes its template's records, fixed
    ones without stats; a line entry is copied as it is; a run's side entries name rows
    of the last base entry's segment, and a row outside it is malformed."""
    import array
    import ctypes

    fn = ring_records.for_library(library)._fn
    row = array.array("d", [1.0, 2.0, 1.5, 0.5, 2.0, 0.0, 0.0, 2.0])
    checksum = array.array("q", [255])
    head, body = b'"graph":"g"', b'"arg":"x"'
    template = array.array("q", (0, 0, ctypes.cast(head, ctypes.c_void_p).value, len(head),
                                 ctypes.cast(body, ctypes.c_void_p).value, len(body), 0, 0, 0, 0,
                                 1, -1, ctypes.cast(head, ctypes.c_void_p).value, len(head),
                                 ctypes.cast(body, ctypes.c_void_p).value, len(body), 0, 0, 0, 0))
    out = bytearray(4096)
    out_addr = ctypes.addressof((ctypes.c_char * len(out)).from_buffer(out))

    def call(entries, count=None, layout=ring_records.LAYOUT, cap=len(out)):
        spec = array.array("q", (layout, 0, len(entries) if count is None else count, out_addr, cap, 0, 0))
        for e in entries:
            spec.extend(e)
        spec[1] = len(spec)
        return fn(spec.buffer_info()[0]), spec[5]

    side = (1, 7, 3, 2, row.buffer_info()[0], checksum.buffer_info()[0], template.buffer_info()[0], 2)
    rc, end = call([side])
    expected = bytes(out[:end])
    assert rc == 0
    assert expected == (b'{"seq":7,"launch":3,"graph":"g","kernel_call":2,"arg":"x","stats":{"min":1.0,"max":2.0,'
                                b'"mean":1.5,"std":0.5,"absmax":2.0,"nan":0,"inf":0},"checksum":"00000000000000ff"}\n'
                                b'{"seq":8,"launch":3,"graph":"g","kernel_call":2,"arg":"x"}\n')
    line = b'{"seq":9,"arg":"cpu"}\n'
    rc, end2 = call([(2, ctypes.cast(line, ctypes.c_void_p).value, len(line)), side])  # a caller's line, then a side
    assert rc == 0 and bytes(out[:end2]) == line + expected
    assert call([(2, 0, 5)])[0] == -1
    assert call([side], layout=1)[0] == -5
    assert call([side[:5]])[0] == -1  # the entry runs past the spec
    assert call([side], count=2)[0] == -1
    assert call([(9, *side[1:])])[0] == -1  # no such entry kind
    assert call([(*side[:4], 0, *side[5:])])[0] == -1  # no stats row
    assert call([(0, 1, 1, 1, row.buffer_info()[0], checksum.buffer_info()[0], 0, 5, 0, 0)])[0] == -1  # null text
    rc, needed = call([side], cap=10)
    assert rc == -3 and needed == end
    # Level print: a record with print texts gets its line after all manifest lines (the
    # first text, the launch, the second, and a ring record's stats).
    before, after = "[aoti_debug] before k launch=".encode(), " x (input) float32[2] cuda:0 \u00e9".encode()
    printing = array.array("q", template)
    for k in (0, 1):
        printing[10 * k + 6: 10 * k + 10] = array.array("q", (ctypes.cast(before, ctypes.c_void_p).value, len(before),
                                                               ctypes.cast(after, ctypes.c_void_p).value, len(after)))
    printed = (*side[:6], printing.buffer_info()[0], 2)
    spec = array.array("q", (ring_records.LAYOUT, 0, 1, out_addr, len(out), 0, 0, *printed))
    spec[1] = len(spec)
    assert fn(spec.buffer_info()[0]) == 0 and bytes(out[:spec[5]]) == expected
    assert bytes(out[spec[5]:spec[6]]) == (before + b"3" + after + b" min=1 max=2 mean=1.5 std=0.5 absmax=2 nan=0 inf=0\n"
                                           + before + b"3" + after + b"\n")
    total = spec[6]
    spec[4] = spec[5] + 10  # room for the lines, not the print lines: the bytes needed in kRingSlotPrintEnd
    assert fn(spec.buffer_info()[0]) == -3 and spec[6] == total
    printing[7] = 4  # a print text's pointer missing
    printing[6] = 0
    assert call([printed])[0] == -1
    # A side taking a row: its template's second record (row -2) takes taken row 0 of
    # the segment (row 0 here); the first (row 0) is the side's first row.
    taken_template = array.array("q", template)
    taken_template[11] = -2
    rows = array.array("q", [row.buffer_info()[0], checksum.buffer_info()[0]])  # (its stats, its checksum)
    taking = (3, 7, 3, 2, row.buffer_info()[0], checksum.buffer_info()[0], taken_template.buffer_info()[0], 2,
              rows.buffer_info()[0], 1)
    rc, end3 = call([taking])
    stats = b',"stats":{"min":1.0,"max":2.0,"mean":1.5,"std":0.5,"absmax":2.0,"nan":0,"inf":0},"checksum":"00000000000000ff"}'
    assert rc == 0 and bytes(out[:end3]) == expected.replace(b'"arg":"x"}\n', b'"arg":"x"' + stats + b"\n")
    assert call([taking[:9] + (0,)])[0] == -1  # taken row 0 of none
    assert call([taking[:8] + (0, 1)])[0] == -1  # no taken rows
    for k in (0, 1):  # a taken row without its stats or its checksum
        broken_rows = array.array("q", rows)
        broken_rows[k] = 0
        assert call([taking[:8] + (broken_rows.buffer_info()[0], 1)])[0] == -1
    assert call([taking[:9] + (-1,)])[0] == -1  # a negative count of taken rows
    assert call([taking[:9]])[0] == -1  # the entry runs past the spec
    taken_lines = bytes(out[:end3])
    # A run of planned sides (ring_records.SideRun): a base entry (a segment's host copy,
    # here two rows, row 1 the one above), then side entries naming rows by number in it.
    two = array.array("d", [9.0] * 8 + list(row))
    sums = array.array("q", [9, 255])
    base = (4, two.buffer_info()[0], sums.buffer_info()[0], 2)
    in_base = (5, 7, 3, 2, 1, template.buffer_info()[0], 2, 0)  # first row 1, no taken rows
    rc, end4 = call([base, in_base])
    assert rc == 0 and bytes(out[:end4]) == expected
    taking_in_base = (5, 7, 3, 2, 1, taken_template.buffer_info()[0], 2, 1, 1)  # taken row 0: row 1
    rc, end5 = call([base, taking_in_base, in_base])
    assert rc == 0 and bytes(out[:end5]) == taken_lines + expected
    # A later base applies to the entries after it: row 0 of a segment of one row.
    one = (4, row.buffer_info()[0], checksum.buffer_info()[0], 1)
    rc, end6 = call([base, in_base, one, (*in_base[:4], 0, *in_base[5:])])
    assert rc == 0 and bytes(out[:end6]) == expected + expected
    assert call([in_base])[0] == -1  # no base before it
    assert call([(4, 0, *base[2:]), in_base])[0] == -1  # a base without its stats rows
    assert call([(*base[:2], 0, 2), in_base])[0] == -1  # ... without its checksums
    assert call([(*base[:3], -1), in_base])[0] == -1  # ... with a negative number of rows
    assert call([base[:3]])[0] == -1  # the base runs past the spec
    assert call([base, in_base], count=3)[0] == -1
    assert call([base, in_base[:7]])[0] == -1  # the side runs past the spec
    assert call([base, taking_in_base[:8]])[0] == -1  # ... its taken row too
    assert call([base, (*in_base[:7], -1)])[0] == -1  # a negative count of taken rows
    assert call([base, (*in_base[:4], -1, *in_base[5:])])[0] == -1  # a negative first row
    assert call([base, (*in_base[:4], 2, *in_base[5:])])[0] == -1  # a first row past the segment's
    assert call([one, in_base])[0] == -1  # row 1 of a segment of one row
    assert call([base, (*taking_in_base[:8], 2)])[0] == -1  # a taken row past the segment's
    assert call([base, (*taking_in_base[:8], -1)])[0] == -1  # a negative taken row
    assert call([base, (*taking_in_base[:7], 0)])[0] == -1  # taken row 0 of none
    assert call([base, (*in_base[:5], 0, *in_base[6:])])[0] == -1  # no template
    assert call([base, (*in_base[:6], -1, *in_base[7:])])[0] == -1  # a negative number of records


def test_cuda_graph_replay_values_are_written_alike(library, fresh_session):
    """A CUDA-graph replay's host copy (cuda_graphs._Values, built here without a device)
    gives the library the rows the dict path reads: the same lines."""
    from aoti_debug import config
    from aoti_debug.runtime import cuda_graphs

    n = len(_ODD_ROWS)
    host = torch.zeros(9 * n, dtype=torch.float64)
    host[: 8 * n] = torch.tensor([[*r, 1.0] for r in _ODD_ROWS], dtype=torch.float64).flatten()
    host[8 * n:].view(torch.int64)[:] = torch.tensor([-5, 0, 2 ** 63 - 1, -(2 ** 63), 77])
    values = cuda_graphs._Values(host, n, _Done())
    lines = ring_records.for_library(library)

    def jobs(w):
        out = []
        for i in range(n):
            rec = {"seq": i + 1, "launch": 1, "graph": "graph0", "wrapper": "python", "kernel": "k", "op": "k",
                   "kernel_call": 0, "phase": "after", "arg": f"buf{i}", "role": "output", "index": i, "site": 0,
                   "kind": "tensor", "dtype": "float32", "shape": [2, 3], "stride": [3, 1], "device": "cuda:0",
                   "numel": 6}
            out.append(session.Job(rec, values, ring_records.RingFill(values, i, w)))
        return out

    sess = session.Session(config.RunSettings())
    native, dicts = jobs(lines), jobs(None)
    assert all(lines.takes(j) for j in native)
    assert sess._encode(native) == sess._encode(dicts) == writer.encode_lines([j.record for j in dicts])


class _HostArena:
    """``cuda_graphs.Arena`` on the host: its rows written by a fake stats kernel."""

    def __init__(self):
        from aoti_debug.runtime import cuda_graphs

        self.device = torch.device("cpu")
        self.buf = torch.zeros(9 * cuda_graphs.ARENA_ROWS, dtype=torch.float64)
        self.rows_used = self.table_used = 0
        self.tensors: dict[int, torch.Tensor] = {}  # row -> the tensor captured there

    def write(self, replay: int) -> None:
        """What the captured stats kernels write in replay ``replay``: each row's tensor
        scaled by it; every third row one of :data:`_ODD_ROWS` instead."""
        from aoti_debug.runtime import cuda_graphs

        sums = self.buf[8 * cuda_graphs.ARENA_ROWS:].view(torch.int64)
        for row, t in self.tensors.items():
            s, c = device_summary(t * (replay + 1))
            values = s.tolist() if (row + replay) % 3 else [*_ODD_ROWS[(row + replay) % len(_ODD_ROWS)], 1.0]
            self.buf[8 * row: 8 * row + 8] = torch.tensor(values, dtype=torch.float64)
            sums[row] = int(c) if row % 2 else -int(c) - 1


def _graph_run(library, native: bool, sides, replays: int = 3, replay_plan: bool = True,
               counted: list | None = None) -> tuple[bytes, object]:
    """The manifest of a CUDA graph captured from one step of ``sides`` (the hooks'
    capture path, a fake stats kernel on a host arena) and replayed ``replays`` times,
    and the capture; ``replay_plan`` False: its replays are made as dicts
    (``cuda_graphs.Replay`` not made); ``counted``: the rows the stats kernel was given."""
    from aoti_debug.runtime import cuda_graphs, fused_stats

    _runs[0] += 1
    os.environ["AOTI_DEBUG_DIR"] = os.path.join(os.environ["AOTI_DEBUG_DIR"], f"graph-{_runs[0]}")
    session.reset()
    arena = _HostArena()

    def summarize(tensors, into, static):
        buf, first = into
        assert buf is arena.buf and static is cap
        arena.tensors.update({first + j: t.clone() for j, t in enumerate(tensors)})
        if counted is not None:
            counted.append(len(tensors))

    def copy(cls, arena, first, n):
        rows = arena.buf[8 * first: 8 * (first + n)]
        sums = arena.buf[8 * cuda_graphs.ARENA_ROWS + first: 8 * cuda_graphs.ARENA_ROWS + first + n]
        return cls(torch.cat([rows, sums]), n, _Done())

    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(hooks, "_capturing", lambda: True)
        mp.setattr(fused_stats, "summarize", summarize)
        mp.setattr(cuda_graphs._Values, "copy", classmethod(copy))
        if not replay_plan:
            mp.setattr(cuda_graphs.Replay, "of", classmethod(lambda cls, cap: None))
        handles = {}

        def handle(n):  # the graph handle of compiled graph n (a wrapper module's)
            if n not in handles:
                g = handles[n] = hooks.graph(f"graph{n}.py", "stats", False, protocol=PROTOCOL_VERSION,
                                             native=library.path)
                g._records = None
                if not native:
                    g._lines = None
            return handles[n]

        cap = cuda_graphs.Capture(arena)
        launches = [(handle(rest[0] if rest else 0), site, before, after) for site, before, after, *rest in sides(0)]
        known = {(id(g), id(site)): g.site(tuple(site)) for g, site, _b, _a in launches}
        cuda_graphs._tls.capture = cap
        for g, site, before, after in launches:
            g.launch(known[(id(g), id(site))], before)
            g.done(known[(id(g), id(site))], after)
        cuda_graphs._tls.capture = None
        cap.finish()
        for r in range(replays):
            arena.write(r)
            cap.emit()
        aoti_debug.flush()
        with open(os.path.join(session.dump_path(), schema.MANIFEST_FILE), "rb") as f:
            data = f.read()
    finally:
        cuda_graphs._tls.capture = None
        mp.undo()
        session.reset()
        os.environ["AOTI_DEBUG_DIR"] = os.path.dirname(os.environ["AOTI_DEBUG_DIR"])
    return data, cap


def _graph_sides(step: int):
    """:func:`_reuse_sides` and the producer launched again (a kernel twice in a graph)."""
    sides = _reuse_sides(True)(step)
    g = torch.Generator().manual_seed(99)
    x = torch.randn(4, 16, generator=g)
    return [*sides, (sides[0][0], [x], [x + 1])]


def test_cuda_graph_replays_are_one_job_each_written_as_their_dicts(library, fresh_session, monkeypatch):
    """Every side of a captured graph planned: each replay is one writer job (a run of
    planned sides, ``cuda_graphs.Replay``) whose lines are those of the dict path byte for
    byte, numbered on from replay to replay (records, launches, each kernel's calls); an
    input whose producer's row is in the graph takes it (no row of its own)."""
    jobs = []
    submit = session.Session.submit_side
    monkeypatch.setattr(session.Session, "submit_side", lambda self, job: jobs.append(job) or submit(self, job))
    counted = []
    planned, cap = _graph_run(library, True, _graph_sides, counted=counted)
    assert cap.replay is not None and len(jobs) == 3
    assert all(type(j.finish) is ring_records.SideRun and j.record is None for j in jobs)
    # a tensor a side: add x | buf1, mm w | buf2, mul (buf1 and buf2 taken) | buf3, add x | buf1
    assert counted == [1] * 7
    dicts, cap = _graph_run(library, True, _graph_sides, replay_plan=False)
    assert cap.replay is None
    assert planned == dicts == _graph_run(library, False, _graph_sides)[0]
    recs = _lines(planned)
    assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))
    assert [(r["kernel"][-5:], r["launch"], r["kernel_call"]) for r in recs if r["phase"] == "after"] == [
        (k, 4 * c + j + 1, n) for c in range(3) for j, (k, n) in
        enumerate([("add_0", 2 * c), ("ls.mm", c), ("mul_1", c), ("add_0", 2 * c + 1)])]
    assert [r.get("reused") for r in recs if r["phase"] == "before"] == [None, 10, None, 10, 11, None, None] * 3
    first = [r for r in recs if r["launch"] <= 4]
    assert [r.get("stats") for r in first] != [r.get("stats") for r in recs if 4 < r["launch"] <= 8]


def test_cuda_graph_inputs_take_rows_of_their_own_compiled_graphs_producers(library, fresh_session):
    """One CUDA graph holding two compiled graphs' launches, whose site numbers collide:
    the second graph's consumer of its site 10 finds no row of that producer (the first
    graph's site 10 is another launch) and reads its input itself."""
    counted = []

    def sides(step):
        add, mm, _mul = _reuse_sites(True)
        g = torch.Generator().manual_seed(step)
        x, w = torch.randn(8, 16, generator=g), torch.randn(16, 16, generator=g)
        return [(add, [x], [x + 1], 0), (mm, [x + 1, w], [(x + 1) @ w], 0), (mm, [x * 3, w], [(x * 3) @ w], 1)]

    data, cap = _graph_run(library, True, sides, counted=counted)
    assert cap.replay is not None
    assert counted == [1, 1, 1, 1, 2, 1]  # graph 0's mm takes buf1 from its add; graph 1's reads both
    assert [r.get("reused") for r in _lines(data) if r["phase"] == "before"] == [None, 10, None, None, None] * 3
    assert data == _graph_run(library, False, sides)[0]


def test_cuda_graph_replays_of_sides_no_plan_keeps_are_dicts(library, fresh_session):
    """A graph with a side no plan keeps (a list of tensors, flattened) is made as dicts
    at every replay: the same lines as with the library's fill of each record."""
    native, cap = _graph_run(library, True, _sides)
    assert cap.replay is None and any(side.plan is None for side in cap.sides)
    assert native == _graph_run(library, False, _sides)[0]
    assert len(_lines(native)) == 3 * sum(len(side.records) for side in cap.sides) > 30


def _count_planned(monkeypatch) -> list[tuple[str, str, int]]:
    """The sides ``GraphHandle._ring_side`` made from their plan: ``(kernel, phase, kernel call)``."""
    calls = []
    side = hooks.GraphHandle._ring_side

    def counted(self, sess, site, plan, values, launch, call):
        done = side(self, sess, site, plan, values, launch, call)
        if done:
            calls.append((plan.site.kernel, plan.records[0]["phase"], call))
        return done

    monkeypatch.setattr(hooks.GraphHandle, "_ring_side", counted)
    return calls


@pytest.mark.parametrize("host", [False, True], ids=["ring", "host"])
@pytest.mark.parametrize("native", [True, False], ids=["library", "dicts"])
def test_planned_sides_write_what_the_full_path_writes(library, fresh_session, monkeypatch, native, host):
    planned = _count_planned(monkeypatch)
    with_plans = _run(library, native, steps=4, host=host)
    # Steps 2-4, every side: addmm's both, the fused kernel's inputs (scalars, None, an
    # unwritten buffer: fixed records) and outputs (a tuple holding a volatile int, None and
    # a nested tuple), the subgraph kernel's input (a list; with ``host`` its arange read by
    # the library) and output.
    assert len(planned) == 3 * 6
    assert with_plans == _run(library, native, steps=4, plans=False, host=host)


def test_a_planned_side_whose_ring_cannot_be_read_records_the_error(library, fresh_session, monkeypatch):
    planned = _count_planned(monkeypatch)
    broken = _run(library, True, broken=True)
    assert len(planned) > 0
    assert broken == _run(library, True, broken=True, plans=False)
    assert broken.count(b"illegal memory access") == broken.count(b'"kind":"tensor"') - broken.count(b"uninitialised")


def _changing(step: int):
    """One site whose values change layout, dtype, device, count and kind from step to step."""
    g = torch.Generator().manual_seed(step)
    x = torch.randn(6, 4, generator=g)
    d = x.double()
    before = [[x, x], [x.t(), x], [x, d], [x, d], [x.reshape(4, 6), d], [x, d], [x, 3], [x, 3], [x, 4], [x, d, x],
              [x, True], [x, 1], [x, 0.0], [x, -0.0]][step]
    return [(_changing_site(), before, [x * 2])]


@functools.cache
def _changing_site() -> Site:
    return Site("", "triton_poi_fused_mul_5", "k", (_arg("a"), _arg("b", kind="unknown")), (_arg("c", "output"),), None,
                5, "")


def test_a_side_whose_values_change_is_planned_again(library, fresh_session, monkeypatch):
    planned = _count_planned(monkeypatch)
    with_plans = _run(library, True, steps=14, sides=_changing, cpu_side=False)
    # Every "after" side but the first; "before" at step 3 (as step 2) and step 7 (as step 6):
    # not for another value, type (True, 1) or sign (0.0, -0.0).
    assert len(planned) == 13 + 2
    assert with_plans == _run(library, True, steps=14, sides=_changing, cpu_side=False, plans=False)
    import json

    recs = [json.loads(line) for line in with_plans.decode("ascii").splitlines()]
    assert [r["stride"] for r in recs if r["arg"] == "a" and r["kind"] == "tensor"][:3] == [[4, 1], [1, 4], [4, 1]]


@functools.cache
def _list_sites() -> tuple[Site, Site, Site]:
    """An attention fallback whose output is a tuple with volatile RNG elements (as
    ``aten._scaled_dot_product_efficient_attention`` records it), a kernel whose values
    change structure from step to step, and one holding a value no plan keeps."""
    sdpa = Site("", "aten._scaled_dot_product_efficient_attention.default", "sdpa",
                (_arg("q"), _arg("k"), _arg("v")),
                (_arg("buf5", "output", "unknown", volatile=(("[2]", "rng seed"), ("[3]", "rng offset"))),),
                None, 6, "")
    changing = Site("", "triton_poi_fused_cat_7", "k", (_arg("a"), _arg("b", kind="unknown")),
                    (_arg("c", "output", "unknown", volatile=(("[1]", "rng seed"),)),), None, 7, "")
    other = Site("", "extern_kernels.foreach", "foreach", (_arg("xs", kind="unknown"),), (_arg("y", "output"),), None,
                 8, "")
    return sdpa, changing, other


#: The changing kernel's values at each step, ``(before b, after c)`` of tensors ``x``
#: and ``d``, with whether its sides are made from the previous step's plan: the same
#: structure and values (an equal ``after`` at step 1, 3, 5...; a ``before`` plain, then a list).
_LIST_STEPS = [
    (lambda x, d: (x, (x, x)), False, False),
    (lambda x, d: (x, (x, x)), True, True),
    (lambda x, d: ([x], (x, x, x)), False, False),  # a longer tuple; b a list
    (lambda x, d: ([x], (x, x, x)), True, True),
    (lambda x, d: ([x, x], [x, x, x]), False, False),  # a list for a tuple; a longer b
    (lambda x, d: ((x, x), [x, x, x]), False, True),  # b a tuple for a list: the same records
    (lambda x, d: ((x, x), [x, None, x]), True, False),  # a tensor become None
    (lambda x, d: (x, [x, None, x]), False, True),  # b plain again: the list plan's values
    (lambda x, d: (x, [x, (None,), x]), True, False),  # nested
    (lambda x, d: (x, [x, [None], x]), True, False),  # nested alike, a list for a tuple: the same records
    (lambda x, d: (x, (x, [None, []])), True, False),
    (lambda x, d: (x, (x, [None], [])), True, False),  # an empty list moved out: the same records again
    (lambda x, d: (x, (x, [None], [])), True, True),
    (lambda x, d: (x, (x, [3], [])), True, False),  # a scalar for None
    (lambda x, d: (x, (x, [True], [])), True, False),  # True == 1 but another record
    (lambda x, d: (x, (d, [True], [])), True, False),  # another dtype
    (lambda x, d: (x, (d, [True], [])), True, True),
    (lambda x, d: (x, (d, [True], [x.t()])), True, False),  # another layout, nested
    (lambda x, d: (x, (d, [True], [x.t()])), True, True),
]


def _lists(step: int):
    """Sides holding lists and tuples: the attention fallback (the same structure every
    step, its values changing), the changing kernel (:data:`_LIST_STEPS`), and a side
    with a string (never planned)."""
    g = torch.Generator().manual_seed(step)
    x = torch.randn(6, 4, generator=g)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g) for _ in range(3))
    sdpa, changing, other = _list_sites()
    out = (torch.randn(2, 3, 5, 8, generator=g), torch.randn(2, 3, 8, generator=g),
           torch.tensor(1234 + step), torch.tensor(step), None)
    b, c = _LIST_STEPS[step][0](x, x.double())
    return [(sdpa, [q, k, v], [out]), (changing, [x, b], [c]), (other, [(x, "sum")], [x])]


@pytest.mark.parametrize("host", [False, True], ids=["ring", "host"])
@pytest.mark.parametrize("native", [True, False], ids=["library", "dicts"])
def test_sides_holding_lists_are_planned_while_their_structure_stays(library, fresh_session, monkeypatch, native,
                                                                     host):
    """With ``host``, the attention fallback's seeds are read by the runtime library, as
    its CPU seeds beside its CUDA outputs are."""
    planned = _count_planned(monkeypatch)
    steps = len(_LIST_STEPS)
    with_plans = _run(library, native, steps=steps, sides=_lists, host=host)
    # The attention fallback's both sides from step 1, the changing kernel's as listed; the
    # side holding a string takes the full path (its output, a tensor, is planned).
    sdpa, changing, other = _list_sites()
    assert [p for p in planned if p[0] == sdpa.kernel] == [(sdpa.kernel, phase, step) for step in range(1, steps)
                                                          for phase in ("before", "after")]
    assert [p for p in planned if p[0] == changing.kernel] == [
        (changing.kernel, phase, step) for step, (_f, before, after) in enumerate(_LIST_STEPS)
        for phase, done in (("before", before), ("after", after)) if done]
    assert [p for p in planned if p[0] == other.kernel] == [(other.kernel, "after", step) for step in range(1, steps)]
    assert with_plans == _run(library, native, steps=steps, sides=_lists, plans=False, host=host)
    import json

    recs = [json.loads(line) for line in with_plans.decode("ascii").splitlines()]
    seeds = [r for r in recs if r["kernel"].startswith("aten._scaled") and r["phase"] == "after"]
    assert [r["arg"] for r in seeds[:5]] == ["buf5[0]", "buf5[1]", "buf5[2]", "buf5[3]", "buf5[4]"]
    assert [r.get("volatile") for r in seeds[:5]] == [None, None, "rng seed", "rng offset", None]
    assert len({r["checksum"] for r in seeds if r["arg"] == "buf5[2]"}) == steps  # each step's own seed
    assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))


@pytest.mark.parametrize("host", [False, True], ids=["ring", "host"])
def test_a_planned_side_holding_lists_whose_ring_cannot_be_read_records_the_error(library, fresh_session,
                                                                                 monkeypatch, host):
    planned = _count_planned(monkeypatch)
    broken = _run(library, True, steps=4, sides=_lists, broken=True, cpu_side=False, host=host)
    assert len(planned) == 2 * 3 + sum(before + after for _f, before, after in _LIST_STEPS[:4]) + 3
    assert broken == _run(library, True, steps=4, sides=_lists, broken=True, cpu_side=False, plans=False, host=host)
    # The library's records (the seeds: int64) have their stats; the ring's, the error.
    read = broken.count(b'"dtype":"int64"') if host else 0
    assert broken.count(b"illegal memory access") == broken.count(b'"kind":"tensor"') - read > 0


def test_a_planned_side_whose_host_tensors_the_library_stops_reading_takes_the_full_path(library, fresh_session,
                                                                                         monkeypatch, capfd):
    """From step 2 the library fails: the attention fallback's planned output side falls
    back to the full path (its seeds then in the ring), is planned again at step 3, and
    writes what the full path writes."""
    from aoti_debug.runtime import native_stats

    summarize = native_stats.Library.summarize

    def failing(self, *args):
        raise RuntimeError("the library is gone")

    def sides(step):
        monkeypatch.setattr(native_stats.Library, "summarize", failing if step >= 2 else summarize)
        return _lists(step)

    planned = _count_planned(monkeypatch)
    with_plans = _run(library, True, steps=4, sides=sides, host=True)
    assert capfd.readouterr().err.count("could not summarise CPU tensors") == 1
    sdpa = _list_sites()[0]
    assert [p[2] for p in planned if p[0] == sdpa.kernel and p[1] == "after"] == [1, 3]
    assert with_plans == _run(library, True, steps=4, sides=sides, host=True, plans=False)
    assert b'"dtype":"int64"' in with_plans


def test_a_plan_compares_the_structure_of_its_values():
    """``SidePlan.matches`` on flattened values with their structure (``hooks._flat_values``)."""
    site = _list_sites()[1]
    x = torch.ones(2)

    def plan_of(values):
        flat, structure = hooks._flat_values(site.after, values)
        recs = [{"arg": str(i)} for i in range(len(flat))]
        return ring_records.SidePlan(site, recs, flat, [isinstance(v, torch.Tensor) for v in flat], None, structure)

    def matches(plan, values):
        return plan.matches(*hooks._flat_values(site.after, values))

    plan = plan_of([(x, [None, []], 2)])
    assert matches(plan, [(x.clone(), [None, []], 2)])
    for other in ([(x, [None], [], 2)], [[x, [None, []], 2]], [(x, (None, []), 2)], [(x, [None, ()], 2)],
                  [(x, [None, []])], [(x, [None, [], 2])], [(x, [None, []], 3)], [(x, [x, []], 2)], [x],
                  [(x.double(), [None, []], 2)], [(x, [None, [None]], 2)]):
        assert not matches(plan, other), other
    simple = plan_of([x])
    assert simple.structure is not None and not matches(simple, [(x,)]) and not matches(plan, [x])
    flat = ring_records.SidePlan(site, [{"arg": "c"}], [x], [True], None)
    assert flat.structure is None and flat.matches([x]) and not flat.matches([(x,)]) and not flat.matches([[x]])


def test_no_plan_is_used_under_a_flight_recorder(library, fresh_session, monkeypatch):
    """A handle's plans outlive its session: a later session with a flight recorder takes
    every record through its ring (Session.submit), none from a plan."""
    planned = _count_planned(monkeypatch)
    ring = _HostRing(odd=False)
    monkeypatch.setattr(hooks.GraphHandle, "_ring_stats", lambda self, items, rows: ring.stats(self, items, rows))
    monkeypatch.setattr(hooks.GraphHandle, "_ring_rows", lambda self, device, tensors: ring.rows(self, device, tensors))
    monkeypatch.setattr(hooks.GraphHandle, "_planned_rows",
                        lambda self, plan, ts: ring.rows(self, plan.device, plan.ring_values(ts)))
    monkeypatch.setattr(hooks.GraphHandle, "_host_stats", _host_stats(False))
    monkeypatch.setattr(session, "BEFORE_FLUSH", [ring.ship])
    g = hooks.graph(None, "stats", False, protocol=PROTOCOL_VERSION, native=library.path)
    g._records = None  # CPU sides as dicts: every tensor takes the (fake) ring
    mm = _sites()[0]
    for _ in range(2):
        site, before, after = _sides()[0]
        g.launch(site, before)
        g.done(site, after)
    assert len(planned) == 2 and g._ring_plans
    aoti_debug.flush()
    monkeypatch.setenv("AOTI_DEBUG_RING", "4")
    session.reset()
    submitted = []
    monkeypatch.setattr(session.Session, "submit", lambda self, job: submitted.append(job))
    site, before, after = _sides()[0]
    g.launch(mm, before)
    g.done(mm, after)
    assert len(planned) == 2
    assert [j.record["arg"] for j in submitted] == ["b", "x", "w", "buf0"]


# --------------------------------------------------------------------------- inputs taken from their producers
def _taking(name: str, producer: int, at: int = 0) -> SiteArg:
    return SiteArg(name, "input", "tensor", name, False, (), (producer, at))


@functools.cache
def _reuse_sites(reuse: bool, seed: bool = False) -> tuple[Site, Site, Site]:
    """A producer (site 10: buf1), a consumer taking buf1 and reading w (11: buf2; with
    ``seed`` an int64 tensor too) and one taking both buf1 and buf2 (12): as the wrapper's
    codegen links them, or not at all."""
    take = _taking if reuse else (lambda name, producer, at=0: _arg(name))
    add = Site("", "triton_poi_fused_add_0", "add", (_arg("x"),), (_arg("buf1", "output"),), None, 10, "")
    mm = Site("", "extern_kernels.mm", "mm", (take("buf1", 10), _arg("w"), *((_arg("seed"),) if seed else ())),
              (_arg("buf2", "output"),), None, 11, "")
    mul = Site("", "triton_poi_fused_mul_1", "mul", (take("buf1", 10), take("buf2", 11), _arg("n", kind="scalar")),
               (_arg("buf3", "output"),), None, 12, "")
    return add, mm, mul


def _reuse_sides(reuse: bool, lost: int | None = None, seed: bool = False):
    """The three launches of :func:`_reuse_sites` with fresh values each step; at step
    ``lost`` the producer never returns (its ``done`` is not called) and its consumers are
    given other values: they must read those, not the last step's row."""

    def sides(step: int):
        g = torch.Generator().manual_seed(step)
        x, w = torch.randn(8, 16, generator=g), torch.randn(16, 16, generator=g)
        buf1 = x + 1
        buf2 = buf1 @ w
        add, mm, mul = _reuse_sites(reuse, seed)
        seeds = [torch.arange(step, step + 2)] if seed else []
        if step == lost:
            return [(add, [x], None), (mm, [buf1 * 3, w, *seeds], [buf2]), (mul, [buf1 * 3, buf2, 2], [buf1 * buf2])]
        return [(add, [x], [buf1]), (mm, [buf1, w, *seeds], [buf2]), (mul, [buf1, buf2, 2], [buf1 * buf2])]

    return sides


def _lines(data: bytes) -> list[dict]:
    import json

    return [json.loads(line) for line in data.decode("ascii").splitlines()]


@pytest.mark.parametrize("plans", [True, False], ids=["plans", "full"])
@pytest.mark.parametrize("native", [True, False], ids=["library", "dicts"])
def test_inputs_taken_from_their_producers_are_what_reading_them_records(library, fresh_session, monkeypatch,
                                                                         native, plans):
    rows = []
    rows_of = _HostRing.rows
    monkeypatch.setattr(_HostRing, "rows", lambda self, *a: rows.append(len(a[-1])) or rows_of(self, *a))
    taken = _lines(_run(library, native, steps=4, odd=False, cpu_side=False, plans=plans, sides=_reuse_sides(True)))
    taken_rows, rows[:] = sum(rows), []
    read = _lines(_run(library, native, steps=4, odd=False, cpu_side=False, plans=plans, sides=_reuse_sides(False)))
    assert [r.get("reused") for r in taken if r["phase"] == "before"] == [None, 10, None, 10, 11, None] * 4
    assert [{k: v for k, v in r.items() if k != "reused"} for r in taken] == read
    assert taken_rows == sum(rows) - 3 * 4  # three tensors a step the stats kernel no longer reads


def test_sides_taking_inputs_are_planned_and_written_byte_for_byte(library, fresh_session, monkeypatch):
    planned = _count_planned(monkeypatch)
    per_record = []  # sides written an entry per record (rows in other segments, host records)
    host_side = ring_records.RingLines._host_side
    monkeypatch.setattr(ring_records.RingLines, "_host_side", staticmethod(
        lambda *a: per_record.append(1) or host_side(*a)))
    native = _run(library, True, steps=4, sides=_reuse_sides(True))
    # Steps 2-4: all six sides, the mul's inputs with no ring row of their own (no stats
    # kernel); each side one entry (kRingEntrySideTaken: one segment here).
    assert len(planned) == 3 * 6 and not per_record
    assert native == _run(library, False, steps=4, sides=_reuse_sides(True))
    assert native == _run(library, True, steps=4, sides=_reuse_sides(True), plans=False)
    # A side with host records too (an int64 tensor the library reads): an entry per record.
    seeded = _run(library, True, steps=4, sides=_reuse_sides(True, seed=True), host=True)
    assert per_record and b'"reused":10' in seeded
    assert seeded == _run(library, False, steps=4, sides=_reuse_sides(True, seed=True), host=True)
    assert seeded == _run(library, True, steps=4, sides=_reuse_sides(True, seed=True), host=True, plans=False)


def test_sides_taking_rows_of_earlier_segments_are_one_entry_each(library, fresh_session, monkeypatch):
    """Segments shipped while a step runs (full: two rows each here): a side whose
    producer's row went out in an earlier segment is still one entry
    (kRingEntrySideTaken names each taken row by its addresses), and the manifest is the
    same bytes as the dict path's and as one segment's."""
    per_record = []
    host_side = ring_records.RingLines._host_side
    monkeypatch.setattr(ring_records.RingLines, "_host_side", staticmethod(
        lambda *a: per_record.append(1) or host_side(*a)))
    calls = _count_native(monkeypatch)
    shipped = _run(library, True, steps=4, sides=_reuse_sides(True), ship_every=2)
    assert calls[0] > 20 and not per_record and b'"reused":10' in shipped
    assert shipped == _run(library, False, steps=4, sides=_reuse_sides(True), ship_every=2)
    assert shipped == _run(library, True, steps=4, sides=_reuse_sides(True))
    assert shipped == _run(library, True, steps=4, sides=_reuse_sides(True), ship_every=2, plans=False)


def test_a_side_taking_every_input_is_checked_by_the_library(library, fresh_session, monkeypatch):
    """A planned side that takes every tensor from its producers launches no stats kernel:
    from its second planned call the library's side function checks its values (a spec
    with no launch) instead of ``SidePlan.matches``. A change it finds (the scalar of
    steps 3-5) sends the side down the full path, which plans it anew; the bytes are those
    of the Python check's and the dict path's."""
    from aoti_debug.runtime import cpu_records, fused_stats

    monkeypatch.setattr(fused_stats, "side_function", None)
    monkeypatch.setattr(fused_stats, "express_function", None)
    fused_stats.bind_side_function(library, cpu_records.values_config(library.codes))
    if not fused_stats.side_function:
        pytest.fail("the runtime library was built without its ring side function (Python headers, tensor layout)")
    # The hooks' Python around the side function (the library's express hooks, bound with
    # it, are test_express_launches.py's).
    monkeypatch.setattr(fused_stats, "express_function", False)
    bound = fused_stats.side_function
    answers = []
    monkeypatch.setattr(fused_stats, "side_function", lambda *a: answers.append(bound(*a)) or answers[-1])
    matched = []
    matches = ring_records.SidePlan.matches
    monkeypatch.setattr(ring_records.SidePlan, "matches",
                        lambda self, *a: matched.append(self.device is None) or matches(self, *a))
    base = _reuse_sides(True)

    def sides(step: int):
        made = base(step)
        if step >= 3:  # the taking side's scalar changes: its plan declines it
            (mul, before, after) = made[2]
            made[2] = (mul, [*before[:2], 3], after)
        return made

    native = _run(library, True, steps=6, sides=sides, cpu_side=False)
    # Planned from its first call (step 0's records); the spec made at its first planned
    # call (step 1); the library checks steps 2-5: step 3 declined, planned anew, its spec
    # made at step 4, checked at step 5.
    assert answers == [fused_stats.SIDE_LAUNCHED, fused_stats.SIDE_MISMATCH, fused_stats.SIDE_LAUNCHED], answers
    assert matched.count(True) == 2, matched  # (the Python check: steps 1 and 4)
    monkeypatch.setattr(fused_stats, "side_function", None)
    assert native == _run(library, True, steps=6, sides=sides, cpu_side=False)
    assert native == _run(library, False, steps=6, sides=sides, cpu_side=False)
    assert native.count(b'"value":3') == 3 and native.count(b'"value":2') == 3


@pytest.mark.parametrize("plans", [True, False], ids=["plans", "full"])
def test_an_input_whose_producer_did_not_return_is_read(library, fresh_session, plans):
    """The producer of step 3 never returns: its consumers read their own values, as
    without reuse, and take their producer's rows again from step 4."""
    taken = _lines(_run(library, True, steps=5, odd=False, cpu_side=False, plans=plans,
                        sides=_reuse_sides(True, lost=2)))
    read = _lines(_run(library, True, steps=5, odd=False, cpu_side=False, plans=plans,
                       sides=_reuse_sides(False, lost=2)))
    assert [{k: v for k, v in r.items() if k != "reused"} for r in taken] == read
    mm_buf1 = [r for r in taken if r["kernel"] == "extern_kernels.mm" and r["arg"] == "buf1"]
    assert [r.get("reused") for r in mm_buf1] == [10, 10, None, 10, 10]
    mul_buf2 = [r for r in taken if r["kernel"] == "triton_poi_fused_mul_1" and r["arg"] == "buf2"]
    assert [r.get("reused") for r in mul_buf2] == [11] * 5  # (buf2's producer did return)


def test_no_input_is_taken_under_a_flight_recorder(library, fresh_session, monkeypatch):
    """The trigger saves a launch's inputs from the tensors: none is left to a producer's row."""
    monkeypatch.setenv("AOTI_DEBUG_RING", "4")
    session.reset()
    submitted = []
    monkeypatch.setattr(session.Session, "submit", lambda self, job: submitted.append(job))
    g = hooks.graph(None, "stats", False, protocol=PROTOCOL_VERSION, native=library.path)
    for site, before, after in _reuse_sides(True)(0):
        site = g.site(tuple(site))
        g.launch(site, before)
        g.done(site, after)
    assert len(submitted) == 9 and not any("reused" in j.record for j in submitted)


# --------------------------------------------------------------------------- runs of planned sides
def _count_runs(monkeypatch) -> list[tuple[object, int]]:
    """``(arrival, sides)`` of each run of planned sides (``ring_records.SideRun``) given
    to the library, its sides counted when the library is given it."""
    runs = []
    encode = ring_records.RingLines.encode

    def counted(self, jobs):
        runs.extend((j.event, len(j.finish.plans)) for j in jobs if type(j.finish) is ring_records.SideRun)
        return encode(self, jobs)

    monkeypatch.setattr(ring_records.RingLines, "encode", counted)
    return runs


@pytest.mark.parametrize("ship_every", [0, 16], ids=["one-segment", "segments"])
@pytest.mark.parametrize("reuse", [False, True], ids=["sides", "taking"])
def test_the_planned_sides_of_a_segment_are_one_writer_job(library, fresh_session, monkeypatch, ship_every, reuse):
    """The model's thread appends planned sides to one queued job (``SideRun``) while the
    writer waits for their segment: with one segment, steps 2-4's 18 sides are one job;
    with segments shipped as they fill, a run holds sides of one segment, at most two runs
    a segment. The same bytes as sides queued one job each (``RingSide``), as the dict path's
    and as the full path's."""
    sides = _reuse_sides(True) if reuse else _sides
    planned = _count_planned(monkeypatch)
    runs = _count_runs(monkeypatch)
    with_runs = _run(library, True, steps=4, cpu_side=False, sides=sides, ship_every=ship_every)
    assert len(planned) == 18
    if not ship_every:
        assert [n for _a, n in runs] == [18]
    else:
        # Each segment's sides: those queued before the writer took their run (and waited
        # for the segment), then the others (the writer takes them once it is shipped).
        segments = len({id(a) for a, _n in runs})
        assert sum(n for _a, n in runs) == 18 and segments > 1 and len(runs) <= 2 * segments
    runs.clear()

    def one_job(self, arrival, lines, plan, launch, call, row, taken=()):
        seq = self.next_seq(len(plan.records))
        reused = [(arrival, r) for r in taken] if plan.reused else None
        self.submit_side(session.Job(None, arrival, ring_records.RingSide(plan, seq, launch, call, arrival, row, None,
                                                                          reused)))

    monkeypatch.setattr(session.Session, "submit_planned", one_job)
    one_job_a_side = _run(library, True, steps=4, cpu_side=False, sides=sides, ship_every=ship_every)
    assert not runs and with_runs == one_job_a_side
    assert with_runs == _run(library, False, steps=4, cpu_side=False, sides=sides, ship_every=ship_every)
    assert with_runs == _run(library, True, steps=4, cpu_side=False, sides=sides, ship_every=ship_every, plans=False)


def _side_plan(lines, k: int) -> ring_records.SidePlan:
    """A planned side of two CPU tensors' records (kernel ``k<k>``) written by ``lines``."""
    from aoti_debug.format.protocol import record

    recs = []
    for i in range(2):
        rec = record(seq=0, launch=0, graph="graph0", wrapper="python", kernel=f"k{k}", op="k", kernel_call=0,
                     phase="after", arg=f"buf{i}", role="output", index=i, expr=None, volatile=None, site=k)
        rec.update(kind="tensor", dtype="float32", shape=[2, 3], stride=[3, 1], device="cpu", numel=6)
        recs.append(rec)
    return ring_records.SidePlan(object(), recs, [torch.empty(2, 3)] * 2, [True, True], lines)


def test_sides_queued_while_the_writer_holds_their_run_start_another(library, fresh_session, monkeypatch):
    """The writer seals the run it takes: sides queued while it waits for their segment go
    to a new run, a CPU side's lines queued behind them end that run, and the manifest
    holds every side, in the order they were queued."""
    lines = ring_records.for_library(library)
    sess = session.current()
    sess.writer("stats")
    runs = _count_runs(monkeypatch)
    plans = [_side_plan(lines, k) for k in range(5)]
    for plan in plans:
        lines.template(plan)
    segment = _HostRing(cap=16)
    segment.rows(None, None, [torch.randn(2, 3, generator=torch.Generator().manual_seed(i)) for i in range(10)])
    arrival = segment.arrival  # not shipped: the writer waits for it

    def side(k: int) -> None:
        sess.submit_planned(arrival, lines, plans[k], 1 + k, 0, 2 * k)  # (records 1 + 2k, 2 + 2k)

    cpu = b'{"seq":9,"arg":"cpu"}\n'
    try:
        with sess._cond:  # the writer takes nothing before both are queued
            side(0)
            side(1)
        for _ in range(1000):  # until the writer took the run (and waits for the segment)
            if sess._open_run is None:
                break
            threading.Event().wait(0.01)
        assert sess._open_run is None and len(sess._queue) == 1
        side(2)
        side(3)
        assert len(sess._queue) == 2
        sess.write_lines(cpu)
        side(4)
        assert len(sess._queue) == 4
    finally:
        segment.ship()  # (a failed assertion too: the writer then finishes)
    aoti_debug.flush()
    assert [(a is arrival, n) for a, n in runs] == [(True, 2), (True, 2), (True, 1)]
    expected = []
    for k in range(5):
        jobs = ring_records.RingSide(plans[k], 1 + 2 * k, 1 + k, 0, arrival, 2 * k).jobs()
        expected.append(writer.encode_lines([sess._finish(j) for j in jobs]))
        if k == 3:
            expected.append(cpu)
    with open(os.path.join(session.dump_path(), schema.MANIFEST_FILE), "rb") as f:
        assert f.read() == b"".join(expected)


class _Copying:
    """A shipment's copy still on its way until :meth:`done` (``query`` as a CUDA event's)."""

    def __init__(self):
        self._done = threading.Event()

    def query(self):
        return self._done.is_set()

    def synchronize(self):
        assert self._done.wait(30)

    def done(self):
        self._done.set()


@pytest.mark.parametrize("plain", [False, True], ids=["runs", "one-job-a-side"])
def test_the_writer_writes_what_arrived_without_waiting_for_what_did_not(library, fresh_session, monkeypatch, plain):
    """Sides of two shipped segments queued together, the second's copy still on its way:
    the first segment's lines are written while the second's are not there, not held back
    in one batch until the device reaches the last of it (a CUDA-graph replay a step: a
    step's end would find a dozen replays to write). Same manifest at the end."""
    lines = ring_records.for_library(library)
    sess = session.current()
    sess.writer("stats")
    plans = [_side_plan(lines, k) for k in range(2)]
    for plan in plans:
        lines.template(plan)
    rings = [_HostRing(cap=16, odd=False) for _ in range(2)]
    copying = _Copying()
    for k, ring in enumerate(rings):
        ring.rows(None, None, [torch.randn(2, 3, generator=torch.Generator().manual_seed(k)) for _ in range(2)])
        ring.segment.shipped_rows = ring.used
        ring.arrival.ship(copying if k else _Done(), ring.segment.host)
    if plain:
        monkeypatch.setattr(session.Session, "submit_planned", lambda self, arrival, lines, plan, launch, call, row: (
            self.submit_side(session.Job(None, arrival, ring_records.RingSide(
                plan, self.next_seq(len(plan.records)), launch, call, arrival, row)))))
    manifest = os.path.join(session.dump_path(), schema.MANIFEST_FILE)
    try:
        with sess._cond:  # the writer finds both queued
            for k, ring in enumerate(rings):
                sess.submit_planned(ring.arrival, lines, plans[k], 1 + k, 0, 0)
        for _ in range(3000):
            if os.path.exists(manifest) and os.path.getsize(manifest):
                break
            threading.Event().wait(0.01)
        with open(manifest, "rb") as f:
            first = _lines(f.read())
        assert [(r["kernel"], r["seq"]) for r in first] == [("k0", 1), ("k0", 2)]
    finally:
        copying.done()
    aoti_debug.flush()
    with open(manifest, "rb") as f:
        assert [(r["kernel"], r["seq"]) for r in _lines(f.read())] == [("k0", 1), ("k0", 2), ("k1", 3), ("k1", 4)]


@pytest.mark.parametrize("reuse", [False, True], ids=["sides", "taking"])
def test_a_failing_library_writes_runs_through_the_dict_path(library, fresh_session, monkeypatch, capfd, reuse):
    """A run's sides, expanded into their records (``SideRun.jobs``), are what the dict
    path writes for sides queued one job each."""
    lines = ring_records.for_library(library)
    monkeypatch.setattr(lines, "_fn", lambda spec: -2)
    monkeypatch.setattr(lines, "failed", False)
    expanded = []
    jobs = ring_records.SideRun.jobs
    monkeypatch.setattr(ring_records.SideRun, "jobs", lambda self: expanded.append(len(self.plans)) or jobs(self))
    sides = _reuse_sides(True) if reuse else _sides
    with_runs = _run(library, True, steps=4, cpu_side=False, sides=sides)
    assert capfd.readouterr().err.count("could not write device-ring records") == 1
    assert lines.failed and expanded == [18]
    assert with_runs == _run(library, False, steps=4, cpu_side=False, sides=sides)
    assert with_runs == _run(library, False, steps=4, cpu_side=False, sides=sides, plans=False)


def test_a_run_whose_ring_cannot_be_read_records_the_error(library, fresh_session, monkeypatch):
    expanded = []
    jobs = ring_records.SideRun.jobs
    monkeypatch.setattr(ring_records.SideRun, "jobs", lambda self: expanded.append(len(self.plans)) or jobs(self))
    broken = _run(library, True, steps=4, broken=True, cpu_side=False)
    assert expanded == [18]
    assert broken == _run(library, True, steps=4, broken=True, cpu_side=False, plans=False)
    assert broken.count(b"illegal memory access") == broken.count(b'"kind":"tensor"') - broken.count(b"uninitialised")


def test_runs_point_into_templates_their_plans_hold(library, fresh_session, monkeypatch):
    """The constant texts' cache, cleared at every new text, frees none a queued run's
    template points into (the plan holds them)."""
    monkeypatch.setattr(ring_records, "_MAX_TEXTS", 1)
    runs = _count_runs(monkeypatch)
    with_runs = _run(library, True, steps=4, cpu_side=False)
    assert [n for _a, n in runs] == [18]
    assert with_runs == _run(library, False, steps=4, cpu_side=False)


def test_a_template_that_cannot_be_made_takes_the_dict_path(library, fresh_session, monkeypatch, capfd):
    """The model's thread queues the side alone (``RingSide``); the writer's attempt fails
    too, warns once, and the dict path writes what it always writes."""
    lines = ring_records.for_library(library)
    monkeypatch.setattr(lines, "failed", False)

    def failing(self, plan):
        raise ValueError("records start otherwise")

    monkeypatch.setattr(ring_records.RingLines, "_plan_texts", failing)
    runs = _count_runs(monkeypatch)
    planned = _count_planned(monkeypatch)
    data = _run(library, True, steps=4, cpu_side=False)
    assert capfd.readouterr().err.count("could not write device-ring records") == 1
    assert len(planned) == 18 and not runs and lines.failed
    assert data == _run(library, False, steps=4, cpu_side=False)
