"""Tensor statistics and checksum, computed on the tensor's own device.

Nothing here reads a value back to the host: :func:`device_summary` returns a small
float64 tensor (the stats) and an int64 tensor (the checksum) on the tensor's device,
so that the caller can copy them to the host asynchronously and never stall the
model's stream. :func:`summary_to_stats` turns the host copies into a record's fields.

The checksum (format version 1), reproduced exactly by the C++ runtime:
take the tensor in row-major logical order; read each element's bits as an unsigned
integer of the element's width (complex: each real/imag part is one element, bool:
one byte); then ``checksum = sum_i bits_i * (2*i + 1) mod 2**64`` written as 16
lower-case hex digits. Equal checksums mean bitwise-equal values (up to a 2**-64
chance); a permutation of equal values changes it.
"""

from __future__ import annotations

import torch

from ..format.schema import Stats

#: Row length of the two-level checksum sum: keeps index tensors small.
_K = 4096

_BITS_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_MASKS = {2: 0xFFFF, 4: 0xFFFFFFFF}

_index_cache: dict[tuple[str, int], torch.Tensor] = {}


def _odd_weights(n: int, device: torch.device) -> torch.Tensor:
    """``2*k + 1`` for k < n as int64, cached per device (n <= _K or row counts).

    On CUDA the cached tensors live outside any CUDA-graph pool (``device_ring.private_empty``):
    a CUDA-graph tree's warm-up routes the thread's allocations into the graph's pool, and a
    tensor of ours left there fails its memory check ("tensors in the cudagraph pool not
    tracked as outputs"). Inside a capture they belong to the graph and are not kept."""
    key = (str(device), n)
    w = _index_cache.get(key)
    if w is not None:
        return w
    cuda = device.type == "cuda"
    if cuda and torch.cuda.is_current_stream_capturing():
        return torch.arange(n, device=device, dtype=torch.int64).mul_(2).add_(1)
    if len(_index_cache) > 64:
        from .fused_stats import _retire  # (queued kernels may still read the private blocks dropped)

        for d in {t.device for t in _index_cache.values()}:
            _retire([t for t in _index_cache.values() if t.device == d], d)
        _index_cache.clear()
    if cuda:
        from .device_ring import private_empty

        w = torch.arange(n, out=private_empty(n, torch.int64, device)).mul_(2).add_(1)
    else:
        w = torch.arange(n, device=device, dtype=torch.int64).mul_(2).add_(1)
    _index_cache[key] = w
    return w


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The element bits of ``t`` as non-negative int64, flat, row-major."""
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype == torch.bool:
        flat = t.reshape(-1).view(torch.uint8)
    else:
        flat = t.contiguous().reshape(-1)
        size = flat.element_size()
        flat = flat.view(_BITS_VIEW[size])
    bits = flat.to(torch.int64)
    mask = _MASKS.get(flat.element_size())
    if mask is not None:
        bits = bits.bitwise_and_(mask)
    return bits


def device_checksum(t: torch.Tensor) -> torch.Tensor:
    """The checksum of ``t`` as a 0-d int64 tensor on ``t``'s device (wrapping sums)."""
    bits = _bits(t)
    n = bits.numel()
    rows = n // _K
    total = torch.zeros((), dtype=torch.int64, device=bits.device)
    if rows:
        body = bits[: rows * _K].view(rows, _K)
        # sum_k bits[b,k]*(2(bK+k)+1) = sum_k bits[b,k]*(2k+1) + 2bK * sum_k bits[b,k]
        inner = (body * _odd_weights(_K, bits.device)).sum(dtype=torch.int64)
        row_sums = body.sum(dim=1, dtype=torch.int64)
        offsets = (_odd_weights(rows, bits.device) - 1) * _K  # 2bK
        total = total + inner + (row_sums * offsets).sum(dtype=torch.int64)
    tail = bits[rows * _K:]
    if tail.numel():
        w = _odd_weights(tail.numel(), bits.device) + 2 * rows * _K
        total = total + (tail * w).sum(dtype=torch.int64)
    return total


