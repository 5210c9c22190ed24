"""Level stats on CUDA at device speed: the device ring and CUDA graphs.

* The ring (stats written into device slots, read back in bulk) gives the same records
  as the per-side host-copy path, bit for bit.
* Under ``torch.compile(mode="reduce-overhead")`` level stats keeps the CUDA graph
  (captured with the stats kernels inside) and records every replay with that replay's
  own values: each call's records equal those of a compile without CUDA graphs given the
  same input.

Run with tools/gpu/run_gpu_tests.py.
"""

from __future__ import annotations

import collections

import pytest
import torch

import aoti_debug
from aoti_debug.codegen.manager import INPUTS_KERNEL
from aoti_debug.runtime import cuda_graphs, device_ring, hooks, session
from examples.models import MLP, ResNet18, Transformer
from tests.conftest import only_run, records

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

_EXACT = ("min", "max", "absmax", "nan", "inf", "mean", "std")


def _run(tmp_path, name, model, inputs, mode=None, level="stats", between=None):
    """Compile ``model`` once and call it on each input; ``between(i)`` runs before call i."""
    root = str(tmp_path / name)
    torch._dynamo.reset()
    session.reset()
    outs = []
    with torch.no_grad(), aoti_debug.enabled(level=level, dump_dir=root):
        fn = torch.compile(model, mode=mode)
        for i, x in enumerate(inputs):
            if between is not None:
                between(i)
            outs.append(fn(x).clone())
            aoti_debug.flush()
    torch.cuda.synchronize()
    return outs, only_run(root)


def _per_call(recs, calls):
    """The tensor records of each graph call: ``[{(kernel, occurrence, phase, arg): (checksum, stats)}]``.

    A kernel launched j times per call has kernel_call = call * j + occurrence. Volatile
    records (nondeterministic by contract: an attention kernel's RNG seed) are left out."""
    per_kernel = collections.Counter(r["kernel"] for r in recs if r["phase"] == "after")
    launches = collections.defaultdict(set)
    for r in recs:
        launches[r["kernel"]].add(r["kernel_call"])
    out = [dict() for _ in range(calls)]
    for r in recs:
        n = len(launches[r["kernel"]])
        assert n % calls == 0, (r["kernel"], n, calls, per_kernel)
        each = n // calls
        assert launches[r["kernel"]] == set(range(n)), r["kernel"]
        if r["kind"] == "tensor" and r.get("stats") is not None and not r.get("volatile"):
            c, occ = divmod(r["kernel_call"], each)
            out[c][(r["kernel"], occ, r["phase"], r["arg"])] = (r["checksum"], r["stats"])
    return out


def _same(a, b):
    assert a and a.keys() == b.keys(), sorted(set(a) ^ set(b))[:10]
    for k in a:
        ca, sa = a[k]
        cb, sb = b[k]
        assert ca == cb, (k, ca, cb)
        for f in _EXACT:
            assert sa.get(f) == sb.get(f) or (sa.get(f) != sa.get(f) and sb.get(f) != sb.get(f)), (k, f, sa, sb)


def test_ring_equals_host_copy_path(tmp_path, monkeypatch):
    """One compile (autotuning picks kernel configs once), calls 0-1 through the ring,
    calls 2-3 through the per-side host copies, on the same two inputs: bit for bit."""
    torch.manual_seed(0)
    model = Transformer(128, 4, 2).cuda().eval()
    a, b = (torch.randn(2, 32, 128, device="cuda") for _ in range(2))

    def between(i):
        monkeypatch.setattr(device_ring, "ENABLED", i < 2)

    _, run_dir = _run(tmp_path, "ring", model, [a, b, a, b], between=between)
    assert device_ring.pending() == 0
    recs = records(run_dir)
    calls = _per_call(recs, 4)
    assert len(calls[0]) > 20
    _same(calls[0], calls[2])
    _same(calls[1], calls[3])
    assert calls[0] != calls[1]
    seqs = [r["seq"] for r in recs]
    assert seqs == sorted(seqs), "manifest out of launch order"


