"""Hostile input to both runtimes: run ids that are shared or escape the dump root, bad
environment values, bad kernel globs, C++ warnings under Python, and concurrent
writers (two processes, two runtimes of one process, several Python threads).

The Python runtime is driven through ``torch.compile`` (Python wrapper), the C++
runtime through one ``cpp_wrapper=True`` compile shared by the module (the FX graph
cache hands the same instrumented wrapper back on every later call), plus a native
harness that builds ``aoti_debug_runtime.h`` alone to compare its parsers with
config.py's on many inputs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from click.testing import CliRunner

import aoti_debug
from aoti_debug import config
from aoti_debug.cli import main
from aoti_debug.codegen.cpp_runtime import NAMESPACE, runtime_source
from aoti_debug.errors import ConfigError
from aoti_debug.format import reader
from aoti_debug.format.writer import (LINK_REFUSED, NOT_A_DIRECTORY, OWNER_FILE, claim_run_directory, clean_run_id,
                                      default_run_id, describe_owner)
from aoti_debug.runtime import session
from aoti_debug.runtime.stats import tensor_stats
from tests.conftest import REPO, load_record, records, run_dirs, run_python, run_threads

CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")

#: Hostile AOTI_DEBUG_RUN_ID values -> the run id both runtimes must use ("" = the default).
RUN_IDS = {
    "../../escaped": "escaped",
    "/tmp/abs/olute": "tmp_abs_olute",
    "..": "",
    "a b/../c": "a_b_.._c",
    "-x-": "x",
}
BAD_BYTES = ["-5", "abc", "inf", "nan"]


def f(x, w):
    return torch.relu(x @ w) + 1  # an extern kernel (mm) and a fused one


X, W = torch.randn(4, 8), torch.randn(8, 8)


@contextlib.contextmanager
def env(**values):
    """Set (None: unset) environment variables; restore them on exit."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(autouse=True)
def _isolated_env():
    with env(AOTI_DEBUG_DIR=None, AOTI_DEBUG_RUN_ID=None, AOTI_DEBUG_MAX_BYTES=None, RANK=None, WORLD_SIZE=None):
        yield
    session.reset()


def run_py(root: str, x=X, **values) -> str | None:
    """One call of ``f`` through the Python wrapper at level save, in a fresh Python session;
    the run directory it wrote."""
    with env(AOTI_DEBUG_DIR=root, **values):
        session.reset()
        session._warned.clear()
        with aoti_debug.enabled(level="save"):
            torch.compile(f)(x, W)
        aoti_debug.flush()
        path = session.dump_path()
        session.reset()
    return path


@pytest.fixture(scope="module")
def cpp_fn(tmp_path_factory):
    """``f`` compiled with cpp_wrapper=True at level save (once for the module)."""
    root = str(tmp_path_factory.mktemp("cpp_first"))
    with env(AOTI_DEBUG_DIR=root):
        torch._dynamo.reset()
        with aoti_debug.enabled(level="save"), torch._inductor.config.patch(cpp_wrapper=True):
            fn = torch.compile(f)
            fn(X, W)
    assert run_dirs(root), "the C++ runtime wrote nothing"
    return fn


def run_cpp(fn, root: str, x=X, **values) -> None:
    """One call through the C++ wrapper; the runtime reads the environment at its next record."""
    with env(AOTI_DEBUG_DIR=root, **values):
        with aoti_debug.enabled(level="save"), torch._inductor.config.patch(cpp_wrapper=True):
            fn(x, W)


def run_info(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "run.json")) as fh:
        return json.load(fh)


def owner(run_dir: str) -> dict:
    with open(os.path.join(run_dir, OWNER_FILE)) as fh:
        return json.load(fh)


def assert_clean_run(run_dir: str) -> list[dict]:
    """seq 1..n without gaps or repeats, every own file loads and has its record's checksum."""
    recs = records(run_dir)
    assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1)), [r["seq"] for r in recs][:20]
    own = [r for r in recs if "file" in r and not r.get("shared")]
    assert len({r["file"] for r in own}) == len(own)
    for r in own:
        assert tensor_stats(load_record(run_dir, r))[1] == r["checksum"], r["file"]
    return recs


def cpp_failures(key_prefix: str) -> list[str]:
    return [m for k, m in session.failures() if k.startswith("cpp:" + key_prefix)]


# =========================================================================== kernel globs
@pytest.mark.parametrize("pattern,ok", [
    ("[", False), ("triton_[", False), ("[abc", False), ("[]", False), ("[!]", False),
    ("[[]", True), ("[]]", True), ("[!]]", True), ("a[bc]d*", True), ("*", True), ("x]", True),
])
def test_unclosed_bracket_is_invalid(pattern, ok):
    assert config.unclosed_bracket(pattern) is (not ok)
    if ok:
        config.KernelFilter.parse(pattern)
    else:
        with pytest.raises(ConfigError, match=r"unclosed '\['"):
            config.KernelFilter.parse(pattern)


