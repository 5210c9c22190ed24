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
@click.option("--reference", type=click.Choice(config.REFERENCE_MODES), default=None,
              help="Record a reference instead: torch.compile'd functions run eagerly (eager), or eagerly "
                   "and in float64 beside the model's dtypes (fp64, which also records eager's own error).")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def run(level, kernels, dump_dir, sync, phases, reference, cmd):
    """Run CMD with every torch.compile / AOTInductor compile instrumented.

    With --reference, CMD's torch.compile'd functions are not compiled: they run
    eagerly and every value is recorded, keyed by provenance, so that
    `aoti-debug diff COMPILED REFERENCE` names the first kernel that departs from
    eager, and against an fp64 reference says whether it is rounding or suspect.

    \b
    Example:
      aoti-debug run --level save --dir dumps -- python train.py --steps 2
      aoti-debug run --reference fp64 --dir ref -- python train.py --steps 2
    The exit code is CMD's, or 2 when CMD cannot be started (not found, not executable).
    """
    try:
        env = config.child_env(os.environ, level=level, kernels=kernels, dump_dir=dump_dir, sync=sync, phases=phases,
                               reference=reference)
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