def test_segments_grow_when_calls_run_back_to_back(tmp_path, monkeypatch):
    """One compile (autotuning picks kernel configs once): calls flushed one by one, then
    the same inputs back to back (one flush at the end). A segment that fills is followed
    by segments of twice its rows, up to ``MAX_SEGMENT_ROWS`` (a grown segment mostly
    empty ships in two copies); the calls back to back record what the flushed ones
    did, bit for bit."""
    monkeypatch.setattr(device_ring, "SEGMENT_ROWS", 64)
    monkeypatch.setattr(device_ring, "MAX_SEGMENT_ROWS", 256)
    monkeypatch.setattr(device_ring, "_rings", {})  # a ring of its own, from SEGMENT_ROWS
    torch.manual_seed(0)
    model = Transformer(128, 4, 2).cuda().eval()
    xs = [torch.randn(2, 32, 128, device="cuda") for _ in range(3)] * 2
    failures = len(session.FAILURES)
    root = str(tmp_path / "grow")
    torch._dynamo.reset()
    session.reset()
    with torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=root):
        fn = torch.compile(model)
        for x in xs:
            fn(x)
            aoti_debug.flush()
        for x in xs:
            fn(x)
        caps = sorted({seg.cap for ring in device_ring._rings.values() for seg in ring.segments})
        aoti_debug.flush()  # (a segment of 256 rows mostly empty: two copies)
    torch.cuda.synchronize()
    assert caps and caps[-1] == 256, caps
    assert session.FAILURES[failures:] == []
    calls = _per_call(records(only_run(root)), 2 * len(xs))
    for i in range(len(xs)):
        _same(calls[i], calls[len(xs) + i])
    assert calls[0] != calls[1]


def test_planned_sides_repeat_their_launches_bit_for_bit(tmp_path, monkeypatch):
    """From the third call a side's records come from its plan and its stats kernel's kept
    launches (``GraphHandle._planned_rows``): each call's own values, bit for bit as the
    per-side host copies give them for the same input."""
    from aoti_debug.runtime import fused_stats

    torch.manual_seed(0)
    model = Transformer(128, 4, 2).cuda().eval()
    a, b = (torch.randn(2, 32, 128, device="cuda") for _ in range(2))
    summarized = [0] * 7  # fused_stats.summarize calls per graph call
    summarize = fused_stats.summarize
    call = [0]

    def counted(*args, **kwargs):
        summarized[call[0]] += 1
        return summarize(*args, **kwargs)

    monkeypatch.setattr(fused_stats, "summarize", counted)
    # The kept launches go through the runtime library's launcher (fused_stats.bind_launcher).
    library_calls = [0] * 7
    monkeypatch.setattr(fused_stats, "_library_launch", None)
    bind = fused_stats.bind_launcher

    def counting_bind(library):
        bind(library)
        fn = fused_stats._library_launch
        if fn and not getattr(fn, "counted", False):
            def launch(*args):
                library_calls[call[0]] += 1
                return fn(*args)

            launch.counted = True
            fused_stats._library_launch = launch

    monkeypatch.setattr(fused_stats, "bind_launcher", counting_bind)
    # From the call after the library's first launches of a side, its C function checks
    # the side and launches in one call (fused_stats.bind_side_function, ring_side.h).
    side_calls = [0] * 7
    monkeypatch.setattr(fused_stats, "side_function", None)
    bind_side = fused_stats.bind_side_function

    # ... and, once both sides of a launch are planned, the library's express hooks do
    # (ring_express.h): the sides it took whole, per graph call.
    express_done = [0] * 7
    monkeypatch.setattr(fused_stats, "express_function", None)

    def counting_bind_side(library, config):
        bind_side(library, config)
        fn = fused_stats.side_function
        if fn and not isinstance(fn, _Counted):
            fused_stats.side_function = _Counted(fn, side_calls, call)
        express_fn = fused_stats.express_function
        if express_fn and not isinstance(express_fn, _Watched):

            def seen(rc, args):  # (the hooks of sides with a plan)
                if rc == fused_stats.EXPRESS_DONE and (args[0].after if args[2] else args[0].before) is not None:
                    express_done[call[0]] += 1

            fused_stats.express_function = _Watched(express_fn, seen)

    monkeypatch.setattr(fused_stats, "bind_side_function", counting_bind_side)
    tuples = collections.Counter()  # planned sides holding a tuple, per (graph call, with CPU tensors)
    ring_side = hooks.GraphHandle._ring_side

    def planned(self, sess, site, plan, values, launch, kernel_call):
        done = ring_side(self, sess, site, plan, values, launch, kernel_call)
        if done and plan.structure is not None:
            tuples[(call[0], bool(plan.host))] += 1
        return done

    monkeypatch.setattr(hooks.GraphHandle, "_ring_side", planned)
    # Once both sides of a launch are planned, its hooks go straight to the plans.
    express = [0] * 7
    express_side = hooks.GraphHandle._express_side

    def counted_express(self, *args):
        done = express_side(self, *args)
        express[call[0]] += done
        return done

    monkeypatch.setattr(hooks.GraphHandle, "_express_side", counted_express)

    def between(i):
        call[0] = i
        monkeypatch.setattr(device_ring, "ENABLED", i < 4)

    _, run_dir = _run(tmp_path, "planned", model, [a, b, a, b, a, b], between=between)
    recs = records(run_dir)
    calls = _per_call(recs, 6)
    # Call 0 plans, call 1 keeps the launches, calls 2-3 repeat them (sides with scalars or copies still summarize).
    assert summarized[0] > 20 and summarized[2] < summarized[0], summarized
    # (A side planned a call later, such as a tuple side, repeats its launches a call later too.)
    assert library_calls[0] == 0 and library_calls[2] > 10, library_calls
    # From call 2 the library's functions take the sides whose launches it kept: its side
    # function or its express hooks (the check from the call after the kept one).
    assert side_calls[3] + express_done[3] > 10, (side_calls, express_done, fused_stats.express_left())
    assert library_calls[3] + side_calls[3] + express_done[3] >= library_calls[2], (library_calls, side_calls)
    # The attention fallback's output, a tuple (its RNG seeds on the CPU: read by the
    # runtime library), is planned from call 1: one side per block.
    assert [tuples[(i, False)] + tuples[(i, True)] for i in range(6)] == [0, 2, 2, 2, 0, 0], tuples
    # From call 2 most sides go the express way; without the ring (calls 4-5) none does.
    express = [e + d for e, d in zip(express, express_done)]  # (the sides the hooks' Python or the library took)
    assert express[0] == express[1] == 0 and express[2] > 10 and express[3] > 20 and express[4:6] == [0, 0], express
    assert express_done[3] > 10, express_done  # (the library's express hooks, where it has them)
    _same(calls[2], calls[4])
    _same(calls[3], calls[5])
    _same(calls[0], calls[2])
    assert calls[2] != calls[3]


