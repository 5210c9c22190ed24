"""The flight recorder (runtime/flight.py): ``AOTI_DEBUG_RING=N`` keeps the last N graph
calls' records in memory and writes them at exit, on SIGTERM/SIGINT and when
``AOTI_DEBUG_TRIGGER=nonfinite`` fires at the first NaN/Inf birth, saving the birth
launch's tensors at once and at its next occurrence. run.json ``flight`` says what
happened; ``aoti-debug show`` reads it."""

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
from aoti_debug.errors import ConfigError
from aoti_debug.format import reader
from aoti_debug.format.protocol import PROTOCOL_VERSION, Site
from aoti_debug.runtime import flight, hooks, session
from tests.conftest import REPO, only_run, records, run_python

#: The graph call (1, 2, ...) of LOOP where NaN is first born: its model's first kernel
#: takes the square root of an input that turns negative at that call.
NAN_AT = 1000

#: The README's recipe: examples/nan_in_long_run.py STEPS NAN_AT.
LOOP = os.path.join(REPO, "examples", "nan_in_long_run.py")

#: Records of one graph call of LOOP's model: sqrt*2 (x before, y after), mm (y, w before,
#: out after), relu+sum+1 (2 before, 1 after).
RECORDS_PER_CALL = 8


def _loop(tmp_path, steps: int, **env) -> tuple[subprocess.CompletedProcess, str]:
    root = str(tmp_path / "dump")
    full = {"AOTI_DEBUG_LEVEL": "stats", "AOTI_DEBUG_DIR": root, **env}
    proc = subprocess.run([sys.executable, LOOP, str(steps), str(NAN_AT)], env={**os.environ, **full,
                          "PYTHONPATH": REPO}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, only_run(root)


def _flight(run: str) -> dict:
    with open(os.path.join(run, "run.json")) as f:
        return json.load(f)["flight"]


def _calls(recs: list[dict]) -> list[int]:
    """Graph calls (1, 2, ...) the records belong to: every kernel runs once per call."""
    return sorted({r["kernel_call"] + 1 for r in recs})


# -- the trigger at call 1,000 of a loop --------------------------------------------------
@pytest.fixture(scope="module")
def stopped_at_nan(tmp_path_factory):
    """The loop stops at the call where NaN is born."""
    return _loop(tmp_path_factory.mktemp("stop"), NAN_AT, AOTI_DEBUG_RING="3", AOTI_DEBUG_TRIGGER="nonfinite")[1]


@pytest.fixture(scope="module")
def ran_past_nan(tmp_path_factory):
    """The loop goes on for one call after the birth: its next occurrence is saved."""
    return _loop(tmp_path_factory.mktemp("past"), NAN_AT + 1, AOTI_DEBUG_RING="3",
                 AOTI_DEBUG_TRIGGER="nonfinite")[1]


def test_trigger_writes_exactly_the_last_three_calls(stopped_at_nan):
    recs = records(stopped_at_nan)
    assert _calls(recs) == [NAN_AT - 2, NAN_AT - 1, NAN_AT]
    assert len(recs) == 3 * RECORDS_PER_CALL
    assert [r["seq"] for r in recs] == sorted(r["seq"] for r in recs)  # written in seq order
    fl = _flight(stopped_at_nan)
    assert (fl["ring"], fl["trigger"], fl["graph_calls"]) == (3, "nonfinite", NAN_AT)
    assert (fl["calls_written"], fl["calls_dropped"], fl["records_dropped"]) == (3, NAN_AT - 3, 0)
    assert [d["reason"] for d in fl["dumps"]] == ["nonfinite", "exit"]
    assert fl["dumps"][0]["graph_calls"] == [NAN_AT - 2, NAN_AT]


def test_trigger_names_the_birth(stopped_at_nan):
    fired = _flight(stopped_at_nan)["fired"]
    assert fired["trigger"] == "nonfinite" and fired["value"] == "nan"
    assert fired["kernel"].startswith("cpp_fused") and "sqrt" in fired["kernel"]
    assert (fired["graph_call"], fired["kernel_call"], fired["nan"]) == (NAN_AT, NAN_AT - 1, 64)
    assert fired["inputs_held"] == "finite"
    born = [r for r in records(stopped_at_nan) if r["launch"] == fired["launch"]]
    assert {r["phase"] for r in born} == {"before", "after"}
    assert fired["seq"] == next(r["seq"] for r in born if r["phase"] == "after")


def test_birth_launch_saved_at_once(stopped_at_nan):
    fired = _flight(stopped_at_nan)["fired"]
    born = {r["phase"]: r for r in records(stopped_at_nan) if r["launch"] == fired["launch"]}
    assert sorted(fired["saved"]) == sorted(r["file"] for r in born.values())
    x = torch.load(os.path.join(stopped_at_nan, born["before"]["file"]), weights_only=True)
    y = torch.load(os.path.join(stopped_at_nan, born["after"]["file"]), weights_only=True)
    assert torch.equal(x, torch.full((8, 8), -0.5))
    assert y.isnan().all()
    assert fired["next"] is None  # the loop stopped: there was no next occurrence
    # only the birth launch has files
    assert sorted(os.listdir(os.path.join(stopped_at_nan, "tensors"))) == sorted(
        os.path.basename(f) for f in fired["saved"])


def test_next_occurrence_saved_in_full(ran_past_nan):
    recs = records(ran_past_nan)
    fl = _flight(ran_past_nan)
    fired, nxt = fl["fired"], fl["fired"]["next"]
    assert nxt is not None and nxt["launch"] > fired["launch"]
    again = [r for r in recs if r["launch"] == nxt["launch"]]
    assert {r["phase"] for r in again} == {"before", "after"}
    assert sorted(nxt["saved"]) == sorted(r["file"] for r in again)
    y = torch.load(os.path.join(ran_past_nan, next(r["file"] for r in again if r["phase"] == "after")),
                   weights_only=True)
    assert y.isnan().all()
    # the ring's three calls at the trigger, then the one after it: nothing else
    assert _calls(recs) == [NAN_AT - 2, NAN_AT - 1, NAN_AT, NAN_AT + 1]
    assert len(recs) == 4 * RECORDS_PER_CALL
    assert [d["reason"] for d in fl["dumps"]] == ["nonfinite", "nonfinite: next occurrence saved", "exit"]


def test_show_reads_the_dump_and_displays_what_fired(ran_past_nan):
    res = CliRunner().invoke(cli_main, ["show", ran_past_nan])
    assert res.exit_code == 0, res.output
    assert "flight recorder: ring of 3 graph call(s), trigger nonfinite" in res.output
    assert f"{NAN_AT + 1} graph call(s) seen, 4 written, {NAN_AT - 3} dropped unwritten" in res.output
    assert "trigger nonfinite fired: NaN born in launch" in res.output
    assert "next occurrence: launch" in res.output
    js = json.loads(CliRunner().invoke(cli_main, ["show", ran_past_nan, "--format", "json"]).output)
    assert js["runs"][0]["flight"]["fired"]["value"] == "nan"
    run = reader.open_run(ran_past_nan)
    assert len(list(run.records())) == 4 * RECORDS_PER_CALL and run.info.flight["ring"] == 3
    run.close()


# -- the ring without a trigger -------------------------------------------------------------
def _handle(level: str = "stats"):
    return hooks.graph(None, level, False, protocol=PROTOCOL_VERSION)


def _sites(handle, n: int, subgraph: str = "") -> list[Site]:
    out = []
    for i in range(n):
        raw = (subgraph, f"k{i}", f"k{i}", (("x", "input", "tensor", "x", False, (), ()),),
               (("y", "output", "tensor", "y", False, (), ()),), None, i, "")
        out.append(handle.site(raw))
    return out


def _call(handle, sites, x):
    for s in sites:
        handle.launch(s, (x,))
        handle.done(s, (x * 2,))


def test_ring_keeps_the_last_calls_and_writes_them_at_close(fresh_session, monkeypatch):
    monkeypatch.setenv(config.ENV_RING, "2")
    g = _handle()
    sites = _sites(g, 3)
    for i in range(10):
        _call(g, sites, torch.full((4,), float(i)))
    run = only_run(str(fresh_session))
    assert records(run) == []  # nothing written while the ring holds it
    session.reset()
    recs = records(run)
    assert len(recs) == 2 * 3 * 2 and _calls(recs) == [9, 10]
    assert {r["stats"]["min"] for r in recs if r["phase"] == "before"} == {8.0, 9.0}
    fl = _flight(run)
    assert (fl["graph_calls"], fl["calls_written"], fl["calls_dropped"], fl["fired"]) == (10, 2, 8, None)
    assert [d["reason"] for d in fl["dumps"]] == ["close"]


def test_a_signal_inside_a_records_take_writes_the_newest_calls_whole(fresh_session, monkeypatch):
    """A fatal signal's handler runs on the model's thread, whose CPU records are taken into
    the ring there (inline): its write re-enters the ring's lock in the middle of a take.
    Landing where the oldest call leaves, after the new record joined its call, it writes
    the newest ring-size calls, the new call's first record among them (before, the record
    joined after the oldest call left: a write between found one call, the new one empty)."""
    monkeypatch.setenv(config.ENV_RING, "2")
    g = _handle()
    sites = _sites(g, 3)
    for i in range(4):
        _call(g, sites, torch.full((4,), float(i)))
    real = flight.FlightRecorder._drop
    landed: list[int] = []

    def drop(self, call):
        if not landed and call.pending:
            landed.append(call.number)
            session.current().write_flight("signal SIGTERM")
        return real(self, call)

    monkeypatch.setattr(flight.FlightRecorder, "_drop", drop)
    _call(g, sites, torch.full((4,), 4.0))  # call 5: its first record lets call 3 go
    monkeypatch.undo()
    run = only_run(str(fresh_session))
    recs = records(run)
    assert landed == [3]
    assert _calls(recs) == [4, 5] and sum(1 for r in recs if r["kernel_call"] + 1 == 4) == 2 * 3
    assert sum(1 for r in recs if r["kernel_call"] + 1 == 5) >= 1
    fl = _flight(run)
    assert fl["calls_written"] == 2 and [d["graph_calls"] for d in fl["dumps"]] == [[4, 5]]


def test_a_signal_inside_a_change_of_the_ring_is_handled_at_its_end(fresh_session, monkeypatch):
    """A fatal signal's handler runs on the model's thread between any two bytecodes. One
    landing where a call has left the ring but is not yet counted as dropped (seen in the
    fast suite: ``calls_dropped`` one short) waits for the change's end: the dump counts
    every call before the two it holds, and the signal then goes on to its old handler."""
    monkeypatch.setenv(config.ENV_RING, "2")
    g = _handle()
    sites = _sites(g, 3)
    for i in range(4):
        _call(g, sites, torch.full((4,), float(i)))
    fl = session.current().flight
    went_on: list[int] = []
    monkeypatch.setitem(fl._previous, signal.SIGTERM, lambda signum, frame: went_on.append(signum))
    real = flight.FlightRecorder._drop
    landed: list[int] = []

    def drop(self, call):  # the ring has let `call` go; the signal lands before it is counted
        if not landed and call.pending:
            landed.append(call.number)
            self._on_signal(signal.SIGTERM, None)
            assert not went_on, "handled inside the change"
        return real(self, call)

    monkeypatch.setattr(flight.FlightRecorder, "_drop", drop)
    _call(g, sites, torch.full((4,), 4.0))  # call 5: its first record lets call 3 go
    monkeypatch.setattr(flight.FlightRecorder, "_drop", real)
    assert landed == [3] and went_on == [signal.SIGTERM]
    fl_json = _flight(only_run(str(fresh_session)))
    assert fl_json["dumps"][0]["reason"] == "signal SIGTERM" and fl_json["dumps"][0]["graph_calls"] == [4, 5]
    assert fl_json["calls_dropped"] == 3 and fl_json["calls_written"] == 2


def test_graph_calls_of_several_graphs_share_the_ring(fresh_session, monkeypatch):
    """A step with two graphs (a graph break) is two graph calls; subgraph launches belong
    to the call of their wrapper."""
    monkeypatch.setenv(config.ENV_RING, "2")
    a, b = _handle(), _handle()
    sa, sb = _sites(a, 2), _sites(b, 1)
    body = _sites(b, 1, subgraph="body")[0]
    for i in range(4):
        _call(a, sa, torch.full((4,), float(i)))
        _call(b, sb, torch.full((4,), float(i)))
        for _ in range(3):  # a loop body: no new graph call
            b.launch(body, (torch.ones(2),))
            b.done(body, (torch.ones(2),))
    session.reset()
    run = only_run(str(fresh_session))
    recs = records(run)
    assert _flight(run)["graph_calls"] == 8
    # the last step: graph a's call (2 launches) and graph b's (1 launch + 3 body passes)
    assert {r["graph"] for r in recs} == {"graph0", "graph1", "graph1/body"}
    assert len(recs) == (2 + 1 + 3) * 2
    assert {r["stats"]["min"] for r in recs if r["phase"] == "before" and r["graph"] != "graph1/body"} == {3.0}


#: A compiled model whose first kernel reads no weight: the graph inputs' launch (let in
#: on the CPU) runs before it but takes its site number at the first launch that reads a
#: weight, the second one.
_INPUTS_NUMBERED_LATER = textwrap.dedent("""
    import torch
    import aoti_debug
    from aoti_debug.codegen import manager
    manager.INPUTS_DEVICES = ("cuda", "cpu")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(16, 8), torch.nn.Tanh()).eval()
    with torch.no_grad(), torch._inductor.config.patch(cpp_wrapper={cpp}, force_disable_caches=True):
        fn = torch.compile(model)
        for i in range(5):
            fn(torch.full((4, 16), float(i)))
""")


@pytest.mark.parametrize("wrapper", ["python", "cpp"])
def test_the_graph_inputs_launch_starts_a_graph_call_whatever_its_site_number(tmp_path, wrapper):
    """The graph inputs' launch comes before every call's first launch, but its site is
    numbered where a launch first links to it: here above the first kernel's. A call is
    still one call in both runtimes' flight recorders (flight.py, flight.h): five calls,
    the ring holds the last two whole."""
    root = str(tmp_path / "dump")
    proc = run_python(_INPUTS_NUMBERED_LATER.format(cpp=wrapper == "cpp"),
                      {"PYTHONPATH": REPO, "AOTI_DEBUG_LEVEL": "stats", "AOTI_DEBUG_DIR": root, config.ENV_RING: "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = only_run(root)
    recs = records(run)
    inputs = [r for r in recs if r["kernel"] == "graph_inputs"]
    first = [r for r in recs if "relu" in r["kernel"]]
    assert inputs and first and inputs[0]["site"] > first[0]["site"] and inputs[0]["launch"] < first[0]["launch"]
    fl = _flight(run)
    assert fl["graph_calls"] == 5 and [d["graph_calls"] for d in fl["dumps"]] == [[4, 5]], fl
    assert _calls(recs) == [4, 5] and {r["wrapper"] for r in recs} == {wrapper}
    per_call = [sum(1 for r in recs if r["kernel_call"] == c) for c in (3, 4)]
    assert per_call[0] == per_call[1] == len(recs) // 2 and len({r["kernel"] for r in recs}) == 4, recs


def test_ring_memory_is_bounded_in_records(fresh_session, monkeypatch):
    monkeypatch.setenv(config.ENV_RING, "100")
    monkeypatch.setattr(flight, "MAX_RING_RECORDS", 6)
    g = _handle()
    sites = _sites(g, 4)  # 8 records a call: older calls leave, then the call's oldest records
    for i in range(5):
        _call(g, sites, torch.full((4,), float(i)))
    fl = session.current().flight
    assert fl._records == 6 and len(fl._ring) == 1
    session.reset()
    run = only_run(str(fresh_session))
    summary = _flight(run)
    assert summary["calls_dropped"] == 4 and summary["records_dropped"] == 5 * 2  # each call alone is 8 > 6
    recs = records(run)
    assert len(recs) == 6 and _calls(recs) == [5] and recs[-1]["kernel"] == "k3"


def test_save_level_keeps_files_of_kept_records_only(fresh_session, monkeypatch):
    monkeypatch.setenv(config.ENV_RING, "2")
    g = _handle("save")
    sites = _sites(g, 2)
    w = torch.arange(4.0)  # the same values every call: later records share its file
    for i in range(6):
        for s in sites:
            g.launch(s, (w,))
            g.done(s, (torch.full((4,), float(i)),))
    session.reset()
    run = only_run(str(fresh_session))
    recs = records(run)
    assert _calls(recs) == [5, 6]
    named = {r["file"] for r in recs}
    on_disk = {f"tensors/{n}" for n in os.listdir(os.path.join(run, "tensors"))}
    assert named == on_disk and len(on_disk) == 3  # w once, and the two kept calls' outputs
    assert all(torch.load(os.path.join(run, f), weights_only=True).shape == (4,) for f in named)


# -- exits: an uncaught exception, SIGTERM -----------------------------------------------------
FOREVER = textwrap.dedent("""
    import sys, torch
    mode = sys.argv[1]
    mixed = sys.argv[2:] == ["mixed"]  # a cpp_wrapper graph first in each step (test_flight_recorder_cpp.py)
    def f(x, w):
        return torch.relu(torch.sqrt(x) @ w) + 1
    w = torch.randn(8, 4)
    g = torch.compile(f)
    h = torch.compile(lambda x: torch.cos(x) * 2)
    i = 0
    with torch.no_grad():
        while True:
            if mixed:
                with torch._inductor.config.patch(cpp_wrapper=True):
                    h(torch.full((4,), float(i)))
            g(torch.full((8, 8), 2.0 + i), w)
            i += 1
            if i == 20:
                if mode == "raise":
                    raise RuntimeError("CUDA error: an illegal memory access was encountered")
                print("ready", flush=True)
""")


def forever(tmp_path, mode: str, *args: str) -> subprocess.Popen:
    """FOREVER in a child, level stats, ring 2 (``args``: ``mixed``)."""
    env = {**os.environ, "PYTHONPATH": REPO, "AOTI_DEBUG_LEVEL": "stats", "AOTI_DEBUG_DIR": str(tmp_path / "dump"),
           "AOTI_DEBUG_RING": "2"}
    return subprocess.Popen([sys.executable, "-c", FOREVER, mode, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def sigterm_when_ready(p: subprocess.Popen) -> None:
    """SIGTERM once FOREVER (mode ``wait``) ran 20 steps: it dies of it."""
    try:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=120) == -signal.SIGTERM
    finally:
        p.kill()


def test_sigterm_writes_the_ring_and_still_kills(tmp_path):
    sigterm_when_ready(forever(tmp_path, "wait"))
    run = only_run(str(tmp_path / "dump"))
    fl = _flight(run)
    assert [d["reason"] for d in fl["dumps"]] == ["signal SIGTERM"]
    recs = records(run)
    last, kept = fl["graph_calls"], _calls(recs)
    # the last two calls with records: the newest may be the one the signal cut short,
    # or the one before it when the call just started had recorded nothing yet
    assert last >= 20 and fl["calls_written"] == 2 and len(kept) == 2
    assert kept[1] == kept[0] + 1 and kept[1] in (last - 1, last)
    assert fl["calls_dropped"] == kept[0] - 1
    assert {r["kernel"] for r in recs if r["kernel_call"] + 1 == kept[0]} == {r["kernel"] for r in recs}


def test_uncaught_exception_writes_the_ring(tmp_path):
    p = forever(tmp_path, "raise")
    _out, err = p.communicate(timeout=300)
    assert p.returncode == 1 and "illegal memory access" in err
    run = only_run(str(tmp_path / "dump"))
    fl = _flight(run)
    assert [d["reason"] for d in fl["dumps"]] == [
        "exception: RuntimeError: CUDA error: an illegal memory access was encountered"]
    assert fl["graph_calls"] == 20 and _calls(records(run)) == [19, 20]


# -- settings ---------------------------------------------------------------------------------
@pytest.mark.parametrize("value, ring", [("3", 3), (" +7 ", 7), ("0", None), ("", None), (None, None)])
def test_parse_ring(value, ring):
    assert config.parse_ring(value) == ring


@pytest.mark.parametrize("value", ["-1", "abc", "2.5", "1e3", str(config.MAX_RING + 1)])
def test_bad_ring_is_an_error(value):
    with pytest.raises(ConfigError, match="AOTI_DEBUG_RING"):
        config.parse_ring(value)


def test_parse_trigger():
    assert config.parse_trigger("NonFinite") == "nonfinite" and config.parse_trigger("") is None
    with pytest.raises(ConfigError, match="AOTI_DEBUG_TRIGGER='nan'"):
        config.parse_trigger("nan")


def test_bad_env_values_warn_once_and_turn_it_off(fresh_session, monkeypatch, capfd):
    monkeypatch.setenv(config.ENV_RING, "lots")
    monkeypatch.setenv(config.ENV_TRIGGER, "loss")
    g = _handle()
    sites = _sites(g, 2)
    for i in range(3):
        _call(g, sites, torch.ones(3))
    aoti_debug.flush()
    err = capfd.readouterr().err
    assert err.count("AOTI_DEBUG_RING='lots'") == 1 and "the ring is off" in err
    assert err.count("AOTI_DEBUG_TRIGGER='loss'") == 1 and "no trigger is used" in err
    assert session.current().flight is None
    run = only_run(str(fresh_session))
    assert len(records(run)) == 3 * 2 * 2  # every record, as it came
    with open(os.path.join(run, "run.json")) as f:
        assert "flight" not in json.load(f)


def test_cli_run_passes_ring_and_trigger():
    code = "import os; print(os.environ['AOTI_DEBUG_RING'], os.environ['AOTI_DEBUG_TRIGGER'])"
    res = subprocess.run([sys.executable, "-m", "aoti_debug.cli", "run", "--level", "stats", "--ring", "5",
                          "--trigger", "nonfinite", "--", sys.executable, "-c", code],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO})
    assert res.returncode == 0 and res.stdout.split() == ["5", "nonfinite"], res.stderr
    bad = CliRunner().invoke(cli_main, ["run", "--ring", "x", "--", "true"])
    assert bad.exit_code == 2 and "AOTI_DEBUG_RING='x'" in bad.output


# -- the birth watch on its own ----------------------------------------------------------------
def _rec(seq, launch, phase, nan=0, inf=0, kernel_call=1, **extra):
    return {"seq": seq, "launch": launch, "graph": "graph0", "kernel": "k", "kernel_call": kernel_call,
            "phase": phase, "arg": f"a{seq}", "site": launch, "stats": {"nan": nan, "inf": inf}, **extra}


def test_watch_fires_on_a_birth_not_on_what_is_passed_on():
    w = flight.BirthWatch()
    assert w.observe(_rec(1, 1, "before", nan=3), 1) is None
    assert w.observe(_rec(2, 1, "after", nan=3), 1) is None  # inherited NaN
    assert w.observe(_rec(3, 2, "before", inf=1), 1) is None
    birth = w.observe(_rec(4, 2, "after", nan=2, inf=1), 1)  # inf - inf: a NaN birth
    assert birth is not None and (birth["value"], birth["launch"], birth["inputs_held"]) == ("nan", 2, "Inf")


def test_watch_takes_an_inf_made_at_a_kernels_first_call_as_by_design():
    w = flight.BirthWatch()
    assert w.observe(_rec(1, 1, "after", inf=10, kernel_call=0), 1) is None  # a causal mask
    assert w.observe(_rec(2, 4, "after", inf=10, kernel_call=1, site=1), 2) is None  # the mask again
    assert w.observe(_rec(3, 5, "before", uninitialised=True, nan=1), 2) is None
    birth = w.observe(_rec(4, 5, "after", inf=1, kernel_call=3), 2)  # an overflow elsewhere
    assert birth is not None and birth["value"] == "inf" and birth["inputs_held"] == "none"


# -- records that arrive late (a GPU's path, simulated on the CPU) -----------------------------
class _GatedEvent:
    """Stands in for a CUDA event: the writer thread waits on it, so the records lag
    behind the launches as device stats do."""

    def __init__(self, gate):
        self.gate = gate

    def synchronize(self):
        assert self.gate.wait(timeout=60)


class _LateStats:
    """Two sites under a ring of 3 and the nonfinite trigger whose records arrive only when
    ``gate`` is set (as a device ring's stats arrive after the launches). The first site's
    output is NaN from graph call 10 on."""

    def __init__(self, monkeypatch):
        import threading

        self.gate = gate = threading.Event()
        submit = session.Session.submit

        def lagging(self, job):
            job.event = job.event or _GatedEvent(gate)
            return submit(self, job)

        monkeypatch.setattr(session.Session, "submit", lagging)
        monkeypatch.setenv(config.ENV_RING, "3")
        monkeypatch.setenv(config.ENV_TRIGGER, "nonfinite")
        self.g = _handle()
        self.sites = _sites(self.g, 2)
        self.born = self.sites[0]

    def launch(self, s, i):
        self.g.launch(s, (torch.full((4,), float(i)),))

    def done(self, s, i):
        nan = s is self.born and i >= 10  # NaN born at call 10
        self.g.done(s, (torch.full((4,), -1.0).sqrt() if nan else torch.full((4,), float(i)),))

    def call(self, i):
        for s in self.sites:
            self.launch(s, i)
            self.done(s, i)


def test_late_records_fire_in_the_writer_and_keep_the_calls_up_to_the_birth(fresh_session, monkeypatch):
    late = _LateStats(monkeypatch)
    call, gate = late.call, late.gate
    for i in range(1, 13):  # the birth at call 10; the model runs two calls past it meanwhile
        call(i)
    fl = session.current().flight
    assert fl.fired is None and fl._records == 0  # nothing arrived yet
    gate.set()
    aoti_debug.flush()
    fired = fl.fired
    assert fired is not None and fired["graph_call"] == 10 and fired["saved"] == []
    assert any("released" in n for n in fired["not_saved"])
    for i in (13, 14):
        call(i)
    session.reset()
    run = only_run(str(fresh_session))
    summary = _flight(run)
    assert summary["dumps"][0]["reason"] == "nonfinite" and summary["dumps"][0]["graph_calls"] == [8, 10]
    nxt = summary["fired"]["next"]
    again = [r for r in records(run) if r["launch"] == nxt["launch"]]
    assert again and again[0]["kernel_call"] == 12  # call 13: the first launch of the site after the stats came
    assert sorted(nxt["saved"]) == sorted(r["file"] for r in again)
    y = torch.load(os.path.join(run, next(r["file"] for r in again if r["phase"] == "after")), weights_only=True)
    assert y.isnan().all()


def test_a_trigger_firing_between_a_launchs_two_sides_saves_the_next_whole_launch(fresh_session, monkeypatch):
    """The writer thread fires while the model thread is inside the birth site's launch
    (its inputs recorded, its outputs not yet): that launch is not saved half (outputs
    only); the next one is saved whole. Found on the GPU, where the device ring's stats
    arrive while the model runs on."""
    late = _LateStats(monkeypatch)
    for i in range(1, 12):
        late.call(i)
    late.launch(late.born, 12)  # call 12: the birth site's inputs are recorded...
    late.gate.set()
    aoti_debug.flush()  # ...then the stats arrive and the trigger fires, in the writer
    fl = session.current().flight
    assert fl.fired is not None and fl.fired["graph_call"] == 10
    late.done(late.born, 12)  # ...then its outputs
    late.launch(late.sites[1], 12)
    late.done(late.sites[1], 12)
    late.call(13)
    session.reset()
    run = only_run(str(fresh_session))
    nxt = _flight(run)["fired"]["next"]
    again = [r for r in records(run) if r["launch"] == nxt["launch"]]
    assert {r["phase"] for r in again} == {"before", "after"}
    assert again[0]["kernel_call"] == 12  # call 13, the first launch that began after the trigger fired
    assert sorted(nxt["saved"]) == sorted(r["file"] for r in again)
