"""Triton kernels of :mod:`aoti_debug.runtime.fused_stats` (imported only when used).

Kept in their own module because Triton (and its interpreter) resolve the helpers a
kernel calls through the module's globals.

Cross-program hand-off (the "last block" pattern of CUDA's threadFenceReduction): each
program stores its partials, ``debug_barrier`` (bar.sync), then one ``atomic_add`` with
acq_rel semantics at GPU scope on the tensor's counter; the program that draws the last
ticket reads all partials with ``.cg`` loads (L2, never a stale L1 line), writes the
result and resets the counter to 0 for the next launch on the stream.

A launch of one tensor (most launch sides) finds its table row without a load; more
tensors: a program counts the tensors whose first program is at or below its own.

Three kernels: contiguous tensors (:func:`_stats_kernel`); tensors that fill a dense block
in another order, read in memory order by the same loop with the checksum's logical
index taken per tile and lane (:func:`_stats_kernel_dense`); other strided tensors with a
unit-stride run, read as ``[rows, inner]`` (:func:`_stats_kernel_perm`).

In a program's loop: the next tile is loaded before the present one is summed (two
tiles in flight a thread); the contiguous kernel sums its whole tiles without a
per-element select or count (:func:`_acc_fast`) and sums the chunk again, looking at
each value, only when a NaN or an infinity was among them (:func:`_acc_chunk`; on
finite values both give the same bits); a thread's 16-byte vector is summed in its registers, so the
accumulators hold one value per vector, not per element; the checksum
``sum(bits * (2 * index + 1))`` is taken apart by distributivity (exact: a sum mod
2**64), so that no element needs its 64-bit logical index: in the contiguous kernel,
``sum(bits) + 2 * BLOCK * sum(tile * tile's sum) + 2 * sum(bits * lane)``; in the strided
one, a row's sum times its weight plus ``2 * L_inner * sum(bits * column)``.
"""

import triton
import triton.language as tl


@triton.jit
def _decode(bits, KIND: tl.constexpr):
    """Raw bits (uint8/16/32, int64) -> value (fp32 for small floats, else fp64)."""
    if KIND == 0:
        x = (bits != 0).to(tl.float64)
    elif KIND == 1:
        x = bits.to(tl.float64)
    elif KIND == 2:
        x = bits.to(tl.int8, bitcast=True).to(tl.float64)
    elif KIND == 3:
        # float8_e4m3fn: bias 7, no inf, NaN = S.1111.111; decoded by hand (exact).
        b = bits.to(tl.uint32)
        e = (b >> 3) & 15
        m = b & 7
        s = b >> 7
        normal = ((s << 31) | ((e + 120) << 23) | (m << 20)).to(tl.float32, bitcast=True)
        sub = m.to(tl.float32) * 0.001953125
        sub = tl.where(s != 0, -sub, sub)
        x = tl.where(e == 0, sub, normal)
        x = tl.where((b & 127) == 127, float("nan"), x)
    elif KIND == 4:
        # float8_e5m2 is the high byte of a float16.
        x = (bits.to(tl.uint16) << 8).to(tl.float16, bitcast=True).to(tl.float32)
    elif KIND == 5:
        x = bits.to(tl.int16, bitcast=True).to(tl.float64)
    elif KIND == 6:
        x = bits.to(tl.float16, bitcast=True).to(tl.float32)
    elif KIND == 7:
        x = bits.to(tl.bfloat16, bitcast=True).to(tl.float32)
    elif KIND == 8:
        x = bits.to(tl.int32, bitcast=True).to(tl.float64)
    elif KIND == 9:
        x = bits.to(tl.float32, bitcast=True)
    elif KIND == 10:
        x = bits.to(tl.float64)
    elif KIND == 11:
        x = bits.to(tl.float64, bitcast=True)
    elif KIND == 14:
        x = bits.to(tl.uint64, bitcast=True).to(tl.float64)
    else:  # 12, 13: uint16, uint32 (the bits are loaded unsigned)
        x = bits.to(tl.float64)
    return x


@triton.jit
def _acc_start(z, IS_FLOAT: tl.constexpr, WIDTH: tl.constexpr):
    """Empty accumulators of :func:`_acc` shaped like ``z`` (float64 zeros): min and max
    (float32 for floats narrower than 8 bytes, as :func:`_decode` gives them), the shifted
    sums, the finite and NaN counts."""
    if IS_FLOAT and WIDTH < 8:
        mn = tl.full(z.shape, float("inf"), tl.float32)
        mx = tl.full(z.shape, float("-inf"), tl.float32)
    else:
        mn = tl.full(z.shape, float("inf"), tl.float64)
        mx = tl.full(z.shape, float("-inf"), tl.float64)
    return mn, mx, z, z, tl.zeros(z.shape, tl.int32), tl.zeros(z.shape, tl.int32)