def _count_express(monkeypatch, done) -> None:
    """``done(x, after)`` for each hook the runtime library's express function
    (``ring_express.h``) takes whole, bound now or later in the test."""
    from aoti_debug.runtime import fused_stats

    def seen(rc, args):
        if rc == fused_stats.EXPRESS_DONE:
            done(args[0], bool(args[2]))

    def wrap(fn):
        return _Watched(fn, seen) if fn and not isinstance(fn, _Watched) else fn

    monkeypatch.setattr(fused_stats, "express_function", wrap(fused_stats.express_function))
    bind = fused_stats._bind_express_function

    def bind_and_wrap(library):
        bind(library)
        fused_stats.express_function = wrap(fused_stats.express_function)

    monkeypatch.setattr(fused_stats, "_bind_express_function", bind_and_wrap)


class _Counted:
    """A side function that counts its calls per graph call (``calls[call[0]]``)."""

    def __init__(self, fn, calls, call):
        self.fn, self.calls, self.call = fn, calls, call

    def __call__(self, *args):
        self.calls[self.call[0]] += 1
        return self.fn(*args)


class _Watched:
    """A library function whose every result ``seen(result, arguments)`` is shown."""

    def __init__(self, fn, seen):
        self.fn, self.seen = fn, seen

    def __call__(self, *args):
        rc = self.fn(*args)
        self.seen(rc, args)
        return rc


def _linked_model(name: str):
    torch.manual_seed(0)
    if name == "transformer":
        model = Transformer(128, 4, 2).cuda().eval()
        return model, [torch.randn(2, 32, 128, device="cuda") for _ in range(2)]
    model = ResNet18(10).cuda().eval().to(memory_format=torch.channels_last)
    return model, [torch.randn(2, 3, 64, 64, device="cuda").to(memory_format=torch.channels_last) for _ in range(2)]


