"""The C++ wrapper on CUDA (``cpp_wrapper=True``) and AOTInductor on CUDA: Triton and
user-defined Triton kernels at every level, device errors named under AOTI_DEBUG_SYNC.
Run with tools/gpu/run_gpu_tests.py."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch._inductor.utils import run_and_get_cpp_code

import aoti_debug
from aoti_debug.format.schema import ERROR_RE, NAMES_RE
from aoti_debug.runtime.stats import tensor_stats
from examples.models import MLP
from tests.conftest import dump_dir_restored, REPO, load_record, only_run, records
from tests.user_kernels import HAVE_TRITON, user_fn

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

def compile_cpp(fn, *args, level="save", root=None, sync=False):
    """cpp_wrapper=True compile + one call; the C++ runtime reads AOTI_DEBUG_DIR."""
    if root is not None:
        os.environ["AOTI_DEBUG_DIR"] = root
    torch._dynamo.reset()
    with aoti_debug.enabled(level=level, sync=sync), torch._inductor.config.patch(cpp_wrapper=True):
        out, code = run_and_get_cpp_code(torch.compile(fn), *args)
    torch.cuda.synchronize()
    return out, code


@pytest.fixture(autouse=True)
def _restore_dump_dir():
    with dump_dir_restored():
        yield


@pytest.fixture(scope="module")
def mlp_cuda(tmp_path_factory):
    torch.manual_seed(0)
    model = MLP(64, 128, 32).cuda().eval()
    x = torch.randn(16, 64, device="cuda")
    root = str(tmp_path_factory.mktemp("cpp_mlp_cuda"))
    with dump_dir_restored(), torch.no_grad():
        out, code = compile_cpp(model, x, root=root)
    return model, x, out, code, only_run(root)


def test_triton_kernels_in_cpp_wrapper_match_eager(mlp_cuda):
    model, x, out, code, run_dir = mlp_cuda
    recs = records(run_dir)
    assert "#define AOTI_DEBUG_CUDA 1" in code
    assert any(r["kernel"].startswith("triton_") for r in recs), {r["kernel"] for r in recs}
    assert {r["wrapper"] for r in recs} == {"cpp"}
    assert all(r["device"] == "cuda:0" for r in recs if r["kind"] == "tensor")
    with torch.no_grad():
        expected = model(x)
    last = [r for r in recs if r["phase"] == "after" and r["kind"] == "tensor"][-1]
    torch.testing.assert_close(load_record(run_dir, last), expected.cpu(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, expected)
    for r in (r for r in recs if r["kind"] == "tensor"):
        t = load_record(run_dir, r)
        assert t.device.type == "cpu"
        assert r["checksum"] == tensor_stats(t)[1]
        if r["role"] == "output":
            assert r["phase"] == "after"


def test_cpp_and_python_wrappers_align_on_cuda(mlp_cuda, tmp_path):
    model, x, _out, _code, run_dir = mlp_cuda
    torch._dynamo.reset()
    with torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=str(tmp_path)):
        torch.compile(model)(x)
    aoti_debug.flush()
    py = records(only_run(str(tmp_path)))
    cc = records(run_dir)

    def key(r):
        return (r["kernel"] if r["kernel"] == r["op"] else r["op"], r["kernel_call"], r["phase"], r["arg"])

    py_keys = {key(r): r for r in py}
    cc_keys = {key(r): r for r in cc}
    assert set(py_keys) == set(cc_keys), set(py_keys) ^ set(cc_keys)
    # Values agree to float tolerance, not bitwise: cuBLAS may pick another algorithm per
    # process, and a Triton reduction another config (the Python wrapper autotunes when
    # it runs, the C++ wrapper when it compiles). The CPU test asserts bitwise equality.
    for k, r in cc_keys.items():
        p = py_keys[k]
        assert r["kind"] == p["kind"] and r.get("value") == p.get("value"), k
        if r["kind"] == "tensor":
            assert (r["dtype"], r["shape"]) == (p["dtype"], p["shape"]), k
            for stat in ("min", "max", "mean", "absmax"):
                a, b = r["stats"][stat], p["stats"][stat]
                assert (a is None) == (b is None), (k, stat)
                assert a is None or math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5), (k, stat, a, b)


@pytest.mark.skipif(not HAVE_TRITON, reason="needs triton")
def test_user_defined_triton_kernel_in_cpp_wrapper(tmp_path):
    x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    out, _code = compile_cpp(user_fn, x, y, root=str(tmp_path))
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


@pytest.mark.parametrize("level", ["names", "print", "stats"])
def test_levels_on_cuda(tmp_path, level, capfd):
    model = MLP(64, 128, 32).cuda().eval()
    x = torch.randn(16, 64, device="cuda")
    with torch.no_grad():
        out, _code = compile_cpp(model, x, level=level, root=str(tmp_path), sync=(level == "names"))
    torch.testing.assert_close(out, model(x))
    if level != "names":
        # At level stats and print the CUDA sides' records and lines wait for their ring
        # segment: the last call's reach the manifest and stderr at the next call, at flush()
        # or at exit (docs/cpp-runtime.md).
        aoti_debug.flush()
    err = capfd.readouterr().err
    if level == "names":
        names = [NAMES_RE.match(x) for x in err.splitlines() if NAMES_RE.match(x)]
        assert names and any(m["kernel"].startswith("triton_") for m in names)
        assert not os.listdir(str(tmp_path))
    else:
        recs = records(only_run(str(tmp_path)))
        assert recs and all(r["stats"] and r["checksum"] for r in recs if r["kind"] == "tensor")
        if level == "print":
            assert len([x for x in err.splitlines() if " cuda:0 min=" in x]) == len(
                [r for r in recs if r["kind"] == "tensor"])


@pytest.mark.parametrize("dynamic", [True])
def test_dynamic_shapes_on_cuda(tmp_path, dynamic):
    def f(x):
        return torch.relu(x) * x.shape[0] + 1

    os.environ["AOTI_DEBUG_DIR"] = str(tmp_path)
    torch._dynamo.reset()
    with aoti_debug.enabled(level="save"), torch._inductor.config.patch(cpp_wrapper=True):
        fn = torch.compile(f, dynamic=dynamic)
        fn(torch.randn(5, 3, device="cuda"))
        x = torch.randn(7, 3, device="cuda")
        out = fn(x)
    torch.testing.assert_close(out, f(x))
    recs = records(only_run(str(tmp_path)))
    assert {r["value"] for r in recs if r["kind"] in ("symint", "scalar")} & {7, 21}


# The store's distance comes from a tensor: the C++ wrapper runs every kernel once at
# compile time on made-up inputs (integer ones are zeros), where a constant would fault.
_IMA_SCRIPT = """
import os, sys
sys.path.insert(0, {repo!r})
import torch, triton, triton.language as tl
import aoti_debug

