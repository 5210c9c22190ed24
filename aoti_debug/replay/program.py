"""One launch of a compiled graph as a program of its own: its kernel and its launch code.

A dump keeps, per graph, a copy of the generated source it ran, with its sha256
(``run.json`` ``graphs[..].sources``; :mod:`.trust` hands out only copies that match)
and, per record, the launch site (``Record.site``) and the value's name in the wrapper
(``arg``) and the expression that computed it (``expr``). From these, a launch is cut
out of the generated code as a small Python module that needs torch (and Triton for
GPU kernels) only:

* **Python wrapper**: the module's header (imports, helper aliases such as
  ``reinterpret_tensor``), the definitions of the kernels the launch calls (an
  ``async_compile.cpp_pybinding`` / ``async_compile.triton`` statement each: generated
  C++ and Triton kernels, user-defined Triton kernels), and the lines between the
  launch's ``_aoti_debug.launch`` and ``_aoti_debug.done`` hooks (the kernel call:
  also an extern kernel, a fallback or a custom op), as a function ``launch(...)``
  whose parameters are the launch's values. A name the call reads that the function
  of the graph set up (``stream0 = get_raw_stream(0)``) is set up the same way.
* **C++ wrapper and AOTInductor** (``wrapper == "cpp"``): the generated C++ CPU kernel
  (``extern "C" void cpp_fused_...``), compiled through the same
  ``async_compile.cpp_pybinding`` as the Python wrapper compiles it, and called with
  the values in the order of the wrapper's call line. Other launches of a C++ wrapper
  (Triton kernels, shim calls of extern kernels) are not cut out: replay them from a
  Python-wrapper dump of the same model.

Nothing the dump says is pasted into the program as code: kernel and value names are
checked to be plain identifiers, expressions to be names, constants, subscripts and
``reinterpret_tensor`` calls, C++ parameter types to be known element types, and every
string the program holds is a literal made by :mod:`.safe`. The only code is the
generated source's own, verified.

Every value the launch code reads by an expression (``reinterpret_tensor(buf3, ...)``)
becomes a parameter of its own, bound to a tensor of the recorded shape and strides.
:class:`Program` holds the module's text; :meth:`Program.load` executes it (it compiles
the kernel, as the wrapper did) and returns ``launch``.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import keyword
import os
import re
import textwrap
import types
from typing import Callable, Sequence

from ..format.schema import Record
from .safe import ReplayError, check_expr, cpp_type, identifier, kernel_name, py_literal, shown, value_name
from .trust import GraphSource, Sources


@dataclasses.dataclass(frozen=True)
class Value:
    """A value the launch code reads or writes, as the dump recorded it."""

    name: str
    """The parameter of ``launch`` (the record's ``arg``, or a name for its expression)."""
    before: Record | None
    """Its record before the launch (inputs and in-place values)."""
    after: Record | None
    """Its record after the launch (outputs and in-place values)."""

    @property
    def record(self) -> Record:
        rec = self.before if self.before is not None else self.after
        assert rec is not None
        return rec

    @property
    def role(self) -> str:
        return self.record.role or ("input" if self.after is None else "output")


@dataclasses.dataclass
class Program:
    """A launch cut out of its generated wrapper."""

    kernel: str
    wrapper: str
    origin: str
    """The generated source it was cut from."""
    header: str
    """Imports, helpers and the kernel definitions (module level)."""
    body: str
    """The launch code, inside ``def launch(...)``."""
    params: tuple[str, ...]
    """``launch``'s parameters, in order: names of :attr:`values` (and scalars)."""
    results: tuple[tuple[str, str], ...]
    """``(value name, expression)`` pairs ``launch`` returns (the values after the launch)."""
    values: dict[str, Value]
    kernel_source: str = ""
    """The kernel's own source (C++ or Triton), for the reader of a repro."""
    lists: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """Parameters that take a list of values (``torch.cat``'s tensors): their values' names."""

    def module_source(self) -> str:
        body = textwrap.indent(self.body.rstrip() + "\n", "    ")
        returns = ", ".join(f"{py_literal(name)}: {_result_expr(expr)}" for name, expr in self.results)
        params = ", ".join(identifier(p, "value name") for p in self.params)
        doc = py_literal(f"{self.kernel}, cut out of {os.path.basename(self.origin)}.")
        return (f"{self.header.rstrip()}\n\n\ndef launch({params}):\n"
                f"    {doc}\n"
                f"{body}    return {{{returns}}}\n")

    def load(self) -> Callable[..., dict]:
        """Executes the module (compiling its kernel) and returns its ``launch``."""
        module = types.ModuleType(f"aoti_debug_replay_{re.sub(r'[^0-9A-Za-z_]', '_', self.kernel)}")
        module.__file__ = self.origin
        try:
            exec(compile(self.module_source(), f"<replay of {shown(self.kernel)}>", "exec"), module.__dict__)
        except ReplayError:
            raise
        except Exception as e:
            raise ReplayError(f"cannot compile {shown(self.kernel)} from {shown(self.origin)}: {type(e).__name__}: "
                              f"{shown(str(e).splitlines()[0] if str(e) else '')}") from None
        return module.__dict__["launch"]


# ------------------------------------------------------------------------------ helpers
def _result_expr(expr: str) -> str:
    """What ``launch`` returns for a value: its name, or an element of one (``buf30[0]``)."""
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(\[\d{1,6}\])?", expr)
    if m is None:
        raise ReplayError(f"{shown(expr)} is not a value name: not replayed")
    return identifier(m.group(1), "value name") + (m.group(2) or "")


def launch_values(records: Sequence[Record]) -> dict[str, Value]:
    """The launch's values by name, from its records (one launch, both phases)."""
    before: dict[str, Record] = {}
    after: dict[str, Record] = {}
    for r in records:
        value_name(r.arg)  # a name that is not a plain identifier is refused before it reaches code
        (before if r.phase == "before" else after)[r.arg] = r
    names = list(dict.fromkeys([*before, *after]))
    return {n: Value(_identifier(n), before.get(n), after.get(n)) for n in names}


def _identifier(arg: str) -> str:
    """The parameter name of value ``arg`` (checked by :func:`.safe.value_name`): a
    literal (``32``, ``True``) or an element (``buf30[0]``) made an identifier."""
    name = re.sub(r"\W", "_", arg)
    return name if name.isidentifier() and not keyword.iskeyword(name) else f"v_{name}"


def program(sources: Sources, records: Sequence[Record]) -> Program:
    """The program of the launch whose records (both phases) are ``records``.

    Args:
        sources: the run's generated sources, as replay may run them (:class:`.trust.Sources`).

    Raises:
        ReplayError: the source is gone or unverified, a name or expression of the dump
            is not plain, or this kind of launch cannot be cut out.
    """
    first = records[0]
    src = sources.source(first.graph)
    kernel_name(first.kernel, src.wrapper)
    values = launch_values(records)
    if src.wrapper == "cpp":
        return _cpp_program(first, src, values)
    return _python_program(first, src.path, src.text, values)


View = tuple  # (size, stride, storage offset), as reinterpret_tensor takes them


def wrapper_aliases(sources: Sources, graph: str) -> dict[str, tuple[str, View | None]]:
    """Names the graph's Python wrapper binds to another value: ``buf31 = buf30[0]`` (an
    element of an extern kernel's tuple), ``buf5 = buf2`` (a reused buffer),
    ``buf20 = reinterpret_tensor(buf19, (2, 12, 256), (3072, 256, 1), 0)`` (a view of
    one) -> what they name, as records name it (``buf30[0]``), and the view. Empty for a
    C++ wrapper or a lost source."""
    try:
        src = sources.source(graph)
        if src.wrapper == "cpp":
            return {}
        tree = ast.parse(src.text)
    except (ReplayError, OSError, SyntaxError, ValueError, RecursionError):
        return {}
    found: dict[str, tuple[str, View | None]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value, target = node.value, node.targets[0].id
            if isinstance(value, ast.Name):
                found[target] = (value.id, None)
            elif (isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name)
                  and isinstance(value.slice, ast.Constant) and isinstance(value.slice.value, int)):
                found[target] = (f"{value.value.id}[{value.slice.value}]", None)
            elif (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                  and value.func.id == "reinterpret_tensor" and len(value.args) == 4
                  and isinstance(value.args[0], ast.Name)):
                try:
                    size, stride, offset = (ast.literal_eval(a) for a in value.args[1:])
                    found[target] = (value.args[0].id, (list(size), list(stride), int(offset)))
                except (ValueError, TypeError, SyntaxError):
                    continue
    return found


# ------------------------------------------------------------------------ Python wrapper
_AD_NAMES = ("_aoti_debug", "_AD_SITE_", "_aoti_debug_graph")


def _launch_lines(text: str, r: Record) -> tuple[int, list[str]]:
    """The line number of the launch hook and the lines up to its done hook."""
    lines = text.splitlines()
    if isinstance(r.site, int) and not isinstance(r.site, bool) and r.site >= 0:
        start = re.compile(rf"^\s*_aoti_debug\.launch\(_AD_SITE_{int(r.site)}\b")
        stop = re.compile(rf"^\s*_aoti_debug\.done\(_AD_SITE_{int(r.site)}\b")
    else:
        tag = re.escape(f"# {r.kernel!r}")
        start = re.compile(rf"^\s*_aoti_debug\.launch\(.*{tag}\s*$")
        stop = re.compile(rf"^\s*_aoti_debug\.done\(.*{tag}\s*$")
    for i, line in enumerate(lines):
        if start.match(line):
            for j in range(i + 1, len(lines)):
                if stop.match(lines[j]):
                    return i + 1, lines[i + 1:j]
                if start.match(lines[j]):
                    break
            break
    raise ReplayError(f"launch site {shown(r.site)} ({shown(r.kernel)}) is not in the generated wrapper: was it "
                      f"compiled at another level or kernel filter? re-record it")


def _free_names(tree: ast.AST) -> tuple[list[str], set[str]]:
    """Names read before being bound (in order of first use) and names bound."""
    reads: list[str] = []
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                bound.add(node.id)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in reads:
            reads.append(node.id)
    return [n for n in reads if n not in bound], bound


_ELEMENT = re.compile(r"^(\w+)\[(\d+)\]$")


def _substitute(body: str, values: dict[str, Value]) -> str:
    """Each value read by an expression becomes its own name (longest expressions first);
    the elements of a list share their list's expression, which becomes the list's name."""
    exprs = []
    for v in values.values():
        for rec in (v.before, v.after):
            if rec is not None and rec.expr and rec.expr != rec.arg:
                check_expr(rec.expr, f"expression of {rec.arg}")
                element = _ELEMENT.match(rec.arg)
                exprs.append((rec.expr, _identifier(element.group(1)) if element else v.name))
    for expr, name in sorted(set(exprs), key=lambda e: -len(e[0])):
        try:
            ast.literal_eval(expr)
            continue  # a constant the code spells out: nothing to bind
        except (ValueError, SyntaxError):
            pass
        body = re.sub(rf"(?<![\w.]){re.escape(expr)}(?!\w)", lambda _m: name, body)
    return body


def _module_level(tree: ast.Module) -> tuple[list[ast.stmt], dict[str, ast.stmt], set[str]]:
    """The module's setup statements, its kernel definitions by name, and every name it binds."""
    setup: list[ast.stmt] = []
    kernels: dict[str, ast.stmt] = {}
    names: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            if isinstance(stmt, ast.ImportFrom) and (stmt.module or "").startswith("aoti_debug"):
                continue
            setup.append(stmt)
            names.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        elif isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
            target = stmt.targets[0].id
            read = {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)}
            if target.startswith(_AD_NAMES) or read & {"_aoti_debug", "_aoti_debug_graph", "runner", "Runner"}:
                continue
            call = stmt.value
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and isinstance(call.func.value, ast.Name) and call.func.value.id == "async_compile"):
                kernels[target] = stmt
            else:
                setup.append(stmt)
            names.add(target)
        elif isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            names.add(stmt.name)
    return setup, kernels, names


