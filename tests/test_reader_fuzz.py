"""Property tests: real records and run headers, damaged every way, never pass and never crash.

The base records come from a real dump (a tiny compiled model at levels ``stats`` and
``save``: ``tests.test_reader_validation.build_real_runs``) plus lines as the C++
runtime writes them. Every strategy named ``damaged_*`` damages a record or header *by
construction*: it replaces a field with a value that an oracle written here, from the
format's description and independent of ``aoti_debug.format.validate``, calls invalid
(wrong type, out of range, unknown name), drops a key every writer writes, or breaks a
consistency (numel vs shape, stride vs shape). Most cases go through the library entry
points that ``show`` and ``diff`` use (``Record.from_dict``, ``RunReader``,
``summarize``, ``compare``); a smaller sample goes through the CLI. None of them may
get a traceback, exit 0, or reach the CLI's safety net for unexpected exceptions.
``valid_*`` strategies change records the way writers may, and those must still load.

run.json's ``flight``, graphs' ``sites``/``sources`` and ``uid`` (``damaged_section``)
and ``sites.jsonl`` lines (``damaged_site_line``, a note each, never an error) are
damaged alike; their ``*_at_length`` tests (``-m slow``) take 10,000 cases together
with the rest of those parts.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil

import pytest
import torch
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aoti_debug.cli import main
from aoti_debug.cli._common import INTERNAL_ERROR
from aoti_debug.compare import diff as compare, summarize
from aoti_debug.errors import DumpError, RecordError
from aoti_debug.format.reader import RunReader
from aoti_debug.format.schema import Record, RunInfo
from tests.test_reader_validation import (CPP_INFO, CPP_LINES, FLIGHT, GRAPH_WITH_SITES, PY_LINES, build_real_runs,
                                          read_lines)

_FAST = dict(deadline=None, derandomize=True, database=None,
             suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])

# -- the oracle: what the format allows, written from its description ----------------------------
INT64_MAX = 2**63 - 1
KNOWN_NAMES = {  # torch dtypes and the scalar types the runtimes write
    "bfloat16", "bits16", "bits1x8", "bits2x4", "bits4x2", "bits8", "bool", "complex128", "complex32", "complex64",
    "float16", "float32", "float4_e2m1fn_x2", "float64", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
    "float8_e5m2fnuz", "float8_e8m0fnu", "int1", "int16", "int2", "int3", "int32", "int4", "int5", "int6", "int64",
    "int7", "int8", "qint32", "qint8", "quint2x4", "quint4x2", "quint8", "uint1", "uint16", "uint2", "uint3",
    "uint32", "uint4", "uint5", "uint6", "uint64", "uint7", "uint8", "int", "float", "SymInt", "SymFloat", "SymBool",
}
STAT_FLOATS = ("min", "max", "mean", "std", "absmax")
STAT_COUNTS = ("nan", "inf")


def is_count(v) -> bool:
    return type(v) is int and 0 <= v <= INT64_MAX


def is_name(v) -> bool:
    return type(v) is str and len(v) > 0


def is_str(v) -> bool:
    return type(v) is str


def is_bool(v) -> bool:
    return v is True or v is False


def one_of(*names):
    return lambda v: type(v) is str and v in names


DIM_MAX = 2**48  # the most a size, stride or numel may be
EXTENT_MAX_BYTES = 2**40  # the most bytes a tensor's strides may span


def is_dims(v) -> bool:
    return type(v) is list and len(v) <= 64 and all(is_count(x) and x <= DIM_MAX for x in v)


def is_scalar_value(v) -> bool:
    if v is None or v is True or v is False or type(v) in (float, str):
        return True
    return type(v) is int and -2**63 <= v < 2**63


def spans_too_much(rec: dict) -> bool:
    """A tensor record whose sizes and strides reach past EXTENT_MAX_BYTES."""
    shape, stride = rec.get("shape"), rec.get("stride")
    if not (is_dims(shape) and is_dims(stride)) or len(shape) != len(stride) or 0 in shape:
        return False
    dtype = getattr(torch, str(rec.get("dtype")), None)
    size = dtype.itemsize if isinstance(dtype, torch.dtype) else 1
    return (1 + sum((n - 1) * s for n, s in zip(shape, stride))) * size > EXTENT_MAX_BYTES


def is_dtype_name(v) -> bool:
    return type(v) is str and (v in KNOWN_NAMES or re.fullmatch(r"dtype-?[0-9]+", v) is not None)


def is_checksum(v) -> bool:
    return type(v) is str and len(v) == 16 and all(c in "0123456789abcdef" for c in v)


def is_inside(v) -> bool:
    if type(v) is not str or not v or "\x00" in v or v[0] in "/\\":
        return False
    depth = 0
    for part in v.split("/"):
        depth += {"..": -1, ".": 0, "": 0}.get(part, 1)
        if depth < 0:
            return False
    return depth > 0


def is_stat(v) -> bool:
    if v is None or (type(v) is str and v in ("nan", "inf", "-inf")):
        return True
    if type(v) is float:
        return v == v
    if type(v) is not int:
        return False
    try:
        float(v)
    except OverflowError:
        return False
    return True


def is_stats(v) -> bool:
    return (type(v) is dict and all(k in v for k in STAT_FLOATS + STAT_COUNTS)
            and all(is_stat(v[k]) for k in STAT_FLOATS) and all(is_count(v[k]) for k in STAT_COUNTS))


#: field -> valid when not None (None: see NON_NULL)
RECORD_OK = {
    "seq": is_count, "launch": is_count, "kernel_call": is_count, "index": is_count,
    "numel": lambda v: is_count(v) and v <= DIM_MAX, "value": is_scalar_value,
    "graph": is_name, "kernel": is_name, "arg": is_name, "op": is_str, "expr": is_str, "device": is_str,
    "error": is_str, "skipped": is_str, "volatile": is_str, "shared": is_bool, "uninitialised": is_bool,
    "wrapper": one_of("python", "cpp"), "phase": one_of("before", "after"),
    "role": one_of("input", "output", "inout"), "kind": one_of("tensor", "scalar", "symint", "none", "other"),
    "shape": is_dims, "stride": is_dims, "dtype": is_dtype_name, "checksum": is_checksum, "file": is_inside,
    "stats": is_stats,
}
NON_NULL = {"seq", "launch", "graph", "kernel", "phase", "arg", "wrapper", "op", "kernel_call", "role", "kind", "index"}
TENSOR_NON_NULL = {"dtype", "shape", "stride", "device", "numel"}
REQUIRED = ("seq", "launch", "graph", "kernel", "phase", "arg")

INFO_OK = {
    "format_version": lambda v: type(v) is int and v == 1, "run_id": is_str, "start_time": is_str,
    "aoti_debug_version": is_str, "torch_version": is_str, "device": is_str, "kernels": is_str, "hostname": is_str,
    "level": one_of("off", "save", "print", "names", "stats"), "pid": is_count, "rank": is_count,
    "world_size": lambda v: is_count(v) and v >= 1, "sync": is_bool, "writer": one_of("python", "cpp"),
    "phases": lambda v: type(v) is list and all(one_of("before", "after")(x) for x in v),
    "argv": lambda v: type(v) is list and all(is_str(x) for x in v),
    "warnings": lambda v: type(v) is list and all(is_str(x) for x in v),
    "graphs": lambda v: type(v) is dict and all(type(g) is dict for g in v.values()),
}
GRAPH_OK = {"wrapper": one_of("python", "cpp"), "file": lambda v: v is None or is_str(v), "subgraph": is_str,
            "kind": one_of("forward", "backward", "inference"), "compile_id": is_str}
INFO_REQUIRED = ("format_version", "run_id", "level", "pid", "start_time")

# -- values -------------------------------------------------------------------------------------
EXTREMES = [0, -1, 1, True, False, 2**63 - 1, 2**63, -2**63, -2**63 - 1, 10**30, 10**40, -10**40, 10**400,
            1.5, -0.0, 1e308, float("nan"), float("inf"), float("-inf"), "", "x", "nan", "inf", "1", "one",
            "3x8", "1,8", [], {}, [1], [-1], [1.5], [True], ["1"], [[1]], {"a": 1}, None]
#: Deeper garbage, fixed: drawing nested structures is what makes examples slow.
NESTED = [[[[1.5]]], [[None, [True]]], {"a": [{"b": [None]}]}, {"min": [1], "nan": {}}, [{"seq": 1}],
          {"": {"": {"": ""}}}, [[], {}, [[]]], {"stats": {"min": float("nan")}}]
leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.sampled_from(EXTREMES),
                   st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4))
garbage = st.one_of(leaves, st.lists(leaves, max_size=3),
                    st.tuples(st.sampled_from(["", "a", "min", "seq", "kind"]), leaves).map(lambda kv: dict([kv])),
                    st.sampled_from(NESTED))
#: Near misses that type-only garbage rarely hits.
TRICKY = {
    "dtype": ["float99", "Float32", "float32 ", "torch.float32", "dtype", "dtypeX", "int128"],
    "checksum": ["0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0", "0123456789abcdeg",
                 "0123456789abcdef\n", "0x23456789abcdef"],
    "file": ["/etc/passwd", "../x.pt", "tensors/../../x.pt", "tensors/../..", ".", "./", "..", "\\x", "a\x00b",
             "tensors/..", ""],
    "phase": ["during", "Before", "after "], "role": ["bystander", "in"], "kind": ["blob", "Tensor"],
    "wrapper": ["rust", "C++"], "shape": [[3, -8], [2**63], [1, True], "3x8", [2**48 + 1], [1] * 65],
    "stride": [[1, -1], "1,8", [0.0], [2**62, 1], [2**48 + 1]], "numel": [2**48 + 1, 2**62],
    "value": [int("9" * 4000), 2**63, -2**63 - 1, [1], {"v": 1}, [], {}],
}


@functools.lru_cache(maxsize=None)
def bad_record_value(field: str, tensor: bool):
    ok = RECORD_OK[field]
    may_be_null = field in NON_NULL or (tensor and field in TENSOR_NON_NULL)
    values = st.one_of(garbage, st.sampled_from(TRICKY[field])) if field in TRICKY else garbage
    return values.filter(lambda v: (v is None and may_be_null) or (v is not None and not ok(v)))


def _damage_stats(args):
    key, value, drop = args
    s = {"min": 0.0, "max": 1.0, "mean": 0.5, "std": 0.1, "absmax": 1.0, "nan": 0, "inf": 0}
    if drop:
        del s[key]
    else:
        s[key] = value
    return s


#: A stats object missing a key or holding a bad value.
bad_stats = (st.tuples(st.sampled_from(STAT_FLOATS + STAT_COUNTS), garbage, st.booleans()).map(_damage_stats)
             .filter(lambda s: not is_stats(s)))
bad_info_value = {field: st.one_of(garbage, st.sampled_from([0, 2, -1, "1", ["during"], "before,after"])).filter(
    lambda v, ok=ok: not ok(v)) for field, ok in INFO_OK.items()}
bad_graph_value = {sub: st.one_of(garbage, st.sampled_from(["sideways", "Forward", 0])).filter(
    lambda v, ok=ok: not ok(v)) for sub, ok in GRAPH_OK.items()}
not_object = st.one_of(leaves.filter(lambda v: type(v) is not dict), st.lists(leaves, max_size=3),
                       st.sampled_from([v for v in NESTED if type(v) is not dict]))


# -- mutations ----------------------------------------------------------------------------------
def _tensor(rec: dict) -> bool:
    return rec.get("kind", "tensor") == "tensor"


# Strategies built once: building one per draw costs as much as the draw.
_HOW = st.sampled_from(["field", "field", "two_fields", "missing", "stats", "consistency", "not_object"])
_FIELD = st.sampled_from(sorted(RECORD_OK))
_CONSISTENCY = st.sampled_from(["numel", "stride+", "stride-", "shape", "extent"])
_MISSING = {True: st.sampled_from(list(REQUIRED) + sorted(TENSOR_NON_NULL)), False: st.sampled_from(REQUIRED)}


@st.composite
def damaged_record(draw):
    """A real record with at least one thing wrong (by the oracle above)."""
    rec = json.loads(json.dumps(draw(BASE_RECORD)))
    tensor = _tensor(rec)
    how = draw(_HOW)
    if how == "not_object":
        return draw(not_object)
    if how == "consistency" and tensor and "error" not in rec:
        shape, stride = rec["shape"], rec["stride"]
        choice = draw(_CONSISTENCY)
        if choice == "numel" or (choice == "shape" and 0 in shape):  # prod stays 0 whatever is appended
            rec["numel"] += draw(st.integers(1, 2**40))
        elif choice == "stride+" or not stride:
            rec["stride"] = stride + [draw(st.integers(0, 9))]
        elif choice == "stride-":
            rec["stride"] = stride[:-1]
        elif choice == "extent":  # within every bound alone, too far together
            rec["shape"], rec["stride"], rec["numel"] = [2, 3], [draw(st.integers(2**40, 2**48)), 1], 6
            assert spans_too_much(rec)
        else:
            rec["shape"], rec["stride"] = shape + [draw(st.integers(2, 64))], stride + [1]
    elif how == "missing":
        rec.pop(draw(_MISSING[tensor]), None)
    elif how == "stats":
        rec["stats"] = draw(bad_stats)
    else:
        for _ in range(2 if how == "two_fields" else 1):
            field = draw(_FIELD)
            rec[field] = draw(bad_record_value(field, tensor))
    return rec


@st.composite
def valid_record(draw):
    """A real record changed only in ways some writer may legitimately write."""
    rec = json.loads(json.dumps(draw(BASE_RECORD)))
    tensor = _tensor(rec)
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["value", "extra", "null", "stat", "count", "flag"]))
        if how == "value":
            rec["value"] = draw(garbage.filter(is_scalar_value))
        elif how == "extra":
            key = draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in RECORD_OK and k != "value"))
            rec[key] = draw(garbage)
        elif how == "null":
            optional = ["expr", "checksum", "file", "skipped", "shared", "uninitialised", "volatile", "stats"]
            if not (tensor and "error" in rec):  # it excuses a C++ record's shape [] with numel 0
                optional.append("error")
            rec[draw(st.sampled_from(optional + ([] if tensor else sorted(TENSOR_NON_NULL))))] = None
        elif how == "stat" and rec.get("stats"):
            rec["stats"][draw(st.sampled_from(STAT_FLOATS))] = draw(st.one_of(
                st.none(), st.floats(allow_nan=False), st.sampled_from(["nan", "inf", "-inf"]),
                st.integers(-2**1000, 2**1000)))
        elif how == "count":
            key = draw(st.sampled_from(["seq", "kernel_call", "index", "stats.nan", "stats.inf"]))
            value = draw(st.one_of(st.integers(0, INT64_MAX), st.sampled_from([0, INT64_MAX])))
            if key.startswith("stats."):
                if rec.get("stats"):
                    rec["stats"][key[6:]] = value
            else:
                rec[key] = value
        elif how == "flag":
            rec[draw(st.sampled_from(["uninitialised", "shared"]))] = draw(st.booleans())
            rec["volatile"] = draw(st.text(max_size=20))
    return rec


_INFO_HOW = st.sampled_from(["field", "field", "missing", "graph", "not_object"])
_INFO_FIELD = st.sampled_from(sorted(INFO_OK))
_INFO_MISSING = st.sampled_from(INFO_REQUIRED)
_GRAPH_FIELD = st.sampled_from(sorted(GRAPH_OK) + [None])


@st.composite
def damaged_info(draw):
    """A real run header with one thing wrong (by the oracle above)."""
    info = json.loads(json.dumps(draw(BASE_INFO)))
    how = draw(_INFO_HOW)
    if how == "not_object":
        return draw(not_object)
    if how == "missing":
        del info[draw(_INFO_MISSING)]
    elif how == "graph":
        label = draw(st.sampled_from(sorted(info["graphs"]) + ["graph9"]))
        sub = draw(_GRAPH_FIELD)
        if sub is None:
            info["graphs"][label] = draw(not_object)
        else:
            info["graphs"].setdefault(label, {})[sub] = draw(bad_graph_value[sub])
    else:
        field = draw(_INFO_FIELD)
        info[field] = draw(bad_info_value[field])
    return info


# -- the corpus ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    runs = build_real_runs(tmp_path_factory)
    records = read_lines(runs["stats"]) + read_lines(runs["save"]) + [json.loads(x) for x in CPP_LINES + PY_LINES]
    infos = [CPP_INFO]
    work = {}
    for level, run in runs.items():
        with open(os.path.join(run, "run.json")) as f:
            infos.append(json.load(f))
        work[level] = str(tmp_path_factory.mktemp(f"fuzz_{level}"))
        for side in ("a", "b"):
            shutil.copytree(run, os.path.join(work[level], side))
    assert len(records) > 20 and {r.get("kind") for r in records} >= {"tensor", "symint", "scalar", "none", "other"}
    lines = {level: [json.dumps(r) for r in read_lines(run)] for level, run in runs.items()}
    return {"records": records, "infos": infos, "runs": runs, "work": work, "lines": lines}


RECORDS: list = []  # filled by the fixture below before any example is drawn
INFOS: list = []
BASE_RECORD = st.deferred(lambda: st.sampled_from(RECORDS))
BASE_INFO = st.deferred(lambda: st.sampled_from(INFOS))


@pytest.fixture(scope="module", autouse=True)
def _bases(corpus):
    RECORDS[:] = corpus["records"]
    INFOS[:] = corpus["infos"]


def _place(corpus: dict, level: str, run: str, rec, at: int) -> int:
    """Write the real manifest of ``level`` into ``run`` with ``rec`` in place of its record
    ``at``; returns that line's number."""
    lines = list(corpus["lines"][level])
    at %= len(lines)
    lines[at] = json.dumps(rec)
    with open(os.path.join(run, "manifest.jsonl"), "w") as f:
        f.writelines(line + "\n" for line in lines)
    return at + 1


