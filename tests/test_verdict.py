"""The rounding/suspect verdict on its own (compare/verdict.py): pure functions of a
pair's metrics and the fp64 reference record."""

from __future__ import annotations

import math

import pytest

from aoti_debug.compare.metrics import Metrics
from aoti_debug.compare.verdict import (LOW_PRECISION_FACTOR, ROUNDING, ROUNDING_FACTOR, SUSPECT, describe_factor,
                                        factor_for, judge, judge_stats)
from aoti_debug.format.schema import Record, Stats

pytestmark = pytest.mark.quick  # compiles nothing: make check runs it


def _ref(eager_error, model_dtype="float32", stats=None) -> Record:
    return Record(seq=1, launch=1, graph="graph0", wrapper="eager", kernel="n", op="n", kernel_call=0,
                  phase="after", arg="out", dtype="float64", shape=[4], stride=[1], numel=4,
                  model_dtype=model_dtype, eager_error=eager_error, stats=stats)


def _m(rmse, ref_rms=0.1, nan_a=0, nan_b=0) -> Metrics:
    return Metrics(basis="values", passed=False, rmse=rmse, ref_rms=ref_rms, nan_a=nan_a, nan_b=nan_b, inf_a=0,
                   inf_b=0)


def test_ratio_against_eager_decides():
    assert judge(_m(2e-7), _ref(1e-7)) == (ROUNDING, 2.0)
    verdict, ratio = judge(_m(1e-5), _ref(1e-7))
    assert verdict == SUSPECT and math.isclose(ratio, 100.0)
    edge = ROUNDING_FACTOR * 1e-7
    assert judge(_m(edge), _ref(1e-7))[0] == ROUNDING
    assert judge(_m(edge * 1.01), _ref(1e-7))[0] == SUSPECT
    assert judge(_m(1e-6), _ref(1e-7), factor=20.0)[0] == ROUNDING


def test_exact_eager_is_given_one_rounding_of_room():
    # eager exact (a copy): the compiled value may still round once or twice, not more
    ulp = 1.1920928955078125e-07
    assert judge(_m(2 * ulp, ref_rms=1.0), _ref(0.0))[0] == ROUNDING
    assert judge(_m(100 * ulp, ref_rms=1.0), _ref(0.0))[0] == SUSPECT
    assert judge(_m(0.0, ref_rms=0.0), _ref(0.0)) == (ROUNDING, 0.0)
    assert judge(_m(1e-3, ref_rms=0.0), _ref(0.0)) == (SUSPECT, math.inf)


def test_nonfinite_is_suspect_unless_eager_has_it_too():
    assert judge(_m(0.0, nan_a=3), _ref(1e-7))[0] == SUSPECT
    assert judge(_m(0.0, nan_a=3), _ref("nan"))[0] == ROUNDING
    assert judge(_m(math.inf), _ref(1e-7)) == (SUSPECT, math.inf)


def test_stats_prove_suspect_only_beyond_the_bound():
    def st(mean, std, nan=0):
        return Stats(min=-1.0, max=1.0, mean=mean, std=std, absmax=1.0, nan=nan, inf=0)

    ref = _ref(1e-6, stats=st(0.5, 1.0))
    close = Record(**{**ref.__dict__, "wrapper": "python", "dtype": "float32", "model_dtype": None,
                      "eager_error": None, "stats": st(0.5 + 1e-6, 1.0)})
    assert judge_stats(close, ref)[0] == ROUNDING
    far = Record(**{**close.__dict__, "stats": st(0.5 + 1e-3, 1.0)})
    verdict, ratio = judge_stats(far, ref)
    assert verdict == SUSPECT and ratio > 100
    nan = Record(**{**close.__dict__, "stats": st(0.5, 1.0, nan=1)})
    assert judge_stats(nan, ref)[0] == SUSPECT


def test_low_precision_values_are_judged_by_a_factor_that_fits_their_dtype():
    # A 1% error in bfloat16 is about 4x eager's own (a rounding or two): suspect there,
    # while the same ratio in float32 is rounding.
    assert factor_for("bfloat16") == factor_for("float16") == factor_for("float8_e4m3fn") == LOW_PRECISION_FACTOR
    assert factor_for("float32") == factor_for(None) == ROUNDING_FACTOR
    assert factor_for("bfloat16", 20.0) == 20.0  # the user's factor, for every dtype
    assert judge(_m(1e-2, ref_rms=1.0), _ref(2.4e-3, "bfloat16"))[0] == SUSPECT
    assert judge(_m(4.2e-7, ref_rms=1.0), _ref(1e-7, "float32"))[0] == ROUNDING
    assert judge(_m(6e-3, ref_rms=1.0), _ref(2.4e-3, "bfloat16"))[0] == ROUNDING
    assert judge(_m(1e-2, ref_rms=1.0), _ref(2.4e-3, "bfloat16"), factor=8.0)[0] == ROUNDING
    assert "3x in bfloat16" in describe_factor() and describe_factor(5.0) == "5x eager's own error"


def test_the_floor_is_one_roundings_rms_error_in_the_models_dtype():
    # eager exact in bfloat16 (a copy): one rounding of the compiled run (RMS about an ulp
    # over sqrt(12)) is rounding; 1% off (1.3 ulps everywhere) is suspect.
    eps = 2.0 ** -7
    assert judge(_m(eps / math.sqrt(12.0), ref_rms=1.0), _ref(0.0, "bfloat16")) == (ROUNDING, 1.0)
    assert judge(_m(0.01, ref_rms=1.0), _ref(0.0, "bfloat16"))[0] == SUSPECT


def test_stats_use_the_dtypes_factor_too():
    def st(mean, std):
        return Stats(min=-1.0, max=1.0, mean=mean, std=std, absmax=1.0, nan=0, inf=0)

    ref = _ref(2.4e-3, "bfloat16", stats=st(0.0, 1.0))
    wrong = Record(**{**ref.__dict__, "wrapper": "python", "dtype": "bfloat16", "model_dtype": None,
                      "eager_error": None, "stats": st(0.0, 1.01)})
    verdict, ratio = judge_stats(wrong, ref)
    assert verdict == SUSPECT and 3 < ratio < 5
