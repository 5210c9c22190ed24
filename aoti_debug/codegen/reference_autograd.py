"""The training graphs of an eager reference: a Dynamo graph split into forward and
backward by AOTAutograd exactly as Inductor splits it.

A compiled training step runs two graphs Inductor made: the forward, and the backward
that AOTAutograd traced from it (the joint graph, decomposed with Inductor's table,
rewritten by Inductor's joint-graph passes and cut by its min-cut partitioner). Each
value of the compiled backward names a node of that backward graph. The reference
(:mod:`aoti_debug.eager.training`) asks for the same graphs here, with the same steps
and the same node names, and runs them eagerly node by node instead of lowering them:

    compiled = compile_joint(gm, example_inputs, fw_compiler, bw_compiler, inference_compiler)

``fw_compiler(fw_gm, example_inputs)`` and ``bw_compiler(bw_gm, example_inputs)`` return
callables as AOTAutograd's compilers do (``_boxed_call``: they take one list).

This is the one place the reference touches AOTAutograd and Inductor's graph passes.
What it calls, as ``torch/_inductor/compile_fx.py``'s ``_compile_fx_main`` calls it:

* ``torch._dynamo.backends.common.aot_autograd`` with ``decompositions=
  torch._inductor.decomposition.select_decomp_table()``, ``partition_fn=
  torch._inductor.compile_fx.partition_fn`` (``_recursive_joint_graph_passes``, then
  ``min_cut_rematerialization_partition(compiler="inductor")``) and
  ``keep_inference_input_mutations=True``;
* Inductor's pre-grad passes: torch 2.13 hands ``run_pre_grad_passes`` to
  ``aot_module_simplified(pre_grad_passes=...)`` (run after the AOTAutograd cache
  lookup); torch 2.11 has no such argument and runs ``_recursive_pre_grad_passes`` on
  the Dynamo graph before ``aot_autograd`` — both are gated on what this torch has;
* under ``torch.fx.traceback.preserve_node_meta()`` (the nodes keep ``from_node``,
  ``original_aten``, ``seq_nr``, ``fwd_nn_module_stack``: the provenance both runs key
  by), ``enable_python_dispatcher()`` and ``functorch.config`` ``unlift_effect_tokens``;
* the AOTAutograd cache off (``enable_autograd_cache=False``): an entry holds compiled
  Inductor code, not these eager graphs.

Checked against the sources of torch 2.11 and 2.13; where a name is missing the error
says which, and the reference of that graph falls back to running its Dynamo graph
(forward recorded, backward not).
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, Callable, Sequence

from ..errors import UnsupportedTorchError


def compile_id() -> str:
    """The Dynamo compile id being compiled (``frame_id/frame_compile_id``), "" outside one.

    AOTAutograd restores the forward's compile context when it compiles a backward
    lazily (at its first call), so a backward reads its forward's id."""
    try:
        from torch._guards import CompileContext

        cid = CompileContext.current_compile_id()
        return str(cid) if cid is not None else ""
    except Exception:
        return ""


def needs_autograd(example_inputs: Sequence[Any]) -> bool:
    """Whether AOTAutograd would trace a backward for this graph: grad mode is on and
    some input requires grad (``aot_autograd``'s own test)."""
    import torch

    if not torch.is_grad_enabled():
        return False
    return any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)


def _inductor():
    """(``select_decomp_table``, ``partition_fn``, pre-grad passes or None) of this torch."""
    try:
        from torch._inductor import compile_fx as cfx
        from torch._inductor.decomposition import select_decomp_table
    except Exception as e:  # pragma: no cover - a torch without Inductor
        raise UnsupportedTorchError(f"torch._inductor cannot be imported ({e}): no training reference") from None
    partition = getattr(cfx, "partition_fn", None)
    if partition is None:
        partition = _partition_fallback()
    pre_grad = getattr(cfx, "run_pre_grad_passes", None) or getattr(cfx, "_recursive_pre_grad_passes", None)
    return select_decomp_table, partition, pre_grad


def _partition_fallback() -> Callable:
    """Inductor's ``partition_fn`` where ``compile_fx`` has none at module level: its joint
    graph passes, then the min-cut partitioner as Inductor calls it."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._inductor.fx_passes.joint_graph import joint_graph_passes

    def partition(gm, joint_inputs, **kwargs):
        gm = joint_graph_passes(gm)
        return min_cut_rematerialization_partition(gm, joint_inputs, compiler="inductor", **kwargs)

    return partition


def _takes_pre_grad_passes() -> bool:
    from torch._functorch.aot_autograd import aot_module_simplified

    try:
        return "pre_grad_passes" in inspect.signature(aot_module_simplified).parameters
    except (TypeError, ValueError):
        return False


def _contexts():
    """What ``_compile_fx_main`` holds while AOTAutograd traces (see the module docstring)."""
    import torch
    from torch._dispatch.python import enable_python_dispatcher
    from torch._functorch import config as functorch_config

    stack = contextlib.ExitStack()
    stack.enter_context(enable_python_dispatcher())
    stack.enter_context(torch.fx.traceback.preserve_node_meta())
    patches = {k: v for k, v in (("unlift_effect_tokens", True), ("enable_autograd_cache", False))
               if hasattr(functorch_config, k)}
    stack.enter_context(functorch_config.patch(**patches))
    return stack


def compile_joint(gm, example_inputs: Sequence[Any], fw_compiler: Callable, bw_compiler: Callable,
                  inference_compiler: Callable) -> Callable:
    """``gm`` through AOTAutograd as Inductor would send it, with these compilers in place
    of Inductor's; returns the callable AOTAutograd assembles (forward, and the autograd
    function whose backward calls what ``bw_compiler`` returned).

    Raises:
        UnsupportedTorchError: this torch lacks a name used here (one line: which).
    """
    try:
        from torch._dynamo.backends.common import aot_autograd
    except Exception as e:
        raise UnsupportedTorchError(f"torch._dynamo.backends.common.aot_autograd is missing ({e})") from None
    select_decomp_table, partition, pre_grad = _inductor()
    kwargs: dict[str, Any] = dict(fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                                  inference_compiler=inference_compiler, decompositions=select_decomp_table(),
                                  partition_fn=partition, keep_inference_input_mutations=True)
    with _contexts():
        if pre_grad is not None and _takes_pre_grad_passes():
            kwargs["pre_grad_passes"] = pre_grad
        elif pre_grad is not None:
            gm = pre_grad(gm, example_inputs)  # torch 2.11: before aot_autograd, in compile_fx
        return aot_autograd(**kwargs)(gm, example_inputs)


def boxed(fn: Callable) -> Callable:
    """``fn(*args)`` as AOTAutograd calls a compiled graph: with one list of arguments."""

    def call(args):
        return fn(*args)

    call._boxed_call = True  # type: ignore[attr-defined]
    return call
