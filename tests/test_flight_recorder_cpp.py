"""The flight recorder of the C++ runtime (native/flight.h), under ``cpp_wrapper=True`` and
in an AOTInductor package: the same rules and the same on-disk result as the Python
runtime's (tests/test_flight_recorder.py). ``AOTI_DEBUG_RING=N`` keeps the last N graph
calls' records and writes them at exit, on an uncaught exception, on SIGTERM and when
``AOTI_DEBUG_TRIGGER=nonfinite`` fires at the first NaN/Inf birth, whose launch's tensors
are saved at once and at its next occurrence. Each loop runs in a child process: the
ring is written when the process ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from click.testing import CliRunner

import aoti_debug
from aoti_debug import config
from aoti_debug.cli import main as cli_main
from aoti_debug.runtime import flight, session
from tests.conftest import REPO, build_harness, dump_dir_restored, only_run, records, run_dirs
from tests.test_flight_recorder import forever, sigterm_when_ready

#: The graph call (1, 2, ...) of LOOP where NaN is first born (its sqrt meets a negative input).
NAN_AT = 50
LOOP = os.path.join(REPO, "examples", "nan_in_long_run.py")
#: Records of one graph call of LOOP's model: sqrt*2 (x before, y after), mm (y, w before,
#: out after), relu+sum+1 (2 before, 1 after).
RECORDS_PER_CALL = 8
CPP = {"TORCHINDUCTOR_CPP_WRAPPER": "1"}


def _env(root: str, **env) -> dict:
    return {**os.environ, "PYTHONPATH": REPO, "AOTI_DEBUG_LEVEL": "stats", "AOTI_DEBUG_DIR": root, **env}


def _loop(tmp_path, steps: int, **env) -> str:
    root = str(tmp_path / "dump")
    proc = subprocess.run([sys.executable, LOOP, str(steps), str(NAN_AT)], env=_env(root, **CPP, **env),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return only_run(root)


def _info(run: str) -> dict:
    with open(os.path.join(run, "run.json")) as f:
        return json.load(f)


def _calls(recs: list[dict]) -> list[int]:
    """Graph calls (1, 2, ...) the records belong to: every kernel runs once per call."""
    return sorted({r["kernel_call"] + 1 for r in recs})


def _load(run: str, name: str) -> torch.Tensor:
    return torch.load(os.path.join(run, name), weights_only=True)


# -- the trigger at call 50 of a cpp_wrapper loop -------------------------------------------
@pytest.fixture(scope="module")
def stopped_at_nan(tmp_path_factory):
    """The loop stops at the call where NaN is born."""
    return _loop(tmp_path_factory.mktemp("stop"), NAN_AT, AOTI_DEBUG_RING="3", AOTI_DEBUG_TRIGGER="nonfinite")


@pytest.fixture(scope="module")
def ran_past_nan(tmp_path_factory):
    """One call past the birth: its next occurrence is saved."""
    return _loop(tmp_path_factory.mktemp("past"), NAN_AT + 1, AOTI_DEBUG_RING="3", AOTI_DEBUG_TRIGGER="nonfinite")


@pytest.fixture(scope="module")
def every_call(tmp_path_factory):
    """The reference: the same loop recorded without a flight recorder."""
    return _loop(tmp_path_factory.mktemp("all"), NAN_AT)


def test_trigger_writes_exactly_the_last_three_calls(stopped_at_nan):
    recs = records(stopped_at_nan)
    assert {r["wrapper"] for r in recs} == {"cpp"}
    assert _calls(recs) == [NAN_AT - 2, NAN_AT - 1, NAN_AT] and len(recs) == 3 * RECORDS_PER_CALL
    assert [r["seq"] for r in recs] == sorted(r["seq"] for r in recs)  # written in seq order
    info = _info(stopped_at_nan)
    fl = info["flight"]
    assert info["writer"] == "cpp" and not any("AOTI_DEBUG_RING" in w for w in info["warnings"])
    assert (fl["ring"], fl["trigger"], fl["graph_calls"], fl["max_records"]) == (3, "nonfinite", NAN_AT,
                                                                                 flight.MAX_RING_RECORDS)
    assert (fl["calls_written"], fl["calls_dropped"], fl["records_dropped"]) == (3, NAN_AT - 3, 0)
    assert [d["reason"] for d in fl["dumps"]] == ["nonfinite", "exit"]
    # the calls up to the birth launch (the first of its call), then the rest of that call at exit
    assert [(d["graph_calls"], d["records"]) for d in fl["dumps"]] == [
        ([NAN_AT - 2, NAN_AT], 2 * RECORDS_PER_CALL + 2), ([NAN_AT, NAN_AT], RECORDS_PER_CALL - 2)]
    assert fl["signals"] == ["SIGTERM", "SIGINT"]


def test_records_equal_those_of_a_run_without_the_ring(stopped_at_nan, every_call):
    """The ring holds the very records a full run writes for the same calls (seq, launch,
    stats and checksums included); only the birth launch's saved files are added, and the
    full run's ``reused`` flags are not there: the ring's sides read every input, where a
    full run takes a linked input's stats from its producer's record (records.h)."""
    kept = records(stopped_at_nan)
    full = records(every_call)
    assert len(full) == NAN_AT * RECORDS_PER_CALL and "flight" not in _info(every_call)
    same_calls = [r for r in full if r["kernel_call"] + 1 >= NAN_AT - 2]
    assert any("reused" in r for r in same_calls) and not any("reused" in r for r in kept)
    assert [{k: v for k, v in r.items() if k != "file"} for r in kept] == \
        [{k: v for k, v in r.items() if k != "reused"} for r in same_calls]
    assert all("file" not in r for r in full)


def test_trigger_names_the_birth(stopped_at_nan):
    fired = _info(stopped_at_nan)["flight"]["fired"]
    assert fired["trigger"] == "nonfinite" and fired["value"] == "nan"
    assert fired["kernel"].startswith("cpp_fused") and "sqrt" in fired["kernel"]
    assert (fired["graph_call"], fired["kernel_call"], fired["nan"], fired["inf"]) == (NAN_AT, NAN_AT - 1, 64, 0)
    assert (fired["graph"], fired["site"], fired["inputs"], fired["inputs_held"]) == ("graph0", 0, 1, "finite")
    born = [r for r in records(stopped_at_nan) if r["launch"] == fired["launch"]]
    assert {r["phase"] for r in born} == {"before", "after"}
    assert fired["seq"] == next(r["seq"] for r in born if r["phase"] == "after") and fired["arg"] == "buf0"


def test_birth_launch_saved_at_once(stopped_at_nan):
    fired = _info(stopped_at_nan)["flight"]["fired"]
    born = {r["phase"]: r for r in records(stopped_at_nan) if r["launch"] == fired["launch"]}
    assert sorted(fired["saved"]) == sorted(r["file"] for r in born.values())
    assert torch.equal(_load(stopped_at_nan, born["before"]["file"]), torch.full((8, 8), -0.5))
    assert _load(stopped_at_nan, born["after"]["file"]).isnan().all()
    assert fired["next"] is None and fired["not_saved"] == []  # the loop stopped: no next occurrence
    assert sorted(os.listdir(os.path.join(stopped_at_nan, "tensors"))) == sorted(
        os.path.basename(f) for f in fired["saved"])  # only the birth launch has files


def test_next_occurrence_saved_in_full(ran_past_nan):
    recs = records(ran_past_nan)
    fl = _info(ran_past_nan)["flight"]
    fired, nxt = fl["fired"], fl["fired"]["next"]
    assert nxt is not None and nxt["launch"] == fired["launch"] + 3  # the same site, one call later
    again = [r for r in recs if r["launch"] == nxt["launch"]]
    assert {r["phase"] for r in again} == {"before", "after"}
    assert sorted(nxt["saved"]) == sorted(r["file"] for r in again)
    assert torch.equal(_load(ran_past_nan, next(r["file"] for r in again if r["phase"] == "before")),
                       torch.full((8, 8), -1.5))
    assert _load(ran_past_nan, next(r["file"] for r in again if r["phase"] == "after")).isnan().all()
    assert _calls(recs) == [NAN_AT - 2, NAN_AT - 1, NAN_AT, NAN_AT + 1] and len(recs) == 4 * RECORDS_PER_CALL
    assert [d["reason"] for d in fl["dumps"]] == ["nonfinite", "nonfinite: next occurrence saved", "exit"]
    assert [d["records"] for d in fl["dumps"]] == [2 * RECORDS_PER_CALL + 2, RECORDS_PER_CALL, RECORDS_PER_CALL - 2]


def test_show_reads_the_dump_and_displays_what_fired(ran_past_nan):
    res = CliRunner().invoke(cli_main, ["show", ran_past_nan])
    assert res.exit_code == 0, res.output
    assert "flight recorder: ring of 3 graph call(s), trigger nonfinite" in res.output
    assert f"{NAN_AT + 1} graph call(s) seen, 4 written, {NAN_AT - 3} dropped unwritten" in res.output
    assert "trigger nonfinite fired: NaN born in launch" in res.output and "next occurrence: launch" in res.output


def _shape(v):
    """A JSON value's structure: dict keys with their values' structure, else the type."""
    if isinstance(v, dict):
        return {k: _shape(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_shape(v[0])] if v else []
    return type(v).__name__


def test_flight_object_has_the_python_runtimes_keys_and_types(ran_past_nan):
    """run.json flight as the Python runtime writes it (flight.py summary, BirthWatch)."""
    rec = flight.FlightRecorder(3, "nonfinite", lambda *a: None)
    rec.calls = 1
    rec._ring.append(flight.GraphCall(1))
    rec._ring[0].pending.append({"seq": 1})
    birth = flight.BirthWatch().observe({"seq": 2, "launch": 1, "graph": "graph0", "kernel": "k", "kernel_call": 1,
                                         "phase": "after", "arg": "y", "site": 0, "stats": {"nan": 1, "inf": 0}}, 1)
    birth["saved"], birth["not_saved"] = ["tensors/a.pt"], ["why"]
    birth["next"] = {"launch": 4, "saved": ["tensors/b.pt"]}
    rec.fired = birth
    rec.write(None, "nonfinite")
    rec.install_signal_handlers()
    try:
        python = rec.summary()
    finally:
        rec.uninstall_signal_handlers()
    cpp = _info(ran_past_nan)["flight"]
    cpp["fired"]["not_saved"] = ["why"]  # nothing was unsaved in the C++ run: its list is empty
    assert _shape(cpp) == _shape(python)


# -- exits: SIGTERM, an uncaught exception; a cpp_wrapper and a Python-wrapper graph in one process
def _runs_by_writer(root: str) -> dict[str, str]:
    runs = run_dirs(root)
    by = {_info(r)["writer"]: r for r in runs}
    assert len(by) == len(runs) == 2, runs
    return by


def test_sigterm_writes_both_rings_and_still_kills(tmp_path):
    """The C++ runtime installs its handler first; the Python runtime's replaces it at its
    first graph call, and the next C++ graph call puts its own back in front of it."""
    sigterm_when_ready(forever(tmp_path, "wait", "mixed"))
    for writer, run in _runs_by_writer(str(tmp_path / "dump")).items():
        fl = _info(run)["flight"]
        assert [d["reason"] for d in fl["dumps"]] == ["signal SIGTERM"], writer
        recs = records(run)
        kept = _calls(recs)
        assert fl["calls_written"] == 2 and len(kept) == 2 and kept[1] == kept[0] + 1, writer
        assert kept[1] in (fl["graph_calls"] - 1, fl["graph_calls"]) and fl["calls_dropped"] == kept[0] - 1, writer
        assert {r["wrapper"] for r in recs} == {writer}


def test_uncaught_exception_writes_both_rings(tmp_path):
    p = forever(tmp_path, "raise", "mixed")
    _out, err = p.communicate(timeout=600)
    assert p.returncode == 1 and "illegal memory access" in err
    for writer, run in _runs_by_writer(str(tmp_path / "dump")).items():
        fl = _info(run)["flight"]
        assert [d["reason"] for d in fl["dumps"]] == [
            "exception: RuntimeError: CUDA error: an illegal memory access was encountered"], writer
        assert fl["graph_calls"] == 20 and _calls(records(run)) == [19, 20], writer


# -- a causal mask's Inf, a later NaN, a new run; level save -----------------------------------
MASKED = textwrap.dedent("""
    import os, sys, torch
    def f(x):
        scores = x + torch.full((4, 4), float("-inf")).triu(1)  # -inf made at every call
        return scores, torch.softmax(scores, -1) * torch.sqrt(x[0, 0] + 5)
    g = torch.compile(f)
    with torch.no_grad():
        for i in range(8):  # sqrt(x + 5) is NaN from call 6 on
            g(torch.full((4, 4), 4.0 - 2 * i))
        os.environ["AOTI_DEBUG_DIR"] = sys.argv[1]  # a new run: the first one's ring is written now
        for i in range(4):  # the same values each call: later records share the first call's files
            g(torch.ones(4, 4))
