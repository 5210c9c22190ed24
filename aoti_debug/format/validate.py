"""Checks a dump's JSON against format version 1 before anything else reads it.

``Record.from_dict`` and ``RunInfo.from_dict`` call these checks, so every reader of a
dump (``show``, ``diff``, the library) judges damage alike: a field of the wrong type,
out of range, outside its enumeration, or at odds with its neighbours (``numel`` and
``shape``) is named in one line, and never surfaces later as a Python exception in
whatever code first touches the value.

The rules accept everything the two writers write, the Python runtime
(``runtime/hooks.py``) and the C++ runtime (``codegen/aoti_debug_runtime.h``), and
nothing a reader would have to guess about. Keys this version does not know are
ignored: a newer writer of format version 1 may add fields, and this reader must still
read the rest.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any, Callable, get_args

from ..config import LEVELS
from ..errors import DumpError, RecordError
from .schema import FORMAT_VERSION, STAT_KEYS, Kind, Role

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
#: The largest size, stride or element count of a tensor record (256 Ti elements).
MAX_DIM = 1 << 48
#: The most bytes a tensor's sizes and strides may span (1 TiB, more than any device
#: holds): what a reader allocates by them (replay, repro) is what a machine could have held.
MAX_EXTENT_BYTES = 1 << 40
#: The most dimensions a tensor record may have.
MAX_NDIM = 64
#: The largest float a stat may be as an integer (``float()`` of it must not overflow).
_FLOAT_MAX = 1.7976931348623157e308

PHASES = ("before", "after")
ROLES: tuple[str, ...] = get_args(Role)
KINDS: tuple[str, ...] = get_args(Kind)
WRAPPERS = ("python", "cpp")
#: What made a record: a wrapper, or the eager reference (``aoti_debug.eager``).
RECORD_WRAPPERS = (*WRAPPERS, "eager")
GRAPH_KINDS = ("forward", "backward", "inference", "reference")
REFERENCE_MODES = ("eager", "fp64")
LEVEL_NAMES = tuple(LEVELS.values())

#: ``str(dtype)`` without ``torch.`` for every dtype of torch 2.13 (a test compares this
#: with the installed torch, so a new dtype is added here, not rejected as damage).
TENSOR_DTYPES = frozenset({
    "bfloat16", "bits16", "bits1x8", "bits2x4", "bits4x2", "bits8", "bool", "complex128", "complex32",
    "complex64", "float16", "float32", "float4_e2m1fn_x2", "float64", "float8_e4m3fn", "float8_e4m3fnuz",
    "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "int1", "int16", "int2", "int3", "int32", "int4",
    "int5", "int6", "int64", "int7", "int8", "qint32", "qint8", "quint2x4", "quint4x2", "quint8", "uint1",
    "uint16", "uint2", "uint3", "uint32", "uint4", "uint5", "uint6", "uint64", "uint7", "uint8",
})
#: Element sizes in bytes of the dtypes wider than one byte (the rest: one byte, or less).
DTYPE_BYTES = {
    "complex128": 16, "float64": 8, "int64": 8, "uint64": 8, "complex64": 8, "float32": 4, "int32": 4,
    "uint32": 4, "qint32": 4, "complex32": 4, "float16": 2, "bfloat16": 2, "int16": 2, "uint16": 2, "bits16": 2,
}
#: What the runtimes write as the dtype of a scalar or symint: the Python type's name.
SCALAR_TYPES = frozenset({"int", "float", "bool", "SymInt", "SymFloat", "SymBool"})
#: The C++ runtime names a dtype code it has no table entry for ``dtype<code>`` (its
#: record then says why it has no values).
_CPP_UNKNOWN_DTYPE = re.compile(r"dtype-?[0-9]{1,10}")
#: ``runtime.stats.format_checksum`` and the C++ ``%016llx``.
_CHECKSUM = re.compile(r"[0-9a-f]{16}")
#: How both writers spell non-finite stats and scalar values (``format.schema._jsonable``;
#: a NaN stat is ``null``). Dumps of earlier C++ runtimes hold JSON ``Infinity`` tokens,
#: which read the same.
_STAT_WORDS = ("nan", "inf", "-inf")

_Check = Callable[[Any], bool]
#: A field's rule: its check, and what it must be (or a function that words the problem).
_Rule = tuple[_Check, Any]


def show_value(value: Any) -> str:
    """A field's value as the manifest spells it, cut short for a one-line message."""
    if type(value) is int and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"  # its digits say less, and str() may refuse
    try:
        text = json.dumps(value, allow_nan=True, ensure_ascii=True)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _count(v: Any) -> bool:
    # type(), not isinstance: bool is an int subclass, and JSON true is never a count.
    return type(v) is int and 0 <= v <= INT64_MAX


