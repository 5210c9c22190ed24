"""C++-wrapper code for one launch (cpp_wrapper=True and AOTInductor).

Not implemented yet: until it is, C++ wrappers are compiled uninstrumented and a
warning says so (see issue "The C++ wrapper and AOTInductor").
"""

from __future__ import annotations

import logging

from .launch import Launch

log = logging.getLogger("aoti_debug")
_warned = False


def emit(manager, wrapper, launch: Launch, phase: str) -> list[str]:
    global _warned
    if not _warned:
        _warned = True
        log.warning("aoti_debug: the C++ wrapper is not instrumented yet; compiling it uninstrumented")
    return []