def _setup_in_call(tree: ast.Module, name: str, before_line: int, module_names: set[str]) -> ast.stmt | None:
    """The last ``name = <expression of module names and constants>`` before
    ``before_line`` (``stream0 = get_raw_stream(0)``, ``buf7 = empty_strided_cpu(...)``),
    if that is what the last assignment of ``name`` there is."""
    stmt = _last_assignment(tree, name, before_line)
    if stmt is not None and {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)} <= module_names:
        return stmt
    return None


def _last_assignment(tree: ast.Module, name: str, before_line: int) -> ast.Assign | None:
    found = None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == name and node.lineno <= before_line
                and (found is None or node.lineno > found.lineno)):
            found = node
    return found


def _views(tree: ast.Module, at: int, values: dict[str, Value], module_names: set[str]) -> dict[str, list[str]]:
    """Outputs of the launch (values it does not read) that the wrapper made as
    ``reinterpret_tensor`` views of another buffer: name -> the statements that make
    them again (the other buffer's allocation, where it is not a value of the launch)."""
    by_name = {v.name: v for v in values.values()}
    found: dict[str, list[str]] = {}
    for v in values.values():
        if v.before is not None and not v.before.uninitialised:
            continue
        view = _last_assignment(tree, v.name, at)
        if view is None or not (isinstance(view.value, ast.Call) and isinstance(view.value.func, ast.Name)
                                and view.value.func.id == "reinterpret_tensor" and view.value.args
                                and isinstance(view.value.args[0], ast.Name)):
            continue
        base = view.value.args[0].id
        statements = []
        if base not in by_name:
            alloc = _setup_in_call(tree, base, view.lineno, module_names)
            if alloc is None:
                continue
            statements.append(ast.unparse(alloc))
        elif by_name[base].before is not None and not by_name[base].before.uninitialised:
            continue  # a view of a value with data: keep the recorded values apart
        statements.append(ast.unparse(view))
        found[v.name] = statements
    return found