def test_bad_glob_from_python_raises_and_changes_nothing():
    before = aoti_debug._switch.current()
    with pytest.raises(ConfigError, match=r"pattern '\[' has an unclosed '\['"):
        aoti_debug.enable(level="save", kernels="[")
    with pytest.raises(ConfigError, match=r"unclosed"):
        with aoti_debug.enabled(level="stats", kernels="triton_*,["):
            pass
    assert aoti_debug._switch.current() == before == config.CompileSettings()


def test_bad_glob_from_cli_is_exit_2_one_error_line():
    res = CliRunner().invoke(main, ["run", "--level", "save", "--kernels", "[", "--", "true"])
    assert res.exit_code == 2, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "unclosed '['" in errors[0], res.output
    assert "Traceback" not in res.output


def test_bad_glob_from_env_warns_once_and_instruments_nothing(tmp_path):
    script = textwrap.dedent("""
        import torch
        out = torch.compile(lambda x, w: x @ w)(torch.randn(4, 4), torch.randn(4, 4))  # extern only: no C++ build
        from aoti_debug.runtime import failures
        print("OK", [k for k, _ in failures()])
    """)
    r = run_python(script, {"AOTI_DEBUG_LEVEL": "save", "AOTI_DEBUG_KERNELS": "[", "PYTHONPATH": REPO,
                            "AOTI_DEBUG_DIR": str(tmp_path / "d")})
    assert r.returncode == 0, r.stderr[-3000:]
    warnings = [line for line in r.stderr.splitlines() if "[aoti_debug] warning" in line]
    assert len(warnings) == 1, r.stderr[-3000:]
    assert "AOTI_DEBUG_KERNELS='['" in warnings[0] and "instrumentation stays off" in warnings[0]
    assert "OK ['env-compile']" in r.stdout
    assert not os.path.exists(tmp_path / "d")


# =========================================================================== env values: parsers
def test_parsers_strict_and_lenient():
    assert config.parse_max_bytes("1e3") == 1000 and config.parse_max_bytes(" +7 ") == 7
    assert config.parse_max_bytes("") is None and config.parse_max_bytes("1e400") == (1 << 63) - 1
    for bad in BAD_BYTES + ["1_000", "0x10", "1e", "."]:
        with pytest.raises(ConfigError, match="AOTI_DEBUG_MAX_BYTES"):
            config.parse_max_bytes(bad)
    seen = []
    s = config.run_settings_from_env({"AOTI_DEBUG_DIR": "/d", "AOTI_DEBUG_MAX_BYTES": "inf", "RANK": "-1",
                                      "WORLD_SIZE": "two"}, warn=lambda k, m: seen.append((k, m)))
    assert (s.dump_dir, s.max_bytes, s.rank, s.world_size) == ("/d", None, 0, 1)
    assert [k for k, _ in seen] == ["env-AOTI_DEBUG_MAX_BYTES", "env-RANK", "env-WORLD_SIZE"]
    assert "AOTI_DEBUG_MAX_BYTES='inf'" in seen[0][1] and seen[0][1].endswith("no limit is used")
    with pytest.raises(ConfigError):
        config.run_settings_from_env({"RANK": "x"})


# =========================================================================== Python runtime
@pytest.mark.parametrize("value", BAD_BYTES)
def test_py_bad_max_bytes_keeps_dir_and_names_the_variable(tmp_path, capfd, value):
    session.FAILURES.clear()
    run_dir = run_py(str(tmp_path), AOTI_DEBUG_MAX_BYTES=value)
    assert run_dir and os.path.dirname(run_dir) == str(tmp_path), run_dir
    recs = assert_clean_run(run_dir)
    assert all("file" in r for r in recs if r["kind"] == "tensor")  # no limit
    warnings = [line for line in capfd.readouterr().err.splitlines() if "[aoti_debug] warning" in line]
    assert len(warnings) == 1, warnings
    assert f"AOTI_DEBUG_MAX_BYTES={value!r}" in warnings[0] and "no limit is used" in warnings[0]


def test_py_bad_rank_and_world_size_warn_and_keep_the_rest(tmp_path, capfd):
    run_dir = run_py(str(tmp_path), RANK="one", WORLD_SIZE="0", AOTI_DEBUG_MAX_BYTES="1e9")
    assert os.path.dirname(run_dir) == str(tmp_path)  # world size 1: no rank<N> level
    err = capfd.readouterr().err
    assert "RANK='one' is not a whole number >= 0; rank 0 is used" in err
    assert "WORLD_SIZE='0' is not a whole number >= 1; world size 1 is used" in err


