"""Comparing and inspecting dumps: ``load_dump``, ``compare``, ``summarize``.

    import aoti_debug
    result = aoti_debug.compare("dumps/run_a", "dumps/run_b")
    if not result:
        print(result.first_divergence)
        result.to_frame()

pandas is imported only by the ``to_frame`` methods and the renderers.
"""

from __future__ import annotations

import sys
import types

from .births import Birth, Births, find_births
from .diff import compare
from .divergence import DivergenceFinder
from .dump import Dump, load_dump
from .metrics import Metrics, TensorComparator, default_tolerance
from .result import DiffResult, FirstDivergence, RecordComparison
from .show import KernelSummary, NonFinite, RunSummary, ShowResult, summarize

__all__ = [
    "compare", "load_dump", "summarize", "Dump", "DiffResult", "RecordComparison", "FirstDivergence",
    "Metrics", "TensorComparator", "default_tolerance", "ShowResult", "RunSummary", "KernelSummary",
    "NonFinite", "DivergenceFinder", "Birth", "Births", "find_births",
]


class _CallableModule(types.ModuleType):
    """``aoti_debug.compare(a, b)`` works although ``aoti_debug.compare`` is this package.

    Importing any submodule binds the package to the attribute ``aoti_debug.compare``,
    shadowing the lazy ``__getattr__`` in ``aoti_debug/__init__.py`` that would hand
    out the function; making the package callable keeps both spellings working.
    """

    def __call__(self, *args, **kwargs):
        return compare(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
