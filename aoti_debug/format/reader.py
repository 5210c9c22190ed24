"""Reading a run: resolve a dump path, check its header, stream its manifest, load tensors.

Nothing here loads a whole dump: :meth:`RunReader.records` yields one record at a
time, :meth:`RunReader.load_tensor` memory-maps one tensor file when asked, and a
manifest line can be re-read by its byte offset. Loading never executes code from a
dump (``torch.load(weights_only=True)``) and never follows a manifest path out of
its run directory.

A dump is untrusted input: every file is opened by :func:`.files.open_regular` (a
FIFO, device or socket is refused, never waited on), every read is bounded
(``run.json``, ``sites.jsonl``, one manifest line), lines may end in ``\\n``,
``\\r\\n`` or ``\\r``, and a tensor file's archive is measured against its record
before ``torch.load`` inflates anything.
"""

from __future__ import annotations

import json
import os
import zipfile
from typing import Iterator, Sequence

from ..errors import DumpError, FormatVersionError, RecordError
from .files import UnreadableFile, check_regular, iter_lines, open_regular
from .provenance import MAX_SITE_LINE, SITES_FILE, Provenance, parse_site_line
from .schema import FORMAT_VERSION, MANIFEST_FILE, RUN_FILE, Record, RunInfo
from .validate import INT64_MAX

#: How deep below a dump root to look for runs: ``<root>/<run-id>/rank<N>/``.
_SEARCH_DEPTH = 2
#: How much :meth:`RunReader.records_at` reads at a time (a launch's lines, or a few).
_REREAD_CHUNK = 16 << 10
#: The largest ``run.json`` read (its graphs, warnings and flight recorder: kilobytes).
MAX_RUN_BYTES = 16 << 20
#: The longest manifest line read (a record is well under a kilobyte).
MAX_LINE = 1 << 20
#: How much of ``sites.jsonl`` is read (provenance is a help: the rest is a note).
MAX_SITES_BYTES = 64 << 20
#: What a tensor file may hold besides its values: its pickle, version and byte order.
TENSOR_FILE_SLACK = 64 << 10
#: The most entries a tensor file's archive may have (torch writes seven for a tensor).
_MAX_ARCHIVE_ENTRIES = 64
#: DEFLATE inflates at most ~1032:1; an entry that claims more is not a real stream.
_MAX_RATIO = 1100


def is_run_dir(path: str) -> bool:
    """A directory that holds a run (``run.json`` or ``manifest.jsonl``, of any file type:
    one that is not a regular file is refused when the run is opened)."""
    return os.path.lexists(os.path.join(path, RUN_FILE)) or os.path.lexists(os.path.join(path, MANIFEST_FILE))


def find_runs(root: str, depth: int = _SEARCH_DEPTH) -> list[str]:
    """Every run directory at or below ``root`` (at most ``depth`` levels), sorted."""
    if is_run_dir(root):
        return [root]
    if depth <= 0:
        return []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return []
    found: list[str] = []
    for entry in entries:
        if entry.is_dir() and not entry.name.startswith("."):
            found.extend(find_runs(entry.path, depth - 1))
    return found


def resolve_run(path: str) -> str:
    """The run directory that ``path`` names: a run itself, or a root with exactly one run.

    Raises:
        DumpError: the path is missing, holds no run, or holds several (they are named).
    """
    if not os.path.exists(path):
        raise DumpError(f"{path}: no such file or directory")
    if os.path.isfile(path):
        if os.path.basename(path) in (RUN_FILE, MANIFEST_FILE):
            return os.path.dirname(path) or "."
        raise DumpError(f"{path}: is a file, not a dump directory (give the run directory)")
    runs = find_runs(path)
    if not runs:
        raise DumpError(f"{path}: not an aoti_debug dump (no {RUN_FILE} or {MANIFEST_FILE} found)")
    if len(runs) > 1:
        names = ", ".join(os.path.relpath(r, path) for r in runs[:8])
        more = f" and {len(runs) - 8} more" if len(runs) > 8 else ""
        raise DumpError(f"{path}: holds {len(runs)} runs ({names}{more}); name one of them")
    return runs[0]


