"""Stats and checksums of many tensors at once, in one pass over each (Triton on CUDA).

:func:`summarize` is the batched form of :func:`aoti_debug.runtime.stats.device_summary`
for all tensors of one launch side: it returns ``stats`` (float64 ``[k, 8]``) and
``checksums`` (int64 ``[k]``) on the tensors' device, with the same meaning as
``device_stats`` / ``device_checksum``, without any host sync. With ``packed=True`` it
returns the one float64 buffer of ``9*k`` values both live in (``stats`` rows first,
then the checksums' bits), so that the caller needs one device->host copy; split the
host copy with :func:`unpack`.

How (CUDA, and CPU under ``TRITON_INTERPRET=1`` for tests):

* the tensors are grouped by element kind (one Triton launch per kind present, usually
  one); a small int64 table (cached on the device by content) gives each tensor's
  offset from the group's lowest-addressed tensor, numel, programs and output row;
* each program reads one chunk of one tensor once, as raw bits (uint8/16/32/int64),
  accumulating per lane: finite min/max, shifted sums ``sum(x-K)`` and
  ``sum((x-K)^2)`` in float64 (``K`` = the chunk's first element when finite, else 0),
  finite/NaN counts and the checksum terms ``bits * (2*i + 1)`` in wrapping int64 (the
  contiguous kernel's whole tiles assume finite values and are summed again, value by
  value, only when the sum of squares says a NaN or an infinity was there);
* it writes its partials, then takes a ticket (``atomic_add``, acq_rel): the last
  program of a tensor combines that tensor's partials (exact two-level combination,
  ``M2 = sum M2_p + sum n_p (mean_p - mean)^2``) and writes the row and the checksum.
  So a launch side costs one kernel launch per kind (plus one tiny H2D copy of the
  table when the tensors' addresses are new) instead of ~20 torch ops per tensor.

Layouts read in place: contiguous tensors, and any other strided tensor one of whose dims
(size > 1) has unit stride, whatever the other dims' strides: permutes (channels_last,
channels_last_3d, transposes), gaps (slices such as the q/k/v thirds of a fused QKV
buffer, ``narrow``, ``select``), stride-0 dims (``expand``) and overlapping
``as_strided`` views, at any element-aligned storage offset. These go to a variant of
the kernel (``_stats_kernel_perm``, one launch per kind and tile width) that reads the
tensor as ``[rows, inner]`` (``inner`` the unit-stride run, after merging dims adjacent
in both memory and logical order: NCHW channels_last reads as ``[N*H*W, C]``; rows in
memory order, outermost first) in tiles of ``[BLOCK // CB, CB]`` with ``CB`` a power of
two fitted to ``inner`` (:func:`_cols`): element ``(r, c)`` is read at memory offset
``mem(r) + c`` and weighed in the checksum by its logical index ``base(r) + c *
L_inner``, both bases from one mixed-radix decomposition of ``r`` per tile row over at
most :data:`MAX_ROW_DIMS` row dims (:class:`_Perm`). Each logical element is read once
(an expanded or overlapping element once per logical index, as ``.contiguous()`` would
copy it). A strided tensor without a unit-stride dim (``x[:, ::2]``) or with more row
dims is read from a ``.contiguous()`` copy. A strided tensor whose elements fill a dense
block of memory (channels_last activations, permutes: no gaps, no repeats) is read in
memory order instead, by the contiguous kernel's loop (``_stats_kernel_dense``), where a
tile of ``BLOCK`` or ``BLOCK // 2`` elements keeps its logical index affine within each tile
(:func:`_dense_layout`: ResNet's activations), or a span of whole periods below the tile
does, the lanes past it masked (an image's runs of 3 channels in spans of 3 x 256): the
checksum weighs element ``t * S + a`` by ``f(t) + w(a)``, the lanes' weights computed once
a program and the tiles' walked, so no element or row needs a division. The C++ runtime reads the same
layouts in place for the kinds, tile widths and dense tiles its pack holds
(``codegen.device_stats.PERM_KINDS``, ``PERM_COLS``, ``dense_blocks``) and copies the others.

Exactness: checksums are bit-identical to ``device_checksum`` (a sum mod 2**64 does
not depend on the order of additions). min, max, absmax and the counts are exact.
mean and std are float64 results whose rounding differs from the torch path (which
sums in float64 too): every element is exact in float64 (int64 beyond 2**53 is rounded
as ``.to(torch.float64)`` rounds it); the cross-program combination is exact up to
float64 rounding; the one error source beyond rounding is the cancellation in a
program's ``M2 = S2 - S1^2/n`` of its shifted sums, relative error about
``2**-53 * sqrt(elements a lane sums) * S2/M2`` (a lane: a thread's 16-byte vector over
the program's tiles) where ``S2/M2 = 1 + n (mean-K)^2/M2`` is
O(1) for ordinary data and at most the chunk's element count when ``K`` is an extreme
outlier (chunk: 4096 elements for tensors up to ~2M elements, growing with size so
that a tensor gets at most ``PROGRAMS_PER_SM * SMs`` programs): 1e-15 typical, <1e-8 worst case.
Tests check mean to 1e-12 (relative to absmax) and std to 1e-9 relative. Sums that
overflow float64 (float64 data near 1e154 and up) give inf/NaN in different places
than the torch path.

Kinds handled by the kernel: bool, uint8/16/32/64, int8/16/32/64, float16, bfloat16,
float32, float64, float8_e4m3fn, float8_e5m2 and complex32/64/128 (as their real
view). Anything else (other float8/float4 formats, quantized, sparse, conjugate or
negative views...) goes through ``stats.device_summary`` for that tensor.
Without Triton, or off CUDA (unless interpreting), the whole batch does.

``AOTI_DEBUG_FUSED_STATS=0`` (or ``fused_stats.ENABLED = False``) turns the kernel off.
"""

from __future__ import annotations

import array
import ctypes
import logging
import math
import os
import struct
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

import torch

from ..config import ENV_FUSED_STATS, ENV_STATS_COMPILE, STATS_COMPILE_MODES
from .stats import device_summary

#: Elements per tile (one vector of the program), warps per program.
BLOCK = 1024
NUM_WARPS = 4
#: A tensor gets at most this many programs per SM (more tiles per program beyond): as
#: many as the registers let an SM hold at once (the kernels use 128 of a thread's, up to
#: ~250 for strided tiles narrower than 8 columns or unaligned; 65536 an SM), so that a
#: tensor's programs run in one wave. 4, 6 or 8 a SM measured slower on the H200.
PROGRAMS_PER_SM = 3
#: Tiles per program at least (small tensors: one program; fewer partials to combine).
MIN_TILES = 4
_TBLOCK = 64   # tensors looked up per step when a program finds its tensor
_RBLOCK = 512  # partials a tensor's last program combines in one step (one load of each up to this many)
#: A strided tensor read in place has at most this many dims besides its inner run (after
#: merging dims adjacent in both memory and logical order); more go through a contiguous copy.
MAX_ROW_DIMS = 6
#: ... and fewer rows than this (the kernel divides row numbers in 32 bits); more: copied.
MAX_PERM_ROWS = 1 << 31
_PERM_TW = 9 + 3 * MAX_ROW_DIMS  # int64 per table row of the strided kernel (_PERM_DIMS)
#: Dims of a dense tensor's lane and tile weights at most (fused_stats_kernels._DENSE_MAX):
#: its memory dims (the inner run and at most MAX_ROW_DIMS), and one for the lanes' quotient.
_DENSE_MAX = MAX_ROW_DIMS + 2
_DENSE_TW = 8 + 4 * _DENSE_MAX  # int64 per table row of the dense kernel (_DENSE_DIMS)
#: Read tensors that fill a dense block of memory in another order (channels_last, permutes)
#: in memory order with the dense kernel where a tile size fits their dims
#: (:func:`_dense_layout`); False: with the strided kernel, as before (benchmarks compare).
DENSE_READS = True
#: A tile row's cost in elements (the row's logical index: a div/mod per row dim), for
#: choosing the tile's width (:func:`_cols`).
_ROW_COST = 16

