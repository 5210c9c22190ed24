"""AOTInductor packages on CPU: built once per level here, run in a fresh process each.

``torch.export`` (batch dimension dynamic) -> ``aoti_compile_and_package`` under
``aoti_debug.enabled(level)`` -> ``aoti_load_package`` in a new interpreter that knows
nothing of aoti_debug: the instrumentation lives in the ``.so``, and ``AOTI_DEBUG_DIR``
is read when it runs. Dumps are checked against eager PyTorch and against the Python
wrapper's dump of the same model.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile

import pytest
import torch
from torch import nn

import aoti_debug
from aoti_debug.format.schema import GRAPH_RE, NAMES_RE
from tests.conftest import REPO, load_record, only_run, records, run_python


@torch.library.custom_op("aoti_debug_aoti_test::shift", mutates_args=())
def shift(x: torch.Tensor) -> torch.Tensor:
    """A custom op (AOTI runs it through its proxy executor); aborts on request."""
    if os.environ.get("AOTI_DEBUG_TEST_ABORT") == "1":
        os.abort()
    return x + 0.5


@shift.register_fake
def _(x):
    return torch.empty_like(x)


class AotiModel(nn.Module):
    """Extern addmm, fused C++ kernels, a C-shim fallback with two outputs (sort), a custom
    op, a constant buffer and the batch size as a symbolic int."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 4))

    def forward(self, x):
        h = shift(torch.relu(self.fc1(x)))
        s = torch.sort(h, dim=-1).values
        return (self.fc2(s) * self.scale + x.sum(dim=1, keepdim=True)) * x.shape[0]


def make_model() -> AotiModel:
    torch.manual_seed(0)
    return AotiModel().eval()


def inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(3, 8, generator=g), torch.randn(5, 8, generator=g)]


def eager(model, x):
    with torch.no_grad():
        h_pre = model.fc1(x)
        h = torch.relu(h_pre) + 0.5
        s = torch.sort(h, dim=-1).values
        return {"fc1": h_pre, "relu": torch.relu(h_pre), "shift": h, "sort": s, "out": model(x)}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("aoti")
    torch.save(inputs(), str(path / "inputs.pt"))
    return path


class Packages:
    """Builds each level's package on first use (one compile per level)."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.built: dict[str, str] = {}

    def get(self, level: str, **inductor_configs) -> str:
        key = level + ("-shim" if inductor_configs else "")
        if key not in self.built:
            model = make_model()
            x = inputs()[0]
            batch = torch.export.Dim("batch", min=2, max=64)
            ep = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
            with aoti_debug.enabled(level=level):
                self.built[key] = torch._inductor.aoti_compile_and_package(
                    ep, package_path=str(self.workdir / f"model-{key}.pt2"), inductor_configs=inductor_configs or None)
        return self.built[key]


@pytest.fixture(scope="module")
def packages(workdir):
    return Packages(workdir)


CHILD = """
import os, sys, ctypes
sys.path.insert(0, {repo!r})
import torch
if {preload!r}:
    # A shim-only .so expects its host to provide the aoti_torch_* symbols.
    ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"), mode=os.RTLD_GLOBAL)
