"""``aoti-debug replay`` and ``aoti-debug repro``: the culprit kernel, and a standalone repro of it."""

from __future__ import annotations

import json
import sys

import click

from ..errors import AotiDebugError
from ..printable import printable
from ._common import BadInput, FiniteNonNegative, echo, emit, guarded, output_option


def trust_option(fn):
    """``--trust``: run generated code of a dump recorded by another user or machine
    (shared with ``diff --replay`` and ``repro``)."""
    return click.option("--trust", is_flag=True,
                        help="Run the dump's generated code although another user or machine recorded it (it is "
                             "listed first), or, for a dump without verified copies of its sources, the files it "
                             "names. Without it, replay asks on a terminal and refuses elsewhere.")(fn)


def trust_args(trust: bool) -> dict:
    """How the library asks before running a dump's code: a prompt on a terminal, else
    a refusal naming --trust; notes on stderr."""
    interactive = sys.stdin.isatty() and sys.stderr.isatty()
    # What is asked quotes the dump (its user, host, files): escaped like every report.
    return {"trust": trust, "confirm": (lambda text: click.confirm(printable(text, keep_newlines=True), default=False,
                                                                   err=True))
            if interactive else None, "say": lambda text: echo(text, err=True)}


def vouched_early(dump: str, trust: bool) -> dict:
    """Asks (or refuses) about running ``dump``'s code before a long command starts
    (``diff --replay``: its report would otherwise come first), and returns the
    :func:`trust_args` for the replay after it, which then does not ask again."""
    from ..format.reader import RunReader
    from ..replay.trust import Sources

    args = trust_args(trust)
    try:
        Sources(RunReader(dump), **args).vouch()
    except AotiDebugError as e:
        raise BadInput(str(e)) from None
    return {**args, "confirm": lambda text: True}  # the user answered already


def replay_options(fn):
    """The tolerances replay judges a kernel's own error by (shared with ``diff --replay``)."""
    fn = click.option("--rounding-factor", type=FiniteNonNegative(1.0), default=None, metavar="X",
                      help="Against an fp64 reference: a kernel's own error beyond X times eager's own makes it "
                           "the culprit (default 8; 3 for bfloat16, float16 and float8 values).")(fn)
    fn = click.option("--rtol", type=FiniteNonNegative(), default=None, help="Relative tolerance (default: per dtype).")(fn)
    fn = click.option("--atol", type=FiniteNonNegative(), default=None, help="Absolute tolerance (default: per dtype).")(fn)
    return fn


@click.command()
@click.argument("dump_a")
@click.argument("dump_b")
@click.option("--launch", "-l", "launches", type=click.IntRange(min=1), multiple=True, metavar="N",
              help="Replay A's launch N (repeatable).")
@click.option("--first", "first", type=click.IntRange(min=1), default=None, metavar="K",
              help="Replay A's first K launches whose outputs differ from B's (default 1).")
@click.option("--timeout", default="120", show_default=True, metavar="S",
              help="Seconds a replayed kernel may run (each runs in a child process) before it is a culprit "
                   "(hung); a kernel that crashes or raises is a culprit too.")
@replay_options
@trust_option
@click.option("--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output format.")
@output_option
@guarded
def replay(dump_a, dump_b, launches, first, timeout, atol, rtol, rounding_factor, trust, fmt, output):
    """Run A's own kernel for a launch on B's (the reference's) inputs.

    The launch is cut out of A's generated code and fed B's values of its inputs (paired
    as diff pairs them: by launch, or by provenance across fusion and against an eager
    reference); its outputs are compared with B's. A kernel whose own error is beyond
    tolerance is the CULPRIT (the error is born there; against an fp64 reference, beyond
    --rounding-factor times eager's own error); one that is right on B's inputs while
    A's recorded output differs is a PROPAGATOR (it inherited the error).

    Runs only A's own generated code: the copy of each graph's source that A's run
    directory keeps, checked against the sha256 run.json records (a copy that does not
    match is refused). A dump recorded by another user or on another machine is run
    only after --trust (or a yes on a terminal); see docs/replay.md "Trust model".
    Needs B at level save; A at level stats is judged by its stats for the total
    error (the own error needs B's files only). Replays generated C++ and Triton kernels,
    user-defined Triton kernels, and extern kernels and fallbacks of the Python wrapper;
    of a C++ wrapper or AOTInductor dump, its generated C++ kernels (AOTInductor writes them beside the wrapper).

    \b
    Exit status: 1 a culprit was found, 0 none, 2 bad input or nothing replayable.
    \b
    Example:
      aoti-debug replay dumps/compiled dumps/fp64 --first 3
      aoti-debug replay dumps/compiled dumps/fp64 --launch 12
    """
    from ..replay import replay as run_replay
    from ..replay.isolate import check_timeout

    if launches and first is not None:
        raise BadInput("give --launch or --first, not both")
    result = run_replay(dump_a, dump_b, launches=list(launches) or None, first=first, atol=atol, rtol=rtol,
                        rounding_factor=rounding_factor, timeout=check_timeout(timeout), **trust_args(trust))
    text = json.dumps(result.to_dict(), indent=1) + "\n" if fmt == "json" else str(result) + "\n"
    culprits = result.culprits
    summary = (f"culprit: launch {culprits[0].launch} {culprits[0].kernel}" if culprits
               else f"no culprit among {len(result.launches)} launch(es)")
    emit(text, output, summary, fmt)
    sys.exit(result.exit_code)


@click.command()
@click.argument("dump")
@click.option("--launch", "-l", "launch", type=click.IntRange(min=1), required=True, metavar="N",
              help="The launch to reproduce.")
@click.option("--out", "-o", "out_dir", type=click.Path(file_okay=False), required=True, metavar="DIR",
              help="Directory to write (must be new or empty, unless --force).")
@click.option("--reference", "-r", default=None, metavar="DUMP_B",
              help="Feed the launch the reference's inputs and expect its outputs (else the run's own).")
@click.option("--force", is_flag=True, help="Replace DIR if it holds a previous repro (its .aoti_debug_repro "
                                            "marker); nothing else is ever replaced.")
@trust_option
@guarded
def repro(dump, launch, out_dir, reference, force, trust):
    """Write launch N of DUMP as a standalone repro in DIR.

    DIR holds run.py, the kernel and its launch code (kernel.py, cut out of the
    generated wrapper), the kernel's own source, the inputs, the expected outputs (the
    reference's with --reference, else the recorded run's) and meta.json. `python
    DIR/run.py` needs torch (and Triton for a Triton kernel) only, not aoti_debug and
    not the model; it exits 1 when an output differs from the expected values.

    \b
    Example:
      aoti-debug repro dumps/compiled --launch 12 --reference dumps/fp64 -o repro12
      python repro12/run.py
    """
    from ..replay.repro import write_repro

    path = write_repro(dump, launch, out_dir, reference=reference, force=force, **trust_args(trust))
    echo(f"repro of launch {launch} written to {path}: python {path}/run.py")
