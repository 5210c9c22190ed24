"""The C++ runtime as a shared library for JIT ``cpp_wrapper`` modules, built once.

Every part of the runtime (``native/``) is compiled into ``libaoti_debug_rt.so`` once
per content hash (:func:`cpp_runtime.abi_namespace`), compiler and torch, in Inductor's
cache directory (so that it lives and goes with the compiled wrappers that point at
it), with the compiler Inductor uses (:mod:`toolchain`), at -O3, with OpenMP where the
compiler has it and the vector ISA Inductor picked for this CPU. Wrappers then compile
only a thin glue (``glue_library.h``) that loads it by its absolute path.

Concurrent builders (compile workers, other processes) take a file lock and build in a
temporary directory next to the library, which is renamed into place: a reader sees
either no library or a complete one. A build that fails warns once per process and the
wrappers compiled meanwhile run uninstrumented (one warning when they run).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from typing import Callable

from . import cpp_runtime
from .emit import cpp_string

log = logging.getLogger("aoti_debug")

LIBRARY_FILE = "libaoti_debug_rt.so"
BUILD_TIMEOUT_S = 900
#: How long a build waits for another process's build of the same files (their file
#: lock) before it gives up with one warning: longer than a build may take, and finite,
#: so that a hung or stopped holder costs a warning instead of a compile that never ends.
LOCK_TIMEOUT_S = BUILD_TIMEOUT_S + 300
_lock = threading.Lock()
_failed: dict[str, str] = {}  # artifact path -> why it failed (warned once)


class BuildError(RuntimeError):
    """The runtime library could not be built (the message names the command's output)."""


@dataclasses.dataclass(frozen=True)
class Build:
    """How the library is built and where it goes."""

    compiler: str
    flags: tuple[str, ...]
    openmp: tuple[str, ...]
    libs: tuple[str, ...]
    directory: str

    @property
    def path(self) -> str:
        return os.path.join(self.directory, LIBRARY_FILE)

    def command(self, gen_dir: str, output: str, openmp: bool) -> list[str]:
        source = os.path.join(cpp_runtime.NATIVE_DIR, cpp_runtime.LIBRARY_SOURCE)
        return [self.compiler, *self.flags, *(self.openmp if openmp else ()), "-I", gen_dir,
                "-I", cpp_runtime.NATIVE_DIR, source, "-o", output, *self.libs]


def _cache_root() -> str:
    try:
        # torch._inductor.runtime.cache_dir_utils.cache_dir: TORCHINDUCTOR_CACHE_DIR or
        # /tmp/torchinductor_<user> (torch 2.11 and 2.13).
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        return cache_dir()
    except Exception:  # pragma: no cover - another torch layout
        return os.path.join(tempfile.gettempdir(), "aoti_debug_cache")


#: x86 vector ISAs the runtime's stats loops are compiled for, best first: the CPU flags
#: each needs (``/proc/cpuinfo``) and the compiler flags Inductor's ``VecAVX512`` and
#: ``VecAVX2`` use for them (torch 2.11 and 2.13). Not the extensions Inductor adds on CPUs
#: that have them (VNNI, AVX512-BF16, AMX): the stats loops use none of them.
_X86_ISAS = (
    ("avx512", ("avx512f", "avx512dq", "avx512vl", "avx512bw", "fma"),
     ("-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma")),
    ("avx2", ("avx2", "fma", "f16c"), ("-mavx2", "-mfma", "-mf16c")),
)


def _isa_flags(cpuinfo: str = "/proc/cpuinfo") -> list[str]:
    """The vector ISA flags for this CPU, as Inductor would pick them, read from
    ``cpuinfo`` (none off x86 Linux, or where ``ATEN_CPU_CAPABILITY=default``).

    Not Inductor's ``cpu_vec_isa.pick_vec_isa()``: it compiles and runs probe programs
    (20-40 s in a fresh Inductor cache on the GPU machine), and every process that builds
    or looks up the runtime would pay it, also for a CUDA model, where Inductor never asks.
    """
    capability = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if capability == "default":
        return []
    try:
        with open(cpuinfo) as f:
            line = next((ln for ln in f if ln.startswith("flags")), "")
    except OSError:
        return []
    have = set(line.partition(":")[2].split())
    for name, needs, flags in _X86_ISAS:
        if capability == "avx2" and name == "avx512":
            continue
        if have.issuperset(needs):
            return list(flags)
    return []


@functools.lru_cache(maxsize=1)
def toolchain_flags() -> tuple[str, tuple[str, ...]]:
    """The compiler Inductor uses (an absolute path) and the flags every build of the
    runtime shares: C++17, -O3, position-independent, hidden visibility, torch's C++ ABI,
    this CPU's vector ISA, the versions run.json names, torch's headers.

    Raises:
        BuildError: no C++ compiler Inductor would use.
    """
    import torch

    from . import toolchain

    cxx, origin = toolchain.inductor_compiler()
    if cxx is None:
        raise BuildError(f"no C++ compiler ({origin})")
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    from .. import __version__

    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    flags = ("-std=c++17", "-O3", "-fPIC", "-fvisibility=hidden", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
             *_isa_flags(), f"-DAOTI_DEBUG_PKG_VERSION={cpp_string(__version__)}",
             f"-DAOTI_DEBUG_TORCH_VERSION={cpp_string(str(torch.__version__))}",
             "-I", os.path.join(torch_dir, "include"))
    return toolchain.resolve(cxx), flags


def build_key(cxx: str, *parts) -> str:
    """A short hash of what a build depends on: the runtime's sources (its namespace), the
    compiler and its version, ``parts`` (flags, libraries) and the platform."""
    from . import toolchain

    ident = json.dumps([cpp_runtime.abi_namespace(), os.path.realpath(cxx), toolchain.compiler_version(cxx),
                        *parts, sys.platform])
    return hashlib.sha256(ident.encode()).hexdigest()[:12]


def cache_folder() -> str:
    """aoti_debug's folder in Inductor's cache directory (what it builds lives there)."""
    return os.path.join(_cache_root(), "aoti_debug")


@functools.lru_cache(maxsize=1)
def build_spec() -> Build:
    """The compiler, flags and cache directory of this process's library.

    Raises:
        BuildError: no C++ compiler Inductor would use.
    """
    import torch

    cxx, common = toolchain_flags()
    flags = (*common[:3], "-shared", *common[3:])
    # The aoti_torch_* shim lives in libtorch_cpu (a dependency of torch._C, which Python
    # loads RTLD_LOCAL): link it, by the path of the torch that is already loaded.
    lib = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "lib")
    libs = ("-L", lib, "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{lib}")
    flags = (*flags, *_python_flags())
    key = build_key(cxx, flags, libs)
    directory = os.path.join(cache_folder(), f"{cpp_runtime.abi_namespace()}-{key}")
    return Build(cxx, flags, ("-fopenmp",), libs, directory)