@triton.jit
def _acc(bits, mask, K, mn, mx, s1, s2, cnt, nan,
         KIND: tl.constexpr, WIDTH: tl.constexpr, IS_FLOAT: tl.constexpr, MASKED: tl.constexpr):
    """The value statistics of a tile whose last axis is one thread's vector, that axis
    summed (in the thread's registers) into accumulators of one rank less. The checksum is
    the caller's."""
    x = _decode(bits, KIND)
    if IS_FLOAT:
        fin = tl.abs(x) < float("inf")
        if MASKED:
            fin = fin & mask
        nan += tl.sum((x != x).to(tl.int32), axis=-1)
        mn = tl.minimum(mn, tl.min(tl.where(fin, x, float("inf")), axis=-1))
        mx = tl.maximum(mx, tl.max(tl.where(fin, x, float("-inf")), axis=-1))
        if WIDTH < 8:  # x is float32 and K one of its values: select in 32 bits, d = 0 exactly
            d = tl.where(fin, x, K.to(tl.float32)).to(tl.float64) - K
        else:
            d = tl.where(fin, x, K) - K
        cnt += tl.sum(fin.to(tl.int32), axis=-1)
    elif MASKED:
        mn = tl.minimum(mn, tl.min(tl.where(mask, x, float("inf")), axis=-1))
        mx = tl.maximum(mx, tl.max(tl.where(mask, x, float("-inf")), axis=-1))
        d = tl.where(mask, x - K, 0.0)
        cnt += tl.sum(mask.to(tl.int32), axis=-1)
    else:
        mn = tl.minimum(mn, tl.min(x, axis=-1))
        mx = tl.maximum(mx, tl.max(x, axis=-1))
        d = x - K
        cnt += tl.sum(tl.full(d.shape, 1, tl.int32), axis=-1)
    s1 += tl.sum(d, axis=-1)
    s2 += tl.sum(d * d, axis=-1)
    return mn, mx, s1, s2, cnt, nan


@triton.jit
def _acc_fast(bits, K, mn, mx, s1, s2, KIND: tl.constexpr):
    """:func:`_acc` of a whole tile (no mask) whose values are taken to be finite: no
    per-element select or count. A NaN or an infinity makes its lane's ``s2`` NaN or
    infinite, and nothing else does (a finite float32 or narrower value squared is far
    from float64's overflow; float64 data near 1e154 overflow ``s2`` in :func:`_acc` too):
    the kernel checks ``s2`` once at the end (:func:`_nonfinite_lanes`) and, where it fails, sums
    the chunk again with :func:`_acc`. On finite values both give the same bits."""
    x = _decode(bits, KIND)
    mn = tl.minimum(mn, tl.min(x, axis=-1))
    mx = tl.maximum(mx, tl.max(x, axis=-1))
    d = x.to(tl.float64) - K
    s1 += tl.sum(d, axis=-1)
    s2 += tl.sum(d * d, axis=-1)
    return mn, mx, s1, s2


@triton.jit
def _nonfinite_lanes(s2):
    """Lanes whose ``s2`` of :func:`_acc_fast` is not finite (a value of theirs was not)."""
    return tl.sum(tl.where(s2 < float("inf"), 0, 1), axis=0)


@triton.jit
def _wide(bits):
    """Raw bits as uint64, zero-extended (the loads of narrow kinds are unsigned)."""
    return bits.to(tl.uint64, bitcast=True) if bits.dtype == tl.int64 else bits.to(tl.uint64)


@triton.jit
def _checksum(bits, i, au, cS, cT, cA):
    """The contiguous kernel's checksum parts of an ``[R, C]`` tile, the ``i``-th of its
    program (``au``: its lanes, uint32): the bits' sum into ``cS``, times ``i`` into ``cT``,
    times their lane into ``cA``. The factors are 32-bit, so that bits of 4 bytes or fewer
    are multiplied and added into 64 bits by 32-bit multiply-adds (sm_90: ``IMAD.WIDE.U32``)."""
    b = _wide(bits)
    iu = tl.cast(i, tl.uint32).to(tl.uint64)
    return (cS + tl.sum(b, axis=1), cT + tl.sum(b * iu, axis=1),
            cA + tl.sum(b * au.to(tl.uint64), axis=1))


@triton.jit(do_not_specialize=["k", "k_total"])
def _stats_kernel(base, tab, k, part, counters, out, k_total,
                  KIND: tl.constexpr, WIDTH: tl.constexpr, IS_FLOAT: tl.constexpr,
                  VEC: tl.constexpr, BLOCK: tl.constexpr, TBLOCK: tl.constexpr,
                  RBLOCK: tl.constexpr):
    """Contiguous tensors: element ``i`` at ``i`` (table rows of six int64: :func:`_linear`)."""
    _linear(base, tab, k, part, counters, out, k_total, KIND, WIDTH, IS_FLOAT, VEC, BLOCK, TBLOCK, RBLOCK,
            False, 6, False)