@pytest.mark.parametrize("name", ["transformer", "resnet"])
def test_inputs_taken_from_their_producers_equal_reading_them(tmp_path, monkeypatch, name):
    """Calls 0-2 take each linked input's stats from its producer's ring row (planned from
    call 1), calls 3-5 read every input, on the same inputs, in one compile: the same
    records bit for bit, and each taken input is one tensor less for the stats kernels."""
    model, (a, b) = _linked_model(name)
    call = [0]
    rows = [0] * 6
    reserve = device_ring.Ring.reserve

    def counted(self, k):
        rows[call[0]] += k
        return reserve(self, k)

    monkeypatch.setattr(device_ring.Ring, "reserve", counted)

    def reserved_in_c(x, after):  # (the library's express hooks reserve their sides' rows themselves)
        plan = x.after if after else x.before
        if plan is not None and plan.device is not None:
            rows[call[0]] += plan.ring_count

    _count_express(monkeypatch, reserved_in_c)

    def between(i):
        call[0] = i
        monkeypatch.setattr(hooks, "REUSE", i < 3)

    _, run_dir = _run(tmp_path, f"linked-{name}", model, [a, b, a, a, b, a], between=between)
    recs = records(run_dir)
    calls = _per_call(recs, 6)
    per_kernel = collections.Counter(r["kernel"] for r in recs if r["phase"] == "after")
    taken = [0] * 6
    for r in recs:
        if r.get("reused") is not None:
            each = len({q["kernel_call"] for q in recs if q["kernel"] == r["kernel"]}) // 6
            taken[r["kernel_call"] // each] += 1
    assert taken[0] > 5 and taken[0] == taken[1] == taken[2] and taken[3:] == [0, 0, 0], (taken, per_kernel)
    assert [rows[i] + taken[i] for i in range(3)] == rows[3:], (rows, taken)
    _same(calls[0], calls[3])
    _same(calls[1], calls[4])
    _same(calls[2], calls[5])
    assert calls[0] != calls[1]


def _cpp_calls(root, model, inputs, **settings):
    """``model`` compiled once with ``cpp_wrapper=True`` under ``settings`` and called on
    each input; the run's records (all the C++ runtime's), in record order."""
    torch._dynamo.reset()
    with torch.no_grad(), aoti_debug.enabled(dump_dir=str(root), **settings), \
            torch._inductor.config.patch(cpp_wrapper=True):
        fn = torch.compile(model)
        for x in inputs:
            fn(x)
        torch.cuda.synchronize()
        aoti_debug.flush()
    recs = sorted(records(only_run(str(root))), key=lambda r: r["seq"])
    assert {r["wrapper"] for r in recs} == {"cpp"}, {r["wrapper"] for r in recs}
    return recs


@pytest.mark.parametrize("name,level", [("transformer", "stats"), ("resnet", "stats"), ("transformer", "print")])
def test_cpp_wrapper_inputs_taken_from_their_producers_equal_reading_them(tmp_path, name, level):
    """The C++ runtime (cpp_wrapper) gives each linked input the stats its producer's after
    record got in this call (a ring row: records.h) instead
    of reading it: bit for bit what a compile without links (``reuse=False``) reads, call
    by call, on the same inputs; and the links are there (more than five taken a call)."""
    model, (a, b) = _linked_model(name)
    per_run, taken = [], []
    for reuse in (True, False):
        recs = _cpp_calls(tmp_path / f"cpp-{name}-{level}-{reuse}", model, (a, b, a), level=level, reuse=reuse)
        assert any(r["kernel"] == INPUTS_KERNEL for r in recs) == reuse  # (weights read once a call: taken)
        per_run.append(_per_call([r for r in recs if r["kernel"] != INPUTS_KERNEL], 3))
        taken.append(sum(1 for r in recs if r.get("reused") is not None))
    assert taken[0] > 15 and taken[1] == 0, taken
    for with_links, reading in zip(*per_run):
        _same(with_links, reading)
    assert per_run[0][0] != per_run[0][1]


def test_cpp_wrapper_print_lines_wait_for_the_ring(tmp_path, capfd):
    """At level print the C++ runtime queues each CUDA side's records and print lines for
    the device ring, as at level stats (no stream synchronisation a side), and writes the
    lines when the values are there: stderr holds one line per tensor record with stats,
    in record order, each what ``format.schema.print_line`` makes of the manifest's record,
    and the records are bit for bit those of a compile under AOTI_DEBUG_SYNC, whose sides
    are each waited for."""
    from aoti_debug.format.schema import print_line

    model, (a, b) = _linked_model("transformer")
    per_run = []
    for sync in (False, True):
        capfd.readouterr()
        recs = _cpp_calls(tmp_path / f"cpp-print-{sync}", model, (a, b, a), level="print", sync=sync)
        printed = [line for line in capfd.readouterr().err.splitlines()
                   if line.startswith("[aoti_debug] ") and " launch=" in line and " min=" in line]
        want = [print_line(r) for r in recs if r["kind"] == "tensor" and r.get("stats")]
        assert len(want) > 50 and printed == want, (sync, len(printed), len(want),
                                                    next(((p, w) for p, w in zip(printed, want) if p != w), None))
        per_run.append(_per_call([r for r in recs if r["kernel"] != INPUTS_KERNEL], 3))
    for deferred, waited in zip(*per_run):
        _same(deferred, waited)


@pytest.mark.parametrize("name,level", [("transformer", "stats"), ("resnet", "stats"), ("resnet", "print")])
def test_cpp_wrapper_sides_that_wait_go_as_fewer_launches_with_the_same_records(tmp_path, name, level):
    """At levels stats and print a cpp_wrapper model's sides wait for the wrapper's next
    pending() call (codegen's pending lines: before what writes a tensor a side read) or
    the call's end, and go as one stats launch per kind and layout (device_launch.h's PendingRun):
    bit for bit the records of a compile under AOTI_DEBUG_SYNC (a launch a side, each
    waited for), call by call, in fewer stats launches (counted by the profiler in the
    third call)."""
    from torch.profiler import ProfilerActivity, profile

    model, (a, b) = _linked_model(name)
    per_run, launches = [], []
    for sync in (False, True):
        root = tmp_path / f"cpp-wait-{name}-{level}-{sync}"
        torch._dynamo.reset()
        with torch.no_grad(), aoti_debug.enabled(dump_dir=str(root), level=level, sync=sync), \
                torch._inductor.config.patch(cpp_wrapper=True):
            fn = torch.compile(model)
            fn(a)
            fn(b)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn(a)
                torch.cuda.synchronize()
            aoti_debug.flush()
        launches.append(sum(1 for e in prof.events() if e.name.startswith("_stats_kernel")))
        recs = sorted(records(only_run(str(root))), key=lambda r: r["seq"])
        per_run.append(_per_call([r for r in recs if r["kernel"] != INPUTS_KERNEL], 3))
    for waited, each in zip(*per_run):
        _same(waited, each)
    assert 0 < launches[0] < launches[1], launches


@pytest.mark.parametrize("name,level", [("transformer", "stats"), ("resnet", "stats"), ("resnet", "print")])
def test_graph_inputs_read_once_a_call_equal_reading_them_where_used(tmp_path, monkeypatch, name, level):
    """The Python wrapper reads the graph's inputs and weights once a call, before its
    first launch (``graph_inputs``: codegen's ``Inputs``), and the launches that read them
    take those records: bit for bit what a compile without links (``reuse=False``) reads
    at each launch, call by call, on the same inputs; with fewer values summarised (rows)."""
    model, (a, b) = _linked_model(name)
    rows = [0]
    reserve = device_ring.Ring.reserve

    def counted(self, k):
        rows[0] += k
        return reserve(self, k)

    monkeypatch.setattr(device_ring.Ring, "reserve", counted)
    per_run, taken, summarised = [], [], []
    for reuse in (True, False):
        root = str(tmp_path / f"inputs-{name}-{level}-{reuse}")
        torch._dynamo.reset()
        session.reset()
        with torch.no_grad(), aoti_debug.enabled(level=level, dump_dir=root, reuse=reuse):
            fn = torch.compile(model)
            fn(a)
            torch.cuda.synchronize()
            aoti_debug.flush()
            rows[0] = 0
            for x in (a, b, a):
                fn(x)
            torch.cuda.synchronize()
            aoti_debug.flush()
        summarised.append(rows[0])
        recs = records(only_run(root))
        sites = {r["site"] for r in recs if r["kernel"] == INPUTS_KERNEL}
        taken.append(sum(1 for r in recs if r.get("reused") is not None and r["reused"] in sites))
        per_run.append(_per_call([r for r in recs if r["kernel"] != INPUTS_KERNEL], 4))
        if reuse:
            inputs = [r for r in recs if r["kernel"] == INPUTS_KERNEL]
            assert inputs and {r["phase"] for r in inputs} == {"after"}, inputs[:2]
    assert taken[0] > 15 and taken[1] == 0, taken
    assert summarised[0] < summarised[1], summarised
    for with_inputs, reading in zip(*per_run):
        _same(with_inputs, reading)
    assert per_run[0][1] != per_run[0][2]


def test_express_launches_follow_a_new_session(tmp_path, monkeypatch):
    """A launch whose sides are planned goes straight to its plans (``_express_launch``)
    in the session it was planned in; in the next session (a new run) its plans serve
    again from that session's first call, and each run holds every call's records."""
    torch.manual_seed(0)
    model = MLP(64, 128, 32).cuda().eval()
    x = torch.randn(16, 64, device="cuda")
    express = [0]
    express_side = hooks.GraphHandle._express_side

    def counted(self, *args):
        done = express_side(self, *args)
        express[0] += done
        return done

    monkeypatch.setattr(hooks.GraphHandle, "_express_side", counted)
    _count_express(monkeypatch, lambda x, after: express.__setitem__(0, express[0] + after))
    torch._dynamo.reset()
    session.reset()
    counts = []
    with torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=str(tmp_path / "runs")):
        fn = torch.compile(model)
        for _ in range(2):
            express[0] = 0
            for _ in range(4):
                fn(x)
            aoti_debug.flush()
            counts.append(express[0])
            run_dir = session.dump_path()
            session.reset()
            recs = records(run_dir)
            per_call = _per_call(recs, 4)
            _same(per_call[0], per_call[3])
    assert counts[0] > 0 and counts[1] >= counts[0], counts