def _python_flags() -> tuple[str, ...]:
    """What builds the Python runtime's CPU side function into the library
    (``native/cpu_values.h``): this interpreter's headers, where it has them (Inductor's
    CPU kernels for the Python wrapper need them too); none elsewhere, and the Python
    runtime packs its CPU sides in Python."""
    include = sysconfig.get_paths().get("include") or ""
    if not include or not os.path.exists(os.path.join(include, "Python.h")):
        return ()
    layout = tensor_object_layout()
    return ("-DAOTI_DEBUG_WITH_PYTHON=1", "-I", include, *((f"-DAOTI_DEBUG_THPVARIABLE={layout}",) if layout else ()))


#: How torch's Python tensor object (``THPVariable``) holds its tensor, right after the
#: object's head (written ``PyObject_HEAD`` or ``PyObject_HEAD;``): torch 2.11 and 2.13 an
#: ``at::Tensor``, older versions a ``c10::MaybeOwned<at::Tensor>``. Both are read as a
#: ``TensorImpl`` pointer.
_THPVARIABLE = re.compile(r"struct THPVariable\s*\{\s*PyObject_HEAD\s*;?\s*(?://[^\n]*\n\s*)*"
                          r"(at::Tensor|c10::MaybeOwned<at::Tensor>)\s+cdata;")


def tensor_object_layout(header: str | None = None) -> int:
    """1 where torch's ``python_variable.h`` (``header``: its text; None: the installed
    torch's) declares ``THPVariable`` with an ``at::Tensor`` after ``PyObject_HEAD``, 2
    with a ``c10::MaybeOwned<at::Tensor>``, 0 otherwise: the C side function
    (``native/cpu_values.h``) then reads tensors' metadata through their Python
    attributes. The library checks the layout again on a tensor when it is loaded."""
    if header is None:
        import torch

        path = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "include", "torch", "csrc", "autograd",
                            "python_variable.h")
        try:
            with open(path, encoding="utf-8") as f:
                header = f.read()
        except OSError:
            return 0
    m = _THPVARIABLE.search(header)
    if m is None:
        return 0
    return 1 if m.group(1) == "at::Tensor" else 2