@triton.jit(do_not_specialize=["k", "k_total"])
def _stats_kernel_dense(base, tab, k, part, counters, out, k_total,
                        KIND: tl.constexpr, WIDTH: tl.constexpr, IS_FLOAT: tl.constexpr,
                        VEC: tl.constexpr, BLOCK: tl.constexpr, TBLOCK: tl.constexpr,
                        RBLOCK: tl.constexpr, TW: tl.constexpr, PART: tl.constexpr):
    """Tensors that fill a dense block of memory in another order than the logical one
    (channels_last activations, permutes): read in memory order as the contiguous kernel
    reads, element at memory offset ``m`` weighed in the checksum by its logical index
    ``L(m)``, which is affine within each aligned tile of ``BLOCK`` elements (the planner
    picks such a ``BLOCK``: ``fused_stats._dense_layout``): ``L(t * BLOCK + a) = f(t) + w(a)``,
    ``w`` a lane's weight (:func:`_digits` of its lane, once a program) and ``f`` the
    tile's (walked from tile to tile, :func:`_walk`). Table rows of ``TW`` int64
    (``_DENSE_DIMS``). ``PART``: tiles of that many elements, below ``BLOCK`` (whole periods
    that no power of two holds: 3 channels x 256), the lanes past it masked; 0: of ``BLOCK``."""
    _linear(base, tab, k, part, counters, out, k_total, KIND, WIDTH, IS_FLOAT, VEC, BLOCK, TBLOCK, RBLOCK,
            True, TW, PART)


#: A dense tensor's table row (int64): :func:`plan`'s six values, the number of lane dims
#: and of tile dims, then ``(size, logical weight)`` of each lane dim (innermost first, the
#: last taking the quotient) at ``_DENSE_DIMS``, and of each tile dim at
#: ``_DENSE_DIMS + 2 * _DENSE_MAX`` (the same form; the first's size is the period of the walk).
_DENSE_DIMS = tl.constexpr(8)
_DENSE_MAX = tl.constexpr(8)


@triton.jit
def _digits(x, dp, nd):
    """``sum(digit_j * weight_j)`` of ``x`` (< 2**32) decomposed in the mixed radix of the
    ``nd`` ``(size, weight)`` pairs at ``dp``, innermost first, the last taking the quotient
    (its size unread): a logical index from a memory one. Unsigned 32-bit divisions."""
    xr = x.to(tl.uint32)
    w = x.to(tl.int64) * 0
    for j in range(0, nd - 1):
        s = tl.load(dp + 2 * j).to(tl.uint32)
        q = xr // s
        w += (xr - q * s).to(tl.int64) * tl.load(dp + 2 * j + 1)
        xr = q
    return w + xr.to(tl.int64) * tl.load(dp + 2 * nd - 1)


@triton.jit
def _walk(t, dig, f, q0, w0, tdp, nt):
    """The dense kernel's tile weight ``f`` of tile ``t`` from that of tile ``t - 1``: one
    step of the innermost tile digit ``dig`` (weight ``w0``), and where it wraps at ``q0``
    the whole decomposition again (:func:`_digits`; once every ``q0`` tiles)."""
    dig += 1
    f += w0
    if dig == q0:
        dig = dig * 0
        f = _digits(t, tdp, nt)
    return dig, f


