"""Asking the kernel to read tensor files ahead of the comparison.

Tensors are memory-mapped and compared in file order; the kernel's own readahead
keeps one file streaming, but every new file starts cold. A background thread
therefore hands the next files to ``posix_fadvise(WILLNEED)``, which queues their
reads into the page cache without copying anything into this process: the disk
keeps working while the comparison computes. (Reading the files into a buffer
instead was measured slower on 2 cores: the extra copy competes with the compute.)
Where ``posix_fadvise`` does not exist the thread does nothing.
"""

from __future__ import annotations

import os
import queue
import threading

#: Files are advised in steps of this many bytes, so a stale file is dropped early.
STEP = 64 << 20


class Prefetcher:
    """A thread that advises the kernel to read the files it is given, in order."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._consumed = 0
        self._thread: threading.Thread | None = None
        self.enabled = hasattr(os, "posix_fadvise")

    def add(self, ticket: int, path: str) -> None:
        """Read ``path`` soon; ``ticket`` orders it against :meth:`consumed`."""
        if not self.enabled:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="aoti_debug-prefetch", daemon=True)
            self._thread.start()
        self._queue.put((ticket, path))

    def consumed(self, ticket: int) -> None:
        """Everything before ``ticket`` has been compared: no need to read it any more."""
        self._consumed = ticket

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            ticket, path = item
            if ticket < self._consumed:
                continue
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block it
            except OSError:
                continue  # the comparison reports unreadable files itself
            try:
                size = os.fstat(fd).st_size
                for offset in range(0, size, STEP):
                    if ticket < self._consumed:
                        break
                    os.posix_fadvise(fd, offset, STEP, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            finally:
                os.close(fd)

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
