"""aoti_debug: an intermediate-value debugger for PyTorch Inductor and AOTInductor.

Switch it on with ``AOTI_DEBUG_LEVEL=save python script.py``, ``aoti-debug run``, or::

    import aoti_debug
    with aoti_debug.enabled(level="save", kernels="triton_*"):
        compiled(x)

See README.md for the levels, the dump layout and the CLI.
"""

from __future__ import annotations

__version__ = "0.1.0"

from ._switch import disable, enable, enabled  # noqa: E402  (light: no torch import)

__all__ = ["__version__", "enable", "disable", "enabled", "reference", "record_reference", "diff", "show",
           "load_dump", "flush"]


def reference(dtype=None, level: str | int = "save", kernels: str | None = None, dump_dir: str | None = None):
    """``with aoti_debug.reference(dtype=torch.float64, dump_dir="ref"): compiled(x)``: inside,
    functions compiled with ``torch.compile`` run eagerly (in float64 beside the model's
    dtypes when ``dtype=torch.float64``) and are recorded, keyed by provenance, so that
    ``aoti-debug diff compiled ref`` names the first kernel that departs from eager
    (``aoti_debug.eager.reference``)."""
    from .eager import reference as _reference

    return _reference(dtype=dtype, level=level, kernels=kernels, dump_dir=dump_dir)


def record_reference(program, args=(), kwargs=None, **options):
    """The eager (``dtype=None``) or float64 (``dtype=torch.float64``) reference of a
    ``torch.export`` program, recorded into ``dump_dir`` to diff an AOTInductor package of it
    against (``aoti_debug.eager.exported.record_reference``)."""
    from .eager.exported import record_reference as _record

    return _record(program, args, kwargs, **options)


def flush() -> None:
    """Wait until every record of this process is on disk."""
    from .runtime import session

    session.flush()


#: The library behind ``aoti-debug diff`` / ``show``: top-level name -> its name in ``compare``.
_LAZY = {"diff": "diff", "show": "summarize", "load_dump": "load_dump"}


def __getattr__(name: str):
    # The comparison library pulls in pandas: import it only when asked for.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(__name__ + ".compare"), _LAZY[name])
    raise AttributeError(f"module 'aoti_debug' has no attribute {name!r}")


def _install_from_env() -> None:
    from ._switch import install_from_env_when_ready

    install_from_env_when_ready()


_install_from_env()