def _read_info(path: str) -> tuple[RunInfo, list[str]]:
    notes: list[str] = []
    run_file = os.path.join(path, RUN_FILE)
    if not os.path.lexists(run_file):
        notes.append(f"{RUN_FILE} is missing; assuming format version {FORMAT_VERSION}")
        info = RunInfo(format_version=FORMAT_VERSION, run_id=os.path.basename(os.path.abspath(path)),
                       level="", pid=0, start_time="")
        return info, notes
    try:
        with open_regular(run_file, MAX_RUN_BYTES, follow=False) as f:
            data = json.loads(f.read())
    except UnreadableFile:
        raise
    except (OSError, ValueError, RecursionError) as e:
        # json's own message says where in the (multi-line) file it stopped.
        raise DumpError(f"{run_file}: unreadable run header ({_first_line(e)})") from None
    version = data.get("format_version") if isinstance(data, dict) else None
    if type(version) is int and version > FORMAT_VERSION:
        # Before any other check: a newer format may have changed every other field.
        raise FormatVersionError(
            f"{path}: written by dump format version {version}; this aoti_debug reads "
            f"versions up to {FORMAT_VERSION} (upgrade aoti_debug)"
        )
    try:
        info = RunInfo.from_dict(data)
    except DumpError as e:
        raise DumpError(f"{run_file}: damaged run header: {e}") from None
    return info, notes


def parse_line(raw: bytes) -> Record:
    """One manifest line as a checked record.

    Raises:
        ValueError: the line is not JSON (the mark of a truncated line when it is the last).
        RecordError: it is JSON but not a record of this format (see :mod:`.validate`).
    """
    if len(raw) > MAX_LINE:
        raise RecordError(f"longer than {MAX_LINE >> 20} MiB")
    try:
        data = json.loads(raw)
    except RecursionError:
        # json raises this, not a ValueError, for arrays nested thousands deep.
        raise ValueError("nested too deeply") from None
    return Record.from_dict(data)


