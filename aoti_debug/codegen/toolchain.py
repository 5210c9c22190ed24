"""The C++ compiler Inductor compiles with, and whether it links libstdc++ statically.

A compiler that finds ``libstdc++.a`` but no ``libstdc++.so`` (``-print-file-name``
answers with a bare name) puts a private static copy of libstdc++ into every AOTI
``.so``; its facet ids disagree with the ``libstdc++.so.6`` the process already loaded,
and the package segfaults on load (README "AOTInductor on the GPU machine";
tools/gpu/probe_aoti_libstdcxx.py). Used by ``aoti-debug doctor`` and by
tools/gpu/run_gpu_tests.py, so it imports nothing heavy at module level.
"""

from __future__ import annotations

import os
import shutil
import subprocess

#: Compiler names worth suggesting instead of one that links libstdc++ statically.
_CANDIDATES = ("g++", "c++", "clang++")
_TIMEOUT_S = 30


def print_libstdcxx(cxx: str) -> str | None:
    """What ``cxx -print-file-name=libstdc++.so`` answers, or None when it cannot run."""
    try:
        r = subprocess.run([cxx, "-print-file-name=libstdc++.so"], capture_output=True, text=True,
                           timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def links_libstdcxx_statically(cxx: str) -> bool:
    """True when ``cxx`` has only libstdc++.a to link (-print-file-name finds no .so)."""
    found = print_libstdcxx(cxx)
    return found is not None and not os.path.isabs(found)


def compiler_version(cxx: str) -> str | None:
    """The first line of ``cxx --version``, or None when ``cxx`` does not run."""
    try:
        r = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=_TIMEOUT_S,
                           env=dict(os.environ, LC_ALL="C"))
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    lines = (r.stdout or r.stderr).strip().splitlines()
    return lines[0].strip() if lines else ""


def shared_libstdcxx_compiler(exclude: str | None = None) -> str | None:
    """A compiler on PATH (or /usr/bin) that links libstdc++ as a shared library, to
    suggest in place of ``exclude``; None when there is none."""
    seen = {os.path.realpath(exclude)} if exclude else set()
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d] + ["/usr/bin"]
    for name in _CANDIDATES:
        for folder in dirs:
            path = os.path.join(folder, name)
            real = os.path.realpath(path)
            if real in seen or not (os.path.isfile(path) and os.access(path, os.X_OK)):
                continue
            seen.add(real)
            found = print_libstdcxx(path)
            if found is not None and os.path.isabs(found):
                return path
    return None


def inductor_compiler() -> tuple[str | None, str]:
    """The compiler Inductor would compile C++ with, and where that choice comes from.

    ``torch._inductor.cpp_builder.get_cpp_compiler`` (torch 2.11 and 2.13) searches
    ``torch._inductor.config.cpp.cxx``, whose default is ``$CXX`` (else ``g++``) read
    when Inductor's config is imported. Returns (None, why) when it finds none.
    """
    origin = "CXX" if os.environ.get("CXX") else "Inductor's default, CXX unset"
    try:
        from torch._inductor import cpp_builder

        return cpp_builder.get_cpp_compiler(), origin
    except Exception as e:  # torch._inductor.exc.InvalidCxxCompiler, or an older torch
        return None, f"{origin}: {type(e).__name__}: {e}".strip().rstrip(":")


def resolve(cxx: str) -> str:
    """``cxx`` as an absolute path when it is found on PATH."""
    return shutil.which(cxx) or cxx
