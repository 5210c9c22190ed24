"""Run a command, hand every output line to a callback as it arrives, stop it at a timeout.

The command runs in a session of its own (so that a timeout or Ctrl-C can stop it and
every process it started) with stdin closed: ``locate`` is for reproductions, not for
interactive programs.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import subprocess
import threading
import time
from typing import Callable, Mapping, Sequence

from ..errors import AotiDebugError

#: After the command exits, keep reading for this long for output still in the pipes
#: (a grandchild, e.g. an Inductor compile worker, may hold them open).
DRAIN_S = 2.0
#: Between SIGTERM and SIGKILL when the command is stopped.
KILL_GRACE_S = 5.0


class CommandError(AotiDebugError):
    """The command cannot be started (not found, not executable)."""


@dataclasses.dataclass
class Outcome:
    """How the command ended."""

    returncode: int | None
    """Its exit status (negative: killed by that signal); None when we stopped it."""
    timed_out: bool
    duration_s: float

    @property
    def signal(self) -> str | None:
        """The signal that killed it, by name; also for a shell's ``128+N`` convention."""
        rc = self.returncode
        if rc is None:
            return None
        if rc < 0:
            return _signal_name(-rc)
        if 128 < rc < 128 + 65:
            return _signal_name(rc - 128)
        return None


def _signal_name(num: int) -> str | None:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def run(
    cmd: Sequence[str],
    env: Mapping[str, str],
    on_line: Callable[[str, str], None],
    timeout: float | None = None,
    cwd: str | None = None,
) -> Outcome:
    """Run ``cmd``; call ``on_line(stream, line)`` (stream ``stdout``/``stderr``) in this thread.

    Raises:
        CommandError: the command cannot be started.
    """
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(cmd), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )
    except FileNotFoundError:
        raise CommandError(f"command not found: {cmd[0]}") from None
    except PermissionError:
        raise CommandError(f"command not executable: {cmd[0]}") from None
    except OSError as e:
        raise CommandError(f"cannot start {cmd[0]}: {e}") from None

    lines: queue.Queue = queue.Queue()
    readers = [
        threading.Thread(target=_pump, args=(proc.stdout, "stdout", lines), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, "stderr", lines), daemon=True),
    ]
    for t in readers:
        t.start()
    open_streams = len(readers)
    deadline = None if timeout is None else start + timeout
    timed_out = False
    exited_at: float | None = None
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and (not open_streams or now - exited_at > DRAIN_S):
                break
            if exited_at is None and deadline is not None and now >= deadline:
                timed_out = True
                _stop(proc)
                exited_at = time.monotonic()
                continue
            wait = 0.1 if deadline is None else max(0.0, min(0.1, deadline - now))
            try:
                stream, line = lines.get(timeout=wait)
            except queue.Empty:
                continue
            if line is None:
                open_streams -= 1
                continue
            on_line(stream, line)
        # Lines already queued when we stopped draining are still the command's output.
        while True:
            try:
                stream, line = lines.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                on_line(stream, line)
        returncode = proc.wait()
    except BaseException:  # Ctrl-C or a failing callback: never leave the command running
        _stop(proc)
        raise
    return Outcome(
        returncode=None if timed_out else returncode,
        timed_out=timed_out,
        duration_s=time.monotonic() - start,
    )


def _pump(pipe, name: str, out: queue.Queue) -> None:
    try:
        for raw in iter(pipe.readline, b""):
            out.put((name, raw.decode("utf-8", errors="replace").rstrip("\r\n")))
    except (OSError, ValueError):
        pass
    finally:
        out.put((name, None))


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the command's process group, then SIGKILL whatever is left of it."""
    _killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    # Also when the leader has gone: nothing it started may outlive it.
    _killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