def test_ring_print_lines_in_launch_order(tmp_path, capfd):
    torch.manual_seed(0)
    model = MLP(64, 128, 32).cuda().eval()
    x = torch.randn(16, 64, device="cuda")
    _run(tmp_path, "print", model, [x, x], level="print")
    err = capfd.readouterr().err
    launches = [int(line.split("launch=")[1].split()[0]) for line in err.splitlines()
                if line.startswith("[aoti_debug] ") and " launch=" in line and "min=" in line]
    assert launches and launches == sorted(launches), launches


def test_print_level_prints_every_record_of_planned_sides(tmp_path, capfd, monkeypatch):
    """At level print the sides are planned from the second call and their print lines
    come from the runtime library (``ring_records.h``): stderr holds one line per record,
    in record order, each what ``format.schema.print_line`` makes of the manifest's record."""
    from aoti_debug.format.schema import print_line
    from aoti_debug.runtime import ring_records

    printed = [0]
    encode = ring_records.RingLines.encode

    def counted(self, jobs):
        found = encode(self, jobs)
        if found is not None:
            printed[0] += found[1].count(b"\n")
        return found

    monkeypatch.setattr(ring_records.RingLines, "encode", counted)
    torch.manual_seed(0)
    model = Transformer(128, 4, 2).cuda().eval()
    xs = [torch.randn(2, 32, 128, device="cuda") for _ in range(5)]
    _, run_dir = _run(tmp_path, "print-planned", model, xs, level="print")
    err = [line for line in capfd.readouterr().err.splitlines() if line.startswith("[aoti_debug] ")
           and " launch=" in line]
    recs = sorted(records(run_dir), key=lambda r: r["seq"])
    assert err == [print_line(r) for r in recs]
    assert printed[0] > len(recs) // 2, (printed[0], len(recs))  # calls 2-4 from the library


