"""``aoti-debug diff``: compare two dumps and name the first divergent kernel."""

from __future__ import annotations

import sys

import click

from ..errors import AotiDebugError
from ._common import BadInput, emit, output_options

class _Progress:
    """A click progress bar over A's manifest bytes, on a terminal only."""

    def __init__(self, enabled: bool | None):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.bar = None
        self.done = 0

    def __call__(self, pos: int, total: int) -> None:
        if not self.enabled or total <= 0:
            return
        if self.bar is None:
            self.bar = click.progressbar(length=total, label="comparing", file=sys.stderr, show_eta=True)
            self.bar.__enter__()
        self.bar.update(max(0, pos - self.done))
        self.done = max(self.done, pos)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


@click.command()
@click.argument("dump_a")
@click.argument("dump_b")
@click.option("--atol", type=float, default=None, help="Absolute tolerance (default: per dtype, as torch.testing.assert_close).")
@click.option("--rtol", type=float, default=None, help="Relative tolerance, relative to B (default: per dtype).")
@click.option("--kernels", "-k", default=None, help="Comma-separated globs on kernel or op names; !pat excludes.")
@click.option("--ignore", "ignore", multiple=True, metavar="PATTERN",
              help="Glob on kernel, op or arg names of values known to be noise: listed as ignored, "
                   "not compared. Repeatable.")
@click.option("--all", "show_all", is_flag=True, help="List passing and not-compared records too.")
@click.option("--limit", type=click.IntRange(min=1), default=10000, show_default=True,
              help="List at most this many records (all are compared and counted).")
@click.option("--align", type=click.Choice(["auto", "launch", "value"]), default="auto", show_default=True,
              help="Pair launches by kernel, or values by provenance (module path, ATen op, FX node) for runs "
                   "whose kernels fused differently; auto picks value when the kernels differ.")
@click.option("--full", is_flag=True, help="Read tensor files even where equal checksums prove bitwise equality.")
@click.option("--progress/--no-progress", default=None, help="Progress bar on stderr (default: on a terminal).")
@output_options
def diff(dump_a, dump_b, atol, rtol, kernels, ignore, show_all, limit, align, full, progress, fmt, output):
    """Compare DUMP_A against DUMP_B (the reference) and name the first divergence.

    Each DUMP is a run directory or a dump root holding exactly one run. Records are
    aligned by (graph, kernel, call, arg, phase), extern kernels by their op name, so
    Python-wrapper and AOTInductor dumps of one model line up. The first divergence
    is the earliest launch of A whose outputs differ while its inputs match (or whose
    differing input no earlier launch wrote: a weight or graph input). Values that are
    nondeterministic by contract (RNG seeds and offsets: "volatile"), memory read before
    anything wrote it ("uninitialised") and --ignore matches are listed apart, never
    compared, never named as the divergence.

    \b
    Exit status: 0 equal within tolerance, 1 different, 2 bad input or records that
    could not be compared (missing file, shape/dtype differs, present in one run only).
    \b
    Example:
      aoti-debug diff dumps/before dumps/after --format markdown -o diff.md
    """
    from ..compare import diff as compare
    from ..compare.render import render_diff

    bar = _Progress(progress)
    try:
        result = compare(dump_a, dump_b, atol=atol, rtol=rtol, kernels=kernels, ignore=list(ignore),
                         keep_passing=show_all,
                         max_records=limit, use_checksums=not full, progress=bar, align=align)
    except AotiDebugError as e:
        raise BadInput(str(e)) from None
    finally:
        bar.close()
    emit(render_diff(result, fmt, show_all), output, str(result).split("; first divergence")[0])
    if fmt in ("csv",) or output is not None:
        for line in result.problems:
            click.echo(f"problem: {line}", err=True)
    sys.exit(result.exit_code)
