"""Every patch aoti_debug applies to ``torch._inductor``, as one table, and the code that
applies and undoes it.

Each :class:`Patch` names a function of an Inductor class, what replaces it, whether
instrumentation is correct without it (``required``), the torch versions where it is
expected, and why we patch it. :func:`install` applies the whole table or nothing: a
required entry that this torch lacks raises :class:`~aoti_debug.errors.UnsupportedTorchError`
naming it, with nothing left patched. Optional entries that are absent are recorded as
skipped, with their reason (``aoti-debug doctor`` lists them).

Checked on torch 2.13 (CPU) and 2.11 (GPU machine). Entries without a version range are
expected in every torch we support; a range states where a hook is expected: outside it
the hook is still patched when present, and skipped rather than missing when absent.

A subclass entry (``CppWrapperCpu.generate_kernel_call``) is patched where the subclass
defines the function itself; where it inherits it, the entry is ``inherited`` when the
class it inherits from is patched by this table, and missing otherwise.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Callable, Literal

from ..config import CompileSettings
from ..errors import UnsupportedTorchError
from . import context, describe, native_object, wrapper_lines
from .cache_tag import update_cache_tag
from .wrapper_lines import bracket, track_alias

Version = tuple[int, int]

#: The torch versions this table has been checked against (CPU CI and the GPU machine).
CHECKED_TORCH: tuple[Version, ...] = ((2, 11), (2, 13))


@dataclass(frozen=True)
class Patch:
    """One Inductor function that aoti_debug replaces."""

    owner: str
    """The class, as ``module:Class``."""
    attr: str
    """The function's name on that class."""
    wrap: Callable[[Callable], Callable]
    """Makes the replacement from the original function."""
    required: bool
    """Whether instrumentation is correct without it: a required entry that is missing
    (within its version range) makes :func:`install` fail."""
    reason: str
    """What the patch does for us, and the torch version or PR behind it."""
    since: Version | None = None
    """First torch (major, minor) that has it; None: every version we support."""
    until: Version | None = None
    """First torch (major, minor) that no longer has it; None: still there."""

    @property
    def module(self) -> str:
        return self.owner.split(":")[0]

    @property
    def cls(self) -> str:
        return self.owner.split(":")[1]

    @property
    def name(self) -> str:
        """``torch._inductor.codegen.wrapper.PythonWrapperCodegen.generate_kernel_call``."""
        return f"{self.module}.{self.cls}.{self.attr}"

    def expected_on(self, version: Version) -> bool:
        """Whether this torch version should have the hook."""
        return (self.since is None or version >= self.since) and (self.until is None or version < self.until)


def _version_text(p: Patch) -> str:
    if p.since and p.until:
        return f"torch {p.since[0]}.{p.since[1]} to before {p.until[0]}.{p.until[1]}"
    if p.since:
        return f"torch >= {p.since[0]}.{p.since[1]}"
    if p.until:
        return f"torch < {p.until[0]}.{p.until[1]}"
    return "all supported torch versions"


# ---------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------
_WRAPPER = "torch._inductor.codegen.wrapper"

#: The wrapper code generators: (owner, required, why). Their launch methods are
#: bracketed; a subclass is patched where it overrides one (overrides that call super()
#: are bracketed once, by the outermost call).
_WRAPPER_CLASSES: tuple[tuple[str, bool, str], ...] = (
    (f"{_WRAPPER}:PythonWrapperCodegen", True, "the Python wrapper (torch.compile)"),
    ("torch._inductor.codegen.cpp_wrapper_cpu:CppWrapperCpu", True,
     "the C++ wrapper (cpp_wrapper=True, AOTInductor) on CPU"),
    ("torch._inductor.codegen.cpp_wrapper_gpu:CppWrapperGpu", True,
     "the C++ wrapper (cpp_wrapper=True, AOTInductor) on GPU"),
    ("torch._inductor.codegen.cpp_wrapper_cpu_array_ref:CppWrapperCpuArrayRef", False,
     "the C++ ArrayRef wrapper (aot_inductor.allow_stack_allocation / use_minimal_arrayref_interface); "
     "where a torch lacks it, those modes do not exist"),
)

