"""Python-wrapper code for one launch. All values pass through ``emit.py_literal``.

Each launch's :class:`~aoti_debug.format.protocol.Site` is written once into the
wrapper's header (``_AD_SITE_<n> = _aoti_debug.site(...)``, built at module import);
the lines around the launch pass that constant and the values::

    _aoti_debug.launch(_AD_SITE_0, (arg0_1, 16))  # 'triton_poi_fused_add_0'

The trailing comment names the kernel (``repr``) so that a reader of the wrapper, and
``aoti-debug locate``, can tell which launch a hook belongs to.
"""

from __future__ import annotations

import functools

from ..format.protocol import PROTOCOL_VERSION, Site, SiteArg
from ..format.schema import INPUTS_KERNEL
from .emit import py_literal, py_tuple
from .launch import Launch, LaunchArg
from .manager import REUSE_LEVELS

RUNTIME_MODULE = "aoti_debug.runtime.hooks"
HANDLE = "_aoti_debug"
#: Module-level name of the n-th site constant of a wrapper.
SITE_PREFIX = "_AD_SITE_"


#: Levels that summarise values (the runtime library summarises CPU tensors).
STATS_LEVELS = ("save", "print", "stats")


def header_lines(level: str, sync: bool, graph_info: dict | None = None, native: str | None = None,
                 defers: bool = False) -> list[str]:
    """The wrapper's import of the runtime and its graph handle. ``native``: the runtime
    library's path ("" where it could not be built), passed at the levels that record stats.
    ``defers``: the wrapper calls ``pending()`` before whatever may write a tensor a side
    read (``Manager._pending``, ``PENDING_LINE``), so inside CUDA graphs its sides' stats
    launches may wait and go as one (``runtime/cuda_graphs``)."""
    info = tuple(sorted((graph_info or {}).items()))
    library = f"native={py_literal(native)}, " if native is not None else ""
    defer = "defers=True, " if defers else ""
    return [
        f"from {RUNTIME_MODULE} import graph as _aoti_debug_graph",
        f"{HANDLE} = _aoti_debug_graph(globals().get('__file__'), {py_literal(level)}, {py_literal(sync)}, "
        f"info={py_literal(info)}, {library}{defer}protocol={py_literal(PROTOCOL_VERSION)})",
    ]


def defers(manager, wrapper) -> bool:
    """Whether this wrapper has a pending line before everything that may write a tensor
    a side read: level stats, and its ``generate_return`` ours
    (``wrapper_lines.wrap_python_return``: the lines after the last launch are read too)."""
    returns = getattr(type(wrapper), "generate_return", None)
    return manager.defers(False) and getattr(returns, "__aoti_debug_original__", None) is not None


def _root(wrapper):
    get_root = getattr(wrapper, "get_root_graph", None)
    return get_root() if get_root is not None else wrapper


def ensure_header(manager, wrapper) -> None:
    root = _root(wrapper)
    if getattr(root, "_aoti_debug_header", False):
        return
    root._aoti_debug_header = True
    info = graph_info()
    kernels = str(manager.settings.kernels or "")
    if kernels:
        info["kernels"] = kernels  # run.json: the filter this graph recorded with
    level = manager.settings.level
    native = None
    if level in STATS_LEVELS:
        from .native_library import stats_library_path

        native = stats_library_path()  # built once per content hash, shared with cpp_wrapper
    for line in header_lines(level, manager.settings.sync, info, native, defers(manager, root)):
        root.imports.writeline(line)
    if level in REUSE_LEVELS:
        made_once = functools.cache(lambda: precompile_line(manager.precompile_layouts()))  # (buffers read again)
        root.imports.writeline(_later_line_class()(made_once))


def precompile_line(found: tuple[tuple, tuple] | None) -> str:
    """The module's line that starts, at import, the compiles of the stats kernels its
    launches' tensors need (``GraphHandle.precompile``), from ``Manager.precompile_layouts``
    (made when the wrapper is written out, every launch known); "" for none. A graph
    loaded from Inductor's cache runs it too."""
    if found is None:
        return ""
    layouts, devices = found
    return f"{HANDLE}.precompile({py_literal(layouts)}, {py_literal(devices)})"


#: Launches whose every arg is an expression of the call itself, so each exists (is
#: allocated) before the call: at level names their outputs are described too.
ARGS_EXIST_BEFORE = ("triton", "user_triton", "cpp")


def graph_info() -> dict:
    """What the graph being generated is: ``kind`` (forward, backward, inference) and
    the ``compile_id`` Dynamo gave it, for run.json."""
    from .inductor import current_graph_info

    return current_graph_info()


