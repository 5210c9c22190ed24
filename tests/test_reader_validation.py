"""Damaged dumps are judged by the reader: one line naming the manifest line, exit 2, no traceback.

Each case of the hostile tester's report (wrong types, out-of-range values, unknown
names, inconsistent shapes) on a real dump, through ``show`` and ``diff``; what both
runtimes legitimately write still loads; ``run`` with a command that cannot start.
"""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest
import torch
from click.testing import CliRunner

import aoti_debug
from aoti_debug.cli import main
from aoti_debug.cli._common import INTERNAL_ERROR
from aoti_debug.errors import DumpError, RecordError
from aoti_debug.format.reader import RunReader
from aoti_debug.format.schema import Record, RunInfo
from aoti_debug.format.validate import TENSOR_DTYPES
from tests.conftest import only_run

_BUILT: dict[str, dict[str, str]] = {}


def _model(x, w):
    # A symint (dynamic batch), a volatile RNG output (dropout's seed), NaN counts (log).
    y = torch.nn.functional.dropout(x @ w, 0.5, training=True)
    return torch.log(y - 1) * x.shape[0], y.sum()


def build_real_runs(tmp_path_factory) -> dict[str, str]:
    """One tiny compiled model run at level ``stats`` and ``save``: ``{level: run dir}``.

    Built once per test session (the fuzz tests share it).
    """
    if "runs" not in _BUILT:
        root = str(tmp_path_factory.mktemp("real_runs"))
        compiled = torch.compile(_model, dynamic=True)
        torch.manual_seed(0)
        x, w = torch.randn(3, 8), torch.randn(8, 4)
        runs = {}
        for level in ("stats", "save"):
            with aoti_debug.enabled(level=level, dump_dir=os.path.join(root, level)):
                compiled(x, w)
                aoti_debug.flush()
            runs[level] = only_run(os.path.join(root, level))
        _BUILT["runs"] = runs
    return _BUILT["runs"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return build_real_runs(tmp_path_factory)


def read_lines(run: str) -> list[dict]:
    with open(os.path.join(run, "manifest.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_lines(run: str, recs: list) -> None:
    with open(os.path.join(run, "manifest.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs)


def copy_of(run: str, dst, name: str = "copy") -> str:
    out = os.path.join(str(dst), name)
    shutil.copytree(run, out)
    return out


def cli(*args):
    result = CliRunner().invoke(main, [*map(str, args)])
    # Never a traceback, never the safety net: bad input is caught by the checks.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output and INTERNAL_ERROR not in result.output, result.output
    return result


def problem_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("problem: ")]


# -- every case of the report, through show and diff -----------------------------------------------
NAN = float("nan")

#: (case, edit of the target record, a word the message must name)
CASES = [
    ("stats is a string", lambda r: r.update(stats="lots"), "stats is \"lots\""),
    ("kernel is a list", lambda r: r.update(kernel=["a"]), "kernel is [\"a\"]"),
    ("kernel_call is a string", lambda r: r.update(kernel_call="x"), "kernel_call is \"x\""),
    ("file is a number", lambda r: r.update(file=7), "file is 7"),
    ("seq negative", lambda r: r.update(seq=-5), "seq is -5"),
    ("seq a word", lambda r: r.update(seq="one"), "seq is \"one\""),
    ("seq beyond int64", lambda r: r.update(seq=10**40), "seq is an integer of 133 bits"),
    ("numel beyond int64", lambda r: r.update(numel=10**30), "numel is an integer of 100 bits"),
    ("checksum an int", lambda r: r.update(checksum=1234), "checksum is 1234"),
    ("index a fraction", lambda r: r.update(index=1.5), "index is 1.5"),
    ("stride a string", lambda r: r.update(stride="1,8"), "stride is \"1,8\""),
    ("NaN in stats", lambda r: r["stats"].update(mean=NAN), "stats.mean is NaN"),
    ("shape a string", lambda r: r.update(shape="3x8"), "shape is \"3x8\""),
    ("unknown dtype", lambda r: r.update(dtype="float99"), "dtype is \"float99\""),
    ("unknown phase", lambda r: r.update(phase="during"), "phase is \"during\""),
    ("launch null", lambda r: r.update(launch=None), "launch is null"),
    ("numel not prod(shape)", lambda r: r.update(numel=r["numel"] + 1), "but shape"),
    ("stride rank differs", lambda r: r.update(stride=r["stride"] + [1]), "entries but shape"),
    ("stats lack a count", lambda r: r["stats"].pop("nan"), "stats lacks nan"),
    ("negative NaN count", lambda r: r["stats"].update(nan=-1), "stats.nan is -1"),
    ("checksum upper case", lambda r: r.update(checksum="0123456789ABCDEF"), "checksum is"),
    ("file leaves the dump", lambda r: r.update(file="tensors/../../x.pt"), "points outside the dump"),
    ("absolute file", lambda r: r.update(file="/etc/passwd"), "points outside the dump"),
    ("unknown role", lambda r: r.update(role="bystander"), "role is"),
    ("unknown kind", lambda r: r.update(kind="blob"), "kind is"),
    ("unknown wrapper", lambda r: r.update(wrapper="rust"), "wrapper is"),
    ("uninitialised a string", lambda r: r.update(uninitialised="yes"), "uninitialised is"),
    ("volatile a number", lambda r: r.update(volatile=1), "volatile is 1"),
    ("shared a number", lambda r: r.update(shared=1), "shared is 1"),
    ("index is true", lambda r: r.update(index=True), "index is true"),
    ("empty kernel name", lambda r: r.update(kernel=""), "kernel is \"\""),
    ("tensor without shape", lambda r: r.pop("shape"), "tensor record lacks shape"),
    ("missing arg", lambda r: r.pop("arg"), "record lacks arg"),
    ("not an object", lambda r: r.clear(), "not a JSON object"),
    ("scalar value of 4,000 digits", lambda r: r.update(value=int("9" * 4000)), "value is an integer of 13288 bits"),
    ("value beyond int64", lambda r: r.update(value=2**63), "value is 9223372036854775808, not a 64-bit integer"),
    ("value a list", lambda r: r.update(value=[1]), "value is [1]"),
    ("stride near 2**62", lambda r: r.update(stride=[2**62] * len(r["shape"])), "stride is [4611686018427387904"),
    ("a size beyond 2**48", lambda r: r.update(shape=[2**48 + 1], stride=[1], numel=2**48 + 1), "shape is [281474976710657]"),
    ("more than 64 dims", lambda r: r.update(shape=[1] * 65, stride=[1] * 65, numel=1), "shape is [1, 1,"),
    ("strides spanning 2 TiB", lambda r: r.update(shape=[2, 3], stride=[2**39, 1], numel=6, dtype="float32"),
     "spans more than 1 TiB of float32"),
]


def _damage(run: str, edit) -> int:
    """Apply ``edit`` to the first record with a tensor file; its 1-based manifest line."""
    recs = read_lines(run)
    i = next(i for i, r in enumerate(recs) if r.get("file") and r.get("checksum"))
    edit(recs[i])
    if not recs[i]:
        recs[i] = ["not", "a", "record"]
    write_lines(run, recs)
    return i + 1


@pytest.mark.parametrize("case,edit,named", CASES, ids=[c[0] for c in CASES])
def test_damaged_record_is_one_line_naming_its_line_in_show_and_diff(runs, tmp_path, case, edit, named):
    run = copy_of(runs["save"], tmp_path)
    line = _damage(run, edit)
    expected = f"manifest.jsonl line {line}: "

    r = cli("show", run)
    assert r.exit_code == 2, r.output
    problems = problem_lines(r.output)
    assert len(problems) == 1 and problems[0].startswith(f"problem: {expected}"), r.output
    assert named in problems[0] and problems[0].endswith(" (skipped)")

    r = cli("diff", "--no-progress", "--full", run, runs["save"])
    assert r.exit_code == 2, r.output
    problems = problem_lines(r.output)
    assert len(problems) == 1 and problems[0].startswith(f"problem: run A: {expected}"), r.output
    assert named in problems[0]

    r = cli("diff", "--no-progress", "--format", "json", runs["save"], run)
    assert r.exit_code == 2
    assert f"run B: {expected}" in json.loads(r.stdout)["problems"][0]


def test_damaged_last_line_is_damage_not_a_killed_run(runs, tmp_path):
    run = copy_of(runs["stats"], tmp_path)
    recs = read_lines(run)
    recs[-1]["seq"] = -1
    with open(os.path.join(run, "manifest.jsonl"), "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in recs).rstrip("\n"))  # no final newline either
    reader = RunReader(run)
    assert len(list(reader.records())) == len(recs) - 1
    assert not reader.truncated and reader.problems == [
        f"manifest.jsonl line {len(recs)}: seq is -1, not a non-negative 64-bit integer (skipped)"]


def test_deeply_nested_and_oversized_lines(runs, tmp_path):
    run = copy_of(runs["stats"], tmp_path)
    path = os.path.join(run, "manifest.jsonl")
    with open(path, "a") as f:
        f.write("[" * 100000 + "]" * 100000 + "\n")
        f.write('{"seq": 1' + "0" * 5000 + "}\n")
    n = len(read_lines(runs["stats"]))
    reader = RunReader(run)
    assert len(list(reader.records())) == n
    assert reader.problems == [f"manifest.jsonl line {n + 1}: nested too deeply (skipped)",
                               f"manifest.jsonl line {n + 2}: holds a number too long to read (skipped)"]
    r = cli("show", run)
    assert r.exit_code == 2 and len(problem_lines(r.output)) == 2


# -- run.json ---------------------------------------------------------------------------------
HEADER_CASES = [
    ("world_size null", {"world_size": None}, "world_size is null, not a positive 64-bit integer"),
    ("world_size 0", {"world_size": 0}, "world_size is 0"),
    ("rank negative", {"rank": -1}, "rank is -1"),
    ("pid a string", {"pid": "12"}, "pid is \"12\""),
    ("format_version true", {"format_version": True}, "format_version is true"),
    ("format_version 0", {"format_version": 0}, "format_version is 0"),
    ("unknown level", {"level": "loud"}, "level is \"loud\""),
    ("phases a string", {"phases": "before,after"}, "phases is"),
    ("unknown phase", {"phases": ["before", "during"]}, "phases is"),
    ("sync a string", {"sync": "no"}, "sync is \"no\""),
    ("argv of numbers", {"argv": [1, 2]}, "argv is [1, 2]"),
    ("unknown writer", {"writer": "go"}, "writer is \"go\""),
    ("graphs a list", {"graphs": []}, "graphs is []"),
    ("graph not an object", {"graphs": {"graph0": "x"}}, "graphs[\"graph0\"] is \"x\""),
    ("unknown graph kind", {"graphs": {"graph0": {"kind": "sideways"}}}, "graphs[\"graph0\"].kind is \"sideways\""),
    ("compile id a number", {"graphs": {"graph0": {"compile_id": 0}}}, "graphs[\"graph0\"].compile_id is 0"),
    ("graph file a number", {"graphs": {"graph0": {"file": 3}}}, ".file is 3"),
    ("warnings a string", {"warnings": "disk full"}, "warnings is \"disk full\""),
    ("warnings of numbers", {"warnings": [1]}, "warnings is [1]"),
    ("run_id missing", {"run_id": KeyError}, "run header lacks run_id"),
    ("uid negative", {"uid": -1}, "uid is -1"),
    ("flight a list", {"flight": []}, "flight is []"),
    ("flight ring a string", {"flight": {"ring": "3"}}, 'flight.ring is "3"'),
    ("flight counts negative", {"flight": {"calls_dropped": -1}}, "flight.calls_dropped is -1"),
    ("flight signals a string", {"flight": {"signals": "SIGTERM"}}, 'flight.signals is "SIGTERM"'),
    ("flight dumps of numbers", {"flight": {"dumps": [1]}}, "flight.dumps[0] is 1"),
    ("flight dump calls a string", {"flight": {"dumps": [{"graph_calls": "1-2"}]}},
     'flight.dumps[0].graph_calls is "1-2"'),
    ("flight fired a list", {"flight": {"fired": [1]}}, "flight.fired is [1]"),
    ("flight fired value a list", {"flight": {"fired": {"value": ["nan"]}}}, 'flight.fired.value is ["nan"]'),
    ("flight fired launch of 4,000 digits", {"flight": {"fired": {"launch": 10**3999}}},
     "flight.fired.launch is an integer of 13285 bits"),
    ("flight next saved a string", {"flight": {"fired": {"next": {"saved": "x.pt"}}}},
     'flight.fired.next.saved is "x.pt"'),
    ("graph sites a list", {"graphs": {"graph0": {"sites": [1]}}}, 'graphs["graph0"].sites is [1]'),
    ("graph site not a number", {"graphs": {"graph0": {"sites": {"x": {}}}}}, 'graphs["graph0"].sites["x"]'),
    ("graph site a string", {"graphs": {"graph0": {"sites": {"0": "p"}}}}, 'graphs["graph0"].sites["0"] is "p"'),
    ("graph site nodes a string", {"graphs": {"graph0": {"sites": {"0": {"nodes": "mm"}}}}},
     "nodes must be a list of strings"),
    ("graph site output a list", {"graphs": {"graph0": {"sites": {"0": {"outputs": {"buf0": [1]}}}}}},
     "an output's origin must be an object"),
    ("graph sources a list", {"graphs": {"graph0": {"sources": ["w.py"]}}}, 'graphs["graph0"].sources is ["w.py"]'),
]


@pytest.mark.parametrize("case,edit,named", HEADER_CASES, ids=[c[0] for c in HEADER_CASES])
def test_damaged_run_header_is_one_error_line(runs, tmp_path, case, edit, named):
    run = copy_of(runs["stats"], tmp_path)
    path = os.path.join(run, "run.json")
    info = json.load(open(path))
    for k, v in edit.items():
        if v is KeyError:
            del info[k]
        else:
            info[k] = v
    json.dump(info, open(path, "w"))
    for args in (["show", run], ["diff", "--no-progress", runs["stats"], run]):
        r = cli(*args)
        assert r.exit_code == 2, r.output
        assert r.output.count("\n") == 1 and r.output.startswith(f"Error: {path}: damaged run header: "), r.output
        assert named in r.output


def test_run_header_that_is_not_json_or_not_an_object(runs, tmp_path):
    run = copy_of(runs["stats"], tmp_path)
    path = os.path.join(run, "run.json")
    for text, named in (("[1, 2]", "not a JSON object"), ("[" * 100000, "unreadable run header"),
                        (b"\xff\xfe{", "unreadable run header")):
        open(path, "wb").write(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(DumpError, match=named):
            RunReader(run)
        r = cli("show", run)
        assert r.exit_code == 2 and r.output.count("\n") == 1 and named in r.output


# -- what the writers write still loads -----------------------------------------------------------
def test_every_record_of_both_real_runs_loads(runs):
    for run in runs.values():
        reader = RunReader(run)
        recs = list(reader.records())
        assert recs and not reader.problems and not reader.notes
        assert {r.kind for r in recs} >= {"tensor", "symint"}
        assert any(r.volatile for r in recs) and any(r.stats and r.stats.nan for r in recs)
        assert reader.info.graphs["graph0"]["kind"] == "inference"


#: Lines as C++ runtimes before the one-policy change wrote them (records.h, json.h),
#: still read: JSON Infinity for infinite stats and scalars, null for NaN stats, a
#: dtype code it cannot name with the error that says why, ``c``-prefixed file names.
CPP_LINES = [
    '{"seq":1,"launch":1,"graph":"graph0","wrapper":"cpp","kernel":"cpp_fused_exp_0","op":"cpp_fused_exp_0",'
    '"kernel_call":0,"phase":"after","arg":"buf0","role":"output","index":1,"kind":"tensor","dtype":"float32",'
    '"shape":[2,3],"stride":[3,1],"device":"cpu","numel":6,"stats":{"min":-1.5,"max":Infinity,"mean":-Infinity,'
    '"std":null,"absmax":1.5,"nan":1,"inf":2},"checksum":"00000000deadbeef",'
    '"file":"tensors/c00000001-after-cpp_fused_exp_0-buf0.pt"}',
    '{"seq":2,"launch":1,"graph":"graph0","wrapper":"cpp","kernel":"cpp_fused_exp_0","op":"cpp_fused_exp_0",'
    '"kernel_call":0,"phase":"after","arg":"buf1","role":"output","index":2,"kind":"tensor","dtype":"dtype-1",'
    '"shape":[],"stride":[],"device":"cpu","numel":0,"stats":null,'
    '"error":"cannot read tensor metadata through the AOTI shim"}',
    '{"seq":3,"launch":2,"graph":"graph0/sub","wrapper":"cpp","kernel":"aoti_torch_cpu_mm_out","op":"aten.mm",'
    '"kernel_call":0,"phase":"before","arg":"buf2","role":"inout","index":0,"volatile":"rng seed",'
    '"kind":"tensor","dtype":"dtype44","shape":[4],"stride":[1],"device":"device9:0","numel":4,'
    '"uninitialised":true}',
    '{"seq":4,"launch":2,"graph":"graph0","wrapper":"cpp","kernel":"k","op":"k","kernel_call":0,"phase":"before",'
    '"arg":"alpha","role":"input","index":1,"kind":"scalar","value":NaN,"dtype":"float"}',
    '{"seq":5,"launch":2,"graph":"graph0","wrapper":"cpp","kernel":"k","op":"k","kernel_call":0,"phase":"before",'
    '"arg":"beta","role":"input","index":2,"kind":"scalar","value":-Infinity,"dtype":"float"}',
    '{"seq":6,"launch":2,"graph":"graph0","wrapper":"cpp","kernel":"k","op":"k","kernel_call":0,"phase":"before",'
    '"arg":"n","role":"input","index":3,"kind":"symint","value":7,"dtype":"int"}',
    '{"seq":7,"launch":2,"graph":"graph0","wrapper":"cpp","kernel":"k","op":"k","kernel_call":0,"phase":"before",'
    '"arg":"opt","role":"input","index":4,"kind":"none"}',
    '{"seq":8,"launch":2,"graph":"graph0","wrapper":"cpp","kernel":"k","op":"k","kernel_call":0,"phase":"before",'
    '"arg":"what","role":"input","index":5,"kind":"other","value":"unknown"}',
    '{"seq":9,"launch":2,"graph":"graph0","wrapper":"cpp","kernel":"k","op":"k","kernel_call":0,"phase":"after",'
    '"arg":"buf3","role":"output","index":6,"kind":"tensor","dtype":"bfloat16","shape":[0,5],"stride":[5,1],'
    '"device":"cuda:0","numel":0,"stats":{"min":null,"max":null,"mean":null,"std":null,"absmax":null,"nan":0,'
    '"inf":0},"checksum":"0000000000000000","file":"tensors/c00000001-after-cpp_fused_exp_0-buf0.pt",'
    '"shared":true,"skipped":"AOTI_DEBUG_MAX_BYTES reached"}',
]
#: As the Python runtime writes what the real runs lack (hooks.py: _scalar; Stats.to_dict).
PY_LINES = [
    '{"seq":10,"launch":3,"graph":"graph1","wrapper":"python","kernel":"torch.ops.my.op.default","op":"my.op",'
    '"kernel_call":0,"phase":"before","arg":"x","role":"input","index":0,"stats":null,"kind":"other",'
    '"value":"ProcessGroup"}',
    '{"seq":11,"launch":3,"graph":"graph1","wrapper":"python","kernel":"torch.ops.my.op.default","op":"my.op",'
    '"kernel_call":0,"phase":"before","arg":"s","role":"input","index":1,"stats":null,"kind":"scalar",'
    '"value":"nan","dtype":"float","expr":"float(\'nan\')"}',
    '{"seq":12,"launch":3,"graph":"graph1","wrapper":"python","kernel":"torch.ops.my.op.default","op":"my.op",'
    '"kernel_call":0,"phase":"after","arg":"buf9","role":"output","index":2,"stats":{"min":"nan","max":"inf",'
    '"mean":"-inf","std":0,"absmax":1e308,"nan":0,"inf":0},"kind":"tensor","dtype":"float64","shape":[1],'
    '"stride":[0],"device":"cpu","numel":1,"checksum":"0123456789abcdef","error":"save: OSError: disk full",'
    '"a_future_field":{"any": ["thing"]}}',
]


def test_records_both_runtimes_write_load(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.jsonl").write_text("".join(line + "\n" for line in CPP_LINES + PY_LINES))
    reader = RunReader(str(run))
    recs = list(reader.records())
    assert not reader.problems and len(recs) == len(CPP_LINES) + len(PY_LINES)
    assert recs[0].stats.max == float("inf") and recs[0].stats.std is None
    assert recs[2].uninitialised and recs[2].volatile == "rng seed" and recs[2].stats is None
    assert recs[-1].stats.min != recs[-1].stats.min  # "nan" read back as NaN
    assert Record.from_dict(recs[2].to_dict()) == recs[2]
    r = cli("show", str(run))
    assert r.exit_code == 0, r.output
    r = cli("diff", "--no-progress", str(run), str(run))
    assert r.exit_code == 2 and not problem_lines(r.output)  # buf1 has no values to compare


#: A run header as the C++ runtime writes it (run_info_json, graph_label), with what a
#: later writer of format version 1 may add.
CPP_INFO = {"aoti_debug_version": "0.1.0", "argv": ["./model"], "device": "cuda:0", "format_version": 1,
            "graphs": {"graph0": {"file": "/tmp/w.cpp", "kind": "backward", "compile_id": "!0/1/0",
                                  "wrapper": "cpp"},
                       "graph0/cond_true_0": {"file": None, "subgraph": "cond_true_0", "wrapper": "python",
                                              "provenance": {"later": True}}},
            "hostname": "h", "kernels": "", "level": "stats", "phases": ["after"], "pid": 1, "rank": 3,
            "run_id": "r", "start_time": "t", "sync": True, "torch_version": "2.11", "warnings": ["disk full"],
            "world_size": 2, "writer": "cpp", "a_future_field": 1}


#: run.json ``flight`` as the Python runtime writes it once the trigger fired (flight.py summary).
FLIGHT = {"ring": 3, "trigger": "nonfinite", "max_records": 1000000, "graph_calls": 5, "calls_in_ring": 3,
          "calls_written": 2, "calls_dropped": 1, "records_dropped": 0, "signals": ["SIGTERM", "SIGINT"],
          "dumps": [{"reason": "nonfinite", "records": 12, "graph_calls": [3, 4], "time": "2026-01-01T00:00:00+0000"},
                    {"reason": "exit", "records": 0, "graph_calls": None, "time": "t"}],
          "fired": {"trigger": "nonfinite", "value": "nan", "graph": "graph0", "launch": 7, "kernel": "k",
                    "kernel_call": 0, "site": None, "seq": 40, "arg": "buf1", "nan": 3, "inf": 0, "graph_call": 4,
                    "inputs": 2, "inputs_held": "finite", "saved": ["tensors/00000040-after-k-buf1.pt"],
                    "not_saved": ["x before: the launch wrote it (inout); see the next occurrence"],
                    "next": {"launch": 9, "saved": []}}}
#: A graph's entry as the reader merges ``sites.jsonl`` into it, with the copies of its sources.
GRAPH_WITH_SITES = {"file": "/tmp/w.py", "kind": "inference", "compile_id": "0/0", "wrapper": "python",
                    "sources": {"w.py": "0" * 64},
                    "sites": {"0": {"nodes": ["mm"], "aten": ["aten.mm.default"], "module": "", "source": "f.py:4",
                                    "outputs": {"buf0": {"node": "mm", "aten": "aten.mm.default"}}}}}


def test_flight_sites_sources_and_uid_as_the_writers_write_them_load():
    info = RunInfo.from_dict({**CPP_INFO, "flight": FLIGHT, "uid": 1000, "graphs": {"graph0": GRAPH_WITH_SITES}})
    assert info.flight == FLIGHT and info.graphs["graph0"]["sites"]["0"]["nodes"] == ["mm"]
    assert RunInfo.from_dict({**CPP_INFO, "flight": {**FLIGHT, "ring": None, "fired": None}, "uid": None}).flight


def test_cpp_run_header_with_warnings_and_graph_kinds_loads():
    got = RunInfo.from_dict(CPP_INFO)
    assert got.warnings == ["disk full"] and got.graphs["graph0"]["kind"] == "backward"
    assert RunInfo.from_dict(got.to_dict()) == got


def test_new_flags_round_trip():
    rec = Record.from_dict(json.loads(CPP_LINES[2]))
    d = rec.to_dict()
    assert d["uninitialised"] is True and d["volatile"] == "rng seed"
    with pytest.raises(RecordError, match="uninitialised is 1, not true or false"):
        Record.from_dict({**d, "uninitialised": 1})


def test_known_dtypes_are_those_of_this_torch():
    names = {str(v).replace("torch.", "") for v in vars(torch).values() if isinstance(v, torch.dtype)}
    assert names <= TENSOR_DTYPES, sorted(names - TENSOR_DTYPES)


# -- the safety net: only for bugs, and then still one line ---------------------------------------
def test_an_unexpected_exception_is_one_line_naming_where_it_was_raised(runs, monkeypatch):
    import aoti_debug.compare as C

    def broken(*args, **kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(C, "summarize", broken)
    monkeypatch.setattr(C, "diff", broken)
    for args in (["show", runs["stats"]], ["diff", "--no-progress", runs["stats"], runs["stats"]]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
        assert r.output.count("\n") == 1 and "Traceback" not in r.output
        assert r.output.startswith(f"Error: {INTERNAL_ERROR} (KeyError: 'boom' at tests/test_reader_validation.py:")
        assert f"in broken, from aoti_debug/cli/{args[0]}.py:" in r.output
        assert r.output.rstrip().endswith("); this is a bug in aoti_debug, please report it")


# -- run: a command that cannot start ---------------------------------------------------------------
def test_run_with_a_command_that_cannot_start_is_bad_input(tmp_path):
    plain = tmp_path / "data.txt"
    plain.write_text("not a program")
    plain.chmod(stat.S_IRUSR | stat.S_IWUSR)
    for cmd, says in (("/nonexistent/prog", "command not found: /nonexistent/prog"),
                      (str(plain), f"command not executable: {plain}")):
        for sub in ("run", "locate"):
            r = cli(sub, "--", cmd)
            assert r.exit_code == 2, (sub, r.output)
            errors = [line for line in r.output.splitlines() if line.startswith("Error: ")]
            assert errors == [f"Error: {says}"], (sub, r.output)