import tests.test_aoti  # registers the custom op
runner = torch._inductor.aoti_load_package({pkg!r})
outs = [runner(x) for x in torch.load({inputs!r})]
torch.save(outs, {out!r})
print("ok", flush=True)
"""


def run_package(pkg: str, workdir, dump: str | None, env: dict | None = None, preload: bool = False):
    out = str(workdir / f"out-{os.path.basename(pkg)}-{os.getpid()}.pt")
    code = CHILD.format(repo=REPO, preload=preload, pkg=pkg, inputs=str(workdir / "inputs.pt"), out=out)
    full_env = {"AOTI_DEBUG_DIR": dump} if dump else {}
    full_env.update(env or {})
    proc = run_python(code, env=full_env, cwd=str(workdir))
    outs = torch.load(out) if proc.returncode == 0 and os.path.exists(out) else None
    return proc, outs



# --------------------------------------------------------------------------- save
@pytest.fixture(scope="module")
def save_run(packages, workdir):
    pkg = packages.get("save")
    dump = str(workdir / "dump-save")
    proc, outs = run_package(pkg, workdir, dump)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return pkg, outs, only_run(dump)


def test_save_values_match_eager_at_two_batch_sizes(save_run):
    _pkg, outs, run_dir = save_run
    model = make_model()
    recs = records(run_dir)
    assert {r["wrapper"] for r in recs} == {"cpp"} and {r["graph"] for r in recs} == {"graph0"}
    for call, x in enumerate(inputs()):
        ref = eager(model, x)
        torch.testing.assert_close(outs[call], ref["out"])
        fc1 = [r for r in recs if r["op"] == "aten.addmm" and r["phase"] == "after"][2 * call]
        torch.testing.assert_close(load_record(run_dir, fc1), ref["fc1"])
        shift_out = [r for r in recs if r["op"] == "aoti_debug_aoti_test.shift" and r["phase"] == "after"][call]
        torch.testing.assert_close(load_record(run_dir, shift_out), ref["shift"])
        sort_out = [r for r in recs if r["op"] == "aten.sort" and r["phase"] == "after" and r["kernel_call"] == call]
        assert sorted(r["dtype"] for r in sort_out) == ["float32", "int64"]
        torch.testing.assert_close(load_record(run_dir, next(r for r in sort_out if r["dtype"] == "float32")), ref["sort"])
        last = [r for r in recs if r["phase"] == "after" and r["kind"] == "tensor" and r["shape"] == [x.shape[0], 4]][-1]
        torch.testing.assert_close(load_record(run_dir, last), ref["out"])


def test_save_records_constants_inputs_and_symints(save_run):
    _pkg, _outs, run_dir = save_run
    model = make_model()
    recs = records(run_dir)
    first = [r for r in recs if r["op"] == "aten.addmm" and r["kernel_call"] == 0 and r["phase"] == "before"]
    values = [load_record(run_dir, r) for r in first]
    assert any(torch.equal(v, model.fc1.bias) for v in values)                # a constant
    assert any(torch.equal(v, model.fc1.weight.t()) for v in values)          # a constant, viewed
    assert any(torch.equal(v, inputs()[0]) for v in values)                   # the model input
    symints = [r for r in recs if r["kind"] == "symint"]
    assert symints and all(r["dtype"] == "int" for r in symints)
    assert {r["value"] for r in symints} >= {3, 5}
    for r in recs:
        if r["role"] == "output":
            assert r["phase"] == "after"
    with open(os.path.join(run_dir, "run.json")) as f:
        info = json.load(f)
    assert info["writer"] == "cpp" and info["level"] == "save" and info["graphs"]["graph0"]["wrapper"] == "cpp"
    assert info["graphs"]["graph0"]["file"].endswith((".cpp", ".so"))


def test_save_files_load_and_never_collide(save_run):
    _pkg, _outs, run_dir = save_run
    recs = records(run_dir)
    own = [r for r in recs if "file" in r and not r.get("shared")]
    assert len({r["file"] for r in own}) == len(own)
    for path in glob.glob(os.path.join(run_dir, "tensors", "*.pt")):
        with zipfile.ZipFile(path) as z:
            assert z.testzip() is None
        torch.load(path, weights_only=True)


def test_dump_dir_and_run_id_are_read_at_run_time(packages, workdir):
    pkg = packages.get("save")
    for name in ("first", "second"):
        dump = str(workdir / f"dump-{name}")
        proc, _ = run_package(pkg, workdir, dump, env={"AOTI_DEBUG_RUN_ID": f"run-{name}"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert os.path.isdir(os.path.join(dump, f"run-{name}", "tensors"))
        assert records(os.path.join(dump, f"run-{name}"))


def test_unwritable_dump_dir_never_aborts_the_model(packages, workdir):
    pkg = packages.get("save")
    blocker = workdir / "blocker"
    blocker.write_text("a file, not a directory")
    proc, outs = run_package(pkg, workdir, str(blocker / "dump"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count("[aoti_debug] warning: cannot create dump directory") == 1
    model = make_model()
    for x, out in zip(inputs(), outs):
        torch.testing.assert_close(out, eager(model, x)["out"])


# --------------------------------------------------------------------------- other levels
def test_stats_level_checksums_equal_save_level(packages, workdir, save_run):
    pkg = packages.get("stats")
    dump = str(workdir / "dump-stats")
    proc, _ = run_package(pkg, workdir, dump)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = only_run(dump)
    stats = records(run_dir)
    assert stats and all("file" not in r for r in stats)
    assert os.listdir(os.path.join(run_dir, "tensors")) == []
    saved = records(save_run[2])
    key = lambda r: (r["kernel"], r["kernel_call"], r["phase"], r["arg"])  # noqa: E731
    assert {key(r): r.get("checksum") for r in stats} == {key(r): r.get("checksum") for r in saved}


def test_print_level_prints_and_records(packages, workdir):
    pkg = packages.get("print")
    dump = str(workdir / "dump-print")
    proc, _ = run_package(pkg, workdir, dump)
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = records(only_run(dump))
    lines = [x for x in proc.stderr.splitlines() if x.startswith("[aoti_debug] before") or x.startswith("[aoti_debug] after")]
    assert len(lines) == len(recs)
    assert any(re.search(r" ks\d+ = 5$", x) for x in lines), lines  # the batch size, as a symint
    assert any("aoti_torch_cpu_addmm_out launch=1 " in x and " min=" in x for x in lines)


def test_names_level_lines_and_crash_keeps_last_line(packages, workdir):
    pkg = packages.get("names")
    dump = str(workdir / "dump-names")
    proc, _ = run_package(pkg, workdir, dump)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not os.path.exists(dump)  # names writes no dump
    err = proc.stderr.splitlines()
    graph = [GRAPH_RE.match(x) for x in err if GRAPH_RE.match(x)]
    assert len(graph) == 1 and graph[0]["graph"] == "graph0" and graph[0]["wrapper"] == "cpp"
    names = [NAMES_RE.match(x) for x in err if NAMES_RE.match(x)]
    assert names[0]["launch"] == "1" and names[0]["phase"] == "before"
    assert len([m for m in names if m["phase"] == "before"]) == len([m for m in names if m["phase"] == "after"])
    # The custom op aborts: the last line names it, before its launch (flushed in time).
    proc, _ = run_package(pkg, workdir, dump, env={"AOTI_DEBUG_TEST_ABORT": "1"})
    assert proc.returncode == -signal.SIGABRT
    last = [NAMES_RE.match(x) for x in proc.stderr.splitlines() if NAMES_RE.match(x)][-1]
    assert last["phase"] == "before" and "shift" in last["kernel"]


# --------------------------------------------------------------------------- run anywhere
ISOLATED = """
import os, sys
sys.modules["aoti_debug"] = None  # import aoti_debug raises: the package must not need it
sys.path = [p for p in sys.path if os.path.realpath(p or os.getcwd()) != os.path.realpath({repo!r})]
import torch

