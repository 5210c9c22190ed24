"""Name the kernel behind a crash: run a command at level ``names`` with a device sync after
every launch, and attribute the fault (illegal memory access, device assert, a signal in a
CPU kernel or custom op, a hang) to the launch that started and never completed.

This package runs in the parent process: it never imports torch.
"""

from __future__ import annotations

from .locator import child_environment, judge, locate
from .runner import CommandError
from .verdict import SanitizerReport, Verdict

__all__ = ["locate", "judge", "child_environment", "Verdict", "SanitizerReport", "CommandError"]