def _positive(v: Any) -> bool:
    return type(v) is int and 1 <= v <= INT64_MAX


def _text(v: Any) -> bool:
    return type(v) is str


def _name(v: Any) -> bool:
    return type(v) is str and v != ""


def _flag(v: Any) -> bool:
    return type(v) is bool


def _choice(options: tuple[str, ...]) -> _Check:
    allowed = frozenset(options)
    return lambda v: type(v) is str and v in allowed


def _dims(v: Any) -> bool:
    return type(v) is list and len(v) <= MAX_NDIM and all(type(x) is int and 0 <= x <= MAX_DIM for x in v)


def _int64(v: Any) -> bool:
    return type(v) is int and INT64_MIN <= v <= INT64_MAX


def _tensor_count(v: Any) -> bool:
    return type(v) is int and 0 <= v <= MAX_DIM


def _scalar_value(v: Any) -> bool:
    """A scalar's or symint's value as the writers write it: a 64-bit integer, a float
    (JSON's NaN/Infinity included), true/false, a string ("nan", "inf", a symbolic
    expression, a type name) or null."""
    if v is None or type(v) in (bool, float, str):
        return True
    return _int64(v)


def _texts(v: Any) -> bool:
    return type(v) is list and all(type(x) is str for x in v)


def _phase_list(v: Any) -> bool:
    return type(v) is list and all(type(x) is str and x in PHASES for x in v)


def _tensor_dtype(v: Any) -> bool:
    return type(v) is str and (v in TENSOR_DTYPES or _CPP_UNKNOWN_DTYPE.fullmatch(v) is not None)


def _value_dtype(v: Any) -> bool:
    return type(v) is str and (v in SCALAR_TYPES or v in TENSOR_DTYPES)


def _checksum(v: Any) -> bool:
    return type(v) is str and _CHECKSUM.fullmatch(v) is not None


def _relpath(v: Any) -> bool:
    """A path relative to the run directory that stays inside it, lexically (symlinks
    are judged when the file is opened: ``RunReader.tensor_path``)."""
    if type(v) is not str or not v or "\x00" in v or v.startswith(("/", "\\")):
        return False
    norm = posixpath.normpath(v)
    return norm not in (".", "..") and not norm.startswith("../")


def _error(v: Any) -> bool:
    """An error measure: a non-negative number, or "nan" / "inf" as the writers spell them."""
    if type(v) is int:
        return 0 <= v <= _FLOAT_MAX
    if type(v) is float:
        return v >= 0 and v != float("inf")
    return type(v) is str and v in ("nan", "inf")


def _stat(v: Any) -> bool:
    if v is None:
        return True
    if type(v) is float:
        return v == v  # +-inf: earlier C++ runtimes' Infinity; NaN is written as null or "nan"
    if type(v) is int:
        return abs(v) <= _FLOAT_MAX  # float() of it must not overflow
    return type(v) is str and v in _STAT_WORDS


def _opt(check: _Check) -> _Check:
    return lambda v: v is None or check(v)


def _file_problem(v: Any) -> str:
    if type(v) is str and v:
        # The wording RunReader.tensor_path uses for a path that resolves outside.
        return f"file {show_value(v)} points outside the dump"
    return f"file is {show_value(v)}, not a relative path inside the run directory"


_COUNT = "a non-negative 64-bit integer"
_TEXT = "a string"
_DIMS = f"a list of at most {MAX_NDIM} integers from 0 to 2**48"


def _one_of(options) -> str:
    return "one of " + ", ".join(options)


