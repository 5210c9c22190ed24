"""Running one Dynamo graph eagerly, node by node, and recording what each node made.

The reference backend (:mod:`aoti_debug.eager`) hands every graph Dynamo captures
to a :class:`Recorder` instead of Inductor. The graph is the one Inductor would have
compiled (the same FX nodes, named as Dynamo named them), so each value a compiled run
materialises names the node it belongs to (``ValueOrigin.instance``, the root of the
post-grad node's ``from_node`` chain) and the reference has that node's value:

* each ``call_function`` / ``call_method`` / ``call_module`` node that returns one new
  tensor is a "launch" of the reference: its value is an ``after`` record, keyed by
  provenance exactly as the compiled run's values are (``sites.jsonl``);
* a graph input or weight a node reads is a ``before`` record of that node (the
  compiled run keys a weight by the node that reads it);
* a view (a value that shares storage with an input of its node) and a tuple are not
  recorded: no compiled kernel makes them (a tuple's elements are the values of the
  ``getitem`` nodes that take them apart);
* an in-place update (``x.copy_(y)``, ``p.add_(g)``: a node that returns the very tensor
  it read) is recorded as that node's value, the tensor as it updated it: a compiled
  kernel writes it (into the graph input itself), and an optimizer step or a cache
  update is wrong there or nowhere. The tensor it updated is no ``before`` record of
  that node (it no longer holds what the node read).

In ``fp64`` mode every node also runs on float64 copies of its inputs (floating dtypes
in its arguments become float64, ``.float()`` becomes ``.double()``, each node under
the random state the model-dtype node saw, attention by the math backend), the float64 value is what is recorded, and
the record says the model's dtype (``model_dtype``) and how far the model-dtype eager
value is from it (``eager_error``, an RMS error as ``torch._dynamo.utils.same`` measures
it). The model goes on with the model-dtype values: the script runs as in eager mode.

A graph that needs autograd is handed to :mod:`.training` instead, which records its
forward with a Recorder of the Dynamo graph and its backward graph with a
:class:`~.training.BackwardRecorder`.
"""

from __future__ import annotations

import math
import operator
import threading
from typing import Any, Callable, Iterable

import torch
from torch import fx

from ..config import KernelFilter
from ..format.protocol import Site, SiteArg
from ..format.provenance import Provenance, ValueOrigin, module_of, source_line
from ..runtime import hooks
from ..runtime.session import warn_once

#: Reference modes: the model's own dtypes, or float64 beside them.
MODES = ("eager", "fp64")

_LOW_FLOATS = {torch.float16: torch.float64, torch.bfloat16: torch.float64, torch.float32: torch.float64,
               torch.complex32: torch.complex128, torch.complex64: torch.complex128}
_LOW_METHODS = {"float": "double", "half": "double", "bfloat16": "double"}


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def _target_name(node: fx.Node) -> str:
    target = node.target
    if isinstance(target, str):
        return target
    name = getattr(target, "__name__", None) or str(target)
    return name.rsplit(".", 1)[-1]


def _widen(value: Any) -> Any:
    """An argument of a float64 node: tensors and dtypes of low floating precision made float64."""
    if isinstance(value, torch.Tensor):
        return value.to(_LOW_FLOATS[value.dtype]) if value.dtype in _LOW_FLOATS else value
    if isinstance(value, torch.dtype):
        return _LOW_FLOATS.get(value, value)
    if isinstance(value, (list, tuple)):
        widened = [_widen(v) for v in value]
        return type(value)(widened) if isinstance(value, list) else tuple(widened)
    if isinstance(value, dict):
        return {k: _widen(v) for k, v in value.items()}
    return value


def rmse(a: torch.Tensor, ref: torch.Tensor) -> float:
    """Root-mean-square error of ``a`` against ``ref`` in float64 (``torch._dynamo.utils.rmse``)."""
    if a.numel() == 0:
        return 0.0
    d = a.detach().to(torch.float64) - ref.detach().to(torch.float64)
    if d.is_complex():
        d = torch.view_as_real(d)
    return float(torch.sqrt(torch.mean(d * d)))


#: Python's augmented assignments, as Dynamo records ``x += y`` on a tensor.
_AUGMENTED = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
              operator.ipow, operator.iand, operator.ior, operator.ixor, operator.ilshift, operator.irshift}


def _in_place(node: fx.Node) -> bool:
    """Whether ``node`` updates a tensor in place: ``Tensor.add_`` and the like (a method
    or function named with a trailing underscore), an augmented assignment, or an ATen
    overload whose schema mutates an argument."""
    target = node.target
    if not isinstance(target, str) and target in _AUGMENTED:
        return True
    schema = getattr(target, "_schema", None)
    if schema is not None and getattr(schema, "is_mutable", False):
        return True
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    return isinstance(name, str) and name.endswith("_") and not name.startswith("_")


