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
import os
import struct
import threading
from typing import Any, Sequence

import torch

from ..format.protocol import Site, SiteArg, record
from ..format.writer import encode_record
from .native_stats import NOGIL_BYTES

#: The function of the library (``library.cpp``), the layout of its ``spec`` this module
#: writes (``cpu_records.h``: kCpuLayout, the CpuSlot header, a CpuItem per value).
RECORDS_SYMBOL = "aoti_debug_rt_cpu_records"
LAYOUT = 2
ITEM_TENSOR, ITEM_UNWRITTEN, ITEM_INT, ITEM_SYMINT, ITEM_NONE = range(5)
#: The header's slots (CpuSlot) written after it is packed: the output buffer and what
#: the library writes back (where the lines and print lines end, errno).
_OUT, _RESULTS = struct.Struct("2q"), struct.Struct("3q")
_OUT_AT, _RESULTS_AT = 12 * 8, 14 * 8
_LENGTH, _LENGTH_AT = struct.Struct("q"), 8
#: The library's maker of its C function for a side's values (``cpu_values.h``), and what
#: that function returns besides the record function's codes.
VALUES_SYMBOL = "aoti_debug_rt_cpu_values_function"
VALUES_NOT_HERE, VALUES_FLATTEN, VALUES_SPEC_SMALL = -100, -101, -102
#: Let that function read a tensor's metadata from its TensorImpl where the library was
#: built knowing torch's tensor object and a probe tensor agrees (False: its attributes).
DIRECT_READS = True

_TENSOR, _PARAMETER = torch.Tensor, torch.nn.Parameter
_STRIDED = torch.strided
_INT64 = (-(1 << 63), (1 << 63) - 1)
#: Bytes of output the buffer starts with (grown when a side needs more).
_START_BYTES = 1 << 16
#: How a record's JSON starts and where its kernel call is, with the numbers zero.
_START = '{"seq":0,"launch":0,'
_CALL = ',"kernel_call":0,'


def _address(text: bytes) -> int:
    return ctypes.cast(text, ctypes.c_void_p).value or 0


class SidePlan:
    """The constant text of one launch side's records: per site, phase and graph label.

    Holds the byte strings the library reads and ``texts``, their (address, length)
    pairs as ``cpu_records.h`` reads them (CpuTexts): the head, the print prefix, then
    three per value. A value seen for the first time adds its texts to a copy of
    ``texts`` (under a lock: threads may run one compiled graph at once); the arrays
    replaced are kept, since another thread may hand the library the address of one."""

    def __init__(self, site: Site, phase: str, label: str, wrapper: str, printing: bool):
        self.site = site
        self.phase = phase
        self.label = label
        self.wrapper = wrapper
        self.printing = printing
        self._index_base = 0 if phase == "before" else len(site.before)
        self._keep: list[Any] = []
        self._lock = threading.Lock()
        head, _ = self._split(self._record(SiteArg("", "", "", ""), "", 0))
        self.texts = array.array("q", (*self._text(head),
                                       *self._text(f"[aoti_debug] {phase:<6} {site.kernel} launch=" if printing else "")))
        #: record arg name -> (its kind as a tensor, as an int, its number in ``texts``)
        self.entries: dict[str, tuple[int, int, int]] = {}
        #: The entry of each arg by position, for a side whose values hold no list or
        #: tuple (:meth:`Records.values_side`); made at its first such call.
        self.slots: tuple[tuple[int, int, int], ...] | None = None
        #: ``slots`` flattened, for the library's C function (cpu_values.h).
        self.slot_table = array.array("q")

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

    def entry(self, i: int, a: SiteArg, name: str) -> tuple[int, int, int]:
        """The value named ``name`` (arg ``a``, its ``i``-th value): its kind as a tensor and
        as an int, and its number in ``texts``."""
        with self._lock:
            found = self.entries.get(name)
            if found is None:
                _, body = self._split(self._record(a, name, i))
                texts = array.array("q", self.texts)
                texts.extend((*self._text(body), *self._text(f" {name} ({a.role}) " if self.printing else ""),
                              *self._text(f" {name} = " if self.printing else "")))
                self._keep.append(self.texts)
                self.texts = texts
                unwritten = a.uninitialised and self.phase == "before"
                found = self.entries[name] = (ITEM_UNWRITTEN if unwritten else ITEM_TENSOR,
                                              ITEM_SYMINT if a.kind_hint == "symint" else ITEM_INT,
                                              len(self.entries))
            return found

    def make_slots(self, args: Sequence[SiteArg]) -> tuple[tuple[int, int, int], ...]:
        """The entry of each arg by position (each value named by its arg)."""
        slots = tuple(self.entry(i, a, a.arg) for i, a in enumerate(args))
        self.slot_table = array.array("q", [x for slot in slots for x in slot])  # before `slots`: read after it
        self.slots = slots
        return slots


#: What :meth:`Records.values_side` returns for a side holding a list or tuple.
FLATTEN: Any = object()


