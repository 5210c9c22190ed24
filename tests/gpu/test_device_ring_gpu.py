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
from aoti_debug.runtime import cuda_graphs, device_ring, session
from examples.models import MLP, Transformer
from tests.conftest import only_run, records

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

_EXACT = ("min", "max", "absmax", "nan", "inf", "mean", "std")


def _run(tmp_path, name, model, inputs, mode=None, level="stats"):
    root = str(tmp_path / name)
    torch._dynamo.reset()
    session.reset()
    with torch.no_grad(), aoti_debug.enabled(level=level, dump_dir=root):
        fn = torch.compile(model, mode=mode)
        outs = [fn(x).clone() for x in inputs]
    aoti_debug.flush()
    torch.cuda.synchronize()
    return outs, only_run(root)


def _by_call(recs):
    """{(kernel, kernel_call, phase, arg): (checksum, stats)} of the tensor records."""
    out = {}
    for r in recs:
        if r["kind"] == "tensor" and r.get("stats") is not None:
            out[(r["kernel"], r["kernel_call"], r["phase"], r["arg"])] = (r["checksum"], r["stats"])
    return out


def _same(a, b):
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))[:10]
    for k in a:
        ca, sa = a[k]
        cb, sb = b[k]
        assert ca == cb, (k, ca, cb)
        for f in _EXACT:
            assert sa.get(f) == sb.get(f) or (sa.get(f) != sa.get(f) and sb.get(f) != sb.get(f)), (k, f, sa, sb)


def test_ring_equals_host_copy_path(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = Transformer(128, 4, 2).cuda().eval()
    xs = [torch.randn(2, 32, 128, device="cuda") for _ in range(3)]
    _, ring_dir = _run(tmp_path, "ring", model, xs)
    ring = records(ring_dir)
    assert device_ring.pending() == 0
    monkeypatch.setattr(device_ring, "ENABLED", False)
    _, copy_dir = _run(tmp_path, "copy", model, xs)
    copy = records(copy_dir)
    assert len(ring) == len(copy) and len(ring) > 50
    _same(_by_call(ring), _by_call(copy))
    # launch order kept in the manifest
    seqs = [r["seq"] for r in ring]
    assert seqs == sorted(seqs)


def test_ring_print_lines_in_launch_order(tmp_path, capfd):
    torch.manual_seed(0)
    model = MLP(64, 128, 32).cuda().eval()
    x = torch.randn(16, 64, device="cuda")
    _run(tmp_path, "print", model, [x, x], level="print")
    err = capfd.readouterr().err
    launches = [int(line.split("launch=")[1].split()[0]) for line in err.splitlines()
                if line.startswith("[aoti_debug] ") and " launch=" in line and "min=" in line]
    assert launches and launches == sorted(launches), launches


def test_reduce_overhead_keeps_cuda_graph_and_records_every_replay(tmp_path):
    torch.manual_seed(0)
    model = Transformer(128, 4, 2).cuda().eval()
    xs = [torch.randn(2, 32, 128, device="cuda") for _ in range(6)]
    torch._dynamo.utils.counters.clear()
    outs, graph_dir = _run(tmp_path, "graphs", model, xs, mode="reduce-overhead")
    skips = dict(torch._dynamo.utils.counters["inductor"])
    assert not any(k.startswith("cudagraph_skips") and v for k, v in skips.items()), skips
    assert cuda_graphs.installed()
    # At least one graph was captured with our stats kernels inside and replayed.
    assert any(a.rows_used for a in cuda_graphs._arenas.values()), "nothing was captured"
    recs = records(graph_dir)
    calls = collections.defaultdict(set)
    for r in recs:
        calls[r["kernel"]].add(r["kernel_call"])
    assert calls and all(c == set(range(len(xs))) for c in calls.values()), calls
    _, plain_dir = _run(tmp_path, "plain", model, xs)
    _same(_by_call(recs), _by_call(records(plain_dir)))
    with torch.no_grad():
        for x, out in zip(xs, outs):
            torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)


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