""")


@pytest.fixture(scope="module")
def masked(tmp_path_factory):
    root = tmp_path_factory.mktemp("mask")
    proc = subprocess.run([sys.executable, "-c", MASKED, str(root / "second")],
                          env=_env(str(root / "first"), **CPP, AOTI_DEBUG_LEVEL="save", AOTI_DEBUG_RING="3",
                                   AOTI_DEBUG_TRIGGER="nonfinite"),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return only_run(str(root / "first")), only_run(str(root / "second"))


def test_inf_made_at_a_kernels_first_call_does_not_fire(masked):
    first, _ = masked
    fl = _info(first)["flight"]
    fired = fl["fired"]
    assert fired is not None and fired["value"] == "nan" and fired["graph_call"] == 6
    recs = records(first)
    # the mask's Inf is in every kept call, born at the first (inputs finite): it never fired
    assert any(r["phase"] == "after" and r["stats"]["inf"] > 0 and r["kernel_call"] > 0 for r in recs)
    assert _calls([r for r in recs if r["launch"] <= fired["launch"]])[-3:] == [4, 5, 6]


def test_ring_written_when_the_run_changes(masked):
    first, second = masked
    fl = _info(first)["flight"]
    assert [d["reason"] for d in fl["dumps"]] == ["nonfinite", "nonfinite: next occurrence saved", "close"]
    assert fl["graph_calls"] == 8 and _calls(records(first)) == [4, 5, 6, 7, 8]
    fl2 = _info(second)["flight"]
    assert (fl2["graph_calls"], fl2["calls_written"], fl2["calls_dropped"], fl2["fired"]) == (4, 3, 1, None)
    assert [d["reason"] for d in fl2["dumps"]] == ["exit"] and _calls(records(second)) == [2, 3, 4]


def test_save_level_keeps_the_files_of_kept_records_only(masked):
    """Files of calls that left the ring unwritten are deleted, unless a kept record
    shares them (the second run's inputs are the same every call)."""
    for run in masked:
        recs = records(run)
        named = {r["file"] for r in recs if r.get("file")}
        on_disk = {f"tensors/{n}" for n in os.listdir(os.path.join(run, "tensors"))}
        assert named == on_disk and len(named) > 0, run
    recs = records(masked[1])
    first_kept = min(r["seq"] for r in recs)
    shared = [r for r in recs if r.get("shared")]
    assert shared and any(int(r["file"].split("/")[1][1:9]) < first_kept for r in shared)  # made by the dropped call


# -- bad values ----------------------------------------------------------------------------------
def test_bad_env_values_warn_once_and_record_normally(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv(config.ENV_RING, "lots")
    monkeypatch.setenv(config.ENV_TRIGGER, "loss")
    root = str(tmp_path / "cpp")
    torch._dynamo.reset()
    x, w = torch.randn(6, 8), torch.randn(8, 4)
    with dump_dir_restored(), torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=root), \
            torch._inductor.config.patch(cpp_wrapper=True):
        fn = torch.compile(lambda x, w: torch.relu(x @ w) * 0.5)
        for _ in range(4):
            fn(x, w)
    failures = dict(session.failures())
    assert "the ring is off" in failures["cpp:env-AOTI_DEBUG_RING"] and "'lots'" in failures["cpp:env-AOTI_DEBUG_RING"]
    assert "no trigger is used" in failures["cpp:env-AOTI_DEBUG_TRIGGER"]
    err = capfd.readouterr().err
    assert err.count("AOTI_DEBUG_RING='lots'") <= 1 and err.count("AOTI_DEBUG_TRIGGER='loss'") <= 1
    run = only_run(root)
    recs = records(run)
    assert {r["wrapper"] for r in recs} == {"cpp"} and _calls(recs) == [1, 2, 3, 4]  # every record, as it came
    info = _info(run)
    assert "flight" not in info and sum("AOTI_DEBUG_RING='lots'" in m for m in info["warnings"]) == 1


# -- the runtime driven directly: graph calls, the record limit, std::terminate -------------------
HARNESS = r"""
#include "entry.h"
#include <stdexcept>
#include <string>
#include <vector>
using namespace aoti_debug_rt_1;
static const Arg kArg[1] = {{"n", "input", "scalar", "n", 0, 0, ""}};
static Site site(int id, const char* subgraph, const char* kernel) {
  return Site{subgraph, kernel, kernel, schema::kStats, 0, 1, 1, kArg, "", "before,after", __FILE__, __LINE__,
              "", "", "", id, ""};
}
static void launch(Graph& g, const Site& s, int64_t v) {  // what a wrapper's launch does: 2 records
  Token t{0, 0};
  Value x(v);
  entry_launch(&g, &t, &s, &x, 1);
  entry_done(&g, &t, &s, &x, 1);
}
int main(int argc, char** argv) {
  std::string mode = argv[1];
  Graph a{nullptr, nullptr}, b{nullptr, nullptr}, c{nullptr, nullptr};
  if (mode == "graphs") {
    Site a0 = site(0, "", "a0"), a1 = site(1, "", "a1"), b0 = site(0, "", "b0"), body = site(1, "body", "body");
    Site c0 = site(0, "loop", "c0"), c1 = site(1, "loop", "c1");
    for (int i = 0; i < 4; ++i) {
      launch(a, a0, i);
      launch(a, a1, i);
      launch(b, b0, i);
      for (int k = 0; k < 3; ++k) launch(b, body, i);  // a loop body: the call of its wrapper
      for (int k = 0; k < 2; ++k) {  // a wrapper with subgraph launches only: each pass is a call
        launch(c, c0, i);
        launch(c, c1, i);
      }
    }
  } else if (mode == "limit") {
    Site s0 = site(0, "", "small0"), s1 = site(1, "", "small1");
    for (int i = 0; i < 30000; ++i) {  // 4 records a call
      launch(a, s0, i);
      launch(a, s1, i);
    }
    std::vector<Site> big;  // one call of 120,000 records
    for (int i = 0; i < 60000; ++i) big.push_back(site(i, "", "big"));
    for (const Site& s : big) launch(b, s, 7);
  } else if (mode == "terminate") {
    Site s0 = site(0, "", "k0");
    for (int i = 0; i < 5; ++i) launch(a, s0, i);
    throw std::runtime_error("boom\nmore");
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """A program that calls the runtime's entry points as wrappers do (scalar values)."""
    return build_harness(tmp_path_factory.mktemp("harness"), HARNESS)


def _drive(harness: str, tmp_path, mode: str, ring: str) -> tuple[subprocess.CompletedProcess, str]:
    root = str(tmp_path / mode)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTI_DEBUG")}
    proc = subprocess.run([harness, mode], env={**env, "AOTI_DEBUG_DIR": root, "AOTI_DEBUG_RING": ring},
                          capture_output=True, text=True, timeout=300)
    return proc, only_run(root)


def test_graph_calls_of_several_wrappers_share_the_ring(harness, tmp_path):
    """A step with three wrappers: a (2 launches), b (1 launch and 3 passes over a loop body:
    one call) and c (launches in a subgraph only: each pass over it is a call)."""
    proc, run = _drive(harness, tmp_path, "graphs", "3")
    assert proc.returncode == 0, proc.stderr
    fl = _info(run)["flight"]
    assert (fl["graph_calls"], fl["calls_written"], fl["calls_dropped"]) == (4 * 4, 3, 4 * 4 - 3)
    recs = records(run)
    assert [(r["graph"], r["kernel"]) for r in recs if r["phase"] == "before"] == [
        ("graph1", "b0"), *[("graph1/body", "body")] * 3, *[("graph2/loop", "c0"), ("graph2/loop", "c1")] * 2]
    assert {r["value"] for r in recs} == {3}  # the last step's


def test_ring_memory_is_bounded_in_records(harness, tmp_path):
    """At most flight.MAX_RING_RECORDS records: older calls leave first, then the oldest
    records of a call larger than that."""
    proc, run = _drive(harness, tmp_path, "limit", "100000")
    assert proc.returncode == 0, proc.stderr
    fl = _info(run)["flight"]
    assert (fl["graph_calls"], fl["calls_dropped"], fl["records_dropped"]) == (30001, 30000, 20000)
    recs = records(run)
    assert len(recs) == flight.MAX_RING_RECORDS == 100_000 and {r["kernel"] for r in recs} == {"big"}
    assert [r["seq"] for r in recs] == list(range(4 * 30000 + 20000 + 1, 4 * 30000 + 120000 + 1))


def test_uncaught_cpp_exception_writes_the_ring(harness, tmp_path):
    proc, run = _drive(harness, tmp_path, "terminate", "2")
    assert proc.returncode == -signal.SIGABRT and "boom" in proc.stderr  # std::terminate goes on as before
    fl = _info(run)["flight"]
    assert [(d["reason"], d["graph_calls"]) for d in fl["dumps"]] == [("exception: std::runtime_error: boom", [4, 5])]
    assert [r["value"] for r in records(run)] == [3, 3, 4, 4]


# -- an AOTInductor package, run where aoti_debug is not installed --------------------------------
class Step(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.randn(8, 4, generator=torch.Generator().manual_seed(0)))

    def forward(self, x):
        y = torch.sqrt(x) * 2
        return torch.relu(y @ self.w).sum(0) + 1


AOTI_LOOP = textwrap.dedent("""
    import sys, torch
    runner = torch._inductor.aoti_load_package(sys.argv[1])
    steps, nan_at = int(sys.argv[2]), int(sys.argv[3])
    for i in range(steps):
        runner(torch.full((8, 8), nan_at - 1.5 - i))
""")


@pytest.mark.slow
def test_aoti_package_flight_recorder(tmp_path):
    ep = torch.export.export(Step(), (torch.ones(8, 8),))
    with aoti_debug.enabled(level="stats"):
        pkg = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "step.pt2"))
    root = str(tmp_path / "dump")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTI_DEBUG") and k != "PYTHONPATH"}
    env.update(AOTI_DEBUG_DIR=root, AOTI_DEBUG_RING="3", AOTI_DEBUG_TRIGGER="nonfinite")
    nan_at = 20
    proc = subprocess.run([sys.executable, "-c", AOTI_LOOP, pkg, str(nan_at + 1), str(nan_at)], env=env,
                          capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = only_run(root)
    fl = _info(run)["flight"]
    fired = fl["fired"]
    assert (fired["value"], fired["graph_call"], fired["kernel_call"]) == ("nan", nan_at, nan_at - 1)
    assert "sqrt" in fired["kernel"]
    assert [d["reason"] for d in fl["dumps"]] == ["nonfinite", "nonfinite: next occurrence saved", "exit"]
    recs = records(run)
    assert _calls(recs) == [nan_at - 2, nan_at - 1, nan_at, nan_at + 1] and {r["wrapper"] for r in recs} == {"cpp"}
    born = {r["phase"]: r for r in recs if r["launch"] == fired["launch"]}
    assert sorted(fired["saved"]) == sorted(r["file"] for r in born.values())
    assert torch.equal(_load(run, born["before"]["file"]), torch.full((8, 8), -0.5))
    assert _load(run, born["after"]["file"]).isnan().all()
    again = [r for r in recs if r["launch"] == fired["next"]["launch"]]
    assert sorted(fired["next"]["saved"]) == sorted(r["file"] for r in again if r["kind"] == "tensor")
