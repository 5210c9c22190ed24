"""What a diff looked at (compare/coverage.py): values compared and not, by reason, and
the modules where none was; a diff is not EQUAL when such a module exists."""

from __future__ import annotations

import pytest

from aoti_debug.compare.coverage import Coverage, CoverageCounter, reason
from aoti_debug.compare.result import EXIT_BAD_INPUT, EXIT_DIFFERENT, EXIT_EQUAL, DiffResult, RecordComparison
from aoti_debug.format.schema import Record, RunInfo

pytestmark = pytest.mark.quick  # compiles nothing: make check runs it


class _Origin:
    def __init__(self, module):
        self.module = module


class _Prov:
    def __init__(self, modules):
        self.modules = modules
        self.module = ""

    def output(self, arg):
        return _Origin(self.modules.get(arg, ""))


class _Reader:
    """Just what CoverageCounter reads: a record's provenance."""

    def __init__(self, modules):
        self.prov = _Prov(modules)

    def provenance(self, record):
        return self.prov


def _rec(arg, phase="after", kind="tensor", site=0) -> Record:
    return Record(seq=1, launch=1, graph="graph0", wrapper="python", kernel="k", op="k", kernel_call=0,
                  phase=phase, arg=arg, dtype="float32", shape=[4], stride=[1], numel=4, kind=kind, site=site)


def _rows():
    return [
        RecordComparison("pass", _rec("buf0"), _rec("out")),
        RecordComparison("unpaired", _rec("buf1"), None, note="made on the way to node x's value, not that value"),
        RecordComparison("unpaired", _rec("buf2"), None, note="value of run A that run B did not materialise"),
        RecordComparison("unpaired", _rec("buf3"), None, note="made before the value of node y that is compared"),
        RecordComparison("volatile", _rec("buf4"), None),
        RecordComparison("unpaired", _rec("arg0_1", phase="before"), None),  # an input: not a value made
    ]


MODULES = {"buf0": "model.a", "buf1": "model.b", "buf2": "model.b.inner", "buf3": "model.c", "buf4": "model.d"}


def test_values_are_counted_by_reason_and_module():
    counter = CoverageCounter(_Reader(MODULES))
    counter.add(_rows())
    cov = counter.coverage
    assert (cov.values, cov.compared) == (5, 1)
    assert cov.not_compared == {"steps inside a node's computation": 1, "not in run B": 1,
                                "earlier values of a node compared later": 1,
                                "volatile (RNG seeds and offsets)": 1}
    assert cov.line().startswith("compared 1 of 5 values run A materialised (4 not: ")
    # model.d made only a volatile value, model.b (a step inside a node) and model.c (an
    # earlier value of a node) only values on the way to values compared elsewhere:
    # nothing there to see. model.b.inner's value has no counterpart: blind.
    assert cov.blind == ["model.b.inner"]
    assert cov.blind_line() == "nothing compared in: model.b.inner"
    assert cov.to_dict()["blind_modules"] == cov.blind


def test_a_module_looked_at_through_its_submodules_is_not_blind():
    counter = CoverageCounter(_Reader({"buf0": "model.attn.proj", "buf2": "model.attn"}))
    counter.add(_rows()[:3])
    assert "model.attn" not in counter.coverage.blind


def test_reason_falls_back_to_the_status():
    assert reason(RecordComparison("uninitialised", _rec("b"), None)) == "uninitialised memory"
    assert reason(RecordComparison("unpaired", _rec("b"), None, note="something new")) == "not in run B"


def _result(counts, coverage) -> DiffResult:
    info = RunInfo(format_version=1, run_id="r", level="save", pid=1, start_time="")
    return DiffResult("a", "b", info, info, [], counts, {}, coverage=coverage)


def test_equal_never_rests_on_not_having_looked():
    blind = Coverage(values=2, compared=1, modules={"model.a": [1, 1, 1], "model.b": [1, 0, 1]})
    seen = Coverage(values=1, compared=1, modules={"model.a": [1, 1, 1]})
    assert _result({"pass": 1}, seen).exit_code == EXIT_EQUAL
    result = _result({"pass": 1, "unpaired": 1}, blind)
    assert result.exit_code == EXIT_BAD_INPUT and result.verdict == "INCOMPLETE"
    assert "nothing compared in: model.b" in str(result)
    # a difference found is still a difference
    assert _result({"fail": 1}, blind).exit_code == EXIT_DIFFERENT
    assert _result({"pass": 1}, None).exit_code == EXIT_EQUAL
