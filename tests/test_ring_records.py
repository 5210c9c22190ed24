"""Device-ring records written by the runtime library from the writer thread
(runtime/ring_records.py, native/ring_records.h): the same manifest, byte for byte, as
the record dicts' path, in record order, for every kind of side; the dict path where a
record needs it (print, extra fields, errors, no library, a failing library)."""

from __future__ import annotations

import os
import types

import pytest
import torch

import aoti_debug
from aoti_debug.format import schema, writer
from aoti_debug.format.protocol import PROTOCOL_VERSION, Site, SiteArg
from aoti_debug.runtime import device_ring, hooks, ring_records, session
from aoti_debug.runtime.stats import device_summary

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

    def __init__(self, cap: int = 1 << 14, odd: bool = True, broken: bool = False):
        self.segment = types.SimpleNamespace(cap=cap, host=torch.zeros(9 * cap, dtype=torch.float64), shipped_rows=0,
                                             release=lambda: None)
        self.arrival = device_ring.Arrival(self.segment)
        self.used = 0
        self.odd = odd
        self.broken = broken

    def stats(self, handle, items, rows):
        seg, first = self.segment, self.used
        sums = seg.host[8 * seg.cap:].view(torch.int64)
        for j, i in enumerate(rows):
            s, c = device_summary(items[i][1])
            row = s.tolist()
            at = first + j
            if self.odd and at % 3 == 2:
                row = [*_ODD_ROWS[(at // 3) % len(_ODD_ROWS)], 1.0]
            seg.host[8 * at: 8 * at + 8] = torch.tensor(row, dtype=torch.float64)
            sums[at] = -int(c) - 1 if at % 2 else int(c)  # negative checksums too
        self.used += len(rows)
        return self.arrival, {i: first + j for j, i in enumerate(rows)}

    def ship(self):
        self.segment.shipped_rows = self.used
        self.arrival.ship(_Broken() if self.broken else _Done())


def _arg(name, role="input", kind="tensor", expr=None, unwritten=False, volatile=()):
    return SiteArg(name, role, kind, expr or name, unwritten, volatile)


def _sides():
    """Transformer-like launch sides: (site, before values, after values)."""
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(8, 16, generator=g), torch.randn(16, 16, generator=g), torch.randn(16, generator=g)
    mm = Site("", "extern_kernels.addmm", "addmm", (_arg("b"), _arg("x"), _arg("w", expr="reinterpret_tensor(w, (16, 16))")),
              (_arg("buf0", "output"),), None, 1, "")
    fused = Site("", "triton_per_fused_\"layer_norm\u00e9_1", "k", (_arg("buf0", "inout"), _arg("ks0", kind="symint"),
                 _arg("eps", kind="scalar"), _arg("none", kind="unknown"), _arg("buf9", unwritten=True)),
                 (_arg("buf0", "inout"), _arg("outs", "output", "unknown", volatile=(("[1]", "rng seed"),))), None, 2, "")
    sub = Site("cond_true_0", "triton_poi_fused_add_2", "k", (_arg("xs", kind="unknown"),), (_arg("y", "output"),),
               None, -1, "")
    return [
        (mm, [b, x, w.t()], [torch.randn(8, 16, generator=g)]),
        (fused, [x.bfloat16(), 5, 1e-5, None, torch.empty(3)],
         [x.half(), (torch.ones(2), 7, None, (torch.zeros(0, 3),))]),
        (sub, [[x[::2], torch.arange(6), x[1]]], [torch.tensor(2.5)]),
    ]


def _run(library, native: bool, steps: int = 3, level: str = "stats", extra=None, broken=False, odd=True,
         cpu_side: bool = True) -> bytes:
    """The manifest bytes of ``steps`` calls of the sides, with ring records written by the
    library (``native``) or by the dicts, in a run directory of their own."""
    os.environ["AOTI_DEBUG_DIR"] = os.path.join(os.environ["AOTI_DEBUG_DIR"], "native" if native else "dicts")
    session.reset()
    ring = _HostRing(odd=odd, broken=broken)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(hooks.GraphHandle, "_ring_stats", lambda self, items, rows: ring.stats(self, items, rows))
        mp.setattr(hooks.GraphHandle, "_native_stats", lambda self, items: list(range(len(items))))
        mp.setattr(session, "BEFORE_FLUSH", [ring.ship])
        g = hooks.graph(None, level, False, protocol=PROTOCOL_VERSION, native=library.path if library else None)
        g._records = None  # CPU sides as dicts: every tensor takes the (fake) ring
        if not native:
            g._lines = None
        plain = Site("", "cpp_fused_scalar_3", "k", (_arg("n", kind="scalar"),), (_arg("m", kind="scalar"),), None, 3, "")
        for _ in range(steps):
            for site, before, after in _sides():
                g.launch(site, before)
                g.done(site, after, extra)
                if cpu_side:  # records with nothing to wait for, between ring records
                    g.launch(plain, (3,))
                    g.done(plain, (4.5,))
        aoti_debug.flush()
        path = session.dump_path()
        with open(os.path.join(path, schema.MANIFEST_FILE), "rb") as f:
            data = f.read()
    finally:
        mp.undo()
        session.reset()
        os.environ["AOTI_DEBUG_DIR"] = os.path.dirname(os.environ["AOTI_DEBUG_DIR"])
    return data


def _count_native(monkeypatch) -> list[int]:
    calls = [0]
    encode = ring_records.RingLines.encode

    def counted(self, jobs):
        calls[0] += len(jobs)
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


def test_print_level_keeps_the_dict_path(library, fresh_session, monkeypatch, capfd):
    calls = _count_native(monkeypatch)
    native = _run(library, True, level="print")
    err = capfd.readouterr().err
    assert calls[0] == 0
    assert native == _run(library, False, level="print")
    assert err == capfd.readouterr().err


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


def test_cuda_graph_replay_values_are_written_alike(library, fresh_session):
    """A CUDA-graph replay's host copy (cuda_graphs._Values, built here without a device)
    gives the library the rows the dict path reads: the same lines."""
    import threading as _threading

    from aoti_debug import config
    from aoti_debug.runtime import cuda_graphs

    n = len(_ODD_ROWS)
    values = object.__new__(cuda_graphs._Values)
    values._n = n
    values._host = torch.zeros(9 * n, dtype=torch.float64)
    values._host[: 8 * n] = torch.tensor([[*r, 1.0] for r in _ODD_ROWS], dtype=torch.float64).flatten()
    values._host[8 * n:].view(torch.int64)[:] = torch.tensor([-5, 0, 2 ** 63 - 1, -(2 ** 63), 77])
    values._event, values._lists, values._lock = _Done(), None, _threading.Lock()
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
