"""Our debug-printer manager: decides, per launch, what code to emit and where.

It takes the built-in ``DebugPrinterManager``'s place on every wrapper (so Inductor's
own call sites reach it), but instruments nothing there: every launch is bracketed
by ``aoti_debug.codegen.inductor`` with a :class:`~aoti_debug.codegen.launch.Launch`
description, and this class turns that into Python or C++ lines.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any

from ..config import CompileSettings
from ..format import schema
from .launch import Launch, LaunchArg, base_name

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The Python wrapper's line before what may write a tensor whose stats a side deferred
#: (``runtime/cuda_graphs``: inside a CUDA graph, level stats, sides' stats launches wait
#: and go as one launch here).
PENDING_LINE = "_aoti_debug.pending()  # what follows may write a tensor whose stats are deferred"
#: The C++ wrapper's (``cpp_emitter.pending_line``): level stats' sides of a ``cpp_wrapper``
#: or AOTInductor model wait there too (``native/device_launch.h``'s ``PendingRun``).
CPP_PENDING_CALL = "::pending();"
#: Wrapper lines that only name buffers (comments, deletions, checks of an input's layout,
#: our pending line, the reuse and alias lines whose storage the manager follows), in
#: Python and in C++ (``buf3.reset();``, ``auto buf5 = std::move(buf2);  // reuse``): no
#: write between a producer and its reader.
_NAMES_ONLY = ("#", "del ", "//", "assert_size_stride(", "assert_alignment(", PENDING_LINE.split("#")[0].strip())
_NAMES_ONLY_END = ("# reuse", "# alias", "// reuse", "// alias", CPP_PENDING_CALL)
_RESET = re.compile(r"[A-Za-z_]\w*\.reset\(\);")
#: The levels whose records of CUDA tensors come from the device ring, where an input's
#: record may take its producer's stats (``SiteArg.reuse``).
REUSE_LEVELS = ("stats", "print")
#: Devices whose graph inputs a graph call reads once, at its first launch (``Inputs``):
#: CUDA, where a launch that takes a record launches no stats kernel for it (the device
#: ring). On the CPU the Python runtime reads every input where it is used, and in the C++
#: runtime a weight read once a call costs what reading it where it is used costs.
INPUTS_DEVICES = ("cuda",)
#: The inputs site's kernel and op name in records (no kernel of Inductor's is so named).
INPUTS_KERNEL = schema.INPUTS_KERNEL


@dataclasses.dataclass
class Inputs:
    """The weights and other constant inputs a graph call reads, read once before its
    first launch (levels ``REUSE_LEVELS``, every wrapper): an instrumented launch of its
    own (``INPUTS_KERNEL``, after args only) that the launches reading them take their
    stats from (``SiteArg.reuse``), as from any producer, while neither a launch nor a
    line outside one touched their storage. One side for all of them instead of one per
    launch that reads them (on the transformer of benchmarks/: 16 transposed weights and
    the biases and norms in two stats launches), and most ``before`` sides launch nothing.
    Its line is written when the wrapper is (``open_inputs`` of the emitters):
    only then are all its values known."""

    code: int
    """``id`` of the code buffer it was opened in: launches in another one take nothing."""
    site: int
    graph: str
    args: list[LaunchArg] = dataclasses.field(default_factory=list)
    exprs: dict[str, int] = dataclasses.field(default_factory=dict)
    """Spelled expression -> position among ``args``."""
    touched: set[str] = dataclasses.field(default_factory=set)
    """Storages written or named outside a launch since it was opened: read where used."""
    closed: bool = False
    cpp: bool = False
    """The C++ wrapper's (its views spelled anew from their layout: ``cpp_emitter``)."""
    reserve: Any = None
    """The emitter's: the site's number, taken when a launch first links to it (a graph
    that takes nothing from it numbers its sites as without it)."""

    def launch(self) -> Launch:
        return Launch(kernel=INPUTS_KERNEL, op=INPUTS_KERNEL, kind="other", args=list(self.args),
                      graph=self.graph, source="graph inputs and constants, read once a call", site=self.site)


