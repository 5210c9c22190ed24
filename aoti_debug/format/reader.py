"""Reading a run: resolve a dump path, check its header, stream its manifest, load tensors.

Nothing here loads a whole dump: :meth:`RunReader.records` yields one record at a
time, :meth:`RunReader.load_tensor` memory-maps one tensor file when asked, and a
manifest line can be re-read by its byte offset. Loading never executes code from a
dump (``torch.load(weights_only=True)``) and never follows a manifest path out of
its run directory.
"""

from __future__ import annotations

import json
import os
from typing import Iterator, Sequence

from ..errors import DumpError, FormatVersionError, RecordError
from .provenance import SITES_FILE, Provenance, parse_site_line
from .schema import FORMAT_VERSION, MANIFEST_FILE, RUN_FILE, Record, RunInfo

#: How deep below a dump root to look for runs: ``<root>/<run-id>/rank<N>/``.
_SEARCH_DEPTH = 2


def is_run_dir(path: str) -> bool:
    """A directory that holds a run (``run.json`` or ``manifest.jsonl``)."""
    return os.path.isfile(os.path.join(path, RUN_FILE)) or os.path.isfile(os.path.join(path, MANIFEST_FILE))


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
    if not os.path.isfile(run_file):
        notes.append(f"{RUN_FILE} is missing; assuming format version {FORMAT_VERSION}")
        info = RunInfo(format_version=FORMAT_VERSION, run_id=os.path.basename(os.path.abspath(path)),
                       level="", pid=0, start_time="")
        return info, notes
    try:
        with open(run_file, "rb") as f:
            data = json.loads(f.read())
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
        self.info, self.notes = _read_info(self.path)
        self.problems: list[str] = []
        self.manifest = os.path.join(self.path, MANIFEST_FILE)
        self.truncated = False
        self._scanned = False
        self._handle = None
        self._next = -1  # where the line after the last one records_at read starts
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
                with open(path, "rb") as f:
                    lines = f.read(64 << 20).splitlines()
            except OSError:
                lines = []
            for number, raw in enumerate(lines, 1):
                try:
                    graph, site, prov = parse_site_line(raw)
                except ValueError as e:
                    self.notes.append(f"{SITES_FILE} line {number}: {e}; its provenance is not shown")
                    continue
                self._sites.setdefault((graph, site), prov)
                entry = self.info.graphs.setdefault(graph, {})
                if isinstance(entry, dict):
                    entry.setdefault("sites", {})[str(site)] = prov.to_dict()
        return self._sites

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
        if not os.path.isfile(self.manifest):
            if not self._scanned:
                self.notes.append(f"{MANIFEST_FILE} is missing: the run recorded nothing")
            self._scanned = True
            return
        first_scan = not self._scanned
        self._scanned = True
        with self._open_manifest() as f:
            offset = 0
            lineno = 0
            for raw in f:
                lineno += 1
                start, offset = offset, offset + len(raw)
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
                    if not raw.endswith(b"\n"):
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
            return open(self.manifest, "rb")
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
        if offset != self._next:
            self._handle.seek(offset)
        raw = self._handle.readline()
        self._next = offset + len(raw)
        return raw

    def close(self) -> None:
        """Close the manifest handle that :meth:`record_at` keeps open."""
        self._next = -1
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
        if not os.path.isfile(path):
            raise RecordError(f"{describe(record)}: tensor file {record.file} is missing")
        try:
            value = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        except Exception as e:
            if mmap:
                # Files written by the legacy (non-zip) serializer cannot be mapped.
                try:
                    value = torch.load(path, map_location="cpu", weights_only=True)
                except Exception:
                    raise RecordError(f"{describe(record)}: tensor file {record.file} is corrupt ({_first_line(e)})") from None
            else:
                raise RecordError(f"{describe(record)}: tensor file {record.file} is corrupt ({_first_line(e)})") from None
        if not isinstance(value, torch.Tensor):
            raise RecordError(f"{describe(record)}: {record.file} holds a {type(value).__name__}, not a tensor")
        dtype = str(value.dtype).replace("torch.", "")
        if (record.dtype and dtype != record.dtype) or (record.shape is not None and list(value.shape) != list(record.shape)):
            raise RecordError(
                f"{describe(record)}: {record.file} holds {dtype}{list(value.shape)} but the manifest "
                f"says {record.dtype}{record.shape}"
            )
        return value


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