@pytest.mark.parametrize("raw", list(RUN_IDS))
def test_py_run_id_never_leaves_the_root(tmp_path, capfd, raw):
    root = tmp_path / "root"
    run_dir = run_py(str(root), AOTI_DEBUG_RUN_ID=raw)
    expected = RUN_IDS[raw] or default_run_id()
    assert run_dir == os.path.join(str(root), expected)
    assert [p for p in os.listdir(tmp_path)] == ["root"] and os.listdir(root) == [expected]
    assert run_info(run_dir)["run_id"] == expected
    warnings = [line for line in capfd.readouterr().err.splitlines() if "AOTI_DEBUG_RUN_ID" in line]
    assert len(warnings) == 1 and f"AOTI_DEBUG_RUN_ID={raw!r} is not a plain name" in warnings[0]


def test_py_plain_run_id_is_kept_without_a_word(tmp_path, capfd):
    assert run_py(str(tmp_path), AOTI_DEBUG_RUN_ID="run-a_1.2") == str(tmp_path / "run-a_1.2")
    assert "warning" not in capfd.readouterr().err


def _fake_owner(path, pid=1, runtime="cpp", host="elsewhere"):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, OWNER_FILE), "w") as fh:
        json.dump({"host": host, "pid": pid, "runtime": runtime}, fh)


@pytest.mark.parametrize("world_size", [1, 2])
def test_py_held_directory_gives_a_numbered_sibling(tmp_path, capfd, world_size):
    leaf = "rank1" if world_size > 1 else ""
    held = os.path.join(str(tmp_path), "job", leaf).rstrip("/")
    _fake_owner(held)
    run_dir = run_py(str(tmp_path), AOTI_DEBUG_RUN_ID="job", RANK="1", WORLD_SIZE=str(world_size))
    assert run_dir == os.path.join(str(tmp_path), "job-2", leaf).rstrip("/")
    assert os.listdir(held) == [OWNER_FILE], "the held directory was written into"
    assert owner(run_dir)["pid"] == os.getpid() and owner(run_dir)["runtime"] == "python"
    assert run_info(run_dir)["run_id"] == "job-2"
    warnings = [line for line in capfd.readouterr().err.splitlines() if "is held by" in line]
    assert len(warnings) == 1
    assert f"run directory {held!r} is held by the C++ runtime of pid 1 on host elsewhere" in warnings[0]
    assert repr(run_dir) in warnings[0]


def test_py_directory_of_an_older_aoti_debug_counts_as_held(tmp_path, capfd):
    old = tmp_path / "job"
    old.mkdir()
    (old / "manifest.jsonl").write_text('{"seq": 1}\n')
    assert run_py(str(tmp_path), AOTI_DEBUG_RUN_ID="job") == str(tmp_path / "job-2")
    assert (old / "manifest.jsonl").read_text() == '{"seq": 1}\n'
    assert "is held by an earlier run (no .owner file)" in capfd.readouterr().err


