"""Where a kernel lives: its call in the generated wrapper, and what Inductor says it was made of.

Inductor writes provenance comments into what it generates::

    # Topologically Sorted Source Nodes: [sin, y], Original ATen: [aten.sin, aten.add]
    triton_poi_fused_add_sin_0.run(arg0_1, buf0, 32, stream=stream0)

(``//`` in the C++ wrapper), and above each Triton kernel's definition a
``# kernel path: ...`` comment naming the kernel's own file. User-defined Triton
kernels keep their Python function's name in the definition (``def my_kernel(``).

The wrapper file comes from the runtime (a ``graph`` line, with the launch's line in a
``site`` line) or, failing that, from a Python traceback in the command's output.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Iterable, Sequence

from ..format.files import open_regular
from ..format.schema import canonical_op
from .trace import Frame

#: Files larger than this are not read (a wrapper is a few MB at most).
MAX_FILE_BYTES = 64 << 20
#: How far from a runtime-given line the kernel's call may be (C++ hooks span a few lines).
NEAR_LINES = 40

_NODES_RE = re.compile(r"Source Nodes:\s*\[([^\]]*)\]")
_ATEN_RE = re.compile(r"Original ATen:\s*\[([^\]]*)\]")
_KERNEL_PATH_RE = re.compile(r"kernel path:\s*(\S+)")
_ORIGINAL_PATH_RE = re.compile(r"Original path:\s*(\S+)")  # a user-defined Triton kernel's def
_DECLARATION = ("extern ", "void ", "static ", "def ", "async_compile", "#", "//", "*", "template")
_GENERATED_MARKERS = ("async_compile", "_aoti_debug_graph", "CppWrapperCodeCache", "AOTInductorModel")
_USER_DECORATORS = ("@triton.jit", "@triton.autotune", "@jit", "@triton.heuristics")


@dataclasses.dataclass
class Source:
    """Where a launched kernel is in the generated code, and what it was fused from."""

    file: str | None = None
    """The generated wrapper (``.py`` or ``.cpp``) that launches the kernel."""
    line: int | None = None
    """Line of the kernel's call in ``file`` (1-based)."""
    code: str | None = None
    """The text of that line."""
    found_by: str | None = None
    """``runtime`` (the runtime named file and line), ``traceback`` or ``search``."""
    other_lines: list[int] = dataclasses.field(default_factory=list)
    """Other calls of the same kernel in ``file``, when the launch could not be told apart."""
    nodes: list[str] = dataclasses.field(default_factory=list)
    """Inductor's source nodes (FX node names) the kernel was fused from."""
    aten: list[str] = dataclasses.field(default_factory=list)
    """The original ATen ops it was fused from."""
    provenance: str | None = None
    """What the runtime reported the kernel was made from (where no comment says more)."""
    definition: str | None = None
    """``file:line`` of the kernel's definition (Triton source, C++ function)."""
    kernel_file: str | None = None
    """A Triton kernel's own source file (Inductor's ``# kernel path:`` comment)."""
    user_function: str | None = None
    """A user-defined Triton kernel's Python function."""
    user_source: str | None = None
    """``file:line`` of that function (Inductor's ``# Original path:`` comment)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Source":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})

    @property
    def where(self) -> str | None:
        if self.file is None:
            return None
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclasses.dataclass
class _Site:
    start: int
    call: int
    end: int


def find(
    kernel: str,
    wrapper_files: Sequence[str] = (),
    line: int | None = None,
    provenance: str | None = None,
    frames: Sequence[Frame] = (),
    call: int = 0,
) -> Source:
    """Everything the generated sources say about one launch of ``kernel``.

    Args:
        wrapper_files: the graph's file as the runtime printed it (``.py``, ``.cpp`` or
            ``.so``); several when the label was printed more than once, newest first.
        line: the launch's line in it, as the runtime printed it.
        provenance: the runtime's ``from=`` text for the launch.
        frames: Python traceback frames from the command's output, any order.
        call: the launch's ``call=`` count (which of several calls of the kernel, when
            nothing else tells them apart).
    """
    src = Source(provenance=provenance)
    _fill_user_function(src, provenance)
    candidates: list[tuple[str, list[int], str]] = []
    for wrapper_file in wrapper_files:
        for path in _expand(wrapper_file):
            candidates.append((path, [line] if line else [], "runtime"))
    by_file: dict[str, list[int]] = {}
    for fr in frames:
        by_file.setdefault(fr.file, []).append(fr.line)
    for path, hints in by_file.items():
        if path.endswith(".py") and not any(path == c[0] for c in candidates):
            candidates.append((path, hints, "traceback"))
    names = _names(kernel)
    for path, hints, how in candidates:
        lines = _read(path)
        if lines is None or not any(n in text for text in lines for n in names):
            continue
        if how == "traceback" and not _generated(lines):
            continue  # the user's own file (it may well mention the op)
        site, others = _choose(_sites(lines, kernel, names), hints, lines, call)
        if site is None:
            continue
        src.file, src.found_by = path, how
        src.line, src.code = site.call, lines[site.call - 1].strip()
        src.other_lines = others
        _comments_above(src, lines, site.start)
        _definition(src, kernel, path, lines)
        return src
    if wrapper_files:
        # The runtime named a file we cannot read or search: still worth showing.
        src.file, src.line, src.found_by = wrapper_files[0], line, "runtime"
    return src


# -- files -------------------------------------------------------------------------------
def _expand(path: str) -> list[str]:
    """A C++ wrapper's ``.so`` stands for its source next to it (AOTI packages keep both)."""
    p = Path(path)
    if p.suffix != ".so":
        return [path]
    out = [str(p.with_suffix(".cpp"))]
    try:
        out.extend(sorted(str(q) for q in p.parent.glob(p.stem.split(".")[0] + "*.cpp") if str(q) not in out))
    except OSError:
        pass
    return out


