"""The protocol between generated Python wrappers and the runtime (format/protocol.py):
typed sites, the version check, and records that are exactly what the schema writes."""

from __future__ import annotations

import json
import math

import pytest
import torch

import aoti_debug
from aoti_debug.codegen import python_emitter
from aoti_debug.codegen.emit import py_literal
from aoti_debug.format.protocol import PROTOCOL_VERSION, RECORD_FIELDS, Site, SiteArg, jsonable, make_site, record
from aoti_debug.format.schema import Record, Stats
from aoti_debug.runtime import hooks, session
from tests.conftest import only_run, records, run_dirs


def _arg(name, role="input", kind="unknown", expr=None, uninitialised=False, volatile=()):
    return SiteArg(name, role, kind, expr or name, uninitialised, volatile)


def _with_stats(rec: dict) -> dict:
    """``rec`` as ``Record.to_dict`` writes it: ``stats`` always there (null without values)."""
    return {"stats": None, **rec}


def _strict_json(line: str) -> dict:
    def refuse(token):
        raise ValueError(f"non-standard JSON constant {token}")

    return json.loads(line, parse_constant=refuse)


# -- the site types -----------------------------------------------------------------------
def test_sites_are_tuples_read_by_name():
    a = _arg("buf2", "output", "tensor", "reinterpret_tensor(buf2, (4,), (1,), 0)", volatile=(("[1]", "rng offset"),))
    site = Site("body_graph_0", "torch.ops.aten.native_dropout.default", "aten.native_dropout", (), (a,), "dropout")
    assert isinstance(site, tuple) and isinstance(a, tuple)
    assert site.kernel == site[1] and (site.subgraph, site.op, site.source) == ("body_graph_0",
                                                                                "aten.native_dropout", "dropout")
    assert site.before == () and site.after[0].arg == "buf2" and site.after[0].kind_hint == "tensor"
    assert a.volatile_reason("buf2[1]") == "rng offset" and a.volatile_reason("buf2[0]") is None
    assert _arg("seed", volatile=(("", "rng seed"),)).volatile_reason("seed[3]") == "rng seed"
    # What the emitter writes (a plain tuple literal) reads back as the same typed site.
    literal = py_literal(site)
    assert literal.startswith("('body_graph_0', ") and "SiteArg" not in literal
    assert make_site(eval(literal)) == site and type(make_site(eval(literal)).after[0]) is SiteArg
    with pytest.raises((TypeError, ValueError)):
        make_site(("", "k", "k", (), ()))  # a protocol-1 site without `source`


def test_emitted_header_passes_the_protocol_version():
    lines = python_emitter.header_lines("stats", False, {"kind": "inference"})
    assert lines[1].endswith(f"info=(('kind', 'inference'),), protocol={PROTOCOL_VERSION})")


def test_record_builder_uses_record_fields_only():
    rec = record(seq=1, launch=1, graph="graph0", wrapper="python", kernel="k", op="k", kernel_call=0,
                 phase="before", arg="x", role="input", index=0, expr="x + 1", volatile="rng seed")
    assert set(rec) <= RECORD_FIELDS and "stats" not in rec
    rec["kind"] = "none"  # finished: the runtime sets what the value turned out to be
    assert Record.from_dict(rec).to_dict() == _with_stats(rec)
    assert [jsonable(v) for v in (math.nan, math.inf, -math.inf, 1.5, 3, True, "s")] == \
        ["nan", "inf", "-inf", 1.5, 3, True, "s"]
    # Stats use the same policy (Stats.to_dict): one way to write a non-finite float.
    assert Stats(mean=math.inf, min=-math.inf).to_dict()["mean"] == jsonable(math.inf)


# -- records the runtime writes -------------------------------------------------------------
class _Odd:
    pass


