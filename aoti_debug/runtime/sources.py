"""Copies of each instrumented graph's generated source, kept in the run directory.

``aoti-debug replay`` and ``repro`` run a launch's own generated code. They run the
copy the run directory holds, checked against the hash ``run.json`` records beside it,
never a path the dump names::

    <run>/sources/<graph>/<wrapper file>           the generated wrapper (.py or .cpp)
    <run>/sources/<graph>/<kernel file>.cpp        AOTInductor's kernels, written beside it
    run.json graphs[<graph>]["sources"]            {file name: sha256 of its bytes}

A graph is copied once, when it first records in a run. Light (no torch): it runs
inside the user's process.
"""

from __future__ import annotations

import hashlib
import os
import re

from ..format.writer import DIR_MODE, open_own_dir, write_atomic_at

SOURCES_DIR = "sources"
#: The key of a graph entry of run.json holding ``{file name: sha256}``.
SOURCES_KEY = "sources"
#: A file name the copies may have: plain, no directory, no leading dot.
FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")
#: A generated source larger than this is not copied (a wrapper is a few MiB at most).
_MAX_BYTES = 64 << 20


def graph_folder(label: str) -> str:
    """The folder (relative to the run directory) holding the copies of graph ``label``'s
    sources; a subgraph shares its graph's."""
    base = label.split("/", 1)[0]
    return os.path.join(SOURCES_DIR, re.sub(r"[^A-Za-z0-9_.-]", "_", base).lstrip(".") or "graph")


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def source_files(path: str) -> list[str]:
    """The generated files of a graph whose wrapper is ``path``: the wrapper, then for a
    C++ wrapper the ``.cpp`` files beside it (the wrapper only declares its kernels)."""
    files = [path]
    if path.endswith(".cpp"):
        folder = os.path.dirname(path)
        try:
            files += sorted(os.path.join(folder, n) for n in os.listdir(folder)
                            if n.endswith(".cpp") and n != os.path.basename(path))
        except OSError:
            pass
    return files


def copy_sources(run_fd: int, label: str, path: str) -> dict[str, str]:
    """Copies graph ``label``'s generated sources (wrapper ``path``) into the run
    directory whose descriptor is ``run_fd``; ``{file name: sha256}`` of what it copied.

    Every step goes through directory descriptors (``mkdir``/``open`` at a descriptor,
    ``O_NOFOLLOW``, each folder checked to be the entry it opened and this user's), never
    through a path: a link planted in the run directory, or swapped in while it copies,
    is refused, never written through.

    Raises:
        OSError: the wrapper cannot be read or the copy cannot be written (a
            :class:`~aoti_debug.format.writer.RefusedDirectory` for a planted link).
    """
    folder = os.dup(run_fd)
    try:
        for part in graph_folder(label).split(os.sep):
            try:
                os.mkdir(part, DIR_MODE, dir_fd=folder)
            except FileExistsError:
                pass  # made by an earlier copy, or planted: open_own_dir tells them apart
            inner = open_own_dir(folder, part)
            os.close(folder)
            folder = inner
        return _copy_into(folder, path)
    finally:
        os.close(folder)


def _copy_into(folder: int, path: str) -> dict[str, str]:
    copied: dict[str, str] = {}
    for i, src in enumerate(source_files(path)):
        name = os.path.basename(src)
        if not FILE_NAME.fullmatch(name):
            if i == 0:
                raise OSError(f"the generated source's name {name!r} is not a plain file name")
            continue
        try:
            with open(src, "rb") as f:
                data = f.read(_MAX_BYTES + 1)
        except OSError:
            if i == 0:
                raise
            continue
        if len(data) > _MAX_BYTES:
            if i == 0:
                raise OSError(f"{src} is larger than {_MAX_BYTES >> 20} MiB")
            continue
        write_atomic_at(folder, name, data)
        copied[name] = sha256_of(data)
    return copied
