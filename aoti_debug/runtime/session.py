"""The per-process dump session: run directory, counters and the background writer.

The model's thread only enqueues work. Device tensors are copied to pinned host
memory with ``non_blocking=True`` on the model's stream and an event is recorded;
one background thread waits on that event, computes nothing on the device, writes
``.pt`` files and manifest lines in launch order. The queue is bounded by bytes in
flight: when it is full the model thread waits (back-pressure), it never drops data.

Failures (unwritable directory, full disk, an odd tensor, a bad environment value)
warn once on stderr, are kept in :data:`FAILURES` and written into the record's
``error`` field where a manifest exists; they never propagate into the model.
:func:`failures` adds those of the C++ runtime (cpp_wrapper and AOTInductor models
loaded in this process).

A run directory belongs to one runtime of one process: :meth:`Session.writer` claims
it (``format.writer.claim_run_directory``), and a run id already held by another
process or by this process's C++ runtime gives ``<id>-2`` with one warning.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import itertools
import json
import os
import sys
import threading
from typing import Any, Callable, Iterator, Sequence

from .. import config
from ..format.schema import RunInfo, print_lines
from ..format.writer import (EncodedLines, RunWriter, claim_run_directory, clean_run_id, default_run_id,
                             encode_lines, new_run_info, run_directory)
from . import sources as _sources
from .flight import FlightRecorder, GraphCall

#: Host memory that may be queued for writing before the model thread waits.
MAX_BYTES_IN_FLIGHT = 1 << 30
#: Records the writer thread finishes before one write to the manifest.
WRITE_BATCH = 512
#: Called before a flush waits for the writer: what holds queued records back (the
#: device rings of ``device_ring``, which register themselves) sends them on.
BEFORE_FLUSH: list[Callable[[], None]] = []

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


def _with_sources(run_fd: int, label: str, origin: dict, graphs: dict) -> dict:
    """``origin`` with the hashes of the copies of its generated source that the run
    directory keeps for replay (:mod:`.sources`): copied once per graph; a subgraph
    shares its graph's. A copy that fails is warned about once and left out."""
    path = origin.get("file")
    if not path:
        return origin
    base = graphs.get(label.split("/", 1)[0])
    if base is not None and base.get("file") == path and _sources.SOURCES_KEY in base:
        return {**origin, _sources.SOURCES_KEY: base[_sources.SOURCES_KEY]}
    try:
        return {**origin, _sources.SOURCES_KEY: _sources.copy_sources(run_fd, label, path)}
    except Exception as e:  # never takes the model down: replay then says the copy is missing
        warn_once("source-copy", f"cannot keep a copy of {path} for replay: {e}")
        return origin


#: Run directories the Python runtime of this process claimed: requested -> (claimed, run id),
#: and each claimed directory's last seq, so that a later session in the same directory
#: (``enable(dump_dir=...)`` back to an earlier one) continues its numbering instead of
#: claiming a new one or overwriting files. Forgotten in a forked child.
_claims: dict[str, tuple[str, str]] = {}
_last_seq: dict[str, int] = {}
_claims_pid = os.getpid()


#: Exported (extern "C", default visibility) by every instrumented C++ wrapper: see
#: ``native/state.h``. A stable C signature, independent of the runtime's namespace.
CPP_WARNINGS_SYMBOL = "aoti_debug_runtime_warnings"
#: Exported by the C++ runtimes that record (``native/flight_hooks.h``): why the process ends,
#: for their flight recorder's last write.
CPP_EXIT_REASON_SYMBOL = "aoti_debug_runtime_exit_reason"
#: ... and writes what they queued: level stats waits for no CUDA stats result
#: (``native/device_stats.h``), so their last records may still be queued.
CPP_FLUSH_SYMBOL = "aoti_debug_runtime_flush"
_no_cpp_runtime: set[tuple[str, str]] = set()  # (symbol, loaded library) known not to export it
# symbol -> (load generation, the libraries that exported it then): see _load_generation
_cpp_runtime_paths: dict[str, tuple[tuple[int, int], list[str]]] = {}
# (symbol, path) -> its function in the runtime library (native_library.LIBRARY_FILE), whose
# handle is kept: nothing unloads that library (its glue and the Python runtime load it once)
_held_functions: dict[tuple[str, str], Any] = {}


