"""Replay survives the kernel it judges (``aoti_debug.replay.isolate``).

What must hold: each replayed launch runs in a child process, so a kernel that aborts,
segfaults, stores far past its buffer (heap corruption), hangs or raises on the
reference's inputs gets a verdict of its own (``culprit (crashed: SIGABRT)``,
``culprit (hung: no result in 3 s)``, ``culprit (raised: ValueError: ...)``), in the
text, the JSON and the exit status, and the launches after it are still judged. The
child is not instrumented whatever this process's environment says. ``--timeout``
must be a positive, finite number of seconds.

The failing kernels are made by editing the generated source a dump's launches are
cut out of (:func:`edited`): a line before a launch's call (``os.abort()``,
``ctypes.string_at(0)``, ``time.sleep``, ``raise``), or a store far past its output
buffer in the C++ source of a CPU kernel (Python wrapper and ``cpp_wrapper=True``).
A is the edited copy, B the dump as recorded: launch by launch, every other launch agrees.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from typing import Callable

import pytest
import torch
from click.testing import CliRunner

import aoti_debug
from aoti_debug.cli import main as cli_main
from aoti_debug.replay import AGREES, CULPRIT, UNJUDGED, replay
from aoti_debug.replay.isolate import child_environment
from tests.conftest import dump_dir_restored, only_run

FIRST, MM, LAST = "cpp_fused_mul_sin_0", "extern_kernels.mm", "cpp_fused_add_relu_1"
CRASH_SIGNALS = ("SIGSEGV", "SIGABRT", "SIGBUS")


class _Small(torch.nn.Module):
    """Three launches: a C++ kernel, an extern ``mm``, a C++ kernel."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 16))

    def forward(self, x):
        return torch.relu((torch.sin(x) * 2) @ self.w) + 1


def _record(folder: str, cpp_wrapper: bool) -> str:
    torch.manual_seed(0)
    model, x = _Small(), torch.randn(16, 16)
    torch._dynamo.reset()
    with dump_dir_restored(), torch.no_grad(), aoti_debug.enabled(level="save", dump_dir=folder):
        torch.compile(model, options={"cpp_wrapper": cpp_wrapper})(x)
    return only_run(folder)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> str:
    """A Python-wrapper dump of :class:`_Small` (C++ CPU kernels), at level save."""
    return _record(str(tmp_path_factory.mktemp("crash") / "python"), cpp_wrapper=False)


# ------------------------------------------------------------------------- making kernels fail
def edited(run: str, dest, edit: Callable[[str], str]) -> str:
    """A copy of dump ``run`` at ``dest`` whose generated source (what replay cuts its
    launches out of) is ``edit(text)``: the dump's own copy of it, with the sha256 that
    run.json records updated, where the dump keeps one; else a copy of the file that
    run.json names, which run.json then names instead."""
    dest = str(dest)
    shutil.copytree(run, dest)
    info_path = os.path.join(dest, "run.json")
    with open(info_path) as f:
        info = json.load(f)
    for label, g in info["graphs"].items():
        name = os.path.basename(g["file"])
        copies = g.get("sources")
        if copies:
            (path,) = [os.path.join(d, name) for d, _, files in os.walk(os.path.join(dest, "sources")) if name in files]
        else:
            path = os.path.join(os.path.dirname(dest), f"{os.path.basename(dest)}-{name}")
            shutil.copyfile(g["file"], path)
            g["file"] = path
        with open(path, encoding="utf-8") as f:
            text = f.read()
        changed = edit(text)
        assert changed != text, f"the edit changed nothing in {label}'s source"
        with open(path, "w", encoding="utf-8") as f:
            f.write(changed)
        if copies:
            copies[name] = hashlib.sha256(changed.encode("utf-8")).hexdigest()
    with open(info_path, "w") as f:
        json.dump(info, f)
    return dest


def before_call(kernel: str, line: str) -> Callable[[str], str]:
    """Python wrapper: ``line`` runs right before the call of ``kernel``."""

    def edit(text: str) -> str:
        m = re.search(rf"^([ \t]*){re.escape(kernel)}\(", text, re.M)
        assert m is not None, f"no call of {kernel}"
        return f"{text[:m.start()]}{m.group(1)}{line}\n{text[m.start():]}"

    return edit


