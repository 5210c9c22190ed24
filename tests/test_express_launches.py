"""The bookkeeping of express launches (``hooks.GraphHandle._express``), on CPU with plans
made by hand: which launches get an entry, that a change of plan retires it, and that a
side its plan declines is recorded in full once, under its launch's own numbers. The
express sides themselves (the library's C function, the device ring) are checked on the
GPU (tests/gpu/test_device_ring_gpu.py: counted per call, records bit for bit)."""

from __future__ import annotations

import types

import pytest
import torch

from aoti_debug.format.protocol import make_site
from aoti_debug.runtime import hooks, ring_records, session
from aoti_debug.runtime.session import Job

LABEL = "graph0"


def _site(site_id: int = 3, before: bool = True):
    inputs = (("x", "input", "tensor", "arg0_1", False, (), ()),) if before else ()
    return make_site(("", "k", "k", inputs, (("buf0", "output", "tensor", "buf0", False, (), ()),), "src", site_id,
                      ""))


def _plan(site, phase: str, t: torch.Tensor) -> ring_records.SidePlan:
    return ring_records.SidePlan(site, [{"phase": phase}], [t], [True], None)


@pytest.fixture
def sess(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTI_DEBUG_DIR", str(tmp_path))
    session.reset()
    yield session.current()
    session.reset()


def test_a_launch_goes_express_once_both_sides_have_plans(sess):
    g = hooks.GraphHandle(None, "stats", False)
    site, t = _site(), torch.zeros(2)
    after = _plan(site, "after", t)
    g._offer_express(sess, site, LABEL, after)
    assert id(site) not in g._express, "its before side has no plan yet"
    before = g._ring_plans[(id(site), LABEL, "before")] = _plan(site, "before", t)
    g._offer_express(sess, site, LABEL, after)
    x = g._express[id(site)]
    assert (x.sess, x.label, x.before, x.after, x.producer) == (sess, LABEL, before, after, False)
    # A launch that passes nothing before it: its after side's plan alone.
    bare = _site(4, before=False)
    g._offer_express(sess, bare, LABEL, _plan(bare, "after", t))
    assert g._express[id(bare)].before is None

    # What asks the hooks for more keeps their own path: a device sync after each
    # launch, a flight recorder, a plan of values in lists or tuples.
    synced = hooks.GraphHandle(None, "stats", True)
    synced._ring_plans[(id(site), LABEL, "before")] = before
    synced._offer_express(sess, site, LABEL, after)
    assert not synced._express
    listed = _plan(site, "after", t)
    listed.structure = [(tuple, 1), None]
    g._express.clear()
    g._offer_express(sess, site, LABEL, listed)
    assert not g._express
    recording = types.SimpleNamespace(flight=object())  # (a session with a flight recorder, as the offer sees it)
    g._offer_express(recording, site, LABEL, after)
    assert not g._express


def test_a_new_plan_retires_the_entry_and_a_failed_one_clears_all(sess):
    g = hooks.GraphHandle(None, "stats", False)
    site, other, t = _site(), _site(5), torch.zeros(2)
    for s in (site, other):
        g._express[id(s)] = hooks._Express(sess, LABEL, None, _plan(s, "after", t), False)
    rec = {"phase": "before", "arg": "x"}
    g._plan((id(site), LABEL, "before"), site, [Job(rec)], [t], None, [(rec, t)], [])
    assert (id(site), LABEL, "before") in g._ring_plans
    assert id(site) not in g._express and id(other) in g._express
    g._plan_failed(RuntimeError("a launch failed"))
    assert not g._express and not g._ring_plans


def test_a_declined_side_is_recorded_in_full_under_its_launchs_numbers(sess, monkeypatch):
    g = hooks.GraphHandle(None, "stats", False)
    site, t = _site(), torch.zeros(2)
    g._express[id(site)] = hooks._Express(sess, LABEL, _plan(site, "before", t), _plan(site, "after", t), False)
    recorded = []

    def record(self, sess, site, args, values, phase, extra=None, planned=True):
        tls = self._tls
        recorded.append((phase, planned, tls.launch, tls.call, tls.label, len(args)))

    monkeypatch.setattr(hooks.GraphHandle, "_express_side", lambda self, *args: False)
    monkeypatch.setattr(hooks.GraphHandle, "_record", record)
    for _ in range(2):
        g.launch(site, (t,))
        g.done(site, (t,))
    assert recorded == [("before", False, 1, 0, LABEL, 1), ("after", False, 1, 0, LABEL, 1),
                        ("before", False, 2, 1, LABEL, 1), ("after", False, 2, 1, LABEL, 1)]

    # In a new session (a new run) the entry made in the old one is not used: the hooks'
    # own path, whose plans then offer it again.
    session.reset()
    recorded.clear()
    g.launch(site, (t,))
    g.done(site, (t,))
    assert recorded == [("before", True, 1, 0, LABEL, 1), ("after", True, 1, 0, LABEL, 1)]