def device_stats(t: torch.Tensor) -> torch.Tensor:
    """``[min, max, mean, std, absmax, nan, inf, finite_count]`` as float64 on t's device.

    min/max/mean/std/absmax ignore NaN and Inf; they are NaN when no element is finite.
    """
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype == torch.bool or not (t.is_floating_point()):
        a = t.reshape(-1).to(torch.float64)
        n = float(a.numel())
        if a.numel() == 0:
            return torch.tensor([float("nan")] * 5 + [0.0, 0.0, 0.0], dtype=torch.float64, device=t.device)
        mn, mx = torch.aminmax(a)
        mean = a.mean()
        std = a.std() if a.numel() > 1 else torch.zeros((), dtype=torch.float64, device=t.device)
        zero = torch.zeros((), dtype=torch.float64, device=t.device)
        return torch.stack([mn, mx, mean, std, torch.maximum(mn.abs(), mx.abs()), zero, zero, zero + n])
    a = t.reshape(-1)
    if a.dtype not in (torch.float32, torch.float64):
        a = a.to(torch.float32)
    if a.numel() == 0:
        return torch.tensor([float("nan")] * 5 + [0.0, 0.0, 0.0], dtype=torch.float64, device=t.device)
    fin = torch.isfinite(a)
    count = fin.sum(dtype=torch.float64)
    nan = torch.isnan(a).sum(dtype=torch.float64)
    inf = a.numel() - count - nan
    mn = torch.where(fin, a, float("inf")).amin().to(torch.float64)
    mx = torch.where(fin, a, float("-inf")).amax().to(torch.float64)
    z = torch.where(fin, a, 0).to(torch.float64)
    total = z.sum()
    mean = total / count
    sq = torch.where(fin, (z - mean), 0).square().sum()
    std = torch.sqrt(sq / (count - 1).clamp(min=1))
    none_finite = count == 0
    nan_t = torch.full((), float("nan"), dtype=torch.float64, device=t.device)
    mn = torch.where(none_finite, nan_t, mn)
    mx = torch.where(none_finite, nan_t, mx)
    absmax = torch.maximum(mn.abs(), mx.abs())
    std = torch.where(count > 1, std, torch.where(none_finite, nan_t, 0.0))
    return torch.stack([mn, mx, mean, std, absmax, nan, inf, count])


def device_summary(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Stats (float64[8]) and checksum (int64 0-d), both on ``t``'s device, no sync."""
    t = t.detach()
    return device_stats(t), device_checksum(t)


def format_checksum(value: int) -> str:
    return f"{value & 0xFFFFFFFFFFFFFFFF:016x}"


def summary_to_stats(values: list[float]) -> Stats:
    """Host list from :func:`device_stats` -> :class:`Stats`."""
    mn, mx, mean, std, absmax, nan, inf, _count = values

    def _f(v: float) -> float | None:
        return None if v != v else float(v)

    return Stats(min=_f(mn), max=_f(mx), mean=_f(mean), std=_f(std), absmax=_f(absmax), nan=int(nan), inf=int(inf))


_INF = float("inf")


def _field(v: float) -> float | str | None:
    if v != v:
        return None
    if v == _INF or v == -_INF:  # a mean or std that overflowed: schema._jsonable's spelling
        return "inf" if v > 0 else "-inf"
    return float(v)


def stats_fields(mn: float, mx: float, mean: float, std: float, absmax: float, nan: float, inf: float) -> dict:
    """A record's ``stats`` from the first seven summary values: what
    ``summary_to_stats(values).to_dict()`` gives, without the dataclass (this runs once
    per tensor of every recorded launch)."""
    if (mn - mn) + (mx - mx) + (mean - mean) + (std - std) + (absmax - absmax) == 0.0:  # all finite
        return {"min": mn, "max": mx, "mean": mean, "std": std, "absmax": absmax, "nan": int(nan), "inf": int(inf)}
    return {"min": _field(mn), "max": _field(mx), "mean": _field(mean), "std": _field(std),
            "absmax": _field(absmax), "nan": int(nan), "inf": int(inf)}


def tensor_stats(t: torch.Tensor) -> tuple[Stats, str]:
    """Stats and checksum read back to the host (synchronises; tests and the reader use it)."""
    s, c = device_summary(t)
    return summary_to_stats(s.cpu().tolist()), format_checksum(int(c.cpu()))
