"""What the manager knows about one kernel launch, independent of the wrapper language."""

from __future__ import annotations

import dataclasses
import re
from typing import Literal

LaunchKind = Literal["triton", "user_triton", "cpp", "extern", "fallback", "custom_op", "other"]
Role = Literal["input", "output", "inout"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def base_name(expr: str) -> str:
    """The buffer an expression refers to: ``reinterpret_tensor(buf3, ...)`` -> ``buf3``."""
    expr = expr.strip()
    for prefix in ("reinterpret_tensor(", "reinterpret_tensor_wrapper(", "wrap_with_raii_handle_if_needed("):
        if expr.startswith(prefix):
            expr = expr[len(prefix):]
    m = _IDENT.search(expr)
    return m.group(0) if m else expr


@dataclasses.dataclass
class LaunchArg:
    """One value a launch reads or writes."""

    name: str
    """Stable record name: the buffer / input name (``buf3``, ``arg0_1``) or param name."""
    expr: str
    """Wrapper-language expression that evaluates to the value at the launch site."""
    role: Role = "input"
    kind: str = "tensor"
    """``tensor``, ``symint`` (a symbolic size), ``scalar`` or ``unknown`` (decided at run time)."""
    dtype: str | None = None
    """Element type where codegen knows it (C++ needs it for scalars)."""
    uninitialised: bool = False
    """Read before the launch although no earlier launch of this graph (nor the caller)
    wrote its storage: recorded as metadata only, never compared (set by the manager)."""
    volatile: tuple[tuple[str, str], ...] = ()
    """``(suffix, reason)`` for parts of the value that are nondeterministic by contract
    (RNG seeds and offsets): ``""`` names the whole value, ``"[2]"`` the third element of
    the tuple a fallback returns."""
    reuse: tuple[int, int] = ()
    """``(site, position among its after args)`` of the earlier instrumented launch whose
    output this input is, unchanged (set by the manager; ``SiteArg.reuse``)."""
    layout: tuple = ()
    """``(buffer, sizes, strides, offset)`` of a tensor as Inductor's IR lays it out, where
    all are static (``describe``): what the manager compares where ``expr`` is a C++ view,
    whose sizes are named arrays; ``()``: not known."""

    def volatile_reason(self, name: str) -> str | None:
        """The reason recorded for ``name`` (this arg or one element of it), if volatile."""
        suffix = name[len(self.name):] if name.startswith(self.name) else None
        for part, reason in self.volatile:
            if part == "" or part == suffix:
                return reason
        return None

    @property
    def before(self) -> bool:
        return self.role in ("input", "inout")

    @property
    def after(self) -> bool:
        return self.role in ("output", "inout")


@dataclasses.dataclass
class Launch:
    """One kernel launch as the manager sees it at compile time."""

    kernel: str
    """The kernel's name as the wrapper calls it (``triton_poi_fused_add_0``, ``extern_kernels.mm``)."""
    op: str
    """Canonical op name (format.schema.canonical_op) used to align wrappers."""
    kind: LaunchKind
    args: list[LaunchArg]
    graph: str = ""
    """Subgraph name ('' for the top-level graph)."""
    source: str | None = None
    """Where it came from: fused source nodes / original ATen ops, where known."""
    provenance: str = ""
    """What it was made from in the user's terms (``format.provenance.Provenance`` as
    JSON): set by the manager while the graph is being generated."""
    site: int = -1
    """The launch site's number in its wrapper (set by the emitter, shared by both phases)."""

    def unique_names(self) -> None:
        """Make arg names unique within the launch (two views of one buffer: ``buf3``, ``buf3#2``)."""
        seen: dict[tuple[str, bool], int] = {}
        for a in self.args:
            key = (a.name, a.before)
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:
                a.name = f"{a.name}#{seen[key]}"