def failures() -> list[tuple[str, str]]:
    """Every failure this process's aoti_debug runtimes saw, as ``(key, message)``.

    :data:`FAILURES` (the Python runtime's, every occurrence) followed by the C++
    runtime's (cpp_wrapper modules and AOTInductor models loaded in this process; keys
    prefixed ``cpp:``): bad environment values, run directories held by another run,
    unwritable directories, records that could not be written. The C++ runtime's are
    also in its run's ``run.json`` (``warnings``) and on stderr.
    """
    with _lock:
        out = list(FAILURES)
    out.extend((f"cpp:{key}", message) for key, message in _cpp_failures())
    return out


def _cpp_failures() -> list[tuple[str, str]]:
    """Ask every loaded instrumented C++ library for its warnings (:func:`_cpp_runtimes`).

    Libraries of one process share one state (the runtime's STB_GNU_UNIQUE object); its
    identity is the first line of the text.
    """
    import ctypes

    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for fn in _cpp_runtimes(CPP_WARNINGS_SYMBOL):
        fn.restype = ctypes.c_size_t
        fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        need = fn(None, 0)
        buf = ctypes.create_string_buffer(need + 4096)  # room for warnings given meanwhile
        n = fn(buf, len(buf))
        text = buf.raw[:min(n, len(buf))].decode("utf-8", "replace")
        identity, _, body = text.partition("\n")
        if identity in seen:
            continue
        seen.add(identity)
        for line in body.splitlines():
            try:
                key, message = json.loads(line)
                out.append((str(key), str(message)))
            except (ValueError, TypeError):
                continue
    return out


def _cpp_runtimes(symbol: str) -> Iterator[Any]:
    """``symbol`` (a ctypes function) of every loaded library that exports it (Linux:
    /proc/self/maps), each library held only while its function is in use.

    The libraries are found by looking, never loaded: ``dlopen(RTLD_NOLOAD)`` only hands
    back one that is already in the process. The list of libraries is read again only
    when one was loaded or unloaded since the last look (:func:`_load_generation`).
    """
    nolo = getattr(os, "RTLD_NOLOAD", None)
    if nolo is None:
        return
    generation = _load_generation()
    cached = _cpp_runtime_paths.get(symbol)
    if generation is not None and cached is not None and cached[0] == generation:
        paths = cached[1]  # nothing loaded or unloaded since: no /proc/self/maps (~1 ms)
    else:
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
                fields = [line.split(None, 5) for line in f if ".so" in line]
        except OSError:
            return
        found = {x[5].rstrip("\n") for x in fields if len(x) == 6 and x[5].startswith("/")}
        paths = [p for p in sorted(found) if (symbol, p) not in _no_cpp_runtime and not p.endswith(" (deleted)")]
    import _ctypes

    from ..codegen.native_library import LIBRARY_FILE

    exporting: list[str] = []
    for path in paths:
        if (symbol, path) in _no_cpp_runtime:
            continue
        fn = _held_functions.get((symbol, path))
        if fn is not None:  # no dlopen by name (~10 us with torch's libraries loaded)
            exporting.append(path)
            yield fn
            continue
        try:  # a handle and an address, no ctypes.CDLL (which makes a class per library: ~25 us)
            handle = _ctypes.dlopen(path, nolo | os.RTLD_LOCAL)
        except OSError:
            continue
        try:
            fn = _FUNCTION(_ctypes.dlsym(handle, symbol))
        except (OSError, AttributeError):
            _no_cpp_runtime.add((symbol, path))
            _dlclose_handle(handle)
            continue
        exporting.append(path)
        if os.path.basename(path) == LIBRARY_FILE:
            _held_functions[(symbol, path)] = fn  # and its handle, for good
            yield fn
            continue
        try:
            yield fn
        finally:
            _dlclose_handle(handle)
    if generation is not None:
        _cpp_runtime_paths[symbol] = (generation, exporting)


class _PhdrInfo(ctypes.Structure):
    """``struct dl_phdr_info`` (link.h), up to the load and unload counters."""

    _fields_ = [("addr", ctypes.c_void_p), ("name", ctypes.c_char_p), ("phdr", ctypes.c_void_p),
                ("phnum", ctypes.c_uint16), ("adds", ctypes.c_ulonglong), ("subs", ctypes.c_ulonglong)]


