"""The writer thread's cost per device-ring record: the dict path vs the runtime library.

One step of the 4-block transformer at level stats ships about 177 ring records; the
writer thread finishes them (stats and checksum from the segment's host copy) and
encodes them (``Session._encode``). This times that function on realistic records (one
segment per step, its rows read back once, constant texts cached as in steady state),
the dict path (``device_ring.fill`` + ``encode_record``) against the library's
(``ring_records``: one C call per batch, the GIL released during it), and the same
records as planned launch sides of three records each: one job a side
(``ring_records.RingSide``), and the sides of a step appended to one job as the model's
thread appends them (``ring_records.SideRun``: what a running model's planned sides
are, no Python per side in the writer). It also times what the model's thread spends
queueing a planned side either way (``RingSide`` + ``Job`` + ``Session.submit_side``
against ``Session.submit_planned``), on a session with no writer thread. No GPU needed:
the rows are random host values in the fused kernel's layout.

    PYTHONPATH=. python benchmarks/ring_writer.py               # 177 records x 200 steps, 7 rounds
    PYTHONPATH=. python benchmarks/ring_writer.py --records 177 --steps 200 --rounds 7
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import types

import torch

from aoti_debug import config
from aoti_debug.codegen import native_library
from aoti_debug.format.protocol import record
from aoti_debug.runtime import device_ring, native_stats, ring_records, session


class _Done:
    def synchronize(self):
        pass


def _templates(n: int) -> list[dict]:
    """Records as hooks makes them for a transformer's sides (before a segment's fill)."""
    kernels = ["triton_per_fused_add_native_layer_norm_0", "extern_kernels.mm", "triton_poi_fused_gelu_1",
               "triton_per_fused__softmax_2", "extern_kernels.bmm", "triton_poi_fused_add_3"]
    shapes = [([8, 128, 512], [65536, 512, 1]), ([1024, 512], [512, 1]), ([512, 2048], [1, 512]),
              ([8, 8, 128, 128], [131072, 16384, 128, 1]), ([512], [1])]
    out = []
    for i in range(n):
        shape, stride = shapes[i % len(shapes)]
        numel = 1
        for d in shape:
            numel *= d
        rec = record(seq=0, launch=0, graph="graph0", wrapper="python", kernel=kernels[i % len(kernels)], op="k",
                     kernel_call=0, phase="before" if i % 3 else "after", arg=f"buf{i}", role="input",
                     index=i % 4, expr=None, volatile=None, site=i // 3)
        rec.update(kind="tensor", dtype="float32" if i % 4 else "bfloat16", shape=list(shape), stride=list(stride),
                   device="cuda:0", numel=numel)
        out.append(rec)
    return out


def _step(templates: list[dict], lines, step: int, rows_of: int | None = None):
    """One step's records waiting for one segment (``rows_of``: the segment's arrival alone,
    with that many rows)."""
    n = len(templates) if rows_of is None else rows_of
    cap = 1024
    seg = types.SimpleNamespace(cap=cap, shipped_rows=n, release=lambda: None,
                                host=torch.empty(9 * cap, dtype=torch.float64))
    g = torch.Generator().manual_seed(step)
    rows = torch.randn(n, 8, generator=g, dtype=torch.float64)
    rows[:, 5:7] = 0
    seg.host[: 8 * n] = rows.flatten()
    seg.host[8 * cap: 8 * cap + n].view(torch.int64)[:] = torch.randint(-2 ** 62, 2 ** 62, (n,), generator=g)
    arrival = device_ring.Arrival(seg)
    arrival.ship(_Done(), seg.host)
    if rows_of is not None:
        return arrival
    jobs = []
    for i, tpl in enumerate(templates):
        rec = tpl.copy()
        rec["seq"], rec["launch"], rec["kernel_call"] = step * n + i + 1, step * 60 + i // 3 + 1, step
        jobs.append(session.Job(rec, arrival, ring_records.RingFill(arrival, i, lines)))
    return jobs


def _plans(templates: list[dict], lines, per_side: int = 3) -> list[ring_records.SidePlan]:
    """Planned sides of ``per_side`` records each, made from ``templates``'s records."""
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    plans = []
    for first in range(0, len(templates), per_side):
        recs = templates[first:first + per_side]
        values = [torch.empty_strided(r["shape"], r["stride"], dtype=dtypes[r["dtype"]]) for r in recs]
        plans.append(ring_records.SidePlan(object(), recs, values, [True] * len(recs), lines))
    return plans


def _planned_step(plans: list[ring_records.SidePlan], n: int, step: int) -> list[session.Job]:
    """One step of planned sides: their rows in one segment, as :func:`_step`'s."""
    arrival = _step([], None, step, n)
    jobs, row = [], 0
    for k, plan in enumerate(plans):
        side = ring_records.RingSide(plan, step * n + row + 1, step * 60 + k + 1, step, arrival, row)
        jobs.append(session.Job(None, arrival, side))
        row += len(plan.records)
    return jobs


def _run_step(plans: list[ring_records.SidePlan], lines, n: int, step: int) -> list[session.Job]:
    """:func:`_planned_step`'s sides appended to one run, one job."""
    arrival = _step([], None, step, n)
    run, row = lines.run(arrival), 0
    for k, plan in enumerate(plans):
        run.add(plan, step * n + row + 1, step * 60 + k + 1, step, row)
        row += len(plan.records)
    return [session.Job(None, arrival, run)]


