"""Which generated code replay may run: the dump's own copies, checked against their hashes.

A run directory keeps a copy of each graph's generated source and its sha256
(:mod:`aoti_debug.runtime.sources`). :class:`Sources` hands replay only those copies,
after checking each against its hash (a copy swapped after recording is refused), and
before the first it hands out of a dump recorded by another user or on another machine
(``run.json`` ``hostname`` and ``uid``, and the owner of its files), it shows what it
would run and asks: ``confirm`` (a prompt), else a refusal that names ``--trust``. A
dump without copies (recorded by an older aoti_debug) is refused unless ``trust``;
then the path it names is read, after saying so.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import stat
import sys
from typing import Callable, Iterable

from ..format.files import open_regular
from ..format.reader import RunReader
from ..format.schema import RUN_FILE
from ..runtime.sources import FILE_NAME, SOURCES_KEY, graph_folder, sha256_of
from .safe import ReplayError, shown

#: The most a generated source may weigh when replay reads it.
_MAX_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class GraphSource:
    """One graph's generated code, as replay may run it."""

    graph: str
    wrapper: str
    """``python`` or ``cpp``."""
    path: str
    """Where the wrapper's text was read (the dump's copy, or with ``trust`` the recorded path)."""
    origin: str
    """The path the recording process ran it from (for information)."""
    text: str
    """The wrapper's text."""
    extra: tuple[str, ...] = ()
    """The texts of the kernel files beside a C++ wrapper (AOTInductor's ``*.kernel.cpp``)."""
    verified: bool = True


def _graph_entry(graphs: dict, graph: str) -> tuple[str, dict]:
    if not isinstance(graphs, dict):
        return graph, {}
    for label in (graph, graph.split("/", 1)[0]):
        g = graphs.get(label)
        if isinstance(g, dict):
            return label, g
    return graph, {}