def _restore(corpus: dict, level: str, side: str) -> str:
    """The working copy ``side`` of the real run at ``level``, as it was written."""
    src, dst = corpus["runs"][level], os.path.join(corpus["work"][level], side)
    for name in ("manifest.jsonl", "run.json", "sites.jsonl"):
        if os.path.exists(os.path.join(src, name)):
            shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
    return dst


def _one_line(message: str) -> bool:
    return "\n" not in message and "\r" not in message and len(message) < 400


# -- the library: Record.from_dict, RunInfo.from_dict, the reader, summarize, compare ----------------
@settings(max_examples=6000, **_FAST)
@given(rec=damaged_record())
def test_from_dict_rejects_every_damaged_record(rec):
    with pytest.raises(RecordError) as e:
        Record.from_dict(rec)
    assert _one_line(str(e.value))


def _rules_pass(rec: dict) -> bool:
    """The field rules one call at a time (validate._fields), what the compiled check
    of a key order must agree with."""
    from aoti_debug.format import validate

    if any(k not in rec for k in validate.RECORD_REQUIRED):
        return False
    try:
        validate._fields(rec, validate.RECORD_FIELDS, "", RecordError)
    except RecordError:
        return False
    return True


@settings(max_examples=3000, **_FAST)
@given(rec=st.one_of(damaged_record(), valid_record()))
def test_the_compiled_field_check_agrees_with_the_rules(rec):
    """validate._fields_checker writes the rules of a key order out as one function: it
    passes exactly what the rules pass (a record it failed wrongly would only cost the
    plain path; one it passed wrongly would be damage let through)."""
    from aoti_debug.format import validate

    if type(rec) is not dict:  # damage of another kind: check_record refuses it first
        return
    assert validate._compile_fields_check(tuple(rec))(rec) == _rules_pass(rec), rec


