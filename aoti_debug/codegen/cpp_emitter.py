"""C++-wrapper code for one launch (cpp_wrapper=True and AOTInductor).

Once per root wrapper, its header gets the runtime's interface and glue: under
AOTInductor a glue that calls the runtime object built once and linked into the package
(``cpp_runtime.linked_block``, ``native_object``), or where that cannot be linked the
runtime itself, the parts the level needs (``cpp_runtime.inline_block``); a JIT
cpp_wrapper module a glue that loads the runtime library built once
(``cpp_runtime.library_block``, ``native_library``). Each instrumented launch then gets
one line per phase, a block with a constant site and a call that passes the values
with their C++ types::

    { static constexpr ::aoti_debug_rt_1::Arg aoti_debug_args[] = {{"buf0", "inout", "tensor", "buf0", 0, 0, ""}};
      static constexpr ::aoti_debug_rt_1::Site aoti_debug_site = {"", "cpp_fused_relu_0", "cpp_fused_relu_0",
          ::aoti_debug_rt_1::schema::kStats, 0, 1, 1, aoti_debug_args, "", "before,after", __FILE__, __LINE__, "relu", "inference", "0/0"};
      ::aoti_debug_rt_1::launch(aoti_debug_site, {buf0}); }

(written on one line, so ``__LINE__`` is the launch's line for ``aoti-debug locate``).
An argument that is an expression (a reinterpreted view) is passed as a lazy value
(:func:`value_expr`).

As in the Python emitter, only inputs (and in-place args) are passed before a launch
and only outputs (and in-place args) after it. Every name and expression that lands
in a string literal goes through ``emit.cpp_string``.
"""

from __future__ import annotations

import logging
import re

from . import cpp_runtime, device_stats, native_library, native_object, python_emitter
from .cpp_runtime import LEVEL_CODES, NAMESPACE
from .emit import cpp_string
from .launch import Launch, LaunchArg

NS_PREFIX = f"::{NAMESPACE}"
log = logging.getLogger("aoti_debug")


def _root(wrapper):
    # C++ subgraphs are inlined into their parent's wrapper; a separate subgraph
    # wrapper (if a torch version makes one) still writes into its root's header.
    get_root = getattr(wrapper, "get_root_graph", None)
    try:
        return get_root() if get_root is not None else wrapper
    except Exception:
        return wrapper


def _aot_mode() -> bool:
    """Whether the graph being generated is an AOTInductor model (GraphLowering.aot_mode,
    torch 2.11 and 2.13) rather than a JIT cpp_wrapper module."""
    from torch._inductor.virtualized import V

    try:
        return bool(V.graph.aot_mode)
    except Exception:
        return False


def header_block(manager, device: str) -> str:
    """The runtime block for this graph's wrapper header. GPU wrappers at levels stats and
    print also get the stats kernels (``device_stats``): linked into an AOTInductor
    package with its runtime object, named by file for a JIT module; an inlined runtime
    gets none (its CUDA tensors' stats are computed on the host)."""
    level = manager.settings.level
    capability = device_stats.wanted(device, level)
    if _aot_mode():
        why = native_object.linkable(device)
        if why is None and native_object.object_path(level):
            stats = device_stats.object_name(capability) if capability is not None else None
            return cpp_runtime.linked_block(device, level, native_object.object_spec(native_object.variant(level)).name,
                                            stats=stats)
        log.debug("aoti_debug: the AOTInductor runtime is inlined into the wrapper: %s", why or "no object")
        return cpp_runtime.inline_block(device, level)
    stats = device_stats.pack_path(capability) if capability is not None else None
    return cpp_runtime.library_block(device, native_library.library_path() or "", stats=stats or "")


def ensure_header(manager, wrapper) -> None:
    """Put the runtime block into the wrapper's header once (the header is spliced in
    after the wrapper body is generated, ahead of it in the source)."""
    root = _root(wrapper)
    if getattr(root, "_aoti_debug_cpp_header", False):
        return
    root._aoti_debug_cpp_header = True
    device = str(getattr(root, "device", "cpu") or "cpu")
    root.header.splice(header_block(manager, device))


