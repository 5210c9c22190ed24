"""The one builder of the code replay runs and repro writes: every string from a dump is
a literal or a checked name, never code.

A dump is data that anyone may have written. Its kernel names, value names, paths and
expressions reach the programs of :mod:`.program` and the files of :mod:`.repro` only
through these functions: :func:`py_literal` (an ASCII Python literal), :func:`cpp_string`
(a C++ string literal), and checks that refuse, with a one-line :class:`ReplayError`,
a name that is not a plain identifier (:func:`identifier`, :func:`value_name`,
:func:`kernel_name`), a C++ parameter type outside a short list (:func:`cpp_type`) and
an expression that is more than names, constants, subscripts and
``reinterpret_tensor`` calls (:func:`check_expr`).
"""

from __future__ import annotations

import ast
import builtins
import keyword
import re
from typing import Any

from ..codegen.emit import cpp_string
from ..errors import AotiDebugError

__all__ = ["ReplayError", "check_expr", "cpp_string", "cpp_type", "identifier", "kernel_name", "py_literal",
           "shown", "value_name"]


class ReplayError(AotiDebugError):
    """A launch cannot be replayed; the message says what is missing and what to do."""


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: A value: a name, one element of it (``buf30[0]``), or a C++ shim's n-th output (``buf4#2``).
_VALUE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d{1,6})\]|#\d{1,6})?")
#: A number as a wrapper spells a literal argument.
_NUMBER = re.compile(r"-?[0-9]{1,30}(?:\.[0-9]{1,30})?(?:[eE][-+]?[0-9]{1,3})?")
#: Names of the instrumentation the wrapper calls (never a value of a launch).
_RESERVED_PREFIXES = ("_aoti_debug", "_AD_", "__")


def shown(value: Any, limit: int = 120) -> str:
    """A string from a dump as an error message may quote it: ASCII, one line, short."""
    text = ascii(value) if isinstance(value, str) else ascii(str(value))
    return text if len(text) <= limit else text[:limit - 4] + "...'"


def py_literal(value: Any) -> str:
    """A Python literal of ``value`` (str/bytes/int/float/bool/None, lists and tuples of
    them), ASCII only: a newline, a quote or an unpaired surrogate in a string stays
    inside the literal."""
    if isinstance(value, (list, tuple)):
        inner = ", ".join(py_literal(v) for v in value)
        if isinstance(value, list):
            return f"[{inner}]"
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, float) and value != value:
        return "float('nan')"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "float('inf')" if value > 0 else "-float('inf')"
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return ascii(value)
    raise ReplayError(f"cannot write a {type(value).__name__} as a Python literal")


def _plain(name: Any) -> bool:
    return (isinstance(name, str) and _IDENT.fullmatch(name) is not None and not keyword.iskeyword(name)
            and not name.startswith(_RESERVED_PREFIXES))


def identifier(name: Any, what: str) -> str:
    """``name`` if it is a plain identifier (``[A-Za-z_][A-Za-z0-9_]*``, not a keyword,
    not a dunder or an instrumentation name), else a :class:`ReplayError` naming ``what``."""
    if not _plain(name):
        raise ReplayError(f"the dump's {what} {shown(name)} is not a plain identifier: not replayed")
    return name


def value_name(arg: Any) -> tuple[str, int | None]:
    """A record's ``arg`` as ``(name, element)``: ``buf3``, ``buf30[0]`` (an element of
    a tuple or list), ``buf4#2`` (a C++ shim's third output: no element), or a literal
    the launch passes (``32``, ``-1.5e-05``, ``True``: a user-defined Triton kernel's
    argument whose parameter Inductor does not name), which the program never spells
    as a name. A builtin's name is refused: it would become a parameter that hides the
    builtin from the launch code."""
    if isinstance(arg, str) and (_NUMBER.fullmatch(arg) or arg in ("True", "False", "None")):
        return arg, None
    m = _VALUE.fullmatch(arg) if isinstance(arg, str) else None
    if m is None or not _plain(m.group(1)) or hasattr(builtins, m.group(1)):
        raise ReplayError(f"the dump's value name {shown(arg)} is not a plain identifier (or one element "
                          f"of one, as buf3[0]): not replayed")
    return m.group(1), None if m.group(2) is None else int(m.group(2))


