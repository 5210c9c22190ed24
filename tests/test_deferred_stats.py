"""Deferred stats launches inside CUDA graphs: where the wrapper must summarise what is
pending, and what the capture does with the sides until then.

Inside a CUDA graph, level stats, a side's stats launch waits and goes with the sides
after it as one launch (``runtime/cuda_graphs.Capture``), at a ``pending()`` line of the
Python wrapper or the capture's end. Codegen (``Manager._pending``) writes that line
before whatever may write a tensor a deferred side read: a launch writing its storage
(in place, or through a buffer reuse), a line between launches naming it. The GPU test
(``tests/gpu/test_device_ring_gpu.py::test_reduce_overhead_deferred_sides_equal_one_launch_a_side``)
checks a replay's records against the eager warm-up's on ResNet-18 and GPT-2.
"""

from __future__ import annotations

import pytest
import torch

from aoti_debug import config
from aoti_debug.codegen.launch import Launch, LaunchArg, base_name
from aoti_debug.codegen.manager import PENDING_LINE, Manager
from aoti_debug.runtime import cuda_graphs, hooks

from tests.test_reuse_links import _Code, _Root


# ---------------------------------------------------------------------------------------
# codegen: where the pending lines go
# ---------------------------------------------------------------------------------------
def _launch(kernel: str, reads: list[str], writes: list[str], inout: list[str] = ()) -> Launch:
    return Launch(kernel=kernel, op=kernel, kind="triton",
                  args=[LaunchArg(base_name(r), r, "input") for r in reads]
                  + [LaunchArg(w, w, "inout") for w in inout]
                  + [LaunchArg(w, w, "output") for w in writes])


def _wrapper(steps: list, level: str = "stats", kernels: str | None = None, sync: bool = False,
             cpp: bool = False, monkeypatch=None) -> list[str]:
    """The lines a wrapper gets from ``steps``: a launch ``(kernel, reads, writes[, inout])``
    or a line written between launches (str); then the call's end (``pending_tail``)."""
    m = Manager(config.make_compile_settings(level, kernels=kernels, sync=sync))
    code, root = _Code(), _Root()
    root._aoti_debug_header = root._aoti_debug_cpp_header = True  # (no header: nothing is imported)
    for step in steps:
        if isinstance(step, str):
            code.writeline(step)
        else:
            _emit_launch(m, root, code, step, cpp, open_inputs=True)
    m.pending_tail(code, cpp=cpp)
    return [str(line) for line in code._lines if isinstance(line, str)]


def _emit_launch(m: Manager, root, code, step: tuple, cpp: bool = False, open_inputs: bool = False) -> None:
    """One launch ``(kernel, reads, writes[, inout])`` into ``code`` as the wrapper's
    codegen writes it: the manager's lines before it, its run, the lines after it
    (``open_inputs``: the graph inputs' line first where the launch is instrumented)."""
    m.lines_written(code, "before", cpp)
    launch = _launch(*step)
    if open_inputs and m.matches(launch):
        m.open_inputs(root, code, cpp)
    launch = m.prepare(launch)
    for text in m.emit(root, launch, "before", cpp):
        code.writeline(text)
    code.writeline(f"{step[0]}.run()")
    for text in m.emit(root, launch, "after", cpp):
        code.writeline(text)
    m.lines_written(code, "after", cpp)


