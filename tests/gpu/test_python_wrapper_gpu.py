"""The Python-wrapper path on CUDA: Triton and user-defined Triton kernels, exact values,
CUDA graphs, device tensors of every odd kind. Run with tools/gpu/run_gpu_tests.py."""

from __future__ import annotations

import pytest
import torch

import aoti_debug
from aoti_debug.format.protocol import PROTOCOL_VERSION, Site, SiteArg
from aoti_debug.runtime import hooks, session
from aoti_debug.runtime.stats import tensor_stats
from examples.models import MLP
from tests.conftest import load_record, only_run, records
from tests.user_kernels import HAVE_TRITON, user_fn

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]



@pytest.fixture(scope="module")
def mlp_cuda(tmp_path_factory):
    torch.manual_seed(0)
    model = MLP(64, 128, 32).cuda().eval()
    x = torch.randn(16, 64, device="cuda")
    root = str(tmp_path_factory.mktemp("mlp_cuda"))
    torch._dynamo.reset()
    with torch.no_grad(), aoti_debug.enabled(level="save", dump_dir=root):
        out = torch.compile(model)(x)
    aoti_debug.flush()
    return model, x, out, only_run(root)


def test_triton_kernels_values_match_eager(mlp_cuda):
    model, x, out, run_dir = mlp_cuda
    recs = records(run_dir)
    assert any(r["kernel"].startswith("triton_") for r in recs), {r["kernel"] for r in recs}
    assert all(r["device"].startswith("cuda") for r in recs if r["kind"] == "tensor")
    with torch.no_grad():
        h_pre = torch.nn.functional.linear(x, model.fc1.weight, model.fc1.bias)
        expected = model(x)
    mm = [r for r in recs if r["op"].startswith("aten.") and r["phase"] == "after"]
    assert mm
    first = load_record(run_dir, mm[0])
    assert first.device.type == "cpu"
    # fc1 may be mm (+ fused bias in a Triton kernel) or addmm: compare what it is.
    cand = [h_pre.cpu(), (x @ model.fc1.weight.t()).cpu()]
    assert any(torch.allclose(first, c, atol=1e-4, rtol=1e-4) for c in cand)
    last = [r for r in recs if r["phase"] == "after"][-1]
    torch.testing.assert_close(load_record(run_dir, last), expected.cpu(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, expected)
    for r in (r for r in recs if r["kind"] == "tensor"):  # device stats agree with the saved values
        t = load_record(run_dir, r)
        stats, checksum = tensor_stats(t)
        assert r["checksum"] == checksum
        assert r["stats"]["nan"] == stats.nan


def test_triton_roles(mlp_cuda):
    *_, run_dir = mlp_cuda
    for r in records(run_dir):
        if r["kernel"].startswith("triton_") and r["role"] == "output":
            assert r["phase"] == "after"


@pytest.mark.skipif(not HAVE_TRITON, reason="needs triton")
def test_user_defined_triton_kernel(tmp_path):
    x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    torch._dynamo.reset()
    with aoti_debug.enabled(level="save", dump_dir=str(tmp_path)):
        out = torch.compile(user_fn)(x, y)
    aoti_debug.flush()
    run_dir = only_run(str(tmp_path))
    recs = [r for r in records(run_dir) if "_scaled_add" in r["kernel"]]
    assert recs, {r["kernel"] for r in records(run_dir)}
    before = [r for r in recs if r["phase"] == "before" and r["kind"] == "tensor"]
    after = [r for r in recs if r["phase"] == "after"]
    # x-derived and y hold data; the empty output is never read as data. torch 2.11 has no
    # UserDefinedTritonKernel.arg_accesses, so the output counts as in-place there and its
    # before record is flagged uninitialised (metadata only); 2.13 knows it is write-only.
    data = [r for r in before if not r.get("uninitialised")]
    assert len(data) == 2, before
    assert all("stats" not in r and "file" not in r for r in before if r.get("uninitialised"))
    assert len(after) == 1 and after[0]["role"] in ("output", "inout")
    torch.testing.assert_close(load_record(run_dir, after[0]), (2 * torch.sin(x) + y).cpu())
    torch.testing.assert_close(out, torch.relu(2 * torch.sin(x) + y))
    assert any(r["kind"] in ("scalar", "symint") and r["value"] == 1000 for r in recs)


def test_reduce_overhead_does_not_crash_capture(tmp_path, caplog):
    model = MLP(64, 128, 32).cuda().eval()
    x = torch.randn(16, 64, device="cuda")
    torch._dynamo.reset()
    with torch.no_grad(), aoti_debug.enabled(level="save", dump_dir=str(tmp_path)):
        fn = torch.compile(model, mode="reduce-overhead")
        for _ in range(3):
            out = fn(x)
    aoti_debug.flush()
    torch.testing.assert_close(out, model(x))
    recs = records(only_run(str(tmp_path)))
    assert len({r["kernel_call"] for r in recs}) == 3, "all three calls recorded (ran without CUDA graphs)"


@pytest.mark.parametrize("level", ["names", "stats", "print"])
def test_levels_on_cuda(tmp_path, level, capfd):
    model = MLP(64, 128, 32).cuda().eval()
    x = torch.randn(16, 64, device="cuda")
    torch._dynamo.reset()
    with torch.no_grad(), aoti_debug.enabled(level=level, dump_dir=str(tmp_path), sync=(level == "names")):
        out = torch.compile(model)(x)
    aoti_debug.flush()
    torch.testing.assert_close(out, model(x))
    err = capfd.readouterr().err
    if level == "names":
        assert "[aoti_debug] before launch=1 " in err and "kernel=triton_" in err
    else:
        recs = records(only_run(str(tmp_path)))
        assert recs and all(r["stats"] and r["checksum"] for r in recs if r["kind"] == "tensor")


def test_odd_device_tensors(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTI_DEBUG_DIR", str(tmp_path))
    session.reset()
    odd = {
        "empty": torch.empty(0, 4, device="cuda"),
        "noncontig": torch.randn(8, 6, device="cuda").t()[::2],
        "bf16": torch.randn(33, device="cuda").bfloat16(),
        "fp8": torch.randn(16, device="cuda").to(torch.float8_e4m3fn),
        "bool": torch.rand(10, device="cuda") > 0.5,
        "complex": torch.randn(4, dtype=torch.complex64, device="cuda"),
        "int32": torch.arange(7, device="cuda", dtype=torch.int32),
    }
    g = hooks.graph(None, "save", False, protocol=PROTOCOL_VERSION)
    names = list(odd)
    g.launch(Site("", "k", "k", tuple(SiteArg(n, "input", "tensor", n) for n in names)), [odd[n] for n in names])
    aoti_debug.flush()
    run_dir = only_run(str(tmp_path))
    recs = {r["arg"]: r for r in records(run_dir)}
    for n, t in odd.items():
        assert "error" not in recs[n], recs[n]
        loaded = load_record(run_dir, recs[n])
        ref = t.cpu()
        if t.dtype == torch.float8_e4m3fn:
            assert torch.equal(loaded.view(torch.uint8), ref.view(torch.uint8))
        else:
            assert torch.equal(loaded, ref)
        assert recs[n]["checksum"] == tensor_stats(ref)[1], n
    session.reset()