def in_cpp_body(kernel: str, code: str) -> Callable[[str], str]:
    """C++ kernel ``kernel`` first runs ``code`` (a Python wrapper's ``cpp_pybinding``
    source, or a C++ wrapper's definition)."""

    def edit(text: str) -> str:
        start = text.find(f"{kernel} = async_compile.cpp_pybinding(")
        name = "kernel" if start >= 0 else kernel  # a Python wrapper's pybinding renames it
        m = re.compile(rf'extern\s+"C"\s+void\s+{name}\s*\([^)]*\)\s*\{{').search(text, max(start, 0))
        assert m is not None, f"no definition of {kernel}"
        return f"{text[:m.end()]}\n    {code}\n{text[m.end():]}"

    return edit


def overrun(kernel: str, pointer: str = "out_ptr0") -> Callable[[str], str]:
    """C++ kernel ``kernel`` first stores far past the end of its buffer ``pointer``: it
    overwrites the heap after it until it reaches memory that is not mapped."""
    return in_cpp_body(kernel, f"{{ volatile float* aoti_debug_p = {pointer}; "
                               f"for (long i = 0; i < (1L << 30); ++i) aoti_debug_p[256 + i] = -1.0f; }}")


def _by_kernel(result) -> dict[str, object]:
    return {r.kernel: r for r in result.launches}


# ------------------------------------------------------------------------------------- tests
def test_an_aborting_kernel_is_a_culprit_and_the_next_are_judged(recorded, tmp_path):
    a = edited(recorded, tmp_path / "a", before_call(FIRST, "__import__('os').abort()"))
    result = replay(a, recorded, launches=[1, 2, 3])
    first, mm, last = (_by_kernel(result)[k] for k in (FIRST, MM, LAST))
    assert first.verdict == CULPRIT and first.failure == "crashed" and first.reason == "SIGABRT", str(result)
    assert first.label == "culprit (crashed: SIGABRT)"
    assert mm.verdict == AGREES and last.verdict == AGREES, str(result)
    assert result.exit_code == 1 and result.culprits == [first]
    text = str(result)
    assert f"launch 1 {FIRST} (graph0)" in text and "CULPRIT (crashed: SIGABRT)" in text, text
    assert f"culprit: launch 1 {FIRST}" in text and "crashed on B's own inputs (SIGABRT)" in text, text
    data = result.to_dict()["launches"][0]
    assert (data["verdict"], data["failure"], data["reason"], data["label"]) == \
        (CULPRIT, "crashed", "SIGABRT", "culprit (crashed: SIGABRT)")


def test_a_segfault_in_an_extern_launch_through_the_cli(recorded, tmp_path):
    a = edited(recorded, tmp_path / "a", before_call(MM, "__import__('ctypes').string_at(0)"))
    out = CliRunner().invoke(cli_main, ["replay", a, recorded, "-l", "1", "-l", "2", "-l", "3", "--format", "json"])
    assert out.exit_code == 1, out.output
    data = json.loads(out.output[out.output.index("{"):])
    verdicts = {r["kernel"]: r["label"] for r in data["launches"]}
    assert verdicts == {FIRST: AGREES, MM: "culprit (crashed: SIGSEGV)", LAST: AGREES}, out.output


def test_a_store_far_past_its_buffer_is_survived(recorded, tmp_path):
    """Heap corruption in a C++ CPU kernel (glibc aborts, or the store reaches unmapped memory)."""
    a = edited(recorded, tmp_path / "a", overrun(FIRST))
    result = replay(a, recorded, launches=[1, 2, 3])
    first, mm, last = (_by_kernel(result)[k] for k in (FIRST, MM, LAST))
    assert first.verdict == CULPRIT and first.failure == "crashed" and first.reason in CRASH_SIGNALS, str(result)
    assert mm.verdict == AGREES and last.verdict == AGREES, str(result)
    assert result.exit_code == 1


