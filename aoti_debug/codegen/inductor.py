"""Every contact of aoti_debug with ``torch._inductor`` lives in this module.

How we plug in: Inductor's wrapper codegen appends one "line" per launch to
``wrapper.lines`` while it schedules (``generate_kernel_call``,
``generate_extern_kernel_out``, ``generate_fallback_kernel``...). We wrap those
methods so that each launch is bracketed by two lines of our own
(:class:`_InstrumentLine`) which turn into code only when the wrapper is
materialised, in the wrapper's language (Python or C++), with the expressions the
real call uses. The built-in ``DebugPrinterManager`` is replaced by our manager,
which keeps its interface but emits nothing there: everything goes through one path.

Checked on torch 2.13 (CPU) and 2.11 (GPU machine). The methods we wrap exist in both
(``KernelCallLine``/``ExternKernelOutLine`` wrapper-IR since the FX-wrapper refactor,
torch 2.8); ``generate_extern_kernel_multi_out`` exists from 2.13 only and is wrapped
where present. ``UserDefinedTritonKernel.arg_accesses`` (read/write sets) exists from
2.13; on 2.11 mutated args of user kernels are treated as in-place.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import threading
from typing import Any, Callable

import torch

from ..config import CompileSettings
from ..format.schema import canonical_op
from .launch import Launch, LaunchArg, base_name
from .manager import Manager

log = logging.getLogger("aoti_debug")

TORCH_VERSION = tuple(int(x) for x in re.findall(r"\d+", torch.__version__.split("+")[0])[:2])

#: (owner, attribute, original) of every patch, for uninstall.
_patches: list[tuple[Any, str, Any]] = []
_state = threading.local()
_settings: CompileSettings | None = None


# ---------------------------------------------------------------------------------------
# patching helpers
# ---------------------------------------------------------------------------------------
def _patch(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    original = owner.__dict__.get(name)
    if original is None:
        return
    replacement = make(original)
    replacement.__aoti_debug_original__ = original
    setattr(owner, name, replacement)
    _patches.append((owner, name, original))


@contextlib.contextmanager
def _outermost():
    """True only for the outermost wrapped call (subclass overrides call super())."""
    depth = getattr(_state, "depth", 0)
    _state.depth = depth + 1
    try:
        yield depth == 0
    finally:
        _state.depth = depth


def _manager_of(wrapper) -> Manager | None:
    m = getattr(wrapper, "_aoti_debug_manager", None)
    if m is None and _settings is not None and _settings.active:
        m = Manager(_settings)
        wrapper._aoti_debug_manager = m
    return m


def _is_cpp(wrapper) -> bool:
    from torch._inductor.virtualized import V

    return bool(getattr(V.graph, "cpp_wrapper", False))


def _graph_name() -> str:
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


def _make_line_class():
    from torch._inductor.codegen.wrapper import WrapperLine

    class _InstrumentLine(WrapperLine):
        """Placeholder in ``wrapper.lines``; becomes code when the wrapper is written."""

        def __init__(self, wrapper, manager: Manager, phase: str, state: dict):
            self.wrapper = wrapper
            self.manager = manager
            self.phase = phase
            self.state = state

        def codegen(self, code) -> None:
            try:
                if self.phase == "before":
                    launch = self.state["make"]()
                    if launch is not None and "graph" in self.state:
                        launch.graph = self.state["graph"]
                    self.state["launch"] = None if launch is None else self.manager.prepare(launch)
                launch = self.state.get("launch")
                if launch is None:
                    return
                lines = self.manager.emit(self.wrapper, launch, self.phase, _is_cpp(self.wrapper))
                for text in lines:
                    code.writeline(text)
            except Exception as e:  # never break the user's compile
                _warn_codegen(e)

        def codegen_fx(self, converter):
            return lambda line: None

        def __repr__(self) -> str:
            return f"<aoti_debug {self.phase}>"

    return _InstrumentLine


_LineClass = None
_warned_codegen = False


def _warn_codegen(e: Exception) -> None:
    global _warned_codegen
    if not _warned_codegen:
        _warned_codegen = True
        log.warning("aoti_debug: could not instrument a launch (%s: %s); it runs uninstrumented", type(e).__name__, e)


def _bracket(original, make_launch: Callable[..., Launch | None]):
    """Wrap an append-time wrapper method with our before/after lines."""

    @functools.wraps(original)
    def wrapped(self, *args, **kwargs):
        with _outermost() as outer:
            manager = _manager_of(self) if outer else None
            if manager is None:
                return original(self, *args, **kwargs)
            # The launch is described when the line is written out (later); keep the
            # context that only exists now (the user kernel being scheduled).
            user = getattr(_state, "user_kernel", None)
            state = {"make": lambda: _with_user_kernel(user, make_launch, self, *args, **kwargs), "cpp": _is_cpp(self)}
            if state["cpp"]:
                # The C++ wrapper inlines subgraphs into its parent and writes every
                # line out under the root graph: take the subgraph label now.
                state["graph"] = _graph_name()
            self.writeline(_LineClass(self, manager, "before", state))
            result = original(self, *args, **kwargs)
            self.writeline(_LineClass(self, manager, "after", state))
            return result

    return wrapped


def _with_user_kernel(user, fn, *args, **kwargs):
    previous = getattr(_state, "user_kernel", None)
    _state.user_kernel = user
    try:
        return _safe(fn, *args, **kwargs)
    finally:
        _state.user_kernel = previous


def _safe(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        _warn_codegen(e)
        return None


# ---------------------------------------------------------------------------------------
# Launch descriptions from Inductor's data
# ---------------------------------------------------------------------------------------
def _role_from_param(param: str) -> str | None:
    if param.startswith("in_out_ptr"):
        return "inout"
    if param.startswith("out_ptr"):
        return "output"
    if param.startswith("in_ptr"):
        return "input"
    return None


_DEF_RE = re.compile(r"(?:\bdef\s+(\w+)|\bvoid\s+(\w+))\s*\(")


def parse_params(source: str) -> list[str]:
    """Parameter names of the first ``def f(...)`` or ``void f(...)`` in kernel source.

    Triton constexpr params are dropped (they are not passed at the call site).
    """
    m = _DEF_RE.search(source)
    if not m:
        return []
    depth, i, start = 1, m.end(), m.end()
    while i < len(source) and depth:
        depth += {"(": 1, ")": -1}.get(source[i], 0)
        i += 1
    params = []
    for part in source[start : i - 1].split(","):
        part = part.strip()
        if not part or "constexpr" in part:
            continue
        part = part.split("=")[0].split(":")[0].strip()
        ident = re.findall(r"[A-Za-z_]\w*", part)
        if ident:
            params.append(ident[-1])
    return params


_SOURCE_RE = re.compile(r"#\s*(?:Topologically Sorted )?Source Nodes?:\s*(.*)")


def _record_definition(wrapper, kernel_name: str, body: str, metadata: str | None) -> None:
    defs = wrapper.__dict__.setdefault("_aoti_debug_defs", {})
    source = None
    for text in (metadata or "", body):
        m = _SOURCE_RE.search(text)
        if m:
            source = m.group(1).strip()
            break
    defs[str(kernel_name)] = (parse_params(body), source)


def _root_defs(wrapper) -> dict:
    w = wrapper
    while True:
        defs = w.__dict__.get("_aoti_debug_defs")
        if defs is not None or getattr(w, "parent_wrapper", None) is None:
            return defs or {}
        w = w.parent_wrapper


_LITERAL_RE = re.compile(r"-?\d+[uUlL]*|-?\d+(\.\d*)?([eE][-+]?\d+)?")


def _arg_kind(arg: Any, arg_type: Any) -> str:
    if isinstance(arg_type, torch.dtype) or (isinstance(arg_type, str) and arg_type.rstrip().endswith("*")):
        return "tensor"  # Triton args carry a dtype, C++ kernel args a pointer type
    text = str(arg)
    if _LITERAL_RE.fullmatch(text) or text in ("True", "False", "true", "false"):
        return "scalar"  # a literal, also as the C++ printer writes one ("2048L")
    if arg_type is not None and arg_type in (float, bool):
        return "scalar"
    if arg_type is not None or re.fullmatch(r"[a-z]+\d+", text):
        return "symint"
    return "unknown"


def _ir_name(node: Any) -> str | None:
    try:
        return node.get_name()
    except Exception:
        return None


def _kernel_call_launch(wrapper, kernel_name, call_args, *pos, **kwargs) -> Launch:
    triton = kwargs.get("triton", pos[0] if pos else True)
    arg_types = kwargs.get("arg_types") or [None] * len(call_args)
    raw_keys = kwargs.get("raw_keys")
    raw_args = kwargs.get("raw_args")
    user = getattr(_state, "user_kernel", None)
    params, source = _root_defs(wrapper).get(str(kernel_name), ([], None))
    if raw_keys and len(raw_keys) == len(call_args):
        params = [k or "" for k in raw_keys]
    kind = "user_triton" if user is not None else ("triton" if triton else "cpp")
    mutated: set[str] = set()
    read: set[str] | None = None
    if user is not None:
        mutated = _mutated_names(user)
        for buf in getattr(user, "mutable_args", None) or []:
            mutated.add(_ir_name(buf) or "")
        accesses = getattr(user, "arg_accesses", None)  # torch >= 2.13
        if accesses is not None:
            try:
                read = {d.name for d in accesses.read_writes.reads}
            except Exception:
                read = None
        fn = getattr(user.get_kernel_and_metadata()[0], "fn", None) if hasattr(user, "get_kernel_and_metadata") else None
        if fn is not None:
            source = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"
    cpp = _is_cpp(wrapper)
    args = []
    for i, arg in enumerate(call_args):
        arg_type = arg_types[i] if i < len(arg_types) else None
        text = _cpp_value(arg) if cpp else str(arg)
        if "=" in text and not text.startswith("("):
            text = text.split("=", 1)[1]
        param = params[i] if i < len(params) else ""
        k = _arg_kind(text, arg_type)
        if k == "tensor" and re.match(r"^(workspace|semaphore)", text):
            continue
        role = _role_from_param(param)
        if user is not None and k == "tensor":
            raw = raw_args[i] if raw_args and i < len(raw_args) else None
            bname = _ir_name(raw) or base_name(text)
            if bname in mutated or param in mutated:
                role = "output" if read is not None and bname not in read and param not in read else "inout"
            else:
                role = "input"
        if role is None:
            role = "input" if k != "tensor" else "inout"
        name = base_name(text) if k == "tensor" else (param or text)
        if isinstance(arg_type, torch.dtype):
            dtype = str(arg_type).replace("torch.", "")
        elif isinstance(arg_type, str):
            dtype = arg_type.replace("const ", "").replace("*", "").strip()
        else:
            dtype = getattr(arg_type, "__name__", None) if isinstance(arg_type, type) else None
        args.append(LaunchArg(name=name, expr=text, role=role, kind=k, dtype=dtype))
    return Launch(kernel=str(kernel_name), op=str(kernel_name), kind=kind, args=args, graph=_graph_name(), source=source)


def _cpp_value(arg: Any) -> str:
    """A C++ expression for a kernel call arg that Inductor passes as a Python value (the
    GPU wrapper converts them in ``prepare_triton_wrapper_args``; we see them before)."""
    if isinstance(arg, str):
        return arg
    if arg is None:
        return "nullptr"
    if isinstance(arg, bool):
        return "true" if arg else "false"
    if isinstance(arg, int):
        return str(arg)
    if isinstance(arg, float):
        if arg != arg:
            return "std::numeric_limits<double>::quiet_NaN()"
        if arg in (float("inf"), float("-inf")):
            return ("" if arg > 0 else "-") + "std::numeric_limits<double>::infinity()"
        return repr(arg)
    try:
        import sympy

        if isinstance(arg, sympy.Expr):
            from torch._inductor.codegen.cpp_utils import cexpr
            from torch._inductor.virtualized import V

            return cexpr(V.graph.sizevars.simplify(arg))
    except Exception:
        pass
    return str(arg)  # SymbolicCallArg and friends print as their C++ variable


def _cpp_outputs(node_name: str, outputs) -> list[LaunchArg]:
    """C++ fallback outputs (the handles Inductor declares after the call), named as the
    Python runtime names the tuple the op returns (``buf2[0]``, ``buf2[1]``) so that the
    two wrappers' records align. MutationOutputs declare no variable and are skipped:
    the Python runtime records only the returned value too."""
    from torch._inductor import ir

    args = []
    for o in _flat_ir(outputs or []):
        if isinstance(o, ir.MutationOutput):
            continue
        indices = getattr(o, "indices", None) or []
        suffix = "".join(f"[{i}]" for _t, i in indices if isinstance(i, int))
        args.append(LaunchArg(name=f"{node_name}{suffix}", expr=o.get_name(), role="output", kind="tensor"))
    return args


def _cpp_alloc_declares_output(node) -> bool:
    """Whether ``generate_c_shim_extern_kernel_alloc`` leaves a handle named after the node
    (in-place-view ops, and the two c10d ops whose result it deletes, leave none)."""
    op = getattr(node, "op_overload", None)
    if isinstance(op, torch._ops.OpOverload) and torch.Tag.inplace_view in op.tags:
        return False
    return getattr(node, "python_kernel_name", None) not in (
        "torch.ops._c10d_functional.all_reduce_.default",
        "torch.ops._c10d_functional.wait_tensor.default",
    )


def _op_name(node: Any, kernel: str) -> str:
    op = getattr(node, "op_overload", None)
    if isinstance(op, torch._ops.OpOverload):
        return f"{op.namespace}.{op._schema.name.split('::')[-1]}"
    if isinstance(op, torch._ops.OpOverloadPacket):
        return f"{op._qualified_op_name.replace('::', '.')}"
    python_name = getattr(node, "python_kernel_name", None)
    return canonical_op(python_name or kernel)


#: Return names that carry RNG state or nothing at all, whatever the inputs: the seeds
#: and offsets of the SDPA variants (efficient, flash, cuDNN; torch 2.11 and 2.13 schemas).
_VOLATILE_RETURNS = {
    "philox_seed": "RNG seed",
    "philox_offset": "RNG offset",
    "rng_state": "RNG state",
    "unused": "unused output",
    "debug_attn_mask": "debug output (filled only with return_debug_mask)",
}


def _volatile_returns(op: Any) -> dict[int, str]:
    """Positions of ``op``'s returns that are nondeterministic by contract, with why.

    Named RNG returns (``philox_seed``...) are volatile; an op tagged
    ``nondeterministic_seeded`` whose returns have no names (``randint`` making
    Inductor's dropout seeds, ``rand``, ``bernoulli``) returns random values throughout.
    """
    if not isinstance(op, torch._ops.OpOverload):
        return {}
    returns = op._schema.returns
    name = f"{op.namespace}.{op._schema.name.split('::')[-1]}"
    out = {i: f"{_VOLATILE_RETURNS[r.name]} of {name}" for i, r in enumerate(returns) if r.name in _VOLATILE_RETURNS}
    if not out and torch.Tag.nondeterministic_seeded in op.tags and not any(r.name for r in returns):
        out = {i: f"random values of {name} (nondeterministic_seeded)" for i in range(len(returns))}
    return out


def _mark_volatile(args: list[LaunchArg], op: Any, tuple_output: bool) -> None:
    """Put the volatile returns of ``op`` on its output args: one arg per return (C++,
    named ``buf7[2]``), or one arg holding the returned tuple (Python, ``buf7``)."""
    volatile = _volatile_returns(op)
    if not volatile:
        return
    outputs = [a for a in args if a.role == "output"]
    for a in outputs:
        if "[" in a.name:
            pos = a.name[a.name.index("[") + 1 : a.name.index("]")]
            if pos.isdigit() and int(pos) in volatile:
                a.volatile = (("", volatile[int(pos)]),)
        elif tuple_output:
            a.volatile = tuple((f"[{i}]", why) for i, why in sorted(volatile.items()))
        elif 0 in volatile:
            a.volatile = (("", volatile[0]),)


def _flat_ir(items) -> list:
    out = []
    for x in items:
        if isinstance(x, (list, tuple)):
            out.extend(_flat_ir(x))
        elif x is not None and hasattr(x, "codegen_reference"):
            out.append(x)
    return out


def _ref(node) -> str:
    return node.codegen_reference()


def _tensor_arg(node, role: str) -> LaunchArg:
    expr = _ref(node)
    return LaunchArg(name=_ir_name(node) or base_name(expr), expr=expr, role=role, kind="tensor",
                     dtype=str(node.get_dtype()).replace("torch.", "") if hasattr(node, "get_dtype") else None)


def _extern_out_launch(wrapper, node, *a, **k) -> Launch:
    kernel = node.get_kernel_name()
    args = [_tensor_arg(x, "input") for x in _flat_ir(node.inputs)]
    out = node.output_view if getattr(node, "output_view", None) is not None else node
    out_arg = _tensor_arg(out, "output")
    out_arg.name = node.get_name()
    args.append(out_arg)
    _mark_volatile(args, getattr(node, "op_overload", None), tuple_output=False)
    return Launch(kernel=kernel, op=_op_name(node, kernel), kind="extern", args=args, graph=_graph_name(),
                  source=_origins(node))


def _origins(node) -> str | None:
    try:
        names = sorted({o.name for o in node.origins})
        return ", ".join(names) if names else None
    except Exception:
        return None


def _mutated_names(node) -> set[str]:
    """Buffers a fallback/custom op writes in place (MutationOutput nodes, layouts)."""
    names = set(_safe(node.get_mutation_names) or [])
    for mo in getattr(node, "mutation_outputs", None) or []:
        names.update(_safe(mo.get_mutation_names) or [])
    return names


def _fallback_launch(wrapper, node, *a, **k) -> Launch:
    kernel = node.get_kernel_name() if hasattr(node, "get_kernel_name") else str(getattr(node, "python_kernel_name", "?"))
    mutated = _mutated_names(node)
    args = []
    for x in _flat_ir(getattr(node, "inputs", [])):
        args.append(_tensor_arg(x, "inout" if _ir_name(x) in mutated else "input"))
    from torch._inductor import ir

    if not isinstance(getattr(node, "layout", None), ir.NoneLayout):
        outputs = getattr(node, "outputs", None)
        if _is_cpp(wrapper) and outputs:
            args.extend(_cpp_outputs(node.get_name(), outputs))
        elif _is_cpp(wrapper):
            if _cpp_alloc_declares_output(node):
                name = node.get_name()
                args.append(LaunchArg(name=name, expr=name, role="output", kind="tensor"))
        else:
            name = node.get_name()
            args.append(LaunchArg(name=name, expr=name, role="output", kind="unknown"))
    op = _op_name(node, kernel)
    kind = "fallback" if op.startswith(("aten.", "prims.")) else "custom_op"
    op_overload = getattr(node, "op_overload", None)
    multi = isinstance(op_overload, torch._ops.OpOverload) and len(op_overload._schema.returns) > 1
    _mark_volatile(args, op_overload, tuple_output=multi)
    return Launch(kernel=kernel, op=op, kind=kind, args=args, graph=_graph_name(), source=_origins(node))


def _inplace_first_launch(wrapper, node, *a, **k) -> Launch:
    """scatter_/index_put_: the first input is updated in place."""
    kernel = node.get_kernel_name() if hasattr(node, "get_kernel_name") else str(getattr(node, "python_kernel_name", "?"))
    inputs = _flat_ir(node.inputs)
    args = [_tensor_arg(x, "inout" if i == 0 else "input") for i, x in enumerate(inputs)]
    return Launch(kernel=kernel, op=_op_name(node, kernel), kind="fallback", args=args, graph=_graph_name(),
                  source=_origins(node))


def _multi_out_launch(wrapper, node, *a, **k) -> Launch:
    kernel = node.get_kernel_name()
    args = [_tensor_arg(x, "input") for x in _flat_ir(node.inputs)]
    for o in node.out_variant_output_nodes:
        args.append(LaunchArg(name=o.get_name(), expr=o.get_name(), role="output", kind="tensor"))
    return Launch(kernel=kernel, op=_op_name(node, kernel), kind="extern", args=args, graph=_graph_name(),
                  source=_origins(node))


def _written_args(op_overload, raw_args) -> set[int]:
    """Positions of ``raw_args`` that the op writes in place. The C++ wrapper passes the
    exported args (``FallbackKernel.export_extern_kernel_node``: positional, then kwargs in
    schema order), which line up with the schema's arguments."""
    schema = getattr(op_overload, "_schema", None)
    if schema is None:
        return set()
    return {i for i, a in enumerate(schema.arguments)
            if i < len(raw_args) and a.alias_info is not None and a.alias_info.is_write}


def _runtime_lookup_launch(wrapper, buf_name, python_kernel_name, get_args, op_overload, raw_args, outputs, *a, **k):
    if _is_cpp(wrapper):
        # Custom ops reach the C++ wrapper here (not through generate_fallback_kernel as in
        # Python): take their in-place args from the schema, as _fallback_launch does.
        written = _written_args(op_overload, raw_args)
        args = [_tensor_arg(x, "inout" if i in written else "input")
                for i, arg in enumerate(raw_args) for x in _flat_ir([arg])]
        args.extend(_cpp_outputs(str(buf_name), outputs))
    else:
        args = [_tensor_arg(x, "input") for x in _flat_ir(raw_args)]
        args.append(LaunchArg(name=str(buf_name), expr=str(buf_name), role="output", kind="unknown"))
    op = canonical_op(str(python_kernel_name))
    if isinstance(op_overload, torch._ops.OpOverload):
        op = f"{op_overload.namespace}.{op_overload._schema.name.split('::')[-1]}"
        _mark_volatile(args, op_overload, tuple_output=len(op_overload._schema.returns) > 1)
    return Launch(kernel=str(python_kernel_name), op=op, kind="custom_op", args=args, graph=_graph_name())


# ---------------------------------------------------------------------------------------
# install / uninstall
# ---------------------------------------------------------------------------------------
def _wrapper_classes() -> list[type]:
    from torch._inductor.codegen import wrapper as w

    classes: list[type] = [w.PythonWrapperCodegen]
    for modname, clsnames in (
        ("torch._inductor.codegen.cpp_wrapper_cpu", ("CppWrapperCpu",)),
        ("torch._inductor.codegen.cpp_wrapper_cpu_array_ref", ("CppWrapperCpuArrayRef",)),
        ("torch._inductor.codegen.cpp_wrapper_gpu", ("CppWrapperGpu",)),
    ):
        try:
            mod = __import__(modname, fromlist=["x"])
        except Exception as e:  # e.g. a build without one of the backends
            log.debug("aoti_debug: skipping %s: %s", modname, e)
            continue
        classes.extend(getattr(mod, c) for c in clsnames if hasattr(mod, c))
    return classes


_BRACKETS: dict[str, Callable] = {
    "generate_kernel_call": _kernel_call_launch,
    "generate_extern_kernel_out": _extern_out_launch,
    "generate_extern_kernel_alloc": _fallback_launch,
    "generate_fallback_kernel": _fallback_launch,
    "generate_scatter_fallback": _inplace_first_launch,
    "generate_index_put_fallback": _inplace_first_launch,
    "generate_extern_kernel_multi_out": _multi_out_launch,  # torch >= 2.13
    "generate_fallback_kernel_with_runtime_lookup": _runtime_lookup_launch,
}


def _wrap_define_kernel(original):
    @functools.wraps(original)
    def define_kernel(self, kernel_name, kernel_body, metadata=None, *args, **kwargs):
        if _settings is not None and _settings.active:
            try:
                _record_definition(self, kernel_name, str(kernel_body), metadata)
            except Exception as e:
                _warn_codegen(e)
        return original(self, kernel_name, kernel_body, metadata, *args, **kwargs)

    return define_kernel


def _wrap_init(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if _settings is not None and _settings.active:
            # Mute the built-in printer: all launches are instrumented by our lines.
            self.debug_printer = _manager_of(self)

    return __init__


def _wrap_user_kernel_codegen(original):
    @functools.wraps(original)
    def codegen(self, wrapper, *args, **kwargs):
        previous = getattr(_state, "user_kernel", None)
        _state.user_kernel = self
        try:
            return original(self, wrapper, *args, **kwargs)
        finally:
            _state.user_kernel = previous

    return codegen


def install(settings: CompileSettings) -> None:
    """Install the patches (idempotent) and make ``settings`` the active ones."""
    global _settings, _LineClass
    _settings = settings
    _update_cache_tag(settings)
    if _patches:
        return
    _LineClass = _make_line_class()
    for cls in _wrapper_classes():
        _patch(cls, "__init__", _wrap_init)
        _patch(cls, "define_kernel", _wrap_define_kernel)
        for name, make_launch in _BRACKETS.items():
            _patch(cls, name, lambda orig, ml=make_launch: _bracket(orig, ml))
    from torch._inductor import ir

    for name in ("codegen", "_codegen"):
        _patch(ir.UserDefinedTritonKernel, name, _wrap_user_kernel_codegen)
    _install_cudagraph_guard()
    _install_alias_tracking()


def _install_alias_tracking() -> None:
    """Follow ``bufB = bufA  # reuse``, ``bufB = bufA[0]`` and ``bufB =
    reinterpret_tensor(bufA, ...)  # alias`` so that the manager knows which storage
    each buffer name is (ReuseLine / MultiOutputLine / ReinterpretLine)."""
    from torch._inductor.codegen import wrapper as w

    def make(names):
        def wrap(original):
            @functools.wraps(original)
            def codegen(self, code):
                original(self, code)
                manager = getattr(self.wrapper, "_aoti_debug_manager", None)
                if manager is not None:
                    try:
                        new, old = names(self)
                        manager.alias(new, old)
                    except Exception as e:
                        _warn_codegen(e)

            return codegen

        return wrap

    _patch(w.ReuseLine, "codegen", make(lambda line: (line.reused_as.get_name(), line.node.get_name())))
    _patch(w.MultiOutputLine, "codegen", make(lambda line: (line.result_name, line.arg_name)))
    # ``buf0 = reinterpret_tensor(buf2, ...)  # alias``: a NonOwningLayout view (Inductor's
    # torch.cat into one buffer), ReinterpretLine in torch 2.11 and 2.13.
    _patch(w.ReinterpretLine, "codegen", make(lambda line: (line.reused_as.get_name(), line.node.get_name())))


def uninstall() -> None:
    """Undo every patch (idempotent); generated code goes back to byte-identical."""
    global _settings
    _settings = None
    _update_cache_tag(None)
    while _patches:
        owner, name, original = _patches.pop()
        setattr(owner, name, original)


def installed() -> bool:
    return bool(_patches)


def active_settings() -> CompileSettings | None:
    return _settings


def _update_cache_tag(settings: CompileSettings | None) -> None:
    """Put our settings into ``torch.compiler.config.cache_key_tag``.

    The tag is part of the FX graph cache and AOTAutograd cache keys (torch >= 2.6), so
    an artifact compiled with other instrumentation is never reused across processes.
    The user's own tag is kept in front of ours.
    """
    import torch.compiler.config as cconfig

    current = cconfig.cache_key_tag
    user_tag = current.split("|aoti_debug:", 1)[0] if "|aoti_debug:" in current else current
    if settings is None or not settings.active:
        cconfig.cache_key_tag = user_tag
        return
    cconfig.cache_key_tag = f"{user_tag}|{settings.cache_tag()}:{_code_fingerprint()}"


@functools.lru_cache(maxsize=1)
def _code_fingerprint() -> str:
    """Changes with anything that shapes the code we emit or the protocol it speaks: the
    package version and every source file of ``codegen`` and ``runtime`` (emitters,
    C++ runtime, the hooks that read the sites), so that a changed aoti_debug never
    reuses a cached wrapper generated by another."""
    import hashlib
    import os

    from .. import __version__

    digest = hashlib.sha1(__version__.encode())
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for room in ("codegen", "runtime"):
        folder = os.path.join(package, room)
        for name in sorted(os.listdir(folder)):
            if name.endswith((".py", ".h")):
                with open(os.path.join(folder, name), "rb") as f:
                    digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()[:10]


def reset_dynamo() -> None:
    """Drop Dynamo's in-process compiled frames so that nothing compiled under other
    instrumentation settings runs again (Dynamo does not guard on our settings)."""
    try:
        import torch._dynamo

        torch._dynamo.reset()
    except Exception as e:  # pragma: no cover
        log.warning("aoti_debug: torch._dynamo.reset() failed: %s", e)


def _install_cudagraph_guard() -> None:
    """Mark instrumented graphs as not cudagraph-able, with the reason logged.

    Inductor decides after codegen, reading ``V.graph.disable_cudagraphs_reason``
    (compile_fx, both 2.11 and 2.13); our ``__init__`` patch runs during codegen of
    every instrumented graph and sets it.
    """
    from torch._inductor.graph import GraphLowering

    def make(original):
        @functools.wraps(original)
        def codegen(self, *args, **kwargs):
            if _settings is not None and _settings.active and not getattr(self, "disable_cudagraphs_reason", None):
                self.disable_cudagraphs_reason = (
                    f"aoti_debug instrumentation (level {_settings.level}) copies values to the host "
                    "around every launch; instrumented graphs run without CUDA graphs"
                )
            return original(self, *args, **kwargs)

        return codegen

    for name in ("codegen", "codegen_with_cpp_wrapper"):
        _patch(GraphLowering, name, make)