# kind: (code, width in bytes, is_float). The code selects the decoder in the kernel.
_KINDS: dict[torch.dtype, tuple[int, int, bool]] = {
    torch.bool: (0, 1, False),
    torch.uint8: (1, 1, False),
    torch.int8: (2, 1, False),
    torch.float8_e4m3fn: (3, 1, True),
    torch.float8_e5m2: (4, 1, True),
    torch.int16: (5, 2, False),
    torch.float16: (6, 2, True),
    torch.bfloat16: (7, 2, True),
    torch.int32: (8, 4, False),
    torch.float32: (9, 4, True),
    torch.int64: (10, 8, False),
    torch.float64: (11, 8, True),
    torch.uint16: (12, 2, False),
    torch.uint32: (13, 4, False),
    torch.uint64: (14, 8, False),
}

#: Kinds whose pointers go to Triton as plain bytes (bool, the float8s).
_BYTE_CODES = (0, 3, 4)

_lock = threading.Lock()
_UNSET: Any = object()
_kernel_obj: Any = _UNSET             # the Triton kernel, None when triton is unusable
_perm_kernel_obj: Any = None          # its variant for other strided tensors (set with it)
_dense_kernel_obj: Any = None         # its variant for dense permutations (set with it)
_interpreted = False                  # the kernel runs in Triton's interpreter
_broken: set[tuple] = set()           # (kind, vec, tile width, 0, or -1/-span: dense) whose compile/launch failed
_compiling: dict[tuple, Future] = {}  # variant -> its background compile (COMPILE_BACKGROUND)
_compile_pool: ThreadPoolExecutor | None = None
_tables: dict[tuple, torch.Tensor] = {}
_compiled: dict[tuple, Any] = {}      # (device, kind, vec, block, aligned pointers) -> compiled kernel
_scratch: dict[tuple, list] = {}      # (device, stream) -> [partials f64, counters i32]
_sm_count: dict[int, int] = {}
_TABLE_CACHE_MAX = 4096
_sides: dict[tuple, tuple] = {}       # _side_key -> the side's launches (_Launch), see summarize
_SIDE_CACHE_MAX = 4096
_STRIDED = torch.strided
_layouts: dict[tuple, Any] = {}       # (shape, strides) -> _Perm, or None: not read in place
_denses: dict[tuple, Any] = {}        # (_Perm, block, width) -> _Dense, or None: the strided kernel
_LAYOUT_CACHE_MAX = 4096

#: ``AOTI_DEBUG_FUSED_STATS=0`` (read at import) sends everything down the torch-op path.
ENABLED = os.environ.get(ENV_FUSED_STATS, "1") != "0"


def _compile_mode(value: str | None) -> str:
    mode = (value or "").strip().lower() or "inline"
    if mode not in STATS_COMPILE_MODES:
        logging.getLogger("aoti_debug").warning("aoti_debug: %s=%r is not one of %s; using inline",
                                                ENV_STATS_COMPILE, value, ", ".join(STATS_COMPILE_MODES))
        mode = "inline"
    return mode


