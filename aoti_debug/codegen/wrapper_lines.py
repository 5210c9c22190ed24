"""The lines we add to Inductor's wrapper, and the wrappers of the Inductor methods that
add them: each launch is bracketed by two :class:`_InstrumentLine` placeholders that
become code (Python or C++) only when the wrapper is written out.

Each ``wrap_*`` function takes the original Inductor function and returns its
replacement; :mod:`.patches` says which function of which class each one replaces.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Callable

from . import context
from .context import graph_name, is_cpp, safe, warn_codegen
from .launch import Launch
from .manager import Manager

_LineClass = None


def line_class() -> type:
    """Our ``WrapperLine`` subclass (made once: ``WrapperLine`` is Inductor's class)."""
    global _LineClass
    if _LineClass is None:
        _LineClass = _make_line_class()
    return _LineClass


def _make_line_class():
    # WrapperLine: the wrapper IR's line base class since the FX-wrapper refactor (torch 2.8).
    from torch._inductor.codegen.wrapper import WrapperLine

    class _InstrumentLine(WrapperLine):
        """Placeholder in ``wrapper.lines``; becomes code when the wrapper is written."""

        def __init__(self, wrapper, manager: Manager, phase: str, state: dict):
            self.wrapper = wrapper
            self.manager = manager
            self.phase = phase
            self.state = state

        def codegen(self, code) -> None:
            try:
                if self.phase == "before":
                    self.manager.lines_written(code, "before", is_cpp())
                    launch = self.state["make"]()
                    if launch is None:
                        self.manager.unknown_launch(code, is_cpp())
                    if launch is not None and "graph" in self.state:
                        launch.graph = self.state["graph"]
                    if launch is not None and self.manager.matches(launch):
                        self.manager.open_inputs(self.wrapper, code, is_cpp())
                    self.state["launch"] = None if launch is None else self.manager.prepare(launch)
                launch = self.state.get("launch")
                if launch is None:
                    return
                lines = self.manager.emit(self.wrapper, launch, self.phase, is_cpp())
                for text in lines:
                    code.writeline(text)
                if self.phase == "after":
                    self.manager.lines_written(code, "after", is_cpp())
            except Exception as e:  # never break the user's compile
                warn_codegen(e)

        def codegen_fx(self, converter):
            return lambda line: None

        def __repr__(self) -> str:
            return f"<aoti_debug {self.phase}>"

    return _InstrumentLine


@contextlib.contextmanager
def _outermost():
    """True only for the outermost wrapped call (subclass overrides call super())."""
    depth = getattr(context.state, "depth", 0)
    context.state.depth = depth + 1
    try:
        yield depth == 0
    finally:
        context.state.depth = depth


def _manager_of(wrapper) -> Manager | None:
    m = getattr(wrapper, "_aoti_debug_manager", None)
    if m is None and context.active():
        m = Manager(context.settings())
        wrapper._aoti_debug_manager = m
    return m


def bracket(make_launch: Callable[..., Launch | None]) -> Callable:
    """``wrap_*`` for an append-time wrapper method: our before/after lines around it,
    describing the launch with ``make_launch`` (called with the method's arguments)."""

    def wrap(original):
        @functools.wraps(original)
        def wrapped(self, *args, **kwargs):
            with _outermost() as outer:
                manager = _manager_of(self) if outer else None
                if manager is None:
                    return original(self, *args, **kwargs)
                # The launch is described when the line is written out (later); keep the
                # context that only exists now (the user kernel being scheduled).
                user = getattr(context.state, "user_kernel", None)
                state = {"make": lambda: _with_user_kernel(user, make_launch, self, *args, **kwargs),
                         "cpp": is_cpp()}
                if state["cpp"]:
                    # The C++ wrapper inlines subgraphs into its parent and writes every
                    # line out under the root graph: take the subgraph label now.
                    state["graph"] = graph_name()
                line = line_class()
                self.writeline(line(self, manager, "before", state))
                result = original(self, *args, **kwargs)
                self.writeline(line(self, manager, "after", state))
                return result

        return wrapped

    return wrap


def _with_user_kernel(user, fn, *args, **kwargs):
    previous = getattr(context.state, "user_kernel", None)
    context.state.user_kernel = user
    try:
        return safe(fn, *args, **kwargs)
    finally:
        context.state.user_kernel = previous


def wrap_define_kernel(original):
    """Record each kernel's parameter names and source nodes as it is defined."""
    from .describe import record_definition

    @functools.wraps(original)
    def define_kernel(self, kernel_name, kernel_body, metadata=None, *args, **kwargs):
        if context.active():
            try:
                record_definition(self, kernel_name, str(kernel_body), metadata)
            except Exception as e:
                warn_codegen(e)
        return original(self, kernel_name, kernel_body, metadata, *args, **kwargs)

    return define_kernel


def wrap_init(original):
    """Give each instrumented wrapper our manager in place of the built-in printer."""

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if context.active():
            # Mute the built-in printer: all launches are instrumented by our lines.
            self.debug_printer = _manager_of(self)
            safe(_build_early, self)

    return __init__


def _build_early(wrapper) -> None:
    """The runtime this wrapper's header names, built from now on (``prebuild.start_early``;
    the device as ``cpp_emitter.ensure_header`` reads it)."""
    from torch._inductor.virtualized import V

    from .prebuild import start_early

    start_early(wrapper.debug_printer.settings.level, is_cpp(), bool(getattr(V.graph, "aot_mode", False)),
                str(getattr(wrapper, "device", "cpu") or "cpu"))


def wrap_user_kernel_codegen(original):
    """Tell the launch describers which user Triton kernel is being scheduled."""

    @functools.wraps(original)
    def codegen(self, wrapper, *args, **kwargs):
        previous = getattr(context.state, "user_kernel", None)
        context.state.user_kernel = self
        try:
            return original(self, wrapper, *args, **kwargs)
        finally:
            context.state.user_kernel = previous

    return codegen


def track_alias(names: Callable[[object], tuple[str, str]], reuse: bool = False) -> Callable:
    """``wrap_*`` for a line's ``codegen`` that makes one buffer name another's storage
    (``bufB = bufA  # reuse``, ``bufB = bufA[0]``, ``reinterpret_tensor(bufA, ...)``), so
    that the manager knows which storage each buffer name is. ``names(line)`` gives
    (new, old); ``reuse``: the line is a buffer reuse (``bufB`` starts where ``bufA`` does)."""

    def wrap(original):
        @functools.wraps(original)
        def codegen(self, code):
            original(self, code)
            manager = getattr(self.wrapper, "_aoti_debug_manager", None)
            if manager is not None:
                try:
                    new, old = names(self)
                    manager.alias(new, old, reuse)
                except Exception as e:
                    warn_codegen(e)

        return codegen

    return wrap


def wrap_graph_codegen(original):
    """Mark instrumented graphs that cannot run in a CUDA graph as not cudagraph-able,
    with the reason logged.

    Inductor decides after codegen, reading ``V.graph.disable_cudagraphs_reason``
    (compile_fx, torch 2.11 and 2.13); this runs around the codegen of every graph.
    Level ``stats`` of the Python wrapper keeps CUDA graphs: its instrumentation is
    device work only, captured into the graph (``runtime/cuda_graphs.py``).
    """

    @functools.wraps(original)
    def codegen(self, *args, **kwargs):
        settings = context.settings()
        if settings is not None and settings.active and not getattr(self, "disable_cudagraphs_reason", None):
            reason = cudagraph_refusal(settings, cpp_wrapper=bool(getattr(self, "cpp_wrapper", False)))
            if reason:
                self.disable_cudagraphs_reason = reason
        return original(self, *args, **kwargs)

    return codegen


def wrap_generate_return(original):
    """End each call of an instrumented C++ wrapper with the runtime's ``call_end()``,
    before the wrapper hands back its outputs (``generate_return`` writes that into
    ``wrapper_call``, after every launch: torch 2.11 and 2.13): the C++ runtime then
    writes the manifest lines of the call's sides in one write instead of one a side."""

    @functools.wraps(original)
    def generate_return(self, *args, **kwargs):
        safe(_write_call_end, self)
        return original(self, *args, **kwargs)

    return generate_return


def wrap_python_return(original):
    """Before a Python wrapper's ``return``: the manager reads the lines after the call's
    last launch for one that may write a tensor whose stats a side deferred
    (``Manager.pending_tail``)."""

    @functools.wraps(original)
    def generate_return(self, *args, **kwargs):
        manager = getattr(self, "_aoti_debug_manager", None)
        if manager is not None and not is_cpp():
            safe(manager.pending_tail, self.wrapper_call)
        return original(self, *args, **kwargs)

    return generate_return


def _write_call_end(wrapper) -> None:
    from .cpp_emitter import call_end_line

    line = call_end_line(wrapper)
    if line is not None:
        manager = getattr(wrapper, "_aoti_debug_manager", None)
        if manager is not None:  # a line after the last launch that writes what a side's stats wait for
            manager.pending_tail(wrapper.wrapper_call, cpp=True)
        wrapper.wrapper_call.writeline(line)


def cudagraph_refusal(settings, cpp_wrapper: bool) -> str | None:
    """Why a graph instrumented with ``settings`` must run without CUDA graphs, or None."""
    if settings.level == "stats" and not settings.sync and not cpp_wrapper:
        return None
    if settings.level == "stats":
        why = ("AOTI_DEBUG_SYNC synchronises after every launch" if settings.sync else
               "the C++ wrapper's runtime copies values to the host")
    elif settings.level == "names":
        why = "it prints a line before and after every launch, which a graph replay cannot do"
    else:
        why = "it copies values to the host around every launch"
    return f"aoti_debug instrumentation (level {settings.level}): {why}; instrumented graphs run without CUDA graphs"
