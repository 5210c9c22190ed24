"""``aoti-debug locate``: the stream reader, the verdict rules, source lookup, the sanitizer
report, the CLI, and (slow) real crashes in compiled graphs on CPU.

Most tests drive ``locate`` with tiny fake commands that print the runtime's lines and
then die, so that every rule is checked in milliseconds; the slow tests compile
``examples/locate_cpu_crash.py`` for real.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time

import pytest
from click.testing import CliRunner

from aoti_debug.cli import main
from aoti_debug.format import schema
from aoti_debug.format.schema import names_line
from aoti_debug.locate import Verdict, child_environment, judge, locate, runner, sanitizer, sources
from aoti_debug.locate.trace import Frame, Trace

from .conftest import REPO

PY = sys.executable
EXAMPLE = os.path.join(REPO, "examples", "locate_cpu_crash.py")
INDEXING = os.path.join(REPO, "examples", "locate_ima_indexing.py")
def _script(*lines: str, then: str = "os.abort()") -> list[str]:
    """A command that prints the given stderr lines, flushed, then does ``then``."""
    body = "".join(f"sys.stderr.write({line!r} + '\\n'); sys.stderr.flush()\n" for line in lines)
    return [PY, "-c", f"import os, sys, time\n{body}{then}\n"]


def _before(n, kernel, graph="graph0", call=0):
    return names_line("before", n, graph, kernel, call)


def _after(n, kernel, graph="graph0", call=0):
    return names_line("after", n, graph, kernel, call)


# ----------------------------------------------------------------------------- trace
def test_trace_tracks_launches_in_flight_and_first_error():
    t = Trace()
    for line in [_before(1, "k0"), _after(1, "k0"), _before(2, "k1"), "hello",
                 "[aoti_debug] error after launch=2 kernel=k1: CUDA error: an illegal memory access was encountered",
                 "[aoti_debug] error after launch=3 kernel=k2: later"]:
        t.feed(line)
    assert (t.started, t.completed) == (2, 1)
    assert [s.kernel for s in t.unfinished()] == ["k1"]
    state, message = t.error
    assert state.kernel == "k1" and state.completed_before == 1 and message.startswith("CUDA error")
    assert list(t.tail) == ["hello"]


def test_trace_nested_launches_innermost_first_and_frames():
    t = Trace()
    for line in [_before(1, "outer_op"), _before(2, "inner"), _after(2, "inner"), _before(3, "inner2"),
                 '  File "/tmp/x/wrapper.py", line 12, in call', '  File "/tmp/y.py", line 3 in f']:
        t.feed(line)
    assert [s.kernel for s in t.unfinished()] == ["inner2", "outer_op"]
    assert [(f.file, f.line) for f in t.frames] == [("/tmp/x/wrapper.py", 12), ("/tmp/y.py", 3)]


def test_trace_separate_runtime_counters_do_not_collide():
    """The Python and the C++ runtime count launches separately: (launch, kernel) keys."""
    t = Trace()
    for line in [_before(1, "py_k"), _before(1, "cpp_k", graph="graph1"), _after(1, "cpp_k", graph="graph1")]:
        t.feed(line)
    assert [s.kernel for s in t.unfinished()] == ["py_k"]


def test_trace_reads_graph_site_and_arg_lines():
    t = Trace()
    t.feed(schema.graph_line("graph0", "python", "/tmp/dir with space/w.py"))
    t.feed(_before(1, "k"))
    t.feed(schema.site_line(1, 42, "[sin, y], Original ATen: [aten.sin]"))
    t.feed(schema.arg_line(1, {"name": "buf0", "role": "input", "kind": "tensor", "dtype": "float32",
                               "shape": [8, 4], "stride": [4, 1], "offset": 0, "device": "cuda:0"}))
    t.feed(schema.arg_line(1, {"name": "ks0", "role": "input", "kind": "symint", "value": 5}))
    (state,) = t.unfinished()
    t.feed(schema.graph_line("graph0", "cpp", "/tmp/m.so"))
    assert t.graph_files("graph0/sub") == [("cpp", "/tmp/m.so"), ("python", "/tmp/dir with space/w.py")]
    assert state.line == 42 and state.source.startswith("[sin, y]")
    assert state.args[0] == {"name": "buf0", "role": "input", "kind": "tensor", "dtype": "float32",
                             "shape": [8, 4], "stride": [4, 1], "offset": 0, "device": "cuda:0"}
    assert state.args[1]["value"] == "5"


# ----------------------------------------------------------------------------- verdict rules
def _judge(lines, returncode=0, timed_out=False, timeout=None):
    t = Trace()
    for line in lines:
        t.feed(line)
    return judge(t, runner.Outcome(returncode, timed_out, 0.1), ["cmd"], timeout)


def test_judge_error_line_wins_over_unfinished():
    v = _judge([_before(1, "a"), _after(1, "a"), _before(2, "b"),
                "[aoti_debug] error after launch=2 kernel=b: CUDA error: an illegal memory access was encountered",
                _before(3, "c")], returncode=1)
    assert v.status == "located" and v.kind == "device-error" and v.kernel == "b" and v.exit_code == 1
    assert v.completed == 1 and not v and "illegal memory access" in v.error
    assert [u.kernel for u in v.unfinished] == ["c"]


def test_judge_signal_names_innermost_unfinished_launch():
    v = _judge([_before(1, "a"), _after(1, "a"), _before(2, "b"), "Fatal Python error: Segmentation fault"],
               returncode=-11)
    assert (v.status, v.kind, v.kernel, v.signal, v.completed) == ("located", "signal", "b", "SIGSEGV", 1)
    assert v.error == "Fatal Python error: Segmentation fault"


def test_judge_exception_and_device_error_text():
    v = _judge([_before(1, "a"), "Traceback (most recent call last):", "RuntimeError: boom"], returncode=1)
    assert (v.kind, v.error) == ("exception", "RuntimeError: boom")
    v = _judge([_before(1, "t"), "RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered"],
               returncode=1)
    assert v.kind == "device-error"


def test_judge_hang_and_unattributed_timeout():
    v = _judge([_before(1, "a"), _after(1, "a"), _before(2, "slow")], returncode=None, timed_out=True, timeout=5)
    assert (v.status, v.kind, v.kernel, v.exit_code) == ("located", "hang", "slow", 1)
    v = _judge([_before(1, "a"), _after(1, "a")], returncode=None, timed_out=True, timeout=5)
    assert v.status == "unattributed" and v.exit_code == 3 and "timeout" in v.reason


def test_judge_unattributed_reasons():
    v = _judge(["RuntimeError: not compiled"], returncode=1)
    assert v.status == "unattributed" and "before any instrumented launch" in v.reason
    assert v.error == "RuntimeError: not compiled" and v.output_tail == ["RuntimeError: not compiled"]
    v = _judge([_before(1, "a"), _after(1, "a"), "ValueError: later"], returncode=1)
    assert "every instrumented launch completed (1)" in v.reason and "launch 1 (a)" in v.reason


def test_judge_clean_notes_abandoned_launch():
    v = _judge([_before(1, "a"), _before(2, "b"), _after(2, "b")], returncode=0)
    assert v and v.status == "clean" and v.exit_code == 0 and "launch 1 a" in v.notes[0]
    assert "nothing to locate" in str(v)


def test_verdict_round_trips_through_dict():
    v = _judge([_before(1, "a"), _before(2, "b")], returncode=-6)
    v.source = sources.Source(file="/w.py", line=3, nodes=["x"])
    again = Verdict.from_dict(json.loads(json.dumps(v.to_dict())))
    assert again.to_dict() == v.to_dict()
    assert "located: launch 2 b" in str(again) and "SIGABRT" in again.render()


# ----------------------------------------------------------------------------- sources
WRAPPER = textwrap.dedent('''\
    from torch._inductor.async_compile import AsyncCompile
    async_compile = AsyncCompile()
    # kernel path: /tmp/kernels/abc.py
    # Topologically Sorted Source Nodes: [sin, y], Original ATen: [aten.sin, aten.add]
    # Source node to ATen node mapping:
    triton_poi_fused_add_sin_0 = async_compile.triton('triton_poi_fused_add_sin_0', \'\'\'
    @triton_heuristics.pointwise(size_hints={'x': 32})
    @triton.jit
    def triton_poi_fused_add_sin_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
        pass
    \'\'\', device_str='cuda')
    # Original path: /home/me/repro.py:38
    oob_store_kernel_0 = async_compile.triton('oob_store_kernel', \'\'\'
    @triton_heuristics.user_autotune(
        configs=[], filename=__file__, custom_kernel=True,
    )
    @triton.jit
    def oob_store_kernel(in_ptr, out_ptr, n, shift, BLOCK: tl.constexpr):
        pass
    \'\'\', device_str='cuda')
    def call(args):
        # Topologically Sorted Source Nodes: [sin, y], Original ATen: [aten.sin, aten.add]
        _aoti_debug.launch(('', 'triton_poi_fused_add_sin_0', 'triton_poi_fused_add_sin_0', (), ()), ())
        triton_poi_fused_add_sin_0.run(arg0_1, buf0, 32, stream=stream0)
        _aoti_debug.done(('', 'triton_poi_fused_add_sin_0', 'triton_poi_fused_add_sin_0', (), ()), ())
        _aoti_debug.launch(('', 'oob_store_kernel_0', 'oob_store_kernel_0', (), ()), ())
        oob_store_kernel_0.run(buf0, buf1, 32, 1, stream=stream0)
        _aoti_debug.done(('', 'oob_store_kernel_0', 'oob_store_kernel_0', (), ()), ())
        _aoti_debug.launch(('', 'triton_poi_fused_add_sin_0', 'triton_poi_fused_add_sin_0', (), ()), ())
        triton_poi_fused_add_sin_0.run(buf1, buf2, 32, stream=stream0)
        _aoti_debug.done(('', 'triton_poi_fused_add_sin_0', 'triton_poi_fused_add_sin_0', (), ()), ())
''')


@pytest.fixture
def wrapper_file(tmp_path):
    p = tmp_path / "cabc.py"
    p.write_text(WRAPPER)
    return str(p)


def test_sources_generated_kernel_call_comments_and_definition(wrapper_file):
    src = sources.find("triton_poi_fused_add_sin_0", wrapper_files=[wrapper_file], line=23)
    assert (src.file, src.line, src.found_by) == (wrapper_file, 24, "runtime")
    assert src.code.startswith("triton_poi_fused_add_sin_0.run(arg0_1")
    assert src.nodes == ["sin", "y"] and src.aten == ["aten.sin", "aten.add"]
    assert src.kernel_file == "/tmp/kernels/abc.py" and src.definition == f"{wrapper_file}:6"
    assert src.user_function is None and src.other_lines == []


def test_sources_second_call_by_hint_or_call_count(wrapper_file):
    assert sources.find("triton_poi_fused_add_sin_0", wrapper_files=[wrapper_file], line=29).line == 30
    by_count = sources.find("triton_poi_fused_add_sin_0", wrapper_files=[wrapper_file], call=3)
    assert by_count.line == 30 and by_count.other_lines == [24]


def test_sources_user_kernel_from_traceback(wrapper_file, tmp_path):
    user = tmp_path / "user.py"
    user.write_text("oob_store_kernel_0(1)\n")  # the user's own file mentions it too: ignored
    frames = [Frame(str(user), 1, "f"), Frame(wrapper_file, 28, "call")]
    src = sources.find("oob_store_kernel_0", frames=frames)
    assert (src.file, src.line, src.found_by) == (wrapper_file, 27, "traceback")  # frame at its done line
    assert src.user_function == "oob_store_kernel" and src.user_source == "/home/me/repro.py:38"
    assert sources.find("oob_store_kernel_0", provenance="mymod.oob_store_kernel").user_function == \
        "mymod.oob_store_kernel"


def test_sources_cpp_wrapper_block_and_so_path(tmp_path):
    cpp = tmp_path / "model.wrapper.cpp"
    cpp.write_text(textwrap.dedent('''\
        extern "C"  void  cpp_fused_add_0(const float* in_ptr0,
                               float* out_ptr0);
        void run() {
            // Topologically Sorted Source Nodes: [z], Original ATen: [mylib.boom]
            { static constexpr ::aoti_debug_rt_1::Site aoti_debug_site = {"", "torch.ops.mylib.boom.default"}; ::aoti_debug_rt_1::launch(aoti_debug_site, {}); }
            RAIIAtenTensorHandle buf2;
            {
                aoti_torch_call_dispatcher("mylib::boom", "", dispatch_vars.data());
            }
            { static constexpr ::aoti_debug_rt_1::Site aoti_debug_site = {"", "torch.ops.mylib.boom.default"}; ::aoti_debug_rt_1::done(aoti_debug_site, {}); }
            cpp_fused_add_0((const float*)(buf2.data_ptr()), (float*)(buf3.data_ptr()));
        }
    '''))
    (tmp_path / "other.kernel.cpp").write_text('extern "C"  void  cpp_fused_add_0(const float* in_ptr0,\n{\n}\n')
    so = str(tmp_path / "model.wrapper.so")
    src = sources.find("torch.ops.mylib.boom.default", wrapper_files=[so])
    assert (src.file, src.line) == (str(cpp), 8) and src.aten == ["mylib.boom"]
    src = sources.find("cpp_fused_add_0", wrapper_files=[so])
    assert src.line == 11 and src.definition == f"{tmp_path / 'other.kernel.cpp'}:1"


def test_sources_unreadable_runtime_file_is_still_reported():
    src = sources.find("k", wrapper_files=["/nonexistent/w.py"], line=7)
    assert (src.file, src.line, src.code) == ("/nonexistent/w.py", 7, None)


# ----------------------------------------------------------------------------- sanitizer
SANITIZER_OUTPUT = textwrap.dedent('''\
    ========= COMPUTE-SANITIZER
    ========= Program hit cudaErrorPeerAccessUnsupported (error 217) due to "peer access is not supported" on CUDA API call to cudaDeviceEnablePeerAccess.
    =========     Saved host backtrace up to driver entry point at error
    =========
    ========= Invalid __global__ write of size 4 bytes
    =========     at oob_store_kernel+0x1b0 in /tmp/repro.py:21
    =========     by thread (0,0,0) in block (0,0,0)
    =========     Address 0x7f3a00000000 is out of bounds
    =========     Saved host backtrace up to driver entry point at kernel launch time
    =========         Host Frame: a
    =========         Host Frame: b
    =========         Host Frame: c
    =========         Host Frame: d
    =========         Host Frame: e
    =========         Host Frame: f
    =========         Host Frame: g
    =========         Host Frame: h
    =========
    ========= ERROR SUMMARY: 2 errors
''')


def test_sanitizer_prefers_memory_errors_and_trims_backtrace():
    c = sanitizer.Collector()
    assert not c.feed("ordinary output")
    for line in SANITIZER_OUTPUT.splitlines():
        assert c.feed(line)
    report = c.first_error()
    assert report[0] == "Invalid __global__ write of size 4 bytes"
    assert report[1] == "at oob_store_kernel+0x1b0 in /tmp/repro.py:21"
    assert report[-1] == "... 2 more host frames" and sum("Host Frame" in r for r in report) == 6
    assert sanitizer.kernel_of(report) == "oob_store_kernel"
    assert sanitizer.kernel_of(["Invalid", "at 0x2c0 in /tmp/k.py:45:triton_poi_fused_0"]) == "triton_poi_fused_0"


def _fake_sanitizer(tmp_path):
    """A ``compute-sanitizer`` that prints a report and runs the command after ``--tool memcheck``."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "compute-sanitizer"
    report = tmp_path / "report.txt"
    report.write_text(SANITIZER_OUTPUT)
    exe.write_text(f"#!/bin/sh\ncat {report}\nshift 2\nexec \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(bindir)


def test_sanitizer_rerun_attaches_first_error(tmp_path):
    env = dict(os.environ, PATH=_fake_sanitizer(tmp_path) + os.pathsep + os.environ["PATH"])
    v = locate(_script(_before(1, "oob_store_kernel_0")), use_sanitizer=True, env=env)
    assert v.kernel == "oob_store_kernel_0" and v.sanitizer.kernel == "oob_store_kernel"
    assert v.sanitizer.report[0].startswith("Invalid __global__ write")
    assert "compute-sanitizer (first error)" in v.render()


def test_sanitizer_missing_or_clean(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no compute-sanitizer there
    v = locate(_script(_before(1, "k")), use_sanitizer=True, env=env)
    assert "not on the PATH" in v.sanitizer.note
    v = locate([PY, "-c", "pass"], use_sanitizer=True)
    assert v and v.sanitizer is None and any("ran clean" in n for n in v.notes)


# ----------------------------------------------------------------------------- runner / env
def test_child_environment_forces_names_sync_and_every_kernel():
    env = child_environment({"AOTI_DEBUG_KERNELS": "triton_*", "AOTI_DEBUG_PHASES": "before",
                             "AOT_INDUCTOR_FILTERED_KERNELS_TO_PRINT": "x", "PATH": "/bin"},
                            caching_allocator=False)
    assert env["AOTI_DEBUG_LEVEL"] == "names" and env["AOTI_DEBUG_SYNC"] == "1"
    assert env["AOTI_DEBUG_PHASES"] == "before,after" and env["CUDA_LAUNCH_BLOCKING"] == "1"
    assert "AOTI_DEBUG_KERNELS" not in env and "AOT_INDUCTOR_FILTERED_KERNELS_TO_PRINT" not in env
    assert env["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1" and env["PYTHONFAULTHANDLER"] == "1"
    assert env["AOTI_DEBUG_NAMES_ARGS"] == "1"


def test_runner_timeout_stops_the_whole_process_group(tmp_path):
    marker = tmp_path / "grandchild.pid"
    code = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            f"open({str(marker)!r}, 'w').write(str(p.pid)); print('started', flush=True); time.sleep(60)")
    seen = []
    out = runner.run([PY, "-c", code], os.environ, lambda s, line: seen.append((s, line)), timeout=2)
    assert out.timed_out and out.returncode is None and out.duration_s < 20
    assert ("stdout", "started") in seen
    pid = int(marker.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid), "the command's own child outlived the timeout"


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return not f.read().rsplit(") ", 1)[1].startswith("Z")
    except OSError:
        return False


def test_runner_command_not_found():
    with pytest.raises(runner.CommandError, match="command not found: no-such-command-xyz"):
        runner.run(["no-such-command-xyz"], os.environ, lambda s, line: None)


def test_locate_package_does_not_import_torch():
    code = ("import sys, aoti_debug.locate, aoti_debug.cli.locate; "
            "print(sorted(m for m in ('torch', 'pandas') if m in sys.modules))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTI_DEBUG")}
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- CLI
def _cli(*args):
    return CliRunner().invoke(main, ["locate", *args], catch_exceptions=False)


def test_cli_located_text_and_json():
    cmd = _script(_before(1, "a"), _after(1, "a"), _before(2, "cpp_fused_bad_1"), "Fatal Python error: Aborted")
    r = _cli("-q", "--", *cmd)
    assert r.exit_code == 1, r.output
    assert "located: launch 2 cpp_fused_bad_1 (graph0)" in r.output and "SIGABRT" in r.output
    r = _cli("-q", "--format", "json", "--", *cmd)
    d = json.loads(r.stdout)
    assert r.exit_code == 1 and d["exit_code"] == 1 and d["launch"]["kernel"] == "cpp_fused_bad_1"
    assert d["completed"] == 1 and d["signal"] == "SIGABRT" and d["kind"] == "signal"


def test_cli_clean_unattributed_hang():
    r = _cli("-q", "--", PY, "-c", "print('fine')")
    assert r.exit_code == 0 and "nothing to locate" in r.output
    r = _cli("-q", "--", PY, "-c", "raise SystemExit('bad input file')")
    assert r.exit_code == 3 and "could not be attributed" in r.output and "why" in r.output
    r = _cli("-q", "--timeout", "1.5", "--", *_script(_before(1, "spin"), then="time.sleep(60)"))
    assert r.exit_code == 1 and "launch 1 spin" in r.output and "stopped at the timeout" in r.output


def test_cli_echoes_command_output_unless_quiet():
    r = _cli("--", PY, "-c", "print('from the command')")
    assert "from the command" in r.stderr and "from the command" not in r.stdout
    r = _cli("-q", "--", PY, "-c", "print('from the command')")
    assert "from the command" not in r.stderr


@pytest.mark.parametrize("args,message", [
    ([], "Missing argument"),
    (["--timeout", "0", "--", "true"], "--timeout"),
    (["--format", "xml", "--", "true"], "--format"),
    (["--", "no-such-command-xyz"], "command not found: no-such-command-xyz"),
])
def test_cli_bad_usage_exits_2_with_one_line(args, message):
    r = CliRunner().invoke(main, ["locate", "-q", *args])
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output


def test_cli_help_documents_exit_codes():
    r = _cli("--help")
    assert r.exit_code == 0 and "--timeout" in r.output and "3  CMD failed" in r.output


# ----------------------------------------------------------------------------- real crashes (CPU)
@pytest.fixture(scope="module")
def cache_env(tmp_path_factory):
    """One Inductor cache for this module's compiles (later runs hit the FX graph cache)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTI_DEBUG")}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("inductor_cache"))
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(scope="module")
def python_abort(cache_env):
    return locate([PY, EXAMPLE, "--wrapper", "python", "--crash", "abort"], env=cache_env, timeout=300)


@pytest.mark.slow
def test_python_wrapper_abort_in_custom_op_is_named(python_abort):
    v = python_abort
    assert v.status == "located" and v.exit_code == 1, v.render()
    assert v.kernel == "torch.ops.locate_demo.boom.default" and v.kind == "signal" and v.signal == "SIGABRT"
    assert v.completed == 1 and v.launch.launch == 2  # the Inductor kernel before it completed
    src = v.source
    assert src.file.endswith(".py") and "torch.ops.locate_demo.boom.default(" in src.code
    assert "locate_demo.boom" in src.aten
    assert v.wrapper == "python" and src.found_by == "runtime"
    # provenance: the user's line the launch was compiled from
    assert v.launch.user_line == "locate_cpu_crash.py:55 in forward: z = boom(y)", v.render()
    assert "user code    locate_cpu_crash.py:55" in v.render()
    (arg,) = [a for a in v.launch.args if a["kind"] == "tensor"]
    assert (arg["shape"], arg["stride"], arg["dtype"], arg["device"]) == ([8, 4], [4, 1], "float32", "cpu")


@pytest.mark.slow
def test_python_wrapper_segfault_with_dynamic_shapes(cache_env):
    v = locate([PY, EXAMPLE, "--crash", "segv", "--dynamic", "--rows", "5"], env=cache_env, timeout=300)
    assert v.kernel == "torch.ops.locate_demo.boom.default" and v.signal == "SIGSEGV", v.render()
    assert v.source.code and "locate_demo.boom" in v.source.code
    (arg,) = [a for a in v.launch.args if a["kind"] == "tensor"]
    assert arg["shape"] == [5, 4]  # the run-time shape, not a symbol


@pytest.mark.slow
def test_python_wrapper_clean_run_exits_0(cache_env, python_abort):
    r = subprocess.run([PY, "-m", "aoti_debug.cli", "locate", "-q", "--format", "json", "--",
                        PY, EXAMPLE, "--crash", "none"], env=cache_env, capture_output=True, text=True, timeout=300)
    d = json.loads(r.stdout)
    assert r.returncode == 0 and d["status"] == "clean" and d["completed"] == 3, r.stderr[-2000:]


@pytest.mark.slow
def test_segfault_inside_generated_cpp_kernel_is_named(cache_env):
    """An out-of-range index with Inductor's bounds assert off: the C++ kernel itself segfaults."""
    v = locate([PY, INDEXING, "--device", "cpu"], env=cache_env, timeout=300)
    assert v.status == "located" and v.signal == "SIGSEGV", v.render()
    assert v.kernel.startswith("cpp_fused_") and "index" in v.kernel
    assert v.kernel + "(" in v.source.code and v.source.definition
    idx = [a for a in v.launch.args if a.get("dtype") == "int64"]
    assert idx and idx[0]["shape"] == [16], v.launch.args


@pytest.mark.slow
def test_aoti_so_abort_in_custom_op_is_named(cache_env):
    v = locate([PY, EXAMPLE, "--wrapper", "aoti", "--crash", "abort"], env=cache_env, timeout=400)
    assert v.started > 0, f"the AOTInductor .so printed no names lines: {v.error}"
    assert v.status == "located" and "locate_demo" in v.kernel and "boom" in v.kernel, v.render()
    assert v.signal == "SIGABRT" and v.completed >= 1
    if v.wrapper == "cpp":  # the C++ runtime printed the graph line: the source is found
        assert v.source.file and v.source.line
    assert v.launch.user_line and v.launch.user_line.startswith("locate_cpu_crash.py:"), v.render()