def test_reduce_overhead_keeps_cuda_graph_and_records_every_replay(tmp_path):
    """Call 0 is CUDA-graph trees' warm-up (no graph: the device ring), call 1 captures and
    replays, calls 2-5 replay. The same input gives the same records bit for bit whether
    the launch ran eagerly or in a replay, and each replay carries its own input's values."""
    torch.manual_seed(0)
    model = Transformer(128, 4, 2).cuda().eval()
    a, b, c = (torch.randn(2, 32, 128, device="cuda") for _ in range(3))
    xs = [a, a, b, a, c, b]
    torch._dynamo.utils.counters.clear()
    outs, graph_dir = _run(tmp_path, "graphs", model, xs, mode="reduce-overhead")
    skips = dict(torch._dynamo.utils.counters["inductor"])
    assert not any(k.startswith("cudagraph_skips") and v for k, v in skips.items()), skips
    assert cuda_graphs.installed()
    assert any(arena.rows_used for arena in cuda_graphs._arenas.values()), "nothing was captured"
    calls = _per_call(records(graph_dir), len(xs))
    assert len(calls[0]) > 20
    _same(calls[0], calls[1])   # eager warm-up vs the first replay
    _same(calls[0], calls[3])
    _same(calls[2], calls[5])
    assert calls[0] != calls[2] and calls[2] != calls[4] and calls[0] != calls[4]
    with torch.no_grad():
        for x, out in zip(xs, outs):
            torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)


def _gpt2_logits():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=512, n_positions=64, attn_implementation="sdpa")
    gpt2 = GPT2LMHeadModel(cfg).cuda().eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gpt2 = gpt2

        def forward(self, ids):
            return self.gpt2(input_ids=ids).logits

    return Logits(), [torch.randint(0, 512, (2, 48), device="cuda") for _ in range(4)]


