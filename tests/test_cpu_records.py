"""CPU launch sides written as text by the runtime library (runtime/cpu_records.py,
native/cpu_records.h): the same manifest lines, byte for byte, and the same print
lines as the record dicts' path; sides with anything else go down that path; the lines
keep their place behind records still queued; a library that fails warns once. The
tests marked with the ``packer`` fixture run twice: the side's values read by the
library's C function (native/cpu_values.h) and packed in Python (a library built without
Python's headers)."""

from __future__ import annotations

import json
import os
import threading

import pytest
import torch

import aoti_debug
from aoti_debug.format import schema
from aoti_debug.format.protocol import PROTOCOL_VERSION, Site, SiteArg
from aoti_debug.runtime import cpu_records, hooks, session
from aoti_debug.runtime.session import Job
from tests.conftest import only_run, records, run_threads


@pytest.fixture(params=["c", "c-attributes", "python"])
def packer(request, monkeypatch):
    """Which code reads a side's values: the library's C function (tensors from their
    TensorImpl, or through their Python attributes), or Python."""
    if request.param == "python":
        monkeypatch.setattr(cpu_records, "VALUES_SYMBOL", "aoti_debug_rt_no_such_function")
    if request.param == "c-attributes":
        monkeypatch.setattr(cpu_records, "DIRECT_READS", False)
    return request.param


def test_the_library_reads_a_sides_values_itself_where_pythons_headers_are(library, monkeypatch):
    from aoti_debug.codegen import native_library

    records_obj = cpu_records.for_library(library)
    assert (records_obj._side is not None) == bool(native_library._python_flags())
    assert native_library._python_flags(), "this interpreter has no Python.h: Inductor's CPU kernels need it too"
    # this torch's tensor object is one the build knows, and the probe read agrees
    assert native_library.tensor_object_layout() in (1, 2) and records_obj.direct_reads
    monkeypatch.setattr(cpu_records, "DIRECT_READS", False)
    assert not cpu_records.for_library(library).direct_reads


@pytest.mark.parametrize("header,layout", [
    ("struct THPVariable {\n  PyObject_HEAD\n  // Payload\n  at::Tensor cdata;\n  PyObject* backward_hooks = nullptr;", 1),
    ("struct THPVariable {\n  PyObject_HEAD\n  // Payload\n  c10::MaybeOwned<at::Tensor> cdata;\n", 2),
    ("struct THPVariable {\n  PyObject_HEAD;\n  // Payload\n  c10::MaybeOwned<at::Tensor> cdata;\n", 2),
    ("struct THPVariable {\n  PyObject_HEAD\n  PyObject* extra;\n  at::Tensor cdata;\n", 0),
    ("struct THPVariable {\n  PyObject_HEAD\n  c10::intrusive_ptr<c10::TensorImpl> cdata;\n", 0)],
    ids=["tensor", "maybe-owned", "maybe-owned-head-with-semicolon", "another-member-first", "another-type"])
def test_the_tensor_object_layout_read_from_torchs_header(header, layout):
    from aoti_debug.codegen import native_library

    assert native_library.tensor_object_layout(header) == layout


def _arg(name: str, role: str = "input", kind: str = "tensor", expr: str | None = None, unwritten: bool = False,
         volatile: tuple = ()) -> SiteArg:
    return SiteArg(name, role, kind, expr or name, unwritten, volatile)


