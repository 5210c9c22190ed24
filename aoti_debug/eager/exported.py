"""The eager and float64 reference of a ``torch.export`` program, for AOTInductor packages.

    ep = torch.export.export(model, args)
    pkg = torch._inductor.aoti_compile_and_package(ep)          # compiled under aoti_debug.enabled
    aoti_debug.record_reference(ep, args, dtype=torch.float64, dump_dir="ref")
    # run the package with AOTI_DEBUG_DIR=aoti, then:  aoti-debug diff aoti/ ref/

An AOTInductor package is compiled from ``ep.module()``: each value its dump
materialises names the node of that graph it was decomposed from
(``ValueOrigin.instance``). :func:`record_reference` runs ``ep.graph_module`` — the same
nodes under the same names, with the weights, buffers and constants as graph inputs — node by node in
a :class:`.recorder.Recorder`, eagerly (``dtype=None``) or in float64 beside the
model's dtypes, and records each node's value keyed by those names, in the dump format
of ``aoti-debug run --reference``. ``aoti-debug diff`` then pairs the package's values
with it and gives each the verdicts of a ``torch.compile`` reference (``rounding`` /
``suspect``); a weight the package reads is paired with the reference's weight through
the node that reads it.
"""

from __future__ import annotations

from typing import Any

from .. import config
from ..errors import ConfigError

__all__ = ["record_reference"]


def _program(program):
    """An ``ExportedProgram`` from one, or from the path ``torch.export.save`` wrote."""
    import os

    import torch

    if isinstance(program, torch.export.ExportedProgram):
        return program
    if isinstance(program, (str, os.PathLike)):
        try:
            return torch.export.load(os.fspath(program))
        except Exception as e:
            raise ConfigError(f"{os.fspath(program)}: not a program saved by torch.export.save "
                              f"({type(e).__name__}: {e}); an AOTInductor package holds none, give its "
                              f"ExportedProgram") from None
    raise ConfigError(f"a reference of an export needs a torch.export.ExportedProgram (or its saved .pt2), "
                      f"not {type(program).__name__}")


def _graph_inputs(ep, args: tuple, kwargs: dict) -> list:
    """The flat inputs of ``ep.graph_module``, in its signature's order: weights, buffers
    and constants by name, then the user's inputs flattened as the program takes them."""
    import torch
    from torch.export.graph_signature import InputKind
    from torch.utils import _pytree as pytree

    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    want = ep.call_spec.in_spec
    if want is not None and spec != want:
        raise ConfigError(f"the inputs do not have the structure the program was exported with: {spec} "
                          f"against {want}")
    user = iter(flat)
    out = []
    for spec_ in ep.graph_signature.input_specs:
        if spec_.kind == InputKind.USER_INPUT:
            out.append(next(user))
        elif spec_.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            value = ep.state_dict.get(spec_.target)
            out.append(value if value is not None else ep.constants[spec_.target])
        elif spec_.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            out.append(ep.constants[spec_.target])
        elif spec_.kind == InputKind.TOKEN:
            out.append(torch.empty(0))
        else:
            raise ConfigError(f"program input {spec_.arg.name} is of a kind the reference cannot feed "
                              f"({spec_.kind.name})")
    return out


def record_reference(program, args: tuple = (), kwargs: dict | None = None, *, dtype=None,
                     level: str | int = "save", kernels: str | None = None, dump_dir: str | None = None) -> Any:
    """Record the eager (and float64) reference of an exported program, to diff an
    AOTInductor package of it against.

    Args:
        program: the ``torch.export.ExportedProgram`` the package was compiled from, or
            the path ``torch.export.save`` wrote it to.
        args, kwargs: the inputs, as the program takes them (those the package ran on).
        dtype: None (the model's own dtypes) or ``torch.float64`` (float64 beside them,
            for the ``rounding`` / ``suspect`` verdicts).
        level: ``save`` (default: values compared element-wise) or ``stats``.
        kernels: a kernel filter on node names and their ops (``AOTI_DEBUG_KERNELS``).
        dump_dir: where the dump goes (a new run directory under it); default the
            current dump directory.

    Returns:
        The program's outputs, computed eagerly in the model's dtypes.

    Raises:
        ConfigError: not a program, inputs of another structure, an unknown level,
            kernel filter or dtype.
    """
    from torch.utils import _pytree as pytree

    from ..runtime import session
    from . import _mode
    from .recorder import Recorder

    mode = _mode(dtype)
    settings = config.make_compile_settings(level, kernels)
    ep = _program(program)
    inputs = _graph_inputs(ep, tuple(args), dict(kwargs or {}))
    previous_dir = config.get_dump_dir_override()
    if dump_dir is not None:
        session.flush()
        config.set_dump_dir(dump_dir)
        session.reset()
    try:
        recorder = Recorder(ep.graph_module, mode, settings.level, settings.kernels, compile_id="export")
        import torch

        with torch.no_grad():
            flat = recorder(*inputs)
        session.flush()
    finally:
        if dump_dir is not None:
            config.set_dump_dir(previous_dir)
            session.reset()
    flat = list(flat) if isinstance(flat, (tuple, list)) else [flat]
    mutated = len(ep.graph_signature.output_specs) - len(ep.graph_signature.user_outputs)
    user = flat[mutated:] if 0 <= mutated <= len(flat) else flat
    spec = ep.call_spec.out_spec
    return pytree.tree_unflatten(user, spec) if spec is not None else user