def test_a_hanging_kernel_is_named_within_the_timeout(recorded, tmp_path):
    a = edited(recorded, tmp_path / "a", before_call(FIRST, "__import__('time').sleep(1e9)"))
    started = time.monotonic()
    out = CliRunner().invoke(cli_main, ["replay", a, recorded, "-l", "1", "-l", "3", "--timeout", "3"])
    elapsed = time.monotonic() - started
    assert out.exit_code == 1, out.output
    assert f"launch 1 {FIRST} (graph0): CULPRIT (hung: no result in 3 s)" in out.output, out.output
    assert f"launch 3 {LAST} (graph0): AGREES" in out.output, out.output  # a fresh worker judged it
    assert elapsed < 120, elapsed  # far less than a hung kernel's forever


def test_an_exception_is_its_own_verdict(recorded, tmp_path):
    a = edited(recorded, tmp_path / "a", before_call(LAST, "raise ValueError('refused by the kernel')"))
    result = replay(a, recorded, launches=[1, 3])
    first, last = (_by_kernel(result)[k] for k in (FIRST, LAST))
    assert first.verdict == AGREES, str(result)
    assert last.label == "culprit (raised: ValueError: refused by the kernel)", str(result)
    assert "raised on B's own inputs (ValueError: refused by the kernel)" in str(result)


def test_the_child_is_not_instrumented(recorded, tmp_path, monkeypatch):
    leak = tmp_path / "leak"
    monkeypatch.setenv("AOTI_DEBUG_LEVEL", "save")
    monkeypatch.setenv("AOTI_DEBUG_DIR", str(leak))
    monkeypatch.setenv("AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER", "1")
    check = ("assert not [k for k in __import__('os').environ if k.startswith(('AOTI_DEBUG_', 'AOT_INDUCTOR_DEBUG'))],"
             " 'instrumented'")
    a = edited(recorded, tmp_path / "a", before_call(FIRST, check))
    result = replay(a, recorded, launches=[1])
    assert result.launches[0].verdict == AGREES, str(result)
    assert not leak.exists()
    env = child_environment({"AOTI_DEBUG_LEVEL": "save", "AOTI_DEBUG_KERNELS": "x", "PATH": "/bin"})
    assert env["PATH"] == "/bin" and env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    assert not any(k.startswith("AOTI_DEBUG_") for k in env)


def test_a_compile_failure_stays_unjudged(recorded, tmp_path):
    """Code that cannot be compiled says nothing about the kernel: unjudged, not a culprit."""
    a = edited(recorded, tmp_path / "a", in_cpp_body(FIRST, "this is not C++;"))
    result = replay(a, recorded, launches=[1, 3])
    first, last = (_by_kernel(result)[k] for k in (FIRST, LAST))
    assert first.verdict == UNJUDGED and first.failure is None, str(result)
    assert first.note.startswith(f"cannot compile {FIRST}"), str(result)
    assert last.verdict == AGREES and result.exit_code == 0, str(result)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_timeout_must_be_positive_and_finite(recorded, value):
    out = CliRunner().invoke(cli_main, ["replay", recorded, recorded, "-l", "1", "--timeout", value])
    assert out.exit_code == 2, out.output
    assert len(out.output.strip().splitlines()) == 1 and "Traceback" not in out.output
    assert "timeout" in out.output.lower(), out.output


@pytest.mark.slow
def test_cpp_wrapper_kernel_that_stores_past_its_buffer(tmp_path):
    run = _record(str(tmp_path / "cpp"), cpp_wrapper=True)
    a = edited(run, tmp_path / "a", overrun(FIRST))
    result = replay(a, run, launches=[1, 2, 3])
    first, mm, last = (result.launches[i] for i in range(3))
    assert first.kernel == FIRST and first.verdict == CULPRIT and first.reason in CRASH_SIGNALS, str(result)
    assert mm.verdict == UNJUDGED, str(result)  # a shim call: not cut out of a C++ wrapper
    assert last.kernel == LAST and last.verdict == AGREES, str(result)
    assert result.exit_code == 1