@triton.jit
def far_store(out_ptr, shift_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs + tl.load(shift_ptr), offs.to(tl.float32), mask=offs < n)

def f(x, shift):
    y = torch.sin(x)
    out = torch.empty_like(y)
    far_store[(1,)](out, shift, out.numel(), BLOCK=128)
    return torch.cos(out) + y

aoti_debug.enable("names", sync=True)
with torch._inductor.config.patch(cpp_wrapper=True):
    torch.compile(f)(torch.randn(64, device="cuda"), torch.tensor([1 << 40], device="cuda"))
torch.cuda.synchronize()
"""


@pytest.mark.skipif(not HAVE_TRITON, reason="needs triton")
def test_sync_names_the_kernel_behind_an_illegal_access(tmp_path):
    script = tmp_path / "ima.py"
    script.write_text(_IMA_SCRIPT.format(repo=REPO))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode != 0
    errors = [ERROR_RE.match(x) for x in proc.stderr.splitlines() if ERROR_RE.match(x)]
    assert errors, proc.stderr[-3000:]
    assert "far_store" in errors[0]["kernel"]
    last_before = [NAMES_RE.match(x) for x in proc.stderr.splitlines() if NAMES_RE.match(x)][-1]
    assert "far_store" in last_before["kernel"]


_AOTI_SCRIPT = """
import faulthandler, os, sys
faulthandler.enable()
sys.path.insert(0, {repo!r})
import torch
runner = torch._inductor.aoti_load_package({pkg!r})
x = torch.load({x!r}).cuda()
torch.save(runner(x).cpu(), {out!r})
"""


def test_aoti_package_on_cuda(tmp_path):
    torch.manual_seed(0)
    model = MLP(64, 128, 32).cuda().eval()
    x = torch.randn(16, 64, device="cuda")
    batch = torch.export.Dim("batch", min=2, max=256)
    ep = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
    with aoti_debug.enabled(level="save"):
        pkg = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "m.pt2"))
    torch.save(x.cpu(), str(tmp_path / "x.pt"))
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(_AOTI_SCRIPT.format(repo=REPO, pkg=pkg, x=str(tmp_path / "x.pt"),
                                                          out=str(tmp_path / "out.pt"))))
    dump = str(tmp_path / "dump")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, AOTI_DEBUG_DIR=dump))
    assert proc.returncode == 0, proc.stderr[-3000:]
    with torch.no_grad():
        expected = model(x).cpu()
    torch.testing.assert_close(torch.load(str(tmp_path / "out.pt")), expected, atol=1e-5, rtol=1e-5)
    run_dir = only_run(dump)
    recs = records(run_dir)
    assert any(r["kernel"].startswith("triton_") for r in recs)
    assert {r["graph"] for r in recs} == {"graph0"}
    last = [r for r in recs if r["phase"] == "after" and r["kind"] == "tensor"][-1]
    torch.testing.assert_close(load_record(run_dir, last), expected, atol=1e-5, rtol=1e-5)
