"""What the ``aoti-debug`` commands share: the bad-input error and the report output."""

from __future__ import annotations

import functools

import click

FORMAT_CHOICES = ("table", "csv", "json", "markdown", "html")


class BadInput(click.ClickException):
    """A library error shown as one line, exit code 2 (DESIGN.md: bad input)."""

    exit_code = 2


def output_options(fn):
    """``--format`` and ``--output``, shared by diff and show."""

    @click.option("--format", "-f", "fmt", type=click.Choice(FORMAT_CHOICES), default="table", show_default=True,
                  help="Output format.")
    @click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), default=None,
                  help="Write the report to FILE instead of standard output.")
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


def emit(text: str, output: str | None, summary: str) -> None:
    """Print the report, or write it to ``output`` and print the one-line summary."""
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise BadInput(f"cannot write {output}: {e.strerror or e}") from None
    click.echo(f"{summary} (report written to {output})")
