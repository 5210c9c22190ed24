"""The public face of aoti_debug's contact with ``torch._inductor``.

How we plug in: Inductor's wrapper codegen appends one "line" per launch to
``wrapper.lines`` while it schedules (``generate_kernel_call``,
``generate_extern_kernel_out``, ``generate_fallback_kernel``...). We wrap those
methods so that each launch is bracketed by two lines of our own which turn into code
only when the wrapper is materialised, in the wrapper's language (Python or C++), with
the expressions the real call uses. The built-in ``DebugPrinterManager`` is replaced by
our manager, which keeps its interface but emits nothing there: everything goes
through one path.

The work is split by job (only these codegen modules import ``torch._inductor``):

- :mod:`.patches` — the patch table (every Inductor function we replace, required or
  optional, with its torch versions and reason) and install/uninstall;
- :mod:`.wrapper_lines` — the lines we add and the replacements that add them
  (brackets, alias tracking, user-kernel context, CUDA-graph guard);
- :mod:`.describe` and :mod:`.volatile` — what a launch reads and writes, from
  Inductor's IR;
- :mod:`.context` — state shared by the hooks while a graph is generated;
- :mod:`.cache_tag` — our settings in the compile-cache key, Dynamo reset.

Checked on torch 2.13 (CPU) and 2.11 (GPU machine).
"""

from __future__ import annotations

from .cache_tag import code_fingerprint as _code_fingerprint  # noqa: F401
from .cache_tag import reset_dynamo, update_cache_tag as _update_cache_tag  # noqa: F401
from .context import current_graph_info  # noqa: F401
from .describe import arg_kind as _arg_kind, parse_params  # noqa: F401
from .patches import PATCHES, install, installed, report, torch_version, uninstall  # noqa: F401
from .volatile import mark_volatile as _mark_volatile, volatile_returns as _volatile_returns  # noqa: F401

from ..config import CompileSettings

#: (major, minor) of the installed torch; the patch table's version gates compare to it.
TORCH_VERSION = torch_version()


def active_settings() -> CompileSettings | None:
    """The settings of the current install, or None."""
    from . import context

    return context.settings()