def _storages(values: Iterable[Any]) -> set[int]:
    out = set()
    for v in values:
        if isinstance(v, torch.Tensor) and v.layout == torch.strided:
            try:
                out.add(v.untyped_storage().data_ptr())
            except Exception:
                pass
    return out


def _math_attention():
    """Scaled dot product attention in float64: only the math backend takes it (the fused
    kernels a model may pin with ``sdpa_kernel`` refuse float64), and it is the exact one."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([SDPBackend.MATH])
    except Exception:
        import contextlib

        return contextlib.nullcontext()


class _RandomState:
    """The CPU (and CUDA, when in use) random state, to run a node twice from one state."""

    def __init__(self):
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() \
            else None

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


class Recorder:
    """Runs one Dynamo graph eagerly and records each node's values (one per graph)."""

    def __init__(self, gm: fx.GraphModule, mode: str, level: str, kernels: KernelFilter, compile_id: str = "",
                 kind: str = "inference", record: bool = True):
        if mode not in MODES:
            raise ValueError(f"reference mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.gm = gm
        self.mode = mode
        self.kernels = kernels
        self.record = record
        """False: run the graph (and its float64 twin) without recording a value."""
        info = {"kind": kind, "reference": mode}
        if compile_id:
            info["compile_id"] = compile_id
        self.handle = hooks.GraphHandle(None, level, False, "eager", info)
        self.sites: dict[fx.Node, Site | None] = {}
        self._wide_modules: dict[str, torch.nn.Module] = {}
        self._lock = threading.Lock()

    # -- running -------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        """The graph's kind in run.json (``inference``, ``forward``, ``backward``)."""
        return self.handle.info.get("kind", "")

    @kind.setter
    def kind(self, value: str) -> None:
        self.handle.info["kind"] = value  # read when the graph first records

    def __call__(self, *args: Any) -> Any:
        return self.run(args)[0]

    def run(self, args: Iterable[Any], wide_args: Iterable[Any] | None = None) -> tuple[Any, Any]:
        """(the graph's outputs, their float64 twins or None in ``eager`` mode).

        ``wide_args``: the float64 twins of ``args`` (an argument without one, None, is
        widened from its model-dtype value)."""
        env: dict[fx.Node, Any] = {}
        wide: dict[fx.Node, Any] | None = {} if self.mode == "fp64" else None
        inputs = iter(args)
        wide_inputs = iter(wide_args) if wide_args is not None else None
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(inputs)
                if wide is not None:
                    twin = next(wide_inputs, None) if wide_inputs is not None else None
                    wide[node] = twin if twin is not None else _widen(env[node])
            elif node.op == "output":
                out = fx.node.map_arg(node.args[0], env.__getitem__)
                return out, (fx.node.map_arg(node.args[0], wide.__getitem__) if wide is not None else None)
            else:
                state = _RandomState() if wide is not None else None
                env[node] = self._run(node, env, widen=False)
                value64 = None
                if wide is not None:
                    after = _RandomState()
                    state.restore()
                    try:
                        with _math_attention():
                            value64 = wide[node] = _widen(self._run(node, wide, widen=True))
                    except Exception as e:
                        # An op without a float64 kernel: the model runs on; this node's
                        # value is recorded in the model's dtype, and later nodes start
                        # from it in float64.
                        warn_once(f"reference-fp64-{_target_name(node)}",
                                  f"{_target_name(node)} cannot run in float64 ({type(e).__name__}: {e}); "
                                  f"its value is recorded in the model's dtype, without a verdict")
                        wide[node] = _widen(env[node])
                    finally:
                        after.restore()
                if self.record and node.op != "get_attr":
                    self._record(node, env, env[node], value64)
        return None, None

    def _run(self, node: fx.Node, env: dict, widen: bool) -> Any:
        args = fx.node.map_arg(node.args, env.__getitem__)
        kwargs = fx.node.map_arg(node.kwargs, env.__getitem__)
        if widen:
            args, kwargs = _widen(args), _widen(kwargs)
        if node.op == "call_function":
            return node.target(*args, **kwargs)
        if node.op == "call_method":
            name = _LOW_METHODS.get(node.target, node.target) if widen else node.target
            return getattr(args[0], name)(*args[1:], **kwargs)
        if node.op == "call_module":
            return self._submodule(node.target, widen)(*args, **kwargs)
        if node.op == "get_attr":
            value = self.gm
            for part in str(node.target).split("."):
                value = getattr(value, part)
            return _widen(value) if widen else value
        raise RuntimeError(f"unexpected FX node op {node.op!r}")

    def _submodule(self, target: str, widen: bool) -> torch.nn.Module:
        module = self.gm.get_submodule(target)
        if not widen:
            return module
        with self._lock:
            copy = self._wide_modules.get(target)
            if copy is None:
                import copy as _copy

                copy = self._wide_modules[target] = _copy.deepcopy(module).double()
        return copy

    # -- recording -----------------------------------------------------------------------
    def _site(self, node: fx.Node, inputs: list[fx.Node]) -> Site | None:
        """The site of ``node``, whose ``before`` records are the graph inputs ``inputs``."""
        if node in self.sites:
            return self.sites[node]
        target = _target_name(node)
        site = None
        origin = self._origin(node, target) if self.kernels.matches(node.name, target) else None
        if origin is not None:
            source, code = origin.source, origin.code
            prov = Provenance(nodes=(node.name,), aten=(origin.aten,), module=origin.module, source=source, code=code,
                              outputs=(("out", origin),),
                              inputs=tuple(sorted((a.name, origin) for a in inputs)))
            site = Site("", node.name, target,
                        before=tuple(SiteArg(a.name, "input", "tensor", a.name) for a in inputs),
                        after=(SiteArg("out", "output", "tensor", "out"),),
                        source=target, id=len(self.sites), provenance=prov.to_json())
        self.sites[node] = site
        return site

    def _origin(self, node: fx.Node, target: str) -> ValueOrigin | None:
        """What the value of ``node`` is, as a compiled run names it; None: not recorded.
        A Dynamo graph's node is its own instance (the compiled run's post-grad nodes name
        it as the root of their ``from_node``)."""
        source, code = source_line(node.meta.get("stack_trace") or "")
        return ValueOrigin(node=node.name, aten=target, module=module_of(node.meta), instance=node.name,
                           source=source, code=code)

    def _record(self, node: fx.Node, env: dict, value: Any, value64: Any) -> None:
        if not isinstance(value, torch.Tensor) or isinstance(value, torch.nn.Parameter):
            return
        try:
            reads = [env[a] for a in node.all_input_nodes]
            # In place: an update op that returns the very tensor it read. (A no-op that
            # returns its input, ``x.float()`` of a float32 ``x``, is no update: skipped below.)
            updated = tuple(a for a in node.all_input_nodes if env[a] is value) if _in_place(node) else ()
            if not updated and value.layout == torch.strided and _storages([value]) & _storages(reads):
                return  # a view of what the node read: no kernel makes it
            # The graph inputs it read, not those it updated (they no longer hold what it read).
            inputs = [a for a in node.all_input_nodes if a.op == "placeholder" and a not in updated]
            site = self._site(node, inputs)
            if site is None:
                return
            self.handle.launch(site, [env[a] for a in inputs])
            if value64 is None:
                self.handle.done(site, (value,))
                return
            extra = {"model_dtype": dtype_name(value)}
            if isinstance(value64, torch.Tensor) and value64.shape == value.shape and value.is_floating_point():
                err = rmse(value, value64)
                extra["eager_error"] = err if math.isfinite(err) else str(err)
                self.handle.done(site, (value64,), [extra])
            else:
                self.handle.done(site, (value,), [extra])
        except Exception as e:  # the model runs on, unrecorded here
            warn_once(f"reference-{type(e).__name__}", f"recording node {node.name} of the reference failed: {e}")


def backend(mode: str, level: str, kernels: KernelFilter) -> Callable:
    """A Dynamo backend (``gm, example_inputs -> callable``) that runs graphs as :class:`Recorder` s,
    and a graph that needs autograd as a training reference (:mod:`.training`: its backward too)."""

    def compile_reference(gm: fx.GraphModule, example_inputs: Any, **_ignored: Any) -> Callable:
        from ..codegen.reference_autograd import compile_id as current_compile_id
        from ..codegen.reference_autograd import needs_autograd

        compile_id = current_compile_id()
        training = needs_autograd(example_inputs)
        if training:
            from .training import compile_training

            try:
                return compile_training(gm, example_inputs, mode, level, kernels, compile_id)
            except Exception as e:
                if type(e).__name__ in _DYNAMO_RESTARTS:
                    raise  # Dynamo's own signal to compile the frame again
                # The forward is recorded as before; the backward runs unrecorded.
                warn_once(f"reference-autograd-{type(e).__name__}",
                          f"the backward of a graph cannot be recorded ({type(e).__name__}: {e}); "
                          f"its forward is, its backward runs unrecorded")
        recorder = Recorder(gm, mode, level, kernels, compile_id, kind="forward" if training else "inference")

        def run(*args: Any) -> Any:
            return recorder(*args)

        run._aoti_debug_recorder = recorder  # type: ignore[attr-defined]
        return run

    return compile_reference


#: Exceptions by which Dynamo and AOTAutograd restart a frame's analysis (torch 2.11, 2.13).
_DYNAMO_RESTARTS = ("TensorifyScalarRestartAnalysis", "RestartAnalysis", "SkipFrame")