def library_path() -> str | None:
    """The runtime library's absolute path, built first if it is not there; None (and one
    warning per process) when it cannot be built."""
    if sys.platform == "win32":
        return None  # the glue warns when the model runs: the runtime needs POSIX
    return built(build_spec, _warn_once)


def stats_library_path() -> str:
    """The runtime library for a Python wrapper's CPU stats (``runtime/native_stats.py``),
    built first if it is not there; "" when it cannot be built (one warning per process:
    that wrapper's CPU stats then use torch ops)."""
    if sys.platform == "win32":
        return ""
    return built(build_spec, _warn_python) or ""


def built(spec_of: Callable[[], Build], warn: Callable[[str, str], None]) -> str | None:
    """The path ``spec_of()`` names, built first if it is not there; None when it cannot
    be built (``warn(key, message)`` is told, once per key: the compiler, or the path).
    Compile threads of this process build once, and a failed build is not tried again."""
    try:
        spec = spec_of()
    except BuildError as e:
        warn("compiler", str(e))
        return None
    if os.path.exists(spec.path):
        return spec.path
    with _lock:
        if spec.path in _failed:
            return None
        try:
            build(spec)
        except BuildError as e:
            _failed[spec.path] = str(e)
            warn(spec.path, str(e))
            return None
    return spec.path


@contextlib.contextmanager
def build_lock(directory: str, timeout: float = LOCK_TIMEOUT_S, trace: Callable[[str], None] | None = None):
    """``directory/build.lock`` held (``flock``, released when the block ends or the process
    dies) with this process's pid written in it, so that a waiter can name the holder.

    Raises:
        BuildError: another process held it for ``timeout`` seconds.
    """
    import fcntl

    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "build.lock")
    with open(path, "a+") as lock:
        deadline = time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                lock.seek(0)
                holder = lock.read().strip() or "?"
                if trace is not None and not told:
                    trace(f"waiting for {path} (held by pid {holder})")
                    told = True
                if time.monotonic() >= deadline:
                    raise BuildError(f"{path} was held by another build (pid {holder}) for {timeout:g} s") from None
                time.sleep(0.2)
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        yield


def build(spec) -> float:
    """Build ``spec.path`` (this library, or a runtime object: native_object.py) unless it
    is there; seconds spent compiling. ``spec`` has ``directory``, ``path``, ``compiler``,
    ``openmp`` (its flags, empty: built without) and ``command(gen_dir, output, openmp)``.

    Raises:
        BuildError: the compiler failed (with and without OpenMP) or could not run, or
            another process's build held the lock too long.
    """
    with build_lock(spec.directory):
        if os.path.exists(spec.path):
            return 0.0
        gen_dir = tempfile.mkdtemp(prefix="build-", dir=spec.directory)
        try:
            cpp_runtime.write_constants(gen_dir)
            output = os.path.join(gen_dir, os.path.basename(spec.path))
            errors = []
            t0 = time.perf_counter()
            for openmp in ((True, False) if spec.openmp else (False,)):
                cmd = spec.command(gen_dir, output, openmp)
                log.info("aoti_debug: building the C++ runtime once: %s", " ".join(cmd))
                try:
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
                except (OSError, subprocess.TimeoutExpired) as e:
                    raise BuildError(f"{spec.compiler} did not run: {e}") from e
                if r.returncode == 0:
                    break
                errors.append(f"$ {' '.join(cmd)}\n{r.stderr[-4000:]}")
            else:
                with open(os.path.join(spec.directory, "build.log"), "w", encoding="utf-8") as f:
                    f.write("\n\n".join(errors))
                raise BuildError(f"building {spec.path} failed (log: {os.path.join(spec.directory, 'build.log')}):"
                                 f" {errors[-1].strip().splitlines()[-1] if errors[-1].strip() else ''}")
            seconds = time.perf_counter() - t0
            os.replace(output, spec.path)
            return seconds
        finally:
            shutil.rmtree(gen_dir, ignore_errors=True)


_warned: set[str] = set()


def _warn_python(key: str, message: str) -> None:
    if "python:" + key in _warned:
        return
    _warned.add("python:" + key)
    log.warning("aoti_debug: the C++ runtime library is not available (%s); Python-wrapper models compiled now "
                "summarise CPU tensors with torch ops (slower)", message)


def _warn_once(key: str, message: str) -> None:
    if key in _warned:
        return
    _warned.add(key)
    log.warning("aoti_debug: the C++ runtime library is not available (%s); cpp_wrapper models compiled now "
                "run uninstrumented", message)
