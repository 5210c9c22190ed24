"""A replayed launch runs in a child process, so that its crash cannot stop the judging.

What the user sees::

    launch 7 cpp_fused_add_mul_0 (graph 0): CULPRIT (crashed: SIGABRT)
    launch 8 extern_kernels.mm (graph 0): AGREES

A kernel that stores past its buffer takes down the process that runs it (glibc's
``malloc(): corrupted top size``, exit 134), possibly at a later allocation, so replay
never runs one in its own process. :class:`Sandbox` starts one worker,
``python -m aoti_debug.replay.isolate``, that imports torch and Inductor's compile
front end once and then forks a fresh child per launch: the child executes the
launch's module source (text, as :meth:`Program.module_source` writes it: it compiles
the kernel, through Inductor's on-disk cache), loads the inputs the parent saved with
``torch.save`` in a directory the parent owns, runs ``launch`` and saves its outputs,
which the parent reads back with ``torch.load(weights_only=True)``. Each launch starts
from a worker that never ran a kernel, so heap corruption cannot leak into the next
one; a worker that is killed (a hung launch) is started again for the next.

The outcome of a launch (:class:`Outcome`): ``ok`` (its outputs), ``crashed`` (a
signal, or an exit without a result), ``hung`` (no result in the timeout), ``raised``
(an exception while it ran, with its one-line reason), or ``unrun``: it could not be
run (its module does not compile, the worker cannot start) and nothing is said about
the kernel. The worker's environment has no ``AOTI_DEBUG_*`` (nor torch's own
intermediate-value printer) variable, so nothing it compiles is instrumented, and
compiles in-process (``TORCHINDUCTOR_COMPILE_THREADS=1``: no compile pool per child).
POSIX only (``select`` on pipes).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from typing import Any, Literal

OK, CRASHED, HUNG, RAISED, UNRUN = "ok", "crashed", "hung", "raised", "unrun"

DEFAULT_TIMEOUT = 120.0
#: Compiling a launch's module (a C++ kernel's first replay compiles it) and starting
#: the worker (importing torch) are bounded by this or the timeout, whichever is longer.
SETUP_TIMEOUT = 600.0
#: Modules every launch's module imports: imported once by the worker, before it forks.
_PRELOAD = ("torch", "torch._inductor.async_compile", "torch._inductor.select_algorithm")
_ENV_PREFIX = "AOTI_DEBUG_"


@dataclasses.dataclass
class Outcome:
    """What running one launch in a child gave."""

    status: Literal["ok", "crashed", "hung", "raised", "unrun"]
    reason: str = ""
    """One line: the signal (``SIGABRT``), ``no result in 120 s``, the exception."""
    outputs: dict | None = None
    """``launch``'s return value (``ok`` only), on the CPU."""
    last_words: str = ""
    """The last line the child wrote to stdout/stderr (glibc's message of a corrupted
    heap), where it wrote one."""

    @property
    def failed(self) -> bool:
        """The kernel itself failed on these inputs (crashed, hung or raised)."""
        return self.status in (CRASHED, HUNG, RAISED)


def check_timeout(timeout: float) -> float:
    """``timeout`` as a float; ConfigError unless it is a positive, finite number of seconds."""
    from ..errors import ConfigError

    try:
        value = float(timeout)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"the replay timeout must be a positive, finite number of seconds (got {timeout!r})")
    return value