@pytest.mark.parametrize("name", ["resnet", "gpt2"])
def test_reduce_overhead_deferred_sides_equal_one_launch_a_side(tmp_path, monkeypatch, name):
    """Inside CUDA graphs the sides' stats launches wait for a pending line (before a
    launch or line that may write what they read: ``Manager._pending``) and go as one:
    less than half the launches of one a side (``cuda_graphs.DEFER = False``), the same
    records, and a replay's records bit for bit those of the eager warm-up given the same
    input: nothing wrote a tensor before its deferred stats read it. ResNet-18 writes its
    activations in place and reuses their buffers; GPT-2 (transformers) reuses buffers
    across attention and MLP."""
    torch.manual_seed(0)
    if name == "resnet":
        model, xs = _linked_model("resnet")
        xs = xs + [torch.randn_like(xs[0]) for _ in range(2)]
    else:
        model, xs = _gpt2_logits()
    xs = [xs[0], *xs]  # call 0: warm-up; call 1 captures and replays the same input
    launches = []
    summarize = cuda_graphs.fused_stats.summarize

    def counted(tensors, *args, static=None, **kw):
        if static is not None:
            launches[-1] += 1
        return summarize(tensors, *args, static=static, **kw)

    monkeypatch.setattr(cuda_graphs.fused_stats, "summarize", counted)
    runs, outs = [], []
    for defer in (False, True):
        monkeypatch.setattr(cuda_graphs, "DEFER", defer)
        launches.append(0)
        out, run_dir = _run(tmp_path, f"defer{int(defer)}", model, xs, mode="reduce-overhead")
        runs.append(_per_call(records(run_dir), len(xs)))
        outs.append(out)
    with torch.no_grad():  # (cuDNN's and Inductor's convolutions differ by ~1e-3 on ResNet)
        for x, a, b in zip(xs, *outs):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(b, model(x), atol=5e-3, rtol=5e-3)
    assert launches[1] < launches[0] / 2, launches  # the capture's summarize calls
    for calls in runs:  # (two compiles may autotune a reduction differently: each against itself)
        assert len(calls[0]) > 20 and all(c.keys() == calls[0].keys() for c in calls)
        _same(calls[0], calls[1])  # the eager warm-up and the first replay, of the same input
        assert calls[2] != calls[3]
    assert runs[0][0].keys() == runs[1][0].keys()


def test_reduce_overhead_nan_found_inside_graph(tmp_path):
    """A NaN in the input of replay 4 shows in that replay's records, not in others."""
    torch.manual_seed(0)
    model = MLP(64, 128, 32).cuda().eval()
    xs = [torch.randn(16, 64, device="cuda") for _ in range(6)]
    xs[4][3, 5] = float("nan")
    _, run_dir = _run(tmp_path, "nan", model, xs, mode="reduce-overhead")
    recs = records(run_dir)
    assert any(a.rows_used for a in cuda_graphs._arenas.values())
    with_nan = {r["kernel_call"] for r in recs if r["kind"] == "tensor" and (r.get("stats") or {}).get("nan")}
    assert with_nan == {4}, with_nan


def test_save_level_still_opts_out(tmp_path):
    model = MLP(64, 128, 32).cuda().eval()
    x = torch.randn(16, 64, device="cuda")
    torch._dynamo.utils.counters.clear()
    _run(tmp_path, "save", model, [x, x, x], mode="reduce-overhead", level="save")
    skips = {k: v for k, v in torch._dynamo.utils.counters["inductor"].items() if k.startswith("cudagraph_skips")}
    assert skips and sum(skips.values()) >= 1, dict(torch._dynamo.utils.counters["inductor"])


def _fresh_compiles(monkeypatch):
    """Background compiles on, with nothing compiled: aoti_debug's variant state and each
    stats kernel's in-memory Triton caches emptied (Triton's disk cache may still serve)."""
    from collections import defaultdict

    from aoti_debug.runtime import fused_stats, fused_stats_kernels

    monkeypatch.setattr(fused_stats, "COMPILE_BACKGROUND", True)
    for name, value in [("_compiling", {}), ("_compiled", {}), ("_sides", {}), ("_broken", set()),
                        ("_compile_pool", None)]:
        monkeypatch.setattr(fused_stats, name, value)
    for name in ("_stats_kernel", "_stats_kernel_dense", "_stats_kernel_perm"):
        kernel = getattr(fused_stats_kernels, name)
        monkeypatch.setattr(kernel, "device_caches", defaultdict(kernel.create_binder))
    summaries = []
    summary = fused_stats.device_summary
    monkeypatch.setattr(fused_stats, "device_summary", lambda t: (summaries.append(1), summary(t))[1])
    return fused_stats, summaries