@settings(max_examples=2700, **_FAST)
@given(info=damaged_info())
def test_from_dict_rejects_every_damaged_run_header(info):
    with pytest.raises(DumpError) as e:
        RunInfo.from_dict(info)
    assert _one_line(str(e.value))


@settings(max_examples=600, **_FAST)
@given(rec=damaged_record(), at=st.integers(0, 99))
def test_reader_and_summarize_name_the_damaged_line(corpus, rec, at):
    run = _restore(corpus, "stats", "a")
    line = _place(corpus, "stats", run, rec, at)
    reader = RunReader(run)
    assert len(list(reader.records())) == len(corpus["lines"]["stats"]) - 1
    assert len(reader.problems) == 1 and reader.problems[0].startswith(f"manifest.jsonl line {line}: ")
    assert _one_line(reader.problems[0]) and not reader.truncated
    result = summarize(run)
    assert result.exit_code == 2 and result.runs[0].problems == reader.problems


@settings(max_examples=400, **_FAST)
@given(info=damaged_info())
def test_reader_refuses_every_damaged_run_header(corpus, info):
    run = _restore(corpus, "stats", "a")
    with open(os.path.join(run, "run.json"), "w") as f:
        json.dump(info, f)
    with pytest.raises(DumpError) as e:
        RunReader(run)
    # A newer format_version is refused before the rest is read, naming the run directory.
    assert _one_line(str(e.value)) and ("run.json" in str(e.value) or "format version" in str(e.value))


