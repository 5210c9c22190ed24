"""Reading tensor files ahead of the comparison, so that the disk never waits on it.

Comparing memory-mapped tensors alone would alternate: fault pages in, compute,
fault the next pages in. A background thread instead reads the next files in large
sequential reads (which fill the page cache at the disk's full rate) while the
comparison works on the current pair from pages that are already there. The reads
go into one small reusable buffer: the page cache, not this process, holds the data.
"""

from __future__ import annotations

import queue
import threading

#: Size of each read; the buffer is reused for every file.
READ_SIZE = 8 << 20


class Prefetcher:
    """A thread that reads the files it is given, in order, skipping stale ones."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._consumed = 0
        self._thread: threading.Thread | None = None
        self.bytes_read = 0

    def add(self, ticket: int, path: str) -> None:
        """Read ``path`` soon; ``ticket`` orders it against :meth:`consumed`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="aoti_debug-prefetch", daemon=True)
            self._thread.start()
        self._queue.put((ticket, path))

    def consumed(self, ticket: int) -> None:
        """Everything up to ``ticket`` is being compared already: no need to read it."""
        self._consumed = ticket

    def _run(self) -> None:
        buf = bytearray(READ_SIZE)
        view = memoryview(buf)
        while True:
            item = self._queue.get()
            if item is None:
                return
            ticket, path = item
            if ticket < self._consumed:
                continue
            try:
                with open(path, "rb", buffering=0) as f:
                    while True:
                        n = f.readinto(view)
                        if not n:
                            break
                        self.bytes_read += n
                        if ticket < self._consumed:
                            break
            except OSError:
                pass  # the comparison reports unreadable files itself

    def close(self) -> None:
        self._consumed = float("inf")  # type: ignore[assignment]  # drop what is still queued
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> "Prefetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
