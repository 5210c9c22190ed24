"""Both writers of the dump format write the same records: one model compiled with the
Python wrapper and with ``cpp_wrapper=True`` (the C++ runtime library), at ``save`` and
at ``stats``; the records' keys and the JSON type of every key agree, the stats' keys
too, and both dumps pass the reader's checks (format.validate)."""

from __future__ import annotations

import json
import os

import pytest
import torch

import aoti_debug
from aoti_debug.format import reader, schema
from tests.conftest import only_run, records

#: Keys only one writer writes, and why. Nothing else may differ.
ONLY_PYTHON: dict[str, str] = {}
ONLY_CPP: dict[str, str] = {}
#: run.json keys only one writer writes: none (both write format.schema.RunInfo).
RUN_ONLY: dict[str, str] = {}


def f(x, w):
    return torch.relu(x @ w) * 0.5 + x.shape[0]  # extern mm, a fused kernel reading a symint


def dump(tmp_path, level: str, cpp: bool) -> str:
    root = str(tmp_path / f"{level}-{'cpp' if cpp else 'python'}")
    torch._dynamo.reset()
    torch.manual_seed(0)
    x, w = torch.randn(6, 8), torch.randn(8, 4)
    x[0, 0] = float("nan")
    torch._dynamo.mark_dynamic(x, 0)
    with torch.no_grad(), aoti_debug.enabled(level=level, dump_dir=root), \
            torch._inductor.config.patch(cpp_wrapper=cpp):
        torch.compile(f)(x, w)
    aoti_debug.flush()
    return only_run(root)


def _type(v) -> str:
    return type(v).__name__ if v is not None else "null"


def key_types(recs: list[dict]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for r in recs:
        for k, v in r.items():
            out.setdefault(k, set()).add(_type(v))
        for k, v in (r.get("stats") or {}).items():
            out.setdefault("stats." + k, set()).add(_type(v))
    return out


@pytest.fixture(scope="module", params=["save", "stats"])
def dumps(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("parity_" + request.param)
    return request.param, dump(tmp, request.param, cpp=False), dump(tmp, request.param, cpp=True)


def test_same_keys_and_json_types(dumps):
    _level, py_dir, cpp_dir = dumps
    py, cpp = records(py_dir), records(cpp_dir)
    assert {r["wrapper"] for r in py} == {"python"} and {r["wrapper"] for r in cpp} == {"cpp"}
    # the same kinds of values in both (scalar records: tests/test_cpp_wrapper.py, whose
    # CPU graphs pass no float to a kernel: Dynamo specialises it or makes it a tensor)
    assert {r["kind"] for r in py} == {r["kind"] for r in cpp} == {"tensor", "symint"}
    py_types, cpp_types = key_types(py), key_types(cpp)
    only_py = set(py_types) - set(cpp_types) - set(ONLY_PYTHON)
    only_cpp = set(cpp_types) - set(py_types) - set(ONLY_CPP)
    assert not only_py and not only_cpp, (only_py, only_cpp)
    for k in set(py_types) & set(cpp_types):
        assert py_types[k] == cpp_types[k], (k, py_types[k], cpp_types[k])
    fields = set(schema.Record.__dataclass_fields__)
    assert {k for k in cpp_types if "." not in k} <= fields and {k for k in py_types if "." not in k} <= fields
    assert {k.split(".", 1)[1] for k in cpp_types if k.startswith("stats.")} == set(schema.STAT_KEYS)


def test_same_run_json_keys(dumps):
    _level, py_dir, cpp_dir = dumps
    infos = []
    for d in (py_dir, cpp_dir):
        with open(os.path.join(d, schema.RUN_FILE)) as fh:
            infos.append(json.load(fh))
    py, cpp = infos
    assert set(py) ^ set(cpp) <= set(RUN_ONLY), set(py) ^ set(cpp)
    for k in set(py) & set(cpp):
        assert _type(py[k]) == _type(cpp[k]), k
    assert (py["writer"], cpp["writer"]) == ("python", "cpp")


def _strict(token: str):
    raise AssertionError(f"JSON token {token}: non-finite values are written as format.schema._jsonable spells them")


def test_both_writers_write_strict_json(dumps):
    """One policy for non-finite values: no NaN/Infinity tokens from either writer (the
    model's input holds a NaN; its stats are over finite values, its counts say 1)."""
    _level, py_dir, cpp_dir = dumps
    for d in (py_dir, cpp_dir):
        with open(os.path.join(d, schema.MANIFEST_FILE)) as fh:
            recs = [json.loads(line, parse_constant=_strict) for line in fh]
        assert any((r.get("stats") or {}).get("nan") for r in recs), d


def test_both_dumps_pass_the_reader(dumps):
    level, py_dir, cpp_dir = dumps
    for d in (py_dir, cpp_dir):
        run = reader.open_run(d)
        recs = list(run.records())
        assert recs and {r.wrapper for r in recs} == {"python" if d == py_dir else "cpp"}
        if level == "save":
            tensor = next(r for r in recs if r.kind == "tensor" and r.file)
            assert run.load_tensor(tensor).shape == tuple(tensor.shape)
        run.close()


def test_same_values_have_the_same_stats_to_the_bit(dumps):
    """One implementation of CPU stats and checksum for both runtimes (the runtime
    library's): a value both wrappers recorded (same kernel, call, phase and arg, same
    checksum) has the very same stats, mean and std included."""
    _level, py_dir, cpp_dir = dumps

    def by_key(run_dir):
        return {(r["kernel"], r["kernel_call"], r["phase"], r["arg"]): r for r in records(run_dir)
                if r["kind"] == "tensor" and not r.get("uninitialised")}

    py, cpp = by_key(py_dir), by_key(cpp_dir)
    same = [k for k in set(py) & set(cpp) if py[k]["checksum"] == cpp[k]["checksum"]]
    assert len(same) >= 2, (sorted(py), sorted(cpp))  # the extern mm is named differently per wrapper
    assert any(py[k]["stats"]["std"] not in (None, 0.0) for k in same)
    for k in same:
        assert py[k]["stats"] == cpp[k]["stats"], k
