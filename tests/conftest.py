"""Shared fixtures. Compiles are expensive: tests share compiled models per module."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import subprocess
import sys
import tempfile

import pytest

# One Inductor cache per test session, so a developer's cache never leaks into tests
# and the cache tests start from a known state.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="aoti_debug_inductor_"))
os.environ.pop("AOTI_DEBUG_LEVEL", None)
os.environ.pop("AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER", None)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_dirs(root: str) -> list[str]:
    return sorted(os.path.dirname(p) for p in glob.glob(os.path.join(root, "**", "run.json"), recursive=True))


def only_run(root: str) -> str:
    runs = run_dirs(root)
    assert len(runs) == 1, f"expected one run under {root}, found {runs}"
    return runs[0]


def records(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "manifest.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


#: The stats kernels' scratch pointer parameters after their own (Triton 3.6: global and profile).
STATS_SCRATCH = ("u64", "u64")


def fake_stats_images(capability, chosen=None, workers=None) -> list:
    """A stand-in for ``device_stats.compile_images``: a fake "cubin" of every variant with
    the parameters Triton 3.6 gives the real ones (their two scratch pointers included)."""
    from aoti_debug.codegen import device_stats

    return [device_stats.KernelImage(v, "_stats_kernel", b"\x7fELFFAKE" + bytes(20), 4, 32,
                                     (*device_stats.ARG_TYPES, *STATS_SCRATCH))
            for v in device_stats.variants()]


def build_harness(folder, source: str) -> str:
    """A program from ``source`` (C++ that includes the runtime's parts, e.g. ``entry.h``,
    and drives its entry points as wrappers do) built in ``folder`` against torch's shim:
    its path. Skips where there is no C++ compiler."""
    import shutil
    import subprocess

    import torch

    from aoti_debug.codegen import cpp_runtime

    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("needs a C++ compiler (none on PATH, CXX unset)")
    folder = str(folder)
    cpp_runtime.write_constants(folder)
    main = os.path.join(folder, "main.cpp")
    with open(main, "w") as f:
        f.write(source)
    torch_dir = os.path.dirname(torch.__file__)
    lib = os.path.join(torch_dir, "lib")
    exe = os.path.join(folder, "harness")
    proc = subprocess.run([cxx, "-std=c++17", "-O1", "-Wall", "-Wno-unused-function", "-I", folder, "-I",
                           cpp_runtime.NATIVE_DIR, "-I", os.path.join(torch_dir, "include"), main, "-o", exe,
                           "-L", lib, "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{lib}"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return exe


@pytest.fixture(scope="session")
def library():
    """The runtime library loaded as the Python runtime loads it for CPU stats and records
    (``native_stats.Library``), built once."""
    from aoti_debug.codegen import native_library
    from aoti_debug.runtime import native_stats

    try:
        native_library.toolchain_flags()
    except native_library.BuildError as e:
        pytest.skip(f"needs a C++ compiler: {e}")
    path = native_library.stats_library_path()
    assert path, "the runtime library could not be built (the warning says why)"
    lib = native_stats.load(path)
    assert lib is not None
    return lib


def run_threads(work, count: int) -> None:
    """``work(k)`` for ``k < count``, each on a thread of its own, all at once, switching
    between them often (every few bytecodes)."""
    import threading

    threads = [threading.Thread(target=work, args=(k,)) for k in range(count)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)


def load_record(run_dir: str, rec: dict):
    """The tensor a manifest record points at, loaded as users load it."""
    import torch

    return torch.load(os.path.join(run_dir, rec["file"]), weights_only=True)


def wrapper_sites(code: str) -> dict:
    """A Python wrapper's site literals (``_AD_SITE_n = _aoti_debug.site(...)``) by number."""
    import ast
    import re

    from aoti_debug.format.protocol import make_site

    found = {}
    for m in re.finditer(r"^_AD_SITE_\d+ = _aoti_debug\.site\((.*)\)$", code, re.M):
        site = make_site(ast.literal_eval(m.group(1)))
        found[site.id] = site
    return found


def run_python(code: str, env: dict | None = None, cwd: str | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (the package installed, env merged in)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=full_env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


#: The only reasons a test may skip: missing hardware or a missing compiler toolchain.
#: Any other skip fails the session, so a broken path cannot hide behind a skip.
SKIP_ALLOWED = (
    "needs CUDA",
    "needs two GPUs",
    "needs a C++ compiler",
    "no C++ compiler",
    "no C++ toolchain",
    "compute-sanitizer is not on the PATH",
)


def pytest_collection_modifyitems(config, items):
    """The fused-stats kernel tests run in a child interpreter with TRITON_INTERPRET=1
    (tests/test_fused_stats.py::test_under_interpreter); elsewhere they are deselected,
    not skipped. In that child, the test that starts it is deselected."""
    interpreting = os.environ.get("TRITON_INTERPRET", "0") == "1"
    keep, drop = [], []
    for item in items:
        in_child = "interpreted" in getattr(item, "fixturenames", ())
        parent_only = item.get_closest_marker("not_interpreted") is not None
        (drop if (in_child and not interpreting) or (parent_only and interpreting) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


_disallowed_skips: list[str] = []


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
        if not any(allowed in reason for allowed in SKIP_ALLOWED):
            _disallowed_skips.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session, exitstatus):
    if _disallowed_skips and exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter):
    if _disallowed_skips:
        terminalreporter.write_line("skips outside the allow-list (tests/conftest.py SKIP_ALLOWED) fail the run:",
                                    red=True)
        for line in _disallowed_skips:
            terminalreporter.write_line(f"  {line}", red=True)


@pytest.fixture(autouse=True)
def _no_leftover_instrumentation():
    """Every test starts and ends with instrumentation off."""
    import aoti_debug

    yield
    aoti_debug.disable()


@contextlib.contextmanager
def dump_dir_restored():
    """AOTI_DEBUG_DIR as it was afterwards: the C++ runtimes of this process follow it."""
    saved = os.environ.get("AOTI_DEBUG_DIR")
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("AOTI_DEBUG_DIR", None)
        else:
            os.environ["AOTI_DEBUG_DIR"] = saved


@pytest.fixture
def fresh_session(tmp_path, monkeypatch):
    """A new Python-runtime session dumping under ``tmp_path/dump``, failures cleared."""
    from aoti_debug.runtime import session

    monkeypatch.setenv("AOTI_DEBUG_DIR", str(tmp_path / "dump"))
    session.reset()
    session.FAILURES.clear()
    session._warned.clear()
    yield tmp_path / "dump"
    session.reset()


def _quick_guard(item):
    """For a ``quick`` test (make check): Inductor's compile made to fail, since a quick
    test that compiled a graph would make the tier slow without saying so."""
    from unittest import mock

    if item.get_closest_marker("quick") is None:
        return contextlib.nullcontext()

    def refuse(*args, **kwargs):
        raise AssertionError("a test marked quick compiled a graph with Inductor: drop the mark")

    return mock.patch("torch._inductor.compile_fx.compile_fx", refuse)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with _quick_guard(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with _quick_guard(item):
        return (yield)
