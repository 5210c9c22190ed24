"""The one builder of emitted code: every value goes through an escaping function.

Never paste a kernel name, a path or an arg name into generated code by hand: a
working directory containing ``'`` or a space, or an odd kernel name, must not break
the wrapper (the built-in printer pastes them into quotes).
"""

from __future__ import annotations

from typing import Any


def py_literal(value: Any) -> str:
    """A Python literal for str/int/float/bool/None/tuples of them (``repr`` escapes)."""
    if isinstance(value, (list, tuple)):
        inner = ", ".join(py_literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    raise TypeError(f"cannot emit {type(value).__name__} as a Python literal")


def py_call(func: str, *args: str) -> str:
    """``func(a, b)`` from already-built expressions."""
    return f"{func}({', '.join(args)})"


def py_tuple(exprs: list[str]) -> str:
    if not exprs:
        return "()"
    return "(" + ", ".join(exprs) + ("," if len(exprs) == 1 else "") + ")"


_CPP_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "?": "\\?"}


def cpp_string(value: str) -> str:
    """A C++ string literal; non-printable and non-ASCII bytes as octal escapes."""
    out = []
    for ch in value:
        if ch in _CPP_ESCAPES:
            out.append(_CPP_ESCAPES[ch])
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode("utf-8"))
    return '"' + "".join(out) + '"'