#: The wrapper methods we replace: (attribute, wrap, since, what it carries).
_WRAPPER_METHODS: tuple[tuple[str, Callable, Version | None, str], ...] = (
    ("__init__", wrapper_lines.wrap_init, None,
     "gives each wrapper our manager as its debug_printer, muting the built-in printer "
     "(AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER)"),
    ("define_kernel", wrapper_lines.wrap_define_kernel, None,
     "records each kernel's parameter names (in_ptr/out_ptr: which args a launch writes) "
     "and its source nodes"),
    ("generate_kernel_call", bracket(describe.kernel_call_launch), None,
     "brackets Triton and C++ kernel launches (KernelCallLine, wrapper IR since torch 2.8)"),
    ("generate_extern_kernel_out", bracket(describe.extern_out_launch), None,
     "brackets extern out= kernels (mm, addmm, bmm, convolution...)"),
    ("generate_extern_kernel_alloc", bracket(describe.fallback_launch), None,
     "brackets extern kernels that allocate their output (ExternKernelAlloc)"),
    ("generate_fallback_kernel", bracket(describe.fallback_launch), None,
     "brackets ATen fallbacks and custom ops (FallbackKernel)"),
    ("generate_scatter_fallback", bracket(describe.inplace_first_launch), None,
     "brackets scatter_/scatter_reduce_ fallbacks (ScatterFallback)"),
    ("generate_index_put_fallback", bracket(describe.inplace_first_launch), None,
     "brackets the index_put_ fallback (IndexPutFallback)"),
    # torch 2.13 added ExternKernelMultiOut (a FallbackKernel lowered to its multi-output
    # .out() variant); before it those ops reach generate_fallback_kernel.
    ("generate_extern_kernel_multi_out", bracket(describe.multi_out_launch), (2, 13),
     "brackets multi-output .out() kernels (ExternKernelMultiOut, new in torch 2.13)"),
    ("generate_fallback_kernel_with_runtime_lookup", bracket(describe.runtime_lookup_launch), None,
     "brackets custom ops dispatched at run time (the C++ wrapper's proxy executor; Python: ops "
     "without a C shim)"),
)


def _alias_names(line) -> tuple[str, str]:
    return line.reused_as.get_name(), line.node.get_name()


PATCHES: tuple[Patch, ...] = tuple(
    Patch(owner, attr, wrap, required=cls_required, since=since,
          reason=f"{why}; in {cls_why}")
    for owner, cls_required, cls_why in _WRAPPER_CLASSES
    for attr, wrap, since, why in _WRAPPER_METHODS
) + (
    # Storage tracking: which storage each buffer name is, so that a read of memory no
    # launch has written is flagged uninitialised instead of compared as data.
    Patch(f"{_WRAPPER}:ReuseLine", "codegen", track_alias(_alias_names, reuse=True), True,
          "follows `bufB = bufA  # reuse` (buffer reuse)"),
    Patch(f"{_WRAPPER}:MultiOutputLine", "codegen", track_alias(lambda line: (line.result_name, line.arg_name)),
          True, "follows `bufB = bufA[0]` (one output of a multi-output op)"),
    Patch(f"{_WRAPPER}:ReinterpretLine", "codegen", track_alias(_alias_names), True,
          "follows `bufB = reinterpret_tensor(bufA, ...)  # alias` (NonOwningLayout views, e.g. "
          "torch.cat into one buffer; ReinterpretLine in torch 2.11 and 2.13)"),
    # User-defined Triton kernels: which IR node is being scheduled, so that its launch is
    # described from the kernel's mutation/read sets. torch 2.11 generates the launch in
    # ``codegen``; torch 2.13 moved it to ``_codegen``, which both ``codegen`` and the new
    # ``codegen_with_epilogue_fusion`` (user-kernel epilogue fusion) call.
    Patch("torch._inductor.ir:UserDefinedTritonKernel", "codegen", wrapper_lines.wrap_user_kernel_codegen, True,
          "names the user Triton kernel being scheduled, so that its launch is described from its "
          "mutated/read args (generates the launch in torch 2.11; delegates to _codegen in 2.13)",
          until=(2, 13)),
    Patch("torch._inductor.ir:UserDefinedTritonKernel", "_codegen", wrapper_lines.wrap_user_kernel_codegen, True,
          "names the user Triton kernel being scheduled (torch 2.13: generates the launch for codegen "
          "and for codegen_with_epilogue_fusion)", since=(2, 13)),
    # CUDA graphs: Inductor reads V.graph.disable_cudagraphs_reason after codegen
    # (compile_fx, torch 2.11 and 2.13).
    Patch("torch._inductor.graph:GraphLowering", "codegen", wrapper_lines.wrap_graph_codegen, True,
          "keeps instrumented Python-wrapper graphs out of CUDA graphs (level save under "
          "mode='reduce-overhead' would break the capture)"),
    Patch("torch._inductor.graph:GraphLowering", "codegen_with_cpp_wrapper", wrapper_lines.wrap_graph_codegen, True,
          "keeps instrumented C++-wrapper graphs out of CUDA graphs"),
    # The end of a Python wrapper's graph call: generate_return writes the return into
    # wrapper_call after every launch and line of the call (torch 2.11 and 2.13). The lines
    # after the last launch are read there for one that may write a tensor whose stats a
    # side deferred inside a CUDA graph; without it no side defers (the header says so).
    Patch(f"{_WRAPPER}:PythonWrapperCodegen", "generate_return", wrapper_lines.wrap_python_return, False,
          "reads the lines after a Python wrapper's last launch, so that its sides' stats launches inside "
          "CUDA graphs may be deferred and merged; absent: one stats launch a side"),
    # The end of a C++ wrapper's graph call: generate_return writes the outputs' hand-back
    # into wrapper_call after every launch (CppWrapperCpu, which CppWrapperGpu inherits,
    # and CppWrapperCpuArrayRef's own; torch 2.11 and 2.13). Without it the C++ runtime
    # writes each side's lines at once: correct, slower.
    Patch("torch._inductor.codegen.cpp_wrapper_cpu:CppWrapperCpu", "generate_return",
          wrapper_lines.wrap_generate_return, False,
          "ends each C++ wrapper call with the runtime's call_end(), which writes the call's manifest lines "
          "in one write; absent: a write per launch side"),
    Patch("torch._inductor.codegen.cpp_wrapper_cpu_array_ref:CppWrapperCpuArrayRef", "generate_return",
          wrapper_lines.wrap_generate_return, False,
          "the same for the C++ ArrayRef wrapper, whose generate_return does not call its base's"),
    # AOTInductor: the link step takes the objects listed in CUDACodeCache.aot_kernels_o
    # (CUTLASS kernels; read for CPU packages too, copied and cleared at each link, in
    # torch 2.11 and 2.13), and nothing else from outside. Without this entry AOTI
    # wrappers get the runtime inline: correct, slower to compile (native_object.linkable).
    Patch("torch._inductor.codecache:AotCodeCompiler", "compile", native_object.wrap_aot_compile, False,
          "links the prebuilt runtime object that an AOTInductor wrapper names into its package "
          "(through CUDACodeCache.aot_kernels_o, torch 2.11 and 2.13); absent: the runtime is compiled inline"),
)