def _segment(text: str, stmt: ast.stmt) -> str:
    """A statement as the generated code wrote it (its kernel source keeps its lines)."""
    segment = ast.get_source_segment(text, stmt)
    return segment if segment is not None else ast.unparse(stmt)


def _python_program(first: Record, path: str, text: str, values: dict[str, Value]) -> Program:
    at, lines = _launch_lines(text, first)
    lines = [ln for ln in lines if ln.strip() and not ln.strip().startswith("#")]
    body = _substitute(textwrap.dedent("\n".join(lines)), values)
    try:
        body_tree = ast.parse(body)
        module = ast.parse(text)
    except SyntaxError as e:
        raise ReplayError(f"cannot parse the launch code of {first.kernel} in {path}: {e}") from None
    setup, kernels, module_names = _module_level(module)
    free, bound = _free_names(body_tree)
    by_name = {v.name: v for v in values.values()}
    lists: dict[str, list[str]] = {}
    for v in values.values():
        element = _ELEMENT.match(v.record.arg)
        if v.before is not None and element:
            lists.setdefault(_identifier(element.group(1)), []).append(v.name)
    params: list[str] = []
    used_kernels: list[str] = []
    prelude: list[str] = []
    for name in free:
        if name in by_name or name in lists:
            params.append(name)
        elif name in kernels:
            used_kernels.append(name)
        elif name in module_names or hasattr(builtins, name):
            continue
        else:
            stmt = _setup_in_call(module, name, at, module_names)
            if stmt is None:
                raise ReplayError(f"the launch code of {first.kernel} reads {name!r}, which neither the dump "
                                  f"nor the wrapper's module defines")
            prelude.append(_segment(text, stmt))
    # An output that is a view of another buffer (the slices a ``cat`` kernel writes
    # into one buffer) is that view again, not memory of its own.
    for name, statements in _views(module, at, values, module_names).items():
        if name in params:
            params.remove(name)
        bound.add(name)
        prelude.extend(s for s in statements if s not in prelude)
    in_lists = {n for names in lists.values() for n in names}
    # Values passed to the hooks but not read by the call (an input it reads only
    # through another name) are passed too: launch's signature is the launch's values.
    for v in values.values():
        if v.name not in params and v.name not in bound and v.name not in in_lists and v.before is not None:
            params.append(v.name)
    results = []
    for v in values.values():
        if v.after is None:
            continue
        element = _ELEMENT.match(v.after.arg)
        if v.name in params or v.name in bound:
            results.append((v.after.arg, v.name))
        elif element and (_identifier(element.group(1)) in bound or _identifier(element.group(1)) in params):
            results.append((v.after.arg, f"{_identifier(element.group(1))}[{element.group(2)}]"))
        else:
            raise ReplayError(f"{first.kernel}'s output {v.after.arg} is neither passed to nor made by its launch code")
    header = [_segment(text, s) for s in setup]
    kernel_source = []
    for k in used_kernels:
        header.append(_segment(text, kernels[k]))
        call = kernels[k].value
        kernel_source.extend(a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                             and "\n" in a.value)
    if "async_compile" in module_names:
        header.append("async_compile.wait(globals())")
    body = "\n".join(prelude + [body])
    return Program(first.kernel, "python", path, "\n".join(header), body, tuple(params), tuple(results), values,
                   "\n".join(kernel_source), {k: tuple(v) for k, v in lists.items()})