def _generated(lines: list[str]) -> bool:
    """An Inductor-generated wrapper (Python, or a Python module around C++ source)."""
    return any(m in text for text in lines[:400] for m in _GENERATED_MARKERS)


def _read(path: str) -> list[str] | None:
    try:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            return None
        with open_regular(path, MAX_FILE_BYTES, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return None


# -- call sites ---------------------------------------------------------------------------
def _names(kernel: str) -> list[str]:
    """Spellings of the kernel in generated code: the Python name, and a custom op's
    ``ns::op`` as the C++ wrapper passes it to the dispatcher."""
    names = [kernel]
    op = canonical_op(kernel)
    if kernel.startswith("torch.ops.") and "." in op:
        names.append(op.replace(".", "::", 1))
    return names


def _is_hook(text: str, phase: str, kernel: str) -> bool:
    """Our instrumentation of a launch: ``_aoti_debug.launch((...))`` in Python, a one-line
    ``{ ... ::aoti_debug_rt_1::launch(aoti_debug_site, {...}); }`` block in C++."""
    if f"_aoti_debug.{phase}(" not in text and not ("aoti_debug_rt" in text and f"::{phase}(" in text):
        return False
    return repr(kernel) in text or f'"{kernel}"' in text


def _sites(lines: list[str], kernel: str, names: list[str]) -> list[_Site]:
    """Every launch of ``kernel`` in a wrapper: instrumented (Python hooks) or found by name."""
    pattern = re.compile("|".join(
        rf"\"{re.escape(n)}\"" if "::" in n else rf"(?<![\w.])(?:call_)?{re.escape(n)}(?:\.run)?\s*\("
        for n in names
    ))
    sites = []
    for i, text in enumerate(lines):
        if not _is_hook(text, "launch", kernel):
            continue
        call = _next_code(lines, i + 1)
        if call is None:
            continue
        end = call
        for j in range(call, min(len(lines), call + NEAR_LINES)):
            if _is_hook(lines[j], "done", kernel):
                end = j + 1
                break
        # A C++ launch can be a block: its call is the line that names the kernel.
        named = [k + 1 for k in range(call - 1, end - 1) if pattern.search(lines[k])]
        sites.append(_Site(start=i + 1, call=named[0] if named else call, end=end))
    if sites:
        return sites
    for i, text in enumerate(lines):
        stripped = text.strip()
        if stripped.startswith(_DECLARATION) or "= async_compile" in stripped or "loadKernel" in stripped:
            continue
        if pattern.search(text):
            sites.append(_Site(start=i + 1, call=i + 1, end=i + 1))
    return sites


def _next_code(lines: list[str], start: int) -> int | None:
    """1-based number of the first line at or after index ``start`` that is a statement."""
    for j in range(start, min(len(lines), start + NEAR_LINES)):
        s = lines[j].strip()
        if s and not s.startswith(("#", "//", "_aoti_debug.")) and "aoti_debug" not in s:
            return j + 1
    return None


def _choose(sites: list[_Site], hints: list[int], lines: list[str], call: int) -> tuple[_Site | None, list[int]]:
    """The launch's site: the one a hint line falls in, else the only one, else (the wrapper
    is straight-line code, run once per call of the graph) the ``call``-th modulo their number."""
    for h in hints:
        for s in sites:
            if s.start <= h <= s.end:
                return s, []
    for h in hints:
        # A C++ hook's __LINE__ comes just before its call.
        after = [s for s in sites if h <= s.call <= h + NEAR_LINES]
        if after:
            return after[0], []
    if hints and not sites and 0 < hints[0] <= len(lines):
        call = _next_code(lines, hints[0] - 1) or hints[0]
        return _Site(start=hints[0], call=call, end=call), []
    if not sites:
        return None, []
    chosen = sites[call % len(sites)]
    return chosen, [s.call for s in sites if s is not chosen]


# -- what it was made of --------------------------------------------------------------------
def _comments_above(src: Source, lines: list[str], start: int) -> None:
    """Provenance comments directly above a launch (skipping our own hook lines)."""
    i = start - 2
    seen = 0
    while i >= 0 and seen < 12:
        s = lines[i].strip()
        if s.startswith(("#", "//")):
            _parse_provenance(src, s)
        elif not (s.startswith("_aoti_debug.") or "aoti_debug" in s):
            break
        i -= 1
        seen += 1


def _parse_provenance(src: Source, text: str) -> None:
    m = _NODES_RE.search(text)
    if m and not src.nodes:
        src.nodes = _split(m.group(1))
    m = _ATEN_RE.search(text)
    if m and not src.aten:
        src.aten = _split(m.group(1))
    m = _KERNEL_PATH_RE.search(text)
    if m and not src.kernel_file:
        src.kernel_file = m.group(1)
    m = _ORIGINAL_PATH_RE.search(text)
    if m and not src.user_source:
        src.user_source = m.group(1)


def _split(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _definition(src: Source, kernel: str, path: str, lines: list[str]) -> None:
    """The kernel's definition: in the Python wrapper, or in the C++ kernel source (an AOTI
    package keeps it next to the wrapper; the wrapper itself only declares it)."""
    py_def = re.compile(rf"^{re.escape(kernel)}\s*=\s*async_compile\.\w+\(")
    cpp_def = re.compile(rf"^\s*extern\s+\"C\".*\b{re.escape(kernel)}\s*\(")
    for file, text_lines in _definition_files(path, lines):
        for i, text in enumerate(text_lines):
            py = py_def.match(text)
            if not (py or cpp_def.match(text)):
                continue
            src.definition = f"{file}:{i + 1}"
            j = i - 1
            while j >= 0 and text_lines[j].strip().startswith(("#", "//")):
                _parse_provenance(src, text_lines[j].strip())
                j -= 1
            if py:
                _body(src, text_lines, i)
            return


def _definition_files(path: str, lines: list[str]) -> Iterable[tuple[str, list[str]]]:
    if path.endswith(".cpp"):
        p = Path(path)
        try:
            siblings = sorted(p.parent.glob(p.stem.split(".")[0] + "*.kernel.cpp"))
            siblings += sorted(q for q in p.parent.glob("*.kernel.cpp") if q not in siblings)
        except OSError:
            siblings = []
        for q in siblings[:20]:
            other = _read(str(q))
            if other is not None:
                yield str(q), other
    yield path, lines


def _body(src: Source, lines: list[str], start: int) -> None:
    """A Triton kernel's source inside ``async_compile.triton('name', '''...''')``."""
    decorators = []
    for text in lines[start + 1 : start + 400]:
        s = text.strip()
        if s.startswith("@"):
            decorators.append(s)
        m = re.match(r"def\s+(\w+)\s*\(", s)
        if m:
            # Inductor's own Triton kernels are @triton.jit too, under its heuristics;
            # a user kernel gets user_autotune (custom_kernel=True) or none.
            user = any(d.startswith("@triton_heuristics.user_autotune") for d in decorators) or (
                any(d.startswith(_USER_DECORATORS) for d in decorators)
                and not any(d.startswith("@triton_heuristics") for d in decorators))
            if user and not src.user_function:
                src.user_function = m.group(1)
            return
        if s.startswith("'''") or s.startswith('"""'):
            return


def _fill_user_function(src: Source, provenance: str | None) -> None:
    """The runtime reports a user kernel's provenance as ``module.qualname``."""
    if provenance and re.fullmatch(r"[\w.<>]+", provenance) and "." in provenance:
        src.user_function = provenance