# ---------------------------------------------------------------------------------------
# Resolution: what each entry finds in this torch
# ---------------------------------------------------------------------------------------
Status = Literal["applied", "ready", "inherited", "skipped", "missing"]


@dataclass
class PatchStatus:
    """What one entry found in the installed torch."""

    patch: Patch
    status: Status
    """``applied``: patched on its class; ``ready``: would be, by :func:`install` (not
    installed now); ``inherited``: the class inherits the function from a class this
    table patches; ``skipped``: an optional (or out-of-range) entry that this torch
    lacks; ``missing``: a required one it lacks."""
    detail: str = ""

    def to_dict(self) -> dict:
        p = self.patch
        return {"owner": p.owner, "attr": p.attr, "required": p.required, "versions": _version_text(p),
                "status": self.status, "detail": self.detail, "reason": p.reason}


def torch_version() -> Version:
    import torch

    return tuple(int(x) for x in re.findall(r"\d+", torch.__version__.split("+")[0])[:2])  # type: ignore[return-value]


def _load_owner(p: Patch) -> tuple[type | None, str]:
    try:
        module = importlib.import_module(p.module)
    except Exception as e:  # e.g. a build without one of the backends
        return None, f"module {p.module} does not import ({type(e).__name__}: {e})"
    cls = getattr(module, p.cls, None)
    if not isinstance(cls, type):
        return None, f"{p.module} has no class {p.cls}"
    return cls, ""


def _defining_class(cls: type, attr: str) -> type | None:
    return next((k for k in cls.__mro__ if attr in k.__dict__), None)