def kernel_name(name: Any, wrapper: str) -> str:
    """A kernel name: a C++ function name of a C++ wrapper (an identifier); a dotted name of
    a Python wrapper (``extern_kernels.mm``, ``torch.ops.mylib.op.default``)."""
    ok = isinstance(name, str) and len(name) <= 300
    if ok and wrapper == "cpp":
        ok = _plain(name)
    elif ok:  # a dunder part is an operator overload (torch.ops.aten.__and__.Tensor)
        ok = all(_IDENT.fullmatch(p) and not keyword.iskeyword(p) for p in name.split("."))
    if not ok:
        raise ReplayError(f"the dump's kernel name {shown(name)} is not a plain "
                          f"{'identifier' if wrapper == 'cpp' else 'dotted name'}: not replayed")
    return name


#: The element types a generated C++ kernel takes (``cpp_pybinding``'s argument types).
_CPP_BASE = (r"(?:bool|char|signed char|unsigned char|short|int|long|long long|unsigned|unsigned int|"
             r"unsigned long|float|double|half|bfloat16|u?int(?:8|16|32|64)_t|"
             r"(?:(?:at|c10)::)?(?:Half|BFloat16|Float8_e4m3fn|Float8_e5m2|Float8_e4m3fnuz|Float8_e5m2fnuz|"
             r"Float8_e8m0fnu|complex<(?:float|double|c10::Half)>))")
_CPP_TYPE = re.compile(rf"(?:const )?{_CPP_BASE}(?: const)?(?: ?\*(?: ?const)?)?(?: ?__restrict__)?")


def cpp_type(text: Any) -> str:
    """A C++ kernel parameter's type, whitespace normalised, if it is a known element type
    (``const float*``, ``int64_t``, ``c10::complex<float>*``), else a :class:`ReplayError`."""
    norm = " ".join(str(text).split()) if isinstance(text, str) else None
    if norm is None or _CPP_TYPE.fullmatch(norm) is None:
        raise ReplayError(f"the C++ kernel's parameter type {shown(text)} is not one replay knows: not replayed")
    return norm


_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
_CALLS = frozenset({"reinterpret_tensor"})


def check_expr(expr: Any, what: str = "expression") -> ast.expr:
    """``expr`` parsed, if it is made of names, int/float/bool/None constants, tuples and
    lists, subscripts, integer arithmetic and calls of ``reinterpret_tensor``: the value
    expressions a Python wrapper passes to a launch. Anything else is refused."""
    if not isinstance(expr, str) or len(expr) > 4000:
        raise ReplayError(f"the dump's {what} {shown(expr)} is not an expression replay reads: not replayed")
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError):
        raise ReplayError(f"the dump's {what} {shown(expr)} is not an expression replay reads: not replayed") \
            from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            ok = (isinstance(node.func, ast.Name) and node.func.id in _CALLS and not node.keywords
                  and not any(isinstance(a, ast.Starred) for a in node.args))
        elif isinstance(node, ast.Name):
            ok = _plain(node.id)
        elif isinstance(node, ast.Constant):
            ok = node.value is None or (isinstance(node.value, (int, float, bool)))
        elif isinstance(node, ast.BinOp):
            ok = isinstance(node.op, _BINOPS)
        elif isinstance(node, ast.UnaryOp):
            ok = isinstance(node.op, (ast.USub, ast.UAdd))
        else:
            ok = isinstance(node, (ast.Expression, ast.Tuple, ast.List, ast.Subscript, ast.Load) + _BINOPS
                            + (ast.USub, ast.UAdd))
        if not ok:
            raise ReplayError(f"the dump's {what} {shown(expr)} is not an expression replay reads "
                              f"(only names, constants, subscripts and reinterpret_tensor): not replayed")
    return tree.body
