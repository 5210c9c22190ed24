"""Stats of device tensors written into a ring of device slots, read back in bulk.

At levels ``stats`` and ``print`` a CUDA launch side costs the fused stats kernel's
launch (:mod:`.fused_stats`) writing into reserved rows of a device segment, and
nothing else on the device: no allocation, no host copy, no event per side. A segment
is shipped (one device->host copy into pinned host memory of its own and one event, on
the segment's stream) when it is full or when the session flushes; the writer thread
then waits for that one event and writes every record of the segment from the host
values, where they are (the copy stays with the shipment's :class:`Arrival` until its
records are written, while the segment is filled again).

Each record's :class:`~aoti_debug.runtime.session.Job` waits on the segment's
:class:`Arrival`, which blocks until the segment was shipped and copied. So the writer
thread sleeps on the first record of an unshipped segment while the model runs on, and
the manifest keeps launch order. :func:`ship_all` runs before every session flush.

Memory. Segments and the CUDA-graph arena are allocated by a thread of ours on a
private stream (:func:`private_empty`). Inductor's CUDA-graph trees route the
allocations of the warming-up thread into the graph's private pool and check
(``check_memory_pool``, on by default in torch 2.11 and 2.13) that nothing unknown
stays alive there: a buffer of ours in that pool would fail the check inside the
user's model. Buffers are kept for the process and reused, so the caching allocator
never hands their blocks out again while queued kernels still write them; a segment is
let go only once it is free (the writer read its values: nothing queued writes it) and
smaller than the ring's segments have grown to (``MAX_SEGMENT_ROWS``). Host
buffers name ``device="cpu"``: the warm-up also makes CUDA the default device.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

import torch

from . import session as _session
from .stats import format_checksum, stats_fields

#: False sends CUDA stats down the per-side host-copy path (tests compare the two).
ENABLED = True
#: Rows of a ring's first segment (72 bytes each on the device and on the host).
SEGMENT_ROWS = 1024
#: The most rows a segment grows to. A segment that fills before a flush ships it is
#: followed by segments of twice its rows: steps run back to back then turn segments
#: over less often, and a side whose inputs are rows of the segment before (taken from
#: their producers) is queued alone, in Python, only at a turnover.
MAX_SEGMENT_ROWS = 16384
#: Segments per ring that may wait for the writer before a launch side waits for one.
MAX_SEGMENTS = 16

#: The current stream's handle (what Inductor's get_raw_stream calls; None: not in this torch).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_lock = threading.Lock()
_rings: dict[tuple, "Ring"] = {}
_private: dict[int, Any] = {}  # device index -> the stream our persistent buffers are allocated on


def private_empty(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A device buffer outside any CUDA-graph pool, for the process.

    A CUDA-graph tree's warm-up routes every allocation of the calling thread into the
    graph's pool (``_cuda_beginAllocateCurrentThreadToPool``, torch 2.11 and 2.13), so the
    buffer is allocated by a thread of ours, on a private stream. Callers keep it for
    the process, or wait for the device before dropping it (``fused_stats._retire``).
    Must not be called while the current stream is capturing.
    """
    idx = device.index if device.index is not None else torch.cuda.current_device()
    return _allocator().submit(_allocate, n, dtype, idx).result()


_pool: Any = None


def _allocator():
    global _pool
    if _pool is None:
        with _lock:
            if _pool is None:
                from concurrent.futures import ThreadPoolExecutor

                _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aoti_debug-alloc")
    return _pool


def _allocate(n: int, dtype: torch.dtype, idx: int) -> torch.Tensor:
    s = _private.get(idx)
    if s is None:
        s = _private[idx] = torch.cuda.Stream(device=idx)
    with torch.cuda.stream(s):
        return torch.empty(n, dtype=dtype, device=torch.device("cuda", idx))