def child_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: ``env`` (this process's) without the variables that
    instrument a compile, compiling in-process, able to import this aoti_debug."""
    from ..config import ENV_TORCH_KERNELS, ENV_TORCH_LEVEL

    base = dict(os.environ if env is None else env)
    found = {k: v for k, v in base.items()
             if not k.startswith(_ENV_PREFIX) and k not in (ENV_TORCH_LEVEL, ENV_TORCH_KERNELS)}
    found["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    # torch.cuda.is_available() through NVML leaves CUDA uninitialised in the worker,
    # so that its forked children can use the device.
    found["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found["PYTHONPATH"] = os.pathsep.join(p for p in (root, found.get("PYTHONPATH", "")) if p)
    return found


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _seconds(s: float) -> str:
    return f"{s:g} s"


class Sandbox:
    """Runs launches in children of one worker process (see the module's docstring).

    Args:
        timeout: seconds a launch may run (after its module compiled) before it is
            called hung and its worker killed.
    """

    def __init__(self, timeout: float = DEFAULT_TIMEOUT):
        self.timeout = check_timeout(timeout)
        self._live = _Live()
        self._buf = b""
        self._jobs = 0
        # The worker stops when the sandbox is collected or the interpreter exits
        # (and by itself at the end of its input, should this process be killed).
        self._finalizer = weakref.finalize(self, _shutdown, self._live)

    @property
    def _proc(self) -> subprocess.Popen | None:
        return self._live.proc

    @property
    def _root(self) -> str | None:
        return self._live.root

    # ----------------------------------------------------------------- the worker
    def _worker(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._drop()
        if not self._finalizer.alive:  # closed, and used again
            self._finalizer = weakref.finalize(self, _shutdown, self._live)
        if self._live.root is None:
            self._live.root = tempfile.mkdtemp(prefix="aoti_debug_replay_")
        log = open(os.path.join(self._root, "worker.log"), "wb")
        try:
            # Its own session: a hung launch is killed with its worker, as one group.
            proc = subprocess.Popen([sys.executable, "-m", "aoti_debug.replay.isolate"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=log, env=child_environment(),
                                    start_new_session=True)
        except OSError as e:
            raise _Unrun(f"cannot start the replay worker ({sys.executable}): {e}") from None
        finally:
            log.close()
        self._live.proc, self._buf = proc, b""
        line = self._line(time.monotonic() + max(self.timeout, SETUP_TIMEOUT))
        if line != "ready":
            self._drop()
            raise _Unrun(f"the replay worker did not start ({self._tail('worker.log') or 'no output'})")
        return proc

    def _line(self, deadline: float) -> str | None:
        """The worker's next line; None when ``deadline`` passed first, "" at its end."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return ""
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode("utf-8", "replace").strip() or "-"

    def _drop(self) -> None:
        """Kills the worker (and a launch it runs), if any."""
        proc, self._live.proc = self._live.proc, None
        if proc is not None:
            _kill(proc)

    def _tail(self, name: str, folder: str | None = None) -> str:
        try:
            with open(os.path.join(folder or self._root or "", name), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 4096))
                lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return lines[-1][:200] if lines else ""

    def close(self) -> None:
        """Stops the worker and removes the launches' files."""
        self._finalizer()  # once: a second call does nothing

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----------------------------------------------------------------- a launch
    def run(self, source: str, kernel: str, origin: str, args: list[Any]) -> Outcome:
        """Runs ``launch(*args)`` of the module ``source`` in a child.

        Args:
            source: the module's text (:meth:`Program.module_source`).
            kernel, origin: the kernel's name and the generated source it was cut
                from (for messages, and the module's ``__file__``).
            args: ``launch``'s arguments (tensors, scalars, lists of tensors).
        """
        import torch

        try:
            self._worker()
        except _Unrun as e:
            return Outcome(UNRUN, str(e))
        assert self._root is not None and self._proc is not None and self._proc.stdin is not None
        self._jobs += 1
        job = os.path.join(self._root, f"launch-{self._jobs}")
        os.mkdir(job, 0o700)
        try:
            with open(os.path.join(job, "module.py"), "w", encoding="utf-8") as f:
                f.write(source)
            torch.save(list(args), os.path.join(job, "inputs.pt"))
            run_limit = self.timeout
            setup_limit = max(self.timeout, SETUP_TIMEOUT)
            request = {"dir": job, "kernel": kernel, "origin": origin,
                       "alarm": math.ceil(setup_limit + run_limit) + 60,
                       "cpp": "async_compile.cpp" in source}
            try:
                self._proc.stdin.write((json.dumps(request) + "\n").encode())
                self._proc.stdin.flush()
            except OSError as e:
                self._drop()
                return Outcome(UNRUN, f"the replay worker is gone ({e})")
            compiled = False
            deadline = time.monotonic() + setup_limit
            while True:
                line = self._line(deadline)
                if line is None:
                    self._drop()
                    if compiled:
                        return Outcome(HUNG, f"no result in {_seconds(run_limit)}", last_words=self._tail("log.txt", job))
                    return Outcome(UNRUN, f"compiling {kernel} gave no result in {_seconds(setup_limit)}")
                if line == "":
                    try:
                        code = self._proc.wait(timeout=5) if self._proc is not None else None
                    except subprocess.TimeoutExpired:
                        code = None
                    self._drop()
                    if code is not None and code < 0:  # a worker that ran the launch itself
                        return self._outcome(job, kernel, origin, {"signal": -code}, compiled)
                    if code is not None and os.path.exists(os.path.join(job, "result.json")):
                        return self._outcome(job, kernel, origin, {"exit": code}, compiled)
                    return Outcome(UNRUN, f"the replay worker died (exit status {code}; "
                                          f"{self._tail('worker.log') or 'no output'})")
                if line == "compiled":
                    compiled = True
                    deadline = time.monotonic() + run_limit
                    continue
                status = json.loads(line)
                break
            return self._outcome(job, kernel, origin, status, compiled)
        finally:
            shutil.rmtree(job, ignore_errors=True)

    def _outcome(self, job: str, kernel: str, origin: str, status: dict, compiled: bool) -> Outcome:
        import torch

        last = self._tail("log.txt", job)
        try:
            with open(os.path.join(job, "result.json"), encoding="utf-8") as f:
                result = json.load(f)
        except (OSError, ValueError):
            result = {}
        if "signal" in status:
            if not compiled:
                return Outcome(UNRUN, f"compiling {kernel} crashed ({_signal_name(status['signal'])})",
                               last_words=last)
            return Outcome(CRASHED, _signal_name(status["signal"]), last_words=last)
        if result.get("phase") == "compile":
            return Outcome(UNRUN, f"cannot compile {kernel} from {origin}: {result.get('error', '')}")
        if result.get("phase") == "run":
            return Outcome(RAISED, result.get("error", ""), last_words=last)
        if result.get("phase") == "save":
            return Outcome(UNRUN, f"the outputs of {kernel} cannot be saved: {result.get('error', '')}")
        if status.get("exit") != 0 or not result.get("ok"):
            if not compiled:
                return Outcome(UNRUN, f"compiling {kernel} ended with exit status {status.get('exit')}",
                               last_words=last)
            return Outcome(CRASHED, f"exit status {status.get('exit')} without a result", last_words=last)
        try:
            outputs = torch.load(os.path.join(job, "outputs.pt"), weights_only=True, map_location="cpu")
        except Exception as e:  # noqa: BLE001 - whatever the file holds, one line
            return Outcome(UNRUN, f"the outputs of {kernel} cannot be read back: {type(e).__name__}: {e}")
        return Outcome(OK, outputs=outputs, last_words=last)


class _Unrun(Exception):
    pass


class _Live:
    """The worker and the launches' folder: what the finalizer stops and removes."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.root: str | None = None


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass


def _shutdown(live: _Live) -> None:
    proc, root = live.proc, live.root
    live.proc = live.root = None
    if proc is not None:
        if proc.poll() is None and proc.stdin is not None:
            try:
                proc.stdin.close()  # the worker ends at the end of its input
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        _kill(proc)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------------ the worker
def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _child(job: dict, proto: int) -> int:
    """In the forked child: compile, run and save one launch. Returns the exit status."""
    import types

    folder = job["dir"]
    log = os.open(os.path.join(folder, "log.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    # A backstop: a launch whose parent is gone (killed itself) does not run forever.
    signal.alarm(int(job["alarm"]))

    def report(**what) -> None:
        with open(os.path.join(folder, "result.json"), "w", encoding="utf-8") as f:
            json.dump(what, f)

    import torch

    kernel = job["kernel"]
    module = types.ModuleType("aoti_debug_replay_" + "".join(c if c.isalnum() else "_" for c in kernel))
    module.__file__ = job["origin"]
    try:
        with open(os.path.join(folder, "module.py"), encoding="utf-8") as f:
            source = f.read()
        exec(compile(source, f"<replay of {kernel}>", "exec"), module.__dict__)
        launch = module.__dict__["launch"]
        args = torch.load(os.path.join(folder, "inputs.pt"), weights_only=True)
    except BaseException as e:  # noqa: BLE001 - reported, not raised
        report(phase="compile", error=_one_line(e))
        return 3
    os.write(proto, b"compiled\n")
    try:
        outputs = launch(*args)
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()  # a device fault surfaces here, as this launch's
    except BaseException as e:  # noqa: BLE001
        report(phase="run", error=_one_line(e))
        return 3
    try:
        torch.save(outputs, os.path.join(folder, "outputs.pt"))
    except BaseException as e:  # noqa: BLE001
        report(phase="save", error=_one_line(e))
        return 3
    report(ok=True)
    return 0


def main() -> None:
    """The worker: imports once, then forks a child per request line on stdin."""
    import importlib
    import warnings

    proto = os.dup(1)
    os.dup2(2, 1)  # whatever else is printed must not reach the protocol
    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the child imports what it needs itself
            pass
    # Python 3.12 warns about fork() in a process with threads; the worker's are idle
    # library threads, and it runs no kernel before it forks.
    warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
    # A forked child cannot use a device its parent initialised: should an import
    # have done so, this worker runs one launch itself and ends (a fresh one per launch).
    torch = sys.modules.get("torch")
    forking = hasattr(os, "fork") and not (torch is not None and torch.cuda.is_initialized())
    os.write(proto, b"ready\n")
    probed = False
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            os._exit(0)  # nothing buffered to flush (the protocol is raw writes); no teardown of torch
        job = json.loads(line)
        if job.get("cpp") and not probed:
            # Inductor picks the CPU's vector ISA by building and running probe programs
            # (seconds; cached per process): once here, not in every forked child.
            probed = True
            try:
                from torch._inductor import cpu_vec_isa

                cpu_vec_isa.pick_vec_isa()
            except Exception:  # noqa: BLE001 - the child probes again and reports what fails
                pass
        if not forking:
            os._exit(_child(job, proto))
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                code = _child(job, proto)
            finally:
                os._exit(code)  # no atexit, no flush of a corrupted heap's buffers
        _, status = os.waitpid(pid, 0)
        reply = {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else {"exit": os.WEXITSTATUS(status)}
        os.write(proto, (json.dumps(reply) + "\n").encode())


if __name__ == "__main__":
    main()