# ---------------------------------------------------------------------------- C++ wrapper
_CPP_PREFIX = "#include <torch/csrc/inductor/cpp_prefix.h>"


def _split_args(text: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _cpp_definition(text: str, kernel: str) -> tuple[str, list[str]]:
    """The kernel's definition (renamed ``kernel``, as ``cpp_pybinding`` calls it) and its
    parameter types."""
    head = re.compile(rf'extern\s+"C"\s+void\s+{re.escape(kernel)}\s*\(([^)]*)\)\s*\{{', re.S)
    m = head.search(text)
    if m is None:
        raise ReplayError(f"{kernel} is not a C++ kernel defined in the generated source: only generated C++ "
                          f"kernels of a C++ wrapper can be replayed; replay other launches from a Python-wrapper "
                          f"dump of the same model")
    depth, i = 0, m.end() - 1
    while i < len(text):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                break
        i += 1
    definition = text[m.start():i + 1]
    definition = re.sub(rf"\b{re.escape(kernel)}\s*\(", "kernel(", definition, count=1)
    types_ = []
    for param in _split_args(m.group(1)):
        pm = re.match(r"(.*?)([A-Za-z_]\w*)\s*$", param, re.S)
        if pm is None:
            raise ReplayError(f"cannot read parameter {param!r} of {kernel}")
        types_.append(" ".join(pm.group(1).split()))
    return definition, types_


def _cpp_call_args(text: str, kernel: str, names: set[str]) -> list[str]:
    """The arguments of the call of ``kernel`` that passes the launch's values ``names``
    (a kernel of a repeated block is called once per block, with other buffers)."""
    call = re.compile(rf"^\s*{re.escape(kernel)}\((.*)\);\s*$", re.M)
    found = list(dict.fromkeys(m.group(1) for m in call.finditer(text)))
    if not found:
        raise ReplayError(f"the generated source never calls {kernel}")
    if len(found) > 1:
        found = [f for f in found if set(re.findall(r"\b([A-Za-z_]\w*)\.(?:data_ptr|get)\(\)", f)) == names]
        if len(found) != 1:
            raise ReplayError(f"cannot tell which call of {kernel} in the generated source this launch was")
    return _split_args(found[0])


_CPP_LITERAL = re.compile(r"^\(?\s*(-?\d+)(?:L|LL|UL|ULL)?\s*\)?$")


def _cpp_program(first: Record, src: GraphSource, values: dict[str, Value]) -> Program:
    kernel = identifier(first.kernel, "kernel name")
    path, text = src.path, src.text
    # The wrapper's own text, then the kernel files AOTInductor writes beside it
    # (``<hash>.kernel.cpp``: the wrapper only declares its kernels); the dump keeps both.
    for source_text in (text, *src.extra):
        try:
            definition, arg_types = _cpp_definition(source_text, kernel)
            break
        except ReplayError as e:
            missing = e
    else:
        raise missing
    arg_types = [cpp_type(t) for t in arg_types]
    tensors = {v.record.arg for v in values.values() if v.record.kind == "tensor"}
    call_args = _cpp_call_args(text, kernel, tensors)
    if len(call_args) != len(arg_types):
        raise ReplayError(f"{kernel} takes {len(arg_types)} arguments but is called with {len(call_args)}")
    by_arg = {v.record.arg: v for v in values.values()}
    params: list[str] = []
    passed: list[str] = []
    for expr in call_args:
        ptr = re.search(r"\b([A-Za-z_]\w*)\.(?:data_ptr|get)\(\)", expr)
        literal = _CPP_LITERAL.match(expr)
        if ptr is not None and ptr.group(1) in by_arg:
            name = by_arg[ptr.group(1)].name
        elif literal is not None:
            passed.append(literal.group(1))
            continue
        elif re.fullmatch(r"[A-Za-z_]\w*", expr) and expr in by_arg:
            name = by_arg[expr].name
        else:
            raise ReplayError(f"{kernel} is passed {shown(expr)}, which the dump does not record")
        if name not in params:
            params.append(name)
        passed.append(name)
    for v in values.values():
        if v.name not in params:
            raise ReplayError(f"{kernel}'s value {v.record.arg} is not one of its call's arguments")
    source = f"{_CPP_PREFIX}\n{definition}\n"
    header = "\n".join([
        "import torch",
        "from torch._inductor.async_compile import AsyncCompile",
        "async_compile = AsyncCompile()",
        f"{kernel} = async_compile.cpp_pybinding({py_literal(arg_types)}, {py_literal(source)})",
        "async_compile.wait(globals())",
    ])
    args = [str(int(a)) if a.lstrip("-").isdigit() else identifier(a, "value name") for a in passed]
    body = f"{kernel}({', '.join(args)})"
    results = tuple((v.after.arg, v.name) for v in values.values() if v.after is not None)
    return Program(first.kernel, "cpp", path, header, body, tuple(params), results, values, source)