class Arrival:
    """What the records of one segment fill wait for: the segment's shipment and copy.

    Duck-types the ``event`` of a :class:`~aoti_debug.runtime.session.Job` (the writer
    thread calls :meth:`synchronize`)."""

    __slots__ = ("segment", "_shipped", "_event", "_host", "_pool", "_rows", "_sums", "_values", "_lock")

    def __init__(self, segment: "Segment"):
        self.segment = segment
        self._shipped = threading.Event()
        self._event: Any = None
        self._host: torch.Tensor | None = None
        self._pool: Any = None
        self._rows: torch.Tensor | None = None
        self._sums: torch.Tensor | None = None
        self._values: tuple[list, list] | None = None
        self._lock = threading.Lock()

    def ship(self, event: Any, host: torch.Tensor | None, pool: Any = None) -> None:
        """The values are on their way: ``event`` completes when they are in ``host`` (this
        shipment's own copy, in the segment's layout, given back to ``pool`` when this
        arrival is gone; None only with an ``event`` that raises)."""
        self._event = event
        self._host = host
        self._pool = pool
        self._shipped.set()

    def __del__(self) -> None:
        # The records that read the host copy are written (or dropped): the ring ships into
        # it again. Its copy was ordered on the ring's stream before any later one.
        pool, host = self._pool, self._host
        if pool is not None and host is not None:
            try:
                pool.append(host)  # (a deque: no lock, whatever thread drops the arrival)
            except Exception:
                pass

    def ready(self) -> bool:
        """The values are on their way (waiting for them does not wait for a flush)."""
        return self._shipped.is_set()

    def arrived(self) -> bool:
        """The values are on the host (shipped and copied): waiting for them is no wait."""
        return self._rows is not None or (self._shipped.is_set() and event_done(self._event))

    def synchronize(self) -> None:
        """Wait for the values; the segment may then be filled again (they are in this
        shipment's host copy)."""
        if self._rows is not None:
            return
        self._shipped.wait()
        with self._lock:
            if self._rows is None:
                seg = self.segment
                try:
                    self._event.synchronize()
                    used, cap, host = seg.shipped_rows, seg.cap, self._host
                    self._sums = host[8 * cap: 8 * cap + used].view(torch.int64)
                    self._rows = host[: 8 * used]  # (last: set means done)
                finally:
                    seg.release()

    def host(self) -> tuple[int, int]:
        """Addresses of the host copy: ``(stats rows, checksums)``, 8 float64 per row (the
        fused kernel's packed layout) and one int64 per row, valid while this lives."""
        self.synchronize()
        return self._rows.data_ptr(), self._sums.data_ptr()

    def row_count(self) -> int:
        """The number of rows in the host copy (those :meth:`host` addresses)."""
        self.synchronize()
        return self._rows.numel() >> 3

    def values(self) -> tuple[list, list]:
        """``(stats rows, checksums)`` of the segment as Python lists (made once)."""
        v = self._values
        if v is not None:
            return v
        self.synchronize()
        with self._lock:
            if self._values is None:
                self._values = (self._rows.view(-1, 8).tolist(), self._sums.tolist())
            return self._values


class Segment:
    """One device buffer of ``cap`` rows (``fused_stats`` packed layout: 8 float64 a row,
    then one int64 checksum a row); each shipment copies it into pinned host memory of its
    own (:class:`Arrival`)."""

    __slots__ = ("buf", "addr", "cap", "used", "arrival", "shipped_rows", "_free")

    def __init__(self, device: torch.device, cap: int):
        self.cap = cap
        self.buf = private_empty(9 * cap, torch.float64, device)
        self.addr = self.buf.data_ptr()
        """The buffer's device address (row ``r`` of the stats at ``addr + 64 * r``)."""
        self.used = 0
        self.shipped_rows = 0
        self.arrival = Arrival(self)
        self._free = threading.Event()
        self._free.set()

    def release(self) -> None:
        """The writer read the host values: the segment may be filled again."""
        self._free.set()

    def reset(self) -> None:
        self.used = 0
        self.arrival = Arrival(self)
        self._free.clear()


