"""Bug or rounding: a compiled value against an fp64 reference, next to eager's own error.

An fp64 reference (``aoti-debug run --reference fp64``) records each value of the model
computed in float64, and beside it how far the model-dtype eager value is from it
(``Record.eager_error``, an RMS error). A compiled value's RMS error against the float64
value is then judged against eager's, as ``torch._dynamo.utils.same(fp64_ref=...)``
judges a whole model's output (``res_error <= multiplier * ref_error + tol / 10``), but
value by value:

    ratio = compiled error / max(eager error, one ulp of the value's scale)

``rounding`` while ``ratio <= factor``: the compiled value is as close to the exact
result as eager's is (fused kernels reorder sums and use other approximations of
``exp``/``tanh``; that costs a small factor, never orders of magnitude); ``suspect``
beyond it. The floor of one ulp at the value's RMS keeps a value that eager computes
exactly (a copy, an integer-valued sum) from making any rounding in the compiled run
suspect. NaN or Inf where the float64 value is finite is suspect unless eager's value
has them too (then eager's own error is not finite either).
"""

from __future__ import annotations

import math

from ..format.schema import Record
from .metrics import Metrics

#: Default ``factor``: a compiled value is ``rounding`` while its error against float64
#: is at most this many times eager's own. Measured on the real models of the test
#: suite (transformers' GPT-2, Llama, BERT, ResNet at float32; Python and C++ wrapper,
#: CPU): the largest ratio of an unmodified compile was 1.12; GPT-2 on an H100 (Triton,
#: float32 and float16) stays within 8 as well (tests/gpu/test_reference_gpu.py); a
#: ``tanh`` lowering made 1e-4 too large gave 116 at its kernel and 40-116 after it.
ROUNDING_FACTOR = 8.0

ROUNDING, SUSPECT = "rounding", "suspect"

#: Machine epsilon per model dtype (``torch.finfo(dtype).eps``).
_EPS = {"float64": 2.220446049250313e-16, "float32": 1.1920928955078125e-07, "float16": 0.0009765625,
        "bfloat16": 0.0078125, "complex64": 1.1920928955078125e-07, "complex128": 2.220446049250313e-16}


def applies(b: Record | None) -> bool:
    """Whether B is a value of an fp64 reference that knows eager's own error."""
    return b is not None and b.eager_error is not None


def judge(m: Metrics, b: Record, factor: float = ROUNDING_FACTOR) -> tuple[str, float]:
    """``(verdict, ratio)`` of a compiled value whose metrics against fp64 value ``b`` are ``m``."""
    eager = _number(b.eager_error)
    nonfinite = (m.nan_a or 0, m.inf_a or 0) != (m.nan_b or 0, m.inf_b or 0)
    if not math.isfinite(eager):
        return ROUNDING, math.nan  # eager itself has NaN/Inf where float64 has not: nothing to hold against
    if nonfinite or m.rmse is None or not math.isfinite(m.rmse):
        return SUSPECT, math.inf
    eps = _EPS.get(b.model_dtype or "", 0.0)
    floor = eps * (m.ref_rms or 0.0)
    scale = max(eager, floor)
    if scale == 0.0:
        ratio = 0.0 if m.rmse == 0.0 else math.inf
    else:
        ratio = m.rmse / scale
    return (ROUNDING if ratio <= factor else SUSPECT), ratio


def _number(v) -> float:
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def judge_stats(a: Record, b: Record, factor: float = ROUNDING_FACTOR) -> tuple[str, float]:
    """``(verdict, ratio)`` from recorded stats alone (a stats-level run against the reference).

    The differences of the means and of the standard deviations are each at most the RMS
    error, so their larger one is a lower bound of the compiled error: a ratio beyond
    ``factor`` proves ``suspect``; below it the value is taken as ``rounding``.
    """
    eager = _number(b.eager_error)
    sa, sb = a.stats, b.stats
    if sa is None or sb is None:
        return SUSPECT, math.nan
    if not math.isfinite(eager):
        return ROUNDING, math.nan
    if (sa.nan, sa.inf) != (sb.nan, sb.inf):
        return SUSPECT, math.inf
    gaps = [abs(x - y) for x, y in ((sa.mean, sb.mean), (sa.std, sb.std)) if x is not None and y is not None]
    if not gaps or not all(math.isfinite(g) for g in gaps):
        return SUSPECT, math.inf
    rms = math.hypot(sb.mean or 0.0, sb.std or 0.0)
    scale = max(eager, _EPS.get(b.model_dtype or "", 0.0) * rms)
    lower = max(gaps)
    ratio = (0.0 if lower == 0.0 else math.inf) if scale == 0.0 else lower / scale
    return (ROUNDING if ratio <= factor else SUSPECT), ratio
