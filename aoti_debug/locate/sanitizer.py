"""Re-running a reproduction under NVIDIA compute-sanitizer and keeping its first error report.

memcheck prints each error as a block of ``=========``-prefixed lines ending in a bare
``=========``::

    ========= Invalid __global__ write of size 4 bytes
    =========     at oob_store_kernel+0x1b0 in /tmp/repro.py:21
    =========     by thread (0,0,0) in block (0,0,0)
    =========     Address 0x7f3a00000000 is out of bounds
    =========

Memory errors are preferred over CUDA API error reports, which PyTorch and Triton
can provoke harmlessly (probing calls that are allowed to fail).
"""

from __future__ import annotations

import re
import shutil
from typing import Callable, Mapping, Sequence

from . import runner
from .verdict import SanitizerReport

EXECUTABLE = "compute-sanitizer"
PREFIX = "========="
#: Report lines kept per error block, and host backtrace frames kept within them.
MAX_LINES = 30
MAX_HOST_FRAMES = 6
MAX_BLOCKS = 50
_MEMORY_ERROR = re.compile(
    r"^(Invalid|Out-of-range|Misaligned|Illegal|Hardware exception|Address|Device-side assert|Warp|Uninitialized)",
    re.IGNORECASE,
)
_AT = re.compile(r"^at\s+(?:0x[0-9a-fA-F]+\s+in\s+)?(?P<loc>\S+)")


class Collector:
    """Feed it output lines; it keeps the sanitizer's error blocks."""

    def __init__(self) -> None:
        self.blocks: list[list[str]] = []
        self._open: list[str] | None = None

    def feed(self, line: str) -> bool:
        """True when the line was the sanitizer's."""
        if not line.startswith(PREFIX):
            return False
        body = line[len(PREFIX):]
        body = body[1:] if body.startswith(" ") else body
        text = body.strip()
        if self._open is None:
            if text and not body.startswith(" ") and not text.startswith(
                ("COMPUTE-SANITIZER", "ERROR SUMMARY", "LEAK SUMMARY", "Target application")
            ):
                self._open = [text]
        elif not text:
            self._close()
        else:
            self._open.append(body.rstrip()[4:] if body.startswith("    ") else text)
        return True

    def _close(self) -> None:
        if self._open is not None and len(self.blocks) < MAX_BLOCKS:
            self.blocks.append(self._open)
        self._open = None

    def first_error(self) -> list[str]:
        self._close()
        for block in self.blocks:
            if _MEMORY_ERROR.match(block[0]):
                return _trim(block)
        return _trim(self.blocks[0]) if self.blocks else []


def _trim(block: list[str]) -> list[str]:
    out, frames = [], 0
    for text in block:
        if "Host Frame" in text:
            frames += 1
            if frames > MAX_HOST_FRAMES:
                continue
        out.append(text)
    if frames > MAX_HOST_FRAMES:
        out.append(f"... {frames - MAX_HOST_FRAMES} more host frames")
    return out[:MAX_LINES]


def kernel_of(report: list[str]) -> str | None:
    """The device function a report's ``at ...`` line names (``name+0x1b0``: ``name``)."""
    for text in report[1:]:
        m = _AT.match(text.strip())
        if m:
            loc = m["loc"]
            if "+0x" in loc:
                return loc.split("+0x", 1)[0]
            tail = loc.rsplit(":", 1)[-1]
            return tail if re.fullmatch(r"[A-Za-z_]\w*", tail) else loc
    return None


def available(env: Mapping[str, str]) -> str | None:
    return shutil.which(EXECUTABLE, path=env.get("PATH"))


def run(
    cmd: Sequence[str],
    env: Mapping[str, str],
    timeout: float | None,
    on_other: Callable[[str, str], None] | None = None,
) -> SanitizerReport:
    """Run ``cmd`` under ``compute-sanitizer --tool memcheck``; its first error report.

    The caching allocator is switched off for this run so that out-of-bounds accesses
    land outside any allocation, where memcheck can see them.
    """
    exe = available(env)
    if exe is None:
        return SanitizerReport(command=[], note=f"{EXECUTABLE} is not on the PATH; not run")
    full = [exe, "--tool", "memcheck", *cmd]
    env = dict(env, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    collector = Collector()

    def on_line(stream: str, line: str) -> None:
        if not collector.feed(line) and on_other is not None:
            on_other(stream, line)

    try:
        outcome = runner.run(full, env, on_line, timeout=timeout)
    except runner.CommandError as e:
        return SanitizerReport(command=full, note=str(e))
    report = collector.first_error()
    note = None
    if not report:
        note = "compute-sanitizer reported no error"
        if outcome.timed_out:
            note += f" before it was stopped at the timeout ({timeout:g}s)"
    return SanitizerReport(command=full, report=report, kernel=kernel_of(report), note=note)