def site(launch: Launch, phases: tuple[str, ...], level: str) -> tuple[Site, list[LaunchArg], list[LaunchArg]]:
    """The launch's :class:`Site` (what runtime/hooks.py reads), and the args passed
    before and after it, in the site's order."""

    def meta(selected):
        return tuple(SiteArg(a.name, a.role, a.kind, a.expr, bool(a.uninitialised),
                             tuple((str(part), str(reason)) for part, reason in a.volatile),
                             tuple(a.reuse) if a.before else ()) for a in selected)

    if level == "names":
        # Metadata only (read when AOTI_DEBUG_NAMES_ARGS is set): the faulting launch
        # never reaches `done`, so everything it is given is passed before it. An extern
        # or fallback kernel's outputs do not exist yet there.
        before = [a for a in launch.args if a.before or launch.kind in ARGS_EXIST_BEFORE]
        after = []
    else:
        before = [a for a in launch.args if a.before] if "before" in phases else []
        after = [a for a in launch.args if a.after] if "after" in phases else []
    return (Site(launch.graph, launch.kernel, launch.op, meta(before), meta(after), launch.source,
                 provenance=launch.provenance), before, after)


def site_constant(wrapper, launch_site: Site) -> tuple[str, int]:
    """The name of the module constant holding ``launch_site``, defined in the header the
    first time (one per distinct site: both phases of a launch share it), and its number."""
    root = _root(wrapper)
    names = _site_names(root)
    found = names.get(launch_site)
    if found is None:
        number = len(names)
        found = names[launch_site] = (f"{SITE_PREFIX}{number}", number)
        # A NamedTuple is written as the plain tuple literal of its fields.
        root.imports.writeline(f"{found[0]} = {HANDLE}.site({py_literal(launch_site._replace(id=number))})")
    return found


def open_inputs(manager, wrapper, code, inputs) -> None:
    """Write the launch line of a graph's ``Inputs`` (``manager.Inputs``) here, before the
    graph's first launch, as a line whose text is made when the wrapper is written out
    (all launches known), and give it ``reserve``: the site's number, taken with its
    constant (a line of the header made the same way) when a launch first links to it."""
    ensure_header(manager, wrapper)
    level, phases = manager.settings.level, manager.settings.phases
    cls = _later_line_class()

    def constant() -> str:
        launch_site, _before, _after = site(inputs.launch(), phases, level)
        return f"{SITE_PREFIX}{inputs.site} = {HANDLE}.site({py_literal(launch_site._replace(id=inputs.site))})"

    def call() -> str:
        if not inputs.args:
            return ""
        name = f"{SITE_PREFIX}{inputs.site}"
        values = py_tuple([a.expr for a in inputs.args])
        return f"{HANDLE}.launch({name}, ()); {HANDLE}.done({name}, {values})  # {py_literal(INPUTS_KERNEL)}"

    def reserve() -> int:
        root = _root(wrapper)
        names = _site_names(root)
        number = len(names)
        names[("inputs", number)] = (f"{SITE_PREFIX}{number}", number)
        root.imports.writeline(cls(constant))
        return number

    inputs.reserve = reserve
    code.writeline(cls(call))


_LaterLine = None


def _later_line_class():
    """A wrapper line whose text ``make()`` gives when the wrapper's code is written out
    (Inductor's ``DeferredLineBase``: its buffers keep such lines and call them then)."""
    global _LaterLine
    if _LaterLine is None:
        from torch._inductor.utils import DeferredLineBase

        class LaterLine(DeferredLineBase):
            def __init__(self, make, prefix: str = ""):
                super().__init__(prefix + "#")  # (any text: an empty line would be dropped)
                self.make = make
                self.prefix = prefix

            def __call__(self) -> str:
                text = self.make()
                return self.prefix + text if text else ""

            def _new_line(self, line: str):  # (line: our "#" with another prefix)
                return type(self)(self.make, line[:-1] if line.endswith("#") else self.prefix)

        _LaterLine = LaterLine
    return _LaterLine


def _site_names(root) -> dict:
    """The root wrapper's site constants: key (a ``Site``, or the inputs site's) -> (name, number)."""
    names = getattr(root, "_aoti_debug_sites", None)
    if names is None:
        names = root._aoti_debug_sites = {}
    return names


def emit(manager, wrapper, launch: Launch, phase: str) -> list[str]:
    ensure_header(manager, wrapper)
    settings = manager.settings
    launch_site, before, after = site(launch, settings.phases, settings.level)
    name, launch.site = site_constant(wrapper, launch_site)
    call, args = ("launch", before) if phase == "before" else ("done", after)
    return [f"{HANDLE}.{call}({name}, {py_tuple([a.expr for a in args])})  # {py_literal(launch.kernel)}"]
