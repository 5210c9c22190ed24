"""Writing a run: its directory, ``run.json`` and the append-only manifest."""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import stat
import sys
import threading
import time
from typing import BinaryIO

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

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
#: A directory below the dump root: opened only where it is one, never through a link.
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC
#: A file this run creates: never one that was there before, never through a link.
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
#: A file this run appends to (the manifest, ``sites.jsonl``): never through a link.
_APPEND_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | _NOFOLLOW | _CLOEXEC
#: Mode of the directories the runtimes create below the dump root (the C++ runtime's too).
DIR_MODE = 0o755
#: Why a run directory is not used, the C++ runtime's words too (run_dir.h ``refusal_at``).
LINK_REFUSED = "a symbolic link (links below AOTI_DEBUG_DIR are never followed)"
NOT_A_DIRECTORY = "a file that is not a directory"


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
        fd = os.open(os.path.join(path, OWNER_FILE), os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
        with open(fd, encoding="utf-8", errors="replace") as f:
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


def write_atomic_at(dir_fd: int, name: str, data: bytes) -> None:
    """The file ``name`` of the directory ``dir_fd`` replaced by ``data`` atomically: a new
    temporary file (``O_EXCL|O_NOFOLLOW`` at the descriptor) renamed over it, so a link
    at ``name`` is replaced, never written through."""
    tmp = f".{name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, NEW_FILE_FLAGS, 0o644, dir_fd=dir_fd)
    except FileExistsError:  # left by a write that was cut short
        os.unlink(tmp, dir_fd=dir_fd)
        fd = os.open(tmp, NEW_FILE_FLAGS, 0o644, dir_fd=dir_fd)
    with open(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


class RefusedDirectory(OSError):
    """A directory below the dump root that a runtime does not write through: a link,
    not a directory, another user's, or one that changed while it was opened."""


def refusal_at(parent_fd: int, name: str) -> str | None:
    """Why the entry ``name`` of the directory ``parent_fd`` is no directory of this user's
    (None: it is one, or it does not exist). Links are looked at, never followed."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return LINK_REFUSED
    if not stat.S_ISDIR(st.st_mode):
        return NOT_A_DIRECTORY
    if st.st_uid != os.geteuid():
        return f"a directory of uid {st.st_uid} (not this user's)"
    return None


def open_own_dir(parent_fd: int, name: str) -> int:
    """A descriptor of the directory ``name`` in ``parent_fd``, opened with
    ``O_DIRECTORY|O_NOFOLLOW`` and checked to be the entry itself (device and inode as
    ``lstat`` sees them) and this user's.

    Raises:
        RefusedDirectory: a link, not a directory, another user's, or swapped meanwhile.
        OSError: it could not be opened otherwise (missing, no permission).
    """
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as e:
        why = refusal_at(parent_fd, name) if e.errno in (errno.ELOOP, errno.ENOTDIR) else None
        if why is not None:
            raise RefusedDirectory(e.errno, why) from None
        raise
    try:
        st = os.fstat(fd)
        try:
            entry = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            entry = None
        if entry is None or (entry.st_dev, entry.st_ino) != (st.st_dev, st.st_ino):
            raise RefusedDirectory(errno.ESTALE, "a directory that was replaced while it was opened")
        if st.st_uid != os.geteuid():
            raise RefusedDirectory(errno.EPERM, f"a directory of uid {st.st_uid} (not this user's)")
    except BaseException:
        os.close(fd)
        raise
    return fd


class _Held(Exception):
    """A candidate run directory that is not this claimant's; ``args[0]`` says why."""


#: Run directories this process claimed: path -> (dump root, names below it, device and
#: inode of the directory, of its ``tensors/``). A runtime that comes back to its run (a
#: ``RunWriter`` of the run just claimed, or of a resumed one) opens it again without
#: following a link and checks that it is the same directory: never whatever the path
#: names by then.
_claimed: dict[str, tuple[str, tuple[str, ...], tuple[tuple[int, int], tuple[int, int]]]] = {}
_claimed_pid = 0
_claimed_lock = threading.Lock()


def _own_claims() -> dict:
    """:data:`_claimed` for this process (a forked child has none). Caller holds :data:`_claimed_lock`."""
    global _claimed_pid
    if _claimed_pid != os.getpid():
        _claimed.clear()
        _claimed_pid = os.getpid()
    return _claimed


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _reopen_claimed(path: str, root: str, names: tuple[str, ...], ids: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """``(directory, tensors/)`` descriptors of the run directory this process claimed at ``path``."""
    fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    try:
        for name in names:
            parent, fd = fd, -1
            try:
                fd = open_own_dir(parent, name)
            finally:
                os.close(parent)
        tensors = open_own_dir(fd, TENSOR_DIR)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    if (_identity(fd), _identity(tensors)) != ids:
        os.close(fd)
        os.close(tensors)
        raise RefusedDirectory(errno.ESTALE, f"{path} is no longer the directory this process claimed")
    return fd, tensors


def _claim_at(root_fd: int, path: str, rid: str, rank: int, world_size: int, runtime: str) -> tuple[int, int]:
    """Create the run directory ``rid`` (``rid/rank<N>``) below ``root_fd``, new, and claim
    it; ``(its descriptor, its tensors/ descriptor)``.

    Raises:
        _Held: it exists already, or is no directory of this user's.
        OSError: it cannot be created (no permission, full disk).
    """
    parent, leaf = root_fd, rid
    try:
        if world_size > 1:
            # <rid>/ is shared by the ranks of one job: it may exist, as a directory of ours.
            try:
                os.mkdir(rid, DIR_MODE, dir_fd=root_fd)
            except FileExistsError:
                pass
            try:
                parent = open_own_dir(root_fd, rid)
            except RefusedDirectory as e:
                raise _Held(e.strerror) from None
            leaf = f"rank{rank}"
        try:
            os.mkdir(leaf, DIR_MODE, dir_fd=parent)  # new, made here: nobody else's files are in it
        except FileExistsError:
            raise _Held(refusal_at(parent, leaf) or describe_owner(path)) from None
        try:
            fd = open_own_dir(parent, leaf)
        except RefusedDirectory as e:
            raise _Held(e.strerror) from None
        except FileNotFoundError:
            raise _Held("a directory that was removed while it was opened") from None
    finally:
        if parent != root_fd:
            os.close(parent)
    try:
        try:
            owner = os.open(OWNER_FILE, NEW_FILE_FLAGS, 0o644, dir_fd=fd)
        except FileExistsError:
            raise _Held(describe_owner(path)) from None
        try:
            os.write(owner, owner_text(runtime).encode())
        finally:
            os.close(owner)
        try:
            os.mkdir(TENSOR_DIR, DIR_MODE, dir_fd=fd)
        except FileExistsError:  # only a race can have made one: it is looked at, not followed
            pass
        try:
            tensors = open_own_dir(fd, TENSOR_DIR)
        except RefusedDirectory as e:
            raise _Held(f"a directory whose {TENSOR_DIR}/ is {e.strerror}") from None
    except BaseException:
        os.close(fd)
        raise
    return fd, tensors


def claim_run_directory(root: str, run_id: str, rank: int, world_size: int,
                        runtime: str) -> tuple[str, str, str | None]:
    """Create and claim a run directory for one runtime of this process.

    ``<root>/<run_id>[/rank<N>]`` is claimed by creating it (``mkdir``: it must be new)
    and then :data:`OWNER_FILE` in it with ``O_EXCL`` (pid, runtime, host). The dump
    root is the user's: links in it are followed. Below it nothing is: the run directory
    and its ``tensors/`` are opened with ``O_DIRECTORY|O_NOFOLLOW`` and checked to be the
    entries themselves and this user's, and every file is created relative to their
    descriptors (:class:`RunWriter`). When the directory exists already (another process,
    the other runtime of this one, an older aoti_debug, or a link or another user's
    directory), ``<run_id>-2``, ``-3``, ... are tried: two claimants never share a
    directory, and a run is never written through a link.

    Returns:
        ``(path, run_id, holder)``: the claimed directory, its run id, and who or what
        held the first one tried (None when it was free).

    Raises:
        OSError: no directory could be created or claimed.
    """
    holder: str | None = None
    os.makedirs(root, exist_ok=True)
    root_fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    try:
        for n in range(1, MAX_CLAIMS + 1):
            rid = run_id if n == 1 else f"{run_id}-{n}"
            path = run_directory(root, rid, rank, world_size)
            try:
                fd, tensors = _claim_at(root_fd, path, rid, rank, world_size, runtime)
            except _Held as held:
                if holder is None:
                    holder = held.args[0]
                continue
            try:
                ids = (_identity(fd), _identity(tensors))
            finally:
                os.close(fd)
                os.close(tensors)
            names = (rid, f"rank{rank}") if world_size > 1 else (rid,)
            with _claimed_lock:
                _own_claims()[path] = (root, names, ids)
            return path, rid, holder
    finally:
        os.close(root_fd)
    raise OSError(errno.EEXIST, f"{run_directory(root, run_id, rank, world_size)} and {MAX_CLAIMS - 1} "
                  f"numbered siblings are all held by other runs")


def _open_unclaimed(path: str) -> tuple[int, int]:
    """``(directory, tensors/)`` descriptors of a run directory that a caller names itself
    (a tool, a benchmark): made where missing; neither may be a link or another user's."""
    path = os.path.normpath(path)
    head, name = os.path.split(path)
    os.makedirs(path, mode=DIR_MODE, exist_ok=True)
    parent = os.open(head or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    try:
        fd = open_own_dir(parent, name)
    finally:
        os.close(parent)
    try:
        try:
            os.mkdir(TENSOR_DIR, DIR_MODE, dir_fd=fd)
        except FileExistsError:
            pass
        return fd, open_own_dir(fd, TENSOR_DIR)
    except BaseException:
        os.close(fd)
        raise


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
    """Owns one run directory: keeps ``run.json`` current, appends records, creates files.

    Every file is made relative to the descriptors of the run directory and its
    ``tensors/``, opened without following a link (and, for a directory that
    :func:`claim_run_directory` claimed, checked to be the one it made), never by path:
    a link planted in the dump root or in the run directory is never written through.

    The manifest lines of one launch side are written with one ``write`` (no buffer in
    the process), so a run that is killed leaves a manifest that is valid up to its last
    complete line.
    """

    def __init__(self, path: str, info: RunInfo):
        self.path = path
        self.info = info
        with _claimed_lock:
            claimed = _own_claims().get(path)
        if claimed is not None:
            self._dir, self._tensors = _reopen_claimed(path, *claimed)
        else:
            self._dir, self._tensors = _open_unclaimed(path)
        self._manifest = -1
        try:
            self.write_info()
            # A raw descriptor: a file object's write and flush cost several times the
            # system call, and every launch side appends (the C++ runtime does the same).
            self._manifest = os.open(MANIFEST_FILE, _APPEND_FLAGS, 0o644, dir_fd=self._dir)
        except BaseException:
            self.close()
            raise

    def write_info(self) -> None:
        """``run.json``, rewritten atomically (:func:`write_atomic_at`)."""
        write_atomic_at(self._dir, RUN_FILE, json.dumps(self.info.to_dict(), indent=1, sort_keys=True).encode())

    def tensor_path(self, filename: str) -> str:
        """Where the tensor file ``filename`` lies, for messages (files are made with
        :meth:`open_new` or at :attr:`tensor_fd`)."""
        return os.path.join(self.path, TENSOR_DIR, filename)

    @property
    def dir_fd(self) -> int:
        """The descriptor of the run directory itself (-1 once closed)."""
        return self._dir

    @property
    def tensor_fd(self) -> int:
        """The descriptor of the run's ``tensors/`` (-1 once closed): tensor files are
        created relative to it (``O_CREAT|O_EXCL|O_NOFOLLOW``)."""
        return self._tensors

    def _at(self, relpath: str) -> tuple[int, str]:
        """The directory descriptor and name of ``relpath`` (``name`` or ``tensors/name``)."""
        head, _, name = relpath.rpartition("/")
        if head == TENSOR_DIR and name:
            return self._tensors, name
        if not head and name:
            return self._dir, name
        raise ValueError(f"{relpath!r} is no file of a run directory")

    def open_new(self, relpath: str) -> BinaryIO:
        """A new file of this run (``name`` or ``tensors/name``), opened for writing:
        created with ``O_EXCL|O_NOFOLLOW`` at the run's directory descriptor.

        Raises:
            FileExistsError: something (a file, a link) is there already.
        """
        fd, name = self._at(relpath)
        return open(os.open(name, NEW_FILE_FLAGS, 0o644, dir_fd=fd), "wb")

    def remove(self, relpath: str) -> None:
        """Delete this run's file ``relpath`` (``name`` or ``tensors/name``); quiet where it is gone."""
        fd, name = self._at(relpath)
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass

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
        fd = os.open(SITES_FILE, _APPEND_FLAGS, 0o644, dir_fd=self._dir)
        try:
            data = line.encode("utf-8")
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)

    def close(self) -> None:
        # A closed number may be reused: never write to it.
        fds = (self._manifest, self._tensors, self._dir)
        self._manifest = self._tensors = self._dir = -1
        for fd in fds:
            try:
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
