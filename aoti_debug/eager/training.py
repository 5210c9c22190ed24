"""The reference of a compiled training step: its forward and its backward, recorded.

    with aoti_debug.reference(dtype=torch.float64, dump_dir="ref"):
        loss = compiled(x).sum()
        loss.backward()       # the backward graph runs node by node too, recorded

A graph that needs autograd (grad mode on, some input requires grad) is compiled by a
compiled run into a forward and a backward graph (``kind`` ``forward``/``backward`` in
run.json). The reference asks AOTAutograd for the same two graphs as Inductor would
(:mod:`aoti_debug.codegen.reference_autograd`: Inductor's decompositions, joint-graph
passes and partitioner, so the backward's nodes are named as the compiled backward's)
and runs them eagerly:

* the **forward values** are recorded from the Dynamo graph, node by node
  (:class:`.recorder.Recorder`, under ``no_grad``, on copies of the inputs it mutates),
  exactly as an inference reference records them;
* the model then goes on with AOTAutograd's **forward graph**, run eagerly (and, in
  ``fp64``, in float64 beside it, whose saved tensors the float64 backward takes);
* the **backward graph** runs node by node (:class:`BackwardRecorder`) when autograd
  calls it, each value keyed as the compiled backward keys it: by its node in the
  backward graph (a forward node recomputed there by the Dynamo node it came from), the
  module and source line of the forward op it differentiates (``fwd_nn_module_stack``,
  and the ``stack_trace`` of the forward node with its ``seq_nr``). Its outputs are the
  parameters' gradients.

Both graphs carry the Dynamo compile id of their frame (``compile_id``), so a
recompiled frame's versions pair with their own references.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Any, Callable

import torch
from torch import fx

from ..config import KernelFilter
from ..format.provenance import ValueOrigin, module_of, source_line
from ..runtime.session import warn_once
from .recorder import Recorder, _RandomState

#: Forward calls whose float64 saved tensors wait for their backward (gradient
#: accumulation over micro-batches holds several); older ones are dropped.
MAX_PENDING = 32


def copy_graph(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` over a copy of its graph (same node names and meta, same submodules and
    weights): the pre-grad passes AOTAutograd runs may rewrite the graph in place, and
    the forward is recorded by the Dynamo graph's own nodes."""
    graph = fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return fx.GraphModule(gm, graph)


class _Pending:
    """The float64 twins of the tensors each forward call saved for its backward, by
    ``(data_ptr, shape, stride, dtype)``, newest call first."""

    def __init__(self):
        self._calls: OrderedDict[int, dict[tuple, torch.Tensor]] = OrderedDict()
        self._next = 0
        self._lock = threading.Lock()

    @staticmethod
    def key(t: torch.Tensor) -> tuple | None:
        try:
            return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        except Exception:
            return None

    def put(self, outs, wide_outs) -> None:
        twins = {}
        for v, w in zip(outs, wide_outs):
            if isinstance(v, torch.Tensor) and isinstance(w, torch.Tensor) and w is not v:
                k = self.key(v)
                if k is not None:
                    twins[k] = w
        with self._lock:
            self._calls[self._next] = twins
            self._next += 1
            while len(self._calls) > MAX_PENDING:
                self._calls.popitem(last=False)

    def take(self, args) -> list:
        """The twins of ``args`` (None where a forward saved none: widened then), from
        the newest forward call that saved the first of them; that call's are dropped."""
        keys = [self.key(a) if isinstance(a, torch.Tensor) else None for a in args]
        with self._lock:
            for call in reversed(self._calls):
                twins = self._calls[call]
                if any(k is not None and k in twins for k in keys):
                    del self._calls[call]
                    return [twins.get(k) if k is not None else None for k in keys]
        return [None] * len(keys)


class BackwardRecorder(Recorder):
    """Runs a backward graph node by node, each value keyed as a compiled backward keys it."""

    def __init__(self, gm: fx.GraphModule, mode: str, level: str, kernels: KernelFilter, compile_id: str,
                 forward_sources: dict):
        super().__init__(gm, mode, level, kernels, compile_id, kind="backward")
        self.forward_sources = forward_sources
        """``seq_nr`` -> ``stack_trace`` of the forward node a backward node differentiates."""

    def _origin(self, node: fx.Node, target: str) -> ValueOrigin | None:
        from ..codegen.provenance import value_origin

        origin = value_origin(node, output=True)
        if origin.inner:
            return None  # a step inside a recomputed forward node: no compiled value is keyed so
        meta = node.meta
        module = origin.module or module_of({"nn_module_stack": meta.get("fwd_nn_module_stack") or {}})
        source, code = origin.source, origin.code
        if not source:
            source, code = source_line(self.forward_sources.get(meta.get("seq_nr"), ""))
        return dataclasses.replace(origin, module=module, source=source, code=code)