@torch.library.custom_op("aoti_debug_aoti_test::shift", mutates_args=())
def shift(x: torch.Tensor) -> torch.Tensor:
    return x + 0.5

@shift.register_fake
def _(x):
    return torch.empty_like(x)

runner = torch._inductor.aoti_load_package({pkg!r})
torch.save([runner(x) for x in torch.load({inputs!r})], {out!r})
print("isolated", sorted(m for m in sys.modules if m.startswith("aoti_debug") and sys.modules[m] is not None))
"""


def _wrapper_source(pkg: str) -> str:
    with zipfile.ZipFile(pkg) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".wrapper.cpp")]
        return z.read(name).decode()


@pytest.mark.parametrize("level", ["names", "print", "stats", "save"])
def test_package_runs_where_aoti_debug_is_not_importable(packages, workdir, tmp_path, level):
    """The package of each level links the runtime object built once (its wrapper has only
    the glue) and records in a fresh interpreter that cannot import aoti_debug, with an
    empty Inductor cache (so not even the object's build folder is there)."""
    from aoti_debug.codegen import cpp_runtime, native_object

    pkg = packages.get(level)
    source = _wrapper_source(pkg)
    assert cpp_runtime.linked_objects(source) == [native_object.object_spec(native_object.variant(level)).name]
    assert "entry_launch" not in source  # the runtime is linked, not compiled into the wrapper
    out, dump = str(tmp_path / "out.pt"), str(tmp_path / "dump")
    code = ISOLATED.format(repo=REPO, pkg=pkg, inputs=str(workdir / "inputs.pt"), out=out)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TORCHINDUCTOR_CACHE_DIR")}
    # No torch.backends autoload either: where aoti_debug is not installed, there is none.
    env.update(AOTI_DEBUG_DIR=dump, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "empty-cache"),
               TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "isolated []" in proc.stdout
    model = make_model()
    for x, got in zip(inputs(), torch.load(out)):
        torch.testing.assert_close(got, eager(model, x)["out"])
    if level == "names":
        assert not os.path.exists(dump)
        assert [m for m in map(NAMES_RE.match, proc.stderr.splitlines()) if m and m["phase"] == "after"]
        return
    recs = records(only_run(dump))
    assert {r["wrapper"] for r in recs} == {"cpp"}
    assert any(r["kernel"] == "aoti_torch_cpu_addmm_out" and r["phase"] == "after" for r in recs)
    assert any("file" in r for r in recs) == (level == "save")


# --------------------------------------------------------------------------- alignment
def test_python_wrapper_and_aoti_dumps_align(packages, workdir, tmp_path):
    """Same model, same input: the extern and fallback launches line up by op, call and
    position with bitwise-equal values; the model output too."""
    pkg = packages.get("stats")
    dump = str(workdir / "dump-align")
    proc, _ = run_package(pkg, workdir, dump)
    assert proc.returncode == 0, proc.stderr[-2000:]
    aoti = [r for r in records(only_run(dump)) if r["kernel_call"] == 0 or r["kind"] != "tensor"]
    model = make_model()
    torch._dynamo.reset()
    with torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=str(tmp_path)):
        torch.compile(model)(inputs()[0])
    aoti_debug.flush()
    py = records(only_run(str(tmp_path)))

    def externs(recs):
        return {(r["op"], r["kernel_call"], r["phase"], r["index"]): r["checksum"]
                for r in recs if r["kind"] == "tensor" and r["op"] != r["kernel"] and r["kernel_call"] == 0}

    assert externs(aoti) == externs(py)
    assert {r["op"] for r in aoti if r["op"] != r["kernel"]} == {"aten.addmm", "aten.sort", "aoti_debug_aoti_test.shift"}
    final = lambda recs: [r for r in recs if r["phase"] == "after" and r["kind"] == "tensor"][-1]["checksum"]  # noqa: E731
    assert final(py) == final([r for r in aoti if r["kernel_call"] == 0])


