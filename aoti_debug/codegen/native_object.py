"""The C++ runtime as static objects that AOTInductor links into its packages, built once.

An AOTI package must need nothing of aoti_debug where it runs, so the runtime goes into
the package's ``.so``. Compiled into every wrapper, it made an instrumented wrapper's
compile up to 1.7x slower (docs/performance.md, "Compile time"). Instead, the runtime
for a level's features (``names``, ``files``: stats/print/save; ``cpp_runtime.features``)
is compiled once per content hash, compiler, flags and torch into an object
(``native/object.cpp``), in Inductor's cache directory next to the JIT runtime library,
with -fPIC and hidden visibility, so that the package exports nothing that the inlined
runtime did not (``aoti_debug_runtime_warnings`` and the process-wide state, on purpose).
The wrapper gets the interface and ``glue_linked.h``, whose header names the object
(``cpp_runtime.linked_block``); AOTInductor's link step adds it (:func:`wrap_aot_compile`,
patches.py) through the list that it links CUTLASS kernel objects from.

The objects are built without OpenMP: whether a package links OpenMP depends on its
device and torch's flags, and the runtime's threads (threads.h) need none. Where an
object cannot be linked (:func:`linkable`), the wrapper gets the runtime inline, as
before, and the package is the same, only slower to compile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import shutil
import sys
import tempfile

from . import cpp_runtime, device_stats, native_library
from .native_library import BuildError

log = logging.getLogger("aoti_debug")

_warned: set[str] = set()


def variant(level: str) -> str:
    """The object a ``level`` links: ``names``, or ``files`` (stats, print, save: the flight
    recorder's trigger saves tensors at any level that records)."""
    need = cpp_runtime.features(level)
    return "files" if need["files"] else "names"


@dataclasses.dataclass(frozen=True)
class ObjectBuild:
    """How one runtime object is built and where it goes (``native_library.build`` builds it)."""

    compiler: str
    flags: tuple[str, ...]
    directory: str
    variant: str
    openmp: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return os.path.join(self.directory, f"aoti_debug_rt-{self.variant}.o")

    @property
    def name(self) -> str:
        """The path relative to aoti_debug's cache folder: what a wrapper's header names."""
        return f"{os.path.basename(self.directory)}/{os.path.basename(self.path)}"

    def command(self, gen_dir: str, output: str, openmp: bool) -> list[str]:
        records = int(self.variant != "names")
        files = int(self.variant == "files")
        source = os.path.join(cpp_runtime.NATIVE_DIR, cpp_runtime.OBJECT_SOURCE)
        return [self.compiler, *self.flags, f"-DAOTI_DEBUG_WITH_RECORDS={records}",
                f"-DAOTI_DEBUG_WITH_FILES={files}", "-I", gen_dir, "-I", cpp_runtime.NATIVE_DIR, "-c", source,
                "-o", output]


@functools.lru_cache(maxsize=4)
def object_spec(name: str) -> ObjectBuild:
    """The build of the ``name`` object (:func:`variant`) for this process's compiler.

    Raises:
        BuildError: no C++ compiler Inductor would use.
    """
    cxx, flags = native_library.toolchain_flags()
    key = native_library.build_key(cxx, "object", flags)
    directory = os.path.join(native_library.cache_folder(), f"{cpp_runtime.abi_namespace()}-obj-{key}")
    return ObjectBuild(cxx, flags, directory, name)


def object_path(level: str) -> str | None:
    """The object for ``level``, built first if it is not there; None (and one warning
    per process) when it cannot be built."""
    return native_library.built(lambda: object_spec(variant(level)), _warn_once)


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning("aoti_debug: the prebuilt C++ runtime object is not available (%s); AOTInductor packages "
                    "compiled now get the runtime inline (slower to compile)", message)


# ---------------------------------------------------------------------------- Inductor's link step
def _kernel_objects() -> list | None:
    """The list AOTInductor's link step takes extra objects from: the CUTLASS kernel
    objects (``CUDACodeCache.aot_kernels_o``, torch 2.11 and 2.13; CPU packages read it
    too), copied and cleared at each link. None where this torch has no such list."""
    try:
        from torch._inductor.codecache import CUDACodeCache

        found = CUDACodeCache.aot_kernels_o
    except Exception:
        return None
    return found if isinstance(found, list) else None


def linkable(device: str) -> str | None:
    """Why the package being compiled cannot link a runtime object (its wrapper then gets
    the runtime inline), or None when it can."""
    try:
        import torch
        from torch._inductor import config
        from torch._inductor.codecache import AotCodeCompiler
    except Exception as e:  # pragma: no cover - another torch layout
        return f"no AotCodeCompiler ({type(e).__name__})"
    aot = config.aot_inductor
    reasons = (
        (not sys.platform.startswith("linux"), f"platform {sys.platform}"),
        (device not in ("cpu", "cuda") or torch.version.hip, f"device {device}"),
        # The CMake project (and compile_standalone) links outside this process.
        (getattr(aot, "package_cpp_only", False), "aot_inductor.package_cpp_only"),
        # AotCodeCompiler asserts that no kernel objects come with multi-arch kernels.
        (getattr(aot, "emit_multi_arch_kernel", False), "aot_inductor.emit_multi_arch_kernel"),
        (getattr(aot, "cross_target_platform", None), "aot_inductor.cross_target_platform"),
        (config.is_fbcode(), "fbcode"),
        (not hasattr(AotCodeCompiler.__dict__.get("compile"), "__aoti_debug_original__"),
         "AotCodeCompiler.compile is not patched"),
        (_kernel_objects() is None, "this torch has no CUDACodeCache.aot_kernels_o"),
    )
    return next((why for cond, why in reasons if cond), None)


def object_for_link(name: str) -> str:
    """The path of the runtime object a wrapper names (``cpp_runtime.linked_block``),
    built again if it went missing since the wrapper was generated.

    Raises:
        BuildError: no such object of this installation, or it cannot be built.
    """
    for v in ("names", "files"):
        spec = object_spec(v)
        if spec.name == name:
            if not os.path.exists(spec.path):
                native_library.build(spec)
            return spec.path
    raise BuildError(f"the wrapper links the aoti_debug runtime object {name}, which this installation does not "
                     "build (generated by another aoti_debug or compiler?)")


@contextlib.contextmanager
def linked(names: list[str]):
    """While AotCodeCompiler compiles: the runtime objects ``names`` are in the list its
    link step takes extra objects from (:func:`_kernel_objects`), as copies (a torch may
    delete the objects it linked)."""
    extra = _kernel_objects()
    if not names or extra is None:
        yield
        return
    tmp = tempfile.mkdtemp(prefix="aoti_debug_link_")
    copies = []
    try:
        for name in names:
            copy = os.path.join(tmp, os.path.basename(name))
            if device_stats.is_object_name(name):
                # The stats kernels: the glue refers to them weakly, so a package links without them.
                try:
                    shutil.copyfile(device_stats.object_for_link(name), copy)
                except (BuildError, OSError) as e:
                    if name not in _warned:
                        _warned.add(name)
                        log.warning("aoti_debug: the stats kernels %s are not linked (%s); that package copies "
                                    "CUDA tensors to the host for their stats", name, e)
                    continue
            else:
                shutil.copyfile(object_for_link(name), copy)
            copies.append(copy)
        extra.extend(copies)
        yield
    finally:
        for copy in copies:  # still there when the compile failed before its link
            while copy in extra:
                extra.remove(copy)
        shutil.rmtree(tmp, ignore_errors=True)


def wrap_aot_compile(original):
    """``AotCodeCompiler.compile`` (a classmethod) that links the runtime objects its
    wrapper code names."""
    func = original.__func__

    def compile(cls, *args, **kwargs):
        texts = [a for a in (*args, *kwargs.values()) if isinstance(a, str)]  # wrapper_code, kernel_code
        names = list(dict.fromkeys(n for t in texts for n in cpp_runtime.linked_objects(t)))
        with linked(names):
            return func(cls, *args, **kwargs)

    compile.__doc__ = func.__doc__
    compile.__wrapped__ = func
    return classmethod(compile)
