"""The writer thread's cost per device-ring record: the dict path vs the runtime library.

One step of the 4-block transformer at level stats ships about 177 ring records; the
writer thread finishes them (stats and checksum from the segment's host copy) and
encodes them (``Session._encode``). This times that function on realistic records (one
segment per step, its rows read back once, constant texts cached as in steady state),
the dict path (``device_ring.fill`` + ``encode_record``) against the library's
(``ring_records``: one C call per batch, the GIL released during it). No GPU needed:
the rows are random host values in the fused kernel's layout.

    PYTHONPATH=. python benchmarks/ring_writer.py               # 177 records x 200 steps, 7 rounds
    PYTHONPATH=. python benchmarks/ring_writer.py --records 177 --steps 200 --rounds 7
"""

from __future__ import annotations

import argparse
import statistics
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


def _step(templates: list[dict], lines, step: int) -> list[session.Job]:
    n = len(templates)
    cap = 1024
    seg = types.SimpleNamespace(cap=cap, shipped_rows=n, release=lambda: None,
                                host=torch.empty(9 * cap, dtype=torch.float64))
    g = torch.Generator().manual_seed(step)
    rows = torch.randn(n, 8, generator=g, dtype=torch.float64)
    rows[:, 5:7] = 0
    seg.host[: 8 * n] = rows.flatten()
    seg.host[8 * cap: 8 * cap + n].view(torch.int64)[:] = torch.randint(-2 ** 62, 2 ** 62, (n,), generator=g)
    arrival = device_ring.Arrival(seg)
    arrival.ship(_Done())
    jobs = []
    for i, tpl in enumerate(templates):
        rec = tpl.copy()
        rec["seq"], rec["launch"], rec["kernel_call"] = step * n + i + 1, step * 60 + i // 3 + 1, step
        jobs.append(session.Job(rec, arrival, ring_records.RingFill(arrival, i, lines)))
    return jobs


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
    results: dict[str, list[float]] = {"dict path": [], "library": []}
    for name, w in [("dict path", None), ("library", lines)]:
        sess._encode(_step(templates, w, 0))  # constant texts cached, as in steady state
    same = sess._encode(_step(templates, None, 1)) == sess._encode(_step(templates, lines, 1))
    for _ in range(args.rounds):
        for name, w in [("dict path", None), ("library", lines)]:
            batches = [_step(templates, w, s) for s in range(args.steps)]
            t0 = time.perf_counter()
            for jobs in batches:
                sess._encode(jobs)
            results[name].append((time.perf_counter() - t0) / (args.steps * args.records) * 1e6)
    # the library's call alone (the part without the GIL)
    jobs = _step(templates, lines, 2)
    calls = []
    fn = lines._fn

    def timed(spec):
        t0 = time.perf_counter()
        rc = fn(spec)
        calls.append(time.perf_counter() - t0)
        return rc

    lines._fn = timed
    for _ in range(args.steps):
        lines.encode(jobs)
    lines._fn = fn
    print(f"{args.records} ring records per step, {args.steps} steps x {args.rounds} rounds; same bytes: {same}")
    print("| path | us/record (median) | min | ms per step (median) |")
    print("|---|---:|---:|---:|")
    for name, v in results.items():
        m = statistics.median(v)
        print(f"| {name} | {m:.2f} | {min(v):.2f} | {m * args.records / 1e3:.3f} |")
    c = statistics.median(calls) / args.records * 1e6
    print(f"| library: the C call alone (GIL released) | {c:.2f} | | {c * args.records / 1e3:.3f} |")


if __name__ == "__main__":
    main()