def _every_kind_of_record(level: str) -> None:
    g = hooks.graph("/w.py", level, False, protocol=PROTOCOL_VERSION)
    big = torch.tensor([1.7e308, 1.7e308], dtype=torch.float64)  # mean and std overflow to inf
    x = torch.randn(8)
    before = (_arg("x", kind="tensor"), _arg("x_again", kind="tensor"), _arg("view", kind="tensor", expr="x[::2]"),
              _arg("fresh", kind="tensor", uninitialised=True), _arg("big", kind="tensor"),
              _arg("nan_in", kind="tensor"),
              _arg("s0", kind="symint"), _arg("alpha", kind="scalar", expr="1.5"), _arg("flag", kind="scalar"),
              _arg("nanv", kind="scalar"), _arg("infv", kind="scalar"), _arg("ninfv", kind="scalar"),
              _arg("nothing"), _arg("obj"), _arg("seed", kind="tensor", volatile=(("", "rng seed"),)),
              _arg("scratch", "inout", "tensor", uninitialised=True))
    after = (_arg("outs", "output", volatile=(("[1]", "rng offset"),)), _arg("io", "inout", "tensor"),
             _arg("scratch", "inout", "tensor", uninitialised=True))
    site = g.site(eval(py_literal(Site("sub", "k", "aten.k", before, after, "node"))))  # as emitted
    values = (x, x, x[::2], torch.empty(3), big, torch.tensor([math.nan, 1.0, math.inf]), 7, 1.5, True,
              math.nan, math.inf, -math.inf, None, _Odd(), torch.tensor([1, 2]), torch.empty(4))
    g.launch(site, values)
    g.done(site, ([torch.ones(2), torch.zeros(2)], x, torch.full((4,), 3.0)))
    aoti_debug.flush()


@pytest.mark.parametrize("level", ["save", "stats", "print"])
def test_every_record_key_is_a_record_field_and_round_trips(fresh_session, level, monkeypatch, capfd):
    monkeypatch.setenv("AOTI_DEBUG_MAX_BYTES", "100")  # later tensors: "skipped"
    session.reset()
    _every_kind_of_record(level)
    run_dir = only_run(str(fresh_session))
    with open(f"{run_dir}/manifest.jsonl") as f:
        recs = [_strict_json(line) for line in f]  # no NaN/Infinity tokens
    by_arg = {r["arg"]: r for r in recs if r["arg"] != "scratch"}
    assert len(recs) == 20, sorted(by_arg)
    for r in recs:
        assert set(r) <= RECORD_FIELDS, set(r) - RECORD_FIELDS
        assert Record.from_dict(r).to_dict() == _with_stats(r)
    assert by_arg["view"]["expr"] == "x[::2]" and "expr" not in by_arg["x"] and by_arg["alpha"]["expr"] == "1.5"
    assert by_arg["fresh"]["uninitialised"] is True and "stats" not in by_arg["fresh"]  # metadata only
    assert by_arg["seed"]["volatile"] == "rng seed" and by_arg["outs[1]"]["volatile"] == "rng offset"
    assert "volatile" not in by_arg["outs[0]"]
    assert [by_arg[n]["value"] for n in ("nanv", "infv", "ninfv")] == ["nan", "inf", "-inf"]
    assert by_arg["big"]["stats"]["mean"] == "inf" and by_arg["big"]["stats"]["max"] == 1.7e308
    assert by_arg["nan_in"]["stats"]["nan"] == 1 and by_arg["nan_in"]["stats"]["inf"] == 1
    assert by_arg["nothing"]["kind"] == "none" and by_arg["obj"] == {**by_arg["obj"], "kind": "other", "value": "_Odd"}
    assert by_arg["s0"]["kind"] == "symint" and by_arg["io"]["index"] == 17
    # An in-place arg read uninitialised: metadata only before the launch, data after it.
    scratch = {r["phase"]: r for r in recs if r["arg"] == "scratch"}
    assert scratch["before"]["uninitialised"] is True and "stats" not in scratch["before"]
    assert "uninitialised" not in scratch["after"] and scratch["after"]["stats"]["max"] == 3.0
    assert {r["graph"] for r in recs} == {"graph0/sub"} and {r["op"] for r in recs} == {"aten.k"}
    if level == "save":
        assert by_arg["x"]["file"] and by_arg["x_again"]["shared"] is True
        assert any(r.get("skipped") for r in recs)
    if level == "print":
        err = capfd.readouterr().err
        assert "nanv = nan" in err and "ninfv = -inf" in err and " big (input) float64[2] " in err