#: Record field -> (check, what it must be). ``None`` is allowed where the schema's
#: field is optional; the writers leave such keys out or write ``null``.
RECORD_FIELDS: dict[str, _Rule] = {
    "seq": (_count, _COUNT),
    "launch": (_count, _COUNT),
    "graph": (_name, "a non-empty string"),
    "wrapper": (_choice(RECORD_WRAPPERS), _one_of(RECORD_WRAPPERS)),
    "kernel": (_name, "a non-empty string"),
    "op": (_text, _TEXT),
    "kernel_call": (_count, _COUNT),
    "phase": (_choice(PHASES), _one_of(PHASES)),
    "arg": (_name, "a non-empty string"),
    "role": (_choice(ROLES), _one_of(ROLES)),
    "kind": (_choice(KINDS), _one_of(KINDS)),
    "index": (_count, _COUNT),
    "expr": (_opt(_text), _TEXT),
    "dtype": (_opt(_text), _TEXT),  # which names are known depends on kind: _check_kind
    "shape": (_opt(_dims), _DIMS),
    "stride": (_opt(_dims), _DIMS),
    "device": (_opt(_text), _TEXT),
    "numel": (_opt(_tensor_count), "an integer from 0 to 2**48"),
    "stats": (_opt(lambda v: type(v) is dict), "an object (" + ", ".join(STAT_KEYS) + ") or null"),
    "checksum": (_opt(_checksum), "16 lower-case hex digits"),
    "file": (_opt(_relpath), _file_problem),
    "value": (_scalar_value, "a 64-bit integer, a number, a string, true, false or null"),
    "error": (_opt(_text), _TEXT),
    "skipped": (_opt(_text), _TEXT),
    "shared": (_opt(_flag), "true or false"),
    "uninitialised": (_opt(_flag), "true or false"),
    "volatile": (_opt(_text), "a string (the reason)"),
    "reused": (_opt(_count), _COUNT),
    "site": (_opt(_count), _COUNT),
    "model_dtype": (_opt(_tensor_dtype), "a dtype name"),
    "eager_error": (_opt(_error), 'a non-negative number, "nan" or "inf"'),
}
RECORD_REQUIRED = ("seq", "launch", "graph", "kernel", "phase", "arg")
#: What every writer writes for a tensor, even one it could not read (then with ``error``).
TENSOR_REQUIRED = ("dtype", "shape", "stride", "device", "numel")

INFO_FIELDS: dict[str, _Rule] = {
    "format_version": (lambda v: type(v) is int and 1 <= v <= FORMAT_VERSION,
                       f"an integer from 1 to {FORMAT_VERSION}"),
    "run_id": (_text, _TEXT),
    "level": (_choice(LEVEL_NAMES), _one_of(LEVEL_NAMES)),
    "pid": (_count, _COUNT),
    "start_time": (_text, _TEXT),
    "aoti_debug_version": (_text, _TEXT),
    "torch_version": (_text, _TEXT),
    "device": (_text, _TEXT),
    "kernels": (_text, _TEXT),
    "phases": (_phase_list, "a list of before/after"),
    "sync": (_flag, "true or false"),
    "argv": (_texts, "a list of strings"),
    "rank": (_count, _COUNT),
    "world_size": (_positive, "a positive 64-bit integer"),
    "hostname": (_text, _TEXT),
    "writer": (_choice(WRAPPERS), _one_of(WRAPPERS)),
    "graphs": (lambda v: type(v) is dict, "an object (graph label -> graph)"),
    "warnings": (_texts, "a list of strings"),
    "flight": (lambda v: v is None or type(v) is dict, "an object (the flight recorder) or null"),
    "uid": (_opt(_count), _COUNT + " or null"),
}
INFO_REQUIRED = ("format_version", "run_id", "level", "pid", "start_time")

#: Keys of one entry of run.json ``graphs``; the runtimes may add more (provenance).
GRAPH_FIELDS: dict[str, _Rule] = {
    "wrapper": (_choice(RECORD_WRAPPERS), _one_of(RECORD_WRAPPERS)),
    "reference": (_choice(REFERENCE_MODES), _one_of(REFERENCE_MODES)),
    "file": (_opt(_text), "a string or null"),
    "subgraph": (_text, _TEXT),
    "kind": (_choice(GRAPH_KINDS), _one_of(GRAPH_KINDS)),
    "compile_id": (_text, "a string (a Dynamo compile id such as 0/0)"),
    "kernels": (_text, _TEXT),
    "sites": (lambda v: type(v) is dict, "an object (site number -> provenance)"),
    "sources": (lambda v: type(v) is dict and all(type(x) is str for x in v.values()),
                "an object (file name -> sha256)"),
}