@settings(max_examples=150, **_FAST)
@given(rec=damaged_record(), at=st.integers(0, 99), level=st.sampled_from(["stats", "save"]),
       side=st.sampled_from(["A", "B"]), use_checksums=st.booleans())
def test_compare_reports_the_damaged_line_of_either_run(corpus, rec, at, level, side, use_checksums):
    a, b = _restore(corpus, level, "a"), _restore(corpus, level, "b")
    line = _place(corpus, level, a if side == "A" else b, rec, at)
    result = compare(a, b, use_checksums=use_checksums, read_ahead=False)
    assert result.exit_code == 2
    assert len(result.problems) == 1
    assert result.problems[0].startswith(f"run {side}: manifest.jsonl line {line}: ")


@settings(max_examples=600, **_FAST)
@given(rec=valid_record(), at=st.integers(0, 99), deep=st.integers(0, 9))
def test_what_writers_may_write_loads_and_compares(corpus, rec, at, deep):
    Record.from_dict(rec)  # no exception
    if deep == 0:  # a sample through the reader, and show's and diff's library calls
        a, b = _restore(corpus, "stats", "a"), _restore(corpus, "stats", "b")
        _place(corpus, "stats", a, rec, at)
        assert not summarize(a).runs[0].problems
        result = compare(a, b, read_ahead=False)
        assert not result.problems and result.exit_code in (0, 1, 2)