_PHDR_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_PhdrInfo), ctypes.c_size_t, ctypes.c_void_p)


def _load_generation() -> tuple[int, int] | None:
    """How many libraries this process has loaded and unloaded so far (glibc's
    ``dl_iterate_phdr`` counters), or None where they cannot be read. A C++ runtime can
    only appear or go when one of them moves."""
    global _dl_iterate_phdr
    if _dl_iterate_phdr is None:
        try:
            fn = ctypes.CDLL(None).dl_iterate_phdr
        except (OSError, AttributeError):
            _dl_iterate_phdr = False
            return None
        fn.restype = ctypes.c_int
        fn.argtypes = [_PHDR_CALLBACK, ctypes.c_void_p]
        _dl_iterate_phdr = fn
    if not _dl_iterate_phdr:
        return None
    with _generation_lock:  # one reader of _seen at a time
        _seen.clear()
        _dl_iterate_phdr(_first_phdr, None)
        return _seen[0] if _seen else None


def _first_phdr_entry(info: Any, size: int, _data: Any) -> int:
    if size >= _PhdrInfo.subs.offset + ctypes.sizeof(ctypes.c_ulonglong):
        _seen.append((info.contents.adds, info.contents.subs))
    return 1  # the counters are the same in every entry: stop at the first


_dl_iterate_phdr: Any = None  # the libc function once looked up, False where there is none
_first_phdr = _PHDR_CALLBACK(_first_phdr_entry)  # made once: a new C callback costs microseconds
_seen: list[tuple[int, int]] = []
_generation_lock = threading.Lock()


#: The type of a C++ runtime's function as :func:`_cpp_runtimes` hands it out (callers set
#: its ``restype`` and ``argtypes``); a CFUNCTYPE releases the GIL for the call.
_FUNCTION = ctypes.CFUNCTYPE(None)


def _dlclose_handle(handle: int) -> None:
    try:
        import _ctypes

        _ctypes.dlclose(handle)
    except Exception:
        pass


def _joins(event: Any) -> bool:
    """Whether a job waiting on ``event`` joins a batch written once its first job's values
    are there: not when they are not on their way yet (a device ring not shipped: the
    batch would wait for a flush), nor when they are on their way and not arrived (a
    CUDA-graph replay's copy, a segment's: the batch would hold the records that are
    finished back until the device reached the last of it, and a step's end would find
    a dozen replays to write). A job that does not say (a CPU record, a host copy's
    event) joins."""
    ready = getattr(event, "ready", None)
    if ready is not None and not ready():
        return False
    arrived = getattr(event, "arrived", None)
    return arrived is None or arrived()


class Job:
    """One manifest line to write (a planned ring side: its lines), with what must happen
    before it (wait, save)."""

    __slots__ = ("record", "event", "finish", "nbytes", "call")

    def __init__(self, record: dict | None, event: Any = None, finish: Callable[[dict], None] | None = None,
                 nbytes: int = 0):
        self.record = record
        """None for the records of planned ring sides (one side, or a run of them), made by
        the writer (``Session._finished``)."""
        self.event = event
        self.finish = finish
        self.nbytes = nbytes
        self.call: GraphCall | None = None
        """The graph call it belongs to, with a flight recorder (set by :meth:`Session.submit`)."""