#: Keys of run.json ``flight`` (docs/format.md "Flight recorder"), as both runtimes write them.
FLIGHT_FIELDS: dict[str, _Rule] = {
    "ring": (_opt(_count), _COUNT + " or null"),
    "trigger": (_opt(_text), "a string or null"),
    "max_records": (_count, _COUNT),
    "graph_calls": (_count, _COUNT),
    "calls_in_ring": (_count, _COUNT),
    "calls_written": (_count, _COUNT),
    "calls_dropped": (_count, _COUNT),
    "records_dropped": (_count, _COUNT),
    "signals": (_texts, "a list of strings"),
    "dumps": (lambda v: type(v) is list, "a list of objects (the ring's writes)"),
    "fired": (lambda v: v is None or type(v) is dict, "an object (what the trigger fired on) or null"),
}
#: One entry of ``flight.dumps``.
FLIGHT_DUMP_FIELDS: dict[str, _Rule] = {
    "reason": (_text, _TEXT),
    "records": (_count, _COUNT),
    "graph_calls": (_opt(lambda v: type(v) is list and len(v) == 2 and all(_int64(x) for x in v)),
                    "a list of two integers (the first and last graph call) or null"),
    "time": (_text, _TEXT),
}
_OPT_INT = (_opt(_int64), "a 64-bit integer or null")
_OPT_TEXT = (_opt(_text), "a string or null")
#: ``flight.fired`` (and its ``next``).
FLIGHT_FIRED_FIELDS: dict[str, _Rule] = {
    "trigger": _OPT_TEXT, "value": (_opt(_choice(("nan", "inf"))), "nan, inf or null"), "graph": _OPT_TEXT,
    "launch": _OPT_INT, "kernel": _OPT_TEXT, "kernel_call": _OPT_INT, "site": _OPT_INT, "seq": _OPT_INT,
    "arg": _OPT_TEXT, "nan": _OPT_INT, "inf": _OPT_INT, "graph_call": _OPT_INT, "inputs": _OPT_INT,
    "inputs_held": _OPT_TEXT, "saved": (_texts, "a list of strings"), "not_saved": (_texts, "a list of strings"),
    "next": (lambda v: v is None or type(v) is dict, "an object (the next occurrence) or null"),
}
FLIGHT_NEXT_FIELDS: dict[str, _Rule] = {"launch": _OPT_INT, "saved": (_texts, "a list of strings")}


def _fields(d: dict, spec: dict[str, _Rule], where: str, error: type[Exception]) -> None:
    for key, value in d.items():
        rule = spec.get(key)
        if rule is not None and not rule[0](value):
            expected = rule[1]
            raise error(where + (expected(value) if callable(expected) else
                                 f"{key} is {show_value(value)}, not {expected}"))


#: The same checks as :data:`RECORD_FIELDS`, written out inline (``{v}``: the value) for
#: :func:`_fields_checker`; a field without one calls its rule.
_INLINE = {
    **dict.fromkeys(("seq", "launch", "kernel_call", "index"), "type({v}) is int and 0 <= {v} <= INT64_MAX"),
    **dict.fromkeys(("graph", "kernel", "arg"), "type({v}) is str and {v} != ''"),
    "op": "type({v}) is str",
    "wrapper": "type({v}) is str and {v} in _RECORD_WRAPPERS",
    "phase": "type({v}) is str and {v} in _PHASES",
    "role": "type({v}) is str and {v} in _ROLES",
    "kind": "type({v}) is str and {v} in _KINDS",
    **dict.fromkeys(("expr", "dtype", "device", "error", "skipped", "volatile"), "{v} is None or type({v}) is str"),
    **dict.fromkeys(("shared", "uninitialised"), "{v} is None or type({v}) is bool"),
    **dict.fromkeys(("reused", "site"), "{v} is None or (type({v}) is int and 0 <= {v} <= INT64_MAX)"),
    "numel": "{v} is None or (type({v}) is int and 0 <= {v} <= MAX_DIM)",
    "stats": "{v} is None or type({v}) is dict",
    "shape": "{v} is None or _dims({v})",
    "stride": "{v} is None or _dims({v})",
}
_CHECKERS: dict[tuple, Callable[[dict], bool]] = {}
#: Distinct key orders a reader compiles a checker for (a writer has one or two; a
#: hand-made manifest may have any number, and those beyond take the plain path).
_MAX_CHECKERS = 64


