"""What the hooks share while Inductor generates code: the active settings, the
per-thread state, the graph being generated, and the one codegen warning.

Part of the codegen room's Inductor contact (see :mod:`aoti_debug.codegen.patches`).
"""

from __future__ import annotations

import logging
import threading

from ..config import CompileSettings

log = logging.getLogger("aoti_debug")

#: Per-thread codegen state: ``depth`` (nesting of wrapped wrapper methods, so that a
#: subclass override calling ``super()`` is bracketed once) and ``user_kernel`` (the
#: ``UserDefinedTritonKernel`` being scheduled, if any).
state = threading.local()

_settings: CompileSettings | None = None
_warned_codegen = False


def settings() -> CompileSettings | None:
    """The settings in force, or None when nothing is installed."""
    return _settings


def set_settings(value: CompileSettings | None) -> None:
    global _settings
    _settings = value


def active() -> bool:
    """Whether compiles are being instrumented right now."""
    return _settings is not None and _settings.active


def is_cpp() -> bool:
    """Whether the graph being generated has a C++ wrapper (cpp_wrapper or AOTI)."""
    from torch._inductor.virtualized import V

    return bool(getattr(V.graph, "cpp_wrapper", False))


def graph_name() -> str:
    """The label of the graph being generated: "" for a top-level graph."""
    from torch._inductor.virtualized import V

    name = getattr(V.graph, "name", None) or ""
    # Top-level graphs have no name (or one that varies with compile order); only
    # subgraphs (cond/while bodies) get a label of their own.
    # SubgraphLowering.parent: torch 2.11 and 2.13.
    return "" if getattr(V.graph, "parent", None) is None else str(name)


def current_graph_info() -> dict:
    """Kind and Dynamo compile id of the graph being generated, for run.json.

    ``GraphLowering.is_backward`` / ``is_inference`` (torch 2.11 and 2.13); the compile id
    from ``torch._guards.CompileContext`` (none under AOTInductor's export path).
    """
    from torch._inductor.virtualized import V

    info: dict = {}
    try:
        graph = V.graph
        info["kind"] = "backward" if graph.is_backward else "inference" if graph.is_inference else "forward"
    except Exception:
        pass
    try:
        from torch._guards import CompileContext

        compile_id = CompileContext.current_compile_id()
        if compile_id is not None:
            info["compile_id"] = str(compile_id)
    except Exception:
        pass
    return info


def warn_codegen(e: Exception) -> None:
    """Warn once that a launch could not be instrumented (the compile goes on)."""
    global _warned_codegen
    if not _warned_codegen:
        _warned_codegen = True
        log.warning("aoti_debug: could not instrument a launch (%s: %s); it runs uninstrumented", type(e).__name__, e)


def safe(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, or None with one warning when it raises."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        warn_codegen(e)
        return None