#: ``AOTI_DEBUG_STATS_COMPILE=background`` (read at import): a variant not compiled yet
#: (:data:`_compiled`) is compiled on :data:`COMPILE_THREADS` threads (Triton releases the
#: GIL in its LLVM passes and ptxas runs as a process) while its launches' tensors take the
#: torch-op path (the same bits for every exact field; mean and std summed in another
#: order); a launch inside a CUDA-graph capture waits for its variant instead. ResNet-18's
#: first call on an H200 with cold caches: 28.9 s against 42.5 s inline
#: (``benchmarks/stats_kernel_compiles.py``). ``inline`` (the default until the GPU suite
#: has run with it: a first call's mean and std differ from later calls' in the last bits)
#: compiles at the first launch.
COMPILE_BACKGROUND = _compile_mode(os.environ.get(ENV_STATS_COMPILE)) == "background"
#: Threads for background compiles: half the cores, at most 8 (they run while the model does).
COMPILE_THREADS = max(1, min(8, (os.cpu_count() or 2) // 2))


# --------------------------------------------------------------------------- kernel


def _kernel():
    """The Triton kernel, or None (no usable triton). Imported on first use.

    Triton decides at import whether the kernel runs compiled or in its interpreter
    (``TRITON_INTERPRET=1``); an interpreted kernel also serves CPU tensors (tests).
    """
    global _kernel_obj, _perm_kernel_obj, _dense_kernel_obj, _interpreted
    if _kernel_obj is _UNSET:
        with _lock:
            if _kernel_obj is _UNSET:
                try:
                    from .fused_stats_kernels import _stats_kernel, _stats_kernel_dense, _stats_kernel_perm

                    _interpreted = type(_stats_kernel).__name__ == "InterpretedFunction"
                    _perm_kernel_obj = _stats_kernel_perm
                    _dense_kernel_obj = _stats_kernel_dense
                    _kernel_obj = _stats_kernel
                except Exception:  # no triton, or one this code cannot use
                    _kernel_obj = None
    return _kernel_obj


# --------------------------------------------------------------------------- host side


def enabled_for(device: torch.device) -> bool:
    """Whether :func:`summarize` uses the Triton kernel for tensors on ``device``."""
    if not ENABLED or device.type not in ("cuda", "cpu"):
        return False
    if _kernel() is None:
        return False
    return device.type == "cuda" or _interpreted


class _Perm(NamedTuple):
    """How the strided kernel reads a non-contiguous tensor in place: as ``[rows, inner]``,
    the inner run of unit memory stride, rows in memory order; element ``(r, c)`` at memory
    offset ``mem(r) + c`` (elements from the tensor's first one), of logical (row-major)
    index ``base(r) + c * inner_stride``; ``mem`` and ``base`` decompose ``r`` over ``dims``
    (``(size, logical stride, memory stride)`` per row dim, innermost first)."""

    inner: int
    inner_stride: int
    dims: tuple[tuple[int, int, int], ...]


def _perm_layout(shape: Sequence[int], strides: Sequence[int]) -> _Perm | None:
    """The :class:`_Perm` of a non-contiguous tensor of ``shape`` and ``strides`` that has a
    unit-stride dim of size > 1, whatever its other strides (a permute, gaps, stride 0,
    overlaps); None otherwise (contiguous, empty, no unit-stride dim, a negative stride,
    more than :data:`MAX_ROW_DIMS` row dims, :data:`MAX_PERM_ROWS` rows or more).

    Dims adjacent in logical order (size-1 dims ignored) that are adjacent in memory too
    merge into one (channels_last NCHW reads as ``[N, H*W, C]``: rows ``N*H*W``, inner run
    ``C``; an expanded ``[B, 1, S, S]`` mask read as ``[B, H, S, S]``: rows ``B*H`` of ``S*S``).
    The inner run is the longest unit-stride dim left (the logically innermost of equals);
    the row dims follow in memory order, outermost first (by stride, then logical order),
    so that consecutive rows are near in memory (q, a ``[B, H, S, D]`` view of a fused QKV
    buffer ``[B, S, 3*H*D]``, reads as ``B*S*H`` rows of ``D``, row dims ``B, S, H`` of
    memory strides ``S*3*H*D, 3*H*D, D``)."""
    dims: list[tuple[int, int, int]] = []  # (memory stride, logical stride, size), logically innermost first
    logical = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1:
            if stride < 0:
                return None
            if dims and stride == dims[-1][0] * dims[-1][2]:  # the next dim in memory too
                dims[-1] = (dims[-1][0], dims[-1][1], dims[-1][2] * size)
            else:
                dims.append((stride, logical, size))
        logical *= size
    if logical == 0:
        return None  # empty: nothing to read (and is_contiguous() says so)
    units = [d for d in dims if d[0] == 1]
    if not units or len(dims) < 2 or len(dims) - 1 > MAX_ROW_DIMS:
        return None  # no unit-stride run, contiguous (one run), or more row dims than the kernel decomposes
    inner = max(units, key=lambda d: (d[2], -d[1]))
    if logical // inner[2] >= MAX_PERM_ROWS:
        return None  # the kernel decomposes row numbers in 32 bits (_row_bases): copied instead
    dims.remove(inner)
    dims.sort(reverse=True)  # memory order, outermost first
    return _Perm(inner[2], inner[1], tuple((n, ls, ms) for ms, ls, n in reversed(dims)))


class _Dense(NamedTuple):
    """How the dense kernel reads a tensor that fills a dense block of memory in another
    order than the logical one: in memory order, in tiles of ``span`` elements, element
    ``t * span + a`` (memory offset from the tensor's first element: tile ``t``, lane
    ``a``) of logical index ``f(t) + w(a)``; ``w`` and ``f`` each a sum of mixed-radix
    digits times weights, ``(size, weight)`` per digit, innermost first, the last taking
    the quotient (its size 0). ``block``: the kernel's tile (a power of two); a ``span``
    below it leaves the lanes past ``span`` masked (the kernel's ``PART``)."""

    block: int
    lanes: tuple[tuple[int, int], ...]
    tiles: tuple[tuple[int, int], ...]
    span: int


#: A tile of whole periods that no power of two holds (a run of 3 channels) is read in tiles
#: of at least this share of the kernel's lanes; fewer: the strided kernel.
_MIN_SPAN_SHARE = 4
#: Each such span is a variant of the dense kernel, compiled at its first use: a process
#: reads tensors in at most this many spans (the first met), any other with the strided
#: kernel, so that a model of many odd shapes does not compile a kernel for each.
MAX_SPANS = 16
_spans: set[int] = set()


def _split(dims: list[tuple[int, int]], k: int, m: int) -> tuple[tuple, tuple]:
    """The lane and tile digits of tiles holding ``dims[:k]`` whole and ``m`` of dim ``k``."""
    if k == len(dims):  # the whole tensor in one tile
        return tuple(dims[:-1]) + ((0, dims[-1][1]),), ((0, 0),)
    lanes = tuple(dims[:k]) + ((0, dims[k][1]),)
    tiles = ((dims[k][0] // m, m * dims[k][1]),) + tuple(dims[k + 1:])
    return lanes, tiles[:-1] + ((0, tiles[-1][1]),)


def _dense_layout(perm: _Perm, block: int, width: int) -> _Dense | None:
    """The :class:`_Dense` of a tensor read in place as ``perm`` whose elements fill a dense
    block of memory (each row dim's memory stride the product of the sizes inside it); None
    when it has gaps, repeats or 2**32 elements or more, or when no tile keeps the logical
    index affine within each tile.

    Memory dims innermost first, sizes ``s_d`` and logical strides ``l_d``, dim ``d``
    ``P_d = s_0 ... s_(d-1)`` elements apart: a tile of ``S`` elements holds whole periods
    of the dims below ``k`` (``S = P_k m``) and ``m`` of dim ``k``, which never wraps inside
    a tile (``m`` divides ``s_k``); then lane ``a`` has digits ``a // P_d % s_d`` below ``k``
    and ``a // P_k`` in dim ``k``, and tile ``t`` the digits of ``t`` over
    ``(s_k / m, s_(k+1), ...)`` with weights ``m l_k, l_(k+1), ...``. First a power of two,
    ``block`` or ``block // 2`` (NCHW channels_last, memory ``[N, H*W, C]``, with ``C`` a
    power of two up to the tile dividing it into ``H*W``: ResNet's activations); else the
    largest ``S`` of whole 16-byte vectors, at least ``block`` / :data:`_MIN_SPAN_SHARE`,
    read by a kernel of ``block`` lanes (``block // 2`` for ``S`` up to half of it) with the
    lanes past ``S`` masked (an image's runs of 3 channels: ``S = 3 * 256``; a 3x3 conv's
    weight with 64 input channels: ``S = 64 * 9``)."""
    dims = [(perm.inner, perm.inner_stride)]
    numel = perm.inner
    for size, ls, ms in perm.dims:
        if ms != numel:
            return None  # gaps, a stride-0 dim or overlaps
        dims.append((size, ls))
        numel *= size
    if numel >= 1 << 32:
        return None
    vec = 16 // width
    for b in (block, block // 2):
        if b < vec or b & (b - 1):
            continue
        k, period = 0, 1  # the first dim whose period does not divide the tile
        while k < len(dims) and b % (period * dims[k][0]) == 0:
            period *= dims[k][0]
            k += 1
        if k == len(dims) or dims[k][0] % (b // period) == 0:
            return _Dense(b, *_split(dims, k, b // period if k < len(dims) else 0), b)
    best: tuple[int, int, int] | None = None  # (span, k, m)
    period = 1
    for k, (size, _ls) in enumerate(dims):
        if period > block:
            break
        m = next((m for m in range(min(size, block // period), 0, -1) if size % m == 0 and period * m % vec == 0), 0)
        if m and (best is None or period * m >= best[0]):  # of equals the outer (m = s_k is m = 1 of k + 1)
            best = (period * m, k, m)
        period *= size
    if numel <= block and numel % vec == 0 and (best is None or numel > best[0]):
        best = (numel, len(dims), 0)
    if best is None or best[0] * _MIN_SPAN_SHARE < block:
        return None
    span, k, m = best
    b = block if span * 2 > block or block // 2 < vec else block // 2
    return _Dense(b, *_split(dims, k, m), span)


def _dense_of(perm: _Perm, block: int, width: int) -> _Dense | None:
    """:func:`_dense_layout`, cached; None while :data:`DENSE_READS` is off, and for a
    span below the tile past the first :data:`MAX_SPANS`."""
    if not DENSE_READS:
        return None
    key = (perm, block, width)
    try:
        return _denses[key]
    except KeyError:
        pass
    if len(_denses) >= _LAYOUT_CACHE_MAX:
        _denses.clear()
    found = _dense_layout(perm, block, width)
    if found is not None and found.span != found.block and found.span not in _spans:
        if len(_spans) >= MAX_SPANS:
            found = None
        else:
            _spans.add(found.span)
    _denses[key] = found
    return found


def _layout_of(t: torch.Tensor) -> _Perm | None:
    """:func:`_perm_layout` of a non-contiguous tensor, cached by shape and strides."""
    return _cached_layout(t.shape, t.stride())


def _cached_layout(shape: Sequence[int], strides: Sequence[int]) -> _Perm | None:
    key = (shape, strides)
    try:
        return _layouts[key]
    except KeyError:
        pass
    if len(_layouts) >= _LAYOUT_CACHE_MAX:
        _layouts.clear()
    found = _layouts[key] = _perm_layout(shape, strides)
    return found


def _cols(inner: int, block: int) -> int:
    """The strided kernel's tile width for an inner run of ``inner`` elements: the power
    of two up to ``block`` that reads a row for the least lanes plus per-row work."""
    best, cost = 1, None
    cb = 1
    while cb <= block:
        c = -(-inner // cb) * (cb + _ROW_COST)
        if cost is None or c < cost:
            best, cost = cb, c
        cb *= 2
    return best


def _prepare(t: torch.Tensor):
    """``((kind, width, is_float), tensor, layout)`` for the kernel, or None (torch-op path):
    the tensor is contiguous (layout None) or has a :class:`_Perm` (read in place by the
    strided kernel); any other strided tensor is a contiguous copy."""
    spec = _KINDS.get(t.dtype)
    if spec is None and not t.is_complex():
        return None
    if t.layout != torch.strided or t.is_neg() or t.is_conj():
        return None
    if spec is None:
        t = torch.view_as_real(t.detach())
        spec = _KINDS.get(t.dtype)
        if spec is None:
            return None
    if not t.is_contiguous():
        perm = _layout_of(t)
        if perm is not None and t.data_ptr() % spec[1] == 0:
            return spec, t, perm
        t = t.detach().contiguous()
    elif t.data_ptr() % spec[1]:
        t = t.detach().clone()  # an element-misaligned view (hand-made storage offset): realign
    return spec, t, None


def _sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1
    n = _sm_count.get(device.index)
    if n is None:
        n = _sm_count[device.index] = torch.cuda.get_device_properties(device).multi_processor_count
    return n


def _stream_key(device: torch.device) -> tuple:
    if device.type != "cuda":
        return (str(device), 0)
    try:
        return (device.index, torch._C._cuda_getCurrentRawStream(device.index))
    except Exception:
        return (device.index, torch.cuda.current_stream(device).cuda_stream)


def _empty(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A buffer kept across launches: on CUDA outside any CUDA-graph pool (see
    ``device_ring.private_empty``: a buffer of ours left in the pool of a CUDA-graph
    tree's warm-up fails its memory check)."""
    if device.type == "cuda":
        from .device_ring import private_empty

        return private_empty(n, dtype, device)
    return torch.empty(n, dtype=dtype, device=device)


def _retire(stale: list[torch.Tensor], device: torch.device) -> None:
    """Buffers about to be dropped that queued kernels may still read: a private block is
    handed out again on the private stream, so wait for the device first (rare: a
    scratch that grows, a full table cache)."""
    if device.type == "cuda" and stale:
        torch.cuda.synchronize(device)


def _scratch_for(stream_key: tuple, device: torch.device, programs: int, rows: int):
    """Partials (float64 [programs*9]) and zeroed counters (int32 [rows]), one pair per stream.

    Reuse is safe because launches on one stream run in order and every launch leaves
    the counters it used at zero.
    """
    s = _scratch.get(stream_key)
    if s is None:
        s = _scratch[stream_key] = [_empty(0, torch.float64, device), _empty(0, torch.int32, device)]
    if s[0].numel() < programs * 9 or s[1].numel() < rows:
        _retire([t for t in s if t.numel()], device)
    if s[0].numel() < programs * 9:
        s[0] = _empty(max(programs * 9, 2 * s[0].numel(), 4096), torch.float64, device)
    if s[1].numel() < rows:
        s[1] = _empty(max(rows, 2 * s[1].numel(), 256), torch.int32, device).zero_()
    return s[0], s[1]


def _device_table(values: list[int], stream_key: tuple, device: torch.device) -> torch.Tensor:
    """The int64 table on ``device``; cached by content (addresses repeat step after step)."""
    key = (stream_key, *values)
    tab = _tables.get(key)
    if tab is None:
        if len(_tables) >= _TABLE_CACHE_MAX:
            _retire(list(_tables.values()), device)
            _tables.clear()
        if device.type == "cuda":
            # pinned + non_blocking: no host sync; torch keeps the pinned block until the copy ran
            tab = _empty(len(values), torch.int64, device)
            tab.copy_(torch.tensor(values, dtype=torch.int64, device="cpu", pin_memory=True), non_blocking=True)
        else:
            tab = torch.tensor(values, dtype=torch.int64, device="cpu")
        _tables[key] = tab
    return tab


def plan(ptrs: Sequence[int], numels: Sequence[int], rows: Sequence[int], width: int, spare: int, block: int,
         max_programs: int, min_tiles: int, spans: Sequence[int] | None = None) -> tuple[int, int, list[int], int]:
    """One launch's layout, for tensors of one kind at ``ptrs`` (element ``width`` bytes):
    ``(base address, vec, table, programs)``. The C++ runtime builds the same
    (``codegen/native/device_stats.h``).

    The base is the lowest non-empty tensor's address (``spare`` when every tensor is
    empty); ``vec`` is 16 bytes of elements when the base and every tensor's offset from
    it are 16-byte aligned, else 1. Table row per tensor (int64): offset from the base in
    units of ``vec`` elements, numel, first program, programs, tiles per program, output
    row. Programs of one tensor are consecutive; a program finds its tensor by counting
    first programs <= pid. ``spans``: each tensor's tile in elements (default ``block``).
    """
    live = [p for p, n in zip(ptrs, numels) if n]
    base = min(live) if live else spare
    vec = 16 // width
    if base % 16 or (vec > 1 and any((p - base) % 16 for p in live)):
        vec = 1
    unit = width * vec
    values: list[int] = []
    programs = 0
    for i, (p, n, row) in enumerate(zip(ptrs, numels, rows)):
        tiles = -(-n // (spans[i] if spans else block))
        per = max(min_tiles, -(-tiles // max_programs))
        nprog = max(1, -(-tiles // per))
        values += ((p - base) // unit if n else 0, n, programs, nprog, per, row)
        programs += nprog
    return base, vec, values, programs


def plan_permuted(ptrs: Sequence[int], numels: Sequence[int], layouts: Sequence[_Perm], rows: Sequence[int],
                  width: int, block: int, cols: int, max_programs: int,
                  min_tiles: int) -> tuple[int, int, list[int], int]:
    """:func:`plan` for the strided kernel: tensors of one kind read in place, tiles of
    ``[block // cols, cols]`` elements over each tensor's ``[rows, inner]`` (never empty:
    an empty tensor is contiguous). ``vec`` is 16 bytes of elements also when every row of
    every tensor starts 16-byte aligned (each row dim's memory stride a multiple of it),
    every inner run is a multiple of it and a tile row holds at least one. Table row per
    tensor: :func:`plan`'s six values, then the inner run (units of ``vec``), its logical
    stride, the number of row dims and their ``(size, logical stride, memory stride in units
    of vec)``, innermost first, padded to ``_PERM_TW`` values."""
    base = min(ptrs)
    vec = 16 // width
    if base % 16 or (vec > 1 and (cols < vec or any((p - base) % 16 for p in ptrs)
                                  or any(lay.inner % vec or any(ms % vec for _, _, ms in lay.dims)
                                         for lay in layouts))):
        vec = 1
    unit = width * vec
    rb = block // cols
    values: list[int] = []
    programs = 0
    for p, n, lay, row in zip(ptrs, numels, layouts, rows):
        tiles = -(-(n // lay.inner) // rb) * -(-lay.inner // cols)
        per = max(min_tiles, -(-tiles // max_programs))
        nprog = max(1, -(-tiles // per))
        dims = [v for size, ls, ms in lay.dims for v in (size, ls, ms // vec)]
        values += ((p - base) // unit, n, programs, nprog, per, row, lay.inner // vec, lay.inner_stride,
                   len(lay.dims), *dims, *[0] * (_PERM_TW - 9 - len(dims)))
        programs += nprog
    return base, vec, values, programs


def plan_dense(ptrs: Sequence[int], numels: Sequence[int], denses: Sequence[_Dense], rows: Sequence[int],
               width: int, spare: int, max_programs: int, min_tiles: int) -> tuple[int, int, list[int], int]:
    """:func:`plan` for the dense kernel (tensors of one kind and one :class:`_Dense` tile
    size and span, which the kernel is compiled for): its six values, then the numbers of
    lane and tile dims and their ``(size, weight)``, each list padded to ``_DENSE_MAX``
    pairs. A tile walk's period (the first tile dim's size) is ``2**62`` where that dim
    takes the quotient (it never wraps)."""
    base, vec, values, programs = plan(ptrs, numels, rows, width, spare, denses[0].block, max_programs, min_tiles,
                                       [d.span for d in denses])
    out: list[int] = []
    for i, d in enumerate(denses):
        tiles = d.tiles if len(d.tiles) > 1 else ((1 << 62, d.tiles[0][1]),)
        lanes = [v for pair in d.lanes for v in pair]
        walk = [v for pair in tiles for v in pair]
        out += (*values[6 * i:6 * i + 6], len(d.lanes), len(tiles), *lanes, *[0] * (2 * _DENSE_MAX - len(lanes)),
                *walk, *[0] * (2 * _DENSE_MAX - len(walk)))
    return base, vec, out, programs


def _planned(kernel, ptrs: Sequence[int], numels: Sequence[int], rows: Sequence[int], width: int, spare: int,
             block: int, max_programs: int, min_tiles: int, cols: int, layouts: Sequence[Any]):
    """The kernel a launch group takes (``cols``: 0 the contiguous one, > 0 the strided
    one, < 0 the dense one) and its planner's ``(base, vec, table, programs)``."""
    if cols < 0:
        return _dense_kernel_obj, plan_dense(ptrs, numels, layouts, rows, width, spare, max_programs, min_tiles)
    if cols:
        return _perm_kernel_obj, plan_permuted(ptrs, numels, layouts, rows, width, block, cols, max_programs,
                                               min_tiles)
    return kernel, plan(ptrs, numels, rows, width, spare, block, max_programs, min_tiles)


def _launch(kernel, items: list[tuple[int, torch.Tensor]], spec: tuple, out: torch.Tensor, k_total: int,
            device: torch.device, stream_key: tuple, block: int, max_programs: int, min_tiles: int,
            static: Any = None, cols: int = 0, layouts: Sequence[_Perm] = ()) -> None:
    """One launch for all tensors of one kind: ``items`` = [(output row, contiguous tensor)],
    laid out by :func:`plan`; with ``cols``, the strided kernel's launch for tensors read
    in place (``layouts``: their :class:`_Perm`), laid out by :func:`plan_permuted`; with
    ``cols`` -1, the dense kernel's (``layouts``: their :class:`_Dense`, of one tile size,
    ``block``; ``-span``: of that span below it), laid out by :func:`plan_dense`."""
    code, width, is_float = spec
    ptrs = [t.data_ptr() for _, t in items]
    numels = [t.numel() for _, t in items]
    rows = [row for row, _ in items]
    kernel, (base_ptr, vec, values, programs) = _planned(kernel, ptrs, numels, rows, width, out.data_ptr(), block,
                                                         max_programs, min_tiles, cols, layouts)
    base = next((t for (_, t), p, n in zip(items, ptrs, numels) if n and p == base_ptr), out)
    if code in _BYTE_CODES and base is not out:
        base = base.view(torch.uint8)  # bool / float8 pointers: plain bytes for Triton
    if (code, vec, cols) in _broken:
        raise RuntimeError("the kernel failed before for this dtype")
    if static is not None:  # inside a CUDA-graph capture: the graph's own static buffers
        tab = static.table_for(values)
        part, counters = static.scratch(programs, k_total)
    else:
        tab = _device_table(values, stream_key, device)
        part, counters = _scratch_for(stream_key, device, programs, k_total)
    extra = _extra_args(cols)
    try:
        if not _interpreted:
            # base_ptr is base's address (out's when every tensor is empty: plan's spare)
            addr = (base_ptr, tab.data_ptr(), part.data_ptr(), counters.data_ptr(), out.data_ptr())
            variant = _variant(device, code, vec, block, addr, cols)
            args = (addr[0], addr[1], len(items), addr[2], addr[3], addr[4], k_total,
                    code, width, is_float, vec, block, _TBLOCK, _RBLOCK) + tuple(extra.values())
            compiled = _compiled.get(variant)
            if compiled is not None and _direct_launch(compiled, programs, stream_key[1], args):
                return _Launch(compiled, programs, stream_key[1], args[:5], args[7:], addr[4] % 16 == 0,
                               (tab, part, counters))
        jit_kwargs = _jit_kwargs(spec, vec, block, extra)
        if not _interpreted and compiled is None and (COMPILE_BACKGROUND or variant in _compiling):
            _await_compile(kernel, variant, device, programs, static is not None,
                           _warmup_args(addr, (base.dtype, tab.dtype, part.dtype, counters.dtype, out.dtype),
                                        len(items), k_total), jit_kwargs)
        compiled = kernel[(programs,)](base, tab, len(items), part, counters, out, k_total, **jit_kwargs)
        if not _interpreted and _launchable(compiled):
            _compiled[variant] = compiled
    except NotCompiled:
        raise
    except Exception:
        if static is None:
            _broken.add((code, vec, cols))
        raise
    return None


def _variant(device: torch.device, code: int, vec: int, block: int, addr: Sequence[int], cols: int) -> tuple:
    """What decides which compiled kernel a launch takes (:data:`_compiled`,
    :data:`_compiling`): the device, kind, vector width, tile, each pointer's 16-byte
    alignment (base, table, partials, counters, output: Triton specialises on it) and the
    kernel (``cols``)."""
    return (device.index, code, vec, block, tuple([a % 16 == 0 for a in addr]), cols)


def _jit_kwargs(spec: tuple, vec: int, block: int, extra: dict[str, int]) -> dict:
    """The JIT call's keywords (the constexprs and warps) for a launch group of kind ``spec``;
    ``extra``: :func:`_extra_args` of its kernel."""
    code, width, is_float = spec
    return dict(KIND=code, WIDTH=width, IS_FLOAT=is_float, VEC=vec, BLOCK=block, TBLOCK=_TBLOCK, RBLOCK=_RBLOCK,
                num_warps=NUM_WARPS, **extra)


#: The dtypes of a launch's own buffers after its base pointer: table, partials, counters, output.
_BUFFER_DTYPES = (torch.int64, torch.float64, torch.int32, torch.float64)


def _warmup_args(addr: Sequence[int], dtypes: Sequence[torch.dtype], k: int, k_total: int) -> tuple:
    """The positional arguments of a background compile (``warmup``): the launch's five
    pointers as :class:`_Ptr` (address and dtype: what Triton specialises on), its tensor
    count and row total, in the kernel's order."""
    base, tab, part, counters, out = (_Ptr(a, d) for a, d in zip(addr, dtypes))
    return base, tab, k, part, counters, out, k_total


class NotCompiled(Exception):
    """A stats-kernel variant still compiling in the background: the launch's tensors take
    the torch-op path this time (:func:`summarize`)."""


class _Ptr:
    """A pointer argument for Triton's ``warmup``: what its specialisation reads of a tensor
    (the address's alignment and the dtype), without holding the tensor while the compile runs."""

    __slots__ = ("_address", "dtype")

    def __init__(self, address: int, dtype: torch.dtype):
        self._address, self.dtype = address, dtype

    def data_ptr(self) -> int:
        return self._address


def _await_compile(kernel: Any, variant: tuple, device: torch.device, programs: int, capturing: bool,
                   args: tuple, kwargs: dict) -> None:
    """Return when ``variant`` may take Triton's JIT launch without compiling there: its
    background compile is done (a compile that failed fails again in the launch, which
    marks it broken), or, inside a CUDA-graph capture or with background compiles off,
    after waiting for it (none pending: the launch compiles it). Otherwise the compile is
    started (once) and :class:`NotCompiled` raised."""
    future = _compiling.get(variant)
    wait = capturing or not COMPILE_BACKGROUND
    if future is None:
        if wait:
            return  # compiled inline, as without background compiles
        future = _start_compile(kernel, variant, device, programs, args, kwargs)
    if wait:
        future.exception()  # waits (a compile started ahead: precompile); an error shows at the launch
    elif not future.done():
        raise NotCompiled(variant)


def _start_compile(kernel: Any, variant: tuple, device: torch.device, programs: int, args: tuple,
                   kwargs: dict) -> Future:
    """The background compile of ``variant``, started once."""
    global _compile_pool
    with _lock:
        future = _compiling.get(variant)
        if future is None:
            # Triton's per-device caches are made here, on this thread: two threads
            # making them at once would each keep their own (a Triton without them:
            # at worst a variant compiled twice).
            caches = getattr(kernel, "device_caches", None)
            if caches is not None:
                caches[device.index if device.type == "cuda" else device]
            if _compile_pool is None:
                _compile_pool = ThreadPoolExecutor(COMPILE_THREADS, thread_name_prefix="aoti_debug_compile")
                _at_exit(_drop_queued_compiles)
            future = _compiling[variant] = _compile_pool.submit(_compile, kernel, device, programs, args, kwargs)
    return future


def _at_exit(fn) -> None:
    """``fn`` at the interpreter's exit, before ``concurrent.futures`` joins its workers
    (``threading._register_atexit`` runs its hooks latest first; ``atexit`` would run after
    the join). Without it, plain ``atexit``."""
    register = getattr(threading, "_register_atexit", None)
    try:
        if register is not None:
            register(fn)
            return
    except RuntimeError:  # (already shutting down)
        return
    import atexit

    atexit.register(fn)


def _drop_queued_compiles() -> None:
    """At exit: the compiles not started yet are dropped (a process that ends right after
    its compile would otherwise run every variant predicted and never launched); those
    running finish, as ``concurrent.futures`` joins its workers."""
    pool = _compile_pool
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


def wait_for_compiles() -> int:
    """Wait until every background compile started so far is done (failed ones included:
    their launches fail and go to torch ops); the number waited for. Benchmarks call it
    before timing steps, tests before comparing paths."""
    pending = [f for f in list(_compiling.values()) if not f.done()]
    for future in pending:
        future.exception()
    return len(pending)


def _compile(kernel: Any, device: torch.device, programs: int, args: tuple, kwargs: dict) -> None:
    """Triton's compile of one variant into its in-memory cache, on a background thread
    (``warmup``: specialised like the launch, nothing launched)."""
    if device.type == "cuda":
        with torch.cuda.device(device.index):
            kernel.warmup(*args, grid=(programs,), **kwargs)
    else:
        kernel.warmup(*args, grid=(programs,), **kwargs)


def _extra_args(cols: int) -> dict[str, int]:
    """The constexprs after the contiguous kernel's, by name in the kernel's order (the
    JIT call's keywords; their values the direct launch's arguments): the strided kernel's
    tile width and table row; the dense kernel's table row and its span where below its
    tile (``cols`` -1: whole tiles, ``PART`` 0; ``-span``: ``PART`` = span)."""
    if cols > 0:
        return {"CB": cols, "TW": _PERM_TW}
    if cols < 0:
        return {"TW": _DENSE_TW, "PART": -cols if cols < -1 else 0}
    return {}


class _Launch(NamedTuple):
    """One direct launch of a side, kept for the side's next occurrence (:data:`_sides`):
    every argument but the output's address and row count, which follow the ring row."""

    compiled: Any
    programs: int
    stream: int
    head: tuple   # base, table, tensors, partials, counters (addresses and a count)
    tail: tuple   # the constexprs
    out_aligned: bool
    keep: tuple   # the table and scratch the addresses point into, kept alive with the entry


def _side_key(tensors: Sequence[torch.Tensor], stream_key: tuple) -> tuple[tuple, list[torch.Tensor]] | None:
    """What decides a side's launches: the stream and, for each tensor as the kernel
    reads it, its address (with the storage offset), numel and dtype, and for a strided
    tensor read in place (:func:`_perm_layout`) its shape and strides too; with the
    tensors it reads (a contiguous copy of any other strided one: the caching allocator
    hands the copy the same block step after step). None where some tensor takes another
    path (a kind the kernel does not decode, a negated view, an element-misaligned address)."""
    key: list = [stream_key]
    ready: list[torch.Tensor] = []
    for t in tensors:
        dtype = t.dtype
        spec = _KINDS.get(dtype)
        if spec is None or t.layout is not _STRIDED or t.is_neg():
            return None
        if t.is_contiguous():
            p = t.data_ptr()
            key += (p, t.numel(), dtype)
        elif _cached_layout(shape := t.shape, strides := t.stride()) is not None:
            p = t.data_ptr()
            key += (p, t.numel(), dtype, shape, strides)
        else:
            t = t.detach().contiguous()
            p = t.data_ptr()
            key += (p, t.numel(), dtype)
        if p % spec[1]:
            return None
        ready.append(t)
    return tuple(key), ready


def rows_from(first: int, rows: int) -> int:
    """The ``k_total`` a launch writing rows ``first ..`` of a ring buffer of ``rows`` rows
    is given, its output pointer at row ``first``: the kernel writes row r's stats at
    ``out + 8r`` and its checksum at ``out + 8*k_total + r``, which are rows ``first + r``
    of the buffer's two regions when ``8*k_total = 8*rows - 7*first`` (``first`` a
    multiple of 8)."""
    return rows - 7 * first // 8


def _launch_side(launches: tuple[_Launch, ...], out: torch.Tensor, first: int, rows: int) -> bool:
    """The launches of a side seen before, into rows ``first ..`` of the ring buffer
    ``out`` (of ``rows`` rows), as :func:`summarize` addresses them; False where they
    cannot be repeated (the output's alignment changed, launch hooks were installed).

    Kept launches (:class:`_Kept`) go through the runtime library's launcher where one
    is bound (:func:`bind_launcher`): one C call for the side, about a microsecond of
    host time a launch, against Triton's launcher's ~16 us (an H100 host)."""
    if _launch_hooks_installed():
        return False
    out_addr = out.data_ptr() + 64 * first
    aligned = out_addr % 16 == 0
    if any(x.out_aligned != aligned for x in launches):
        return False
    k_total = rows_from(first, rows)
    launch = _library_launch
    if launch:
        packed = getattr(launches, "packed", False)  # (a plain tuple: Triton's launcher)
        if packed is None:
            packed = launches.packed = _pack_launches(launches)
        if packed:
            rc = launch(packed[1], out_addr, k_total)
            if rc == 0:
                return True
            _unbind_launcher(rc)
            if rc != -1:  # some launches may have been made: the caller summarises the side again
                raise RuntimeError(f"cuLaunchKernel failed with CUresult {rc}")
    for x in launches:
        _run(x.compiled, x.programs, x.stream, (*x.head, out_addr, k_total, *x.tail))
    return True


class _Kept(tuple):
    """A side's kept launches (each a :class:`_Launch`), as :data:`_sides` holds them, and
    their spec for the runtime library's launcher: ``(array, its address)``, made at the
    first repeat (:func:`_pack_launches`); False: Triton's launcher."""

    packed: Any = None


#: The runtime library's launcher of kept launches (``aoti_debug_rt_kept_launches``,
#: codegen/native/library.cpp), bound by the hooks; None: Triton's launcher (False: for
#: good, the library's failed).
_library_launch: Any = None
KEPT_LAUNCHES_SYMBOL = "aoti_debug_rt_kept_launches"


def bind_launcher(library: Any) -> None:
    """Repeat kept launches through ``library`` (a ``native_stats.Library``): its
    ``aoti_debug_rt_kept_launches``, called with the GIL held (releasing it for a few
    microseconds hands it to the writer thread, and taking it back can wait a whole
    switch interval). Nothing where the library has no such function."""
    global _library_launch
    if _library_launch is not None or library is None:
        return
    try:
        fn = ctypes.PyDLL(library.path, mode=os.RTLD_LOCAL, handle=library._lib._handle)[KEPT_LAUNCHES_SYMBOL]
    except (AttributeError, OSError):
        return  # a library built from older sources
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int32]
    _library_launch = fn


#: The runtime library's planned CUDA side function (``ring_side.h``: one C call checks a
#: planned side's values and repeats its kept launches), bound with the launcher; None:
#: the hooks check and launch in Python (False: for good).
side_function: Any = None
SIDE_FUNCTION_SYMBOL = "aoti_debug_rt_ring_side_function"
#: ``ring_side.h``'s spec (kSideLayout, kSideHeader, the item kinds) and results.
SIDE_LAYOUT, SIDE_HEADER = 1, 6
_ITEM_RING, _ITEM_TENSOR, _ITEM_INT, _ITEM_NONE, _ITEM_BOOL, _ITEM_FLOAT = range(6)
SIDE_LAUNCHED, SIDE_MISMATCH, SIDE_MOVED, SIDE_NOT_HERE, SIDE_NO_DRIVER = range(5)
SIDE_CUDA = 1000
#: c10::DeviceType of the devices a spec names.
_DEVICE_TYPES = {"cpu": 0, "cuda": 1}
_DOUBLE_BITS = struct.Struct("=d")
_INT64 = struct.Struct("=q")


def bind_side_function(library: Any, config: tuple) -> None:
    """Check and launch planned sides through ``library``'s ``ring_side.h`` function,
    configured with ``config`` (``cpu_records.values_config``); nothing where the library
    has none or cannot read tensors from their ``TensorImpl`` (the hooks' Python path)."""
    global side_function
    if side_function is not None or library is None:
        return
    side_function = False
    try:
        make = ctypes.PyDLL(library.path, mode=os.RTLD_LOCAL, handle=library._lib._handle)[SIDE_FUNCTION_SYMBOL]
    except (AttributeError, OSError):
        return  # built without Python's headers, or from older sources
    make.restype = ctypes.py_object
    make.argtypes = [ctypes.py_object]
    try:
        side_function = make(config) or False
    except Exception:  # a library refusing the configuration: the Python path
        side_function = False
    if side_function:
        _bind_express_function(library)


#: The runtime library's hooks of express launches (``ring_express.h``: one C call numbers
#: a launch, checks and launches its side, and queues its records), bound with the side
#: function; None or False: the hooks' Python (``GraphHandle._express_launch``).
express_function: Any = None
EXPRESS_FUNCTION_SYMBOL = "aoti_debug_rt_ring_express_function"
#: What it returns besides ``SIDE_CUDA`` + a CUresult (``ring_express.h``): the hook done;
#: nothing done (the Python path); the launch numbered, its side left to the Python path.
EXPRESS_DONE, EXPRESS_DECLINED, EXPRESS_SIDE_LEFT = range(3)


def _bind_express_function(library: Any) -> None:
    global express_function, _express_left
    express_function = False
    try:
        make = ctypes.PyDLL(library.path, mode=os.RTLD_LOCAL, handle=library._lib._handle)[EXPRESS_FUNCTION_SYMBOL]
    except (AttributeError, OSError):
        return  # from older sources
    make.restype = ctypes.py_object
    make.argtypes = [ctypes.py_object]
    from . import device_ring, hooks, session

    try:
        made = make((session, hooks, device_ring, sys.modules[__name__]))
    except Exception:  # the Python path
        return
    if made:
        express_function, _express_left = made


_express_left: Any = None


def express_left(reset: bool = False) -> dict[int, int]:
    """Where hooks left the library's express function for the Python path, as ``{line of
    ring_express.h: count}`` since the process started (or the last ``reset``): for tests
    and benchmarks that must know a path stayed in C, and why not."""
    return _express_left(reset) if _express_left is not None else {}


def side_spec(meta: Sequence[tuple], ring_at: Sequence[int] | None, ptrs: Sequence[int], launches: Any,
              device: torch.device | None, codes: dict) -> tuple | bool:
    """``(spec, its address, launches)`` for :data:`side_function`: a planned side's
    values as ``SidePlan.meta`` holds them (``ring_at``: the positions of those the ring
    summarises, None: all; ``ptrs``: their addresses, as the kept ``launches`` read them
    on ``device``), in ``ring_side.h``'s layout; ``launches`` None: the values checked
    alone (``ring_at`` empty, no launch). False where the function cannot take the
    side: its launches are not the library's (:func:`_pack_launches`), they disagree on
    the rows' alignment, or some value is one the spec does not hold (a dtype the
    library has no code for ``codes``, a device other than CPU and CUDA, an int beyond
    int64)."""
    if launches is None:  # a check alone: a side that takes every tensor from its producers
        packed, aligned = (None, 0), False
    else:
        packed = getattr(launches, "packed", None)
        if not launches or not packed or not _library_launch or len({x.out_aligned for x in launches}) != 1:
            return False
        aligned = launches[0].out_aligned
    ring = range(len(meta)) if ring_at is None else frozenset(ring_at)
    at = iter(ptrs)
    items: list[int] = []
    try:
        for i, (dtype, kind, value, dev) in enumerate(meta):
            if dtype is None:  # a scalar: SidePlan.meta's (None, type, value, None)
                if value is None:
                    items.append(_ITEM_NONE)
                elif kind is bool:
                    items += (_ITEM_BOOL, int(value))
                elif kind is int:
                    items += (_ITEM_INT, _INT64.unpack(_INT64.pack(value))[0])
                elif kind is float:
                    items += (_ITEM_FLOAT, _INT64.unpack(_DOUBLE_BITS.pack(value))[0])
                else:
                    return False
                continue
            code, device_type = codes.get(dtype), _DEVICE_TYPES.get(dev.type)
            if code is None or device_type is None:
                return False
            in_ring = i in ring
            items += (_ITEM_RING if in_ring else _ITEM_TENSOR, code[0], device_type,
                      -1 if dev.index is None else dev.index, len(kind), *kind, *value)
            if in_ring:
                items.append(next(at))
        spec = array.array("q", [SIDE_LAYOUT, SIDE_HEADER + len(items), len(meta), packed[1],
                                 device.index if device is not None and device.index is not None else -1,
                                 int(aligned), *items])
    except (struct.error, StopIteration, OverflowError, TypeError):
        return False
    return spec, spec.buffer_info()[0], launches


def _unbind_launcher(rc: int) -> None:
    global _library_launch
    _library_launch = False
    from .session import warn_once

    warn_once("kept-launches", f"the runtime library could not launch the stats kernel (CUresult {rc}): "
                               f"Triton's launcher from now on")


def _pack_launches(launches: tuple[_Launch, ...]) -> tuple[array.array, int] | bool:
    """The spec of ``launches`` for ``aoti_debug_rt_kept_launches`` (its layout: there),
    or False where one of them is a launch that function does not make: clusters,
    scratch memory, cooperative or programmatic-dependent launches, or parameters other
    than the kernel's seven and Triton's scratch pointers (from the compiled PTX)."""
    from ..codegen.stats_worker import launch_fields, plain_launch, ptx_params, scratch_pointers

    fields = [len(launches)]
    for x in launches:
        compiled = x.compiled
        md = compiled.metadata
        if not plain_launch(launch_fields(md)):
            return False
        try:
            scratch = scratch_pointers(ptx_params(compiled.asm["ptx"])[1])
        except Exception:
            return False
        if scratch is None:
            return False
        fields += (compiled.function, x.programs, 32 * md.num_warps, md.shared, x.stream, scratch, *x.head)
    try:
        spec = array.array("q", fields)
    except (TypeError, OverflowError):  # a handle not loaded (None), or not an address
        return False
    return spec, spec.buffer_info()[0]


def kept_launches(tensors: Sequence[torch.Tensor], device: torch.device) -> tuple[_Launch, ...] | None:
    """The launches :func:`summarize` keeps for a side whose tensors are these, where the
    kernel reads the tensors themselves (no copy made for the side), on ``device``'s
    current stream; None where none are kept now; ``()`` where the kernel reads a copy of
    some tensor (neither contiguous nor read in place: :func:`_perm_layout`), which its
    layout decides. A
    caller that knows the tensors are still where they were may repeat them with
    :func:`_launch_side` instead of calling :func:`summarize`."""
    for t in tensors:
        if not t.is_contiguous() and _layout_of(t) is None:
            return ()  # a copy (found before _side_key, which would make it)
    found = _side_key(tensors, _stream_key(device))
    return None if found is None else _sides.get(found[0])


def _launchable(compiled: Any) -> bool:
    """Whether ``compiled`` (what Triton's JIT launch returned) can be launched directly
    the next time: Triton 3.x's compiled kernel, with its launcher and metadata."""
    return all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata"))


def _no_hooks(hook: Any) -> bool:
    """A launch hook slot with nothing in it: None, or Triton 3.6's empty ``HookChain``."""
    return hook is None or getattr(hook, "calls", None) == []


def _direct_launch(compiled: Any, programs: int, stream: int, args: tuple) -> bool:
    """Launch a compiled variant without Triton's JIT dispatch (which binds, specialises
    and hashes every argument at every call: most of a launch's host time). The arguments
    are those the JIT call passed, in the kernel's order, pointers as integers; the
    variant was chosen by the same alignment specialisation Triton's JIT applies. False
    (the caller takes the JIT path) where launch hooks are installed (a profiler such as
    Proton): they get their metadata from the JIT path."""
    if _launch_hooks_installed():
        return False
    _run(compiled, programs, stream, args)
    return True


_knobs: Any = None


def _launch_hooks_installed() -> bool:
    """Triton launch hooks are set (a profiler such as Proton): launches take the JIT path."""
    global _knobs
    knobs = _knobs
    if knobs is None:
        from triton import knobs as found

        knobs = _knobs = found.runtime
    return not (_no_hooks(knobs.launch_enter_hook) and _no_hooks(knobs.launch_exit_hook))


def _run(compiled: Any, programs: int, stream: int, args: tuple) -> None:
    """``compiled``'s Triton launcher on ``programs`` programs of ``stream``, with the
    kernel's arguments in order (pointers as integers)."""
    compiled.run(programs, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None, *args)


def _group_of(spec: tuple, perm: Any, block: int) -> tuple[tuple, Any]:
    """A tensor's launch group in a side, ``(spec, cols, tile)``, and the layout the group's
    planner takes for it: contiguous (``perm`` None) one group per kind; a dense
    permutation one per kind and tile size (``cols`` -1, or ``-span``); any other layout
    read in place one per kind and strided tile width (:func:`_cols`)."""
    if perm is None:
        return (spec, 0, block), None
    dense = _dense_of(perm, block, spec[1])
    if dense is not None:
        return (spec, -1 if dense.span == dense.block else -dense.span, dense.block), dense
    return (spec, _cols(perm.inner, block), block), perm


def _sides_of(groups: dict[tuple, list[tuple[int, int, Any]]]) -> Iterator[tuple[tuple, list]]:
    """The sides whose variants :func:`precompile` predicts for each launch group: the
    whole group, its aligned members first (a side that mixes them: an aligned base, one
    element a vector), and each member alone (a side of aligned members only: 16 bytes a
    vector; of a misaligned one: its own base). A contiguous group's variant depends on
    the alignment of its base and of every offset from it (:func:`plan`), not on which
    tensors a side holds, so these cover every side of its members. The strided and dense
    kernels' vectors depend on each layout too: for them these are the likely sides, not
    every one (a variant missed compiles at its first launch, as without precompile)."""
    for key, members in groups.items():
        yield key, sorted(members, key=lambda m: m[0] % 16 != 0)
        if len(members) > 1:
            for member in members:
                yield key, [member]


def precompile(layouts: Iterable[tuple[torch.dtype, Sequence[int], Sequence[int], int]],
               device: torch.device) -> int:
    """Start the background compiles of the stats-kernel variants that tensors of these
    layouts (dtype, sizes, strides, storage offset in elements) will need on ``device``,
    each in a buffer of its own as the caching allocator places one (16-byte aligned);
    the number started. A compiled graph's wrapper knows its tensors' layouts before its
    first call (``codegen.manager``): their variants compile while Inductor finishes, and
    the first call's launches wait for them (``inline``) or take torch ops until they are
    done (``background``). A variant that no tensor meets costs one compile on the pool;
    one predicted wrong (a view's address) compiles at its launch as without this.

    Tensors are grouped per layout kind as one side would group them (:func:`summarize`);
    nothing is allocated, read or launched."""
    if device.type != "cuda" or _interpreted or not ENABLED:
        return 0
    kernel = _kernel()
    if kernel is None:
        return 0
    groups: dict[tuple, list[tuple[int, int, Any]]] = {}
    for dtype, sizes, strides, offset in layouts:
        spec = _KINDS.get(dtype)
        if spec is None:
            continue  # (complex and others: their first launch compiles them)
        sizes, strides = tuple(int(v) for v in sizes), tuple(int(v) for v in strides)
        numel = math.prod(sizes)
        contiguous = torch.empty_strided(sizes, strides, dtype=dtype, device="meta").is_contiguous()
        perm = None if contiguous or not numel else _cached_layout(torch.Size(sizes), strides)
        if not contiguous and perm is None:
            continue  # read from a contiguous copy: the contiguous variant, at the copy's own address
        key, layout = _group_of(spec, perm, BLOCK)
        groups.setdefault(key, []).append((offset * spec[1], numel, layout))
    started = 0
    out = 1 << 40  # the ring's rows and the scratch: buffers of ours, 16-byte aligned
    for (spec, cols, tile), members in _sides_of(groups):
        code, width, _ = spec
        ptrs = [(i + 1) * (1 << 32) + shift for i, (shift, _, _) in enumerate(members)]
        kern, (base_ptr, vec, _values, programs) = _planned(
            kernel, ptrs, [n for _, n, _ in members], list(range(len(members))), width, out, tile,
            max(1, PROGRAMS_PER_SM * _sms(device)), MIN_TILES, cols, [lay for _, _, lay in members])
        addr = (base_ptr, out, out, out, out)
        variant = _variant(device, code, vec, tile, addr, cols)
        if variant in _compiling or variant in _compiled or (code, vec, cols) in _broken:
            continue
        dtype = torch.uint8 if code in _BYTE_CODES else next(d for d, s in _KINDS.items() if s == spec)
        args = _warmup_args(addr, (dtype, *_BUFFER_DTYPES), len(members), len(members))
        _start_compile(kern, variant, device, programs, args, _jit_kwargs(spec, vec, tile, _extra_args(cols)))
        started += 1
    return started


def summarize(tensors: Sequence[torch.Tensor], packed: bool = False, *, into: tuple[torch.Tensor, int] | None = None,
              static: Any = None, _block: int | None = None, _max_programs: int | None = None,
              _min_tiles: int | None = None):
    """Stats (float64 ``[k, 8]``) and checksums (int64 ``[k]``) of ``tensors``, on their device.

    All tensors must be on one device; nothing is read back to the host. With
    ``packed=True``, returns the one float64 ``[9*k]`` buffer holding both (see
    :func:`unpack`). ``into=(buf, first)`` writes rows ``first .. first+k-1`` of an
    existing packed buffer of ``n`` rows (float64 ``[9*n]`` on the tensors' device: a
    slot ring, ``runtime/device_ring.py``) and returns ``buf``; no allocation (on CUDA, a
    side whose tensors are where they were last time repeats its kept launches:
    :data:`_sides`). ``static``
    (with ``into``, while a CUDA graph is captured: ``cuda_graphs.Capture``) provides the
    pointer tables and scratch, which must outlive the graph. A tensor
    the kernel cannot take goes through ``stats.device_summary``; errors from that path
    propagate (the caller may retry tensor by tensor). ``_block``, ``_max_programs``,
    ``_min_tiles`` are for tests (small tiles, many programs per tensor).
    """
    k = len(tensors)
    if k == 0:
        raise ValueError("summarize() needs at least one tensor")
    device = tensors[0].device
    for t in tensors:
        if t.device != device:
            raise ValueError(f"summarize(): tensors on {device} and {t.device}")
    if into is None:
        out, first, rows = torch.empty(9 * k, dtype=torch.float64, device=device), 0, k
    else:
        out, first = into
        rows = out.numel() // 9
        if out.dtype != torch.float64 or out.device != device or first < 0 or first + k > rows:
            raise ValueError(f"summarize(): rows {first}..{first + k - 1} do not fit a {out.dtype} buffer of "
                             f"{rows} rows on {out.device}")
    side = None
    if into is not None and static is None and first % 8 == 0 and device.type == "cuda" and \
            _block is None and _max_programs is None and _min_tiles is None:
        # A side seen before (same tensors where they were): its launches again, without
        # the plan, the table or Triton's dispatch. The rows are relative to `first`.
        found = _side_key(tensors, _stream_key(device))
        if found is not None:
            side, tensors = found  # the copies the kernel reads, for the planned path too
            launches_seen = _sides.get(side)
            if launches_seen is not None and device.index == torch.cuda.current_device() and \
                    _launch_side(launches_seen, out, first, rows):
                return out
    todo: list[int] = []
    kernel = _kernel() if enabled_for(device) else None
    if kernel is None:
        todo = list(range(first, first + k))
    else:
        block = _block or BLOCK
        # one launch per kind, and per kind and tile width for the tensors read in place
        groups: dict[tuple, list[tuple[int, torch.Tensor]]] = {}
        layouts: dict[tuple, list[_Perm]] = {}
        for row, t in enumerate(tensors, first):
            prep = _prepare(t)
            if prep is None:
                todo.append(row)
                continue
            key, layout = _group_of(prep[0], prep[2], block)
            groups.setdefault(key, []).append((row, prep[1]))
            if layout is not None:
                layouts.setdefault(key, []).append(layout)
        max_programs = _max_programs or max(1, PROGRAMS_PER_SM * _sms(device))
        min_tiles = _min_tiles or MIN_TILES
        stream_key = _stream_key(device)
        kout, shift, ktotal = out, 0, rows
        if into is not None and static is None and first % 8 == 0:
            # Rows relative to `first`, so that a side's pointer table is the same whichever
            # ring rows it gets (the table cache hits step after step).
            kout, shift, ktotal = out[8 * first:], first, rows_from(first, rows)
        launches: list[_Launch | None] = []
        with _on_device(device):
            for (spec, cols, tile), items in groups.items():
                if shift:
                    items = [(row - shift, t) for row, t in items]
                try:
                    launches.append(_launch(kernel, items, spec, kout, ktotal, device, stream_key, tile,
                                            max_programs, min_tiles, static, cols,
                                            layouts.get((spec, cols, tile), ())))
                except NotCompiled:  # compiling in the background: torch ops this time
                    todo.extend(row + shift for row, _ in items)
                except Exception as e:
                    from .session import warn_once

                    warn_once(f"fused-stats-{spec[0]}", f"fused stats kernel failed for {spec}, using torch ops: {e}")
                    todo.extend(row + shift for row, _ in items)
        if side is not None and shift == first and not todo and launches and None not in launches:
            with _lock:  # graphs on several threads: one clears while another adds
                if len(_sides) >= _SIDE_CACHE_MAX:
                    _retire([t for x in _sides.values() for launch in x for t in launch.keep], device)
                    _sides.clear()
                _sides[side] = _Kept(launches)
    stats, sums = unpack(out) if todo or not (packed or into is not None) else (None, None)
    if todo:
        todo.sort()  # (the groups add their rows group by group; the copies below go in row order)
        pairs = [device_summary(tensors[row - first]) for row in todo]
        if len(todo) == k:
            stats[first:first + k].copy_(torch.stack([s for s, _ in pairs]))
            sums[first:first + k].copy_(torch.stack([c for _, c in pairs]))
        else:
            for row, (s, c) in zip(todo, pairs):
                stats[row].copy_(s)
                sums[row].copy_(c)
    return out if packed or into is not None else (stats, sums)


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NOTHING = _Nothing()


def _on_device(device: torch.device):
    """Triton launches on the current CUDA device: make it ``device`` when it is not."""
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return _NOTHING


def unpack(buf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a (host or device) packed buffer into ``(stats [k, 8], checksums [k])`` views."""
    k = buf.numel() // 9
    return buf[: 8 * k].view(k, 8), buf[8 * k:].view(torch.int64)