class Session:
    """Counters and the writer of one process run (one per pid)."""

    def __init__(self, run_settings: config.RunSettings):
        self.settings = run_settings
        self.pid = os.getpid()
        self.seq = 0
        self.launch = 0
        self._count_lock = threading.Lock()
        self._open_lock = threading.Lock()
        self.kernel_calls: dict[tuple[str, str], list[int]] = {}
        """``(graph, kernel)`` -> a cell holding the number of calls so far: an express
        launch keeps its cell (:meth:`calls_of`) and counts in it (:meth:`next_launch_in`)."""
        self.graph_labels: dict[Any, str] = {}
        #: (graph label, site number) whose provenance this run wrote into sites.jsonl.
        self.sites_written: set[tuple[str, int]] = set()
        self.bytes_written = 0
        #: (dtype, shape, checksum, min, max, mean) -> tensor file already holding it.
        self.content_files: dict[tuple, str] = {}
        self._writer: RunWriter | None = None
        self._writer_failed = False
        self._queue: collections.deque[Job] = collections.deque()
        self._queue_lock = threading.RLock()
        """The lock of ``_cond``, taken alone where nothing is notified (a Condition's
        ``with`` is Python code)."""
        self._cond = threading.Condition(self._queue_lock)
        self._open_run: Job | None = None
        """The run of planned sides (``ring_records.SideRun``) that later sides of its
        arrival may join while it is the queue's last job (:meth:`submit_planned`); None
        once the writer took it (sealed)."""
        self._in_flight = 0
        self._thread: threading.Thread | None = None
        self._closed = False
        raw_id = run_settings.run_id or ""
        self.run_id = clean_run_id(raw_id) or default_run_id(run_settings.world_size)
        #: The directory asked for; :meth:`writer` may claim ``<id>-2`` instead.
        self.path = run_directory(run_settings.dump_dir, self.run_id, run_settings.rank, run_settings.world_size)
        self.info: RunInfo | None = None
        self._info_lock = threading.Lock()
        #: The flight recorder (``AOTI_DEBUG_RING`` / ``AOTI_DEBUG_TRIGGER``), or None.
        self.flight: FlightRecorder | None = None
        if run_settings.ring is not None or run_settings.trigger is not None:
            self.flight = FlightRecorder(run_settings.ring, run_settings.trigger, warn_once)
            self.flight.on_fatal = self.write_flight
            self.flight.publish = self._publish_flight

    # -- counters (several Python threads may run compiled graphs at once) -----------
    def next_seq(self, n: int = 1) -> int:
        """The first of ``n`` consecutive record numbers (1, 2, ...; unique in the run
        directory): one launch side takes its records' numbers in one step."""
        with self._count_lock:
            first = self.seq + 1
            self.seq += n
            return first

    def next_launch(self, graph: str = "", kernel: str = "") -> tuple[int, int]:
        """The next launch's number (1, 2, ...) and the call number of ``kernel`` in
        ``graph`` (0, 1, ...), taken together so concurrent threads never share either."""
        return self.next_launch_in(self.calls_of(graph, kernel))

    def calls_of(self, graph: str, kernel: str) -> list[int]:
        """The cell counting the calls of ``kernel`` in ``graph`` (for :meth:`next_launch_in`)."""
        with self._count_lock:
            cell = self.kernel_calls.get((graph, kernel))
            if cell is None:
                cell = self.kernel_calls[(graph, kernel)] = [0]
            return cell

    def next_launch_in(self, cell: list[int]) -> tuple[int, int]:
        """The next launch's number and the next call number of the kernel whose cell
        :meth:`calls_of` gave (an express launch keeps its cell), taken together."""
        with self._count_lock:
            self.launch = launch = self.launch + 1
            call = cell[0]
            cell[0] = call + 1
            return launch, call

    def next_block(self, records: int, cells: Sequence[tuple[list[int], int]]) -> tuple[int, int, list[int]]:
        """The numbers of a block of launches taken together (a CUDA graph's replay):
        the first of ``records`` record numbers, the first of as many launch numbers as
        the ``cells`` count launches, and the first call number of each cell's kernel
        (``(cell, launches of its kernel)``, a cell from :meth:`calls_of`), as
        :meth:`next_seq` and :meth:`next_launch_in` would give them one by one."""
        with self._count_lock:
            seq = self.seq + 1
            self.seq += records
            launch = self.launch + 1
            firsts = []
            for cell, n in cells:
                firsts.append(cell[0])
                cell[0] += n
                self.launch += n
            return seq, launch, firsts

    # -- run directory ---------------------------------------------------------------
    def writer(self, level: str, device: str = "") -> RunWriter | None:
        """The run's writer, created on first use; None once creating it failed."""
        if self._writer is not None or self._writer_failed:
            return self._writer
        with self._open_lock:
            if self._writer is None and not self._writer_failed:
                self._open(level, device)
        return self._writer

    def _open(self, level: str, device: str) -> None:
        raw_id = self.settings.run_id or ""
        if raw_id and clean_run_id(raw_id) != raw_id:
            instead = f"run id {self.run_id!r}" if clean_run_id(raw_id) else f"the default run id {self.run_id!r}"
            warn_once(f"run-id:{raw_id}", f"{config.ENV_RUN_ID}={raw_id!r} is not a plain name; {instead} is used "
                      f"(a run never leaves {config.ENV_DIR})")
        st = self.settings
        try:
            self.path, self.run_id, resumed = _claim(st.dump_dir, self.run_id, st.rank, st.world_size)
            if resumed:
                with self._count_lock:
                    self.seq = max(self.seq, _last_seq.get(self.path, 0))
            self.info = new_run_info(self.run_id, level, st.rank, st.world_size, device=device,
                                     uid=os.getuid() if hasattr(os, "getuid") else None)
            if self.flight is not None:
                self.info.flight = self.flight.summary()
            self._writer = RunWriter(self.path, self.info)
        except Exception as e:  # unwritable directory, full disk, bad path
            self._writer_failed = True
            warn_once("dump-dir", f"cannot create dump directory {self.path!r}: {e}")

    def register_graph(self, handle: Any, label: str, origin: dict) -> None:
        self.graph_labels[handle] = label
        w = self._writer
        if w is not None and self.info is not None:
            self.info.graphs[label] = _with_sources(w.dir_fd, label, origin, self.info.graphs)
            self._write_info()

    def _write_info(self) -> None:
        w = self._writer
        if w is None:
            return
        try:
            with self._info_lock:  # the flight recorder rewrites it from the writer thread too
                w.write_info()
        except Exception as e:
            warn_once("run-json", f"cannot update run.json: {e}")

    def _publish_flight(self) -> None:
        if self.info is not None and self.flight is not None:
            self.info.flight = self.flight.summary()
            self._write_info()

    def write_flight(self, reason: str) -> None:
        """Write the flight recorder's ring now (a fatal signal, the exit): the records
        already queued are finished first (at most 10 s), then the ring is appended."""
        fl = self.flight
        if fl is None or self.pid != os.getpid():
            return
        self.flush(timeout=10)
        fl.write(self._writer, reason)

    def write_site(self, graph: str, site: int, kernel: str, provenance: str) -> None:
        """A launch site's provenance, once per (graph, site) in this run."""
        key = (graph, site)
        if site < 0 or key in self.sites_written:  # every launch side asks: no lock once written
            return
        with self._count_lock:
            if key in self.sites_written:
                return
            self.sites_written.add(key)
        w = self._writer
        if w is None:
            return
        try:
            w.append_site(graph, site, kernel, provenance)
        except Exception as e:
            warn_once("sites", f"cannot append to the sites file in {self.path!r}: {e}")

    # -- background writer -----------------------------------------------------------
    def submit(self, job: Job) -> None:
        fl = self.flight
        if fl is not None:
            job.call = fl.current()
            if job.event is None and not job.nbytes:
                # Values already on the host (CPU): finish the record here while the launch's
                # values are live, so that a trigger can save them. Only with the writer idle,
                # which keeps the manifest in order and the ring's file bookkeeping in one thread.
                with self._cond:
                    if not self._queue:
                        self._process(job, inline=True)
                        return
        with self._cond:
            while self._in_flight and self._in_flight + job.nbytes > MAX_BYTES_IN_FLIGHT:
                self._cond.wait()
            self._in_flight += job.nbytes
            self._queue.append(job)
            self._cond.notify_all()
        if self._thread is None:
            self._start()

    def submit_all(self, jobs: list[Job]) -> None:
        """Queue the records of one launch side. When all are complete (nothing to wait
        for or save: CPU stats) and nothing is queued before them, they are written at
        once, in this thread, in one write: no handoff to the writer thread."""
        # (With a flight recorder each record goes through its ring: Session.submit.)
        if self.flight is not None:
            for job in jobs:
                self.submit(job)
            return
        complete = self._writer is not None and all(j.event is None and j.finish is None for j in jobs)
        nbytes = sum([j.nbytes for j in jobs])
        with self._cond:
            if complete and not self._queue:
                self._append([j.record for j in jobs])
                return
            while self._in_flight and self._in_flight + nbytes > MAX_BYTES_IN_FLIGHT:
                self._cond.wait()
            self._in_flight += nbytes
            self._queue.extend(jobs)
            self._cond.notify_all()
        if self._thread is None:
            self._start()

    def submit_side(self, job: Job) -> None:
        """Queue a planned ring side's one job (``ring_records.RingSide``; no flight
        recorder, nothing to save): :meth:`submit_all` for one job that always waits.
        Sides that can be part of a run take :meth:`submit_planned`."""
        with self._cond:
            self._queue.append(job)
            self._cond.notify_all()
        if self._thread is None:
            self._start()

    def submit_planned(self, arrival: Any, lines: Any, plan: Any, launch: int, call: int, row: int,
                       taken: tuple[int, ...] = ()) -> None:
        """Queue a planned ring side with no host records whose taken rows are rows of
        its own ``arrival`` (``ring_records.SideRun.add``'s arguments, its records'
        numbers taken here, as :meth:`next_seq` takes them): appended to the run
        of such sides that is the queue's last job, when it is of ``arrival`` and
        ``lines`` and the writer has not taken it, else to a new run (``lines.run``),
        queued. The writer then finishes a run of sides in one step."""
        with self._count_lock:
            seq = self.seq + 1
            self.seq += len(plan.records)
        self._queue_planned(arrival, lines, plan, seq, launch, call, row, taken)

    def _queue_planned(self, arrival: Any, lines: Any, plan: Any, seq: int, launch: int, call: int, row: int,
                       taken: tuple[int, ...] = ()) -> None:
        """:meth:`submit_planned` of a side numbered already (from ``seq``): the express
        hooks' C function (``ring_express.h``) where the queue's last job is not a run it
        can append to."""
        with self._queue_lock:
            job = self._open_run
            queue = self._queue
            if job is None or job.event is not arrival or job.finish.lines is not lines or \
                    not queue or queue[-1] is not job:
                job = self._open_run = Job(None, arrival, lines.run(arrival))
                queue.append(job)
                self._cond.notify_all()
            job.finish.add(plan, seq, launch, call, row, taken)
        if self._thread is None:
            self._start()

    def write_lines(self, data: bytes | memoryview) -> None:
        """Manifest lines encoded already, each ending in a newline (a CPU launch side's,
        from the runtime library: ``cpu_records``): written at once, in this thread, when
        nothing is queued before them, else queued behind what is."""
        with self._cond:
            if not self._queue:
                w = self._writer
                if w is not None:
                    try:
                        w.append_text(data)
                    except Exception as e:
                        warn_once("manifest", f"cannot append to manifest in {self.path!r}: {e}")
                return
        self.submit(Job(EncodedLines(bytes(data[:-1]).decode("ascii"))))

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
                # Without a flight recorder, the records that are queued now are finished
                # one by one and written in one write (a device ring ships hundreds at once).
                batch = [self._queue[0]] if self.flight is not None else \
                    list(itertools.islice(self._queue, WRITE_BATCH))
                for n, job in enumerate(batch):
                    if n and not _joins(job.event):
                        del batch[n:]
                        break
                run = self._open_run
                if run is not None and (batch[-1] is run or self._queue[-1] is not run):
                    # Sealed: the writer encodes the run it took, or a later job was queued
                    # behind it; the next planned side starts a new run.
                    self._open_run = None
            try:
                self._write(batch)
            except Exception as e:
                # A bug of ours in finishing some record: the jobs of the batch are written
                # one by one and those that fail again are dropped; the writer lives on (a
                # flush would wait for it for ever, and every later record with it).
                warn_once(f"writer-{type(e).__name__}", f"the writer thread could not write a batch of "
                          f"{len(batch)} queued jobs ({type(e).__name__}: {e}); writing them one by one, "
                          f"dropping those that fail")
                self._one_by_one(batch)
            with self._cond:
                for job in batch:
                    self._queue.popleft()
                    self._in_flight -= job.nbytes
                self._cond.notify_all()

    def _write(self, batch: list[Job]) -> None:
        """Finish the records of ``batch`` and append them to the manifest, in order."""
        if self.flight is None:
            text = self._encode(batch)
            if text:
                self._append_text(text)
            return
        done: list[dict] = []
        for job in batch:
            record = self._finish(job)
            if record is not None:
                done.append(record)
        if done:
            self._append(done)

    def _one_by_one(self, batch: list[Job]) -> None:
        """Write each job of ``batch`` alone, in order; a job that cannot be written is
        dropped. (With a flight recorder a batch is one job, which its ring may have
        taken already: it is dropped, not finished twice.)"""
        for job in batch:
            try:
                if self.flight is not None:
                    raise RuntimeError("its record could not be finished")
                self._write([job])
            except Exception as e:
                warn_once(f"writer-job-{type(e).__name__}", f"a queued job could not be written and is dropped "
                          f"({type(e).__name__}: {e})")

    def _process(self, job: Job, inline: bool = False) -> None:
        record = self._finish(job, inline)
        if record is not None:
            self._append([record])

    def _finish(self, job: Job, inline: bool = False) -> dict | None:
        """The record of ``job`` once it is complete, or None (the flight recorder keeps it)."""
        record = job.record
        try:
            if job.event is not None:
                job.event.synchronize()
            if job.finish is not None:
                job.finish(record)
        except Exception as e:
            record["error"] = f"{type(e).__name__}: {e}"
            warn_once(f"record-{type(e).__name__}", f"could not record {record.get('kernel')}/{record.get('arg')}: {e}")
        fl = self.flight
        if fl is not None:
            try:
                if fl.take(record, job.call, self._writer, inline, self._forget_file):
                    return None
            except Exception as e:
                record.pop("_flight_copy", None)
                warn_once(f"flight-{type(e).__name__}", f"flight recorder failed, writing the record: {e}")
        return record

    def _encode(self, batch: list[Job]) -> bytes:
        """The manifest lines of ``batch`` (no flight recorder), in its order: runs of
        device-ring records the runtime library writes (``ring_records``: one call without
        the GIL), the others finished and encoded here."""
        parts: list[bytes] = []
        records: list[dict] = []
        group: list[Job] = []
        lines: Any = None

        def native() -> None:
            found = lines.encode(group)
            if found is None:  # the library failed (it warned): the dict path
                for job in group:
                    records.extend(self._finished(job))
            else:
                parts.append(found[0])
                if found[1]:  # planned sides at level print: their lines, where the dict path prints them
                    emit_text(found[1].decode("utf-8", "replace"))
            group.clear()

        for job in batch:
            writer = getattr(job.finish, "lines", None)
            if writer is not None and writer.takes(job):
                if records:
                    parts.append(encode_lines(records))
                    records.clear()
                if group and writer is not lines:
                    native()
                lines = writer
                group.append(job)
                continue
            if group:
                native()
            records.extend(self._finished(job))
        if group:
            native()
        if records:
            parts.append(encode_lines(records))
        return b"".join(parts)

    def _finished(self, job: Job) -> list[dict]:
        """The complete records of ``job`` (no flight recorder): its one record, or those
        of planned ring sides (``ring_records.RingSide`` or ``SideRun``: ``record`` None),
        each finished as one record of the dict path; a planned side at level print is
        printed here, as its records are finished."""
        fill = job.finish
        if job.record is not None or not fill.prints:
            jobs = [job] if job.record is not None else fill.jobs()
            return [r for r in map(self._finish, jobs) if r is not None]
        out: list[dict] = []
        for side in fill.sides() if hasattr(fill, "sides") else [fill]:  # (a SideRun: its sides)
            records = [r for r in map(self._finish, side.jobs()) if r is not None]
            if side.prints and records:
                emit_text(print_lines(records) + "\n")
            out.extend(records)
        return out

    def _append_text(self, text: bytes) -> None:
        w = self._writer
        if w is None:
            return
        try:
            w.append_text(text)
        except Exception as e:
            warn_once("manifest", f"cannot append to manifest in {self.path!r}: {e}")

    def _append(self, records: list[dict]) -> None:
        w = self._writer
        if w is None:
            return
        try:
            w.append_all(records)
        except Exception as e:
            warn_once("manifest", f"cannot append to manifest in {self.path!r}: {e}")

    def pending(self) -> bool:
        """Records are queued for the writer (a side printed now would jump ahead of them)."""
        return bool(self._queue)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything queued so far is on disk."""
        for ship in BEFORE_FLUSH:  # records waiting in device rings: send them on
            try:
                ship()
            except Exception as e:
                warn_once(f"before-flush-{type(e).__name__}", f"cannot read device stats back: {e}")
        with self._cond:
            self._cond.wait_for(lambda: not self._queue, timeout=timeout)

    def _forget_file(self, name: str) -> None:
        """A tensor file the flight recorder deleted: no later record may share it."""
        for key in [k for k, v in self.content_files.items() if v == name]:
            del self.content_files[key]

    def close(self, reason: str = "close") -> None:
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=60)
        fl = self.flight
        if fl is not None and self.pid == os.getpid():
            try:  # the writer thread is done: the files of calls dropped unwritten can go too
                fl.bury(self._writer, self._forget_file)
                fl.write(self._writer, reason)
            except Exception as e:
                warn_once("flight-exit", f"flight recorder: cannot write the ring: {e}")
            fl.uninstall_signal_handlers()
        if self._writer is not None:
            self._writer.close()
            if self.pid == _claims_pid:
                _last_seq[self.path] = max(_last_seq.get(self.path, 0), self.seq)


def _claim(root: str, run_id: str, rank: int, world_size: int) -> tuple[str, str, bool]:
    """The run directory for this process's Python runtime: ``(path, run id, resumed)``.

    A directory it claimed before is used again (``resumed``); anything else is claimed
    anew, with one warning when the requested one is held by someone else.
    """
    global _claims_pid
    if _claims_pid != os.getpid():
        _claims.clear()
        _last_seq.clear()
        _claims_pid = os.getpid()
    wanted = run_directory(root, run_id, rank, world_size)
    known = _claims.get(wanted)
    if known is not None:
        return known[0], known[1], True
    path, rid, holder = claim_run_directory(root, run_id, rank, world_size, "python")
    if holder is not None:
        warn_once(f"claim:{wanted}", f"run directory {wanted!r} is held by {holder}; this Python runtime writes "
                  f"to {path!r} instead")
    _claims[wanted] = (path, rid)
    return path, rid, False


def emit_text(text: str) -> None:
    """aoti_debug's stderr lines (each ends in a newline), flushed: the hooks' (names,
    print) and level print's lines that the writer thread prints."""
    sys.stderr.write(text)
    sys.stderr.flush()


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
            try:  # a bad value warns once and falls back alone; the others keep theirs
                settings = config.run_settings_from_env(warn=warn_once)
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
    _flush_cpp_runtimes()