class Manager:
    """Per-wrapper state: settings, which storages already hold data, header emitted.

    Buffer names are followed to the storage they live in: ``buf0 =
    reinterpret_tensor(buf2, ...)  # alias`` (a view that a kernel writes in parts, as
    Inductor lowers ``torch.cat``), ``buf5 = buf2  # reuse`` and ``buf3 = buf2[0]`` (an
    element of a fallback's result) all name ``buf2``'s memory.
    """

    def __init__(self, settings: CompileSettings):
        self.settings = settings
        self.written: set[str] = set()
        """Storages (root buffer names) that a launch of this graph has written."""
        self.storage: dict[str, str] = {}
        """Buffer name -> the name of the buffer whose memory it is (alias, reuse)."""
        self.header_done = False
        self.launches = 0
        self.producers: dict[str, dict[str, tuple[int, int, tuple]]] = {}
        """Storage -> {expression -> (site, position among its after args, its IR layout)}:
        the values an instrumented launch wrote that no launch, and no line outside one,
        touched since (``SiteArg.reuse``, at ``REUSE_LEVELS``; ``LaunchArg.layout``)."""
        self.reuse_of: dict[str, str] = {}
        """Buffer name -> the buffer whose memory it reuses from its start (``ReuseLine``)."""
        self._mark: tuple[int, int] = (0, 0)
        """``(id(code), lines)``: where the last launch's lines ended in the wrapper's code."""
        self.inputs: Inputs | None = None
        """The weights read once a call (``Inputs``), once the graph's first launch is written."""
        self.deferred_reads: set[str] = set()
        """Storages a side whose stats may be deferred read since the last pending line
        (``PENDING_LINE``; Python wrapper, level stats): a launch that writes one, or a line
        that names one, is preceded by a pending line."""
        self._pending_marks: dict[int, tuple[int, str]] = {}
        """``id(code)`` -> where its last launch's lines end, and that line's indentation."""
        self._inputs_deferred = False
        """The graph inputs' side may be deferred: a graph input linked to it goes into
        ``deferred_reads``."""
        self.layouts: set[tuple] = set()
        """``(dtype, sizes, strides, offset)`` of the static tensors the Python wrapper's
        instrumented launches pass, at the levels whose CUDA records come from the device
        ring, summarised by the fused stats kernels (``REUSE_LEVELS``): those kernels
        compile ahead (``precompile_layouts``)."""

    # -- the DebugPrinterManager interface (Inductor's own call sites) ----------------
    debug_printer_level = "0"
    use_array_ref = False

    def set_printer_args(self, *args, **kwargs) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def codegen_model_inputs_value_print(self, *args, **kwargs) -> None:
        pass

    def codegen_intermediate_tensor_value_save(self, *args, **kwargs) -> None:
        pass

    def codegen_intermediate_tensor_value_print(self, *args, **kwargs) -> None:
        pass

    # -- our path --------------------------------------------------------------------
    def matches(self, launch: Launch) -> bool:
        return self.settings.kernels.matches(launch.kernel, launch.op)

    def prepare(self, launch: Launch) -> Launch:
        """Flag what a launch reads before anything wrote it, so that no record ever
        presents unwritten memory as data.

        A value is data before a launch only if its storage came from the caller (graph
        inputs, constants: anything not allocated in this graph) or an earlier launch
        of this graph wrote it. Anything else is flagged ``uninitialised``: a kernel
        that writes both halves of a ``torch.cat`` buffer and then reads the whole
        buffer (RoPE's ``rotate_half``), a user-defined Triton kernel filling a fresh
        ``empty``, an ``in_out_ptr`` that a kernel writes before reading.
        """
        fixed = []
        for a in launch.args:
            if a.before and a.kind in ("tensor", "unknown") and not self._holds_data(a.name):
                a = dataclasses.replace(a, uninitialised=True)
            fixed.append(a)
        launch = dataclasses.replace(launch, args=fixed)
        launch.unique_names()
        if self.producers or (self.inputs is not None and not self.inputs.closed):
            launch.args = [self._reuse(a) for a in launch.args]
        if not launch.provenance:
            from .provenance import describe

            described = describe(launch)
            launch.provenance = described.to_json() if described is not None else ""
        return launch

    def root(self, name: str) -> str:
        """The buffer that owns ``name``'s memory (``name`` itself unless an alias)."""
        name = base_name(name.split("#")[0])
        seen = set()
        while name in self.storage and name not in seen:
            seen.add(name)
            name = self.storage[name]
        return name

    def _holds_data(self, name: str) -> bool:
        root = self.root(name)
        # Graph inputs, constants and anything not allocated in this graph hold data.
        return root in self.written or not root.startswith("buf")

    def alias(self, new: str, old: str, reuse: bool = False) -> None:
        """``new`` names the memory of ``old`` (a reinterpret view, a reuse line, a
        multi-output element): writes through either are writes to one storage.
        ``reuse``: a buffer reuse line, ``new`` starts where ``old`` does."""
        new, old_name = base_name(new), base_name(old)
        old = self.root(old)
        if new != old:
            self.storage[new] = old
            if reuse:
                self.reuse_of[new] = old_name

    def _start(self, name: str) -> str:
        """The buffer whose memory ``name``'s starts at: itself, or what a chain of buffer
        reuses (``bufB = bufA  # reuse``) leads back to."""
        seen = set()
        while name in self.reuse_of and name not in seen:
            seen.add(name)
            name = self.reuse_of[name]
        return name

    def mark_written(self, launch: Launch) -> None:
        for a in launch.args:
            if a.after and a.kind in ("tensor", "unknown"):
                for root in (self.root(a.name), self.root(a.expr)):
                    self.written.add(root)
                    self.producers.pop(root, None)
                    if self.inputs is not None:
                        self.inputs.touched.add(root)

    # -- input stats reuse (SiteArg.reuse) -------------------------------------------
    @property
    def reuses(self) -> bool:
        s = self.settings
        return s.reuse and s.level in REUSE_LEVELS and "after" in s.phases and "before" in s.phases

    def _reuse(self, a: LaunchArg) -> LaunchArg:
        """``a`` with its producer, where it is an input that an earlier instrumented
        launch's output is: the same expression of the same storage, or another view of
        the same elements in the same order (both contiguous from one offset, as
        ``reinterpret_tensor(buf3, (24, 64), (64, 1), 0)`` of a ``(2, 12, 64)`` ``buf3``,
        read from the expression or, for a C++ view whose sizes are named arrays, from the
        IR's layout): the same stats and checksum (which weighs each element by its
        logical index)."""
        if not a.before or a.uninitialised or a.kind not in ("tensor", "unknown"):
            return a
        made = self.producers.get(self.root(a.name))
        found = made.get(_spelled(a.expr)) if made else None
        if found is None and made:
            span = self._span(a.expr, a.layout)
            if span is not None:
                found = next((p for expr, p in made.items() if self._span(expr, p[2]) == span), None)
        if found is None and self.inputs is not None:
            at = self._from_inputs(a)
            return dataclasses.replace(a, reuse=(self.inputs.site, at)) if at is not None else a
        return dataclasses.replace(a, reuse=found[:2]) if found is not None else a

    # -- graph inputs read once a call (Inputs) ----------------------------------------
    def open_inputs(self, wrapper, code, cpp: bool) -> None:
        """Before a launch's lines are written: at the graph's first, open its ``Inputs``
        there (where inputs are linked at all); at a launch in another code buffer (a
        subgraph), stop taking from it."""
        if self.inputs is not None:
            if self.inputs.code != id(code):
                self.inputs.closed = True
            return
        if not self.reuses or getattr(code, "_lines", None) is None:
            return
        from . import cpp_emitter, python_emitter

        from .context import graph_name

        self.inputs = Inputs(code=id(code), site=-1, graph="", cpp=cpp)
        self._inputs_deferred = not cpp
        try:
            self.inputs.graph = graph_name()
        except Exception:  # (no graph being generated: the manager driven alone, in tests)
            pass
        try:
            (cpp_emitter if cpp else python_emitter).open_inputs(self, wrapper, code, self.inputs)
        except Exception as e:  # each launch then reads its weights itself
            self.inputs.closed = True
            _warn_inputs(e)

    def _from_inputs(self, a: LaunchArg) -> int | None:
        """``a``'s position among the inputs site's values (added there if new), where it
        is a constant or a graph input at the same address every call (a parameter, a
        buffer: ``describe.static_input_device``; a model input new at every call would
        make the site's planned launches miss) on an ``INPUTS_DEVICES`` device, untouched
        in this call, spelled as itself or as a ``reinterpret_tensor`` of it with literal sizes
        (an expression the call's first launch can evaluate too); else None."""
        inputs = self.inputs
        if inputs.closed or a.kind != "tensor":
            return None
        root = self.root(a.name)
        if root.startswith("buf") or root in self.written or root in inputs.touched:
            return None
        expr = _spelled(a.expr)
        at = inputs.exprs.get(expr)
        if at is not None:
            return at
        if not (_cpp_input(a.expr, root, a.layout) if inputs.cpp else _of_input(expr, root)):
            return None
        from .describe import static_input_device

        if static_input_device(root) not in INPUTS_DEVICES:
            return None
        if inputs.site < 0:
            inputs.site = inputs.reserve()
        at = inputs.exprs[expr] = len(inputs.args)
        if self._inputs_deferred:
            self.deferred_reads.add(root)
        name = root if not any(x.name == root for x in inputs.args) else f"{root}#{at + 1}"
        inputs.args.append(LaunchArg(name=name, expr=a.expr, role="output", kind="tensor", dtype=a.dtype,
                                     layout=a.layout))
        return at

    def _span(self, expr: str, layout: tuple) -> tuple | None:
        """Which elements ``expr`` names, in which logical order, as a key that two views
        share only when they name the same elements in the same order: the
        ``_contiguous_span`` of ``expr``, else of its IR ``layout`` (``LaunchArg.layout``);
        else, for a strided view with a static layout (a channels_last convolution's output,
        read again by the batch norm that reuses its buffer in place), the buffer its memory
        starts at (``_start``) with its sizes, strides and offset; None where unknown."""
        views = [v for v in (_static_view(_spelled(expr)), tuple(layout) if layout else None) if v is not None]
        for v in views:
            span = _contiguous(*v, self._start)
            if span is not None:
                return span
        if not views or not _static_ints(*views[0][1:]):
            return None
        name, size, stride, offset = views[0]
        return self._start(name), size, stride, offset

    def _produced(self, launch: Launch) -> None:
        """Keep the tensors an instrumented launch wrote as producers (after its lines)."""
        after = [a for a in launch.args if a.after]
        for i, a in enumerate(after):
            if a.kind in ("tensor", "unknown") and "#" not in a.name:
                self.producers.setdefault(self.root(a.name), {}).setdefault(_spelled(a.expr),
                                                                            (launch.site, i, a.layout))

    def lines_written(self, code, phase: str, cpp: bool = False) -> None:
        """Called as a launch's line is written out (``wrapper_lines``): before a launch,
        forget the producers whose storage any line written since the last launch names
        (a ``copy_``, a collective, a reuse of the buffer: anything not bracketed as a
        launch may write it); after one, remember where its lines end."""
        lines = getattr(code, "_lines", None)
        self._pending_lines(code, lines, phase, cpp)
        inputs = self.inputs if self.inputs is not None and not self.inputs.closed else None
        if lines is None:
            self.producers.clear()
            if inputs is not None:
                inputs.closed = True
            return
        if phase == "after":
            self._mark = (id(code), len(lines))
            return
        if not self.producers and inputs is None:
            return
        known, start = self._mark
        if known != id(code):
            self.producers.clear()
            if inputs is not None and inputs.code != id(code):
                inputs.closed = True
            return
        for names in _names_written(lines, start):
            for name in names:
                root = self.root(name)
                self.producers.pop(root, None)
                if inputs is not None:
                    inputs.touched.add(root)

    def emit(self, wrapper, launch: Launch, phase: str, cpp: bool) -> list[str]:
        """Lines to put before or after the launch, in the wrapper's language."""
        if phase == "after":
            self.mark_written(launch)
        if not self.matches(launch):
            return self._pending(launch, phase, False, cpp)
        lines = self._emit(wrapper, launch, phase, cpp)
        if phase == "after" and not cpp and self.settings.level in REUSE_LEVELS:
            self.layouts.update((a.dtype, *a.layout[1:]) for a in launch.args
                                if a.kind == "tensor" and a.dtype and a.layout)
        if phase == "after" and self.reuses and launch.site >= 0:
            self._produced(launch)
        return lines + self._pending(launch, phase, True, cpp)

    # -- deferred stats (PENDING_LINE, CPP_PENDING_CALL) ---------------------------------
    # At level stats (and print, in C++) a side's stats launch waits and goes with the
    # sides after it as one launch, where a pending line or the call's end comes: inside a
    # CUDA graph in the Python wrapper (``runtime/cuda_graphs``), always in C++ wrappers
    # (the runtime's ``PendingRun``). The side's tensors are held until then, so the
    # allocator hands none of their memory out again meanwhile. What can still overwrite
    # them is a launch that writes their storage (in place, or into a buffer that reuses
    # it: ``bufB = bufA  # reuse``) or a line between launches that names it: such a launch
    # or line is preceded by a pending line, decided here from the storages each side reads.
    def defers(self, cpp: bool) -> bool:
        """Whether the sides wait: level stats in both wrappers, and level print in C++
        ones, whose print lines already wait for the device ring (the Python wrapper's
        print opts out of CUDA graphs, where alone its sides wait); never under sync."""
        s = self.settings
        return (s.level == "stats" or (cpp and s.level == "print")) and not s.sync

    def _tensor_roots(self, launch: Launch, after: bool) -> set[str]:
        out = set()
        for a in launch.args:
            if (a.after if after else a.before and not a.uninitialised) and a.kind in ("tensor", "unknown"):
                out.add(self.root(a.name))
                out.add(self.root(a.expr))
        return out

    def _pending(self, launch: Launch, phase: str, matched: bool, cpp: bool) -> list[str]:
        """The pending line after a launch's before lines, where the launch writes a
        storage a deferred side read (its own before side's included: an in-place arg)."""
        if not self.defers(cpp):
            return []
        summarised = matched and phase in self.settings.phases
        if phase == "after":
            if summarised:
                self.deferred_reads |= self._tensor_roots(launch, after=True)
            return []
        if summarised:
            self.deferred_reads |= self._tensor_roots(launch, after=False)
        if self.deferred_reads and not self.deferred_reads.isdisjoint(self._tensor_roots(launch, after=True)):
            self._summarised()
            return [_pending_line(cpp)]
        return []

    def _summarised(self) -> None:
        self.deferred_reads.clear()
        self._inputs_deferred = False

    def _pending_lines(self, code, lines: list | None, phase: str, cpp: bool) -> None:
        """After a launch: remember where its lines end. Before one (and before the call
        returns: ``pending_tail``): where a line written since names a storage a deferred
        side read, a pending line goes where the last launch's lines ended, before it."""
        if not self.defers(cpp):
            return
        if lines is None:  # (no lines to read back: nothing stays deferred past a launch)
            self._write_pending(code, cpp)
            return
        if phase == "after":
            self._pending_marks[id(code)] = (len(lines), _indent(code, lines))
            return
        if not self.deferred_reads:
            return
        mark = self._pending_marks.get(id(code))
        if mark is None:
            # A buffer none of this manager's launches went into before (the sides were
            # deferred in another): where its lines stand to the deferred sides is not
            # known, and its first line may be its function's `def`. A pending line before
            # this launch, not one inserted at its top.
            self._write_pending(code, cpp)
            return
        start, prefix = mark
        for names in _names_written(lines, start):
            if any(self.root(name) in self.deferred_reads for name in names):
                lines.insert(start, prefix + _pending_line(cpp))
                self._summarised()
                return

    def pending_tail(self, code, cpp: bool = False) -> None:
        """Before the call returns (``generate_return``): its lines after the last launch,
        then a pending line if any side may still be deferred. Nothing stays deferred past
        a graph call: what runs after it (eager code or another graph inside the same
        CUDA graph capture) may write anything it returns or was given. (A C++ wrapper's
        ``call_end()``, written next, launches what still waits.)"""
        self._pending_lines(code, getattr(code, "_lines", None), "before", cpp)
        if not cpp:
            self._write_pending(code, False)

    def precompile_layouts(self) -> tuple[tuple, tuple] | None:
        """What the wrapper's module hands the runtime at import to compile the stats
        kernels its tensors need ahead (``GraphHandle.precompile``): the collected layouts,
        sorted, and the graph's CUDA device indices; None for a graph with neither."""
        from torch._inductor.virtualized import V

        graph = V.graph
        if not self.layouts or "cuda" not in (getattr(graph, "device_types", None) or ()):
            return None
        devices = tuple(sorted(getattr(graph, "device_idxs", None) or ()))
        return tuple(sorted(self.layouts)), devices or (0,)

    def unknown_launch(self, code, cpp: bool) -> None:
        """A launch that could not be described (its writes unknown): pending line before it."""
        self._write_pending(code, cpp)

    def _write_pending(self, code, cpp: bool) -> None:
        """A pending line here, where a side may still be deferred."""
        if self.defers(cpp) and self.deferred_reads:
            code.writeline(_pending_line(cpp))
            self._summarised()

    def _emit(self, wrapper, launch: Launch, phase: str, cpp: bool) -> list[str]:
        if cpp:
            from . import cpp_emitter

            return cpp_emitter.emit(self, wrapper, launch, phase)
        from . import python_emitter

        return python_emitter.emit(self, wrapper, launch, phase)


