"""The reference a compiled run is compared with: the same script, its compiled functions
run eagerly (in the model's dtypes, or in float64 beside them), recorded in the same
dump format and keyed by provenance (:mod:`.recorder`).

    aoti-debug run --reference eager --dir ref -- python script.py
    aoti-debug run --dir compiled -- python script.py
    aoti-debug diff compiled ref

or, in Python::

    with aoti_debug.reference(dtype=torch.float64, dump_dir="ref64"):
        compiled(x)          # runs eagerly, recorded

A training step is recorded whole: a graph that needs autograd runs through AOTAutograd
as Inductor splits it, and its backward graph is recorded node by node when autograd
calls it (:mod:`.training`). Every graph Dynamo compiles — a graph break's resumed
frame, each recompile — is recorded with its Dynamo compile id.

``diff COMPILED REFERENCE`` pairs each value the compiled run materialised with the
value of the FX node it belongs to, graph by graph (by compile id). Against an fp64 reference it gives each value a
verdict: ``rounding`` (the compiled error is within a small factor of eager's own error
against float64) or ``suspect``.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from .. import config
from ..codegen.cache_tag import reset_dynamo
from ..errors import ConfigError

MODES = config.REFERENCE_MODES

_active: tuple[str, str, str] | None = None


def _mode(dtype) -> str:
    import torch

    if dtype is None:
        return "eager"
    if dtype == torch.float64:
        return "fp64"
    raise ConfigError(f"reference dtype must be None (the model's own) or torch.float64, not {dtype}")


def active() -> str | None:
    """The reference mode in force (``eager`` or ``fp64``), or None."""
    return _active[0] if _active is not None else None


def enable_reference(mode: str = "eager", level: str | int = "save", kernels: str | None = None,
                     dump_dir: str | None = None, reset: bool = True) -> None:
    """From now on (until :func:`disable_reference`), every graph ``torch.compile`` hands to
    Inductor runs eagerly instead and is recorded (``mode``: ``eager`` or ``fp64``).

    Raises:
        ConfigError: an unknown mode, level or kernel filter.
        UnsupportedTorchError: this torch has no ``torch.compile`` entry to route.
    """
    global _active
    from ..codegen import reference_hook

    mode = config.parse_reference(mode) or "eager"
    settings = config.make_compile_settings(level, kernels)
    if dump_dir is not None:
        config.set_dump_dir(dump_dir)
        from ..runtime import session

        session.reset()
    reference_hook.install(_Backend(mode, settings.level, settings.kernels))
    _active = (mode, settings.level, str(settings.kernels))
    if reset:
        reset_dynamo()


def disable_reference() -> None:
    """``torch.compile`` compiles with Inductor again (frames run as references are dropped)."""
    global _active
    from ..codegen import reference_hook

    if _active is None and not reference_hook.installed():
        return
    from ..runtime import session

    session.flush()
    reference_hook.uninstall()
    _active = None
    reset_dynamo()


@contextlib.contextmanager
def reference(dtype=None, level: str | int = "save", kernels: str | None = None,
              dump_dir: str | None = None) -> Iterator[None]:
    """``with aoti_debug.reference(dtype=torch.float64, dump_dir="ref"): compiled(x)``.

    Inside, functions compiled with ``torch.compile`` run eagerly (``dtype=None``) or
    eagerly and in float64 beside it (``dtype=torch.float64``), and every value is
    recorded at ``level`` into ``dump_dir``. On exit the dump is flushed and the
    previous dump directory and compile state come back.
    """
    mode = _mode(dtype)
    previous_dir = config.get_dump_dir_override()
    enable_reference(mode, level, kernels, dump_dir)
    try:
        yield
    finally:
        disable_reference()
        if dump_dir is not None:
            from ..runtime import session

            config.set_dump_dir(previous_dir)
            session.reset()


def enable_from_env() -> bool:
    """``AOTI_DEBUG_REFERENCE`` set: install the reference (True); one warning when a
    value cannot be read, and then nothing is recorded."""
    import os

    from ..runtime.session import warn_once

    try:
        mode = config.parse_reference(os.environ.get(config.ENV_REFERENCE))
        if mode is None:
            return False
        settings = config.compile_settings_from_env()
        level = settings.level if settings.active else "save"
        # (Installed while torch is imported: nothing is compiled yet, nothing to reset.)
        enable_reference(mode, level, str(settings.kernels) or None, reset=False)
    except Exception as e:
        warn_once("env-reference", f"{e}; the reference is not recorded")
        return True
    return True


class _Backend:
    """The Dynamo backend of a reference: each graph becomes a :class:`.recorder.Recorder`,
    or a :class:`.training.TrainingReference` where it needs autograd (imported at the
    first compile: installing may happen inside ``import torch``)."""

    def __init__(self, mode: str, level: str, kernels):
        self.mode, self.level, self.kernels = mode, level, kernels

    def __call__(self, gm, example_inputs):
        from .recorder import backend

        return backend(self.mode, self.level, self.kernels)(gm, example_inputs)
