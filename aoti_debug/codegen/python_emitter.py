"""Python-wrapper code for one launch. All values pass through ``emit.py_literal``."""

from __future__ import annotations

from .emit import py_literal, py_tuple
from .launch import Launch

RUNTIME_MODULE = "aoti_debug.runtime.hooks"
HANDLE = "_aoti_debug"


def header_lines(level: str, sync: bool, graph_info: dict | None = None) -> list[str]:
    info = tuple(sorted((graph_info or {}).items()))
    return [
        f"from {RUNTIME_MODULE} import graph as _aoti_debug_graph",
        f"{HANDLE} = _aoti_debug_graph(globals().get('__file__'), {py_literal(level)}, {py_literal(sync)}, "
        f"info={py_literal(info)})",
    ]


def _root(wrapper):
    get_root = getattr(wrapper, "get_root_graph", None)
    return get_root() if get_root is not None else wrapper


def ensure_header(manager, wrapper) -> None:
    root = _root(wrapper)
    if getattr(root, "_aoti_debug_header", False):
        return
    root._aoti_debug_header = True
    for line in header_lines(manager.settings.level, manager.settings.sync, graph_info()):
        root.imports.writeline(line)


#: Launches whose every arg is an expression of the call itself, so each exists (is
#: allocated) before the call: at level names their outputs are described too.
ARGS_EXIST_BEFORE = ("triton", "user_triton", "cpp")


def graph_info() -> dict:
    """What the graph being generated is: ``kind`` (forward, backward, inference) and
    the ``compile_id`` Dynamo gave it, for run.json."""
    from .inductor import current_graph_info

    return current_graph_info()


def site(launch: Launch, phases: tuple[str, ...], level: str) -> tuple:
    """``(subgraph, kernel, op, before_meta, after_meta, source)``; each meta entry is
    ``(arg, role, kind, expr, uninitialised, volatile)`` (runtime/hooks.py reads it)."""

    def meta(selected):
        return tuple((a.name, a.role, a.kind, a.expr, a.uninitialised, a.volatile) for a in selected)

    if level == "names":
        # Metadata only (read when AOTI_DEBUG_NAMES_ARGS is set): the faulting launch
        # never reaches `done`, so everything it is given is passed before it. An extern
        # or fallback kernel's outputs do not exist yet there.
        before = [a for a in launch.args if a.before or launch.kind in ARGS_EXIST_BEFORE]
        after = []
    else:
        before = [a for a in launch.args if a.before] if "before" in phases else []
        after = [a for a in launch.args if a.after] if "after" in phases else []
    return (launch.graph, launch.kernel, launch.op, meta(before), meta(after), launch.source), before, after


def emit(manager, wrapper, launch: Launch, phase: str) -> list[str]:
    ensure_header(manager, wrapper)
    settings = manager.settings
    site_tuple, before, after = site(launch, settings.phases, settings.level)
    literal = py_literal(site_tuple)
    if phase == "before":
        return [f"{HANDLE}.launch({literal}, {py_tuple([a.expr for a in before])})"]
    return [f"{HANDLE}.done({literal}, {py_tuple([a.expr for a in after])})"]
