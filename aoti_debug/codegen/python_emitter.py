"""Python-wrapper code for one launch. All values pass through ``emit.py_literal``."""

from __future__ import annotations

from .emit import py_literal, py_tuple
from .launch import Launch

RUNTIME_MODULE = "aoti_debug.runtime.hooks"
HANDLE = "_aoti_debug"


def header_lines(level: str, sync: bool) -> list[str]:
    return [
        f"from {RUNTIME_MODULE} import graph as _aoti_debug_graph",
        f"{HANDLE} = _aoti_debug_graph(globals().get('__file__'), {py_literal(level)}, {py_literal(sync)})",
    ]


def _root(wrapper):
    get_root = getattr(wrapper, "get_root_graph", None)
    return get_root() if get_root is not None else wrapper


def ensure_header(manager, wrapper) -> None:
    root = _root(wrapper)
    if getattr(root, "_aoti_debug_header", False):
        return
    root._aoti_debug_header = True
    for line in header_lines(manager.settings.level, manager.settings.sync):
        root.imports.writeline(line)


def site(launch: Launch, phases: tuple[str, ...], with_values: bool) -> tuple:
    def meta(selected):
        return tuple((a.name, a.role, a.kind, a.expr) for a in selected)

    before = [a for a in launch.args if a.before] if with_values and "before" in phases else []
    after = [a for a in launch.args if a.after] if with_values and "after" in phases else []
    return (launch.graph, launch.kernel, launch.op, meta(before), meta(after)), before, after


def emit(manager, wrapper, launch: Launch, phase: str) -> list[str]:
    ensure_header(manager, wrapper)
    settings = manager.settings
    with_values = settings.level != "names"
    site_tuple, before, after = site(launch, settings.phases, with_values)
    literal = py_literal(site_tuple)
    if phase == "before":
        return [f"{HANDLE}.launch({literal}, {py_tuple([a.expr for a in before])})"]
    return [f"{HANDLE}.done({literal}, {py_tuple([a.expr for a in after])})"]
