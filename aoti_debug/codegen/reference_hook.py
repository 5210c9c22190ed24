"""Routing ``torch.compile``'s Inductor backend to the eager reference.

``torch.compile(model)`` (``backend="inductor"``, any ``mode`` or ``options``) hands each
graph Dynamo captures to ``torch._TorchCompileInductorWrapper.__call__``, which calls
Inductor's ``compile_fx``. Under a reference (``aoti-debug run --reference``,
``aoti_debug.reference()``) that call goes to the reference backend instead, with the
same graph: Dynamo, its guards and graph breaks work as in the compiled run, and no
Inductor code runs. The AOTInductor wrapper (``_TorchCompileAOTInductorWrapper``, its own
``__call__``) and other backends are left alone.

The class is defined by ``torch/__init__.py`` before the device-backend autoload that
imports aoti_debug, and has this ``__call__(self, model_, inputs_, ...)`` in torch 2.11
and 2.13 (checked against both sources), with the compile's Inductor options in
``self.config`` and a ``config_patches`` keyword: the backend runs with them patched in,
as ``compile_fx`` would.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

OWNER = "_TorchCompileInductorWrapper"
ATTR = "__call__"
_MARK = "_aoti_debug_reference"


def _wrapper_class():
    torch = sys.modules.get("torch")
    cls = getattr(torch, OWNER, None) if torch is not None else None
    if cls is None or not callable(getattr(cls, ATTR, None)):
        from ..errors import UnsupportedTorchError

        raise UnsupportedTorchError(f"torch.{OWNER}.{ATTR} is missing: this torch cannot run an eager reference "
                                    f"of torch.compile (checked on torch 2.11 and 2.13)")
    return cls


def install(backend: Callable[..., Any]) -> None:
    """Send every Inductor compile of ``torch.compile`` to ``backend(gm, example_inputs)``."""
    cls = _wrapper_class()
    original = getattr(cls.__call__, _MARK, None) or cls.__call__

    def __call__(self, model_, inputs_, *args: Any, **kwargs: Any):
        with _options(self, kwargs.get("config_patches")):
            return backend(model_, inputs_)

    setattr(__call__, _MARK, original)
    cls.__call__ = __call__


def _options(wrapper, config_patches):
    """Inductor's config as ``torch.compile(options=..., mode=...)`` set it for this compile
    (the wrapper's ``config``, then ``config_patches``, as its ``__call__`` merges them):
    a training graph's joint-graph passes and partitioner read it while the reference
    asks AOTAutograd for its graphs (``reference_autograd``)."""
    import contextlib

    patches = {**(getattr(wrapper, "config", None) or {}), **(config_patches or {})}
    if not patches:
        return contextlib.nullcontext()
    try:
        from torch._inductor import config as inductor_config

        return inductor_config.patch(patches)
    except Exception:
        return contextlib.nullcontext()


def uninstall() -> None:
    """Put Inductor back (nothing to do when not installed)."""
    try:
        cls = _wrapper_class()
    except Exception:
        return
    original = getattr(cls.__call__, _MARK, None)
    if original is not None:
        cls.__call__ = original


def installed() -> bool:
    try:
        return getattr(_wrapper_class().__call__, _MARK, None) is not None
    except Exception:
        return False