# -- the CLI: a smaller sample --------------------------------------------------------------------
def _cli(*args):
    result = CliRunner().invoke(main, [*map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output and INTERNAL_ERROR not in result.output, result.output
    return result


@settings(max_examples=60, **_FAST)
@given(rec=damaged_record(), at=st.integers(0, 99), level=st.sampled_from(["stats", "save"]), full=st.booleans())
def test_show_and_diff_on_a_damaged_manifest(corpus, rec, at, level, full):
    a, b = _restore(corpus, level, "a"), _restore(corpus, level, "b")
    line = _place(corpus, level, a, rec, at)
    r = _cli("show", a)
    problems = [x for x in r.output.splitlines() if x.startswith("problem: ")]
    assert r.exit_code == 2 and len(problems) == 1
    assert problems[0].startswith(f"problem: manifest.jsonl line {line}: ")
    r = _cli("diff", "--no-progress", *(["--full"] if full else []), b, a)
    problems = [x for x in r.output.splitlines() if x.startswith("problem: ")]
    assert r.exit_code == 2 and len(problems) == 1
    assert problems[0].startswith(f"problem: run B: manifest.jsonl line {line}: ")


@settings(max_examples=30, **_FAST)
@given(info=damaged_info())
def test_show_and_diff_on_a_damaged_run_header(corpus, info):
    a = _restore(corpus, "stats", "a")
    with open(os.path.join(a, "run.json"), "w") as f:
        json.dump(info, f)
    for args in (["show", a], ["diff", "--no-progress", a, corpus["runs"]["stats"]]):
        r = _cli(*args)
        assert r.exit_code == 2 and r.output.count("\n") == 1 and r.output.startswith("Error: "), r.output


# -- run.json: flight, graphs' sites and sources, uid ------------------------------------------------
def is_int64(v) -> bool:
    return type(v) is int and -2**63 <= v < 2**63


def maybe(check):
    return lambda v: v is None or check(v)


def is_strs(v) -> bool:
    return type(v) is list and all(is_str(x) for x in v)


FLIGHT_OK = {"ring": maybe(is_count), "trigger": maybe(is_str), "max_records": is_count, "graph_calls": is_count,
             "calls_in_ring": is_count, "calls_written": is_count, "calls_dropped": is_count,
             "records_dropped": is_count, "signals": is_strs, "dumps": lambda v: type(v) is list,
             "fired": lambda v: v is None or type(v) is dict}
DUMP_OK = {"reason": is_str, "records": is_count, "time": is_str,
           "graph_calls": maybe(lambda v: type(v) is list and len(v) == 2 and all(is_int64(x) for x in v))}
FIRED_OK = {**{k: maybe(is_int64) for k in ("launch", "kernel_call", "site", "seq", "nan", "inf", "graph_call",
                                             "inputs")},
            **{k: maybe(is_str) for k in ("trigger", "graph", "kernel", "arg", "inputs_held")},
            "value": maybe(one_of("nan", "inf")), "saved": is_strs, "not_saved": is_strs,
            "next": lambda v: v is None or type(v) is dict}
NEXT_OK = {"launch": maybe(is_int64), "saved": is_strs}
PROV_OK = {"nodes": maybe(is_strs), "aten": maybe(is_strs), "module": maybe(is_str), "source": maybe(is_str),
           "code": maybe(is_str), "outputs": lambda v: v is None or type(v) is dict,
           "inputs": lambda v: v is None or type(v) is dict}
ORIGIN_OK = {**{k: maybe(is_str) for k in ("node", "aten", "module", "instance", "source", "code")},
             "inner": maybe(is_bool)}
SECTION_GRAPH_OK = {"sites": lambda v: type(v) is dict, "kernels": is_str,
                    "sources": lambda v: type(v) is dict and all(is_str(x) for x in v.values())}
BAD_SITE_KEYS = ["x", "-1", "1.5", "", " 1", "1 ", "\u0663", "0x1", "1" * 20]


def _bad(oracle: dict) -> dict:
    return {k: st.one_of(garbage, st.sampled_from([-1, 2**63, "x", [1], {"a": 1}, int("9" * 4000)])).filter(
        lambda v, ok=ok: not ok(v)) for k, ok in oracle.items()}


BAD_FLIGHT, BAD_DUMP, BAD_FIRED, BAD_NEXT = _bad(FLIGHT_OK), _bad(DUMP_OK), _bad(FIRED_OK), _bad(NEXT_OK)
BAD_PROV, BAD_ORIGIN, BAD_SECTION_GRAPH = _bad(PROV_OK), _bad(ORIGIN_OK), _bad(SECTION_GRAPH_OK)
_SECTION = st.sampled_from(["flight", "dump", "fired", "next", "not_object", "sites", "site_key", "site_value",
                            "prov", "origin", "graph", "sources_value", "uid"])


def _pick(draw, bad: dict) -> tuple[str, object]:
    key = draw(st.sampled_from(sorted(bad)))
    return key, draw(bad[key])


@st.composite
def damaged_section(draw):
    """A real run header with a valid flight recorder and sites, then one thing wrong in
    ``flight``, a graph's ``sites``, ``sources`` or ``kernels``, or ``uid``."""
    info = json.loads(json.dumps(draw(BASE_INFO)))
    info["flight"] = json.loads(json.dumps(FLIGHT))
    label = draw(st.sampled_from(sorted(info["graphs"])))
    graph = info["graphs"][label] = {**info["graphs"][label], **json.loads(json.dumps(GRAPH_WITH_SITES))}
    prov = graph["sites"]["0"]
    how = draw(_SECTION)
    if how == "flight":
        k, v = _pick(draw, BAD_FLIGHT)
        info["flight"][k] = v
    elif how == "dump":
        k, v = _pick(draw, BAD_DUMP)
        info["flight"]["dumps"][draw(st.integers(0, 1))][k] = v
    elif how == "fired":
        k, v = _pick(draw, BAD_FIRED)
        info["flight"]["fired"][k] = v
    elif how == "next":
        k, v = _pick(draw, BAD_NEXT)
        info["flight"]["fired"]["next"][k] = v
    elif how == "not_object":
        where = draw(st.sampled_from(["flight", "dumps", "fired", "next"]))
        bad = draw(not_object.filter(lambda v: v is not None))
        if where == "flight":
            info["flight"] = bad
        elif where == "dumps":
            info["flight"]["dumps"].append(bad)
        elif where == "fired":
            info["flight"]["fired"] = bad
        else:
            info["flight"]["fired"]["next"] = bad
    elif how == "sites":
        graph["sites"] = draw(not_object.filter(lambda v: v is not None))
    elif how == "site_key":
        graph["sites"][draw(st.sampled_from(BAD_SITE_KEYS))] = prov
    elif how == "site_value":
        graph["sites"][str(draw(st.integers(0, 99)))] = draw(not_object)
    elif how == "prov":
        k, v = _pick(draw, BAD_PROV)
        prov[k] = v
    elif how == "origin":
        origin = prov["outputs"]["buf0"]
        if draw(st.booleans()):
            prov[draw(st.sampled_from(["outputs", "inputs"]))] = {"x": draw(not_object)}
        else:
            k, v = _pick(draw, BAD_ORIGIN)
            origin[k] = v
    elif how == "graph":
        k, v = _pick(draw, BAD_SECTION_GRAPH)
        graph[k] = v
    elif how == "sources_value":
        graph["sources"] = {"w.py": draw(garbage.filter(lambda v: not is_str(v)))}
    else:
        info["uid"] = draw(st.one_of(garbage, st.sampled_from([-1, 2**63, "1000", 1.0, True])).filter(
            lambda v: v is not None and not is_count(v)))
    return info


_VALID_SECTION = st.sampled_from(["flight", "fired", "sites", "sources", "uid", "extra"])


@st.composite
def valid_section(draw):
    """A real header with a flight recorder, sites and sources as some writer may write them."""
    info = json.loads(json.dumps(draw(BASE_INFO)))
    info["flight"] = json.loads(json.dumps(FLIGHT))
    label = draw(st.sampled_from(sorted(info["graphs"])))
    graph = info["graphs"][label] = {**info["graphs"][label], **json.loads(json.dumps(GRAPH_WITH_SITES))}
    counts = st.integers(0, INT64_MAX)
    for _ in range(draw(st.integers(1, 4))):
        how = draw(_VALID_SECTION)
        if how == "flight":
            info["flight"][draw(st.sampled_from(["graph_calls", "calls_in_ring", "calls_dropped"]))] = draw(counts)
            info["flight"]["ring"] = draw(st.one_of(st.none(), counts))
            info["flight"]["dumps"].append({"reason": draw(st.text(max_size=8)), "records": draw(counts),
                                            "graph_calls": draw(st.one_of(st.none(), st.lists(
                                                st.integers(-2**63, 2**63 - 1), min_size=2, max_size=2))),
                                            "time": "t"})
        elif how == "fired":
            fired = info["flight"]["fired"]
            fired[draw(st.sampled_from(["launch", "seq", "site", "graph_call"]))] = draw(
                st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)))
            fired["value"] = draw(st.sampled_from(["nan", "inf", None]))
            fired["next"] = draw(st.sampled_from([None, {"launch": 3, "saved": ["a.pt"]}]))
        elif how == "sites":
            graph["sites"][str(draw(counts))] = {"nodes": draw(st.lists(st.text(max_size=5), max_size=3)),
                                                 "module": draw(st.one_of(st.none(), st.text(max_size=5))),
                                                 "outputs": {draw(st.text(max_size=4)): {"node": "n", "inner": True}},
                                                 draw(st.text(min_size=1, max_size=6)): draw(garbage)}
        elif how == "sources":
            graph["sources"][draw(st.text(min_size=1, max_size=8))] = draw(st.text(max_size=64))
        elif how == "uid":
            info["uid"] = draw(st.one_of(st.none(), counts))
        else:
            info["flight"][draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in FLIGHT_OK))] = draw(garbage)
    return info


