"""Stats and checksum of CPU tensors by the C++ runtime library, for the Python runtime.

Both runtimes summarise a CPU tensor with the same code: the library's
``aoti_debug_rt_cpu_summaries`` (``codegen/native/cpu_summary.h``) gathers a strided
tensor as the C++ runtime's ``record_tensor`` does and runs its ``summarize``, so a
Python-wrapper record and a ``cpp_wrapper`` record of the same values agree bit for bit.
``stats.device_summary`` (torch ops) remains for device tensors, for what the library
does not read (quantized, sparse, other layouts, tensor subclasses) and for a process
whose library could not be built.

The library is the one ``cpp_wrapper`` modules load (``libaoti_debug_rt.so``, built once
per content hash by ``codegen/native_library.py``); the emitted Python wrapper passes
its path to :func:`aoti_debug.runtime.hooks.graph`. One call summarises every CPU tensor
of a launch side; the Python work per tensor is reading its metadata.
"""

from __future__ import annotations

import array
import ctypes
import os
import threading
from typing import Sequence

import torch

from ..format.writer import EncodedDict
from .session import warn_once
from .stats import format_checksum, stats_fields

#: The C function and the dtype names it reads (``library.cpp``).
SUMMARIES_SYMBOL = "aoti_debug_rt_cpu_summaries"
DTYPE_NAME_SYMBOL = "aoti_debug_rt_dtype_name"
#: The tensor-file writer of level save (``library.cpp``, ``pt_writer.h``).
WRITE_PT_SYMBOL = "aoti_debug_rt_write_pt"
#: c10::ScalarType codes asked for a name when a library is loaded.
_MAX_CODE = 64
#: Doubles per tensor in the output (min, max, mean, std, absmax, nan, inf, status).
_WIDTH = 8
#: Exact types whose ``data_ptr`` is the values' memory (subclasses may wrap others).
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_STRIDED = torch.strided
#: Bytes of stats JSON text per tensor the library may write (it needs under 250).
_TEXT_BYTES = 320
#: Sides larger than this are summarised with the GIL released (other Python threads run).
NOGIL_BYTES = 1 << 20


