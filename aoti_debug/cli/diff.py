"""``aoti-debug diff``: compare two dumps and name the first divergent kernel."""

from __future__ import annotations

import sys

import click

from ..errors import AotiDebugError
from ._common import BadInput, FiniteNonNegative, echo, emit, output_options
from .replay import trust_option, vouched_early

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
@click.option("--atol", type=FiniteNonNegative(), default=None, help="Absolute tolerance (default: per dtype, as torch.testing.assert_close).")
@click.option("--rtol", type=FiniteNonNegative(), default=None, help="Relative tolerance, relative to B (default: per dtype).")
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
@click.option("--plot", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Also draw the error of each compared output along the model into FILE "
                   "(.png or .svg; needs matplotlib).")
@click.option("--rounding-factor", type=FiniteNonNegative(1.0), default=None, metavar="X",
              help="Against an fp64 reference (run --reference fp64): a value is rounding while its error "
                   "is at most X times eager's own error, else suspect (default 8; 3 for bfloat16, float16 "
                   "and float8 values).")
@click.option("--replay", "replay_first", type=click.IntRange(min=1), default=None, metavar="K",
              help="Then replay A's first K divergent launches on B's inputs (as aoti-debug replay): "
                   "which kernel is the culprit, which only propagate the error.")
@trust_option
@output_options
def diff(dump_a, dump_b, atol, rtol, kernels, ignore, show_all, limit, align, full, progress, plot, rounding_factor,
         replay_first, trust, fmt, output):
    """Compare DUMP_A against DUMP_B (the reference) and name the first divergence.

    Each DUMP is a run directory or a dump root holding exactly one run. Records are
    aligned by (graph, kernel, call, arg, phase), extern kernels by their op name, so
    Python-wrapper and AOTInductor dumps of one model line up; where the two runs'
    kernels differ (other compile settings fused differently), values are paired by
    provenance instead: module path, ATen op and FX node (--align). The first divergence
    is the earliest launch of A whose outputs differ while its inputs match (or whose
    differing input no earlier launch wrote: a weight or graph input). Values that are
    nondeterministic by contract (RNG seeds and offsets: "volatile"), memory read before
    anything wrote it ("uninitialised") and --ignore matches are listed apart, never
    compared, never named as the divergence.

    Against an eager reference (`aoti-debug run --reference eager|fp64`, given as
    DUMP_B) each compiled value meets the value of the FX node it belongs to; against
    fp64 each gets a verdict, rounding or suspect, and the first suspect is named.

    \b
    Exit status: 0 equal within tolerance, 1 different, 2 bad input or records that
    could not be compared (missing file, shape/dtype differs, present in one run only).
    \b
    With --plot FILE the report and exit status stay as they are; FILE shows the max
    abs and rel error of every compared output against B, launch by launch, with the
    first divergence marked.
    \b
    Example:
      aoti-debug diff dumps/before dumps/after --format markdown -o diff.md
      aoti-debug diff dumps/before dumps/after --plot error.svg
      aoti-debug diff dumps/compiled dumps/fp64-reference
      aoti-debug diff dumps/compiled dumps/fp64-reference --replay 3
    """
    from ..compare import diff as compare
    from ..compare.render import render_diff

    if plot is not None:
        from ..compare.plot import plot_format, require_matplotlib

        try:  # before comparing: a long diff should not end in "cannot plot"
            plot_format(plot)
            require_matplotlib()
        except AotiDebugError as e:
            raise BadInput(str(e)) from None
    # Asked (or refused) before the diff, so a refusal is not printed after a whole report.
    replay_trust = vouched_early(dump_a, trust) if replay_first is not None else None
    bar = _Progress(progress)
    try:
        # The plot needs every pair, passing ones too: kept apart (keep_all), so the
        # report lists what it lists without --plot.
        result = compare(dump_a, dump_b, atol=atol, rtol=rtol, kernels=kernels, ignore=list(ignore),
                         keep_passing=show_all, max_records=limit, keep_all=plot is not None,
                         use_checksums=not full, progress=bar, align=align,
                         **({} if rounding_factor is None else {"rounding_factor": rounding_factor}))
    except AotiDebugError as e:
        raise BadInput(str(e)) from None
    finally:
        bar.close()
    emit(render_diff(result, fmt, show_all), output, str(result).split("; first divergence")[0], fmt)
    if fmt in ("csv",) or output is not None:
        for line in result.problems:
            echo(f"problem: {line}", err=True)
    if plot is not None:
        from ..compare.plot import plot_diff

        try:
            echo(f"plot written to {plot_diff(result, plot)}", err=True)
        except AotiDebugError as e:
            raise BadInput(str(e)) from None
    if replay_first is not None:
        from ..replay import replay
        from ..replay.engine import divergent_launches

        launches = divergent_launches(result, replay_first)
        if launches:
            replayed = replay(dump_a, dump_b, launches=launches, atol=atol, rtol=rtol,
                              rounding_factor=rounding_factor, **replay_trust)
            echo("\n" + str(replayed), err=output is not None or fmt != "table")
        else:
            echo("replay: no output of A differs from B's", err=True)
    sys.exit(result.exit_code)