@triton.jit
def _linear(base, tab, k, part, counters, out, k_total,
            KIND: tl.constexpr, WIDTH: tl.constexpr, IS_FLOAT: tl.constexpr,
            VEC: tl.constexpr, BLOCK: tl.constexpr, TBLOCK: tl.constexpr,
            RBLOCK: tl.constexpr, DENSE: tl.constexpr, TW: tl.constexpr, PART: tl.constexpr):
    """The body of :func:`_stats_kernel` and, with ``DENSE``, of :func:`_stats_kernel_dense`:
    a program sums ``ctiles`` consecutive tiles of ``BLOCK`` elements of its tensor's memory."""
    pid = tl.program_id(0).to(tl.int64)
    # -- which tensor: the number of tensors whose first program is <= pid, less one
    tid = 0
    if k > 1:  # (one tensor: its row, without a load before the row's loads)
        tid = -1
        for j0 in range(0, k, TBLOCK):
            js = j0 + tl.arange(0, TBLOCK)
            f = tl.load(tab + js * TW + 2, mask=js < k, other=pid + 1)
            tid += tl.sum((f <= pid).to(tl.int32), axis=0)
    rp = tab + tid * TW
    q = tl.load(rp)
    n = tl.load(rp + 1)
    first = tl.load(rp + 2)
    nprog = tl.load(rp + 3)
    ctiles = tl.load(rp + 4)
    row = tl.load(rp + 5)
    if WIDTH == 1:
        bp = base.to(tl.pointer_type(tl.uint8), bitcast=True)
    elif WIDTH == 2:
        bp = base.to(tl.pointer_type(tl.uint16), bitcast=True)
    elif WIDTH == 4:
        bp = base.to(tl.pointer_type(tl.uint32), bitcast=True)
    else:
        bp = base.to(tl.pointer_type(tl.int64), bitcast=True)
    p = bp + q * VEC  # q is in units of VEC elements (16 bytes when VEC > 1)
    # a tile is [R, C]: C elements (16 bytes) a thread's vector, summed in its registers
    # into accumulators of R values (not BLOCK: fewer registers, more programs a SM)
    C: tl.constexpr = 16 // WIDTH
    R: tl.constexpr = BLOCK // C
    t0 = (pid - first) * ctiles
    ar = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]  # the lane in the tile
    if PART:  # tiles of PART < BLOCK elements (whole periods of dims no power of two fits): lanes past it masked
        TS = PART
        lm = ar < TS
    else:
        TS = BLOCK
    start = t0 * TS
    end = tl.minimum(start + ctiles * TS, n)
    nvalid = tl.maximum(end - start, 0)
    nfull = nvalid // TS
    # -- the shift (the chunk's first element; 0 when absent or not finite) and the first
    # tile, loaded together: one wait for memory before the loop, not two
    kbits = tl.load(p + start, mask=nvalid > 0, other=0)
    idx = t0 * TS + ar
    m0 = idx < end
    if PART:
        m0 = m0 & lm
    bits = tl.load(p + idx, mask=m0, other=0)
    K = _decode(kbits, KIND).to(tl.float64)
    if IS_FLOAT:
        K = tl.where(tl.abs(K) < float("inf"), K, 0.0)
    mn, mx, s1, s2, cnt, nan = _acc_start(tl.zeros([R], tl.float64), IS_FLOAT, WIDTH)
    # checksum sum(bits * (2 * idx + 1)) with idx = (t0 + i) * BLOCK + a, i the program's
    # tile, a its lane: sum(bits) * (1 + 2 * BLOCK * t0) + 2 * BLOCK * sum(i * tile sum)
    # + 2 * sum(bits * a), in uint64 (mod 2**64); the dense kernel's logical index is
    # f(t0 + i) + w(a): sum(bits) + 2 * sum(f * tile sum) + 2 * sum(bits * w)
    cS = tl.zeros([R], tl.uint64)
    cT = tl.zeros([R], tl.uint64)
    cA = tl.zeros([R], tl.uint64)
    if DENSE:
        # logical index f(t) + w(a): the lanes' weights once, the tiles' walked
        au = _digits(ar, rp + _DENSE_DIMS, tl.load(rp + 6)).to(tl.uint32)
        nt = tl.load(rp + 7)
        tdp = rp + _DENSE_DIMS + 2 * _DENSE_MAX
        q0 = tl.load(tdp)
        w0 = tl.load(tdp + 1)
        f = _digits(t0, tdp, nt)
        dig = t0 % q0
        cS, cT, cA = _checksum(bits, f, au, cS, cT, cA)
    else:
        au = ar.to(tl.uint32)
        cS, cT, cA = _checksum(bits, 0, au, cS, cT, cA)
    mn, mx, s1, s2, cnt, nan = _acc(bits, m0, K, mn, mx, s1, s2, cnt, nan, KIND, WIDTH, IS_FLOAT, True)
    # the next tile is loaded before this one is summed: two tiles in flight a thread
    if PART:
        nbits = tl.load(p + (t0 + 1) * TS + ar, mask=(nfull > 1) & lm, other=0)
    else:
        nbits = tl.load(p + (t0 + 1) * TS + ar, mask=nfull > 1, other=0)
    for i in range(1, nfull):
        idx = (t0 + i) * TS + ar
        bits = nbits
        if PART:
            nbits = tl.load(p + idx + TS, mask=(i + 1 < nfull) & lm, other=0)
        else:
            nbits = tl.load(p + idx + TS, mask=i + 1 < nfull, other=0)
        if DENSE:
            dig, f = _walk(t0 + i, dig, f, q0, w0, tdp, nt)
            cS, cT, cA = _checksum(bits, f, au, cS, cT, cA)
        else:
            cS, cT, cA = _checksum(bits, i, au, cS, cT, cA)
        if PART:  # masked lanes summed as copies of the shift's element: d = 0, min and max unmoved
            mn, mx, s1, s2 = _acc_fast(tl.where(lm, bits, kbits), K, mn, mx, s1, s2, KIND)
        else:
            mn, mx, s1, s2 = _acc_fast(bits, K, mn, mx, s1, s2, KIND)
    if PART:  # the whole tiles' elements, C a lane each, on the lanes below TS
        cnt += tl.where(tl.arange(0, R) * C < TS, tl.maximum(nfull - 1, 0) * C, 0).to(tl.int32)
    else:
        cnt += (tl.maximum(nfull - 1, 0) * C).to(tl.int32)  # the whole tiles' elements, C a lane each
    if nfull >= 1 and nfull * TS < nvalid:
        idx = (t0 + nfull) * TS + ar
        m1 = idx < end
        if PART:
            m1 = m1 & lm
        bits = tl.load(p + idx, mask=m1, other=0)
        if DENSE:
            dig, f = _walk(t0 + nfull, dig, f, q0, w0, tdp, nt)
            cS, cT, cA = _checksum(bits, f, au, cS, cT, cA)
        else:
            cS, cT, cA = _checksum(bits, nfull, au, cS, cT, cA)
        mn, mx, s1, s2, cnt, nan = _acc(bits, m1, K, mn, mx, s1, s2, cnt, nan, KIND, WIDTH, IS_FLOAT, True)
    if IS_FLOAT:
        if _nonfinite_lanes(s2) > 0:  # a NaN or an infinity: the values again, each looked at
            mn, mx, s1, s2, cnt, nan = _acc_chunk(p, t0, nvalid, end, ar, K, KIND, WIDTH, IS_FLOAT, R, TS)
    if DENSE:  # sum(bits * (2 * (f + w) + 1))
        cs = (cS + (cT + cA) * 2).to(tl.int64, bitcast=True)
    else:
        cs = (cS * (1 + 2 * BLOCK * t0.to(tl.uint64, bitcast=True)) + cT * (2 * BLOCK) + cA * 2).to(tl.int64,
                                                                                                 bitcast=True)
    _finish(part, counters, out, k_total, pid, first, nprog, row, K, nvalid, cnt, s1, s2, mn, mx, nan, cs,
            RBLOCK)