def _around(lines: list[str], kernel: str) -> list[str]:
    """The lines from the one before ``kernel``'s launch hook to its run."""
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{kernel}.run("))
    start = max(i for i in range(at) if not lines[i].startswith(("_aoti_debug.launch", PENDING_LINE))) + 1
    return lines[start: at + 1]


def test_an_in_place_launch_summarises_its_own_before_side_first():
    lines = _wrapper([("k0", ["arg0_1"], ["buf0"]), ("k1", [], [], ["buf0"])])
    assert PENDING_LINE in lines
    around = _around(lines, "k1")
    assert [line.split("(")[0] for line in around] == ["_aoti_debug.launch", PENDING_LINE.split("(")[0], "k1.run"]


def test_a_launch_writing_other_buffers_leaves_the_sides_deferred():
    lines = _wrapper([("k0", ["arg0_1"], ["buf0"]), ("k1", ["buf0"], ["buf1"]), ("k2", ["buf1"], ["buf2"])])
    assert lines.count(PENDING_LINE) == 1 and lines[-1] == PENDING_LINE  # at the call's end only


def test_a_launch_writing_a_reused_buffer_summarises_first():
    """``buf2 = buf0  # reuse``: buf2 is buf0's memory, which a side of k0 and k1 read."""
    lines = _wrapper([("k0", ["arg0_1"], ["buf0"]), ("k1", ["buf0"], ["buf1"]),
                      "buf2 = buf0; del buf0  # reuse", ("k2", ["buf1"], ["buf2"])])
    assert lines.count(PENDING_LINE) == 1, "a reuse line itself writes nothing"
    m_lines = _wrapper_with_alias()
    assert _around(m_lines, "k2")[-2] == PENDING_LINE


def _wrapper_with_alias() -> list[str]:
    # The reuse line's storage is followed by the manager (``alias``: Inductor's ReuseLine).
    m = Manager(config.make_compile_settings("stats"))
    code, root = _Code(), _Root()
    root._aoti_debug_header = root._aoti_debug_cpp_header = True
    for step in (("k0", ["arg0_1"], ["buf0"]), ("k1", ["buf0"], ["buf1"]), "reuse", ("k2", ["buf1"], ["buf2"])):
        if step == "reuse":
            code.writeline("buf2 = buf0; del buf0  # reuse")
            m.alias("buf2", "buf0", reuse=True)
            continue
        _emit_launch(m, root, code, step)
    return list(code._lines)


def test_a_line_naming_a_deferred_storage_is_preceded_where_the_last_launch_ended():
    lines = _wrapper([("k0", ["arg0_1"], ["buf0"]), "    buf0.copy_(arg2_1)", ("k1", ["arg2_1"], ["buf1"])])
    at = lines.index("    buf0.copy_(arg2_1)")
    assert lines[at - 1] == PENDING_LINE and lines[at - 2].startswith("_aoti_debug.done")
    # names only (a deletion, a comment, a layout check): nothing written, nothing summarised
    quiet = _wrapper([("k0", ["arg0_1"], ["buf0"]), "del buf0", "# buf0", "assert_size_stride(buf0, (4,), (1,))",
                      ("k1", ["arg2_1"], ["buf1"])])
    assert quiet.count(PENDING_LINE) == 1 and quiet[-1] == PENDING_LINE


def test_a_launch_in_a_buffer_no_launch_went_into_before_is_preceded_where_it_is():
    """Sides deferred in one code buffer, the next launch in another (whose first line may
    be its function's ``def``): the pending line goes right before that launch, never at
    the top of a buffer whose lines the manager has not followed."""
    m = Manager(config.make_compile_settings("stats"))
    root = _Root()
    root._aoti_debug_header = True
    first, other = _Code(), _Code()
    other.writeline("def call_other(args):")
    other.writeline("    buf0.copy_(arg2_1)")
    for code, step in ((first, ("k0", ["arg0_1"], ["buf0"])), (other, ("k1", ["arg2_1"], ["buf1"]))):
        _emit_launch(m, root, code, step)
    lines = [str(line) for line in other._lines]
    assert lines[0] == "def call_other(args):" and lines.count(PENDING_LINE) == 1
    assert lines.index(PENDING_LINE) == 2 and lines[3].startswith("_aoti_debug.launch"), lines


def test_the_lines_after_the_last_launch_are_read_too():
    lines = _wrapper([("k0", ["arg0_1"], ["buf0"]), "arg0_1.copy_(buf0)"])
    assert lines[lines.index("arg0_1.copy_(buf0)") - 1] == PENDING_LINE
    assert lines.count(PENDING_LINE) == 1


def test_nothing_stays_deferred_past_the_call():
    """Eager code after the call, or another graph in the same capture, may write what it
    returns: the call ends with a pending line."""
    lines = _wrapper([("k0", ["arg0_1"], ["buf0"]), "del arg0_1"])
    assert lines[-1] == PENDING_LINE and lines.count(PENDING_LINE) == 1
    lines = _wrapper([("k0", ["arg0_1"], ["buf0"]), ("k1", [], [], ["buf0"])])
    assert lines[-1] == PENDING_LINE  # (k1's after side read buf0 again)


def test_an_uninstrumented_launch_writing_a_deferred_storage_still_summarises_first():
    lines = _wrapper([("k0", ["arg0_1"], ["buf0"]), ("other", [], [], ["buf0"])], kernels="k0")
    assert _around(lines, "other")[-2] == PENDING_LINE


def test_no_pending_lines_where_nothing_defers():
    """Levels save and names, anything under sync, and level print in the Python wrapper
    (whose print opts out of CUDA graphs, where alone its sides wait)."""
    steps = [("k0", ["arg0_1"], ["buf0"]), ("k1", [], [], ["buf0"])]
    for kw, cpps in (({"level": "print"}, (False,)), ({"level": "save"}, (False, True)),
                     ({"level": "names"}, (False, True)), ({"sync": True}, (False, True)),
                     ({"level": "print", "sync": True}, (False, True))):
        for cpp in cpps:
            lines = _wrapper(steps, cpp=cpp, **kw)
            assert not any(PENDING_LINE in line or CPP_PENDING in line for line in lines), (kw, cpp)
            assert all(", 0};" in line for line in lines if "aoti_debug_site =" in line), lines  # Site::defers 0


# C++ wrappers (cpp_wrapper, AOTInductor): the same analysis, the runtime's pending() call
# (native/device_launch.h's PendingRun, which holds a new handle of each waiting tensor, so
# a freed buffer's memory goes to no other while its stats wait); the call's end is
# call_end(), which launches what still waits, so no pending call closes the call.
CPP_PENDING = "::aoti_debug_rt_1::pending();"


@pytest.mark.parametrize("level", ["stats", "print"])
def test_cpp_wrappers_call_pending_where_python_wrappers_have_their_line(level):
    """At level stats, and at print, whose lines in C++ wait for the device ring anyway."""
    lines = _wrapper([("k0", ["arg0_1"], ["buf0"]), ("k1", [], [], ["buf0"])], level=level, cpp=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("k1.run("))
    assert lines[at - 1] == CPP_PENDING and "::launch(aoti_debug_site" in lines[at - 2], lines
    assert lines.count(CPP_PENDING) == 1  # (the call's end is call_end's)
    sites = [line for line in lines if "aoti_debug_site =" in line]
    assert sites and all(", 1};" in line for line in sites), sites  # Site::defers 1
    chain = _wrapper([("k0", ["arg0_1"], ["buf0"]), ("k1", ["buf0"], ["buf1"]), ("k2", ["buf1"], ["buf2"])],
                     cpp=True)
    assert CPP_PENDING not in chain  # no launch writes what a side read: one stats launch a call


def test_a_cpp_line_writing_a_waiting_storage_is_preceded_by_pending_and_a_free_is_not():
    lines = _wrapper([("k0", ["arg0_1"], ["buf0"]), ("k1", ["buf0"], ["buf1"]), "buf0.reset();",
                      "buf1.zero_();", ("k2", ["buf1"], ["buf2"])], cpp=True)
    # (where the last launch's lines ended, as in a Python wrapper: before the lines after it)
    assert lines.count(CPP_PENDING) == 1 and lines.index("buf1.zero_();") - 2 == lines.index(CPP_PENDING), lines
    quiet = _wrapper([("k0", ["arg0_1"], ["buf0"]), ("k1", ["buf0"], ["buf1"]), "buf0.reset();",
                      ("k2", ["buf1"], ["buf2"])], cpp=True)
    assert CPP_PENDING not in quiet  # a free: the runtime holds what waits
    tail = _wrapper([("k0", ["arg0_1"], ["buf0"]), "aoti_torch_copy_(arg0_1, buf0, 0);"], cpp=True)
    assert tail[tail.index("aoti_torch_copy_(arg0_1, buf0, 0);") - 1] == CPP_PENDING  # after the last launch too


def test_a_compiled_python_wrapper_says_it_defers_and_runs(tmp_path, monkeypatch):
    """A real Inductor wrapper (CPU, where ``pending()`` does nothing): the header passes
    ``defers=True``, the in-place kernels' launches are preceded by a pending line, and
    the model's values are eager's."""
    import aoti_debug
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8), torch.nn.GELU()).eval()
    x = torch.randn(4, 16)
    torch._dynamo.reset()
    with torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=str(tmp_path)):
        out, codes = run_and_get_code(torch.compile(model), x)
    torch._dynamo.reset()
    code = codes[0]
    assert "defers=True" in code and "protocol=7" in code
    lines = [line.strip() for line in code.splitlines()]
    pendings = [i for i, line in enumerate(lines) if line.startswith("_aoti_debug.pending()")]
    assert pendings
    assert lines[pendings[-1] + 1].startswith("return ")  # nothing deferred past the call
    for i in pendings[:-1]:  # between an in-place kernel's before hook and its launch
        assert lines[i - 1].startswith("_aoti_debug.launch(") and lines[i + 1].startswith("cpp_fused_"), lines[i - 1:i + 2]
    with torch.no_grad():
        torch.testing.assert_close(out, model(x))


