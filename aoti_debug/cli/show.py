"""``aoti-debug show``: what a dump holds."""

from __future__ import annotations

import sys

import click

from ..errors import AotiDebugError
from ._common import BadInput, emit, output_options


@click.command()
@click.argument("dump")
@output_options
def show(dump, fmt, output):
    """Summarise DUMP: runs, graphs, kernels, launches, bytes, value ranges, where NaN/Inf were born.

    DUMP is a run directory or a dump root (every run under it is shown). Per kernel:
    its calls, records, bytes, and the range of the values it wrote. Then where NaN and
    Inf were born: the launches whose outputs hold NaN (or Inf) that none of their
    inputs held, the first NaN birth named before the first Inf birth (a causal mask
    built from -inf is an Inf birth and never hides a later NaN); and the first record
    holding NaN, apart from the first holding Inf, with the kernel that produced it.
    Memory read before anything wrote it ("uninitialised") never counts. A run that
    recorded only inputs or only outputs says what cannot be concluded. Reads the
    manifest only.

    \b
    Exit status: 0, or 2 for a missing path, not a dump, or a damaged manifest.
    """
    from ..compare import summarize
    from ..compare.render import render_show

    try:
        result = summarize(dump)
    except AotiDebugError as e:
        raise BadInput(str(e)) from None
    emit(render_show(result, fmt), output, str(result), fmt)
    sys.exit(result.exit_code)
