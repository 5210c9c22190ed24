"""Bug or rounding: a compiled value against an fp64 reference, next to eager's own error.

An fp64 reference (``aoti-debug run --reference fp64``) records each value of the model
computed in float64, and beside it how far the model-dtype eager value is from it
(``Record.eager_error``, an RMS error). A compiled value's RMS error against the float64
value is then judged against eager's, as ``torch._dynamo.utils.same(fp64_ref=...)``
judges a whole model's output (``res_error <= multiplier * ref_error + tol / 10``), but
value by value:

    ratio = compiled error / max(eager error, one rounding's RMS error at the value's scale)

``rounding`` while ``ratio <= factor``: the compiled value is as close to the exact
result as eager's is (fused kernels reorder sums and use other approximations of
``exp``/``tanh``; that costs a small factor, never orders of magnitude); ``suspect``
beyond it. The floor, the RMS error of one rounding to the model's dtype at the value's
RMS (an ulp over sqrt(12)), keeps a value that eager computes exactly (a copy, an
integer-valued sum) from making the compiled run's one rounding suspect.

The factor fits the model's dtype, as ``torch._dynamo.utils.same`` uses a multiplier of 3
for bfloat16/float16 and 2 otherwise. In float32 the errors are sums of many roundings,
and fused kernels reorder them: 8x. In bfloat16 and float16 eager's own error is a few
roundings to the model's dtype, and a compiled kernel that computes in float32 and
rounds once is at most as far from float64 (measured on transformers' Llama and GPT-2
at bfloat16 and float16: at most 0.98x eager's own); a 1% error there is only 1.3 ulps
of bfloat16, about 4x eager's own error, so these dtypes get 3x. NaN or Inf where the float64 value is finite is suspect unless eager's value
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
#: The factor for values whose model dtype is of low precision (:data:`LOW_PRECISION`).
LOW_PRECISION_FACTOR = 3.0
LOW_PRECISION = frozenset(("bfloat16", "float16", "complex32", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                           "float8_e5m2fnuz"))

ROUNDING, SUSPECT = "rounding", "suspect"

#: Machine epsilon per model dtype (``torch.finfo(dtype).eps``).
_EPS = {"float64": 2.220446049250313e-16, "float32": 1.1920928955078125e-07, "float16": 0.0009765625,
        "bfloat16": 0.0078125, "complex32": 0.0009765625, "complex64": 1.1920928955078125e-07,
        "complex128": 2.220446049250313e-16, "float8_e4m3fn": 0.125, "float8_e4m3fnuz": 0.125, "float8_e5m2": 0.25,
        "float8_e5m2fnuz": 0.25}


def factor_for(model_dtype: str | None, factor: float | None = None) -> float:
    """The rounding factor a value of ``model_dtype`` is judged by: ``factor`` when the
    user gave one, else :data:`LOW_PRECISION_FACTOR` for bfloat16, float16 and float8,
    :data:`ROUNDING_FACTOR` for the rest."""
    if factor is not None:
        return factor
    return LOW_PRECISION_FACTOR if model_dtype in LOW_PRECISION else ROUNDING_FACTOR


def describe_factor(factor: float | None = None) -> str:
    """How the factor reads in a report: ``8x eager's own error (3x in bfloat16, float16 and float8)``."""
    if factor is not None:
        return f"{factor:g}x eager's own error"
    return (f"{ROUNDING_FACTOR:g}x eager's own error ({LOW_PRECISION_FACTOR:g}x in bfloat16, float16 and "
            f"float8)")


def _floor(model_dtype: str | None, rms: float) -> float:
    """The RMS error of one rounding to ``model_dtype`` at ``rms``: an ulp there (at most
    ``eps * rms``) over sqrt(12), the RMS of an error spread evenly over one ulp."""
    return _EPS.get(model_dtype or "", 0.0) * rms / math.sqrt(12.0)


def applies(b: Record | None) -> bool:
    """Whether B is a value of an fp64 reference that knows eager's own error."""
    return b is not None and b.eager_error is not None


def judge(m: Metrics, b: Record, factor: float | None = None) -> tuple[str, float]:
    """``(verdict, ratio)`` of a compiled value whose metrics against fp64 value ``b`` are ``m``
    (``factor``: None takes :func:`factor_for` the value's model dtype)."""
    factor = factor_for(b.model_dtype, factor)
    eager = _number(b.eager_error)
    nonfinite = (m.nan_a or 0, m.inf_a or 0) != (m.nan_b or 0, m.inf_b or 0)
    if not math.isfinite(eager):
        return ROUNDING, math.nan  # eager itself has NaN/Inf where float64 has not: nothing to hold against
    if nonfinite or m.rmse is None or not math.isfinite(m.rmse):
        return SUSPECT, math.inf
    scale = max(eager, _floor(b.model_dtype, m.ref_rms or 0.0))
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


def judge_stats(a: Record, b: Record, factor: float | None = None) -> tuple[str, float]:
    """``(verdict, ratio)`` from recorded stats alone (a stats-level run against the reference).

    The differences of the means and of the standard deviations are each at most the RMS
    error, so their larger one is a lower bound of the compiled error: a ratio beyond
    ``factor`` proves ``suspect``; below it the value is taken as ``rounding``.
    """
    factor = factor_for(b.model_dtype, factor)
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
    scale = max(eager, _floor(b.model_dtype, rms))
    lower = max(gaps)
    ratio = (0.0 if lower == 0.0 else math.inf) if scale == 0.0 else lower / scale
    return (ROUNDING if ratio <= factor else SUSPECT), ratio