def _names_written(lines: list, start: int):
    """The names of each line of ``lines[start:]`` that may write what it names: not a
    comment, a deletion, a layout check, or a reuse or alias line (whose storage the
    manager follows). A deletion frees nothing a waiting side reads: the runtimes hold
    its tensors until its stats launch (``runtime/cuda_graphs``; the C++ runtime's
    ``PendingRun`` a new handle of each)."""
    for line in lines[start:]:
        if not isinstance(line, str) and not hasattr(line, "line"):
            continue  # (a LineContext: where the lines came from, no code)
        text = str(getattr(line, "line", line)).strip()
        if text.startswith(_NAMES_ONLY) or text.endswith(_NAMES_ONLY_END) or _RESET.fullmatch(text):
            continue
        yield _NAME.findall(text)


def _pending_line(cpp: bool) -> str:
    """The wrapper's pending line (``PENDING_LINE``; C++: ``cpp_emitter.pending_line``)."""
    if not cpp:
        return PENDING_LINE
    from . import cpp_emitter

    return cpp_emitter.pending_line()


def _indent(code, lines: list) -> str:
    """The indentation a line written to ``code`` now gets (Inductor's ``IndentedBuffer``),
    else the last line's."""
    prefix = getattr(code, "prefix", None)
    if prefix is not None:
        return prefix()
    last = next((line for line in reversed(lines) if isinstance(line, str)), "")
    return last[: len(last) - len(last.lstrip())]