def _rejects_damaged_section(info):
    with pytest.raises(DumpError) as e:
        RunInfo.from_dict(info)
    assert _one_line(str(e.value))


@settings(max_examples=1500, **_FAST)
@given(info=damaged_section())
def test_from_dict_rejects_every_damaged_run_section(info):
    _rejects_damaged_section(info)


@pytest.mark.slow
@settings(max_examples=5000, **_FAST)
@given(info=damaged_section())
def test_from_dict_rejects_every_damaged_run_section_at_length(info):
    _rejects_damaged_section(info)


@settings(max_examples=1000, **_FAST)
@given(info=valid_section())
def test_run_sections_as_writers_may_write_them_load(info):
    RunInfo.from_dict(info)  # no exception


@settings(max_examples=300, **_FAST)
@given(info=damaged_section())
def test_reader_refuses_every_damaged_run_section(corpus, info):
    run = _restore(corpus, "stats", "a")
    with open(os.path.join(run, "run.json"), "w") as f:
        json.dump(info, f)
    with pytest.raises(DumpError) as e:
        RunReader(run)
    assert _one_line(str(e.value)) and "run.json" in str(e.value)


# -- sites.jsonl --------------------------------------------------------------------------------
VALID_SITE = {"graph": "graph0", "site": 0, "kernel": "k", "provenance": GRAPH_WITH_SITES["sites"]["0"]}
SITE_OK = {"graph": is_name, "site": lambda v: is_count(v), "provenance": lambda v: type(v) is dict}
BAD_SITE = _bad(SITE_OK)
_SITE_HOW = st.sampled_from(["field", "field", "prov", "origin", "missing", "not_object", "bytes"])


