"""``aoti-debug doctor``: versions, the C++ compiler (and its libstdc++), the patch table,
and exit 2 when aoti_debug cannot work here."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from aoti_debug.cli import main
from aoti_debug.codegen import doctor, toolchain
from tests.conftest import REPO


def _fake_compiler(tmp_path, libstdcxx: str, name: str = "fakecxx") -> str:
    """A compiler script that answers --version and -print-file-name like GCC does."""
    path = tmp_path / name
    path.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        '  --version) echo "fakecxx (GCC) 99.1.0";;\n'
        f'  -print-file-name=*) echo "{libstdcxx}";;\n'
        "  *) exit 1;;\n"
        "esac\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def test_doctor_table_names_versions_compiler_and_hooks():
    res = CliRunner().invoke(main, ["doctor"])
    assert res.exit_code == 0, res.output
    out = res.output
    assert f"torch         {torch.__version__}" in out
    assert "C++ compiler" in out and "libstdc++   shared: /" in out
    assert "codegen.wrapper.PythonWrapperCodegen" in out and "generate_kernel_call" in out
    assert "generate_extern_kernel_multi_out" in out and "UserDefinedTritonKernel" in out
    assert "OK: every required Inductor hook is present" in out


def test_doctor_json_parses():
    res = CliRunner().invoke(main, ["doctor", "--format", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["ok"] is True and data["exit_code"] == 0 and data["problems"] == []
    assert data["versions"]["torch"] == torch.__version__ and data["versions"]["torch"].startswith("2.13")
    assert data["compiler"]["version"] and data["compiler"]["static_libstdcxx"] is False
    entries = data["patches"]["entries"]
    assert {e["status"] for e in entries} <= {"ready", "inherited"}
    kernel_call = [e for e in entries if e["attr"] == "generate_kernel_call"]
    assert kernel_call[0]["owner"] == "torch._inductor.codegen.wrapper:PythonWrapperCodegen"
    assert kernel_call[0]["required"] is True and "Triton" in kernel_call[0]["reason"]


def test_static_libstdcxx_compiler_is_reported_with_the_fix(tmp_path, monkeypatch):
    fake = _fake_compiler(tmp_path, "libstdc++.so")  # a bare name: only libstdc++.a exists
    (tmp_path / "bin").mkdir()
    good = _fake_compiler(tmp_path / "bin", "/lib/libstdc++.so", name="g++")  # found on PATH, shared
    monkeypatch.setenv("PATH", os.path.dirname(good) + os.pathsep + os.environ.get("PATH", ""))
    assert toolchain.links_libstdcxx_statically(fake)
    assert not toolchain.links_libstdcxx_statically(good)
    res = CliRunner().invoke(main, ["doctor", "--cxx", fake, "--format", "json"])
    assert res.exit_code == 0, res.output  # a warning: torch.compile still works
    data = json.loads(res.output)
    assert data["compiler"]["static_libstdcxx"] is True and data["compiler"]["libstdcxx"] == "libstdc++.so"
    assert data["compiler"]["suggestion"] == good
    assert f"set CXX={good}" in data["compiler"]["fix"] and "crash on load" in data["compiler"]["fix"]
    table = CliRunner().invoke(main, ["doctor", "--cxx", fake]).output
    assert "STATIC (no libstdc++.so)" in table and f"WARNING: {fake} finds no libstdc++.so" in table
    assert f"set CXX={good}" in table


def test_cxx_is_honoured_as_inductor_does(tmp_path):
    """In a fresh process, CXX picks the compiler (Inductor reads it into config.cpp.cxx)."""
    fake = _fake_compiler(tmp_path, "libstdc++.so")
    r = subprocess.run([sys.executable, "-m", "aoti_debug.cli", "doctor", "--format", "json"],
                       env=dict(os.environ, CXX=fake, PYTHONPATH=REPO), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)["compiler"]
    assert c["name"] == fake and c["origin"] == "CXX" and c["static_libstdcxx"] is True


def test_no_compiler_exits_2(tmp_path):
    res = CliRunner().invoke(main, ["doctor", "--cxx", str(tmp_path / "no-such-cxx")])
    assert res.exit_code == 2, res.output
    assert "PROBLEM: no C++ compiler found" in res.output
    assert "cpp_wrapper=True, AOTInductor and Inductor's C++ CPU kernels cannot be compiled" in res.output


def test_missing_required_hook_exits_2(monkeypatch):
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    monkeypatch.delattr(PythonWrapperCodegen, "define_kernel")
    res = CliRunner().invoke(main, ["doctor"])
    assert res.exit_code == 2, res.output
    assert "missing    required  define_kernel" in res.output
    assert "PROBLEM: required Inductor hooks missing" in res.output and "UnsupportedTorchError" in res.output
    data = json.loads(CliRunner().invoke(main, ["doctor", "-f", "json"]).output)
    assert data["exit_code"] == 2
    assert "torch._inductor.codegen.wrapper.PythonWrapperCodegen.define_kernel" in data["problems"][0]


def test_report_is_a_result_object():
    report = doctor.doctor()
    assert report and report.exit_code == 0 and str(report).startswith("aoti-debug doctor: OK")


# ------------------------------------------------------------------- doctor --build
class _Spec:
    def __init__(self, path):
        self.path = str(path)


def _fake_builds(tmp_path, monkeypatch, fail=()):
    """The runtime's builds as files written at once (``native_library.build`` faked), in
    ``tmp_path``; those named in ``fail`` raise the BuildError a failed compile raises."""
    from aoti_debug.codegen import device_stats, native_library, native_object

    built = []

    def build(spec):
        if os.path.basename(spec.path) in fail:
            raise native_library.BuildError(f"building {spec.path} failed (log: build.log): error: boom")
        with open(spec.path, "w") as f:
            f.write("x")
        built.append(os.path.basename(spec.path))
        return 0.0

    monkeypatch.setattr(native_library, "build", build)
    monkeypatch.setattr(native_library, "build_spec", lambda: _Spec(tmp_path / "libaoti_debug_rt.so"))
    monkeypatch.setattr(native_object, "object_spec", lambda v: _Spec(tmp_path / f"aoti_debug_rt-{v}.o"))
    monkeypatch.setattr(device_stats, "capability", lambda: None)
    return built


def test_doctor_build_builds_what_is_missing_and_names_what_was_there(tmp_path, monkeypatch):
    built = _fake_builds(tmp_path, monkeypatch)
    (tmp_path / "aoti_debug_rt-names.o").write_text("there before")
    res = CliRunner().invoke(main, ["doctor", "--build"])
    assert res.exit_code == 0, res.output
    assert sorted(built) == ["aoti_debug_rt-files.o", "libaoti_debug_rt.so"]
    lines = res.output.split("Runtime builds:\n")[1].splitlines()
    assert lines[0].startswith("  built    runtime library (Python wrapper, cpp_wrapper) in ")
    assert lines[0].endswith(str(tmp_path / "libaoti_debug_rt.so"))
    assert lines[1] == f"  present  AOTInductor runtime object 'names': {tmp_path / 'aoti_debug_rt-names.o'}"
    assert lines[2].startswith("  built    AOTInductor runtime object 'files' in ")
    data = json.loads(CliRunner().invoke(main, ["doctor", "--build", "-f", "json"]).output)
    assert data["exit_code"] == 0 and [s["state"] for s in data["build"]] == ["present"] * 3


def test_doctor_build_exits_2_when_a_build_fails_and_still_builds_the_rest(tmp_path, monkeypatch):
    built = _fake_builds(tmp_path, monkeypatch, fail=("libaoti_debug_rt.so",))
    res = CliRunner().invoke(main, ["doctor", "--build"])
    assert res.exit_code == 2, res.output
    assert "  failed   runtime library (Python wrapper, cpp_wrapper) (BuildError: building " in res.output
    assert "PROBLEM: 1 build(s) failed" in res.output and "Traceback" not in res.output
    assert sorted(built) == ["aoti_debug_rt-files.o", "aoti_debug_rt-names.o"]


def test_prebuild_says_the_pack_was_skipped_without_cuda(tmp_path, monkeypatch):
    from aoti_debug.codegen.prebuild import prebuild

    _fake_builds(tmp_path, monkeypatch)
    steps = prebuild(library=False, objects=(), pack=True)
    assert [(s.what, s.state, s.detail) for s in steps] == [("stats kernels' pack (CUDA)", "skipped", "no CUDA device")]
    assert prebuild(library=False, objects=()) == []  # no CUDA device: no pack asked


def test_doctor_build_refuses_another_compiler():
    res = CliRunner().invoke(main, ["doctor", "--build", "--cxx", "clang++"])
    assert res.exit_code == 2 and "set CXX instead of --cxx" in res.output


@pytest.mark.slow
def test_doctor_build_builds_the_runtime_an_instrumented_compile_then_finds(tmp_path):
    """The real builds into a fresh Inductor cache (the library and both AOTInductor
    objects, on two cores at once where there are two), then a compile at level stats in
    that cache, which builds nothing and records through the prebuilt library."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=REPO)
    cmd = [sys.executable, "-m", "aoti_debug.cli", "doctor", "--build", "-f", "json"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    steps = json.loads(r.stdout)["build"]
    assert [s["state"] for s in steps] == ["built"] * 3, steps
    library = steps[0]["path"]
    assert library.startswith(str(tmp_path / "cache")) and os.path.exists(library)
    before = {s["path"]: os.stat(s["path"]).st_mtime_ns for s in steps}
    script = ("import torch, aoti_debug\n"
              "aoti_debug.enable('stats', dump_dir=%r)\n"
              "f = torch.compile(lambda x: (x @ x).relu() + 1)\n"
              "f(torch.randn(8, 8)); aoti_debug.flush()\n"
              "from aoti_debug.runtime import native_stats\n"
              "print('library', *[p for p, lib in native_stats._libraries.items() if lib])\n" % str(tmp_path / "dump"))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"library {library}" in r.stdout, r.stdout
    assert {p: os.stat(p).st_mtime_ns for p in before} == before
    assert not [d for d in os.listdir(os.path.dirname(library)) if d.startswith("build-")]


def test_a_compile_starts_building_the_runtime_its_header_will_name(monkeypatch):
    """start_early: from the wrapper's creation, on a thread, once per process and target:
    the library for a Python wrapper at a level that records tensors and for a C++ JIT
    wrapper, AOTInductor's object of the level for a package; nothing at names in Python."""
    from aoti_debug.codegen import native_library, native_object, prebuild

    calls = []
    monkeypatch.setattr(prebuild, "_early", set())
    monkeypatch.setattr(native_library, "stats_library_path", lambda: calls.append("python library"))
    monkeypatch.setattr(native_library, "library_path", lambda: calls.append("cpp library"))
    monkeypatch.setattr(native_object, "object_path", lambda level: calls.append(f"object {level}"))
    monkeypatch.setattr(native_object, "linkable", lambda device: None)
    assert prebuild.start_early("names", cpp=False, aot=False) is None
    for args in [("stats", False, False), ("save", False, False), ("stats", True, False), ("stats", True, True),
                 ("print", True, True), ("names", True, True)]:
        thread = prebuild.start_early(*args)
        if thread is not None:
            thread.join(30)
    assert calls == ["python library", "object stats", "object names"], calls  # (one library for both wrappers)


def test_an_instrumented_compile_builds_the_library_from_the_wrappers_creation(tmp_path, monkeypatch):
    """A real compile at stats: the library's build is started on the build thread when
    the wrapper is made (before its header asks for it), not on the compiling thread."""
    import threading

    import aoti_debug
    from aoti_debug.codegen import native_library, prebuild

    threads = []
    monkeypatch.setattr(prebuild, "_early", set())
    real = native_library.stats_library_path
    monkeypatch.setattr(native_library, "stats_library_path",
                        lambda: threads.append(threading.current_thread().name) or real())
    torch._dynamo.reset()
    with torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=str(tmp_path)), \
            torch._inductor.config.patch(fx_graph_cache=False, fx_graph_remote_cache=False):
        torch.compile(lambda x: x.sin() + 1)(torch.randn(8))
    torch._dynamo.reset()
    assert threads[0] == "aoti_debug_build" and len(threads) == 2, threads
