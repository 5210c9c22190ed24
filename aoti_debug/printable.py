"""Text from a dump made safe for a terminal: control characters shown as escapes.

    >>> printable("triton_\\x1b[2Jpoi_0")
    'triton_\\\\x1b[2Jpoi_0'

A dump is data from another process, often another person: its kernel names, arg
names, module paths, source lines and argv are strings that may hold anything. Printed
raw, an ESC sequence clears the screen, retitles the window or rewrites what the
report said; a CR or a bidi override makes a line read other than it is. Every
human-readable output (tables, text, Markdown, messages) passes dump strings through
:func:`printable`; JSON and CSV keep the exact strings.
"""

from __future__ import annotations

__all__ = ["printable", "UNPRINTABLE"]

#: Bidirectional overrides, embeddings and isolates (U+202A-U+202E, U+2066-U+2069) and
#: the marks that steer them (LRM, RLM, ALM): they reorder what a line appears to say.
_BIDI = (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)
#: Code points never printed raw: C0 controls (tab and newline too: inside a value
#: they forge table cells and lines), DEL, C1 controls (U+0080-U+009F: 8-bit CSI and
#: OSC to many terminals), :data:`_BIDI`, and lone surrogates (U+D800-U+DFFF: a path's
#: bytes that are not UTF-8, as Python decodes them; no terminal or UTF-8 file takes them).
UNPRINTABLE = frozenset((*range(0x20), 0x7F, *range(0x80, 0xA0), *_BIDI, *range(0xD800, 0xE000)))


_SHORT = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def _escape(code: int) -> str:
    if code in _SHORT:
        return _SHORT[code]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_TABLE = {c: _escape(c) for c in UNPRINTABLE}
_TABLE_LINES = {c: e for c, e in _TABLE.items() if c != 0x0A}


def printable(text: object, keep_newlines: bool = False) -> str:
    """``text`` (``str()`` of it) with every :data:`UNPRINTABLE` character escaped.

    Args:
        text: what to show; not a string: its ``str()``.
        keep_newlines: keep ``\\n`` as a line break (a whole report); else it is
            escaped like the others (one value, one line).

    Returns:
        The text with each such character as ``\\t``, ``\\n``, ``\\r``, ``\\xNN``
        (others below U+0100) or ``\\uNNNN``.
        Backslashes stay as they are, so escaping twice changes nothing.
    """
    s = text if isinstance(text, str) else str(text)
    return s.translate(_TABLE_LINES if keep_newlines else _TABLE)
