"""The records of a CPU launch side as manifest text from the runtime library: one C call
and one write per side.

At levels ``stats`` and ``print`` (without a flight recorder), a launch side whose values
are all plain strided CPU tensors of a dtype the library reads, ints and ``None`` is not
built as record dicts: the library (``codegen/native/cpu_records.h``) summarises the
tensors and writes the side's manifest lines, and level print's lines, from each value's
metadata and the text of the fields that do not change from one call of the launch to
the next. That text is encoded here once per launch site, phase and graph label
(:class:`SidePlan`), from :func:`~aoti_debug.format.protocol.record` itself, so the lines
hold the keys, values and key order that ``format.writer.encode_record`` gives the dict
path's records (``tests/test_cpu_records.py`` compares the two byte for byte). Anything
else on a side (a tensor the library does not read, a float or bool, a subclass) sends
the whole side down the dict path.
"""

from __future__ import annotations

import array
import ctypes
import threading
from typing import Any, Sequence

import torch

from ..format.protocol import Site, SiteArg, record
from ..format.writer import encode_record

#: The function of the library (``library.cpp``) and what its ``spec`` calls each value
#: (``cpu_records.h``'s CpuItem).
RECORDS_SYMBOL = "aoti_debug_rt_cpu_records"
ITEM_TENSOR, ITEM_UNWRITTEN, ITEM_INT, ITEM_SYMINT, ITEM_NONE = range(5)

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_STRIDED = torch.strided
_INT64 = (-(1 << 63), (1 << 63) - 1)
#: Sides whose tensors hold more than this are summarised with the GIL released.
NOGIL_BYTES = 1 << 20
#: Bytes of output the buffer starts with (grown when a side needs more).
_START_BYTES = 1 << 16
#: How a record's JSON starts and where its kernel call is, with the numbers zero.
_START = '{"seq":0,"launch":0,'
_CALL = ',"kernel_call":0,'


def _address(text: bytes) -> int:
    return ctypes.cast(text, ctypes.c_void_p).value or 0


class SidePlan:
    """The constant text of one launch side's records: per site, phase and graph label.

    Holds the byte strings the library reads (their addresses are in every ``spec``)."""

    def __init__(self, site: Site, phase: str, label: str, wrapper: str, printing: bool):
        self.site = site
        self.phase = phase
        self.label = label
        self.wrapper = wrapper
        self.printing = printing
        self._index_base = 0 if phase == "before" else len(site.before)
        self._keep: list[bytes] = []
        head, _ = self._split(self._record(SiteArg("", "", "", ""), "", 0))
        prefix = f"[aoti_debug] {phase:<6} {site.kernel} launch=" if printing else ""
        #: count, seq, launch, call: filled per call; then the head and the print prefix
        self.header = (*self._text(head), *self._text(prefix))
        #: record arg name -> (its kind when it is a tensor, then its texts)
        self.entries: dict[str, tuple[int, int, int, int, int, int, int, bool]] = {}

    def _record(self, a: SiteArg, name: str, i: int) -> dict:
        return record(seq=0, launch=0, graph=self.label, wrapper=self.wrapper, kernel=self.site.kernel,
                      op=self.site.op, kernel_call=0, phase=self.phase, arg=name, role=a.role,
                      index=self._index_base + i, expr=a.expr if a.expr and a.expr != a.arg else None,
                      volatile=a.volatile_reason(name) if a.volatile else None, site=self.site.id)

    @staticmethod
    def _split(rec: dict) -> tuple[str, str]:
        """The record's JSON between ``launch`` and ``kernel_call``, and after ``kernel_call``
        (the library writes the numbers around them)."""
        text = encode_record(rec)
        if not text.startswith(_START):
            raise ValueError(f"records start otherwise than the runtime library writes them: {text[:40]!r}")
        at = text.index(_CALL)  # a key: quotes inside string values are escaped
        return text[len(_START):at], text[at + len(_CALL):-1]

    def _text(self, text: str) -> tuple[int, int]:
        raw = text.encode("utf-8")
        self._keep.append(raw)
        return _address(raw), len(raw)

    def entry(self, i: int, a: SiteArg, name: str) -> tuple[int, int, int, int, int, int, int, bool]:
        """The kind and texts of the value named ``name`` (arg ``a``, its ``i``-th value)."""
        found = self.entries.get(name)
        if found is None:
            _, body = self._split(self._record(a, name, i))
            unwritten = a.uninitialised and self.phase == "before"
            found = self.entries[name] = (
                ITEM_UNWRITTEN if unwritten else ITEM_TENSOR, *self._text(body),
                *self._text(f" {name} ({a.role}) " if self.printing else ""),
                *self._text(f" {name} = " if self.printing else ""), a.kind_hint == "symint")
        return found


