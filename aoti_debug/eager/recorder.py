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
  ``getitem`` nodes that take them apart).

In ``fp64`` mode every node also runs on float64 copies of its inputs (floating dtypes
in its arguments become float64, ``.float()`` becomes ``.double()``, each node under
the random state the model-dtype node saw, attention by the math backend), the float64 value is what is recorded, and
the record says the model's dtype (``model_dtype``) and how far the model-dtype eager
value is from it (``eager_error``, an RMS error as ``torch._dynamo.utils.same`` measures
it). The model goes on with the model-dtype values: the script runs as in eager mode.
"""

from __future__ import annotations

import math
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

    def __init__(self, gm: fx.GraphModule, mode: str, level: str, kernels: KernelFilter, compile_id: str = ""):
        if mode not in MODES:
            raise ValueError(f"reference mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.gm = gm
        self.mode = mode
        self.kernels = kernels
        info = {"kind": "reference", "reference": mode}
        if compile_id:
            info["compile_id"] = compile_id
        self.handle = hooks.GraphHandle(None, level, False, "eager", info)
        self.sites: dict[fx.Node, Site | None] = {}
        self._wide_modules: dict[str, torch.nn.Module] = {}
        self._lock = threading.Lock()

    # -- running -------------------------------------------------------------------------
    def __call__(self, *args: Any) -> Any:
        env: dict[fx.Node, Any] = {}
        wide: dict[fx.Node, Any] | None = {} if self.mode == "fp64" else None
        inputs = iter(args)
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(inputs)
                if wide is not None:
                    wide[node] = _widen(env[node])
            elif node.op == "output":
                return fx.node.map_arg(node.args[0], env.__getitem__)
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
                if node.op != "get_attr":
                    self._record(node, env, env[node], value64)
        return None

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
    def _site(self, node: fx.Node) -> Site | None:
        if node in self.sites:
            return self.sites[node]
        target = _target_name(node)
        site = None
        if self.kernels.matches(node.name, target):
            source, code = source_line(node.meta.get("stack_trace") or "")
            origin = ValueOrigin(node=node.name, aten=target, module=module_of(node.meta), instance=node.name,
                                 source=source, code=code)
            inputs = [a for a in node.all_input_nodes if a.op == "placeholder"]
            prov = Provenance(nodes=(node.name,), aten=(target,), module=origin.module, source=source, code=code,
                              outputs=(("out", origin),),
                              inputs=tuple(sorted((a.name, origin) for a in inputs)))
            site = Site("", node.name, target,
                        before=tuple(SiteArg(a.name, "input", "tensor", a.name) for a in inputs),
                        after=(SiteArg("out", "output", "tensor", "out"),),
                        source=target, id=len(self.sites), provenance=prov.to_json())
        self.sites[node] = site
        return site

    def _record(self, node: fx.Node, env: dict, value: Any, value64: Any) -> None:
        if not isinstance(value, torch.Tensor) or isinstance(value, torch.nn.Parameter):
            return
        try:
            reads = [env[a] for a in node.all_input_nodes]
            if value.layout == torch.strided and _storages([value]) & _storages(reads):
                return  # a view of what the node read: no kernel makes it
            site = self._site(node)
            if site is None:
                return
            placeholders = [env[a] for a in node.all_input_nodes if a.op == "placeholder"]
            self.handle.launch(site, placeholders)
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
    """A Dynamo backend (``gm, example_inputs -> callable``) that runs graphs as :class:`Recorder` s."""

    def compile_reference(gm: fx.GraphModule, example_inputs: Any, **_ignored: Any) -> Callable:
        compile_id = ""
        try:
            from torch._guards import CompileContext

            cid = CompileContext.current_compile_id()
            compile_id = str(cid) if cid is not None else ""
        except Exception:
            pass
        recorder = Recorder(gm, mode, level, kernels, compile_id)

        def run(*args: Any) -> Any:
            return recorder(*args)

        run._aoti_debug_recorder = recorder  # type: ignore[attr-defined]
        return run

    return compile_reference