@st.composite
def damaged_site_line(draw) -> bytes:
    """One line of ``sites.jsonl`` (no line end) that is not a usable site."""
    line = json.loads(json.dumps(VALID_SITE))
    how = draw(_SITE_HOW)
    if how == "bytes":
        raw = draw(st.binary(max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b and b.strip()))
        try:
            d = json.loads(raw)
            if isinstance(d, dict) and is_name(d.get("graph")) and is_count(d.get("site")):
                raw = b"[" + raw  # (a valid site line by chance: make it not)
        except (ValueError, RecursionError):
            pass
        return raw
    if how == "field":
        k, v = _pick(draw, BAD_SITE)
        line[k] = v
    elif how == "prov":
        k, v = _pick(draw, BAD_PROV)
        line["provenance"][k] = v
    elif how == "origin":
        k, v = _pick(draw, BAD_ORIGIN)
        line["provenance"]["outputs"]["buf0"][k] = v
    elif how == "missing":
        del line[draw(st.sampled_from(["graph", "site", "provenance"]))]
    else:
        line = draw(not_object)
    return json.dumps(line).encode()


_ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])


_SITE_LINES = st.lists(damaged_site_line(), min_size=1, max_size=3)


@settings(max_examples=600, **_FAST)
@given(bad=_SITE_LINES, at=st.integers(0, 99), end=_ENDS)
def test_damaged_site_lines_are_notes_never_errors(corpus, bad, at, end):
    _site_lines_are_notes(corpus, bad, at, end)


