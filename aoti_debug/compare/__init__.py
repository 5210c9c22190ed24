"""Comparing and inspecting dumps: ``diff``, ``summarize`` (what ``show`` prints), ``load_dump``.

    import aoti_debug
    result = aoti_debug.diff("dumps/run_a", "dumps/run_b")
    if not result:
        print(result.first_divergence)
        result.to_frame()

pandas is imported only by the ``to_frame`` methods and the renderers, matplotlib
only by ``plot_diff`` (``aoti-debug diff --plot``).
"""

from __future__ import annotations

from .births import Birth, Births, find_births
from .diff import diff
from .divergence import DivergenceFinder
from .dump import Dump, load_dump
from .metrics import Metrics, TensorComparator, default_tolerance
from .plot import plot_diff
from .result import DiffResult, FirstDivergence, RecordComparison
from .show import KernelSummary, NonFinite, RunSummary, ShowResult, summarize

__all__ = [
    "diff", "load_dump", "summarize", "Dump", "DiffResult", "RecordComparison", "FirstDivergence",
    "Metrics", "TensorComparator", "default_tolerance", "ShowResult", "RunSummary", "KernelSummary",
    "NonFinite", "DivergenceFinder", "Birth", "Births", "find_births", "plot_diff",
]