def _read_regular(path: str, what: str) -> bytes:
    """The bytes of a regular file that is no symlink (a dump's copy must be its own)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            raise ReplayError(f"{what} {shown(path)} is not a regular file: not replayed")
        if st.st_size > _MAX_BYTES:
            raise ReplayError(f"{what} {shown(path)} is larger than {_MAX_BYTES >> 20} MiB: not replayed")
        with open_regular(path, _MAX_BYTES, follow=False) as f:
            return f.read(_MAX_BYTES + 1)
    except OSError as e:
        raise ReplayError(f"cannot read {what} {shown(path)}: {e.strerror or e}") from None


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


class Sources:
    """The generated sources of one dump that replay may run (see the module's docstring).

    Args:
        reader: the dump.
        trust: run a dump of another user or machine without asking, and one without
            copies from the paths it names (after saying so).
        confirm: asks the user (``click.confirm``) before running code from a dump of
            another user or machine; None: refuse instead, naming ``--trust``.
        say: where a note is shown before an unverified file is read (default stderr).
    """

    def __init__(self, reader: RunReader, trust: bool = False, confirm: Callable[[str], bool] | None = None,
                 say: Callable[[str], None] | None = None):
        self.reader = reader
        self.trust = trust
        self.confirm = confirm
        self.say = say or (lambda text: print(text, file=sys.stderr))
        self._cache: dict[str, GraphSource | ReplayError] = {}
        self._vouched = False

    @property
    def graphs(self) -> dict:
        graphs = self.reader.info.graphs
        return graphs if isinstance(graphs, dict) else {}

    # -- who recorded it -----------------------------------------------------------
    def foreign(self) -> str | None:
        """Why the dump is not known to be this user's on this machine, or None."""
        info = self.reader.info
        host = socket.gethostname()
        if info.hostname != host:
            return f"on host {shown(info.hostname)} (this is {shown(host)})"
        uid = info.uid
        me = os.getuid() if hasattr(os, "getuid") else None
        if me is None:
            return None
        if not isinstance(uid, int) or isinstance(uid, bool):
            return "by a user it does not name (no uid in run.json)"
        if uid != me:
            return f"by uid {uid} (you are uid {me})"
        try:
            owner = os.stat(os.path.join(self.reader.path, RUN_FILE)).st_uid
        except OSError:
            owner = me
        if owner != me:
            return f"with files that belong to uid {owner} (you are uid {me})"
        return None

    def listing(self) -> list[str]:
        """What replay would run: each graph's copies and their hashes."""
        lines = []
        for label, g in sorted(self.graphs.items()):
            if not isinstance(g, dict) or "/" in label:
                continue
            copies = g.get(SOURCES_KEY)
            if isinstance(copies, dict) and copies:
                for name, digest in sorted(copies.items()):
                    lines.append(f"  {label}: {os.path.join(graph_folder(label), str(name))} sha256 {shown(digest)}")
            else:
                lines.append(f"  {label}: {shown(g.get('file'))} (no copy in the dump: not verified)")
        return lines

    def vouch(self, graphs: Iterable[str] = ()) -> None:
        """Asks (or refuses) once for a dump of another user or machine, then checks the
        copies of ``graphs``; raises :class:`ReplayError` where replay must not run them."""
        if not self._vouched:
            why = self.foreign()
            if why is not None and not self.trust:
                where = shown(self.reader.path)
                if self.confirm is None:
                    raise ReplayError(f"{where} was recorded {why}: replay would run its generated code; "
                                      f"read it (aoti-debug replay --trust shows each file and its sha256 first) "
                                      f"and pass --trust to run it")
                text = "\n".join([f"{where} was recorded {why}. Replay would run this generated code:",
                                  *self.listing(), "Run it?"])
                if not self.confirm(text):
                    raise ReplayError(f"not run: {where} was recorded {why} (pass --trust to run it)")
            elif why is not None:
                self.say("\n".join([f"--trust: running code of {shown(self.reader.path)}, recorded {why}:",
                                    *self.listing()]))
            self._vouched = True
        for g in sorted(set(graphs)):
            self.source(g)

    # -- the code ------------------------------------------------------------------
    def source(self, graph: str) -> GraphSource:
        """Graph ``graph``'s generated code, checked (see the module's docstring).

        Raises:
            ReplayError: no verified copy (and no ``trust``), a hash mismatch, an
                unreadable file.
        """
        if not self._vouched:
            self.vouch()
        found = self._cache.get(graph)
        if found is None:
            try:
                found = self._load(graph)
            except ReplayError as e:
                found = e
            self._cache[graph] = found
        if isinstance(found, ReplayError):
            raise found
        return found

    def _load(self, graph: str) -> GraphSource:
        label, g = _graph_entry(self.graphs, graph)
        origin = g.get("file")
        wrapper = g.get("wrapper", "python")
        wrapper = "cpp" if wrapper == "cpp" or (isinstance(origin, str) and origin.endswith(".cpp")) else "python"
        if not origin or not isinstance(origin, str):
            raise ReplayError(f"the dump does not say which generated source {shown(graph)} ran "
                              f"(recorded by an older aoti_debug): re-record it")
        copies = g.get(SOURCES_KEY)
        if copies is None:
            return self._recorded(label, wrapper, origin)
        if not isinstance(copies, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in copies.items()):
            raise ReplayError(f"run.json's sources of {shown(label)} are not a map of file names to hashes")
        main = os.path.basename(origin)
        if main not in copies:
            raise ReplayError(f"the dump's copies of {shown(label)}'s sources do not include its wrapper "
                              f"{shown(main)}: re-record it")
        texts = {}
        folder = os.path.join(self.reader.path, graph_folder(label))
        for name, digest in copies.items():
            if not FILE_NAME.fullmatch(name):
                raise ReplayError(f"run.json names the copy {shown(name)} of {shown(label)}, which is not a plain "
                                  f"file name: not replayed")
            path = os.path.join(folder, name)
            data = _read_regular(path, f"the dump's copy of {shown(label)}'s source")
            if sha256_of(data) != digest.lower():
                raise ReplayError(f"the dump's source of {label} does not match its recorded hash: "
                                  f"{shown(os.path.join(graph_folder(label), name))} has sha256 "
                                  f"{sha256_of(data)[:16]}..., run.json says {shown(digest[:16])}...: not replayed")
            texts[name] = _text(data)
        extra = tuple(texts[n] for n in sorted(texts) if n != main and n.endswith(".cpp"))
        return GraphSource(label, wrapper, os.path.join(folder, main), origin, texts[main], extra)

    def _recorded(self, label: str, wrapper: str, origin: str) -> GraphSource:
        """A dump without copies: its recorded path, with ``trust`` only."""
        if not self.trust:
            raise ReplayError(f"the dump holds no verified copy of {shown(label)}'s generated source (recorded by "
                              f"an older aoti_debug, or its copy failed: see run.json warnings): re-record it, or "
                              f"pass --trust to run the file it names, {shown(origin)}, unverified")
        if not os.path.isfile(origin):
            raise ReplayError(f"the generated source of {shown(label)} no longer exists ({shown(origin)}; the "
                              f"Inductor cache was cleared or the run was on another machine): re-record on this "
                              f"machine and replay there")
        self.say(f"--trust: {shown(label)} has no verified copy in the dump; reading {shown(origin)} unverified")
        text = _text(_read_regular(origin, "the generated source"))
        extra = []
        if wrapper == "cpp":
            from ..runtime.sources import source_files

            for path in source_files(origin)[1:]:
                try:
                    extra.append(_text(_read_regular(path, "a kernel file")))
                except ReplayError:
                    continue
        return GraphSource(label, wrapper, origin, origin, text, tuple(extra), verified=False)