class Records:
    """One runtime library's record function, with a reusable output buffer per thread."""

    def __init__(self, library: Any):
        self.codes: dict[torch.dtype, tuple[int, int, bool]] = library.codes
        lib = library._lib
        fn = ctypes.PyDLL(library.path, mode=ctypes.RTLD_LOCAL, handle=lib._handle)[RECORDS_SYMBOL]
        fn_nogil = lib[RECORDS_SYMBOL]
        for f in (fn, fn_nogil):
            f.restype = ctypes.c_int
            f.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        self._fn = fn
        self._fn_nogil = fn_nogil
        self._tls = threading.local()

    def side(self, plan: SidePlan, flat: Sequence[tuple[int, SiteArg, str, Any]], launch: int, call: int,
             next_seq: Any) -> tuple[memoryview, str] | None:
        """The side's manifest lines and print text, or None where a value is not one this
        path writes (the caller's dict path records the side). ``next_seq(n)`` hands out
        the records' numbers, once the side is known to be written here."""
        codes = self.codes
        spec: list[int] = [len(flat), 0, launch, call, *plan.header]
        nbytes = 0
        entries = plan.entries
        for i, a, name, v in flat:
            e = entries.get(name) or plan.entry(i, a, name)
            tv = type(v)
            if tv in _PLAIN:
                kind = codes.get(v.dtype)
                if kind is None or v.layout is not _STRIDED or not v.is_cpu or v.is_neg() or \
                        (kind[2] and v.is_conj()):
                    return None
                shape = v.shape
                spec += e[:7]
                spec += (v.data_ptr(), kind[0], len(shape), *shape, *v.stride())
                nbytes += kind[1] * v.numel()
            elif tv is int and _INT64[0] <= v <= _INT64[1]:
                spec += (ITEM_SYMINT if e[7] else ITEM_INT, *e[1:7], v)
            elif v is None:
                spec += (ITEM_NONE, *e[1:7])
            else:
                return None
        spec[1] = next_seq(len(flat))
        packed = array.array("q", spec)
        lengths = array.array("q", (0, 0))
        tls = self._tls
        buf = getattr(tls, "buf", None)
        if buf is None:
            buf = self._grow(_START_BYTES)
        fn = self._fn_nogil if nbytes > NOGIL_BYTES else self._fn
        at, out = packed.buffer_info()[0], lengths.buffer_info()[0]
        rc = fn(at, len(packed), tls.address, len(buf), out)
        if rc == -3:  # a larger buffer, kept for the next sides
            buf = self._grow(max(2 * len(buf), lengths[1]))
            rc = fn(at, len(packed), tls.address, len(buf), out)
        if rc != 0:
            raise RuntimeError(f"{RECORDS_SYMBOL} returned {rc}")
        end, total = lengths[0], lengths[1]
        prints = buf[end:total].decode("utf-8", "replace") if total > end else ""
        return memoryview(buf)[:end], prints

    def _grow(self, size: int) -> bytearray:
        tls = self._tls
        tls.buf = bytearray(size)
        tls.address = ctypes.addressof((ctypes.c_char * size).from_buffer(tls.buf))
        return tls.buf


def for_library(library: Any) -> Records | None:
    """The record function of a loaded :class:`~aoti_debug.runtime.native_stats.Library`,
    or None when it has none (a library built from older sources)."""
    try:
        return Records(library)
    except (AttributeError, OSError):
        return None
