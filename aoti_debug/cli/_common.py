"""What the ``aoti-debug`` commands share: the bad-input error and the report output."""

from __future__ import annotations

import functools
import os
import traceback

import click

from ..errors import AotiDebugError

FORMAT_CHOICES = ("table", "csv", "json", "markdown", "html")

#: How the safety net of :func:`output_options` starts its message. Bad input never
#: reaches the net (the reader checks every field first); tests assert this text never
#: appears for a damaged dump, so a gap in the checks fails a test instead of hiding.
INTERNAL_ERROR = "internal error"


def one_line(text: str) -> str:
    """``text`` on one line: a message that quotes a path or a value keeps its place."""
    return " ".join(text.splitlines()).strip() or "error"


class BadInput(click.ClickException):
    """A library error shown as one line, exit code 2 (DESIGN.md: bad input)."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(one_line(message))


def internal_error(e: BaseException) -> BadInput:
    """The one line for an exception nothing expected: its type, message, where it was
    raised and the last aoti_debug frame on the way, so that a report pins it down
    without a traceback."""
    frames = traceback.extract_tb(e.__traceback__)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    package = os.path.join(root, "aoti_debug") + os.sep

    def place(f: traceback.FrameSummary) -> str:
        path = os.path.abspath(f.filename)
        shown = os.path.relpath(path, root) if path.startswith(root + os.sep) else os.path.join(
            *path.split(os.sep)[-2:])
        return f"{shown}:{f.lineno} in {f.name}"

    where = f" at {place(frames[-1])}" if frames else ""
    ours = [f for f in frames if os.path.abspath(f.filename).startswith(package)]
    if ours and ours[-1] is not frames[-1]:
        where += f", from {place(ours[-1])}"
    text = str(e).strip().splitlines()
    detail = f": {text[0][:200]}" if text else ""
    return BadInput(f"{INTERNAL_ERROR} ({type(e).__name__}{detail}{where}); this is a bug in aoti_debug, "
                    f"please report it")


def output_options(fn):
    """``--format`` and ``--output``, and the error handling, of the report commands (diff, show).

    Library errors become one line and exit 2. Anything else raised while the command
    reads, compares or renders dumps is a bug, never a verdict on the input: it too
    ends as one line and exit 2 (:func:`internal_error`), not as a traceback.
    """

    fmt = click.option("--format", "-f", "fmt", type=click.Choice(FORMAT_CHOICES), default="table",
                       show_default=True, help="Output format.")
    return fmt(output_option(guarded(fn)))


def output_option(fn):
    """``--output FILE``: the report goes to FILE instead of standard output."""
    return click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), default=None,
                        help="Write the report to FILE instead of standard output.")(fn)


def guarded(fn):
    """Library errors as one line and exit 2; anything unexpected too (:func:`internal_error`)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except AotiDebugError as e:
            raise BadInput(str(e)) from None
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # click's own way out (Exit and Abort are RuntimeErrors)
        except Exception as e:
            raise internal_error(e) from None

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