class Ring:
    """The segments of one (device, stream): one being filled, others shipped."""

    def __init__(self, device: torch.device, stream: Any):
        self.device = device
        self.stream = stream
        self.segments: list[Segment] = []
        self.current: Segment | None = None
        self._lock = threading.Lock()
        self._rows = SEGMENT_ROWS  # a new segment's rows (doubled each time one fills)
        self._index = device.index if device.index is not None else torch.cuda.current_device()
        self._raw = stream.cuda_stream
        #: Pinned host copies no arrival holds, by segment rows: a shipment takes one, its
        #: arrival gives it back (reused at once: the caching host allocator would wait for
        #: the stream to pass the point where it was freed).
        self._hosts: dict[int, collections.deque] = {}

    def reserve(self, k: int) -> tuple[Segment, int]:
        """Rows ``first .. first+k-1`` of the segment being filled (shipping it when full).

        ``first`` is a multiple of 8: ``fused_stats.summarize`` then addresses the rows
        relative to it, and a side's pointer table is the same at every step."""
        with self._lock:
            seg = self.current
            if seg is not None:
                seg.used = (seg.used + 7) & ~7
            if seg is None or seg.used + k > seg.cap:
                if seg is not None and seg.used:
                    self._rows = min(max(self._rows, 2 * seg.cap), max(MAX_SEGMENT_ROWS, SEGMENT_ROWS))
                    self._ship(seg)
                elif seg is not None:
                    seg.release()  # nothing reserved in it: free again as it is
                seg = self.current = self._fresh(k)
            first = seg.used
            seg.used += k
            return seg, first

    def _fresh(self, k: int) -> Segment:
        want = max(k, self._rows)
        # Free segments smaller than a new one now are dropped (nothing queued writes them:
        # the writer read their values), so that they do not count against MAX_SEGMENTS.
        self.segments = [seg for seg in self.segments if seg.cap >= self._rows or not seg._free.is_set()]
        for seg in self.segments:
            if seg.cap >= want and seg._free.is_set():
                seg.reset()
                return seg
        if len(self.segments) >= MAX_SEGMENTS:
            # The writer is behind: wait for the oldest shipped segment it will read next.
            fits = [s for s in self.segments if s.cap >= k]
            if fits:
                oldest = fits[0]
                self.segments.remove(oldest)
                self.segments.append(oldest)
                oldest._free.wait()
                oldest.reset()
                return oldest
        cap = self._rows
        while cap < k:
            cap *= 2
        seg = Segment(self.device, cap)
        self.segments.append(seg)
        seg.reset()
        return seg

    def _ship(self, seg: Segment) -> None:
        used, cap = seg.used, seg.cap
        seg.shipped_rows = used
        host = None
        try:
            # One copy of the used rows and the checksums' first `used` slots (the unused
            # rows between, up to 64 KiB more on the bus, cost less than a second copy's
            # host time), into pinned memory of the ring's: the arrival holds it until its
            # records are written, while the segment is filled again. A grown segment
            # mostly empty (a flush) ships its rows and its checksums in two copies.
            n = 8 * cap + used
            spans = [(0, n)] if cap <= SEGMENT_ROWS or 2 * used > cap else [(0, 8 * used), (8 * cap, n)]
            pool = self._hosts.get(cap)
            if pool is None:
                pool = self._hosts[cap] = collections.deque()
            try:
                host = pool.pop()
            except IndexError:
                # device="cpu": a CUDA-graph tree's warm-up makes CUDA the default device
                host = torch.empty(9 * cap, dtype=torch.float64, device="cpu", pin_memory=True)
            if _raw_stream is not None and _raw_stream(self._index) == self._raw:
                for a, b in spans:  # (the usual case: no stream switch)
                    host[a:b].copy_(seg.buf[a:b], non_blocking=True)
            else:  # a flush from another stream or thread
                with torch.cuda.stream(self.stream):
                    for a, b in spans:
                        host[a:b].copy_(seg.buf[a:b], non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        except Exception as e:  # a device fault: every record waiting on it gets the error
            _session.warn_once(f"ring-ship-{type(e).__name__}", f"cannot read device stats back: {e}")
            event = _Failed(e)
            pool = None
        seg.arrival.ship(event, host, pool)

    def ship(self) -> None:
        """Ship the segment being filled (nothing when it is empty)."""
        with self._lock:
            seg = self.current
            if seg is not None and seg.used:
                self.current = None
                self._ship(seg)


def event_done(event: Any) -> bool:
    """Whether ``event`` completed, without waiting (an event that cannot be asked, or
    raises, counts as done: its ``synchronize`` gives the error)."""
    query = getattr(event, "query", None)
    if query is None:
        return True
    try:
        return bool(query())
    except Exception:
        return True


def fill(rec: dict, values: tuple[list, list], row: int) -> None:
    """Set a record's stats and checksum from row ``row`` of read-back ``(stats rows, checksums)``."""
    stats, sums = values
    rec["stats"] = stats_fields(*stats[row][:7])
    rec["checksum"] = format_checksum(sums[row])


def ring_for(device: torch.device) -> Ring:
    """The ring of ``device``'s current stream."""
    idx = device.index
    if idx is None:
        idx = torch.cuda.current_device()
    # (_raw_stream: what Inductor's get_raw_stream calls)
    key = (idx, _raw_stream(idx) if _raw_stream is not None else torch.cuda.current_stream(idx).cuda_stream)
    ring = _rings.get(key)
    if ring is None:
        with _lock:
            ring = _rings.get(key)
            if ring is None:
                ring = _rings[key] = Ring(device, torch.cuda.current_stream(idx))
    return ring


def ship_all() -> None:
    """Ship every ring's partly filled segment (before a flush waits for the writer)."""
    for ring in list(_rings.values()):
        ring.ship()


class _Failed:
    """The event of a segment that could not be copied back: raises for each record."""

    def __init__(self, error: Exception):
        self.error = error

    def synchronize(self) -> None:
        raise RuntimeError(f"device stats could not be read back: {self.error}")


def pending() -> int:
    """Rows reserved and not shipped yet, over all rings (for tests)."""
    return sum(r.current.used for r in _rings.values() if r.current is not None)




_session.BEFORE_FLUSH.append(ship_all)
