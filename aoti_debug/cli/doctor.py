"""``aoti-debug doctor``: can this environment be instrumented (thin: call the library, render)."""

from __future__ import annotations

import json
import sys

import click


@click.command()
@click.option("--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output format.")
@click.option("--cxx", default=None, metavar="PATH",
              help="Check this C++ compiler instead of the one Inductor would use ($CXX, else g++).")
def doctor(fmt, cxx):
    """Check torch, triton, the C++ compiler and aoti_debug's Inductor hooks.

    Prints the Python, torch, CUDA and triton versions; the C++ compiler Inductor
    would use (honouring CXX) and whether it links libstdc++ statically, which makes
    AOTInductor packages built with it crash on load (with the fix: a compiler on PATH
    that does not); and every hook of aoti_debug's patch table: applied (or ready),
    inherited, skipped (optional, with why) or missing.

    \b
    Exit status:
      0  every required hook is present and a C++ compiler was found (warnings allowed)
      2  a required hook is missing (aoti_debug.enable() would fail) or no C++
         compiler was found (cpp_wrapper, AOTInductor and C++ CPU kernels cannot build)
    """
    from ..codegen.doctor import doctor as run_doctor

    report = run_doctor(cxx)
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(report.render(), nl=False)
    sys.exit(report.exit_code)