_warned_inputs = False


def _warn_inputs(e: Exception) -> None:
    global _warned_inputs
    if not _warned_inputs:
        _warned_inputs = True
        logging.getLogger("aoti_debug").warning(
            "aoti_debug: weights are read at every launch that uses them (no graph_inputs launch: %s: %s)",
            type(e).__name__, e)


def _spelled(expr: str) -> str:
    return "".join(expr.split())


def _cpp_input(expr: str, root: str, layout: tuple) -> bool:
    from .cpp_emitter import input_view

    return input_view(expr.strip(), root, layout)


def _of_input(expr: str, root: str) -> bool:
    """Whether spelled ``expr`` is ``root`` or ``reinterpret_tensor(root, sizes, strides,
    offset)`` with literal integers only."""
    if expr == root:
        return True
    import ast

    try:
        node = ast.parse(expr, mode="eval").body
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and
                node.func.id == "reinterpret_tensor" and len(node.args) == 4 and not node.keywords and
                isinstance(node.args[0], ast.Name) and node.args[0].id == root):
            return False
        size, stride, offset = (ast.literal_eval(x) for x in node.args[1:])
    except (SyntaxError, ValueError, TypeError):
        return False
    return isinstance(offset, int) and all(isinstance(v, tuple) and all(type(i) is int for i in v)
                                           for v in (size, stride)) and len(size) == len(stride)