# --------------------------------------------------------------------------- shim-only, C++
@pytest.fixture(scope="module")
def shim_package(packages):
    return packages.get("save", **{"aot_inductor.link_libtorch": False})


@pytest.mark.slow
def test_shim_only_build(shim_package, workdir):
    """aot_inductor.link_libtorch=False: the .so needs nothing but the C shim (the host
    provides it: here libtorch_cpu loaded globally, as ExecuTorch provides its own)."""
    if shutil.which("nm") is None:
        pytest.skip("no C++ toolchain: nm is not on the PATH")
    pkg = shim_package
    extract = workdir / "shim"
    with zipfile.ZipFile(pkg) as z:
        z.extractall(extract)
    (so,) = glob.glob(str(extract / "**" / "*.so"), recursive=True)
    undefined = subprocess.run(["nm", "-D", "--undefined-only", "-C", so], capture_output=True, text=True).stdout
    cxx_torch = [x for x in undefined.splitlines() if re.search(r"\b(c10|at|torch|caffe2)::", x)]
    assert not cxx_torch, cxx_torch
    assert "aoti_torch_get_data_ptr" in undefined  # the runtime's reads go through the shim
    dump = str(workdir / "dump-shim")
    proc, outs = run_package(pkg, workdir, dump, preload=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = only_run(dump)
    model = make_model()
    for x, out in zip(inputs(), outs):
        torch.testing.assert_close(out, eager(model, x)["out"])
    last = [r for r in records(run_dir) if r["phase"] == "after" and r["kind"] == "tensor" and r["shape"] == [5, 4]][-1]
    torch.testing.assert_close(load_record(run_dir, last), eager(model, inputs()[1])["out"])


RUNNER = r"""
#include <cstdio>
#include <vector>
#include <ATen/ATen.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/library.h>

// The model's custom op, as a deployment registers it (AOTI calls it by name).
TORCH_LIBRARY(aoti_debug_aoti_test, m) {
  m.def("shift(Tensor x) -> Tensor", [](const at::Tensor& x) { return x + 0.5; });
}

int main(int argc, char** argv) {
  torch::inductor::AOTIModelPackageLoader loader(argv[1]);
  std::vector<at::Tensor> inputs = {at::arange(24, at::kFloat).reshape({3, 8}).div(10)};
  at::Tensor out = loader.run(inputs)[0].contiguous();
  for (int64_t i = 0; i < out.numel(); ++i) std::printf("%.9g\n", out.data_ptr<float>()[i]);
  return 0;
}
"""


@pytest.mark.slow
def test_raw_so_from_cpp(shim_package, workdir):
    """A C++ program (no Python) loads the package and runs it; the .so dumps on its own."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler: g++ or c++ is not on the PATH")
    torch_dir = os.path.dirname(torch.__file__)
    src = workdir / "runner.cpp"
    src.write_text(RUNNER)
    exe = str(workdir / "runner")
    build = subprocess.run(
        [cxx, "-std=c++17", "-O1", str(src), "-o", exe, f"-I{torch_dir}/include",
         f"-I{torch_dir}/include/torch/csrc/api/include", f"-L{torch_dir}/lib", "-ltorch", "-ltorch_cpu",
         "-lc10", f"-Wl,-rpath,{torch_dir}/lib", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"],
        capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    dump = str(workdir / "dump-raw")
    proc = subprocess.run([exe, shim_package], capture_output=True, text=True, env=dict(os.environ, AOTI_DEBUG_DIR=dump))
    assert proc.returncode == 0, proc.stderr[-3000:]
    x = torch.arange(24, dtype=torch.float32).reshape(3, 8) / 10
    expected = eager(make_model(), x)["out"]
    got = torch.tensor([float(v) for v in proc.stdout.split()]).reshape(expected.shape)
    torch.testing.assert_close(got, expected)
    run_dir = only_run(dump)
    with open(os.path.join(run_dir, "run.json")) as f:
        info = json.load(f)
    assert info["writer"] == "cpp" and info["argv"][0] == exe
    last = [r for r in records(run_dir) if r["phase"] == "after" and r["kind"] == "tensor" and r["shape"] == [3, 4]][-1]
    torch.testing.assert_close(load_record(run_dir, last), expected)
