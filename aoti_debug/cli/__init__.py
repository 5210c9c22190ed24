"""The ``aoti-debug`` command: thin click commands over the library."""

from __future__ import annotations

import click

from .. import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="aoti-debug")
def main() -> None:
    """Intermediate-value debugger for PyTorch Inductor and AOTInductor.

    Instrument a compiled model (run), look at what it dumped (show), compare two
    dumps and find the first divergent kernel (diff), tell the kernel where an error is
    born from those that pass it on (replay), cut a launch out as a standalone repro
    (repro), or name the kernel behind a crash (locate).
    """


def _register() -> None:
    from .locate import locate
    from .run import run

    main.add_command(run)
    from .diff import diff; main.add_command(diff)  # noqa: E702
    from .show import show; main.add_command(show)  # noqa: E702
    main.add_command(locate)
    from .doctor import doctor; main.add_command(doctor)  # noqa: E702
    from .replay import replay, repro; main.add_command(replay); main.add_command(repro)  # noqa: E702


_register()