class RunReader:
    """One run directory, read lazily.

    Attributes:
        path: the run directory.
        info: its header (``run.json``).
        notes: harmless oddities (a truncated last manifest line of a killed run).
        problems: damage found so far (unparsable manifest lines); grows while
            :meth:`records` is iterated.
    """

    def __init__(self, path: str):
        self.path = resolve_run(path)
        self.root = os.path.realpath(self.path)
        self.manifest = os.path.join(self.path, MANIFEST_FILE)
        # Refused up front, whatever reads them later: a FIFO would make that read wait.
        for name in (RUN_FILE, MANIFEST_FILE, SITES_FILE):
            check_regular(os.path.join(self.path, name), follow=False)
        self.info, self.notes = _read_info(self.path)
        self.problems: list[str] = []
        self.truncated = False
        self._scanned = False
        self._handle = None
        self._lines: Iterator | None = None  # records_at's read of the lines after the last one it read
        self._next = -1
        self._sites: dict[tuple[str, int], Provenance] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    @property
    def name(self) -> str:
        return self.info.run_id or os.path.basename(os.path.abspath(self.path))

    @property
    def manifest_bytes(self) -> int:
        try:
            return os.path.getsize(self.manifest)
        except OSError:
            return 0

    # -- provenance ----------------------------------------------------------------------
    @property
    def sites(self) -> dict[tuple[str, int], Provenance]:
        """(graph label, site number) -> what that launch site was made from, read from
        ``sites.jsonl`` on first use and merged into ``info.graphs[label]["sites"]``. A
        damaged line is a note (provenance is a help, never a reason to refuse a dump)."""
        if self._sites is None:
            self._sites = {}
            path = os.path.join(self.path, SITES_FILE)
            try:
                f = open_regular(path, follow=False)
            except UnreadableFile:
                raise  # a FIFO or device where the file should be: damage, said once
            except OSError:
                return self._sites  # none written (an older writer, or level names)
            with f:
                for number, line in enumerate(iter_lines(f, MAX_SITE_LINE), 1):
                    if line.start >= MAX_SITES_BYTES:
                        self.notes.append(f"{SITES_FILE} is larger than {MAX_SITES_BYTES >> 20} MiB: the "
                                          f"provenance of sites from line {number} on is not shown")
                        break
                    if line.raw is None:
                        self.notes.append(f"{SITES_FILE} line {number} (byte {line.start}): longer than "
                                          f"{MAX_SITE_LINE >> 20} MiB; its provenance is not shown")
                        continue
                    if not line.raw.strip():
                        continue
                    self._add_site(number, line.raw)
        return self._sites

    def _add_site(self, number: int, raw: bytes) -> None:
        try:
            graph, site, prov = parse_site_line(raw)
        except ValueError as e:
            self.notes.append(f"{SITES_FILE} line {number}: {e}; its provenance is not shown")
            return
        if site > INT64_MAX:  # no record can name it
            self.notes.append(f"{SITES_FILE} line {number}: site is beyond 64 bits; its provenance is not shown")
            return
        self._sites.setdefault((graph, site), prov)
        entry = self.info.graphs.setdefault(graph, {})
        # validate.check_run_info made every graph an object and its sites one too.
        entry.setdefault("sites", {})[str(site)] = prov.to_dict()

    def provenance(self, record: Record) -> Provenance | None:
        """What ``record``'s launch site was made from, where the run wrote it."""
        if record.site is None:
            return None
        return self.sites.get((record.graph, record.site))

    # -- the manifest ------------------------------------------------------------------
    def entries(self) -> Iterator[tuple[int, int, Record]]:
        """``(byte offset, line end offset, record)`` per manifest line, in file order.

        A last line without its newline that does not parse is the mark of a killed
        run: it is noted and dropped. Any other unusable line is a problem (kept in
        :attr:`problems`) and skipped.
        """
        for start, end, _digest, record in self.scan():
            yield start, end, record

    def scan(self) -> Iterator[tuple[int, int, int, Record]]:
        """:meth:`entries` with a digest of each line: ``(offset, end, digest, record)``.
        :meth:`records_at`, given the offsets and digests, reads those records again
        without checking them again."""
        if not os.path.lexists(self.manifest):
            if not self._scanned:
                self.notes.append(f"{MANIFEST_FILE} is missing: the run recorded nothing")
            self._scanned = True
            return
        first_scan = not self._scanned
        self._scanned = True
        with self._open_manifest() as f:
            lineno = 0
            for start, offset, raw, terminated in iter_lines(f, MAX_LINE):
                lineno += 1
                if raw is None:
                    # Never held whole: its length alone makes it damage.
                    if first_scan:
                        self.problems.append(f"{MANIFEST_FILE} line {lineno} (byte {start}): longer than "
                                             f"{MAX_LINE >> 20} MiB (skipped)")
                    continue
                if not raw.strip():
                    continue
                try:
                    record = parse_line(raw)
                except RecordError as e:
                    # Valid JSON is never a cut-off line: damage even when it is the last.
                    if first_scan:
                        self.problems.append(f"{MANIFEST_FILE} line {lineno}: {e} (skipped)")
                    continue
                except ValueError as e:
                    if not terminated:
                        self.truncated = True
                        if first_scan:
                            self.notes.append(
                                f"{MANIFEST_FILE} ends in a truncated line (a killed run?); "
                                f"records up to line {lineno - 1} are used"
                            )
                        return
                    if first_scan:
                        self.problems.append(f"{MANIFEST_FILE} line {lineno}: {_decode_error(e)} (skipped)")
                    continue
                yield start, offset, hash(raw), record

    def _open_manifest(self):
        try:
            return open_regular(self.manifest, follow=False)
        except UnreadableFile:
            raise
        except OSError as e:
            raise DumpError(f"{self.manifest}: cannot read ({e.strerror or e})") from None

    def records(self) -> Iterator[Record]:
        """Every usable record, in manifest order (which is event order)."""
        for _start, _end, record in self.entries():
            yield record

    def record_at(self, offset: int) -> Record:
        """The record of the manifest line that starts at ``offset`` (from :meth:`entries`)."""
        return self.records_at((offset,))[0]

    def records_at(self, offsets: Sequence[int], digests: Sequence[int] | None = None) -> list[Record]:
        """The records of the manifest lines that start at ``offsets`` (from :meth:`scan`),
        in that order. A line that starts where the one before it ended is read on without
        a seek; a line whose bytes still have the digest :meth:`scan` gave it (``digests``,
        one per offset) is the line checked then, and is decoded without checking it again.

        Raises:
            RecordError: a line is no record (any more: the file changed since the scan).
        """
        out = []
        for i, offset in enumerate(offsets):
            raw = self._line_at(offset)
            try:
                if digests is not None and hash(raw) == digests[i]:
                    out.append(Record.from_checked(json.loads(raw)))
                else:
                    out.append(parse_line(raw))
            except ValueError as e:  # the file changed since scan() read it
                raise RecordError(f"{MANIFEST_FILE} at byte {offset}: {_decode_error(e)}") from None
        return out

    def _line_at(self, offset: int) -> bytes:
        """The bytes of the line at ``offset``, continuing the last read where it ended there."""
        if self._handle is None:
            self._handle = self._open_manifest()
        if self._lines is None or offset != self._next:
            self._handle.seek(offset)
            self._lines = iter_lines(self._handle, MAX_LINE, offset, chunk=_REREAD_CHUNK)
        line = next(self._lines, None)
        if line is None:  # past the end: the file shrank since the scan
            self._lines = None
            return b""
        self._next = line.end
        if line.raw is None:
            raise RecordError(f"{MANIFEST_FILE} at byte {offset}: longer than {MAX_LINE >> 20} MiB")
        return line.raw

    def close(self) -> None:
        """Close the manifest handle that :meth:`record_at` keeps open."""
        self._lines = None
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __enter__(self) -> "RunReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- tensor files ------------------------------------------------------------------
    def tensor_path(self, record: Record) -> str:
        """The checked absolute path of a record's tensor file.

        Raises:
            RecordError: the record names no file, or a path outside the run directory.
        """
        if not record.file:
            raise RecordError(f"{describe(record)}: no tensor file recorded")
        rel = record.file
        if os.path.isabs(rel) or "\x00" in rel:
            raise RecordError(f"{describe(record)}: tensor path {rel!r} points outside the dump")
        full = os.path.realpath(os.path.join(self.root, rel))
        if os.path.commonpath([full, self.root]) != self.root or full == self.root:
            raise RecordError(f"{describe(record)}: tensor path {rel!r} points outside the dump")
        return full

    def load_tensor(self, record: Record, mmap: bool = True):
        """The record's tensor, memory-mapped where possible; never runs code from the file.

        Raises:
            RecordError: the file is missing, unreadable, not a tensor, or does not
                hold the dtype and shape that the manifest says.
        """
        import torch

        path = self.tensor_path(record)
        if not os.path.lexists(path):
            raise RecordError(f"{describe(record)}: tensor file {record.file} is missing")
        expected = _expected_bytes(record)
        try:
            f = open_regular(path, follow=False)  # tensor_path resolved its links
        except OSError as e:
            why = e.reason if isinstance(e, UnreadableFile) else f"cannot be read ({e.strerror or e})"
            raise RecordError(f"{describe(record)}: tensor file {record.file} {why}") from None
        with f:
            problem = _archive_problem(f, expected)
            if problem is not None:
                raise RecordError(f"{describe(record)}: tensor file {record.file} {problem}; the manifest says "
                                  f"{record.dtype}{record.shape} ({expected} bytes): not loaded")
            value = self._torch_load(record, f, mmap)
        if not isinstance(value, torch.Tensor):
            raise RecordError(f"{describe(record)}: {record.file} holds a {type(value).__name__}, not a tensor")
        dtype = str(value.dtype).replace("torch.", "")
        if (record.dtype and dtype != record.dtype) or (record.shape is not None and list(value.shape) != list(record.shape)):
            raise RecordError(
                f"{describe(record)}: {record.file} holds {dtype}{list(value.shape)} but the manifest "
                f"says {record.dtype}{record.shape}"
            )
        if value.layout != torch.strided:
            raise RecordError(f"{describe(record)}: {record.file} holds a {value.layout} tensor, not a dense one")
        return value

    @staticmethod
    def _torch_load(record: Record, f, mmap: bool):
        import torch

        def corrupt(e: BaseException) -> RecordError:
            return RecordError(f"{describe(record)}: tensor file {record.file} is corrupt ({_first_line(e)})")

        if mmap:
            # torch maps a file by its path: the descriptor's own, so what is mapped is the
            # file checked here even if the path was replaced meanwhile.
            fd_path = f"/proc/self/fd/{f.fileno()}"
            try:
                return torch.load(fd_path if os.path.exists(fd_path) else f.name, map_location="cpu",
                                  weights_only=True, mmap=True)
            except Exception as e:
                first = e  # files written by the legacy (non-zip) serializer cannot be mapped
        try:
            f.seek(0)
            return torch.load(f, map_location="cpu", weights_only=True)
        except Exception as e:
            raise corrupt(first if mmap else e) from None


