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
@click.option("--build", is_flag=True,
              help="Also build aoti_debug's C++ runtime into Inductor's cache now (the library, AOTInductor's "
                   "objects, on CUDA the stats kernels' pack), so that the first instrumented compile on this "
                   "machine does not.")
def doctor(fmt, cxx, build):
    """Check torch, triton, the C++ compiler and aoti_debug's Inductor hooks.

    Prints the Python, torch, CUDA and triton versions; the C++ compiler Inductor
    would use (honouring CXX) and whether it links libstdc++ statically, which makes
    AOTInductor packages built with it crash on load (with the fix: a compiler on PATH
    that does not); and every hook of aoti_debug's patch table: applied (or ready),
    inherited, skipped (optional, with why) or missing.

    With --build, then builds what a machine's first instrumented compile would
    (TORCHINDUCTOR_CACHE_DIR, else /tmp/torchinductor_<user>; skipped with --cxx, which
    names a compiler Inductor would not use) and says what was built, found or failed.

    \b
    Exit status:
      0  every required hook is present and a C++ compiler was found (warnings allowed)
      2  a required hook is missing (aoti_debug.enable() would fail), no C++
         compiler was found (cpp_wrapper, AOTInductor and C++ CPU kernels cannot build),
         or, with --build, a build failed
    """
    from ..codegen.doctor import doctor as run_doctor

    if build and cxx is not None:
        raise click.UsageError("--build builds with the compiler Inductor would use: set CXX instead of --cxx")
    report = run_doctor(cxx)
    steps = None
    if build and report.compiler.found:
        from ..codegen import native_library
        from ..codegen.prebuild import prebuild

        if fmt == "table":
            click.echo(f"building aoti_debug's runtime into {native_library.cache_folder()} ...", err=True)
        steps = prebuild()
    failed = [s for s in steps or () if s.state == "failed"]
    code = report.exit_code or (2 if failed else 0)
    if fmt == "json":
        out = report.to_dict()
        if build:
            out["build"] = [s.to_dict() for s in steps or ()]
            out["exit_code"] = code
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo(report.render(), nl=False)
        if steps is not None:
            click.echo("\nRuntime builds:")
            for s in steps:
                click.echo(f"  {s.line()}")
            if failed:
                click.echo(f"PROBLEM: {len(failed)} build(s) failed: the first compile that needs them tries again "
                           "and warns")
    sys.exit(code)