def _contiguous_span(expr: str, start) -> tuple[str, int, int] | None:
    """``(buffer, offset, numel)`` of the elements ``expr`` names, where it is a buffer or
    ``reinterpret_tensor(buffer, sizes, strides, offset)`` with static, contiguous sizes and
    strides, the buffer followed back through buffer reuses (``start``) to the one whose
    memory it starts at; None for anything else (symbolic sizes, gaps: such inputs take
    their producer's record only as the same expression)."""
    view = _static_view(expr)
    return _contiguous(*view, start) if view is not None else None


def _static_view(expr: str) -> tuple[str, tuple, tuple, int] | None:
    """``(buffer, sizes, strides, offset)`` of spelled ``expr`` where it is a buffer (as
    Inductor's IR lays it out) or ``reinterpret_tensor(buffer, sizes, strides, offset)``
    with literals; None for anything else."""
    import ast

    try:
        node = ast.parse(expr, mode="eval").body
        if isinstance(node, ast.Name):
            name = node.id
            layout = _layout(name)
            if layout is None:
                return None
            (size, stride), offset = layout, 0  # the tensor itself (reinterpret_tensor's offset is relative to it)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "reinterpret_tensor" and len(node.args) == 4 and not node.keywords and \
                isinstance(node.args[0], ast.Name):
            name = node.args[0].id
            size, stride, offset = (ast.literal_eval(x) for x in node.args[1:])
        else:
            return None
    except (SyntaxError, ValueError, TypeError):
        return None
    return name, size, stride, offset


