"""The per-process dump session: run directory, counters and the background writer.

The model's thread only enqueues work. Device tensors are copied to pinned host
memory with ``non_blocking=True`` on the model's stream and an event is recorded;
one background thread waits on that event, computes nothing on the device, writes
``.pt`` files and manifest lines in launch order. The queue is bounded by bytes in
flight: when it is full the model thread waits (back-pressure), it never drops data.

Failures (unwritable directory, full disk, an odd tensor) warn once on stderr, are
kept in :data:`FAILURES` and written into the record's ``error`` field where a
manifest exists; they never propagate into the model.
"""

from __future__ import annotations

import atexit
import collections
import os
import sys
import threading
from typing import Any, Callable

from .. import config
from ..format.schema import RunInfo
from ..format.writer import RunWriter, default_run_id, new_run_info, run_directory

#: Host memory that may be queued for writing before the model thread waits.
MAX_BYTES_IN_FLIGHT = 1 << 30

#: (key, message) of every failure seen in this process, for tests and post-mortems.
FAILURES: list[tuple[str, str]] = []
_warned: set[str] = set()
_lock = threading.Lock()


def warn_once(key: str, message: str) -> None:
    """One line on stderr per kind of failure; every occurrence kept in FAILURES."""
    with _lock:
        FAILURES.append((key, message))
        if key in _warned:
            return
        _warned.add(key)
    try:
        sys.stderr.write(f"[aoti_debug] warning: {message} (model continues; further such warnings suppressed)\n")
        sys.stderr.flush()
    except Exception:
        pass


class Job:
    """One manifest line to write, with what must happen before it (wait, save)."""

    __slots__ = ("record", "event", "finish", "nbytes")

    def __init__(self, record: dict, event: Any = None, finish: Callable[[dict], None] | None = None, nbytes: int = 0):
        self.record = record
        self.event = event
        self.finish = finish
        self.nbytes = nbytes


class Session:
    """Counters and the writer of one process run (one per pid)."""

    def __init__(self, run_settings: config.RunSettings):
        self.settings = run_settings
        self.pid = os.getpid()
        self.seq = 0
        self.launch = 0
        self.kernel_calls: collections.Counter = collections.Counter()
        self.graph_labels: dict[Any, str] = {}
        self.bytes_written = 0
        #: (dtype, shape, checksum, min, max, mean) -> tensor file already holding it.
        self.content_files: dict[tuple, str] = {}
        self._writer: RunWriter | None = None
        self._writer_failed = False
        self._queue: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._in_flight = 0
        self._thread: threading.Thread | None = None
        self._closed = False
        self.run_id = run_settings.run_id or default_run_id(run_settings.world_size)
        self.path = run_directory(run_settings.dump_dir, self.run_id, run_settings.rank, run_settings.world_size)
        self.info: RunInfo | None = None

    # -- run directory ---------------------------------------------------------------
    def writer(self, level: str, device: str = "") -> RunWriter | None:
        """The run's writer, created on first use; None once creating it failed."""
        if self._writer is not None or self._writer_failed:
            return self._writer
        try:
            self.info = new_run_info(
                self.run_id, level, self.settings.rank, self.settings.world_size, device=device
            )
            self._writer = RunWriter(self.path, self.info)
        except Exception as e:  # unwritable directory, full disk, bad path
            self._writer_failed = True
            warn_once("dump-dir", f"cannot create dump directory {self.path!r}: {e}")
        return self._writer

    def register_graph(self, handle: Any, label: str, origin: dict) -> None:
        self.graph_labels[handle] = label
        w = self._writer
        if w is not None and self.info is not None:
            self.info.graphs[label] = origin
            try:
                w.write_info()
            except Exception as e:
                warn_once("run-json", f"cannot update run.json: {e}")

    # -- background writer -----------------------------------------------------------
    def submit(self, job: Job) -> None:
        with self._cond:
            while self._in_flight and self._in_flight + job.nbytes > MAX_BYTES_IN_FLIGHT:
                self._cond.wait()
            self._in_flight += job.nbytes
            self._queue.append(job)
            self._cond.notify_all()
        if self._thread is None:
            self._start()

    def _start(self) -> None:
        with self._cond:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="aoti_debug-writer", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue and self._closed:
                    return
                job = self._queue[0]
            self._process(job)
            with self._cond:
                self._queue.popleft()
                self._in_flight -= job.nbytes
                self._cond.notify_all()

    def _process(self, job: Job) -> None:
        record = job.record
        try:
            if job.event is not None:
                job.event.synchronize()
            if job.finish is not None:
                job.finish(record)
        except Exception as e:
            record["error"] = f"{type(e).__name__}: {e}"
            warn_once(f"record-{type(e).__name__}", f"could not record {record.get('kernel')}/{record.get('arg')}: {e}")
        w = self._writer
        if w is None:
            return
        try:
            w.append(record)
        except Exception as e:
            warn_once("manifest", f"cannot append to manifest in {self.path!r}: {e}")

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything queued so far is on disk."""
        with self._cond:
            self._cond.wait_for(lambda: not self._queue, timeout=timeout)

    def close(self) -> None:
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if self._writer is not None:
            self._writer.close()


_session: Session | None = None
_session_lock = threading.Lock()


def current() -> Session:
    """The session of this process; a forked child starts its own."""
    global _session
    s = _session
    if s is not None and s.pid == os.getpid():
        return s
    with _session_lock:
        if _session is None or _session.pid != os.getpid():
            try:
                settings = config.run_settings_from_env()
            except Exception as e:
                warn_once("run-settings", f"{e}; using defaults")
                settings = config.RunSettings()
            _session = Session(settings)
        return _session


def flush() -> None:
    """Block until every record of this process is written (tests, before reading a dump)."""
    s = _session
    if s is not None and s.pid == os.getpid():
        s.flush()


def reset() -> None:
    """Close the current session; the next record starts a new run (re-reads AOTI_DEBUG_DIR)."""
    global _session
    with _session_lock:
        s, _session = _session, None
    if s is not None and s.pid == os.getpid():
        s.close()


def dump_path() -> str | None:
    """Directory of the current run, or None if nothing was recorded yet."""
    s = _session
    return s.path if s is not None and s._writer is not None else None


@atexit.register
def _close_at_exit() -> None:
    s = _session
    if s is not None and s.pid == os.getpid():
        try:
            s.close()
        except Exception:
            pass