def call_end_line(wrapper) -> str | None:
    """The statement that ends a graph call in a C++ wrapper whose launches we
    instrumented (its root got our header), or None: the runtime writes the manifest
    lines the call's sides held (``native/manifest.h``)."""
    if not getattr(_root(wrapper), "_aoti_debug_cpp_header", False):
        return None
    return f"::{cpp_runtime.NAMESPACE}::call_end();"


def pending_line() -> str:
    """What a C++ wrapper calls before a line that may write a tensor whose stats wait
    (``Manager._pending``; ``native/entry.h``'s ``entry_pending``)."""
    from .manager import CPP_PENDING_CALL

    return f"::{cpp_runtime.NAMESPACE}{CPP_PENDING_CALL}"


def _arg_literal(a: LaunchArg, index: int, phase: str) -> str:
    fields = [*(cpp_string(x) for x in (a.name, a.role, a.kind, a.expr)), str(index),
              "1" if a.uninitialised else "0", cpp_string(a.volatile_reason(a.name) or "")]
    if a.reuse and phase == "before":  # (Arg's last two fields: no link by default)
        fields += [str(int(a.reuse[0])), str(int(a.reuse[1]))]
    return "{" + ", ".join(fields) + "}"


def python_indices(args: list[LaunchArg]) -> list[int]:
    """The record ``index`` the Python runtime gives each arg: it passes a fallback's
    returned tuple as one value (``buf2`` -> ``buf2[0]``, ``buf2[1]``), where the C++
    wrapper has one handle per element, so those share one index."""
    out, index, prev = [], -1, None
    for a in args:
        base = a.name.split("[", 1)[0] if "[" in a.name else None
        if base is None or base != prev:
            index += 1
        prev = base
        out.append(index)
    return out


#: A view as Inductor's C++ wrapper writes it (torch 2.11 and 2.13).
_VIEW_RE = re.compile(r"^wrap_with_raii_handle_if_needed\(reinterpret_tensor_wrapper\("
                      r"(?P<base>[A-Za-z_]\w*), (?P<ndim>\d+), (?P<sizes>[A-Za-z_]\w*), "
                      r"(?P<strides>[A-Za-z_]\w*), (?P<offset>[^,]+)\)\)$")


def value_expr(expr: str, views: bool) -> str:
    """An argument as the call site passes it: a name or a literal as it is; an expression
    that calls something (a view: ``wrap_with_raii_handle_if_needed(reinterpret_tensor_wrapper(...))``)
    as a lazy value the runtime evaluates when it reads it. Inline, each such expression
    would add a shim call, an error check and a cleanup to the wrapper's (large) function
    before and after the launch: the largest part of the C++ compile time the
    instrumentation added. ``views``: a view of a tensor handle is
    passed as plain data (``view(...)``); not under AOTInductor, whose stack-allocated
    tensors are no handles."""
    if "(" not in expr:
        return expr
    m = _VIEW_RE.match(expr) if views else None
    if m:
        return f"{NS_PREFIX}::view({m['base']}, {m['ndim']}, {m['sizes']}, {m['strides']}, {m['offset']})"
    return f"{NS_PREFIX}::lazy([&]() -> decltype(auto) {{ return {expr}; }})"


def level_constant(level: str) -> str:
    """The level as the generated C++ enum names it (``cpp_runtime`` makes
    ``schema::Level`` from ``config.LEVELS``): ``::aoti_debug_rt_1::schema::kStats``."""
    if level not in LEVEL_CODES:
        raise ValueError(f"no C++ runtime level {level!r}: one of {sorted(LEVEL_CODES)}")
    return f"{NS_PREFIX}::schema::{cpp_runtime.level_enum_name(level)}"


def site_number(wrapper, launch: Launch) -> int:
    """The launch's site number in its root wrapper (both phases share it): what records
    carry as ``site`` and ``sites.jsonl`` keys the provenance by."""
    if launch.site < 0 and wrapper is not None:
        root = _root(wrapper)
        launch.site = getattr(root, "_aoti_debug_site_count", 0)
        root._aoti_debug_site_count = launch.site + 1
    return launch.site