def _close(a, b):
    """Two calls' records of one input: the same checksums and exact fields; mean and std
    within rounding (the torch-op path sums in another order than the kernel)."""
    assert a and a.keys() == b.keys(), sorted(set(a) ^ set(b))[:10]
    for k in a:
        (ca, sa), (cb, sb) = a[k], b[k]
        assert ca == cb, (k, ca, cb)
        for f in ("min", "max", "absmax", "nan", "inf"):
            assert sa.get(f) == sb.get(f) or (sa.get(f) != sa.get(f) and sb.get(f) != sb.get(f)), (k, f, sa, sb)
        for f in ("mean", "std"):
            x, y = sa.get(f), sb.get(f)
            if x is not None and x == x:
                assert abs(x - y) <= 1e-9 * max(1.0, abs(x), sa.get("absmax") or 0), (k, f, x, y)


def test_background_compiles_record_what_the_kernels_record(tmp_path, monkeypatch):
    """AOTI_DEBUG_STATS_COMPILE=background: the first call's sides take the torch-op path
    while their variants compile (no warning, nothing broken), later calls the kernels;
    the same input gives the same checksums and exact fields either way."""
    fused_stats, summaries = _fresh_compiles(monkeypatch)
    torch.manual_seed(0)
    model = Transformer(128, 4, 2).cuda().eval()
    a, b = (torch.randn(2, 32, 128, device="cuda") for _ in range(2))
    failures, counts = len(session.FAILURES), []

    def between(i):
        counts.append(len(summaries))
        if i == 1:
            fused_stats.wait_for_compiles()
            assert all(f.exception() is None for f in fused_stats._compiling.values())

    outs, run_dir = _run(tmp_path, "background", model, [a, b, a, b], between=between)
    counts.append(len(summaries))
    assert counts[1] > 20, counts  # call 0: torch ops while compiling
    assert counts[-1] == counts[2], counts  # calls 2-3: the kernels only
    assert fused_stats._compiling and not fused_stats._broken and session.FAILURES[failures:] == []
    calls = _per_call(records(run_dir), 4)
    _close(calls[0], calls[2])
    _same(calls[1], calls[3])
    with torch.no_grad():
        for x, out in zip([a, b, a, b], outs):
            torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)


def test_background_compiles_keep_the_cuda_graph(tmp_path, monkeypatch):
    """Under reduce-overhead with background compiles: the warm-up may take torch ops, the
    capture waits for its variants; the graph is kept and every replay recorded."""
    _fresh_compiles(monkeypatch)
    torch.manual_seed(0)
    model = Transformer(128, 4, 2).cuda().eval()
    a, b = (torch.randn(2, 32, 128, device="cuda") for _ in range(2))
    xs = [a, a, b, a]
    torch._dynamo.utils.counters.clear()
    outs, run_dir = _run(tmp_path, "background_graphs", model, xs, mode="reduce-overhead")
    skips = dict(torch._dynamo.utils.counters["inductor"])
    assert not any(k.startswith("cudagraph_skips") and v for k, v in skips.items()), skips
    assert any(arena.rows_used for arena in cuda_graphs._arenas.values()), "nothing was captured"
    calls = _per_call(records(run_dir), len(xs))
    _close(calls[0], calls[1])
    _same(calls[1], calls[3])
    assert calls[1] != calls[2]
    with torch.no_grad():
        for x, out in zip(xs, outs):
            torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["transformer", "resnet"])
def test_variants_compiled_ahead_cover_the_first_call(tmp_path, monkeypatch, name):
    """``inline`` (the default) with nothing compiled: the variants the wrapper's layouts
    predict compile on the pool while Inductor finishes (``fused_stats.precompile``), so
    no stats kernel compiles on the model's thread, no side takes torch ops, and the first
    call's records equal a later call's of the same input bitwise."""
    import threading

    from triton import knobs

    fused_stats, summaries = _fresh_compiles(monkeypatch)
    monkeypatch.setattr(fused_stats, "COMPILE_BACKGROUND", False)
    compiles = []

    def seen(*, key, fn, **_):
        if fn.module.startswith("aoti_debug"):
            compiles.append((threading.current_thread().name, fn.name, str(key)[:160]))
        return None

    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", seen)
    model, (a, b) = _linked_model(name)
    outs, run_dir = _run(tmp_path, f"ahead_{name}", model, [a, b, a])
    on_model_thread = [c for c in compiles if not c[0].startswith("aoti_debug_compile")]
    assert compiles and not on_model_thread, on_model_thread  # (mispredicted variants: their keys)
    assert not summaries and not fused_stats._broken
    calls = _per_call(records(run_dir), 3)
    _same(calls[0], calls[2])
    with torch.no_grad():
        for x, out in zip([a, b, a], outs):
            torch.testing.assert_close(out, model(x), atol=5e-3, rtol=5e-3)