def _expected_bytes(record: Record) -> int:
    """What the values of ``record`` take in a tensor file: numel times the element size.

    Raises:
        RecordError: the record's dtype has no element size here (torch does not know it).
    """
    import torch

    dtype = getattr(torch, record.dtype or "", None)
    if not isinstance(dtype, torch.dtype):
        raise RecordError(f"{describe(record)}: dtype {record.dtype!r} is not one this torch can load")
    return (record.numel or 0) * dtype.itemsize


def _archive_problem(f, expected: int) -> str | None:
    """Why the tensor file open in ``f`` cannot hold ``expected`` bytes of values, judged
    from its zip directory before anything is inflated (torch.save writes a zip of
    uncompressed entries: ``data.pkl``, ``data/<n>`` per storage, and a few small
    ones); None when it may."""
    size = os.fstat(f.fileno()).st_size
    try:
        archive = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError):
        # The legacy serializer's format (no zip): its values are stored as they are.
        if size > expected + TENSOR_FILE_SLACK:
            return f"is {size} bytes"
        return None
    with archive:
        entries = archive.infolist()
        if len(entries) > _MAX_ARCHIVE_ENTRIES:
            return f"is an archive of {len(entries)} entries"
        data = other = 0
        for e in entries:
            if e.compress_type != zipfile.ZIP_STORED and e.file_size > _MAX_RATIO * e.compress_size + 1024:
                return f"has an entry that claims to inflate {e.compress_size} bytes to {e.file_size}"
            parts = e.filename.split("/")
            if len(parts) == 3 and parts[1] == "data" and parts[2].isdigit():
                data += e.file_size
            else:
                other += e.file_size
        if data > expected:
            return f"holds {data} bytes of values"
        if other > TENSOR_FILE_SLACK:
            return f"holds {other} bytes besides its values"
    return None


def describe(record: Record) -> str:
    """``seq 12 cpp_fused_add_0 call 0 before buf3``: how messages name a record."""
    return f"seq {record.seq} {record.kernel} call {record.kernel_call} {record.phase} {record.arg}"


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    line = text[0] if text else type(e).__name__
    return line if len(line) <= 160 else line[:157] + "..."


def _decode_error(e: BaseException) -> str:
    if isinstance(e, json.JSONDecodeError):
        return "not valid JSON"
    if isinstance(e, UnicodeDecodeError):
        return "not valid UTF-8"
    if "integer string conversion" in str(e):  # Python's cap on digits (3.11+)
        return "holds a number too long to read"
    return _first_line(e)


def open_run(path: str) -> RunReader:
    """Open one run (see :func:`resolve_run` for what ``path`` may be)."""
    return RunReader(path)
