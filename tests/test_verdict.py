"""The rounding/suspect verdict on its own (compare/verdict.py): pure functions of a
pair's metrics and the fp64 reference record."""

from __future__ import annotations

import math

from aoti_debug.compare.metrics import Metrics
from aoti_debug.compare.verdict import ROUNDING, ROUNDING_FACTOR, SUSPECT, judge, judge_stats
from aoti_debug.format.schema import Record, Stats


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


def test_exact_eager_is_given_one_ulp_of_room():
    # eager exact (a copy): the compiled value may still round by an ulp or so, not more
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