def resolve(version: Version | None = None) -> list[tuple[PatchStatus, type | None]]:
    """What every entry finds in this torch (nothing is patched): its status, and the
    class to patch for entries that apply."""
    version = version or torch_version()
    found: list[tuple[PatchStatus, type | None, type | None]] = []  # status, class, defining class
    for p in PATCHES:
        cls, why = _load_owner(p)
        owner = _defining_class(cls, p.attr) if cls is not None else None
        if cls is not None and owner is None:
            why = f"{p.cls} has no attribute {p.attr}"
        if owner is cls and cls is not None:
            found.append((PatchStatus(p, "applied"), cls, cls))
        elif owner is not None:
            found.append((PatchStatus(p, "inherited", f"from {owner.__module__}.{owner.__qualname__}"), cls, owner))
        else:
            found.append((_absent(p, why, version), None, None))
    patched = {(cls, s.patch.attr) for s, cls, _ in found if s.status == "applied"}
    out: list[tuple[PatchStatus, type | None]] = []
    for s, cls, owner in found:
        if s.status == "inherited" and (owner, s.patch.attr) not in patched:
            # Inherited from a class outside the table (or whose entry is absent): the
            # function that runs would not be ours.
            s = _absent(s.patch, f"{s.patch.cls} inherits {s.patch.attr} {s.detail}, which is not patched", version)
        out.append((s, cls if s.status == "applied" else None))
    try:
        wrapper_lines.line_class()  # subclasses Inductor's WrapperLine (wrapper IR, torch >= 2.8)
    except Exception as e:
        base = Patch(f"{_WRAPPER}:WrapperLine", "codegen", lambda f: f, True, "the base class of our wrapper lines")
        out.append((PatchStatus(base, "missing", f"{type(e).__name__}: {e}"), None))
    return out


def _absent(p: Patch, why: str, version: Version) -> PatchStatus:
    if p.required and p.expected_on(version):
        return PatchStatus(p, "missing", why)
    if not p.expected_on(version):
        return PatchStatus(p, "skipped", f"{why}; expected in {_version_text(p)} only")
    return PatchStatus(p, "skipped", f"{why}; optional")


def _missing_error(missing: list[PatchStatus], version_text: str) -> UnsupportedTorchError:
    lines = "; ".join(f"{s.patch.name} ({s.detail})" for s in missing)
    return UnsupportedTorchError(
        f"aoti_debug cannot instrument torch {version_text}: missing {lines}. Nothing was patched; "
        "`aoti-debug doctor` lists every hook aoti_debug needs."
    )


# ---------------------------------------------------------------------------------------
# install / uninstall
# ---------------------------------------------------------------------------------------
#: (owner, attribute, original, replacement) of every applied patch, for uninstall.
_applied: list[tuple[type, str, object, object]] = []
_statuses: list[PatchStatus] = []


def install(settings: CompileSettings) -> None:
    """Apply the whole table (idempotent) and make ``settings`` the active ones.

    Raises:
        UnsupportedTorchError: a required hook is missing from this torch; nothing is
            left patched and the active settings are unchanged.
    """
    if not installed():
        _apply_table()
    context.set_settings(settings)
    update_cache_tag(settings)
    # Its exit hook tells the C++ runtimes when an exception ends the process (their
    # flight recorder's last write says so): C++ wrappers import nothing of aoti_debug.
    from ..runtime import session  # noqa: F401


def _apply_table() -> None:
    import torch

    _undo()  # a partial state (a patch overwritten from outside) is not "installed"
    resolved = resolve()
    missing = [s for s, _ in resolved if s.status == "missing"]
    if missing:
        raise _missing_error(missing, torch.__version__)
    try:
        for status, cls in resolved:
            if cls is None:
                continue
            p = status.patch
            original = cls.__dict__[p.attr]
            replacement = p.wrap(original)
            replacement.__aoti_debug_original__ = original
            setattr(cls, p.attr, replacement)
            _applied.append((cls, p.attr, original, replacement))
    except BaseException:
        _undo()  # all or nothing
        raise
    _statuses[:] = [s for s, _ in resolved]


def _undo() -> None:
    while _applied:
        owner, name, original, _replacement = _applied.pop()
        setattr(owner, name, original)
    _statuses.clear()


def uninstall() -> None:
    """Undo every patch (idempotent); generated code goes back to byte-identical."""
    context.set_settings(None)
    update_cache_tag(None)
    _undo()


def installed() -> bool:
    """True only when every applicable patch of the table is in place."""
    return bool(_applied) and all(owner.__dict__.get(name) is replacement
                                  for owner, name, _original, replacement in _applied)


def report() -> list[PatchStatus]:
    """Every entry's status: as installed, or what :func:`install` would find."""
    if installed():
        return list(_statuses)
    return [PatchStatus(s.patch, "ready", s.detail) if s.status == "applied" else s for s, _ in resolve()]