def _fields_checker(keys: tuple) -> Callable[[dict], bool] | None:
    """:func:`_compile_fields_check` of ``keys``, made once; None once
    :data:`_MAX_CHECKERS` are made."""
    fn = _CHECKERS.get(keys)
    if fn is None and len(_CHECKERS) < _MAX_CHECKERS:
        fn = _CHECKERS[keys] = _compile_fields_check(keys)
    return fn


def _compile_fields_check(keys: tuple) -> Callable[[dict], bool]:
    """A function that is True for a record with exactly these ``keys`` (in this order)
    whose every field passes :data:`RECORD_FIELDS` and whose required keys are all
    there: :func:`_fields` without a call per field. False where anything fails (then
    :func:`_fields` says what)."""
    env = {"INT64_MAX": INT64_MAX, "MAX_DIM": MAX_DIM, "_dims": _dims, "_RECORD_WRAPPERS": frozenset(RECORD_WRAPPERS),
           "_PHASES": frozenset(PHASES), "_ROLES": frozenset(ROLES), "_KINDS": frozenset(KINDS)}
    if not all(k in keys for k in RECORD_REQUIRED):
        return lambda d: False
    lines = ["def check(d):"]
    for i, key in enumerate(k for k in keys if k in RECORD_FIELDS):  # only known names reach the code
        lines.append(f"    v = d[{key!r}]")
        if key in _INLINE:
            test = _INLINE[key].format(v="v")
        else:
            env[f"rule{i}"] = RECORD_FIELDS[key][0]
            test = f"rule{i}(v)"
        lines.append(f"    if not ({test}):\n        return False")
    lines.append("    return True")
    exec("\n".join(lines), env)  # noqa: S102 - the text is built above from this module's names
    return env["check"]


def check_record(d: Any) -> None:
    """Raise :class:`RecordError` naming the first thing wrong with manifest record ``d``."""
    if type(d) is not dict:
        raise RecordError("not a JSON object")
    fast = _fields_checker(tuple(d))
    if fast is None or not fast(d):
        missing = [k for k in RECORD_REQUIRED if k not in d]
        if missing:
            raise RecordError("record lacks " + ", ".join(missing))
        _fields(d, RECORD_FIELDS, "", RecordError)
    stats = d.get("stats")
    if stats is not None:
        _check_stats(stats)
    _check_kind(d)


_STAT_NUMBERS, _STAT_COUNTS = STAT_KEYS[:5], STAT_KEYS[5:]


def _stats_pass(stats: dict) -> bool:
    """True where :func:`_check_stats` passes ``stats`` and every number is a float (as
    both writers write them); False where it may not (then it says what)."""
    try:
        for key in _STAT_NUMBERS:
            v = stats[key]
            if type(v) is not float or v != v:
                return False
        for key in _STAT_COUNTS:
            v = stats[key]
            if type(v) is not int or not 0 <= v <= INT64_MAX:
                return False
    except KeyError:
        return False
    return True


def _check_stats(stats: dict) -> None:
    if _stats_pass(stats):
        return
    missing = [k for k in STAT_KEYS if k not in stats]
    if missing:
        # An absent count would read as "no NaN": never guess it.
        raise RecordError("stats lacks " + ", ".join(missing))
    for key in STAT_KEYS[:5]:
        if not _stat(stats[key]):
            raise RecordError(f"stats.{key} is {show_value(stats[key])}, not a number, null, "
                              f"\"nan\", \"inf\" or \"-inf\"")
    for key in STAT_KEYS[5:]:
        if not _count(stats[key]):
            raise RecordError(f"stats.{key} is {show_value(stats[key])}, not {_COUNT}")


