"""What a launch was made from: the post-grad FX nodes fused into it, their original ATen
ops, the module path and the user's source line, and which FX node each output value
materialises (format/provenance.py holds the data and its JSON form).

Read from Inductor's IR while the wrapper is generated: ``V.graph.try_get_buffer(name)``
gives a buffer, its ``origins`` the FX nodes lowered into it and ``get_origin_node()``
the node whose value it is (torch 2.11 and 2.13); each node's ``meta`` holds
``original_aten``, ``nn_module_stack``, ``stack_trace`` and ``from_node`` (the Dynamo
graph node it was decomposed from). Everything here is best effort: a buffer or a
field Inductor does not have leaves that part out, never the launch.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..format.provenance import Provenance, ValueOrigin, module_of, module_raw_of, source_line
from .launch import Launch, base_name


def _graph():
    from torch._inductor.virtualized import V

    try:
        return V.graph
    except Exception:
        return None


def _buffer(graph, name: str):
    try:
        return graph.try_get_buffer(name)
    except Exception:
        return None


def _origins(buf) -> list:
    try:
        return [n for n in buf.origins if getattr(n, "op", None) == "call_function"]
    except Exception:
        return []


def _origin_node(buf, origins: list):
    """``(node, exact)``: the FX node whose value the buffer holds, and whether Inductor
    said so. Inductor sets ``origin_node`` on the buffer a node's lowering returns (its
    value); a buffer made on the way (the sum a ``mean`` divides later, an attention
    kernel's mask) has none and is named here after the last of its origins in graph
    order, not ``exact``: it does not hold that node's value. A tuple-valued node (an
    extern kernel with several outputs) holds its values in its elements: exact."""
    try:
        node = buf.get_origin_node()
    except Exception:
        node = None
    if node is None:
        try:
            data = buf.data  # a TensorBox/StorageBox around the buffer
            node = data.get_origin_node()
        except Exception:
            node = None
    if node is not None:
        return node, True
    if not origins:
        return None, False
    order = _order(origins)
    node = max(origins, key=lambda n: order.get(n, -1))
    val = (getattr(node, "meta", {}) or {}).get("val")
    return node, isinstance(val, (tuple, list))


def _cached(fx_graph, name: str, build):
    """``build(fx_graph)``, computed once per FX graph: the post-grad graph is final while
    its wrapper is generated, and every launch of it asks (once per launch it would cost
    a walk over the whole graph)."""
    cache = fx_graph.__dict__.setdefault("_aoti_debug_index", {})
    if name not in cache:
        cache[name] = build(fx_graph)
    return cache[name]


def _order(nodes: Iterable) -> dict:
    """Node -> its position in its FX graph (that of the first of ``nodes`` that has one)."""
    for n in nodes:
        fx_graph = getattr(n, "graph", None)
        if fx_graph is not None:
            return _cached(fx_graph, "order", lambda g: {m: i for i, m in enumerate(g.nodes)})
    return {}


def _aten(node) -> str:
    meta = getattr(node, "meta", {}) or {}
    op = meta.get("original_aten")
    return str(op if op is not None else getattr(node, "target", ""))


def _instance(node) -> str:
    """The Dynamo graph node this node was decomposed from (one call of one ATen op
    decomposes into several post-grad nodes that share it)."""
    chain = (getattr(node, "meta", {}) or {}).get("from_node") or []
    while chain:
        first = chain[0]
        parents = getattr(first, "from_node", None) or []
        if not parents:
            return str(getattr(first, "name", "") or "")
        chain = parents
    return ""


def value_origin(node, output: bool = False, exact: bool = True) -> ValueOrigin:
    """Where ``node`` came from; ``output``: it is a value a launch makes (then say
    whether it is a step inside its instance's decomposition, or, not ``exact``, a
    buffer made while lowering it that does not hold its value)."""
    meta = getattr(node, "meta", {}) or {}
    source, code = source_line(meta.get("stack_trace") or "")
    instance = _instance(node)
    inner = output and bool(instance) and (not exact or _inner(node, instance))
    module, raw = module_of(meta), module_raw_of(meta)
    return ValueOrigin(node=str(node.name), aten=_aten(node), module=module, instance=instance, source=source,
                       code=code, inner=inner, module_raw=raw if raw != module else "")


def _inner(node, instance: str, depth: int = 0) -> bool:
    """Whether only nodes decomposed from the same Dynamo node use ``node``: a step inside
    that node's decomposition (``cat`` inside ``torch.diff``, the mean inside a LayerNorm),
    not the value the Dynamo node returns. A tuple-valued node (an attention op) is inner
    when each ``getitem`` that takes it apart is."""
    import operator

    users = list(getattr(node, "users", ()) or ())
    if not users or depth > 8:
        return False
    for u in users:
        if getattr(u, "op", None) == "output":
            return False
        target = getattr(u, "target", None)
        if target is operator.getitem or (_instance(u) == instance and str(target).startswith(_RESHAPES)):
            # The same value taken apart or reshaped (a linear's mm, then its view to the
            # batch shape): inner when what it becomes is.
            if not _inner(u, instance, depth + 1):
                return False
        elif _instance(u) != instance:
            return False
    return True


#: Ops that give the same elements in the same order under another shape.
_RESHAPES = ("aten.view.", "aten._unsafe_view.", "aten.reshape.", "aten.squeeze.", "aten.unsqueeze.",
             "aten.alias.")


def describe(launch: Launch) -> Provenance | None:
    """Provenance of ``launch`` in the graph being generated; None outside codegen, when
    Inductor says nothing about any of its values, or when reading it failed (the launch
    is instrumented all the same)."""
    try:
        return _describe(launch)
    except Exception:
        return None


def _describe(launch: Launch) -> Provenance | None:
    graph = _graph()
    if graph is None:
        return None
    fused: list[Any] = []
    outputs: dict[str, ValueOrigin] = {}
    output_nodes: list[Any] = []
    updates: dict[str, str] = {}  # arg -> the node whose value the launch writes into that graph input
    for a in launch.args:
        if not a.after:
            continue
        name = base_name(a.expr) if a.expr else a.name
        buf = _buffer(graph, name)
        if buf is None:
            buf = _buffer(graph, a.name.split("[", 1)[0])
        written = _written_into(graph, name)
        if written is not None:  # a graph input the launch updates in place
            outputs[a.name] = value_origin(written, output=True)
            output_nodes.append(written)
            updates[a.name] = str(written.name)
            continue
        if buf is None:
            continue
        origins = _origins(buf)
        fused += [n for n in origins if n not in fused]
        node, exact = _origin_node(buf, origins)
        if node is not None and getattr(node, "op", None) == "call_function":
            outputs[a.name] = value_origin(node, output=True, exact=exact)
            output_nodes.append(node)
            if node not in fused:  # a getitem of a multi-output node is no origin of its own
                fused.append(node)
    if not fused and not outputs:
        return None
    if updates:
        # The buffer the same kernel also writes that value to is a copy on the way: the
        # node's value is the updated input (what the user's tensor holds after the call).
        import dataclasses

        updated = set(updates.values())
        for arg, origin in list(outputs.items()):
            if arg not in updates and origin.node in updated:
                outputs[arg] = dataclasses.replace(origin, inner=True)
    inputs = _input_origins(graph, launch, fused)
    order = _order(fused + output_nodes)
    fused.sort(key=lambda n: order.get(n, -1))
    # The launch is named after what it makes last: a kernel that finishes a residual add
    # of layer 0 and computes layer 1's LayerNorm is layer 1's LayerNorm.
    last = max(output_nodes, key=lambda n: order.get(n, -1)) if output_nodes else fused[-1]
    first = value_origin(last)
    atens = []
    for n in fused:
        op = _aten(n)
        if op not in atens:
            atens.append(op)
    return Provenance(nodes=tuple(str(n.name) for n in fused), aten=tuple(atens), module=first.module,
                      module_raw=first.module_raw, source=first.source, code=first.code,
                      outputs=tuple(sorted(outputs.items())), inputs=tuple(sorted(inputs.items())))


def _updates(fx_graph) -> dict:
    """Graph input name -> the node whose value an ``aten.copy_`` into it writes: how a
    post-grad graph updates an input in place (``x.copy_(y)``, an optimizer's ``add_``,
    a KV cache), and Inductor makes the kernel that computes the value write it there."""
    import torch

    out = {}
    for n in fx_graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.aten.copy_.default and len(n.args) >= 2:
            dst, src = n.args[0], n.args[1]
            if getattr(dst, "op", None) == "placeholder" and getattr(src, "op", None) == "call_function":
                out[str(dst.name)] = src
    return out


def _written_into(graph, name: str):
    """The FX node whose value a launch writes into graph input ``name`` (None: ``name``
    is no input updated in place)."""
    try:
        return _cached(graph.graph, "updates", _updates).get(name)
    except Exception:
        return None


def _graph_inputs(fx_graph) -> tuple[dict, dict]:
    """Placeholders and constants of an FX graph by node name, constants also by target."""
    by_name = {n.name: n for n in fx_graph.nodes if n.op in ("placeholder", "get_attr")}
    by_target = {str(n.target): n for n in fx_graph.nodes if n.op == "get_attr"}
    return by_name, by_target


def _input_origins(graph, launch: Launch, fused: list) -> dict[str, ValueOrigin]:
    """Graph inputs and weights the launch reads -> the first of its fused nodes that
    uses them (a BatchNorm weight read by a conv+bn+relu kernel: the BatchNorm node), so
    that a differing weight is named by the module that owns it."""
    out: dict[str, ValueOrigin] = {}
    inside = set(fused)
    try:
        by_name, by_target = _cached(graph.graph, "inputs", _graph_inputs)
    except Exception:
        return out
    for a in launch.args:
        if not a.before:
            continue
        name = base_name(a.expr) if a.expr else a.name
        node = by_name.get(name) or by_target.get(name)
        if node is None:
            continue
        users = [u for u in node.users if u in inside]
        if users:
            out[a.name] = value_origin(users[0])
    return out
