"""``aoti-debug run``: run a command with instrumentation switched on."""

from __future__ import annotations

import os
import subprocess
import sys

import click

from .. import config
from ..errors import ConfigError
from ..config import LEVELS
from ._common import BadInput


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--level", "-l", default="save", show_default=True,
              help="0-4 or " + "/".join(LEVELS.values()) + ".")
@click.option("--kernels", "-k", default=None, help="Comma-separated globs on kernel names; !pat excludes.")
@click.option("--dir", "dump_dir", default=None, help=f"Dump root (default ${config.ENV_DIR} or ./{config.DEFAULT_DIR}).")
@click.option("--sync/--no-sync", default=None, help="Synchronise the device after every instrumented launch.")
@click.option("--phases", default=None, help="before, after, or before,after (default).")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def run(level, kernels, dump_dir, sync, phases, cmd):
    """Run CMD with every torch.compile / AOTInductor compile instrumented.

    \b
    Example:
      aoti-debug run --level save --dir dumps -- python train.py --steps 2
    The exit code is CMD's, or 2 when CMD cannot be started (not found, not executable).
    """
    try:
        env = config.child_env(os.environ, level=level, kernels=kernels, dump_dir=dump_dir, sync=sync, phases=phases)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    # A CMD that cannot start is bad input, worded and exiting as in `aoti-debug locate`
    # (locate/runner.py), never confused with CMD's own exit code 1.
    try:
        proc = subprocess.run(list(cmd), env=env)
    except FileNotFoundError:
        raise BadInput(f"command not found: {cmd[0]}") from None
    except PermissionError:
        raise BadInput(f"command not executable: {cmd[0]}") from None
    except OSError as e:
        raise BadInput(f"cannot start {cmd[0]}: {e.strerror or e}") from None
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(proc.returncode)
