"""Opening a dump's files: regular files only, never blocking, every read bounded.

A dump is input from anyone: ``run.json`` may be a FIFO (``open`` would wait for a
writer forever), a device, a socket, a link to ``/dev/zero``, or a file of gigabytes.
Every reader of dump files opens them through :func:`open_regular`::

    with open_regular(os.path.join(run, "run.json"), 16 << 20, follow=False) as f:
        data = f.read()        # at most 16 MiB, or FileTooLarge

It opens with ``O_NONBLOCK`` (a FIFO opens at once instead of waiting), checks with
``fstat`` that what it opened is a regular file, then clears ``O_NONBLOCK``; a file
larger than ``max_bytes`` is refused when opened and when it grows while being read.
:func:`iter_lines` splits a stream into lines at ``\\n``, ``\\r\\n`` and bare ``\\r``
without ever holding more than one capped line.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from typing import BinaryIO, Iterator, NamedTuple

from ..errors import DumpError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

__all__ = ["FileTooLarge", "Line", "NotRegularFile", "UnreadableFile", "iter_lines", "open_regular",
           "read_line_at"]


class UnreadableFile(DumpError, OSError):
    """A dump file that is not read: a :class:`DumpError` for the CLI's one line, and an
    ``OSError`` so that code which already handles unreadable files handles it too.

    Attributes:
        path: the file.
        reason: why, as a phrase (``is a FIFO, not a regular file``).
    """

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason} (not read)")
        self.path = path
        self.reason = reason

    def __reduce__(self):
        return type(self), (self.path, self.reason)


class NotRegularFile(UnreadableFile):
    """A FIFO, device, socket, directory or (where not followed) symbolic link."""


class FileTooLarge(UnreadableFile):
    """A file larger than its reader reads."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _size_text(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


def check_regular(path: str, follow: bool = True) -> os.stat_result | None:
    """The ``stat`` of ``path`` when it is a regular file; None when it does not exist.

    Raises:
        NotRegularFile: it exists and is something else (named in the message).
    """
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return None  # the open that follows says why
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(path, f"is {_kind(st.st_mode)}, not a regular file")
    return st


class _Bounded(io.RawIOBase):
    """A raw file whose reads stop at ``limit`` bytes: one byte past it is an error."""

    def __init__(self, raw: io.FileIO, limit: int, path: str):
        self._raw = raw
        self._limit = limit
        self._path = path

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def fileno(self) -> int:
        return self._raw.fileno()

    def readinto(self, b) -> int:
        room = self._limit + 1 - self._raw.tell()
        view = memoryview(b)
        if room <= 0:
            view = view[:1]
        elif len(view) > room:
            view = view[:room]
        n = self._raw.readinto(view)
        if n and self._raw.tell() > self._limit:
            raise FileTooLarge(self._path, f"is larger than {_size_text(self._limit)}")
        return n

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def open_regular(path: str, max_bytes: int | None = None, *, follow: bool = True,
                 encoding: str | None = None, errors: str | None = None):
    """``path`` opened for reading where it is a regular file, without ever blocking.

    Args:
        max_bytes: the most bytes that may be read (None: no bound, for a manifest that is
            streamed line by line with :func:`iter_lines`); a larger file is refused at
            once, and one that grows past it while being read raises on that read.
        follow: follow a symbolic link as the last part of ``path`` (False: refuse it).
        encoding, errors: a text file (as :func:`open`); binary without ``encoding``.

    Returns:
        A binary file object (buffered, seekable), or a text one with ``encoding``.

    Raises:
        NotRegularFile: a FIFO, device, socket, directory, or a link where not followed.
        FileTooLarge: larger than ``max_bytes``.
        OSError: it cannot be opened (missing, no permission).
    """
    # Refused before it is opened where possible: opening some devices has effects.
    check_regular(path, follow)
    flags = os.O_RDONLY | _NONBLOCK | _CLOEXEC | (0 if follow else _NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if not follow and e.errno == errno.ELOOP:
            raise NotRegularFile(path, "is a symbolic link (links are not followed here)") from None
        if e.errno == errno.ENXIO:  # a socket, or a FIFO that came meanwhile
            raise NotRegularFile(path, "is not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped in between the check and the open
            raise NotRegularFile(path, f"is {_kind(st.st_mode)}, not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise FileTooLarge(path, f"is {st.st_size} bytes, larger than {_size_text(max_bytes)}")
        if _NONBLOCK:
            import fcntl

            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_NONBLOCK)
        raw = io.FileIO(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise
    stream: BinaryIO = io.BufferedReader(_Bounded(raw, max_bytes, path) if max_bytes is not None else raw)
    if encoding is None:
        return stream
    return io.TextIOWrapper(stream, encoding=encoding, errors=errors)


class Line(NamedTuple):
    """One line of a stream: where it starts and ends (byte offsets, its line end
    included), its bytes with the line end (None where it is longer than the cap), and
    whether a line end closed it (the last line of a killed writer's file may lack one)."""

    start: int
    end: int
    raw: bytes | None
    terminated: bool


_CHUNK = 1 << 20


def iter_lines(f: BinaryIO, max_line: int, start: int = 0, chunk: int = _CHUNK) -> Iterator[Line]:
    """The lines of ``f`` from its position (byte offset ``start``), split at ``\\n``,
    ``\\r\\n`` and bare ``\\r``. A line longer than ``max_line`` bytes (its line end
    included) is yielded with ``raw`` None; the bytes of one longer than a chunk are
    skipped, never held."""
    pos = start  # the offset of buf's first byte
    buf = b""  # the unfinished line (or a \r whose \n may come next)
    long_from = None  # where the over-long line being skipped started
    while True:
        data = f.read(chunk)
        if not data:
            break
        if long_from is not None and not buf:
            cut = _first_end(data)
            if cut < 0:
                pos += len(data)
                continue
            pos += cut
            data = data[cut:]
        if buf:
            data = buf + data
        parts = data.splitlines(keepends=True)
        buf = b"" if parts[-1].endswith(b"\n") else parts.pop()
        for raw in parts:
            n = len(raw)
            if long_from is not None:
                yield Line(long_from, pos + n, None, True)
                long_from = None
            else:
                yield Line(pos, pos + n, raw if n <= max_line else None, True)
            pos += n
        if len(buf) > max_line:
            if long_from is None:
                long_from = pos
            # Keep a closing \r: the line is over, only its \n may follow.
            keep = 1 if buf.endswith(b"\r") else 0
            pos += len(buf) - keep
            buf = buf[len(buf) - keep:]
    if long_from is not None:
        yield Line(long_from, pos + len(buf), None, bool(buf))
    elif buf:
        n = len(buf)
        yield Line(pos, pos + n, buf if n <= max_line else None, buf.endswith(b"\r"))


def _first_end(data: bytes) -> int:
    """The index of the first ``\\n`` or ``\\r`` in ``data``, or -1."""
    lf, cr = data.find(b"\n"), data.find(b"\r")
    if lf < 0:
        return cr
    return lf if cr < 0 else min(lf, cr)


def read_line_at(f: BinaryIO, offset: int, max_line: int) -> Line:
    """The line of ``f`` that starts at byte ``offset`` (:func:`iter_lines`' rules), read
    in small pieces: a manifest's records are re-read one at a time by their offset."""
    f.seek(offset)
    for line in iter_lines(f, max_line, offset, chunk=8192):
        return line
    return Line(offset, offset, b"", False)