class Library:
    """One loaded runtime library: its summary function and the dtypes it reads."""

    def __init__(self, path: str):
        """Raises OSError (cannot load) or AttributeError (not this runtime's library)."""
        self.path = path
        lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
        # The same function twice: called with the GIL held for small sides (releasing it
        # for a few microseconds of work hands it to the writer thread, and taking it back
        # can wait a whole switch interval, 5 ms), and releasing it for large ones.
        fn = ctypes.PyDLL(path, mode=os.RTLD_LOCAL, handle=lib._handle)[SUMMARIES_SYMBOL]
        fn_nogil = lib[SUMMARIES_SYMBOL]
        for f in (fn, fn_nogil):
            f.restype = ctypes.c_int
            f.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_char_p, ctypes.c_size_t]
        name = getattr(lib, DTYPE_NAME_SYMBOL)
        name.restype = ctypes.c_char_p
        name.argtypes = [ctypes.c_int32]
        #: torch dtype -> (the c10::ScalarType code the library reads it as, bytes per
        #: element, complex): from the library's own table, so codes live in one place.
        self.codes: dict[torch.dtype, tuple[int, int, bool]] = {}
        for code in range(_MAX_CODE):
            raw = name(code)
            dtype = getattr(torch, raw.decode(), None) if raw else None
            if isinstance(dtype, torch.dtype):
                self.codes[dtype] = (code, dtype.itemsize, dtype.is_complex)
        self._lib = lib
        self._fn = fn
        self._fn_nogil = fn_nogil
        write = getattr(lib, WRITE_PT_SYMBOL, None)  # (a CDLL function: the GIL is released for the write)
        if write is not None:
            write.restype = ctypes.c_int
            write.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p,
                              ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t]
        self._write_pt = write

    def write_pt(self, path: str, t: torch.Tensor, dir_fd: int | None = None) -> bool:
        """Write ``t`` (a contiguous CPU tensor, a host copy) to the new file ``path``
        (relative to the directory descriptor ``dir_fd`` where given; created with
        ``O_EXCL|O_NOFOLLOW``) as the C++ runtime writes tensor files (loadable with
        ``torch.load(weights_only=True)``), without the GIL and without pickling in Python.
        False where this library does not write it (another dtype, layout or subclass: the
        caller uses ``torch.save``); OSError, no file left behind, when the write failed."""
        fn = self._write_pt
        entry = self.codes.get(t.dtype)
        if (fn is None or entry is None or type(t) not in _PLAIN or t.layout is not _STRIDED or t.device.type != "cpu"
                or not t.is_contiguous() or t.is_conj() or t.is_neg()):
            return False
        ndim = t.dim()
        shape = (ctypes.c_int64 * max(ndim, 1))(*t.shape)
        err = ctypes.create_string_buffer(512)
        rc = fn(-1 if dir_fd is None else dir_fd, os.fsencode(path), entry[0], shape, ndim, t.data_ptr() or None,
                t.numel() * t.element_size(), err, len(err))
        if rc == -1:
            raise OSError(err.value.decode("utf-8", "replace"))
        return rc == 0

    def summarize(self, tensors: Sequence[torch.Tensor], shapes: Sequence[Sequence[int]] | None = None,
                  strides: Sequence[Sequence[int]] | None = None) -> list[tuple[dict, str] | None]:
        """``(stats, checksum)`` as a record holds them for each tensor, in one call; None
        for a tensor the library does not read (the caller summarises it otherwise).
        ``shapes``/``strides``: the tensors' own, where the caller has read them already."""
        out: list[tuple[dict, str] | None] = [None] * len(tensors)
        codes = self.codes
        spec: list[int] = []
        rows: list[int] = []
        keep = []
        nbytes = 0
        for j, t in enumerate(tensors):
            kind = codes.get(t.dtype)
            if kind is None or type(t) not in _PLAIN or not t.is_cpu or t.layout is not _STRIDED:
                continue
            code, itemsize, is_complex = kind
            if (is_complex and t.is_conj()) or t.is_neg():
                # A lazily conjugated/negated view: its memory does not hold its values.
                t = t.resolve_conj().resolve_neg()
                keep.append(t)
                shape, stride = t.shape, t.stride()
            else:
                shape = shapes[j] if shapes is not None else t.shape
                stride = strides[j] if strides is not None else t.stride()
            nbytes += itemsize * t.numel()
            spec.append(t.data_ptr())
            spec.append(code)
            spec.append(len(shape))
            spec.extend(shape)
            spec.extend(stride)
            rows.append(j)
        n = len(rows)
        if not n:
            return out
        packed = array.array("q", spec)
        stats = array.array("d", bytes(8 * _WIDTH * n))
        sums = array.array("Q", bytes(8 * n))
        text = ctypes.create_string_buffer(_TEXT_BYTES * n)
        fn = self._fn_nogil if nbytes > NOGIL_BYTES else self._fn
        rc = fn(packed.buffer_info()[0], len(packed), n, stats.buffer_info()[0], sums.buffer_info()[0], text,
                len(text))
        del keep
        if rc != 0:
            warn_once(f"native-stats-{rc}", f"the runtime library could not summarise CPU tensors (code {rc}); "
                                            f"using torch ops")
            return out
        lines = text.value.decode("ascii", "replace").split("\n")
        if len(lines) != n + 1:
            # Not the function this runtime was written against (a wrapper compiled with
            # other sources names another library): nothing it wrote is trusted.
            warn_once("native-stats-abi", f"the runtime library {self.path!r} answered in another layout; "
                                          f"CPU stats use torch ops")
            return out
        values = stats.tolist()
        checks = sums.tolist()
        for i, j in enumerate(rows):
            at = _WIDTH * i
            if values[at + 7] or not lines[i]:
                continue  # not read there after all: the caller's path
            fields = EncodedDict(stats_fields(*values[at:at + 7]))
            fields.json = lines[i]  # the same values as the library's records spell them
            out[j] = (fields, format_checksum(checks[i]))
        return out


_libraries: dict[str, Library | None] = {}
_lock = threading.Lock()


def load(path: str) -> Library | None:
    """The library at ``path``, loaded once per process; None (one warning) if it cannot be."""
    lib = _libraries.get(path, False)
    if lib is not False:
        return lib
    with _lock:
        if path in _libraries:
            return _libraries[path]
        try:
            lib = Library(path)
        except (OSError, AttributeError) as e:
            lib = None
            warn_once(f"native-stats-load:{path}", f"cannot load the runtime library {path!r} ({e}): CPU stats "
                                                   f"use torch ops, about 0.3 ms per tensor")
        _libraries[path] = lib
        return lib


def for_graph(path: str | None) -> Library | None:
    """The library a wrapper named: ``None`` passed (the Python API, older wrappers): none,
    torch ops; ``""``: the wrapper's compile could not build it (one warning)."""
    if path is None:
        return None
    if not path:
        warn_once("native-stats-missing", "the runtime library could not be built when this model was compiled "
                                          "(no C++ compiler?): CPU stats use torch ops, about 0.3 ms per tensor")
        return None
    return load(path)
