"""Writing a run: its directory, ``run.json`` and the append-only manifest."""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import sys
import time

from .provenance import SITES_FILE
from .schema import FORMAT_VERSION, MANIFEST_FILE, RUN_FILE, TENSOR_DIR, RunInfo

#: The lock file that says which runtime of which process owns a run directory.
OWNER_FILE = ".owner"
#: How many ``<id>-<n>`` directories a claimant tries before it gives up.
MAX_CLAIMS = 1000
#: Longest run id kept (the C++ runtime's ``clean_run_id`` cuts at the same length).
RUN_ID_LIMIT = 100
#: As ``schema.sanitize``, with ``-`` also kept: default ids (``<start>-p<pid>``) and the
#: ``-<n>`` suffix of a second claimant use it, and it cannot form a path.
_RUN_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _process_start_stamp(pid: int) -> str:
    """Local wall-clock start time of a process, ``YYYYmmdd-HHMMSS`` (Linux /proc; else now).

    Derived from the process rather than "now" so that every runtime inside one
    process (the Python one and the C++ one in a cpp_wrapper module) and every rank
    started by one launcher can agree on the same run id without talking.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start_ticks = int(fields[19])
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime"))
        start = btime + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        start = time.time()
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(start))


def default_run_id(world_size: int = 1) -> str:
    """``<start>-p<pid>``; for a multi-rank job the launcher's (parent's) identity."""
    if world_size > 1:
        ppid = os.getppid()
        return f"{_process_start_stamp(ppid)}-p{ppid}"
    pid = os.getpid()
    return f"{_process_start_stamp(pid)}-p{pid}"


def clean_run_id(raw: str) -> str:
    """``AOTI_DEBUG_RUN_ID`` as one directory name; ``""`` when nothing usable is left.

    Runs of characters other than ``[A-Za-z0-9_.-]`` become ``_``, then ``._-`` are
    stripped from both ends (so no ``..``, ``/`` or absolute path survives) and the
    result is cut at :data:`RUN_ID_LIMIT`. The C++ runtime's ``clean_run_id`` gives the
    same result for the same bytes.
    """
    return _RUN_ID_UNSAFE.sub("_", raw).strip("._-")[:RUN_ID_LIMIT]


def run_directory(root: str, run_id: str, rank: int = 0, world_size: int = 1) -> str:
    path = os.path.join(root, run_id)
    if world_size > 1:
        path = os.path.join(path, f"rank{rank}")
    return path


def owner_text(runtime: str) -> str:
    """The content of :data:`OWNER_FILE`; the C++ runtime writes the same keys in this order."""
    return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "runtime": runtime}, sort_keys=True) + "\n"


def describe_owner(path: str) -> str:
    """Who holds the run directory ``path``, for a warning (the C++ runtime words it alike)."""
    try:
        with open(os.path.join(path, OWNER_FILE), encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return "an earlier run (no .owner file)"
    except OSError as e:
        return f"another runtime (its .owner file is unreadable: {e.strerror})"
    try:
        owner = json.loads(text)
        pid, runtime, host = int(owner["pid"]), str(owner["runtime"]), str(owner.get("host", ""))
    except (ValueError, KeyError, TypeError):
        return "another runtime (its .owner file is not written yet or damaged)"
    name = {"python": "Python", "cpp": "C++"}.get(runtime, runtime)
    if pid == os.getpid() and host == socket.gethostname():
        return f"the {name} runtime of this process"
    return f"the {name} runtime of pid {pid} on host {host or '?'}"


def claim_run_directory(root: str, run_id: str, rank: int, world_size: int,
                        runtime: str) -> tuple[str, str, str | None]:
    """Create and claim a run directory for one runtime of this process.

    ``<root>/<run_id>[/rank<N>]`` is claimed by creating :data:`OWNER_FILE` in it with
    ``O_EXCL`` (pid, runtime, host). When another process, or the other runtime of this
    one, holds it, ``<run_id>-2``, ``-3``, ... are tried: two claimants never share a
    directory. A directory that already holds a run but no owner file (written by an
    older aoti_debug) counts as held.

    Returns:
        ``(path, run_id, holder)``: the claimed directory, its run id, and who held the
        first one tried (None when it was free).

    Raises:
        OSError: no directory could be created or claimed.
    """
    holder: str | None = None
    for n in range(1, MAX_CLAIMS + 1):
        rid = run_id if n == 1 else f"{run_id}-{n}"
        path = run_directory(root, rid, rank, world_size)
        os.makedirs(path, exist_ok=True)
        owner = os.path.join(path, OWNER_FILE)
        legacy = not os.path.lexists(owner) and (
            os.path.exists(os.path.join(path, RUN_FILE)) or os.path.exists(os.path.join(path, MANIFEST_FILE)))
        if not legacy:
            try:
                fd = os.open(owner, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
            except FileExistsError:
                pass
            else:
                try:
                    os.write(fd, owner_text(runtime).encode())
                finally:
                    os.close(fd)
                return path, rid, holder
        if holder is None:
            holder = describe_owner(path)
    raise OSError(errno.EEXIST, f"{run_directory(root, run_id, rank, world_size)} and {MAX_CLAIMS - 1} "
                  f"numbered siblings are all held by other runs")


#: json.dumps(record, separators=(",", ":")) without building an encoder per record.
_encode = json.JSONEncoder(separators=(",", ":")).encode

#: The keys of a tensor record that repeat from one call of a launch to the next, in the
#: order records have them (``protocol.record``, then the tensor's metadata), around
#: ``kernel_call``: their JSON text is kept per distinct value (:func:`encode_record`).
_HEAD = ("graph", "wrapper", "kernel", "op")
_BODY = ("phase", "arg", "role", "index", "site", "expr", "volatile", "kind", "dtype", "shape", "stride", "device",
         "numel", "reused")
_KEPT = frozenset(("seq", "launch", "kernel_call", *_HEAD, *_BODY))
_ABSENT = object()
_texts: dict[tuple, tuple[str, str]] = {}
_MAX_TEXTS = 1 << 16


class EncodedDict(dict):
    """A dict that carries its own JSON text (``json``), which :func:`encode_record`
    writes as it is: the runtime library spells a CPU tensor's stats once, as the C++
    runtime's records do. Replace one rather than change it (a changed one would still
    be written as it was)."""

    __slots__ = ("json",)


class EncodedLines(str):
    """Manifest lines encoded already, without the last newline (a CPU launch side's, from
    the runtime library): :func:`encode_record` writes them as they are."""

    __slots__ = ()


_key_texts: dict[str, str] = {}


def _key_text(key: str) -> str:
    text = _key_texts.get(key)
    if text is None:
        text = _encode(key) + ":"
        if len(_key_texts) < 1024:
            _key_texts[key] = text
    return text


def encode_record(rec: dict) -> str:
    """One manifest line's JSON: ``json.dumps(rec, separators=(",", ":"))`` in meaning (the
    same keys and values), with the text of the parts that repeat at every call of a
    launch (kernel, arg, dtype, shape...) kept, so a record costs the encoding of its
    stats and the few keys that change (keys a record gets late, such as ``model_dtype``
    or ``error``, come after ``numel``). Anything else is encoded whole."""
    if type(rec) is EncodedLines:
        return rec
    try:
        seq, launch, call = rec["seq"], rec["launch"], rec["kernel_call"]
        key = (rec["graph"], rec["wrapper"], rec["kernel"], rec["op"], rec["phase"], rec["arg"], rec["role"],
               rec["index"], rec.get("site", _ABSENT), rec.get("expr", _ABSENT), rec.get("volatile", _ABSENT),
               rec["kind"], rec["dtype"], tuple(rec["shape"]), tuple(rec["stride"]), rec["device"], rec["numel"],
               rec.get("reused", _ABSENT))
        texts = _texts.get(key)
    except (KeyError, TypeError):  # not a tensor record, or an unhashable value
        return _encode(rec)
    if type(seq) is not int or type(launch) is not int or type(call) is not int:
        return _encode(rec)
    if texts is None:
        if len(_texts) >= _MAX_TEXTS:
            _texts.clear()
        texts = _texts[key] = (_encode({k: rec[k] for k in _HEAD})[1:-1],
                               _encode({k: rec[k] for k in _BODY if k in rec})[1:-1])
    tail = "".join([("," + _key_text(k) + (v.json if type(v) is EncodedDict else _encode(v)))
                    for k, v in rec.items() if k not in _KEPT])
    return f'{{"seq":{seq},"launch":{launch},{texts[0]},"kernel_call":{call},{texts[1]}{tail}}}'


def encode_lines(records: list[dict]) -> bytes:
    """Manifest lines of ``records``, each ending in a newline (the JSON encoder gives
    ASCII: non-ASCII characters are escaped)."""
    return "".join([encode_record(r) + "\n" for r in records]).encode("ascii")


class RunWriter:
    """Owns one run directory: creates it, keeps ``run.json`` current, appends records.

    The manifest lines of one launch side are written with one ``write`` (no buffer in
    the process), so a run that is killed leaves a manifest that is valid up to its last
    complete line.
    """

    def __init__(self, path: str, info: RunInfo):
        self.path = path
        self.info = info
        os.makedirs(os.path.join(path, TENSOR_DIR), exist_ok=True)
        self.write_info()
        # A raw descriptor: a file object's write and flush cost several times the
        # system call, and every launch side appends (the C++ runtime does the same).
        self._manifest = os.open(os.path.join(path, MANIFEST_FILE),
                                 os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o644)

    def write_info(self) -> None:
        tmp = os.path.join(self.path, f".{RUN_FILE}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.info.to_dict(), f, indent=1, sort_keys=True)
        os.replace(tmp, os.path.join(self.path, RUN_FILE))

    def tensor_path(self, filename: str) -> str:
        return os.path.join(self.path, TENSOR_DIR, filename)

    def fileno(self) -> int:
        """The manifest's descriptor (opened with O_APPEND: whole writes land whole)."""
        return self._manifest

    def append(self, record: dict) -> None:
        self.append_all([record])

    def append_all(self, records: list[dict]) -> None:
        """Several records (one launch side) in one ``write``."""
        self.append_text(encode_lines(records))

    def append_text(self, data: bytes | memoryview) -> None:
        """Manifest lines encoded already, in one ``write`` (more where the system writes
        part of it)."""
        while data:
            if self._manifest < 0:
                raise OSError(errno.EBADF, "the manifest is closed")
            n = os.write(self._manifest, data)  # retries EINTR itself (PEP 475)
            if n <= 0:
                raise OSError(errno.ENOSPC, "no room left for the manifest")
            data = data[n:]

    def append_site(self, graph: str, site: int, kernel: str, provenance: str) -> None:
        """One line of ``sites.jsonl``: a launch site's provenance (``format.provenance``),
        ``provenance`` being its JSON text as the emitter wrote it. One write, flushed."""
        head = json.dumps({"graph": graph, "site": site, "kernel": kernel}, separators=(",", ":"))
        line = head[:-1] + ',"provenance":' + (provenance or "{}") + "}\n"
        with open(os.path.join(self.path, SITES_FILE), "a", encoding="utf-8") as f:
            f.write(line)

    def close(self) -> None:
        try:
            fd, self._manifest = self._manifest, -1  # a closed number may be reused: never write to it
            if fd >= 0:
                os.close(fd)
        except OSError:
            pass


def new_run_info(run_id: str, level: str, rank: int, world_size: int, **extra) -> RunInfo:
    from .. import __version__

    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover - torch is a hard dependency
        torch_version = ""
    return RunInfo(
        format_version=FORMAT_VERSION,
        run_id=run_id,
        level=level,
        pid=os.getpid(),
        start_time=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        aoti_debug_version=__version__,
        torch_version=torch_version,
        argv=list(sys.argv),
        rank=rank,
        world_size=world_size,
        hostname=socket.gethostname(),
        **extra,
    )
