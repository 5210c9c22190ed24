"""``aoti-debug locate``: name the kernel behind a crash (thin: parse, call the library, render)."""

from __future__ import annotations

import json
import shlex
import sys

import click

from ..errors import AotiDebugError
from ._common import BadInput, FiniteNonNegative, echo as echo_text  # BadInput: exit 2 (1: a fault was located)


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--timeout", type=FiniteNonNegative(0.0, open=True), default=None, metavar="S",
              help="Stop CMD after S seconds and report the launch it hung in.")
@click.option("--no-caching-allocator", is_flag=True,
              help="Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1, so that out-of-bounds accesses fall outside "
                   "any allocation and fault instead of landing in cached memory.")
@click.option("--sanitizer", is_flag=True,
              help="After a fault, re-run CMD under compute-sanitizer (when on the PATH) and attach its first error.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="How to print the verdict (on stdout).")
@click.option("--quiet", "-q", is_flag=True, help="Do not echo CMD's own output (it goes to stderr otherwise).")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def locate(timeout, no_caching_allocator, sanitizer, fmt, quiet, cmd):
    """Run CMD and name the kernel it crashed in.

    CMD runs with aoti_debug at level names, a device sync after every launch and
    CUDA_LAUNCH_BLOCKING=1. When it faults (illegal memory access, device-side assert,
    a segfault or abort in a CPU kernel or custom op, a hang) the verdict names the
    launch that started and never completed: kernel, launch number, generated source
    file and line, the ops it was fused from, and its arguments' shapes, strides,
    dtypes and devices.

    \b
    Example:
      aoti-debug locate --timeout 600 -- python train.py --steps 1
    \b
    Exit codes:
      0  CMD ran clean: nothing to locate
      1  a fault was located and its kernel named
      2  bad usage (unknown option, CMD not found)
      3  CMD failed but the fault could not be attributed (the verdict says why)
    """
    from .. import locate as lib

    # CMD's own output passes as it is: it is what CMD prints without locate, not a dump's.
    echo = None if quiet else (lambda line: click.echo(line, err=True))
    if not quiet:
        echo_text(f"aoti-debug locate: running {shlex.join(cmd)} (level names, sync after every launch)", err=True)
    try:
        verdict = lib.locate(
            cmd, timeout=timeout, caching_allocator=not no_caching_allocator,
            use_sanitizer=sanitizer, echo=echo,
        )
    except AotiDebugError as e:
        raise BadInput(str(e)) from None
    except KeyboardInterrupt:
        sys.exit(130)
    if fmt == "json":
        click.echo(json.dumps(verdict.to_dict(), indent=2))
    else:
        echo_text(verdict.render())
    sys.exit(verdict.exit_code)