@triton.jit
def _acc_chunk(p, t0, nvalid, end, ar, K, KIND: tl.constexpr, WIDTH: tl.constexpr, IS_FLOAT: tl.constexpr,
               R: tl.constexpr, TS: tl.constexpr):
    """The value statistics of a contiguous kernel's chunk (``nvalid`` elements from tile
    ``t0``, below ``end``; tiles of ``TS`` elements, the lanes past it masked) with
    :func:`_acc` on every tile: the chunk again when :func:`_acc_fast` met a NaN or an
    infinity."""
    mn, mx, s1, s2, cnt, nan = _acc_start(tl.zeros([R], tl.float64), IS_FLOAT, WIDTH)
    for i in range(0, (nvalid + TS - 1) // TS):
        idx = (t0 + i) * TS + ar
        m = idx < end
        if TS < R * (16 // WIDTH):
            m = m & (ar < TS)
        bits = tl.load(p + idx, mask=m, other=0)
        mn, mx, s1, s2, cnt, nan = _acc(bits, m, K, mn, mx, s1, s2, cnt, nan, KIND, WIDTH, IS_FLOAT, True)
    return mn, mx, s1, s2, cnt, nan


@triton.jit
def _finish(part, counters, out, k_total, pid, first, nprog, row, K, nvalid, cnt, s1, s2, mn, mx, nan, cs,
            RBLOCK: tl.constexpr):
    """A program's partials from its per-lane accumulators (1-D, any length); the last
    program of the tensor (``nprog`` programs from ``first``) combines them into row
    ``row`` of ``out`` and its checksum slot."""
    c = tl.sum(cnt, axis=0)
    cf = c.to(tl.float64)
    S1 = tl.sum(s1, axis=0)
    S2 = tl.sum(s2, axis=0)
    # partials, 9 per program: count, shift K, sum(x-K), M2, min, max, nan, inf, checksum
    pp = part + pid * 9
    tl.store(pp + 0, cf)
    tl.store(pp + 1, K)
    tl.store(pp + 2, S1)
    tl.store(pp + 3, tl.maximum(S2 - S1 * S1 / tl.maximum(cf, 1.0), 0.0))  # M2 about own mean
    tl.store(pp + 4, tl.min(mn, axis=0).to(tl.float64))
    tl.store(pp + 5, tl.max(mx, axis=0).to(tl.float64))
    nanc = tl.sum(nan, axis=0)
    tl.store(pp + 6, nanc.to(tl.float64))
    tl.store(pp + 7, (nvalid - c - nanc).to(tl.float64))
    tl.store(pp + 8, tl.sum(cs, axis=0).to(tl.float64, bitcast=True))
    # -- the last program of this tensor combines its partials
    tl.debug_barrier()
    ticket = tl.atomic_add(counters + row, 1, sem="acq_rel", scope="gpu")
    if ticket == nprog - 1:
        pb = part + first * 9
        # program means relative to the first program's shift K0: d_p = (K_p - K0) + S1_p/n_p
        K0 = tl.load(pb + 1, cache_modifier=".cg")
        rs = tl.arange(0, RBLOCK)
        if nprog <= RBLOCK:  # one load of every partial, the M2 pass from registers
            cp, kp, s1p, m2p, mnv, mxv, nanv, infv, csv = _partials(pb, rs, nprog)
            N = tl.sum(cp, axis=0)
            mu = tl.sum(tl.where(cp > 0.0, cp * (kp - K0) + s1p, 0.0), axis=0) / tl.maximum(N, 1.0)
            dm = (kp - K0) + s1p / tl.maximum(cp, 1.0) - mu
            M2 = tl.sum(tl.where(cp > 0.0, m2p + cp * dm * dm, 0.0), axis=0)
        else:  # RBLOCK at a time: the mean, then M2 about it
            Nv = tl.zeros([RBLOCK], tl.float64)
            Dv = tl.zeros([RBLOCK], tl.float64)
            mnv = tl.full([RBLOCK], float("inf"), tl.float64)
            mxv = tl.full([RBLOCK], float("-inf"), tl.float64)
            nanv = tl.zeros([RBLOCK], tl.float64)
            infv = tl.zeros([RBLOCK], tl.float64)
            csv = tl.zeros([RBLOCK], tl.int64)
            for r0 in range(0, nprog, RBLOCK):
                cp, kp, s1p, m2p, mnp, mxp, nanp, infp, csp = _partials(pb, r0 + rs, nprog)
                Nv += cp
                Dv += tl.where(cp > 0.0, cp * (kp - K0) + s1p, 0.0)
                mnv = tl.minimum(mnv, mnp)
                mxv = tl.maximum(mxv, mxp)
                nanv += nanp
                infv += infp
                csv += csp
            N = tl.sum(Nv, axis=0)
            mu = tl.sum(Dv, axis=0) / tl.maximum(N, 1.0)  # mean - K0
            M2v = tl.zeros([RBLOCK], tl.float64)
            for r0 in range(0, nprog, RBLOCK):
                cp, kp, s1p, m2p, mnp, mxp, nanp, infp, csp = _partials(pb, r0 + rs, nprog)
                dm = (kp - K0) + s1p / tl.maximum(cp, 1.0) - mu
                M2v += tl.where(cp > 0.0, m2p + cp * dm * dm, 0.0)
            M2 = tl.sum(M2v, axis=0)
        mean = K0 + mu
        none = N == 0.0
        mnf = tl.where(none, float("nan"), tl.min(mnv, axis=0))
        mxf = tl.where(none, float("nan"), tl.max(mxv, axis=0))
        std = tl.sqrt(M2 / tl.maximum(N - 1.0, 1.0))
        std = tl.where(N > 1.0, std, tl.where(none, float("nan"), 0.0))
        ob = out + row * 8
        tl.store(ob + 0, mnf)
        tl.store(ob + 1, mxf)
        tl.store(ob + 2, tl.where(none, float("nan"), mean))
        tl.store(ob + 3, std)
        tl.store(ob + 4, tl.maximum(tl.abs(mnf), tl.abs(mxf)))
        tl.store(ob + 5, tl.sum(nanv, axis=0))
        tl.store(ob + 6, tl.sum(infv, axis=0))
        tl.store(ob + 7, N)
        tl.store(out + k_total * 8 + row, tl.sum(csv, axis=0).to(tl.float64, bitcast=True))
        tl.store(counters + row, 0)  # ready for the next launch on this stream


@triton.jit
def _partials(pb, rr, nprog):
    """The partials of programs ``rr`` of a tensor (those below ``nprog``; the others as
    nothing): count, shift, sum, M2, min, max, nan, inf, checksum. ``.cg`` loads: from L2,
    where the other programs' stores are (never a stale L1 line)."""
    rm = rr < nprog
    q9 = pb + rr * 9
    cp = tl.load(q9 + 0, mask=rm, other=0.0, cache_modifier=".cg")
    kp = tl.load(q9 + 1, mask=rm, other=0.0, cache_modifier=".cg")
    s1p = tl.load(q9 + 2, mask=rm, other=0.0, cache_modifier=".cg")
    m2p = tl.load(q9 + 3, mask=rm, other=0.0, cache_modifier=".cg")
    mnp = tl.load(q9 + 4, mask=rm, other=float("inf"), cache_modifier=".cg")
    mxp = tl.load(q9 + 5, mask=rm, other=float("-inf"), cache_modifier=".cg")
    nanp = tl.load(q9 + 6, mask=rm, other=0.0, cache_modifier=".cg")
    infp = tl.load(q9 + 7, mask=rm, other=0.0, cache_modifier=".cg")
    csp = tl.load(q9 + 8, mask=rm, other=0.0, cache_modifier=".cg").to(tl.int64, bitcast=True)
    return cp, kp, s1p, m2p, mnp, mxp, nanp, infp, csp


#: A strided tensor's table row (int64): offset (units of VEC elements), numel, first
#: program, programs, tiles per program, output row, inner run (units of VEC elements),
#: the inner run's logical stride, row dims, then (size, logical stride, memory stride in
#: units of VEC elements) per row dim.
_PERM_DIMS = tl.constexpr(9)


@triton.jit
def _row_bases(rp, rows, nd):
    """Logical index and memory offset (units of VEC elements) of each tile row's first
    element: ``rows`` decomposed over the table's row dims (``nd`` triples, innermost
    first; the outermost takes the quotient left, no modulo). In unsigned 32-bit division
    (a tensor read in place has fewer than 2**31 rows: ``fused_stats._perm_layout``), which
    the GPU does in a fraction of the instructions of a 64-bit one, and without a signed
    one's sign fix-ups (sm_90: the strided loop of fp32 tiles 64 wide 611 -> 526)."""
    rr = rows.to(tl.uint32)
    b = rows * 0
    m = rows * 0
    for j in range(0, nd - 1):
        dp = rp + _PERM_DIMS + 3 * j
        nj = tl.load(dp).to(tl.uint32)
        q = rr // nj
        d = (rr - q * nj).to(tl.int64)
        b += d * tl.load(dp + 1)
        m += d * tl.load(dp + 2)
        rr = q
    dp = rp + _PERM_DIMS + 3 * nd - 3
    last = rr.to(tl.int64)
    return b + last * tl.load(dp + 1), m + last * tl.load(dp + 2)


@triton.jit
def _perm_checksum(bits, lb, cb, lu, au, cR, cA, CB: tl.constexpr):
    """The strided kernel's checksum parts of a ``[RB, CW, CV]`` tile of column block
    ``cb`` whose rows' logical bases are ``lb``: each row's bits' sum times its weight
    ``2 lb + 1 + 2 L_inner cb CB`` into ``cR``, the bits times their column in the tile
    (``au``, uint32) into ``cA`` (weighed by ``2 L_inner`` at the end)."""
    b = _wide(bits)
    rw = (lb.to(tl.uint64, bitcast=True) * 2 + 1 + lu * (2 * CB) * cb.to(tl.uint64))[:, None]
    return cR + tl.sum(b, axis=2) * rw, cA + tl.sum(b * au.to(tl.uint64), axis=2)


@triton.jit
def _next_tile(rb, cb, ncb):
    """The strided kernel's tile after ``(rb, cb)`` (row block, column block of ``ncb``):
    tiles are numbered row block major."""
    cb += 1
    return tl.where(cb == ncb, rb + 1, rb), tl.where(cb == ncb, 0, cb)


@triton.jit(do_not_specialize=["k", "k_total"])
def _stats_kernel_perm(base, tab, k, part, counters, out, k_total,
                       KIND: tl.constexpr, WIDTH: tl.constexpr, IS_FLOAT: tl.constexpr,
                       VEC: tl.constexpr, BLOCK: tl.constexpr, TBLOCK: tl.constexpr,
                       RBLOCK: tl.constexpr, CB: tl.constexpr, TW: tl.constexpr):
    """:func:`_stats_kernel` for strided tensors with a unit-stride inner run: read as
    ``[rows, inner]`` in tiles of ``[BLOCK // CB, CB]`` (a tensor's tiles are numbered row
    block major), element ``(row, col)`` at ``mem(row) * VEC + col``, weighted in the
    checksum by its logical index ``base(row) + col * L_inner`` (:func:`_row_bases`).
    Table rows of ``TW`` int64 (``_PERM_DIMS``)."""
    RB: tl.constexpr = BLOCK // CB
    CV: tl.constexpr = 16 // WIDTH if 16 // WIDTH < CB else CB  # a thread's vector
    CW: tl.constexpr = CB // CV
    pid = tl.program_id(0).to(tl.int64)
    tid = 0
    if k > 1:  # (one tensor: its row, without a load before the row's loads)
        tid = -1
        for j0 in range(0, k, TBLOCK):
            js = j0 + tl.arange(0, TBLOCK)
            f = tl.load(tab + js * TW + 2, mask=js < k, other=pid + 1)
            tid += tl.sum((f <= pid).to(tl.int32), axis=0)
    rp = tab + tid * TW
    q = tl.load(rp)
    n = tl.load(rp + 1)
    first = tl.load(rp + 2)
    nprog = tl.load(rp + 3)
    ctiles = tl.load(rp + 4)
    row = tl.load(rp + 5)
    innerv = tl.load(rp + 6)
    li_inner = tl.load(rp + 7)
    nd = tl.load(rp + 8)
    if WIDTH == 1:
        bp = base.to(tl.pointer_type(tl.uint8), bitcast=True)
    elif WIDTH == 2:
        bp = base.to(tl.pointer_type(tl.uint16), bitcast=True)
    elif WIDTH == 4:
        bp = base.to(tl.pointer_type(tl.uint32), bitcast=True)
    else:
        bp = base.to(tl.pointer_type(tl.int64), bitcast=True)
    p = bp + q * VEC
    inner = innerv * VEC  # a multiple of VEC, as are the rows' starts: 16-byte aligned when VEC > 1
    R = n // inner
    ncb = (inner + CB - 1) // CB
    tiles = ((R + RB - 1) // RB) * ncb
    t0 = (pid - first) * ctiles
    t1 = tl.minimum(t0 + ctiles, tiles)
    # tiles before tsplit are whole (no mask): full row blocks when CB divides the run
    tsplit = tl.where(inner % CB == 0, (R // RB) * ncb, 0)
    tsplit = tl.maximum(tl.minimum(tsplit, t1), t0)
    # -- shift: the first tile's first element (0 when absent or not finite)
    rb0 = t0 // ncb
    _lb0, m0 = _row_bases(rp, rb0 * RB, nd)
    kat = m0 * VEC + (t0 - rb0 * ncb) * CB
    K = _decode(tl.load(p + kat, mask=t0 < t1, other=0), KIND).to(tl.float64)
    if IS_FLOAT:
        K = tl.where(tl.abs(K) < float("inf"), K, 0.0)
    mn, mx, s1, s2, cnt, nan = _acc_start(tl.zeros([RB, CW], tl.float64), IS_FLOAT, WIDTH)
    # checksum sum(bits * (2 * li + 1)) with li = lb(row) + (cb * CB + a) * L_inner, a the
    # column in the tile: per row (2 lb + 1 + 2 L cb CB) * (its bits' sum), plus
    # 2 L * sum(bits * a), in uint64 (mod 2**64)
    cR = tl.zeros([RB, CW], tl.uint64)
    cA = tl.zeros([RB, CW], tl.uint64)
    ar = tl.arange(0, RB).to(tl.int64)
    ac = (tl.arange(0, CW)[:, None] * CV + tl.arange(0, CV)[None, :])[None, :, :]  # [1, CW, CV]
    au = ac.to(tl.uint32)
    lu = li_inner.to(tl.uint64, bitcast=True)
    nvalid = t0 * 0  # elements read, for the inf count
    # tile t is (row block rb, column block cb) = divmod(t, ncb): counted along, not divided
    rb = rb0
    cb = t0 - rb0 * ncb
    if CB >= 8:
        # the next tile is loaded before this one is summed: two tiles in flight a thread
        # (narrower tiles hold many rows a thread: their bases twice would cost registers)
        lb, mb = _row_bases(rp, rb * RB + ar, nd)
        nbits = tl.load(p + (mb[:, None, None] * VEC + (cb * CB + ac)), mask=t0 < tsplit, other=0)
        for t in range(t0, tsplit):
            lbt = lb
            cbt = cb
            bits = nbits
            nvalid += RB * CB
            rb, cb = _next_tile(rb, cb, ncb)
            lb, mb = _row_bases(rp, rb * RB + ar, nd)
            nbits = tl.load(p + (mb[:, None, None] * VEC + (cb * CB + ac)), mask=t + 1 < tsplit, other=0)
            cR, cA = _perm_checksum(bits, lbt, cbt, lu, au, cR, cA, CB)
            mn, mx, s1, s2, cnt, nan = _acc(bits, None, K, mn, mx, s1, s2, cnt, nan, KIND, WIDTH, IS_FLOAT, False)
    else:
        for t in range(t0, tsplit):
            lb, mb = _row_bases(rp, rb * RB + ar, nd)
            bits = tl.load(p + (mb[:, None, None] * VEC + (cb * CB + ac)))
            cR, cA = _perm_checksum(bits, lb, cb, lu, au, cR, cA, CB)
            mn, mx, s1, s2, cnt, nan = _acc(bits, None, K, mn, mx, s1, s2, cnt, nan, KIND, WIDTH, IS_FLOAT, False)
            nvalid += RB * CB
            rb, cb = _next_tile(rb, cb, ncb)
    for t in range(tsplit, t1):
        cols = cb * CB + ac
        rows = rb * RB + ar
        lb, mb = _row_bases(rp, rows, nd)
        off = mb[:, None, None] * VEC + cols
        mask = (rows < R)[:, None, None] & (cols < inner)
        bits = tl.load(p + off, mask=mask, other=0)
        cR, cA = _perm_checksum(bits, lb, cb, lu, au, cR, cA, CB)
        mn, mx, s1, s2, cnt, nan = _acc(bits, mask, K, mn, mx, s1, s2, cnt, nan, KIND, WIDTH, IS_FLOAT, True)
        nvalid += tl.minimum(R - rb * RB, RB) * tl.minimum(inner - cb * CB, CB)
        rb, cb = _next_tile(rb, cb, ncb)
    cs = (cR + cA * (lu * 2)).to(tl.int64, bitcast=True)
    _finish(part, counters, out, k_total, pid, first, nprog, row, K, nvalid,
            tl.sum(cnt, axis=1), tl.sum(s1, axis=1), tl.sum(s2, axis=1), tl.min(mn, axis=1),
            tl.max(mx, axis=1), tl.sum(nan, axis=1), tl.sum(cs, axis=1), RBLOCK)