# ---------------------------------------------------------------------------------------
# runtime: what a capture does with deferred sides
# ---------------------------------------------------------------------------------------
class _Arena:
    def __init__(self):
        self.device = torch.device("cpu")
        self.buf = torch.zeros(9 * 64, dtype=torch.float64)
        self.rows_used = 0
        self.table_used = 0


class _Stream:
    """A stand-in CUDA stream: ``waits`` records the streams it was made to wait for."""

    current = None

    def __init__(self, name: str):
        self.name = name
        self.waits: list[str] = []

    def wait_stream(self, other: "_Stream") -> None:
        self.waits.append(other.name)


def _capture(monkeypatch, fail=lambda tensors: False):
    """A capture over a stand-in arena whose stats launches are recorded as
    ``(tensor ids, first row)``, with the stream they went on where not the capture's
    (``fail(tensors)``: that launch raises)."""
    import contextlib

    calls = []
    main = _Stream("main")
    _Stream.current = main
    on = [None]

    def summarize(tensors, *args, into=None, static=None, **kw):
        if fail(tensors):
            raise RuntimeError("the arena is full")
        calls.append(([id(t) for t in tensors], into[1]) + ((on[0].name,) if on[0] is not None else ()))

    @contextlib.contextmanager
    def on_stream(stream):
        on[0] = stream
        try:
            yield
        finally:
            on[0] = None

    monkeypatch.setattr(cuda_graphs.fused_stats, "summarize", summarize)
    monkeypatch.setattr(cuda_graphs, "_current_stream", lambda device: _Stream.current)
    monkeypatch.setattr(cuda_graphs, "_on_stream", on_stream)
    cap = cuda_graphs.Capture(_Arena())
    return cap, calls