def _forward_sources(*graphs: fx.GraphModule) -> dict:
    """``seq_nr`` -> the first ``stack_trace`` of a forward node with it (as AOTAutograd's
    ``copy_fwd_metadata_to_bw_nodes`` takes the first forward node of each)."""
    out: dict = {}
    for gm in graphs:
        for node in gm.graph.nodes:
            seq, trace = node.meta.get("seq_nr"), node.meta.get("stack_trace")
            if seq is not None and trace and not node.meta.get("autograd_backward") and seq not in out:
                out[seq] = trace
    return out


class TrainingReference:
    """One Dynamo graph that needs autograd: its forward recorded from the Dynamo graph,
    run through AOTAutograd's forward graph, its backward recorded when it runs."""

    def __init__(self, gm: fx.GraphModule, mode: str, level: str, kernels: KernelFilter, compile_id: str):
        self.mode, self.level, self.kernels, self.compile_id = mode, level, kernels, compile_id
        self.forward = Recorder(copy_graph(gm), mode, level, kernels, compile_id, kind="forward")
        self.backwards: list[BackwardRecorder] = []
        self._pending = _Pending()
        self._sources: dict = {}
        self._mutated: set[int] | None = None
        """Positions of the inputs the Dynamo graph mutates (learnt at the first call)."""

    # -- AOTAutograd's compilers -----------------------------------------------------------
    def fw_compiler(self, gm: fx.GraphModule, example_inputs) -> Callable:
        from ..codegen.reference_autograd import boxed

        self._sources.update(_forward_sources(gm))
        runner = Recorder(gm, self.mode, self.level, self.kernels, self.compile_id, record=False)

        def forward(*args):
            outs, wide = runner.run(args)
            if wide is not None:
                self._pending.put(outs, wide)
            return outs

        return boxed(forward)

    def inference_compiler(self, gm: fx.GraphModule, example_inputs) -> Callable:
        from ..codegen.reference_autograd import boxed

        self.forward.kind = "inference"
        runner = Recorder(gm, self.mode, self.level, self.kernels, self.compile_id, record=False)
        return boxed(lambda *args: runner.run(args)[0])

    def bw_compiler(self, gm: fx.GraphModule, example_inputs) -> Callable:
        from ..codegen.reference_autograd import boxed, compile_id

        self._sources.update(_forward_sources(gm))
        recorder = BackwardRecorder(gm, self.mode, self.level, self.kernels, compile_id() or self.compile_id,
                                    self._sources)
        self.backwards.append(recorder)

        def backward(*args):
            wide = self._pending.take(args) if self.mode == "fp64" else None
            if wide is not None and all(w is None for w in wide) and any(isinstance(a, torch.Tensor) for a in args):
                warn_once("reference-backward-fp64", "a backward of the reference ran without its forward's float64 "
                                                     "tensors: it starts from the model's values widened")
            return recorder.run(args, wide)[0]

        return boxed(backward)

    # -- a call ----------------------------------------------------------------------------
    def record_forward(self, args: tuple) -> None:
        """Record the forward's values from the Dynamo graph (under ``no_grad``, on copies
        of the inputs it mutates, from the random state the model's own run then starts
        from), leaving the inputs and the random state as they were."""
        state = _RandomState()
        first = self._mutated is None
        copies = {i: a.detach().clone() for i, a in enumerate(args)
                  if isinstance(a, torch.Tensor) and (first or i in self._mutated)}
        versions = {i: c._version for i, c in copies.items()}
        call = tuple(copies.get(i, a) for i, a in enumerate(args))
        try:
            with torch.no_grad():
                self.forward(*call)
        except Exception as e:  # the model runs on; this call's forward is not recorded
            warn_once(f"reference-forward-{type(e).__name__}", f"recording a forward of the reference failed: {e}")
        finally:
            state.restore()
        if first:
            self._mutated = {i for i, c in copies.items() if c._version != versions[i]}


def compile_training(gm: fx.GraphModule, example_inputs, mode: str, level: str, kernels: KernelFilter,
                     compile_id: str) -> Callable:
    """The reference's callable for a graph that needs autograd (see the module docstring)."""
    from ..codegen.reference_autograd import compile_joint

    ref = TrainingReference(gm, mode, level, kernels, compile_id)
    compiled = compile_joint(gm, example_inputs, ref.fw_compiler, ref.bw_compiler, ref.inference_compiler)

    def run(*args: Any) -> Any:
        ref.record_forward(args)
        return compiled(*args)

    run._aoti_debug_recorder = ref.forward  # type: ignore[attr-defined]
    run._aoti_debug_training = ref  # type: ignore[attr-defined]
    return run