def _values() -> tuple[list, list]:
    """One launch's before and after values: every kind of value the library writes."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, generator=g)
    x[1, 2] = float("nan")
    x[3, 3] = -float("inf")
    before = [x.t(), x[::2, 1:], torch.randn(4, generator=g).bfloat16(), torch.arange(7), torch.tensor(True),
              torch.randn(3, 2, dtype=torch.complex64, generator=g), torch.zeros(0, 3), torch.tensor(2.5),
              torch.ones(1, 3).expand(4, 3), torch.randn(3, generator=g).half(), 5, -(2 ** 63), None,
              torch.empty(3), torch.randn(2 ** 19 + 3, generator=g)]
    after = [torch.randn(2, 3, generator=g), (torch.ones(2), 7, None, (torch.zeros(1),)), torch.empty(3).fill_(4)]
    return before, after


def _site(kernel: str = "cpp_fused_k\"\u00e9_0", subgraph: str = "", site_id: int = 4) -> Site:
    before = (_arg("x_t"), _arg("x_s", expr="reinterpret_tensor(x, (3, 4))"), _arg("bf"), _arg("idx"), _arg("flag"),
              _arg("z"), _arg("empty"), _arg("zero_d"), _arg("wide"), _arg("half"), _arg("ks0", kind="symint"),
              _arg("n", kind="scalar"), _arg("none", kind="unknown"), _arg("buf9", "inout", unwritten=True),
              _arg("big"))
    after = (_arg("buf3", "output"), _arg("buf4", "output", "unknown", volatile=(("[1]", "rng seed"),)),
             _arg("buf9", "inout", unwritten=True))
    return Site(subgraph, kernel, "k", before, after, None, site_id, "")


def _run(library, level: str, text: bool, site: Site, calls: int = 3, values=None) -> tuple[str, list[str]]:
    """The run directory and its manifest lines (in seq order), written by the library
    (``text``) or by the record dicts, in a run directory of their own."""
    os.environ["AOTI_DEBUG_DIR"] = os.path.join(os.environ["AOTI_DEBUG_DIR"], "text" if text else "dicts")
    session.reset()
    g = hooks.graph(None, level, False, protocol=PROTOCOL_VERSION, native=library.path)
    if not text:
        g._records = None
    before, after = values or _values()
    for _ in range(calls):
        g.launch(site, before)
        g.done(site, after)
    aoti_debug.flush()
    path = session.dump_path()
    with open(os.path.join(path, schema.MANIFEST_FILE), encoding="ascii") as f:
        lines = f.read().splitlines()
    session.reset()
    os.environ["AOTI_DEBUG_DIR"] = os.path.dirname(os.environ["AOTI_DEBUG_DIR"])
    return path, sorted(lines, key=lambda line: json.loads(line)["seq"])


@pytest.mark.parametrize("level", ["stats", "print"])
@pytest.mark.parametrize("subgraph,site_id", [("", 4), ("cond_true_0", -1)])
def test_library_lines_are_the_dict_paths_byte_for_byte(library, fresh_session, capfd, level, subgraph, site_id,
                                                         packer):
    site = _site(subgraph=subgraph, site_id=site_id)
    path_a, text = _run(library, level, True, site)
    err_text = capfd.readouterr().err
    path_b, dicts = _run(library, level, False, site)
    err_dicts = capfd.readouterr().err
    assert text == dicts and len(text) == 3 * 21
    assert [json.loads(line)["seq"] for line in text] == list(range(1, len(text) + 1))
    assert err_text == err_dicts
    if level == "print":
        assert 'cpp_fused_k"\u00e9_0 launch=1 ks0 = 5' in err_text
        assert "x_t (input) float32[5x6] cpu min=" in err_text and "none = None" in err_text
        # one side's lines in record order (hooks._side_text): scalars between tensors, and
        # memory no launch wrote yet printed without stats
        first = err_text.split("launch=2")[0]
        assert first.index(" half (input) ") < first.index(" ks0 = 5") < first.index(" buf9 (inout) float32[3] cpu min=-")
    recs = [json.loads(line) for line in text]
    assert {r["arg"] for r in recs if r.get("volatile")} == {"buf4[1]"}
    assert [r["kind"] for r in recs[:15]] == ["tensor"] * 10 + ["symint", "scalar", "none", "tensor", "tensor"]
    assert recs[13].get("uninitialised") and "stats" not in recs[13]  # before the launch: memory, not data
    assert "uninitialised" not in recs[-1] and recs[-1]["stats"]["mean"] == 4.0  # after it: what it wrote
    assert not [k for k, _ in session.FAILURES if "cpu-records" in k or "native-stats" in k]


class _Sub(torch.Tensor):
    pass


@pytest.mark.parametrize("odd", [1.5, True, 2 ** 63, "text", torch.ones(2, dtype=torch.complex64).conj(), torch.ones(2).as_subclass(_Sub),
                                 torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)],
                         ids=["float", "bool", "big-int", "str", "conj-view", "subclass", "quantized"])
def test_a_side_with_a_value_the_library_does_not_write_takes_the_dict_path(library, fresh_session, odd, packer):
    site = Site("", "k", "k", (_arg("x"), _arg("odd", kind="unknown")), (), None, 0, "")
    values = ([torch.arange(3.0), odd], [])
    _, text = _run(library, "stats", True, site, 2, values)
    _, dicts = _run(library, "stats", False, site, 2, values)
    assert text == dicts and len(text) == 4


@pytest.mark.parametrize("dicts", [False, True], ids=["library", "dicts"])
def test_a_value_that_is_a_tensor_in_one_call_and_a_list_in_the_next(library, fresh_session, dicts, packer):
    """The values packed by position (Records.values_side) and the flattened path share
    one plan: a side whose value turns into a list, and back, names and summarises each
    value; so does the record dicts' path (its templates of the first call are not used
    for a call holding a list)."""
    site = Site("", "k", "k", (_arg("buf2", "output", "unknown"), _arg("ks0", kind="symint")), (), None, 0, "")
    g = hooks.graph(None, "stats", False, protocol=PROTOCOL_VERSION, native=library.path)
    if dicts:
        g._records = None
    for values in ([torch.arange(3.0), 4], [(torch.ones(2), None, [torch.zeros(1), 3]), 5], [torch.full((2,), 7.0), 6]):
        g.launch(site, values)
    aoti_debug.flush()
    recs = records(only_run(str(fresh_session)))
    assert [(r["arg"], r["kind"], r.get("numel", r.get("value"))) for r in recs] == [
        ("buf2", "tensor", 3), ("ks0", "symint", 4),
        ("buf2[0]", "tensor", 2), ("buf2[1]", "none", None), ("buf2[2][0]", "tensor", 1), ("buf2[2][1]", "scalar", 3),
        ("ks0", "symint", 5), ("buf2", "tensor", 2), ("ks0", "symint", 6)]
    assert [r["stats"]["mean"] for r in recs if r["kind"] == "tensor"] == [1.0, 1.0, 0.0, 7.0]
    assert [r["index"] for r in recs] == [0, 1, 0, 0, 0, 0, 1, 0, 1] and [r["seq"] for r in recs] == list(range(1, 10))
    assert not [k for k, _ in session.FAILURES if "cpu-records" in k]


def test_a_conjugate_view_takes_the_dict_path(library, fresh_session):
    z = torch.randn(3, dtype=torch.complex64)
    records_obj = cpu_records.for_library(library)
    plan = cpu_records.SidePlan(Site("", "k", "k", (_arg("z"),), ()), "before", "graph0", "python", False)
    flat = [(0, plan.site.before[0], "z", z.conj())]
    assert records_obj.side(plan, flat, 1, 0, lambda n: 1, -1) is None
    assert records_obj.side(plan, [(0, plan.site.before[0], "z", z)], 1, 0, lambda n: 1, -1) is not None


def test_a_compiled_model_writes_the_same_records_both_ways(library, tmp_path, monkeypatch):
    def f(x, w):
        y = torch.relu(x @ w)
        return y.sum(dim=0)[:, None] * 0.5 + torch.tanh(x[:, :4].t() @ x[:, :3])

    x, w = torch.randn(8, 6), torch.randn(6, 4)
    dumps = []
    for text in (True, False):
        if not text:
            monkeypatch.setattr(hooks.GraphHandle, "_cpu_lines", lambda self, *a: False)
        torch._dynamo.reset()
        root = str(tmp_path / f"text{text}")
        with torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=root):
            compiled = torch.compile(f)
            for _ in range(2):
                compiled(x, w)
        aoti_debug.flush()
        dumps.append(sorted(records(only_run(root)), key=lambda r: r["seq"]))
    assert dumps[0] == dumps[1] and len(dumps[0]) >= 8


def _slow_record(sess) -> dict:
    """A record of an earlier launch side ("slow"), its number taken now, to be queued."""
    return {"seq": sess.next_seq(), "launch": 0, "graph": "graph0", "wrapper": "python", "kernel": "slow",
            "op": "slow", "kernel_call": 0, "phase": "after", "arg": "y", "role": "output", "index": 0}


def test_lines_queued_behind_pending_records_keep_their_place(library, fresh_session):
    """Records still in the writer's queue (a device copy in flight) are written first."""
    g = hooks.graph(None, "stats", False, protocol=PROTOCOL_VERSION, native=library.path)
    site = Site("", "k", "k", (_arg("x"),), (), None, 0, "")
    g.launch(site, [torch.ones(2)])  # opens the run
    sess = session.current()
    release = threading.Event()
    pending = _slow_record(sess)
    sess.submit(Job(pending, finish=lambda rec: release.wait(10)))
    g.launch(site, [torch.zeros(3)])
    g.launch(site, [torch.zeros(4)])
    release.set()
    aoti_debug.flush()
    recs = records(only_run(str(fresh_session)))
    assert [r["kernel"] for r in recs] == ["k", "slow", "k", "k"]
    assert [r["seq"] for r in recs] == [1, 2, 3, 4] and recs[3]["numel"] == 4


