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
@click.option("--reuse/--no-reuse", default=None,
              help=f"At levels stats and print, take an input's stats from the record of the launch that wrote it, "
                   f"and on CUDA read the weights once a call, before the first kernel (default; ${config.ENV_REUSE}). "
                   "--no-reuse reads every input again: a write no launch owns (out of bounds) then shows between "
                   "the two.")
@click.option("--reference", type=click.Choice(config.REFERENCE_MODES), default=None,
              help="Record a reference instead: torch.compile'd functions run eagerly (eager), or eagerly "
                   "and in float64 beside the model's dtypes (fp64, which also records eager's own error).")
@click.option("--save-launches", default=None, metavar="RANGES",
              help="At level save, write tensor files only for these launches (10..14, 40.., 7; comma-separated); "
                   "the others get stats and checksums.")
@click.option("--ring", default=None, metavar="N",
              help=f"Flight recorder (${config.ENV_RING}): keep the last N graph calls' records in memory and "
                   "write them at exit, on SIGTERM/SIGINT or when --trigger fires (meant for level stats).")
@click.option("--trigger", type=click.Choice(config.TRIGGERS), default=None,
              help=f"${config.ENV_TRIGGER}: nonfinite writes the ring and saves the tensors of the launch where "
                   "NaN/Inf was first born.")
@click.option("--from-diff", "from_diff", type=click.Path(dir_okay=False), default=None, metavar="REPORT.json",
              help="Save the first divergent launch named by `aoti-debug diff --format json -o REPORT.json` "
                   "and the --context launches before it (at level save, the default).")
@click.option("--context", type=click.IntRange(min=0), default=2, show_default=True,
              help="With --from-diff: how many launches before the first divergence to save too.")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def run(level, kernels, dump_dir, sync, phases, reuse, reference, save_launches, ring, trigger, from_diff, context, cmd):
    """Run CMD with every torch.compile / AOTInductor compile instrumented.

    With --reference, CMD's torch.compile'd functions are not compiled: they run
    eagerly and every value is recorded, keyed by provenance, so that
    `aoti-debug diff COMPILED REFERENCE` names the first kernel that departs from
    eager, and against an fp64 reference says whether it is rounding or suspect.

    A stats-level run finds where a large model diverges; --save-launches (or
    --from-diff with the diff's JSON report) re-runs it saving the tensors of
    those launches only.

    \b
    Example:
      aoti-debug run --level save --dir dumps -- python train.py --steps 2
      aoti-debug run --reference fp64 --dir ref -- python train.py --steps 2
      aoti-debug run --from-diff report.json --dir window -- python train.py --steps 2
      aoti-debug run --level stats --ring 3 --trigger nonfinite -- python train.py
    The exit code is CMD's, or 2 when CMD cannot be started (not found, not executable).
    """
    if from_diff is not None:
        if save_launches is not None:
            raise click.UsageError("give --save-launches or --from-diff, not both")
        save_launches = _window(from_diff, context)
    if save_launches is not None and reference is None:
        try:
            if config.parse_level(level) != "save":
                raise click.UsageError(f"--save-launches and --from-diff choose what level save writes, not level "
                                       f"{level}")
        except ConfigError as e:
            raise click.UsageError(str(e)) from None
    try:
        env = config.child_env(os.environ, level=level, kernels=kernels, dump_dir=dump_dir, sync=sync, phases=phases,
                               reference=reference, save_launches=save_launches, ring=ring, trigger=trigger,
                               reuse=reuse)
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


def _window(report: str, context: int) -> str:
    """``A..B``: the first divergent launch of a diff's JSON report and ``context`` before it."""
    import json

    try:
        with open(report, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise BadInput(f"cannot read {report}: {e.strerror or e}") from None
    except (ValueError, RecursionError):
        raise BadInput(f"{report} is not JSON: write it with aoti-debug diff A B --format json -o {report}") from None
    first = data.get("first_divergence") if isinstance(data, dict) else None
    launch = first.get("launch") if isinstance(first, dict) else None
    if type(launch) is not int or launch < 1:
        raise BadInput(f"{report} names no first divergence (the runs were equal, or it is not a diff report)")
    return f"{max(1, launch - context)}..{launch}"
