"""Our debug-printer manager: decides, per launch, what code to emit and where.

It takes the built-in ``DebugPrinterManager``'s place on every wrapper (so Inductor's
own call sites reach it), but instruments nothing there: every launch is bracketed
by ``aoti_debug.codegen.inductor`` with a :class:`~aoti_debug.codegen.launch.Launch`
description, and this class turns that into Python or C++ lines.
"""

from __future__ import annotations

import dataclasses

from ..config import CompileSettings
from .launch import Launch


class Manager:
    """Per-wrapper state: settings, which buffers already hold data, header emitted."""

    def __init__(self, settings: CompileSettings):
        self.settings = settings
        self.written: set[str] = set()
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
        """Fix roles so that no record shows memory the launch had not yet written.

        An in-place arg whose buffer no launch has written yet is treated as a pure
        output: a user-defined Triton kernel filling a fresh ``empty``, or an Inductor
        kernel whose ``in_out_ptr`` is a freshly allocated buffer it first writes itself
        (``buf2 = buf1  # reuse`` of an ``empty_strided``). Reuse and multi-output aliases
        carry the written state over (:meth:`alias`).
        """
        fixed = []
        for a in launch.args:
            if a.role == "inout" and a.kind == "tensor" and not self._holds_data(a.name):
                a = dataclasses.replace(a, role="output")
            fixed.append(a)
        launch = dataclasses.replace(launch, args=fixed)
        launch.unique_names()
        return launch

    def _holds_data(self, name: str) -> bool:
        if name in self.written:
            return True
        # Graph inputs, constants and anything not allocated in this graph hold data.
        return not name.startswith("buf")

    def alias(self, new: str, old: str) -> None:
        """``new`` names the memory of ``old`` (a reuse line, a multi-output element)."""
        if self._holds_data(old):
            self.written.add(new)

    def mark_written(self, launch: Launch) -> None:
        for a in launch.args:
            if a.after:
                self.written.add(a.name.split("#")[0])

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