def test_print_lines_wait_for_sides_queued_before_them(library, fresh_session, capfd):
    """Level print: a CPU side launched while records are still queued prints after them
    (the dict path's _print_side), not ahead of them; its records keep their place."""
    g = hooks.graph(None, "print", False, protocol=PROTOCOL_VERSION, native=library.path)
    site = Site("", "k", "k", (_arg("x"),), (), None, 0, "")
    g.launch(site, [torch.ones(2)])  # opens the run
    sess = session.current()
    release = threading.Event()
    pending = _slow_record(sess)

    def slow(rec: dict) -> None:
        release.wait(10)
        hooks._emit("[slow side]")

    sess.submit(Job(pending, finish=slow))
    g.launch(site, [torch.zeros(3)])
    release.set()
    aoti_debug.flush()
    err = capfd.readouterr().err
    assert err.index("launch=1 x (input) float32[2]") < err.index("[slow side]") < \
        err.index("launch=2 x (input) float32[3]")
    recs = records(only_run(str(fresh_session)))
    assert [r["kernel"] for r in recs] == ["k", "slow", "k"] and [r["seq"] for r in recs] == [1, 2, 3]


def test_a_failing_library_warns_once_and_the_dict_path_records(library, fresh_session, capfd, packer):
    g = hooks.graph(None, "stats", False, protocol=PROTOCOL_VERSION, native=library.path)
    site = Site("", "k", "k", (_arg("x"),), (), None, 0, "")
    g.launch(site, [torch.ones(2)])
    assert (g._records._side is not None) == (packer != "python")
    assert g._records.direct_reads == (packer == "c")
    g._records._fn = lambda *args: -1
    if packer != "python":
        g._records._side = lambda *args: -1
    g.launch(site, [torch.ones(3)])
    g.launch(site, [torch.ones(4)])
    aoti_debug.flush()
    recs = records(only_run(str(fresh_session)))
    assert [r["numel"] for r in recs] == [2, 3, 4] and all(r["stats"]["mean"] == 1.0 for r in recs)
    assert capfd.readouterr().err.count("could not write CPU records") == 1


