"""What the ``aoti-debug`` commands share: the bad-input error, checked numbers and the
report output (never a dump's control characters raw on a terminal)."""

from __future__ import annotations

import functools
import math
import os
import traceback

import click

from ..errors import AotiDebugError
from ..printable import printable

FORMAT_CHOICES = ("table", "csv", "json", "markdown", "html")

#: How the safety net of :func:`output_options` starts its message. Bad input never
#: reaches the net (the reader checks every field first); tests assert this text never
#: appears for a damaged dump, so a gap in the checks fails a test instead of hiding.
INTERNAL_ERROR = "internal error"


def one_line(text: str) -> str:
    """``text`` on one line: a message that quotes a path or a value keeps its place, and
    a dump's control characters in it are shown as escapes (:func:`printable`)."""
    return printable(" ".join(text.splitlines()).strip()) or "error"


def echo(text: str = "", err: bool = False, nl: bool = True) -> None:
    """``click.echo`` of human-readable text: each line through :func:`printable`, so that
    nothing a dump holds (ESC, CR, BEL, C1 controls, bidi overrides) reaches a terminal
    raw, whatever a renderer missed. JSON and CSV go out through :func:`emit` as they are."""
    click.echo(printable(text, keep_newlines=True), err=err, nl=nl)


class FiniteNonNegative(click.ParamType):
    """A float option that must be a finite number >= ``minimum`` (> it with ``open``).

    ``click.FloatRange`` lets NaN through (NaN compares false with its bounds), and
    ``--atol nan`` then passes any two runs: the tolerances and factors of diff and
    replay, and locate's timeout, are this type instead. A bad value is one line, exit 2.
    """

    name = "float"

    def __init__(self, minimum: float = 0.0, open: bool = False):
        self.minimum, self.open = minimum, open

    def convert(self, value, param, ctx):
        if isinstance(value, float) and math.isfinite(value) and self._fits(value):
            return value
        try:
            v = float(value)
        except (TypeError, ValueError):
            v = math.nan
        if not math.isfinite(v) or not self._fits(v):
            option = "/".join(param.opts) if param is not None and param.opts else "the value"
            bound = f"> {self.minimum:g}" if self.open else f">= {self.minimum:g}"
            raise BadInput(f"{option} must be a finite number {bound}, not {value}")
        return v

    def _fits(self, v: float) -> bool:
        return v > self.minimum if self.open else v >= self.minimum


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


#: Formats whose text keeps a dump's strings exactly (JSON escapes controls itself).
RAW_FORMATS = ("json", "csv")


def emit(text: str, output: str | None, summary: str, fmt: str = "table") -> None:
    """Print the report, or write it to ``output`` and print the one-line summary.

    A report in a human-readable ``fmt`` shows control characters as escapes (:func:`echo`),
    in a file too; one in :data:`RAW_FORMATS` keeps every string exact."""
    raw = fmt in RAW_FORMATS
    if not raw:
        text = printable(text, keep_newlines=True)
    if output is None:
        # color=True: click would strip what looks like ANSI styles off a pipe, and CSV
        # piped to a file keeps its strings exact too.
        click.echo(text, nl=False, color=True if raw else None)
        return
    try:
        # surrogateescape: a JSON or CSV report keeps a path's non-UTF-8 bytes as they were
        # (the human-readable formats escaped them above).
        with open(output, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
    except OSError as e:
        raise BadInput(f"cannot write {output}: {e.strerror or e}") from None
    echo(f"{one_line(summary)} (report written to {output})")
