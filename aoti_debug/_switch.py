"""Turning instrumentation on and off (Python API, env vars, autoload).

Kept apart from ``__init__`` so that ``import aoti_debug`` stays light: this module
imports ``torch._inductor`` (through ``codegen.inductor``) only when a switch is used.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import logging
import sys
from typing import Iterator

from . import config
from .errors import UnsupportedTorchError

log = logging.getLogger("aoti_debug")

#: Installing needs Inductor's wrapper classes; importing them while ``import torch``
#: is still running (where the torch.backends autoload calls us) is unsafe, so we wait
#: for this module, which every Inductor compile imports first.
TRIGGER_MODULE = "torch._inductor.graph"


def current() -> config.CompileSettings:
    """The compile settings in force (off when nothing is installed)."""
    if "aoti_debug.codegen.inductor" not in sys.modules:
        return config.CompileSettings()
    from .codegen import inductor

    return inductor.active_settings() or config.CompileSettings()


def apply(settings: config.CompileSettings) -> None:
    """Make ``settings`` the active ones; drop compiled frames made under others."""
    from .codegen import inductor

    previous = current()
    if settings.active:
        inductor.install(settings)
    else:
        inductor.uninstall()
    if previous != settings:
        inductor.reset_dynamo()


def enable(level: str | int = "save", kernels: str | None = None, sync: bool = False,
           phases: str | None = None, dump_dir: str | None = None, reuse: bool = True) -> None:
    """Instrument every compile from now on (until :func:`disable`). ``reuse=False``: read
    every input from its own values (``AOTI_DEBUG_REUSE=0``)."""
    settings = config.make_compile_settings(level, kernels, sync, phases, reuse)
    if dump_dir is not None:
        config.set_dump_dir(dump_dir)
        from .runtime import session

        session.reset()
    apply(settings)


def disable() -> None:
    """Stop instrumenting; later compiles are byte-identical to uninstrumented ones.

    A dump directory set by ``enable(dump_dir=...)`` is dropped too (the environment's
    ``AOTI_DEBUG_DIR``, if any, applies again to later runs).
    """
    if config.get_dump_dir_override() is not None:
        from .runtime import session

        session.flush()
        config.set_dump_dir(None)
        session.reset()
    if "aoti_debug.codegen.inductor" in sys.modules:
        apply(config.CompileSettings())


@contextlib.contextmanager
def enabled(level: str | int = "save", kernels: str | None = None, sync: bool = False,
            phases: str | None = None, dump_dir: str | None = None, reuse: bool = True) -> Iterator[None]:
    """``with aoti_debug.enabled(level="save"): ...`` — restores the previous state on exit."""
    previous = current()
    previous_dir = config.get_dump_dir_override()
    enable(level, kernels, sync, phases, dump_dir, reuse)
    try:
        yield
    finally:
        if dump_dir is not None:
            config.set_dump_dir(previous_dir)
            from .runtime import session

            session.flush()
            session.reset()
        if previous.active:
            apply(previous)
        else:
            disable()


def enable_from_env() -> None:
    """Install according to AOTI_DEBUG_* (bad values: one warning, nothing installed).

    A bad value of any compile-time variable (an unknown level, an unclosed ``[`` in
    ``AOTI_DEBUG_KERNELS``) turns instrumentation off rather than guessing: a filter
    that cannot be read could otherwise instrument every launch of a large model.
    """
    try:
        settings = config.compile_settings_from_env()
    except Exception as e:
        from .runtime.session import warn_once  # into FAILURES too

        warn_once("env-compile", f"{e}; instrumentation stays off, nothing is recorded")
        return
    if settings.active:
        from .codegen import inductor

        try:
            inductor.install(settings)
        except UnsupportedTorchError as e:  # the user's import must not fail: one warning
            from .runtime.session import warn_once

            warn_once("unsupported-torch", f"{e}; instrumentation stays off (aoti-debug doctor lists what is missing)")
        log.info("aoti_debug: instrumenting compiles at level %s", settings.level)


class _PostImportHook(importlib.abc.MetaPathFinder):
    """Runs :func:`enable_from_env` right after TRIGGER_MODULE has been executed."""

    def find_spec(self, name, path, target=None):
        if name != TRIGGER_MODULE:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_install(module):
            exec_module(module)
            try:
                enable_from_env()
            except Exception as e:  # never break the user's import of Inductor
                sys.stderr.write(f"[aoti_debug] warning: could not install instrumentation: {e}\n")

        spec.loader.exec_module = exec_and_install  # type: ignore[method-assign]
        return spec


def install_from_env_when_ready() -> None:
    """Install now if Inductor is loaded, else as soon as it is.

    Under ``AOTI_DEBUG_REFERENCE`` nothing is compiled: the reference replaces
    ``torch.compile``'s call into Inductor (a class ``torch/__init__`` defines before it
    autoloads us), installed as soon as torch is importable."""
    import os

    if os.environ.get(config.ENV_REFERENCE, "").strip():
        if "torch" in sys.modules:
            from .eager import active, enable_from_env as enable_reference_from_env

            if active() is None:
                enable_reference_from_env()
        return
    if not config.env_requests_instrumentation():
        return
    if TRIGGER_MODULE in sys.modules:
        enable_from_env()
    elif not any(isinstance(f, _PostImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportHook())
