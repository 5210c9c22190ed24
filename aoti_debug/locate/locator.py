"""``locate``: run a command at level ``names`` with a sync after every launch and judge how it ended.

Attribution rules, in order:

1. a post-launch sync failed (the runtime's ``error after launch=N`` line): launch N;
2. the command failed (non-zero exit, a signal, or stopped at the timeout) while
   launches were in flight: the innermost one, i.e. the latest that started and never
   completed;
3. it failed with nothing in flight: not attributable (the fault is outside the
   instrumented launches, or nothing was instrumented), and the verdict says which.
"""

from __future__ import annotations

import os
import re
from typing import Callable, Mapping, Sequence

from .. import config
from . import runner, sanitizer, sources
from .trace import Trace
from .verdict import Verdict

#: Messages of a device fault, best first (PyTorch, Triton and the CUDA driver's words).
_DEVICE_ERROR = re.compile(
    r"(CUDA error: .*|CUDA driver error: .*|.*illegal memory access.*|.*device-side assert triggered.*|"
    r".*misaligned address.*|.*unspecified launch failure.*|.*illegal instruction.*|CUBLAS_STATUS_\w+.*)",
    re.IGNORECASE,
)
_FATAL = re.compile(r"^(Fatal Python error: .*|Segmentation fault.*|.*core dumped.*)")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)\b(?::.*)?$")
#: Lines of the command's own output shown with an unattributed verdict.
TAIL_SHOWN = 15


def child_environment(base: Mapping[str, str], caching_allocator: bool = True) -> dict[str, str]:
    """The command's environment: level ``names``, a sync after each launch, every kernel."""
    env = config.child_env(base, level="names", sync=True, phases="before,after", names_args=True)
    # A kernel filter would hide the launch that faults.
    for name in (config.ENV_KERNELS, config.ENV_TORCH_KERNELS):
        env.pop(name, None)
    # Launch errors surface at the launch rather than at a later call.
    env["CUDA_LAUNCH_BLOCKING"] = "1"
    # A segfault or abort still prints the Python stack, which reaches the wrapper's line.
    env.setdefault("PYTHONFAULTHANDLER", "1")
    env["PYTHONUNBUFFERED"] = "1"
    if not caching_allocator:
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    return env


def locate(
    cmd: Sequence[str],
    timeout: float | None = None,
    caching_allocator: bool = True,
    use_sanitizer: bool = False,
    echo: Callable[[str], None] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> Verdict:
    """Run ``cmd`` instrumented and name the kernel it faulted in.

    Args:
        echo: called with every line of the command's own output (not aoti_debug's).
        env: the base environment (default ``os.environ``).

    Raises:
        runner.CommandError: the command cannot be started.
    """
    child_env = child_environment(os.environ if env is None else env, caching_allocator)
    trace = Trace()

    def on_line(stream: str, line: str) -> None:
        if not trace.feed(line) and echo is not None:
            echo(line)

    outcome = runner.run(cmd, child_env, on_line, timeout=timeout, cwd=cwd)
    verdict = judge(trace, outcome, cmd, timeout)
    if verdict.status == "located" and verdict.launch is not None:
        files = trace.graph_files(verdict.launch.graph)
        verdict.source = sources.find(
            verdict.launch.kernel, wrapper_files=[f for _, f in files], line=verdict.launch.line,
            provenance=verdict.launch.source, frames=list(trace.frames), call=verdict.launch.call,
        )
        kinds = {f: w for w, f in files}
        verdict.wrapper = kinds.get(verdict.source.file or "") or (files[0][0] if files else None)
    if use_sanitizer:
        if verdict.status == "clean":
            verdict.notes.append("--sanitizer: not run, the command ran clean")
        else:
            # The re-run prints the runtime's lines too; only the command's own are echoed.
            own = None if echo is None else (lambda _s, line: None if line.startswith("[aoti_debug] ") else echo(line))
            verdict.sanitizer = sanitizer.run(cmd, child_env, timeout, on_other=own)
    return verdict


def judge(trace: Trace, outcome: runner.Outcome, cmd: Sequence[str], timeout: float | None = None) -> Verdict:
    """The verdict on a finished run (rules in the module docstring)."""
    v = Verdict(
        status="clean", command=list(cmd), started=trace.started, completed=trace.completed,
        returncode=outcome.returncode, signal=outcome.signal, timed_out=outcome.timed_out,
        duration_s=round(outcome.duration_s, 3), last_completed=trace.last_completed,
    )
    unfinished = trace.unfinished()
    failed = outcome.timed_out or outcome.returncode != 0
    if trace.error is not None:
        state, message = trace.error
        v.status, v.kind, v.launch, v.error = "located", "device-error", state, message
        v.completed = trace.completed_at_error or 0
        v.unfinished = [u for u in unfinished if u is not state]
        return v
    if failed and unfinished:
        state = unfinished[0]
        v.status, v.launch, v.unfinished = "located", state, unfinished[1:]
        v.completed = state.completed_before
        if outcome.timed_out:
            v.kind = "hang"
            v.error = f"stopped after {timeout:g}s (--timeout) while this launch was running"
        else:
            v.error = error_message(trace, outcome)
            if _DEVICE_ERROR.search(v.error or ""):
                v.kind = "device-error"
            else:
                v.kind = "signal" if outcome.signal else "exception"
        return v
    if failed:
        v.status = "unattributed"
        v.error = (f"stopped after {timeout:g}s (--timeout)" if outcome.timed_out
                   else error_message(trace, outcome))
        v.reason = _why_unattributed(trace, outcome)
        v.output_tail = [t for t in trace.tail if t.strip()][-TAIL_SHOWN:]
        return v
    if not trace.seen_any:
        v.notes.append("no instrumented launch ran: nothing was compiled (or loaded) with aoti_debug in this run")
    for u in unfinished[:3]:
        v.notes.append(
            f"launch {u.launch} {u.kernel} started and never completed, yet the command exited 0 "
            "(an exception the program caught?)"
        )
    return v


def _why_unattributed(trace: Trace, outcome: runner.Outcome) -> str:
    if not trace.seen_any:
        what = "was stopped" if outcome.timed_out else "failed"
        return (
            f"the command {what} before any instrumented launch ran: the fault is outside compiled code, "
            "or what ran was compiled without aoti_debug (an AOTInductor .so is instrumented when it is "
            "compiled: build it with AOTI_DEBUG_LEVEL=names, e.g. under aoti-debug locate)"
        )
    last = trace.last_completed
    after = f" after launch {last.launch} ({last.kernel}) completed" if last is not None else ""
    if outcome.timed_out:
        return f"it was stopped at the timeout{after}, with no instrumented launch running"
    return (
        f"every instrumented launch completed ({trace.completed}); the failure came{after}, outside "
        "the instrumented launches (eager PyTorch, an uninstrumented kernel, or the program's own code)"
    )


def error_message(trace: Trace, outcome: runner.Outcome) -> str | None:
    """The best one-line description of the failure in the command's output."""
    lines = [t.strip() for t in trace.tail if t.strip()]
    for pattern in (_DEVICE_ERROR, _FATAL):
        for text in lines:
            m = pattern.search(text)
            if m and not text.startswith("File "):
                return _short(text)
    for text in reversed(lines):
        if _EXCEPTION.match(text):
            return _short(text)
    if outcome.signal:
        return f"killed by {outcome.signal}"
    if outcome.returncode:
        last = f": {_short(lines[-1])}" if lines else ""
        return f"exit status {outcome.returncode}{last}"
    return None


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