def _static_ints(size, stride, offset) -> bool:
    """Whether a view's ``size``, ``stride`` and ``offset`` are literal integers, one
    stride a size."""
    return (isinstance(size, tuple) and isinstance(stride, tuple) and len(size) == len(stride) and
            all(type(v) is int for v in (*size, *stride, offset)))


def _contiguous(name: str, size, stride, offset, start) -> tuple[str, int, int] | None:
    """``_contiguous_span`` of ``name`` viewed with ``size``, ``stride`` and ``offset``."""
    if not _static_ints(size, stride, offset):
        return None
    expected = 1
    for n, st in reversed(list(zip(size, stride))):
        if n != 1 and st != expected:
            return None
        expected *= n
    return start(name), offset, expected


def _layout(name: str) -> tuple[tuple, tuple] | None:
    """``(sizes, strides)`` of buffer ``name`` as Inductor laid it out, as ints; None where
    it is not known or not static (Inductor's IR: ``V.graph.try_get_buffer``)."""
    try:
        from torch._inductor.virtualized import V

        layout = V.graph.try_get_buffer(name).get_layout()
        return tuple(int(v) for v in layout.size), tuple(int(v) for v in layout.stride)
    except Exception:  # no graph, no such buffer, a symbolic size (int() raises)
        return None