def _side(cap, tensors, defer=True):
    first = cap.arena.rows_used
    cap.arena.rows_used += len(tensors)
    cap.summarize(tensors, first, defer)
    return first


def test_consecutive_sides_go_as_one_launch(monkeypatch):
    cap, calls = _capture(monkeypatch)
    a, b, c = torch.ones(4), torch.ones(8), torch.ones(2)
    _side(cap, [a, b])
    _side(cap, [c])
    assert calls == [] and len(cap.deferred) == 2  # held, so their memory stays theirs
    cap.summarize_pending()
    assert calls == [([id(a), id(b), id(c)], 0)] and cap.deferred == []
    cap.summarize_pending()
    assert len(calls) == 1


def test_a_side_not_deferred_launches_what_is_pending_first(monkeypatch):
    cap, calls = _capture(monkeypatch)
    a, b = torch.ones(4), torch.ones(4)
    _side(cap, [a])
    _side(cap, [b], defer=False)
    assert calls == [([id(a)], 0), ([id(b)], 1)] and not cap.deferred


def test_a_side_with_a_tensor_off_16_bytes_goes_alone(monkeypatch):
    """Its alignment would choose the merged launch's kernel variant, which the warm-up
    may not have compiled."""
    cap, calls = _capture(monkeypatch)
    a, storage = torch.ones(4), torch.ones(9)
    odd = storage[1:]
    assert odd.data_ptr() % 16
    _side(cap, [a])
    _side(cap, [odd])
    assert calls == [([id(a)], 0), ([id(odd)], 1)] and not cap.deferred


def test_rows_not_following_or_too_many_bytes_start_a_new_launch(monkeypatch):
    cap, calls = _capture(monkeypatch)
    a, b = torch.ones(4), torch.ones(4)
    _side(cap, [a])
    cap.arena.rows_used += 3  # (another graph's rows between)
    _side(cap, [b])
    assert calls == [([id(a)], 0)]
    cap.summarize_pending()
    assert calls[-1] == ([id(b)], 4)
    monkeypatch.setattr(cuda_graphs, "DEFER_BYTES", 40)
    c, d = torch.ones(8), torch.ones(8)  # 32 bytes each
    _side(cap, [c])
    _side(cap, [d])
    assert calls[-1] == ([id(c)], 5)