def test_errors_are_record_fields(fresh_session, monkeypatch):
    def no_space(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hooks.torch, "save", no_space)
    g = hooks.graph(None, "save", False, protocol=PROTOCOL_VERSION)
    g.launch(Site("", "k", "k", (_arg("a", kind="tensor"),)), (torch.ones(3),))
    aoti_debug.flush()
    (r,) = records(only_run(str(fresh_session)))
    assert "No space left" in r["error"] and set(r) <= RECORD_FIELDS
    assert Record.from_dict(r).to_dict() == _with_stats(r)


# -- other protocol versions ------------------------------------------------------------------
#: What aoti_debug emitted before the protocol had a version: untyped tuples inline, no
#: ``protocol`` argument.
_P1_SITE = ("('', 'k', 'k', (('x', 'input', 'tensor', 'x', False, ()),), "
            "(('y', 'output', 'tensor', 'y', False, ()),), None)")
PROTOCOL_1_WRAPPER = f"""
from aoti_debug.runtime.hooks import graph as _aoti_debug_graph
_aoti_debug = _aoti_debug_graph(globals().get('__file__'), 'save', False, info=())
def call(x):
    _aoti_debug.launch({_P1_SITE}, (x,))
    y = x * 2
    _aoti_debug.done({_P1_SITE}, (y,))
    return y
"""


def test_wrapper_of_another_protocol_warns_once_and_runs_unrecorded(fresh_session, capfd):
    for _ in range(2):  # two graphs of the old version: one warning
        module: dict = {"__file__": "/cache/old_wrapper.py"}
        exec(PROTOCOL_1_WRAPPER, module)
        assert torch.equal(module["call"](torch.ones(3)), torch.full((3,), 2.0))
    newer = hooks.graph("/cache/newer.py", "save", False, info=(), protocol=PROTOCOL_VERSION + 1, shape="?")
    assert newer.site(("anything", 1)) == ("anything", 1)  # not read
    newer.launch(("anything", 1), (torch.ones(1),))
    newer.done(("anything", 1), ())
    aoti_debug.flush()
    err = capfd.readouterr().err
    assert err.count("generated by another aoti_debug version (site protocol 1,") == 1, err
    assert err.count(f"site protocol {PROTOCOL_VERSION + 1},") == 1, err
    assert run_dirs(str(fresh_session)) == []  # nothing recorded, not even a run directory
    assert not [k for k, _ in session.FAILURES if k.startswith("hook-")]


def test_malformed_site_never_breaks_the_model(fresh_session, capfd):
    g = hooks.graph("/w.py", "stats", False, protocol=PROTOCOL_VERSION)
    site = g.site(("", "k"))  # at module import: warns, returns no site
    g.launch(site, (torch.ones(2),))
    g.done(site, ())
    err = capfd.readouterr().err
    assert "a launch site of /w.py is malformed" in err and "instrumentation of a kernel failed" in err


def test_compiled_model_of_an_older_protocol_runs_unrecorded(fresh_session, monkeypatch, capfd):
    """A real wrapper whose header names another protocol (as a cached wrapper of another
    aoti_debug would): the model's result is unchanged, one warning, no records."""
    monkeypatch.setattr(python_emitter, "PROTOCOL_VERSION", 1)

    def f(x):
        return torch.sin(x) * 3 + x.cos()

    x = torch.randn(5, 3)
    torch._dynamo.reset()
    with torch._inductor.config.patch(fx_graph_cache=False), aoti_debug.enabled(level="stats"):
        fn = torch.compile(f)
        out1, out2 = fn(x), fn(x)
    torch._dynamo.reset()
    aoti_debug.flush()
    torch.testing.assert_close(out1, f(x))
    torch.testing.assert_close(out2, f(x))
    assert capfd.readouterr().err.count("site protocol 1,") == 1
    assert run_dirs(str(fresh_session)) == []