def _check_kind(d: dict) -> None:
    dtype = d.get("dtype")
    if d.get("kind", "tensor") != "tensor":
        if dtype is not None and not _value_dtype(dtype):
            raise RecordError(f"dtype is {show_value(dtype)}, not a known scalar type or dtype name")
        return
    missing = [k for k in TENSOR_REQUIRED if d.get(k) is None]
    if missing:
        raise RecordError("tensor record lacks " + ", ".join(missing))
    if not _tensor_dtype(dtype):
        raise RecordError(f"dtype is {show_value(dtype)}, not a known dtype name")
    shape, stride, numel = d["shape"], d["stride"], d["numel"]
    if len(stride) != len(shape):
        raise RecordError(f"stride {show_value(stride)} has {len(stride)} entries but shape "
                          f"{show_value(shape)} has {len(shape)}")
    # A tensor the C++ runtime could not describe has shape [] and numel 0, with an error.
    if d.get("error") is None and numel != _numel(shape):
        raise RecordError(f"numel is {numel} but shape {show_value(shape)} holds {_numel_text(shape)} elements")
    if extent(shape, stride) * DTYPE_BYTES.get(dtype, 1) > MAX_EXTENT_BYTES:
        raise RecordError(f"shape {show_value(shape)} with stride {show_value(stride)} spans more than "
                          f"{MAX_EXTENT_BYTES >> 40} TiB of {dtype}")


def extent(shape: list[int], stride: list[int]) -> int:
    """How many elements a tensor of ``shape`` and ``stride`` spans in its storage (what
    ``torch.empty_strided`` allocates)."""
    if 0 in shape:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride))


def _numel(shape: list[int]) -> int:
    """prod(shape), or -1 once it exceeds int64 (then no numel can match)."""
    if 0 in shape:
        return 0
    n = 1
    for x in shape:
        n *= x
        if n > INT64_MAX:
            return -1
    return n


def _numel_text(shape: list[int]) -> str:
    n = _numel(shape)
    return "more than 2**63-1" if n < 0 else str(n)


def check_run_info(d: Any) -> None:
    """Raise :class:`DumpError` naming the first thing wrong with run header ``d``."""
    if type(d) is not dict:
        raise DumpError("not a JSON object")
    missing = [k for k in INFO_REQUIRED if k not in d]
    if missing:
        raise DumpError("run header lacks " + ", ".join(missing))
    _fields(d, INFO_FIELDS, "", DumpError)
    for label, graph in (d.get("graphs") or {}).items():
        where = f"graphs[{show_value(label)}]"
        if type(graph) is not dict:
            raise DumpError(f"{where} is {show_value(graph)}, not an object")
        _fields(graph, GRAPH_FIELDS, where + ".", DumpError)
        for site, prov in (graph.get("sites") or {}).items():
            _check_site(prov, site, f"{where}.sites[{show_value(site)}]")
    flight = d.get("flight")
    if flight is not None:
        _check_flight(flight)


def _check_site(prov: Any, site: str, where: str) -> None:
    from .provenance import Provenance  # provenance has no need of this module either way

    if not (site.isdigit() and len(site) <= 19 and site.isascii()):
        raise DumpError(f"{where}: a site is named by its number, not {show_value(site)}")
    if type(prov) is not dict:
        raise DumpError(f"{where} is {show_value(prov)}, not an object (its provenance)")
    try:
        Provenance.from_dict(prov)
    except (TypeError, ValueError, AttributeError) as e:
        raise DumpError(f"{where}: {_phrase(e)}") from None


def _phrase(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:160]


def _check_flight(flight: dict) -> None:
    _fields(flight, FLIGHT_FIELDS, "flight.", DumpError)
    for i, dump in enumerate(flight.get("dumps") or []):
        if type(dump) is not dict:
            raise DumpError(f"flight.dumps[{i}] is {show_value(dump)}, not an object")
        _fields(dump, FLIGHT_DUMP_FIELDS, f"flight.dumps[{i}].", DumpError)
    fired = flight.get("fired")
    if fired is not None:
        _fields(fired, FLIGHT_FIRED_FIELDS, "flight.fired.", DumpError)
        if fired.get("next") is not None:
            _fields(fired["next"], FLIGHT_NEXT_FIELDS, "flight.fired.next.", DumpError)