def _flush_cpp_runtimes() -> None:
    """The C++ runtimes of this process (cpp_wrapper, AOTInductor) write what they queued."""
    try:
        for fn in _cpp_runtimes(CPP_FLUSH_SYMBOL):
            fn()  # void(void): _FUNCTION's own restype and argtypes
    except Exception:
        pass


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
    reason = _exit_reason()
    if reason != "exit":
        _tell_cpp_runtimes(reason)
    # The C++ runtimes queue records only for CUDA tensors (level stats): written here while
    # CUDA is still up (their own exit hooks run after the interpreter's), by processes that used it.
    torch = sys.modules.get("torch")
    try:
        used_cuda = torch is not None and torch.cuda.is_initialized()
    except Exception:
        used_cuda = False
    if used_cuda:
        _flush_cpp_runtimes()
    s = _session
    if s is not None and s.pid == os.getpid():
        try:
            s.close(reason)
        except Exception:
            pass


def _tell_cpp_runtimes(reason: str) -> None:
    """The C++ runtimes of this process (cpp_wrapper, AOTInductor) write their flight
    recorder's ring when the process exits, after this: tell them why it ends."""
    import ctypes

    try:
        for fn in _cpp_runtimes(CPP_EXIT_REASON_SYMBOL):
            fn.restype = None
            fn.argtypes = [ctypes.c_char_p]
            fn(reason.encode("utf-8", "replace"))
    except Exception:
        pass


def _exit_reason() -> str:
    """``exit``, or ``exception: <type>: <message>`` when an uncaught exception ends the
    process (a CUDA error raised from the model's code): the flight recorder's last write."""
    exc = getattr(sys, "last_value", None)
    if exc is None:
        return "exit"
    first = (str(exc).splitlines() or [""])[0][:200]
    return f"exception: {type(exc).__name__}: {first}"
