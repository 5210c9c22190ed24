"""Our debug-printer manager: decides, per launch, what code to emit and where.

It takes the built-in ``DebugPrinterManager``'s place on every wrapper (so Inductor's
own call sites reach it), but instruments nothing there: every launch is bracketed
by ``aoti_debug.codegen.inductor`` with a :class:`~aoti_debug.codegen.launch.Launch`
description, and this class turns that into Python or C++ lines.
"""

from __future__ import annotations

import dataclasses

from ..config import CompileSettings
from .launch import Launch, base_name


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

    def alias(self, new: str, old: str) -> None:
        """``new`` names the memory of ``old`` (a reinterpret view, a reuse line, a
        multi-output element): writes through either are writes to one storage."""
        new, old = base_name(new), self.root(old)
        if new != old:
            self.storage[new] = old

    def mark_written(self, launch: Launch) -> None:
        for a in launch.args:
            if a.after and a.kind in ("tensor", "unknown"):
                self.written.add(self.root(a.name))
                self.written.add(self.root(a.expr))

    def emit(self, wrapper, launch: Launch, phase: str, cpp: bool) -> list[str]:
        """Lines to put before or after the launch, in the wrapper's language."""
        if phase == "after":
            self.mark_written(launch)
        if not self.matches(launch):
            return []
        if cpp:
            from . import cpp_emitter

            return cpp_emitter.emit(self, wrapper, launch, phase)
        from . import python_emitter

        return python_emitter.emit(self, wrapper, launch, phase)