def test_a_run_stays_on_the_stream_of_its_sides(monkeypatch):
    """A graph on several streams (``torch.cuda.stream`` in the model): a side on another
    stream starts a new run; a run launched while another stream is current goes on its
    own, and the current stream waits for it before what follows."""
    cap, calls = _capture(monkeypatch)
    main, other = _Stream.current, _Stream("other")
    a, b, c = torch.ones(4), torch.ones(4), torch.ones(4)
    _side(cap, [a])
    _Stream.current = other
    _side(cap, [b])
    assert calls == [([id(a)], 0, "main")] and other.waits == ["main"]
    _side(cap, [c])
    _Stream.current = main
    cap.summarize_pending()
    assert calls[-1] == ([id(b), id(c)], 1, "other") and main.waits == ["other"]


def test_a_merged_launch_that_fails_goes_side_by_side(monkeypatch):
    a, b = torch.ones(4), torch.ones(4)
    cap, calls = _capture(monkeypatch, fail=lambda tensors: len(tensors) > 1)
    _side(cap, [a])
    _side(cap, [b])
    cap.summarize_pending()
    assert calls == [([id(a)], 0), ([id(b)], 1)] and cap.failure is None


def test_a_side_that_fails_alone_marks_every_record_of_the_graph(monkeypatch):
    """A consumer may have taken the failed side's row (``reused``): no row of the graph
    is trusted, and its replays make records with the error (no plan)."""
    a, b = torch.ones(4), torch.ones(4)
    cap, calls = _capture(monkeypatch, fail=lambda tensors: any(t is b for t in tensors))
    _side(cap, [a])
    _side(cap, [b])
    cap.summarize_pending()
    assert calls == [([id(a)], 0)] and "the arena is full" in cap.failure
    records = [{"arg": "x"}, {"arg": "y", "reused": 3}]
    cap.sides.append(cuda_graphs.Side(None, None, "g", "after", records, [0, 1], plan=object()))
    cap.finish()
    assert cap.sides[0].plan is None and cap.sides[0].rows == [None, None] and cap.replay is None
    assert all("the arena is full" in r["error"] for r in records) and "reused" not in records[1]


def test_the_handle_summarises_pending_sides_only_inside_a_capture(monkeypatch):
    handle = hooks.graph(None, "stats", False, protocol=hooks.PROTOCOL_VERSION, defers=True)
    assert handle.defers
    assert not hooks.graph(None, "stats", False, protocol=hooks.PROTOCOL_VERSION).defers
    handle.pending()  # no capture: nothing
    cap, calls = _capture(monkeypatch)
    _side(cap, [torch.ones(4)])
    monkeypatch.setattr(cuda_graphs._tls, "capture", cap, raising=False)
    handle.pending()
    assert len(calls) == 1 and not cap.deferred


@pytest.mark.parametrize("level", ["stats", "print"])
def test_a_compiled_cpp_wrapper_calls_pending_before_its_in_place_kernels(tmp_path, level):
    """A real ``cpp_wrapper`` compile at level stats or print (CPU, where no stats launch waits):
    its sites say they defer, an in-place kernel's launch is preceded by the runtime's
    pending call (after the launch's before hook), the call still ends with one
    ``call_end()``, and the model's values and records are eager's."""
    from tests.conftest import dump_dir_restored, only_run, records
    from tests.test_cpp_wrapper import compile_cpp

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8), torch.nn.GELU()).eval()
    x = torch.randn(4, 16)
    with dump_dir_restored(), torch.no_grad():
        _fn, out, code = compile_cpp(model, x, level=level, root=str(tmp_path))
        torch.testing.assert_close(out, model(x))
    torch._dynamo.reset()
    lines = [line.strip() for line in code.splitlines()]
    sites = [line for line in lines if "aoti_debug_site =" in line]
    assert sites and all(", 1}; ::aoti_debug_rt_1::" in line for line in sites), sites[:2]
    pendings = [i for i, line in enumerate(lines) if line == CPP_PENDING]
    assert pendings, "an in-place kernel (the ReLU into its addmm's buffer) writes what its before side read"
    for i in pendings:
        assert "::aoti_debug_rt_1::launch(aoti_debug_site" in lines[i - 1] and lines[i + 1].startswith("cpp_fused_"), \
            lines[i - 1:i + 2]
    assert code.count("::aoti_debug_rt_1::call_end();") == 1
    recs = records(only_run(str(tmp_path)))
    assert recs and all(r["stats"] and r["checksum"] for r in recs if r["kind"] == "tensor")
