"""Launch descriptions from Inductor's IR: what each wrapper method call launches, with
every argument's expression, role (input/output/inout) and kind, for the emitters.

The functions here are called with the arguments of the wrapper method they describe
(``generate_kernel_call``, ``generate_extern_kernel_out``...; see :mod:`.patches`), when
the bracketing line is written out, never at append time.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from ..format.schema import canonical_op
from . import context
from .context import graph_name, is_cpp, safe
from .launch import Launch, LaunchArg, base_name
from .volatile import mark_volatile


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


def record_definition(wrapper, kernel_name: str, body: str, metadata: str | None) -> None:
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


def arg_kind(arg: Any, arg_type: Any) -> str:
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


def kernel_call_launch(wrapper, kernel_name, call_args, *pos, **kwargs) -> Launch:
    triton = kwargs.get("triton", pos[0] if pos else True)
    arg_types = kwargs.get("arg_types") or [None] * len(call_args)
    raw_keys = kwargs.get("raw_keys")
    raw_args = kwargs.get("raw_args")
    user = getattr(context.state, "user_kernel", None)
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
    cpp = is_cpp()
    args = []
    for i, arg in enumerate(call_args):
        arg_type = arg_types[i] if i < len(arg_types) else None
        text = _cpp_value(arg) if cpp else str(arg)
        if "=" in text and not text.startswith("("):
            text = text.split("=", 1)[1]
        param = params[i] if i < len(params) else ""
        k = arg_kind(text, arg_type)
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
    return Launch(kernel=str(kernel_name), op=str(kernel_name), kind=kind, args=args, graph=graph_name(), source=source)


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
                     dtype=str(node.get_dtype()).replace("torch.", "") if hasattr(node, "get_dtype") else None,
                     layout=_static_layout(node))


def _static_layout(node) -> tuple:
    """``LaunchArg.layout`` of an IR node: a buffer or a view of one (``ReinterpretView``:
    the buffer it reinterprets, in the buffer's dtype), with static sizes, strides and
    offset; ``()`` otherwise."""
    try:
        from torch._inductor.virtualized import V

        layout, buffer = node.get_layout(), node.get_name()
        if layout.dtype != V.graph.get_buffer(buffer).get_dtype():
            return ()  # a bitcast view: other elements than the buffer's
        return (str(buffer), tuple(int(v) for v in layout.size), tuple(int(v) for v in layout.stride),
                int(layout.offset))
    except Exception:  # no layout, no such buffer, a symbolic size (int() raises)
        return ()


def extern_out_launch(wrapper, node, *a, **k) -> Launch:
    kernel = node.get_kernel_name()
    args = [_tensor_arg(x, "input") for x in _flat_ir(node.inputs)]
    out = node.output_view if getattr(node, "output_view", None) is not None else node
    out_arg = _tensor_arg(out, "output")
    out_arg.name = node.get_name()
    args.append(out_arg)
    mark_volatile(args, getattr(node, "op_overload", None), tuple_output=False)
    return Launch(kernel=kernel, op=_op_name(node, kernel), kind="extern", args=args, graph=graph_name(),
                  source=_origins(node))


def _origins(node) -> str | None:
    try:
        names = sorted({o.name for o in node.origins})
        return ", ".join(names) if names else None
    except Exception:
        return None


def _mutated_names(node) -> set[str]:
    """Buffers a fallback/custom op writes in place (MutationOutput nodes, layouts)."""
    names = set(safe(node.get_mutation_names) or [])
    for mo in getattr(node, "mutation_outputs", None) or []:
        names.update(safe(mo.get_mutation_names) or [])
    return names


def fallback_launch(wrapper, node, *a, **k) -> Launch:
    kernel = node.get_kernel_name() if hasattr(node, "get_kernel_name") else str(getattr(node, "python_kernel_name", "?"))
    mutated = _mutated_names(node)
    args = []
    for x in _flat_ir(getattr(node, "inputs", [])):
        args.append(_tensor_arg(x, "inout" if _ir_name(x) in mutated else "input"))
    from torch._inductor import ir

    if not isinstance(getattr(node, "layout", None), ir.NoneLayout):
        outputs = getattr(node, "outputs", None)
        if is_cpp() and outputs:
            args.extend(_cpp_outputs(node.get_name(), outputs))
        elif is_cpp():
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
    mark_volatile(args, op_overload, tuple_output=multi)
    return Launch(kernel=kernel, op=op, kind=kind, args=args, graph=graph_name(), source=_origins(node))


def inplace_first_launch(wrapper, node, *a, **k) -> Launch:
    """scatter_/index_put_: the first input is updated in place."""
    kernel = node.get_kernel_name() if hasattr(node, "get_kernel_name") else str(getattr(node, "python_kernel_name", "?"))
    inputs = _flat_ir(node.inputs)
    args = [_tensor_arg(x, "inout" if i == 0 else "input") for i, x in enumerate(inputs)]
    return Launch(kernel=kernel, op=_op_name(node, kernel), kind="fallback", args=args, graph=graph_name(),
                  source=_origins(node))


def multi_out_launch(wrapper, node, *a, **k) -> Launch:
    kernel = node.get_kernel_name()
    args = [_tensor_arg(x, "input") for x in _flat_ir(node.inputs)]
    for o in node.out_variant_output_nodes:
        args.append(LaunchArg(name=o.get_name(), expr=o.get_name(), role="output", kind="tensor"))
    return Launch(kernel=kernel, op=_op_name(node, kernel), kind="extern", args=args, graph=graph_name(),
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


def runtime_lookup_launch(wrapper, buf_name, python_kernel_name, get_args, op_overload, raw_args, outputs, *a, **k):
    if is_cpp():
        # Custom ops reach the C++ wrapper here (not through generate_fallback_kernel as in
        # Python): take their in-place args from the schema, as fallback_launch does.
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
        mark_volatile(args, op_overload, tuple_output=len(op_overload._schema.returns) > 1)
    return Launch(kernel=str(python_kernel_name), op=op, kind="custom_op", args=args, graph=graph_name())


def static_input_device(name: str) -> str | None:
    """The device type (``cuda``, ``cpu``) of ``name`` where it is a constant of the graph
    being generated or a graph input at the same address call after call: a parameter or
    buffer, or a tensor marked static (``fw_metadata.static_input_indices``, by position
    among the graph's inputs, as Inductor's CUDA graphs read them; not for a backward
    graph, whose inputs those positions do not describe). None otherwise: a model input
    that may be new at every call, or nothing known."""
    try:
        import torch
        from torch._inductor.virtualized import V

        graph = V.graph
        constant = graph.constants.get(name)
        if constant is not None:
            return str(constant.device.type)
        node = graph.graph_inputs.get(name)
        if node is None or graph.is_backward:
            return None
        context = torch._guards.TracingContext.try_get()
        metadata = getattr(context, "fw_metadata", None)
        static = getattr(metadata, "static_input_indices", None) or ()
        if graph.graph_input_names.index(name) not in static:
            return None
        device = node.get_device()
        return None if device is None else str(device.type)
    except Exception:  # no graph being generated, an input without a device (a symint)
        return None