def test_a_side_larger_than_the_buffer(library, fresh_session, packer):
    """More text than the output buffer holds: it grows, and the lines are whole."""
    n = 160
    site = Site("", "k", "k", tuple(_arg(f"t{i}") for i in range(n)), (), None, 0, "")
    values = [torch.ones((1,) * 40 + (i + 1,)) for i in range(n)]
    g = hooks.graph(None, "stats", False, protocol=PROTOCOL_VERSION, native=library.path)
    for _ in range(2):
        g.launch(site, values)
    aoti_debug.flush()
    run = only_run(str(fresh_session))
    recs = records(run)
    assert len(recs) == 2 * n and [r["numel"] for r in recs[:n]] == list(range(1, n + 1))
    assert os.path.getsize(os.path.join(run, schema.MANIFEST_FILE)) / 2 > cpu_records._START_BYTES


def test_threads_running_one_graph_at_once(library, fresh_session, packer):
    """Several threads record sides of one site at once (its texts made while others read
    them): every record is whole, numbered once, and names its own value."""
    n, threads, calls = 24, 4, 25
    site = Site("", "k", "k", tuple(_arg(f"t{i}") for i in range(n)), (), None, 0, "")
    g = hooks.graph(None, "stats", False, protocol=PROTOCOL_VERSION, native=library.path)

    def work(k: int) -> None:
        for _ in range(calls):
            g.launch(site, [torch.full((i + 1,), float(k)) for i in range(n)])

    run_threads(work, threads)
    aoti_debug.flush()
    recs = records(only_run(str(fresh_session)))
    assert sorted(r["seq"] for r in recs) == list(range(1, threads * calls * n + 1))
    assert all(r["numel"] == int(r["arg"][1:]) + 1 and r["stats"]["std"] == 0.0 for r in recs)
    assert {r["stats"]["mean"] for r in recs} == {float(k) for k in range(threads)}


def test_a_manifest_that_cannot_be_written_warns_once(library, fresh_session, monkeypatch, capfd, packer):
    """The library's write fails (here: a descriptor open for reading): one warning, the
    model runs on, nothing else is written in its place."""
    from aoti_debug.format.writer import RunWriter

    site = Site("", "k", "k", (_arg("x"),), (), None, 0, "")
    g = hooks.graph(None, "stats", False, protocol=PROTOCOL_VERSION, native=library.path)
    g.launch(site, [torch.ones(2)])  # opens the run
    read_only = os.open(os.devnull, os.O_RDONLY)
    try:
        with monkeypatch.context() as m:
            m.setattr(RunWriter, "fileno", lambda self: read_only)
            for _ in range(3):
                g.launch(site, [torch.ones(3)])
    finally:
        os.close(read_only)
    g.launch(site, [torch.ones(4)])
    aoti_debug.flush()
    assert [r["numel"] for r in records(only_run(str(fresh_session)))] == [2, 4]
    assert capfd.readouterr().err.count("cannot append to manifest") == 1