def values_config(codes: dict) -> tuple:
    """The configuration of the library's C functions that read Python values
    (``cpu_values.h``, ``ring_side.h``): the dtype codes, the tensor types, and a probe
    tensor read both ways when a function is made (strided, with an offset; None: read
    tensors through their attributes only)."""
    probe = torch.arange(12.0).reshape(3, 4)[:, 1:] if DIRECT_READS else None
    return codes, _TENSOR, _PARAMETER, _STRIDED, NOGIL_BYTES, probe


class Records:
    """One runtime library's record function, with reusable output buffers per thread."""

    def __init__(self, library: Any):
        self.codes: dict[torch.dtype, tuple[int, int, bool]] = library.codes
        # Called with the GIL held; the library releases it for large sides itself, through
        # these (releasing it for a few microseconds of work hands it to another thread,
        # and taking it back can wait a whole switch interval, 5 ms).
        fn = ctypes.PyDLL(library.path, mode=ctypes.RTLD_LOCAL, handle=library._lib._handle)[RECORDS_SYMBOL]
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p]
        self._fn = fn
        api = ctypes.pythonapi
        self._gil = (ctypes.cast(api.PyEval_SaveThread, ctypes.c_void_p).value,
                     ctypes.cast(api.PyEval_RestoreThread, ctypes.c_void_p).value, NOGIL_BYTES)
        self._tls = threading.local()
        self._structs: dict[int, struct.Struct] = {}
        #: The library's C function for a side's values (``cpu_values.h``), or None where
        #: the library was built without Python's headers (the values are packed here).
        self._side: Any = None
        #: Whether it reads a tensor's metadata from its TensorImpl (not its attributes).
        self.direct_reads = False
        try:
            make = ctypes.PyDLL(library.path, mode=ctypes.RTLD_LOCAL, handle=library._lib._handle)[VALUES_SYMBOL]
        except AttributeError:
            make = None
        if make is not None:
            make.restype = ctypes.py_object
            make.argtypes = [ctypes.py_object]
            try:
                self._side, self.direct_reads = make(values_config(self.codes))
            except Exception:  # a library that refuses its configuration: the values are packed here
                self._side, self.direct_reads = None, False

    def values_side(self, plan: SidePlan, args: Sequence[SiteArg], values: Sequence[Any], launch: int, call: int,
                    next_seq: Any, fd: int) -> tuple[memoryview | None, str] | None:
        """:meth:`side` for a side's values as the hook got them, each named by its arg
        (``args``: the plan's site's args of its phase, always the same): the hot path, no
        flattened list to build, each value's texts found by position. :data:`FLATTEN`
        where a value is a list or tuple (the caller flattens the side for :meth:`side`)."""
        slots = plan.slots or plan.make_slots(args)
        if self._side is not None:
            return self._values_side_c(plan, values, launch, call, next_seq, fd)
        n = min(len(slots), len(values))
        if not n:
            return None
        codes = self.codes
        tls = self._tls
        out = getattr(tls, "out", None) or self._grow(_START_BYTES)
        # the header (cpu_records.h CpuSlot); the texts are complete: every slot has its entry
        spec: list[int] = [LAYOUT, 0, n, 0, launch, call, fd, *plan.texts.buffer_info(), *self._gil, *out, 0, 0, 0]
        try:
            for e, v in zip(slots, values):
                tv = type(v)
                if tv is _TENSOR or tv is _PARAMETER:
                    kind = codes.get(v.dtype)
                    if kind is None or v.layout is not _STRIDED or not v.is_cpu or v.is_neg() or \
                            (kind[2] and v.is_conj()):
                        return None
                    shape = v.shape
                    spec += (e[0], e[2], v.data_ptr(), kind[0], len(shape), *shape, *v.stride())
                elif tv is int and _INT64[0] <= v <= _INT64[1]:
                    spec += (e[1], e[2], v)
                elif v is None:
                    spec += (ITEM_NONE, e[2])
                elif tv is list or tv is tuple or isinstance(v, (list, tuple)):
                    return FLATTEN
                else:
                    return None
        except RuntimeError:  # a tensor without strides or storage (another layout)
            return None
        return self._write(plan, spec, n, next_seq, fd, out)

    def _values_side_c(self, plan: SidePlan, values: Sequence[Any], launch: int, call: int, next_seq: Any,
                       fd: int) -> tuple[memoryview | None, str] | None:
        """:meth:`values_side` by the library's C function: the same values read in the same
        order, the spec packed, the records numbered and written in one call."""
        tls = self._tls
        out = getattr(tls, "out", None) or self._grow(_START_BYTES)
        packed = getattr(tls, "spec", None)
        if packed is None:
            packed = self._spec_buffer(0)
        table = plan.slot_table  # held here while the library reads it
        texts = plan.texts.buffer_info()
        rc = self._side(tls.spec_address, len(packed) // 8, values, table.buffer_info()[0], len(table) // 3,
                        texts[0], texts[1], launch, call, fd, out[0], out[1], next_seq)
        if rc == VALUES_SPEC_SMALL:  # nothing numbered yet: again with room for the whole spec
            packed = self._spec_buffer(_LENGTH.unpack_from(packed, _LENGTH_AT)[0])
            rc = self._side(tls.spec_address, len(packed) // 8, values, table.buffer_info()[0], len(table) // 3,
                            texts[0], texts[1], launch, call, fd, out[0], out[1], next_seq)
        if rc == VALUES_NOT_HERE:
            return None
        if rc == VALUES_FLATTEN:
            return FLATTEN
        return self._result(plan, rc, fd, out, packed)

    def side(self, plan: SidePlan, flat: Sequence[tuple[int, SiteArg, str, Any]], launch: int, call: int,
             next_seq: Any, fd: int) -> tuple[memoryview | None, str] | None:
        """Writes the side's manifest lines to ``fd`` (the manifest; -1: returned instead)
        and returns ``(lines or None, print text)``; None where a value is not one this path
        writes (the caller's dict path records the side). ``flat``: ``(arg's position, arg,
        record arg name, value)`` of each flattened value. ``next_seq(n)`` hands out the
        records' numbers, once the side is known to be written here.

        Raises:
            OSError: writing to ``fd`` failed.
            RuntimeError: the library failed otherwise.
        """
        codes = self.codes
        entries = plan.entries
        tls = self._tls
        out = getattr(tls, "out", None) or self._grow(_START_BYTES)
        # the header (cpu_records.h CpuSlot)
        spec: list[int] = [LAYOUT, 0, len(flat), 0, launch, call, fd, 0, 0, *self._gil, *out, 0, 0, 0]
        try:
            for i, a, name, v in flat:
                e = entries.get(name) or plan.entry(i, a, name)
                tv = type(v)
                if tv is _TENSOR or tv is _PARAMETER:
                    kind = codes.get(v.dtype)
                    if kind is None or v.layout is not _STRIDED or not v.is_cpu or v.is_neg() or \
                            (kind[2] and v.is_conj()):
                        return None
                    shape = v.shape
                    spec += (e[0], e[2], v.data_ptr(), kind[0], len(shape), *shape, *v.stride())
                elif tv is int and _INT64[0] <= v <= _INT64[1]:
                    spec += (e[1], e[2], v)
                elif v is None:
                    spec += (ITEM_NONE, e[2])
                else:
                    return None
        except RuntimeError:  # a tensor without strides or storage (another layout)
            return None
        spec[7:9] = plan.texts.buffer_info()  # after every value's entry was made
        return self._write(plan, spec, len(flat), next_seq, fd, out)

    def _write(self, plan: SidePlan, spec: list[int], count: int, next_seq: Any, fd: int,
               out: tuple[int, int]) -> tuple[memoryview | None, str]:
        """Numbers the side's records, packs ``spec`` and calls the library (:meth:`side`)."""
        tls = self._tls
        n = len(spec)
        spec[1] = n
        spec[3] = next_seq(count)
        packed = getattr(tls, "spec", None)
        if packed is None or 8 * n > len(packed):
            packed = self._spec_buffer(n)
        layout = self._structs.get(n)
        if layout is None:
            layout = self._structs[n] = struct.Struct(f"{n}q")
        layout.pack_into(packed, 0, *spec)
        return self._result(plan, self._fn(tls.spec_address), fd, out, packed)

    def _result(self, plan: SidePlan, rc: int, fd: int, out: tuple[int, int],
                packed: bytearray) -> tuple[memoryview | None, str]:
        """What the library's call (``rc``, the spec in ``packed``) gave: ``(lines or None,
        print text)``; a second call where the output buffer was too small."""
        tls = self._tls
        if rc == 0 and fd >= 0 and not plan.printing:
            return None, ""  # written, nothing to print
        if rc == -3:  # a larger buffer, kept for the next sides
            _OUT.pack_into(packed, _OUT_AT, *self._grow(max(2 * out[1], _RESULTS.unpack_from(packed, _RESULTS_AT)[1])))
            rc = self._fn(tls.spec_address)
        end, total, errno = _RESULTS.unpack_from(packed, _RESULTS_AT)
        if rc == -4:
            raise OSError(errno, os.strerror(errno))
        if rc != 0:
            raise RuntimeError(f"{RECORDS_SYMBOL} returned {rc}")
        buf = tls.buf
        prints = buf[end:total].decode("utf-8", "replace") if total > end else ""
        return (memoryview(buf)[:end] if fd < 0 else None), prints

    def _grow(self, size: int) -> tuple[int, int]:
        """A new output buffer for this thread: its (address, size)."""
        tls = self._tls
        tls.buf = bytearray(size)
        tls.out = (ctypes.addressof((ctypes.c_char * size).from_buffer(tls.buf)), size)
        return tls.out

    def _spec_buffer(self, n: int) -> bytearray:
        """A buffer for a ``spec`` of at least ``n`` numbers for this thread."""
        tls = self._tls
        tls.spec = bytearray(8 * max(n, 4096))
        tls.spec_address = ctypes.addressof((ctypes.c_char * len(tls.spec)).from_buffer(tls.spec))
        return tls.spec


def for_library(library: Any) -> Records | None:
    """The record function of a loaded :class:`~aoti_debug.runtime.native_stats.Library`,
    or None when it has none (a library built from older sources)."""
    try:
        return Records(library)
    except (AttributeError, OSError):
        return None
