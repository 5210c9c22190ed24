"""How two values of one aligned pair differ: tensors, recorded stats, scalars.

Tensors are compared chunk by chunk through scratch buffers that are reused from
pair to pair, so a comparison allocates a few chunks, never a tensor-sized temporary,
and bitwise-equal chunks cost one ``memcmp``-like pass. A pair passes when every
element satisfies ``|a - b| <= atol + rtol * |b|`` (run B is the reference, as
``expected`` in ``torch.testing.assert_close``); NaN matches NaN and an infinity
matches the same infinity at the same position.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..format.schema import STAT_KEYS, Record

#: ``(rtol, atol)`` per dtype: torch.testing.assert_close's defaults (torch 2.13).
#: Float8 is ours: assert_close demands exact equality there; one step of the
#: format's mantissa is a more useful default for comparing two runs.
_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex32": (1e-3, 1e-5),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
    "float8_e4m3fn": (1.25e-1, 1e-3),
    "float8_e4m3fnuz": (1.25e-1, 1e-3),
    "float8_e5m2": (2.5e-1, 1e-3),
    "float8_e5m2fnuz": (2.5e-1, 1e-3),
    # Python scalars in the manifest.
    "float": (1e-7, 1e-7),
}

#: Elements per chunk: large enough to amortise per-op overhead, small enough that a
#: chunk's six scratch buffers stay in a core's L2 cache (64K floats measured 1.5-2x
#: faster than 1M on the 2-core CI machine; see benchmarks/diff.py).
CHUNK = 1 << 16


def default_tolerance(dtype: str | None) -> tuple[float, float]:
    """``(atol, rtol)`` for a dtype name like ``float32``; integers and bool are exact."""
    rtol, atol = _TOLERANCES.get(dtype or "", (0.0, 0.0))
    return atol, rtol


def tolerance(dtype: str | None, atol: float | None, rtol: float | None) -> tuple[float, float]:
    """The user's atol/rtol where given, else the dtype's default for the missing one."""
    d_atol, d_rtol = default_tolerance(dtype)
    return (d_atol if atol is None else atol), (d_rtol if rtol is None else rtol)


@dataclasses.dataclass
class Metrics:
    """How one pair differs.

    ``basis`` says what was compared: ``values`` (the tensor files), ``checksum``
    (equal checksums: bitwise equal without reading the files), ``stats`` (the
    recorded min/max/mean/std/absmax and NaN/Inf counts), or ``value`` (a scalar).
    """

    basis: str
    passed: bool
    max_abs: float | None = None
    max_rel: float | None = None
    mismatched: int | None = None
    numel: int | None = None
    cosine: float | None = None
    nan_a: int | None = None
    nan_b: int | None = None
    inf_a: int | None = None
    inf_b: int | None = None
    bitwise: bool | None = None
    note: str = ""
    rmse: float | None = None
    """Root-mean-square of the differences over the finite pairs of elements."""
    ref_rms: float | None = None
    """Root-mean-square of B's (the reference's) finite values: the scale of the value."""

    @property
    def mismatch_frac(self) -> float | None:
        if self.mismatched is None or not self.numel:
            return None if self.mismatched is None else 0.0
        return self.mismatched / self.numel


# -- tensors -----------------------------------------------------------------------------
def _bit_view(t):
    import torch

    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    if t.is_floating_point():
        return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


class TensorComparator:
    """Compares tensor pairs in chunks, reusing its scratch buffers across pairs.

    The per-chunk arithmetic runs through numpy ufuncs on zero-copy views: on
    cache-sized chunks their lower call overhead made the whole comparison ~1.7x
    faster than the same ops through torch (2 cores, torch 2.13, numpy 2.4).
    """

    def __init__(self, chunk: int = CHUNK):
        self.chunk = chunk
        self._scratch: dict[Any, tuple] = {}

    def _buffers(self, dtype):
        import numpy as np
        import torch

        bufs = self._scratch.get(dtype)
        if bufs is None:
            n = self.chunk
            bx, by = torch.empty(n, dtype=dtype), torch.empty(n, dtype=dtype)
            work = bx.numpy().dtype
            bufs = (bx, by, bx.numpy(), by.numpy(), np.empty(n, work), np.empty(n, work), np.empty(n, work),
                    np.empty(n, bool))
            self._scratch[dtype] = bufs
        return bufs

    def compare(self, a, b, atol: float, rtol: float) -> Metrics:
        """Metrics of two tensors of one dtype and shape (the caller checks both)."""
        import numpy as np
        import torch

        a = a.detach().reshape(-1)
        b = b.detach().reshape(-1)
        if a.is_complex():
            a, b = torch.view_as_real(a).reshape(-1), torch.view_as_real(b).reshape(-1)
        n = a.numel()
        work = torch.float64 if a.dtype == torch.float64 or not a.is_floating_point() else torch.float32
        native = a.dtype == work
        an, bn = (a.numpy(), b.numpy()) if native else (None, None)
        raw_a, raw_b = _bit_view(a), _bit_view(b)
        bx, by, bxn, byn, d, u, t, m = self._buffers(work)
        acc = _Accumulator()
        with np.errstate(all="ignore"):
            for start in range(0, n, self.chunk):
                stop = min(start + self.chunk, n)
                k = stop - start
                equal = torch.equal(raw_a[start:stop], raw_b[start:stop])
                if native:
                    x, y = an[start:stop], bn[start:stop]
                else:
                    bx[:k].copy_(a[start:stop])
                    x = bxn[:k]
                    if not equal:
                        by[:k].copy_(b[start:stop])
                    y = x if equal else byn[:k]
                if equal:
                    s = float(np.dot(x, x))
                    if math.isfinite(s):
                        acc.aa += s
                        acc.bb += s
                        acc.ab += s
                    else:
                        _chunk_nonfinite(acc, x, x, atol, rtol)
                    continue
                acc.bitwise = False
                _chunk_finite(acc, x, y, d[:k], u[:k], t[:k], m[:k], atol, rtol)
        return acc.metrics(n)


class _Accumulator:
    __slots__ = ("max_abs", "max_rel", "mismatched", "aa", "bb", "ab", "dd", "nan_a", "nan_b", "inf_a", "inf_b",
                 "bitwise")

    def __init__(self):
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.mismatched = 0
        self.aa = self.bb = self.ab = self.dd = 0.0
        self.nan_a = self.nan_b = self.inf_a = self.inf_b = 0
        self.bitwise = True

    def metrics(self, n: int) -> Metrics:
        if self.aa > 0 and self.bb > 0:
            cosine = max(-1.0, min(1.0, self.ab / math.sqrt(self.aa * self.bb)))
        elif self.aa == 0 and self.bb == 0:
            cosine = 1.0
        else:
            cosine = 0.0
        if self.bitwise:
            self.max_abs = self.max_rel = 0.0
        return Metrics(
            basis="values", passed=self.mismatched == 0, max_abs=self.max_abs, max_rel=self.max_rel,
            mismatched=self.mismatched, numel=n, cosine=cosine, nan_a=self.nan_a, nan_b=self.nan_b,
            inf_a=self.inf_a, inf_b=self.inf_b, bitwise=self.bitwise,
            rmse=math.sqrt(self.dd / n) if n else 0.0, ref_rms=math.sqrt(self.bb / n) if n else 0.0,
        )


def _chunk_finite(acc: _Accumulator, x, y, d, u, t, m, atol: float, rtol: float) -> None:
    """One chunk (numpy arrays), assuming finite values; hands over to the NaN/Inf path when not."""
    import numpy as np

    np.subtract(x, y, out=d)
    np.abs(d, out=d)
    mx = float(d.max())
    if not math.isfinite(mx):
        _chunk_nonfinite(acc, x, y, atol, rtol)
        return
    acc.max_abs = max(acc.max_abs, mx)
    if mx > 0:
        np.abs(y, out=u)
        if mx > atol:  # else no element can exceed atol + rtol*|y|
            # t = |x-y| - rtol*|y|: an element fails when t > atol; count only if one does.
            np.multiply(u, rtol, out=t)
            np.subtract(d, t, out=t)
            if float(t.max()) > atol:
                acc.mismatched += int(np.count_nonzero(np.greater(t, atol, out=m)))
        np.divide(d, u, out=t)
        rel = float(np.fmax.reduce(t))  # fmax skips the NaN of 0/0; x/0 stays inf
        if rel > acc.max_rel:
            acc.max_rel = rel
    ab, aa, bb, dd = float(np.dot(x, y)), float(np.dot(x, x)), float(np.dot(y, y)), float(np.dot(d, d))
    if not (math.isfinite(ab) and math.isfinite(aa) and math.isfinite(bb) and math.isfinite(dd)):  # float32 overflow
        x64, y64, d64 = x.astype(np.float64), y.astype(np.float64), d.astype(np.float64)
        ab, aa, bb, dd = float(np.dot(x64, y64)), float(np.dot(x64, x64)), float(np.dot(y64, y64)), float(np.dot(d64, d64))
    acc.dd += dd
    acc.aa += aa
    acc.bb += bb
    acc.ab += ab


def _chunk_nonfinite(acc: _Accumulator, x, y, atol: float, rtol: float) -> None:
    """One chunk with NaN or Inf somewhere: masks, in float64 (rare, so plain torch)."""
    import torch

    x = torch.as_tensor(x).to(torch.float64)
    y = torch.as_tensor(y).to(torch.float64)
    xn, yn = torch.isnan(x), torch.isnan(y)
    xi, yi = torch.isinf(x), torch.isinf(y)
    acc.nan_a += int(xn.sum())
    acc.nan_b += int(yn.sum())
    acc.inf_a += int(xi.sum())
    acc.inf_b += int(yi.sum())
    fin = ~(xn | xi | yn | yi)
    same_special = (xn & yn) | (xi & yi & (x == y))
    xf = torch.where(fin, x, 0.0)
    yf = torch.where(fin, y, 0.0)
    d = (xf - yf).abs()
    ay = yf.abs()
    bad = (d > atol + rtol * ay) | (~fin & ~same_special)
    acc.mismatched += int(bad.sum())
    acc.max_abs = max(acc.max_abs, float(d.amax()) if d.numel() else 0.0)
    rel = (d / ay).nan_to_num_(nan=0.0, posinf=math.inf)
    acc.max_rel = max(acc.max_rel, float(rel.amax()) if rel.numel() else 0.0)
    acc.dd += float(torch.dot(d, d))
    acc.aa += float(torch.dot(xf, xf))
    acc.bb += float(torch.dot(yf, yf))
    acc.ab += float(torch.dot(xf, yf))


# -- recorded stats and scalars -----------------------------------------------------------
def compare_checksums(ra: Record, rb: Record) -> Metrics:
    """Equal checksums of equal dtype/shape: bitwise equal, without reading files."""
    sa, sb = ra.stats, rb.stats
    return Metrics(
        basis="checksum", passed=True, max_abs=0.0, max_rel=0.0, mismatched=0, numel=ra.numel,
        cosine=1.0, nan_a=sa.nan if sa else None, nan_b=sb.nan if sb else None,
        inf_a=sa.inf if sa else None, inf_b=sb.inf if sb else None, bitwise=True,
    )


def compare_stats(ra: Record, rb: Record, atol: float, rtol: float) -> Metrics:
    """Compare what the manifest recorded: checksums first, then the summary stats.

    Equal checksums pass (bitwise equal). Otherwise the pair passes when every stat
    is within ``atol + rtol*|b|`` and the NaN/Inf counts agree; max_abs/max_rel are
    then over the stats, not the elements.
    """
    bitwise = None
    if ra.checksum and rb.checksum:
        bitwise = ra.checksum == rb.checksum
        if bitwise:
            m = compare_checksums(ra, rb)
            m.basis = "stats"
            return m
    sa, sb = ra.stats, rb.stats
    if sa is None or sb is None:
        return Metrics(basis="stats", passed=False, bitwise=bitwise,
                       note=f"no stats recorded in run {'A' if sa is None else 'B'}")
    worst_abs = worst_rel = 0.0
    bad: list[str] = []
    for key in STAT_KEYS[:5]:
        va, vb = getattr(sa, key), getattr(sb, key)
        if va is None and vb is None:
            continue
        if va is None or vb is None:
            bad.append(key)
            continue
        diff = abs(va - vb)
        worst_abs = max(worst_abs, diff)
        if vb != 0:
            worst_rel = max(worst_rel, diff / abs(vb))
        elif diff > 0:
            worst_rel = math.inf
        if diff > atol + rtol * abs(vb):
            bad.append(key)
    if sa.nan != sb.nan:
        bad.append("nan count")
    if sa.inf != sb.inf:
        bad.append("inf count")
    note = ""
    if bad:
        note = "stats differ: " + ", ".join(bad)
    return Metrics(
        basis="stats", passed=not bad, max_abs=worst_abs, max_rel=worst_rel, numel=ra.numel,
        nan_a=sa.nan, nan_b=sb.nan, inf_a=sa.inf, inf_b=sb.inf, bitwise=bitwise, note=note,
    )


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if v in ("nan", "inf", "-inf"):
        return float(v)
    return None


def compare_scalars(ra: Record, rb: Record, atol: float | None, rtol: float | None) -> Metrics:
    """A scalar, symint, None or other non-tensor argument."""
    va, vb = ra.value, rb.value
    if ra.kind != rb.kind:
        return Metrics(basis="value", passed=False, note=f"kind {ra.kind} vs {rb.kind}")
    na, nb = _number(va), _number(vb)
    if na is not None and nb is not None and (isinstance(va, float) or isinstance(vb, float)):
        at, rt = tolerance("float", atol, rtol)
        same_special = (math.isnan(na) and math.isnan(nb)) or (math.isinf(na) and na == nb)
        diff = 0.0 if same_special else abs(na - nb)
        ok = same_special or diff <= at + rt * abs(nb)
        rel = 0.0 if diff == 0 else (diff / abs(nb) if nb else math.inf)
        return Metrics(basis="value", passed=ok, max_abs=diff, max_rel=rel, bitwise=va == vb,
                       note="" if ok else f"value {va!r} vs {vb!r}")
    ok = va == vb
    diff = abs(na - nb) if (na is not None and nb is not None) else None
    return Metrics(basis="value", passed=ok, max_abs=diff, bitwise=ok, note="" if ok else f"value {va!r} vs {vb!r}")