def _queue_sides(sess: session.Session, plans: list[ring_records.SidePlan], arrival, step: int) -> None:
    """One step's planned sides queued one job each, as ``GraphHandle._ring_side`` queues
    a side with host records."""
    row = 0
    for k, plan in enumerate(plans):
        seq = sess.next_seq(len(plan.records))
        sess.submit_side(session.Job(None, arrival, ring_records.RingSide(plan, seq, k + 1, step, arrival, row)))
        row += len(plan.records)


def _append_sides(sess: session.Session, plans: list[ring_records.SidePlan], arrival, step: int) -> None:
    """One step's planned sides appended to a run (their records' numbers taken there), as
    ``GraphHandle._ring_side`` queues most."""
    row = 0
    for k, plan in enumerate(plans):
        sess.submit_planned(arrival, plan.lines, plan, k + 1, step, row)
        row += len(plan.records)


def _queueing(plans: list[ring_records.SidePlan], n: int, steps: int, rounds: int) -> dict[str, list[float]]:
    """Microseconds the model's thread spends per planned side queueing it, one job a side
    or appended to a run, per round (median of the steps' means)."""
    sess = session.Session(config.RunSettings())
    sess._thread = threading.current_thread()  # no writer: the queue is timed alone, emptied after each step
    arrival = _step([], None, 0, n)
    ways = {"RingSide + Job + submit_side": _queue_sides, "submit_planned (appended to a run)": _append_sides}
    out: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, queue in ways.items():
            times = []
            for step in range(steps):
                t0 = time.perf_counter()
                queue(sess, plans, arrival, step)
                times.append((time.perf_counter() - t0) / len(plans) * 1e6)
                sess._queue.clear()
                sess._open_run = None
            out[name].append(statistics.median(times))
    return out


def _call_alone(lines, jobs: list[session.Job], steps: int) -> float:
    """Seconds of the library's call for ``jobs`` (the part without the GIL), median of ``steps``."""
    calls = []
    fn = lines._fn

    def timed(spec):
        t0 = time.perf_counter()
        rc = fn(spec)
        calls.append(time.perf_counter() - t0)
        return rc

    lines._fn = timed
    try:
        for _ in range(steps):
            lines.encode(jobs)
    finally:
        lines._fn = fn
    return statistics.median(calls)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=177, help="ring records per step")
    p.add_argument("--steps", type=int, default=200, help="steps timed per round")
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    lib = native_stats.load(native_library.stats_library_path())
    lines = ring_records.for_library(lib)
    assert lines is not None, "no runtime library"
    sess = session.Session(config.RunSettings())
    templates = _templates(args.records)
    plans = {None: _plans(templates, None), lines: _plans(templates, lines)}
    for plan in plans[lines]:
        lines.template(plan)  # (made at a plan's first planned call, in the model's thread)
    paths = [("dict path", None, False), ("library", lines, False), ("planned sides, dict path", None, True),
             ("planned sides, library", lines, True), ("planned sides in a run, library", lines, "run")]

    def step(w, planned: bool | str, s: int) -> list[session.Job]:
        if planned == "run":
            return _run_step(plans[w], w, len(templates), s)
        return _planned_step(plans[w], len(templates), s) if planned else _step(templates, w, s)

    results: dict[str, list[float]] = {name: [] for name, _w, _p in paths}
    for name, w, planned in paths:
        sess._encode(step(w, planned, 0))  # constant texts cached, as in steady state
    same = len({sess._encode(step(w, planned, 1)) for _name, w, planned in paths}) == 1
    for _ in range(args.rounds):
        for name, w, planned in paths:
            batches = [step(w, planned, s) for s in range(args.steps)]
            t0 = time.perf_counter()
            for jobs in batches:
                sess._encode(jobs)
            results[name].append((time.perf_counter() - t0) / (args.steps * args.records) * 1e6)
    alone = {"records": _call_alone(lines, _step(templates, lines, 2), args.steps) / args.records * 1e6,
             "a run": _call_alone(lines, _run_step(plans[lines], lines, len(templates), 2), args.steps)
             / args.records * 1e6}
    queueing = _queueing(plans[lines], len(templates), args.steps, args.rounds)
    sides = len(plans[lines])
    print(f"{args.records} ring records ({sides} sides) per step, {args.steps} steps x {args.rounds} rounds; "
          f"same bytes: {same}")
    print("| writer path | us/record (median) | min | us/side (median) | ms per step (median) |")
    print("|---|---:|---:|---:|---:|")
    for name, v in results.items():
        m = statistics.median(v)
        print(f"| {name} | {m:.2f} | {min(v):.2f} | {m * args.records / sides:.2f} | {m * args.records / 1e3:.3f} |")
    for name, c in alone.items():
        print(f"| library: the C call alone (GIL released), {name} | {c:.2f} | | {c * args.records / sides:.2f} | "
              f"{c * args.records / 1e3:.3f} |")
    print()
    print("| model's thread, queueing a planned side | us/side (median) | min |")
    print("|---|---:|---:|")
    for name, v in queueing.items():
        print(f"| {name} | {statistics.median(v):.2f} | {min(v):.2f} |")


if __name__ == "__main__":
    main()