def site_line(manager, launch: Launch, phase: str, wrapper=None, values: list[str] | None = None) -> str:
    settings = manager.settings
    graph_info = python_emitter.graph_info()
    # The same selection as the Python wrapper's site (python_emitter.site): at level
    # names only metadata is read (AOTI_DEBUG_NAMES_ARGS), all of it before the launch.
    _site, before, after = python_emitter.site(launch, settings.phases, settings.level)
    args = before if phase == "before" else after
    ns = NS_PREFIX
    parts = ["{"]
    if args:
        literals = ", ".join(_arg_literal(a, i, phase) for a, i in zip(args, python_indices(args)))
        parts.append(f"static constexpr {ns}::Arg aoti_debug_args[] = {{{literals}}};")
    fields = [
        cpp_string(launch.graph),
        cpp_string(launch.kernel),
        cpp_string(launch.op),
        level_constant(settings.level),
        "1" if settings.sync else "0",
        str(len(set(python_indices(before)))),
        str(len(args)),
        "aoti_debug_args" if args else "nullptr",
        cpp_string(str(settings.kernels)),
        cpp_string(",".join(settings.phases)),
        "__FILE__",
        "__LINE__",
        cpp_string(launch.source or ""),
        cpp_string(graph_info.get("kind", "")),
        cpp_string(graph_info.get("compile_id", "")),
        str(site_number(wrapper, launch)),
        cpp_string(launch.provenance),
        "1" if manager.defers(True) else "0",  # Site::defers: the pending lines are written (Manager._pending)
    ]
    parts.append(f"static constexpr {ns}::Site aoti_debug_site = {{{', '.join(fields)}}};")
    call = "launch" if phase == "before" else "done"
    if values is None:
        views = not _aot_mode()
        values = [value_expr(a.expr, views) for a in args]
    parts.append(f"{ns}::{call}(aoti_debug_site, {{{', '.join(values)}}});")
    parts.append("}")
    return " ".join(parts)


def emit(manager, wrapper, launch: Launch, phase: str) -> list[str]:
    ensure_header(manager, wrapper)
    return [site_line(manager, launch, phase, wrapper)]


def input_view(expr: str, root: str, layout: tuple) -> bool:
    """Whether C++ ``expr`` is graph input ``root`` itself or a view of it whose layout
    is static (``LaunchArg.layout``): one that the graph's first launch can make too
    (:func:`open_inputs` spells it with arrays of its own; the wrapper's are declared
    where the view is used)."""
    if expr == root:
        return True
    m = _VIEW_RE.match(expr)
    return bool(m) and m["base"] == root and bool(layout) and layout[0] == root


def open_inputs(manager, wrapper, code, inputs) -> None:
    """``python_emitter.open_inputs`` for the C++ wrapper: its one line (both phases, the
    site constant inside), made when the wrapper is written; ``reserve`` the site's number."""
    ensure_header(manager, wrapper)
    views = not _aot_mode()

    def line() -> str:
        if not inputs.args:
            return ""
        launch = inputs.launch()
        arrays, values = [], []
        for k, a in enumerate(launch.args):
            expr = a.expr
            if a.layout and expr != a.layout[0]:  # a view: spelled with arrays declared here
                buffer, sizes, strides, offset = a.layout
                for name, numbers in ((f"aoti_debug_sizes_{k}", sizes), (f"aoti_debug_strides_{k}", strides)):
                    arrays.append(f"static constexpr int64_t {name}[] = {{{', '.join(f'{v}L' for v in numbers)}}};")
                expr = (f"wrap_with_raii_handle_if_needed(reinterpret_tensor_wrapper({buffer}, {len(sizes)}, "
                        f"aoti_debug_sizes_{k}, aoti_debug_strides_{k}, {offset}L))")
            values.append(value_expr(expr, views))
        return " ".join(["{", *arrays, site_line(manager, launch, "before", wrapper, []),
                         site_line(manager, launch, "after", wrapper, values), "}"])

    inputs.reserve = lambda: site_number(wrapper, Launch(kernel="", op="", kind="other", args=[]))
    code.writeline(python_emitter._later_line_class()(line))
