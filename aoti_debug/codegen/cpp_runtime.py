"""The C++ runtime that instrumented C++ wrappers call, as text to inline into them.

The source lives in ``aoti_debug_runtime.h`` next to this module (shipped as package
data): one block per generated wrapper, guarded so that a wrapper which splices in
another one's header (AOTI's constant-folding graph) still defines it once. It reads
``AOTI_DEBUG_DIR``, ``AOTI_DEBUG_MAX_BYTES``, ``AOTI_DEBUG_RUN_ID``, ``RANK`` and
``WORLD_SIZE`` when the model runs, exactly as the Python runtime does (config.py is
the only Python reader of the environment; this is the C++ one).
"""

from __future__ import annotations

import functools
import os

from .emit import cpp_string

#: Namespace of the emitted runtime; bump with the layout of its shared state.
NAMESPACE = "aoti_debug_rt_1"
HEADER_FILE = "aoti_debug_runtime.h"

#: Level name -> the number the C++ runtime switches on (PyTorch's numbering + 4).
LEVEL_CODES = {"save": 1, "print": 2, "names": 3, "stats": 4}


@functools.lru_cache(maxsize=1)
def runtime_source() -> str:
    """The runtime's C++ text (read once per process)."""
    with open(os.path.join(os.path.dirname(__file__), HEADER_FILE), encoding="utf-8") as f:
        text = f.read()
    # The JIT cpp_wrapper puts the C++ inside a Python r\"\"\"...\"\"\" literal.
    if '"""' in text:
        raise AssertionError(f"{HEADER_FILE} must not contain three double quotes in a row")
    return text


def header_block(device: str) -> str:
    """Defines for this wrapper plus the runtime, for the wrapper's header buffer."""
    from .. import __version__

    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover
        torch_version = ""
    lines = ["// ---- aoti_debug instrumentation runtime ----"]
    if device == "cuda":
        lines += ["#ifndef AOTI_DEBUG_CUDA", "#define AOTI_DEBUG_CUDA 1", "#endif"]
    lines += [
        "#ifndef AOTI_DEBUG_PKG_VERSION",
        f"#define AOTI_DEBUG_PKG_VERSION {cpp_string(__version__)}",
        "#endif",
        "#ifndef AOTI_DEBUG_TORCH_VERSION",
        f"#define AOTI_DEBUG_TORCH_VERSION {cpp_string(str(torch_version))}",
        "#endif",
    ]
    return "\n".join(lines) + "\n" + runtime_source() + "// ---- end of aoti_debug runtime ----\n"