def test_py_session_back_in_its_own_directory_continues_numbering(tmp_path, capfd):
    first = run_py(str(tmp_path), AOTI_DEBUG_RUN_ID="again")
    second = run_py(str(tmp_path), x=X * 2, AOTI_DEBUG_RUN_ID="again")
    assert first == second == str(tmp_path / "again") and os.listdir(tmp_path) == ["again"]
    recs = assert_clean_run(first)
    assert len(recs) % 2 == 0 and recs[len(recs) // 2]["seq"] == len(recs) // 2 + 1
    assert "is held by" not in capfd.readouterr().err


def test_reader_ignores_the_owner_file(tmp_path):
    a = run_py(str(tmp_path), AOTI_DEBUG_RUN_ID="r")
    _fake_owner(str(tmp_path / "q"))  # a claimed directory with nothing in it yet is no run
    with reader.open_run(a) as run:
        assert run.info.run_id == "r" and list(run.records())
    assert reader.find_runs(str(tmp_path)) == [a]


#: Where a link is planted in the dump root -> who the warning says holds ``job``.
PLANTED = {"run": LINK_REFUSED, "tensors": "an earlier run (no .owner file)",
           "manifest.jsonl": "an earlier run (no .owner file)", "run.json": "an earlier run (no .owner file)"}


def plant(tmp_path, where: str):
    """``(root, target)``: a dump root with a link planted at ``job`` (``where="run"``) or,
    in a real ``job/`` of ours, at ``job/<where>``, pointing into the empty ``target``."""
    root, target = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    target.mkdir()
    if where == "run":
        os.symlink(target, root / "job")
    else:
        (root / "job").mkdir()
        os.symlink(target if where == "tensors" else target / where, root / "job" / where)
    return str(root), str(target)


def assert_not_followed(root: str, target: str, where: str) -> str:
    """Nothing reached ``target``, the planted entry is as it was, the run is ``job-2``."""
    assert os.listdir(target) == [], "written through a planted link"
    job = os.path.join(root, "job")
    if where == "run":
        assert os.path.islink(job)
    else:
        assert os.listdir(job) == [where] and os.path.islink(os.path.join(job, where))
    assert sorted(os.listdir(root)) == ["job", "job-2"]
    return os.path.join(root, "job-2")


@pytest.mark.parametrize("where", list(PLANTED))
def test_py_never_writes_through_a_planted_link(tmp_path, capfd, where):
    root, target = plant(tmp_path, where)
    with env(AOTI_DEBUG_DIR=root, AOTI_DEBUG_RUN_ID="job"):
        session.reset()
        session._warned.clear()
        with aoti_debug.enabled(level="save"):
            out = torch.compile(f)(X, W)
        aoti_debug.flush()
        session.reset()
    torch.testing.assert_close(out, f(X, W))
    run_dir = assert_not_followed(root, target, where)
    recs = assert_clean_run(run_dir)
    assert recs and any("file" in r for r in recs) and owner(run_dir)["runtime"] == "python"
    warnings = [line for line in capfd.readouterr().err.splitlines() if "[aoti_debug] warning" in line]
    assert len(warnings) == 1, warnings
    assert (f"run directory {os.path.join(root, 'job')!r} is held by {PLANTED[where]}; this Python runtime writes "
            f"to {run_dir!r} instead") in warnings[0]


def test_session_counters_are_thread_safe():
    sess = session.Session(config.RunSettings())
    per_thread, threads = 5000, 8
    got: list[list[int]] = [[] for _ in range(threads)]

    def work(i):
        for _ in range(per_thread):
            got[i].append(sess.next_seq())
            sess.next_launch()

    run_threads(work, threads)
    seqs = [s for g in got for s in g]
    assert sorted(seqs) == list(range(1, per_thread * threads + 1))
    assert sess.launch == per_thread * threads
    assert all(g == sorted(g) for g in got)


def test_express_counts_share_the_sessions_numbers():
    """Express launches count in their kernel's cell (``calls_of``, ``next_launch_in``)
    while other threads number launches by key: every launch one number, every call of
    the kernel one call number, from either way."""
    sess = session.Session(config.RunSettings())
    cell = sess.calls_of("graph0", "k")
    per_thread, threads = 3000, 6
    got: list[list[tuple[int, int]]] = [[] for _ in range(threads)]

    def work(i):
        for _ in range(per_thread):
            got[i].append(sess.next_launch_in(cell) if i % 2 else sess.next_launch("graph0", "k"))

    run_threads(work, threads)
    launches = sorted(n for g in got for n, _c in g)
    calls = sorted(c for g in got for _n, c in g)
    assert launches == list(range(1, per_thread * threads + 1)) == [c + 1 for c in calls]
    assert sess.calls_of("graph0", "k") is cell and cell[0] == per_thread * threads


def test_a_batch_the_writer_cannot_write_costs_the_batch_not_the_writer(fresh_session, capfd):
    """A queued job whose records cannot be made (a bug of ours) is dropped with one
    warning and a recorded failure; the jobs of its batch are written one by one, and
    the writer thread lives on: the flush returns and later records are written."""
    import threading

    from aoti_debug.format.protocol import record

    class Unreadable:
        prints = False

        def jobs(self):
            raise RuntimeError("no records in this side")

    sess = session.current()
    sess.writer("stats")
    sess.submit_side(session.Job(None, None, Unreadable()))
    rec = record(seq=1, launch=1, graph="graph0", wrapper="python", kernel="k", op="k", kernel_call=0,
                 phase="after", arg="later", role="output", index=0, expr=None, volatile=None, site=0)
    sess.submit_side(session.Job(rec))
    done = threading.Thread(target=aoti_debug.flush, daemon=True)
    done.start()
    done.join(120)
    assert not done.is_alive(), "the flush waits for a writer that is gone"
    err = capfd.readouterr().err
    assert err.count("could not write a batch") == 1 and err.count("could not be written and is dropped") == 1, err
    sess.submit_side(session.Job(dict(rec, seq=2, arg="after that")))
    aoti_debug.flush()
    assert [r["arg"] for r in records(session.dump_path())] == ["later", "after that"]
    assert any("dropped (RuntimeError: no records in this side)" in message for _key, message in session.FAILURES)


# =========================================================================== C++ runtime
@pytest.mark.parametrize("value", BAD_BYTES)
def test_cpp_bad_max_bytes_keeps_dir_and_names_the_variable(cpp_fn, tmp_path, capfd, value):
    before = len(cpp_failures("env-AOTI_DEBUG_MAX_BYTES"))
    run_cpp(cpp_fn, str(tmp_path), AOTI_DEBUG_MAX_BYTES=value)
    (run_dir,) = run_dirs(str(tmp_path))
    assert os.path.dirname(run_dir) == str(tmp_path)
    recs = assert_clean_run(run_dir)
    assert all("file" in r for r in recs if r["kind"] == "tensor" and not r.get("skipped"))
    assert not any(r.get("skipped") for r in recs)  # no limit
    message = f"AOTI_DEBUG_MAX_BYTES='{value}' is not a number of bytes (a number >= 0 such as 1e9); no limit is used"
    assert run_info(run_dir)["warnings"] == [message]  # in run.json, once
    assert cpp_failures("env-AOTI_DEBUG_MAX_BYTES")[before:] == [message]  # and in failures()
    err = capfd.readouterr().err
    assert err.count("AOTI_DEBUG_MAX_BYTES") <= 1  # printed once per process (the first value)


def test_cpp_bad_rank_warns_and_keeps_the_rest(cpp_fn, tmp_path):
    run_cpp(cpp_fn, str(tmp_path), RANK="x", WORLD_SIZE="1")
    (run_dir,) = run_dirs(str(tmp_path))
    assert os.path.dirname(run_dir) == str(tmp_path)
    assert run_info(run_dir)["warnings"] == ["RANK='x' is not a whole number >= 0; rank 0 is used"]


@pytest.mark.parametrize("raw", list(RUN_IDS))
def test_cpp_run_id_never_leaves_the_root_same_as_python(cpp_fn, tmp_path, raw):
    root = tmp_path / "root"
    run_cpp(cpp_fn, str(root), AOTI_DEBUG_RUN_ID=raw)
    expected = RUN_IDS[raw] or default_run_id()
    assert os.listdir(tmp_path) == ["root"] and os.listdir(root) == [expected]
    info = run_info(str(root / expected))
    assert info["run_id"] == expected and info["writer"] == "cpp"
    what = f"run id {expected!r}" if RUN_IDS[raw] else f"the default run id {expected!r}"
    message = f"AOTI_DEBUG_RUN_ID={raw!r} is not a plain name; {what} is used (a run never leaves AOTI_DEBUG_DIR)"
    assert info["warnings"] == [message]
    assert message in cpp_failures(f"run-id:{raw}")
    # the Python runtime says the same for the same input
    assert clean_run_id(raw) == RUN_IDS[raw]


def test_cpp_held_directory_gives_a_numbered_sibling(cpp_fn, tmp_path):
    held = str(tmp_path / "job" / "rank1")
    _fake_owner(held, pid=2, runtime="python", host="far")
    run_cpp(cpp_fn, str(tmp_path), AOTI_DEBUG_RUN_ID="job", RANK="1", WORLD_SIZE="2")
    run_dir = str(tmp_path / "job-2" / "rank1")
    assert run_dirs(str(tmp_path)) == [run_dir] and os.listdir(held) == [OWNER_FILE]
    assert owner(run_dir) == {"host": owner(run_dir)["host"], "pid": os.getpid(), "runtime": "cpp"}
    info = run_info(run_dir)
    assert info["run_id"] == "job-2" and info["rank"] == 1 and info["world_size"] == 2
    assert info["warnings"] == [f"run directory '{held}' is held by the Python runtime of pid 2 on host far; "
                                f"this C++ runtime writes to '{run_dir}' instead"]


@pytest.mark.parametrize("where", list(PLANTED))
def test_cpp_never_writes_through_a_planted_link(cpp_fn, tmp_path, where):
    root, target = plant(tmp_path, where)
    with env(AOTI_DEBUG_DIR=root, AOTI_DEBUG_RUN_ID="job"):
        with aoti_debug.enabled(level="save"), torch._inductor.config.patch(cpp_wrapper=True):
            out = cpp_fn(X, W)
    torch.testing.assert_close(out, f(X, W))
    run_dir = assert_not_followed(root, target, where)
    recs = assert_clean_run(run_dir)
    assert recs and any("file" in r for r in recs) and owner(run_dir)["runtime"] == "cpp"
    message = (f"run directory '{os.path.join(root, 'job')}' is held by {PLANTED[where]}; "
               f"this C++ runtime writes to '{run_dir}' instead")
    assert run_info(run_dir)["warnings"] == [message]
    assert cpp_failures(f"claim:{os.path.join(root, 'job')}") == [message]


def test_cpp_switching_back_continues_its_own_directory(cpp_fn, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    run_cpp(cpp_fn, a, AOTI_DEBUG_RUN_ID="sw")
    run_cpp(cpp_fn, b, AOTI_DEBUG_RUN_ID="sw")
    run_cpp(cpp_fn, a, x=X * 3, AOTI_DEBUG_RUN_ID="sw")
    assert os.listdir(a) == ["sw"] and os.listdir(b) == ["sw"]
    recs = assert_clean_run(os.path.join(a, "sw"))
    assert len(recs) == 2 * len(records(os.path.join(b, "sw")))
    assert run_info(os.path.join(a, "sw"))["warnings"] == []


@pytest.mark.parametrize("first", ["python", "cpp"])
def test_python_and_cpp_runtimes_of_one_process_never_share(cpp_fn, tmp_path, capfd, first):
    root = str(tmp_path)
    with env(AOTI_DEBUG_DIR=root, AOTI_DEBUG_RUN_ID="both"):
        session.reset()
        if first == "cpp":
            run_cpp(cpp_fn, root, AOTI_DEBUG_RUN_ID="both")
        with aoti_debug.enabled(level="save"):
            torch.compile(f)(X, W)  # the Python runtime: the session stays open
        aoti_debug.flush()
        if first == "python":
            run_cpp(cpp_fn, root, AOTI_DEBUG_RUN_ID="both")
        session.reset()
    dirs = {os.path.basename(p): p for p in run_dirs(root)}
    assert set(dirs) == {"both", "both-2"}
    second = "cpp" if first == "python" else "python"
    assert owner(dirs["both"])["runtime"] == first and owner(dirs["both-2"])["runtime"] == second
    for name, p in dirs.items():
        recs = assert_clean_run(p)
        assert {r["wrapper"] for r in recs} == {owner(p)["runtime"]}
    runtime = {"python": "Python", "cpp": "C++"}
    message = (f"run directory '{dirs['both']}' is held by the {runtime[first]} runtime of this process; "
               f"this {runtime[second]} runtime writes to '{dirs['both-2']}' instead")
    assert message in capfd.readouterr().err
    if second == "cpp":
        assert run_info(dirs["both-2"])["warnings"] == [message]
        assert message in cpp_failures("claim:")


def test_cpp_failures_reach_python(cpp_fn, tmp_path):
    run_cpp(cpp_fn, str(tmp_path), AOTI_DEBUG_MAX_BYTES="lots")
    msgs = cpp_failures("env-AOTI_DEBUG_MAX_BYTES")
    assert any("AOTI_DEBUG_MAX_BYTES='lots'" in m for m in msgs)
    assert all(isinstance(k, str) and isinstance(m, str) for k, m in session.failures())


# =========================================================================== two processes
CHILD = textwrap.dedent("""
    import os, sys, time, torch, aoti_debug
    from aoti_debug.runtime import failures, reset

    def f(x, w):
        return torch.relu(x @ w) + 1

    torch.manual_seed(0)
    w = torch.randn(8, 8)
    index, wrapper, barrier, root, calls = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    with aoti_debug.enabled(level="save"), torch._inductor.config.patch(cpp_wrapper=wrapper == "cpp"):
        fn = torch.compile(f)
        fn(torch.zeros(4, 8), w)  # compile (or hit the cache), recorded in the warm-up directory
        aoti_debug.flush()
        reset()
        os.environ["AOTI_DEBUG_DIR"], os.environ["AOTI_DEBUG_RUN_ID"] = root, "shared"
        open(os.path.join(barrier, index), "w").close()
        deadline = time.time() + 300
        while len(os.listdir(barrier)) < 2 and time.time() < deadline:
            time.sleep(0.01)
        for i in range(calls):
            fn(torch.full((4, 8), float(index) + i / 1000), w)
    aoti_debug.flush()
    print("PID", os.getpid(), "FAILURES", sorted({k for k, _ in failures()}))
""")


@pytest.mark.parametrize("wrapper", ["python", "cpp"])
def test_two_processes_with_one_run_id_never_mix(tmp_path, wrapper, request):
    if wrapper == "cpp":
        request.getfixturevalue("cpp_fn")  # the FX graph cache then holds the children's wrapper
    root, barrier = tmp_path / "root", tmp_path / "barrier"
    barrier.mkdir()
    procs = []
    for index in ("1", "2"):
        full_env = dict(os.environ, PYTHONPATH=REPO, AOTI_DEBUG_DIR=str(tmp_path / f"warm{index}"),
                        OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, "-c", CHILD, index, wrapper, str(barrier), str(root), "40"],
                                      env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    pids = {int(re.search(r"^PID (\d+)", out, re.M).group(1)): index for (out, _), index in zip(outs, ("1", "2"))}
    dirs = run_dirs(str(root))
    assert [os.path.basename(d) for d in dirs] == ["shared", "shared-2"]
    for d in dirs:
        pid = owner(d)["pid"]
        assert run_info(d)["pid"] == pid and owner(d)["runtime"] == wrapper
        recs = assert_clean_run(d)
        assert len({r["launch"] for r in recs}) % 40 == 0
        # every input recorded here is this process's own (1.xxx in one, 2.xxx in the other)
        xs = [r for r in recs if r["op"] == "aten.mm" and r["phase"] == "before" and r["shape"] == [4, 8]]
        assert len(xs) == 40 and all(int(load_record(d, r).min()) == int(pids[pid]) for r in xs)
    held = [line for _, err in outs for line in err.splitlines() if "is held by" in line]
    assert len(held) == 1, held
    # Who holds it: "the C++ runtime of pid N ...", or, when the loser looked between the
    # winner's O_EXCL create and its write, "another runtime (its .owner file is not written yet ...)".
    assert re.search(rf"run directory '{re.escape(dirs[0])}' is held by (the |another runtime \(its \.owner file is "
                     rf"not written yet)", held[0]) and f"'{dirs[1]}' instead" in held[0], held[0]
    loser = next(out for out, err in outs if "is held by" in err)
    assert ("'cpp:claim:" if wrapper == "cpp" else "'claim:") in loser


# =========================================================================== C++ parsers == Python's
_HARNESS = r"""
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include "runtime.h"
using namespace NS;
// id RAW | env | flight | owner PATH | claim ROOT ID RANK WORLD
int main(int argc, char** argv) {
  Shared& S = shared();
  std::lock_guard<std::mutex> g(S.mu);
  std::string mode = argv[1];
  if (mode == "id") std::printf("%s\n", clean_run_id(argc > 2 ? argv[2] : "").c_str());
  if (mode == "env") {
    long long mb = static_cast<long long>(parse_max_bytes(S));
    int rank = env_int(S, "RANK", 0, 0, "rank 0");
    int world = env_int(S, "WORLD_SIZE", 1, 1, "world size 1");
    std::printf("%lld %d %d\n", mb, rank, world);
    for (auto& w : claims().run_warnings) std::printf("%s\n", w.c_str());
  }
  if (mode == "flight") {
    long long ring = static_cast<long long>(parse_ring(S));
    int trigger = parse_trigger(S) ? 1 : 0;
    std::printf("%lld %d\n", ring, trigger);
    for (auto& w : claims().run_warnings) std::printf("%s\n", w.c_str());
  }
  if (mode == "owner") std::printf("%s\n", describe_owner(argv[2]).c_str());
  if (mode == "claim") {
    S.rank = std::atoi(argv[4]);
    S.world_size = std::atoi(argv[5]);
    std::string holder, err;
    bool ok = claim_run(S, argv[2], argv[3], holder, err);
    std::printf("%d\n%s\n%s\n%s\n", ok, S.path.c_str(), holder.c_str(), err.c_str());
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    if CXX is None:
        pytest.fail("no C++ compiler: the C++ runtime cannot be checked")
    d = tmp_path_factory.mktemp("hostile_native")
    (d / "runtime.h").write_text(runtime_source())
    (d / "main.cpp").write_text(_HARNESS.replace("NS", NAMESPACE))
    include = os.path.join(os.path.dirname(torch.__file__), "include")
    exe = str(d / "h")
    proc = subprocess.run([CXX, "-std=c++17", "-O1", "-I", include, str(d / "main.cpp"), "-o", exe],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]

    def call(*args: str, **environ: str) -> list[str]:
        base = {k: v for k, v in os.environ.items()
                if k not in ("AOTI_DEBUG_MAX_BYTES", "RANK", "WORLD_SIZE", "AOTI_DEBUG_RING", "AOTI_DEBUG_TRIGGER")}
        r = subprocess.run([exe, *args], env=dict(base, **environ), capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout.decode("utf-8", "surrogateescape").split("\n")[:-1]

    return call


IDS = ["plain", "run-a_1.2", "../../escaped", "/abs/path", "..", ".", "", "a b", "é/x", "a//b", "-x-", "_.-",
       "x" * 150, "a\tb\nc", "run:1?*"]


def test_cpp_and_python_clean_run_ids_alike(harness):
    for raw in IDS:
        assert harness("id", raw) == [clean_run_id(raw)], raw


VALUES = ["", " 12 ", "+3", "1e3", "1e-400", "+2.5e2", "2.5", ".5", "5.", "1e400", "99999999999999999999",
          "9007199254740993", "-5", "abc", "inf", "nan", "1_000", "0x10", "1e", ".", "+", "1 2", "٣"]


def test_cpp_and_python_parse_env_values_alike(harness):
    for v in VALUES:
        for rank, world in (("1", "2"), (v, v)):
            environ = {"AOTI_DEBUG_MAX_BYTES": v, "RANK": rank, "WORLD_SIZE": world}
            seen: list[str] = []
            s = config.run_settings_from_env(environ, warn=lambda k, m: seen.append(m))
            out = harness("env", **environ)
            expected_mb = -1 if s.max_bytes is None else s.max_bytes
            assert out[0] == f"{expected_mb} {s.rank} {s.world_size}", (v, out)
            assert out[1:] == seen, (v, out, seen)


RINGS = ["", " 12 ", "+3", "0", "000", "1000000", "1000001", "999999999", "1234567890", "-1", "abc", "2.5", "1e3",
         "٣", "1 2"]
TRIGGERS = ["", "nonfinite", " NonFinite\t", "nan", "nonfinite,x", "none"]


def test_cpp_and_python_parse_flight_settings_alike(harness):
    """AOTI_DEBUG_RING / AOTI_DEBUG_TRIGGER (config.parse_ring, parse_trigger): the same
    values, the same warnings naming the variable and what is used instead."""
    for ring, trigger in [(r, "") for r in RINGS] + [("", t) for t in TRIGGERS]:
        environ = {"AOTI_DEBUG_RING": ring, "AOTI_DEBUG_TRIGGER": trigger}
        seen: list[str] = []
        s = config.run_settings_from_env(environ, warn=lambda k, m: seen.append(m))
        out = harness("flight", **environ)
        assert out[0] == f"{s.ring or 0} {int(s.trigger == 'nonfinite')}", (ring, trigger, out)
        assert out[1:] == seen, (ring, trigger, out, seen)


def test_cpp_and_python_claim_and_describe_alike(harness, tmp_path):
    root = str(tmp_path)
    _fake_owner(os.path.join(root, "j", "rank0"), pid=7, runtime="python", host="h1")
    ok, path, holder, err = harness("claim", root, "j", "0", "2")
    assert ok == "1" and path == os.path.join(root, "j-2", "rank0") and not err
    assert holder == describe_owner(os.path.join(root, "j", "rank0")) == "the Python runtime of pid 7 on host h1"
    assert owner(path)["runtime"] == "cpp"
    # the second C++ claim of the same id in another process goes on to -3
    assert harness("claim", root, "j", "0", "2")[1] == os.path.join(root, "j-3", "rank0")
    bad = os.path.join(root, "bad")
    os.makedirs(bad)
    for content in ("", "{", '{"pid": 3}', '{"host": "h", "pid": 4, "runtime": "tpu"}'):
        with open(os.path.join(bad, OWNER_FILE), "w") as fh:
            fh.write(content)
        assert harness("owner", bad) == [describe_owner(bad)], content
    os.makedirs(os.path.join(root, "none"))
    assert harness("owner", os.path.join(root, "none")) == [describe_owner(os.path.join(root, "none"))]
    # a file where the run directory should be: no claim, a reason
    open(os.path.join(root, "file"), "w").close()
    ok, path, holder, err = harness("claim", os.path.join(root, "file"), "j", "0", "1")
    assert ok == "0" and "not a directory" in err.lower()


def test_cpp_and_python_refuse_planted_links_alike(harness, tmp_path):
    root, target = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    target.mkdir()
    os.symlink(target, root / "j")
    ok, path, holder, err = harness("claim", str(root), "j", "0", "1")
    assert (ok, path, holder, err) == ("1", str(root / "j-2"), LINK_REFUSED, "")
    assert claim_run_directory(str(root), "j", 0, 1, "python")[::2] == (str(root / "j-3"), LINK_REFUSED)
    (root / "f").write_text("")
    assert harness("claim", str(root), "f", "0", "1")[2] == NOT_A_DIRECTORY
    assert claim_run_directory(str(root), "f", 0, 1, "python")[2] == NOT_A_DIRECTORY
    # a multi-rank run: the shared <id>/ may exist, as a real directory; a link there is refused
    os.symlink(target, root / "k")
    ok, path, holder, err = harness("claim", str(root), "k", "1", "2")
    assert (ok, path, holder) == ("1", str(root / "k-2" / "rank1"), LINK_REFUSED)
    assert harness("claim", str(root), "k-2", "0", "2")[:3] == ["1", str(root / "k-2" / "rank0"), ""]
    # a real run directory of ours with tensors/ -> elsewhere: never claimed (it is not new)
    (root / "t").mkdir()
    os.symlink(target, root / "t" / "tensors")
    ok, path, holder, err = harness("claim", str(root), "t", "0", "1")
    assert (ok, path, holder) == ("1", str(root / "t-2"), describe_owner(str(root / "t")))
    assert os.listdir(target) == []
    for claimed in ("j-2", "k-2/rank1", "k-2/rank0", "t-2"):
        assert sorted(os.listdir(root / claimed)) == [OWNER_FILE, "tensors"], claimed