@pytest.mark.slow
@settings(max_examples=3500, **_FAST)
@given(bad=_SITE_LINES, at=st.integers(0, 99), end=_ENDS)
def test_damaged_site_lines_are_notes_never_errors_at_length(corpus, bad, at, end):
    _site_lines_are_notes(corpus, bad, at, end)


def _site_lines_are_notes(corpus, bad, at, end):
    run = _restore(corpus, "stats", "a")
    good = _site_lines(corpus)
    lines = list(good)
    at %= len(lines) + 1
    lines[at:at] = bad
    with open(os.path.join(run, "sites.jsonl"), "wb") as f:
        f.write(b"".join(x + end for x in lines))
    reader = RunReader(run)
    sites = reader.sites
    assert len(sites) == len(good)  # every good line is still read
    notes = [n for n in reader.notes if n.startswith("sites.jsonl line ")]
    assert [int(n.split()[2].rstrip(":")) for n in notes] == list(range(at + 1, at + 1 + len(bad)))
    assert all(_one_line(n) for n in notes)
    if at % 10 == 0:  # a sample through show's library call
        assert not summarize(run).runs[0].problems


def _site_lines(corpus) -> list[bytes]:
    with open(os.path.join(corpus["runs"]["stats"], "sites.jsonl"), "rb") as f:
        return [x for x in f.read().splitlines() if x.strip()]


@settings(max_examples=100, **_FAST)
@given(bad=st.lists(damaged_site_line(), min_size=1, max_size=3), end=_ENDS)
def test_show_and_diff_on_damaged_site_lines(corpus, bad, end):
    a, b = _restore(corpus, "stats", "a"), _restore(corpus, "stats", "b")
    with open(os.path.join(a, "sites.jsonl"), "wb") as f:
        f.write(b"".join(x + end for x in _site_lines(corpus) + bad))
    r = _cli("show", a)
    assert r.exit_code == 0 and "sites.jsonl line" in r.output, r.output
    for args in (["diff", "--no-progress", a, b], ["diff", "--no-progress", b, a]):
        assert _cli(*args).exit_code in (0, 1, 2)


@settings(max_examples=100, **_FAST)
@given(info=damaged_section())
def test_show_and_diff_on_a_damaged_run_section(corpus, info):
    a = _restore(corpus, "stats", "a")
    with open(os.path.join(a, "run.json"), "w") as f:
        json.dump(info, f)
    for args in (["show", a], ["diff", "--no-progress", a, corpus["runs"]["stats"]]):
        r = _cli(*args)
        assert r.exit_code == 2 and r.output.count("\n") == 1 and r.output.startswith("Error: "), r.output
