"""The kernels the C++ runtime summarises CUDA tensors with, compiled when a model is.

At levels ``stats`` and ``print`` a GPU ``cpp_wrapper`` module or AOTInductor package
computes each CUDA tensor's stats and checksum on the device, with the Triton kernel the
Python runtime launches (``runtime/fused_stats_kernels._stats_kernel``), and copies only
its 9 doubles to the host (``native/device_stats.h``). The C++ runtime cannot compile
Triton, so the kernel is compiled here, at compile time, for the current GPU's compute
capability: one cubin per element kind (``fused_stats._KINDS``) and vector width (the
16-byte one and 1, as ``fused_stats._launch`` picks them), specialised as Triton's JIT
specialises the Python runtime's launches (pointers 16-byte aligned; ``k`` and
``k_total`` never specialised), so the same code runs; and for the floating kinds a
model's strided tensors have (:data:`PERM_KINDS`: permuted weights, q/k/v slices,
channels_last activations), the strided kernel (``_stats_kernel_perm``) that reads them
in place, for the tile widths :data:`PERM_COLS`, so the C++ runtime no longer copies them
(it still copies other strided tensors, as ``fused_stats`` does), and the dense kernel
(``_stats_kernel_dense``, at :func:`dense_blocks`) that reads those that fill a dense
block in memory order.

The cubins travel as one *pack* (:func:`write_pack`, layout below): a file in
aoti_debug's folder of Inductor's cache that ``cpp_wrapper`` modules name
(``AOTI_DEBUG_STATS_PACK_FILE``), and for AOTInductor packages, which must need nothing
of aoti_debug where they run, an object holding it as the symbol :data:`SYMBOL`, linked
into the package like the runtime object (``AOTI_DEBUG_LINKED_STATS``,
``native_object.linked``); the glue refers to the symbol weakly, so a package without it
still loads and takes the host path. The pack is built once per Triton version, kernel
source and capability (a few seconds with parallel workers, ``stats_worker.py``); a pack
that cannot be built is one warning, and those models copy CUDA tensors to the host as
before.

Pack layout (little-endian; ``native/device_stats.h`` reads it): a 64-byte header
(magic, version, capability, kernel and dtype counts, the launch constants ``BLOCK``,
``PROGRAMS_PER_SM``, ``MIN_TILES`` of ``fused_stats``, the kernel's argument count and
Triton's scratch-pointer count, the total size, the offset of the PTX parameter types),
one 64-byte entry per kernel (kind, width, is_float, vec, num_warps, shared memory, the
strided kernel's tile width and table row width (0, 0: the contiguous kernel), offsets of
its name and cubin, its size, the dense kernel's tile (0: another kernel)), one 16-byte entry per dtype the kernel reads (the torch
name, its kind, 1 or 2 values per element: complex as its real view), then the strings
and the cubins (256-byte aligned).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

from .. import config
from .native_library import BuildError
from .stats_worker import ARG_TYPES, plain_launch, scratch_pointers

log = logging.getLogger("aoti_debug")

PACK_VERSION = 3
MAGIC = b"AOTIDSTS"
#: The pack's symbol in an AOTInductor package (hidden; the glue's reference is weak).
SYMBOL = "aoti_debug_stats_pack_v1"
#: Triton's launcher gives a kernel at most this much shared memory without opting in.
MAX_SHARED = 48 * 1024
MIN_TRITON = (3, 3)
IMAGE_ALIGN = 256
_HEADER = struct.Struct("<8s10IQQ")
_KERNEL = struct.Struct("<8IQQQQ")
_DTYPE = struct.Struct("<QII")
#: The base pointer's Triton type per kind, as the JIT types the tensor the Python runtime
#: passes (bool and float8 viewed as uint8).
_POINTER = {"bool": "u8", "uint8": "u8", "int8": "i8", "float8_e4m3fn": "u8", "float8_e5m2": "u8", "int16": "i16",
            "float16": "fp16", "bfloat16": "bf16", "int32": "i32", "float32": "fp32", "int64": "i64",
            "float64": "fp64", "uint16": "u16", "uint32": "u32", "uint64": "u64"}
_OBJECT_RE = re.compile(r"^stats-[0-9a-f]{12}/pack-sm(\d+)-[0-9a-f]{12}\.o$")

#: How long a pack build waits for its worker processes, all together (a cold build of
#: the 30 contiguous variants took about 10 s with 8 workers; the strided ones add 28),
#: and how long a worker may take before it dumps its stack into its log and exits. A build that times out is one
#: warning, and the models compiled then take the host path: it is never retried in this
#: process, where whatever stopped the workers could stop the compile too.
WORKERS_TIMEOUT_S = 300
#: How long a thread waits for another thread's build in this process.
THREAD_LOCK_TIMEOUT_S = WORKERS_TIMEOUT_S + 120

_lock = threading.RLock()  # object_name builds the pack under it too
_T0 = time.monotonic()
_failed: dict[str, str] = {}
_warned: set[str] = set()


#: The kinds (float32, bfloat16, float16) and tile widths the strided kernel is compiled
#: for: the C++ runtime reads a strided tensor of these kinds in place with the width of
#: these that ``fused_stats._cols`` would rank best for its inner run, and copies the others.
PERM_KINDS = (9, 7, 6)
PERM_COLS = (4, 16, 64, 256, 1024)
#: ... and the tiles the dense kernel (``_stats_kernel_dense``) is compiled for: the C++
#: runtime reads a tensor of these kinds that fills a dense block in another order
#: (channels_last activations) in memory order where one of them fits its dims
#: (``fused_stats._dense_layout``: ``BLOCK`` or half of it).
def dense_blocks() -> tuple[int, ...]:
    from ..runtime import fused_stats as fs

    return (fs.BLOCK, fs.BLOCK // 2)


@dataclasses.dataclass(frozen=True)
class Variant:
    """One compiled form of the kernel: an element kind (``fused_stats._KINDS``) and vector
    width; ``cols``: the strided kernel's tile width, ``dense``: the dense kernel's tile
    (both 0: the contiguous kernel)."""

    kind: int
    width: int
    is_float: bool
    vec: int
    pointer: str
    cols: int = 0
    dense: int = 0

    @property
    def file(self) -> str:
        tail = f"-c{self.cols}" if self.cols else f"-d{self.dense}" if self.dense else ""
        return f"k{self.kind}-v{self.vec}{tail}.cubin"

    @property
    def kernel(self) -> str:
        return "_stats_kernel_perm" if self.cols else "_stats_kernel_dense" if self.dense else "_stats_kernel"

    @property
    def table_width(self) -> int:
        """int64 per tensor in the kernel's table (``fused_stats._PERM_TW``, ``_DENSE_TW``; 0:
        the contiguous kernel's six)."""
        from ..runtime import fused_stats as fs

        return fs._PERM_TW if self.cols else fs._DENSE_TW if self.dense else 0

    def job(self) -> dict:
        from ..runtime import fused_stats as fs

        signature = {"base": "*" + self.pointer, "tab": "*i64", "k": "i32", "part": "*fp64", "counters": "*i32",
                     "out": "*fp64", "k_total": "i32"}
        constexprs = {"KIND": self.kind, "WIDTH": self.width, "IS_FLOAT": self.is_float, "VEC": self.vec,
                      "BLOCK": self.dense or fs.BLOCK, "TBLOCK": fs._TBLOCK, "RBLOCK": fs._RBLOCK}
        # the strided kernel's tile width and table row, the dense kernel's table row and
        # PART 0 (whole tiles), as the Python runtime launches them
        constexprs.update(fs._extra_args(self.cols or (-1 if self.dense else 0)))
        signature.update({name: "constexpr" for name in constexprs})
        # The launcher's own buffers are always aligned; the base is 16-byte aligned exactly
        # when the vectorised form is used (fused_stats._launch), so VEC=1 assumes nothing.
        aligned = [1, 3, 4, 5] + ([0] if self.vec > 1 else [])
        return {"kernel": self.kernel, "signature": signature, "constexprs": constexprs, "aligned": sorted(aligned),
                "file": self.file}


@dataclasses.dataclass(frozen=True)
class KernelImage:
    """A compiled variant: its cubin and what the launcher needs from Triton's metadata."""

    variant: Variant
    name: str
    image: bytes
    num_warps: int
    shared: int
    params: tuple[str, ...]


def variants() -> list[Variant]:
    """Every variant the runtime may launch: each kind, vectorised (16 bytes) and not; the
    strided kernel for :data:`PERM_KINDS` at each of :data:`PERM_COLS`, vectorised where a
    tile row holds a vector (``fused_stats.plan_permuted``), and the dense kernel for them
    at each of :func:`dense_blocks`."""
    from ..runtime.fused_stats import _KINDS

    out = {}
    for dtype, (kind, width, is_float) in _KINDS.items():
        name = str(dtype).replace("torch.", "")
        for vec in sorted({16 // width, 1}, reverse=True):
            out.setdefault((kind, vec, 0), Variant(kind, width, bool(is_float), vec, _POINTER[name]))
            if kind in PERM_KINDS:
                for cols in PERM_COLS:
                    if cols >= vec:
                        out.setdefault((kind, vec, cols), Variant(kind, width, bool(is_float), vec, _POINTER[name],
                                                                  cols))
                for block in dense_blocks():
                    out.setdefault((kind, vec, -block), Variant(kind, width, bool(is_float), vec, _POINTER[name],
                                                                dense=block))
    return [out[k] for k in sorted(out)]


def dtypes() -> list[tuple[str, int, int]]:
    """``(torch dtype name, kind, values per element)`` for every dtype the kernel reads:
    complex ones as their real view (``fused_stats._prepare``)."""
    import torch

    from ..runtime.fused_stats import _KINDS

    out = [(str(d).replace("torch.", ""), spec[0], 1) for d, spec in _KINDS.items()]
    for c in (torch.complex32, torch.complex64, torch.complex128):
        real = _KINDS.get(c.to_real())
        if real is not None:
            out.append((str(c).replace("torch.", ""), real[0], 2))
    return sorted(out)


# ---------------------------------------------------------------------------- the pack
def write_pack(capability: int, images: list[KernelImage], dtype_rows: list[tuple[str, int, int]]) -> bytes:
    """The pack of ``images`` (layout: module docstring).

    Raises:
        BuildError: the images disagree on their parameters, or a launch they need is not
            the one native/device_stats.h makes.
    """
    from ..runtime import fused_stats as fs

    if not images:
        raise BuildError("no kernel images")
    params = images[0].params
    for im in images:
        if im.params != params:
            raise BuildError(f"kernel variants with different parameters: {im.params} vs {params}")
        if im.shared > MAX_SHARED:
            raise BuildError(f"{im.variant.file} needs {im.shared} bytes of shared memory")
    scratch = scratch_pointers(params)
    if scratch is None:
        raise BuildError(f"the kernel's parameters {params} are not {ARG_TYPES} and scratch pointers")
    strings = bytearray()

    def string(text: str) -> int:
        off = len(strings)
        strings.extend(text.encode() + b"\0")
        return off

    signature = string(" ".join(params))
    names = [string(im.name) for im in images]
    dnames = [string(name) for name, _, _ in dtype_rows]
    table_end = _HEADER.size + _KERNEL.size * len(images) + _DTYPE.size * len(dtype_rows)
    strings_at = table_end
    offset = _align(strings_at + len(strings))
    image_at = []
    for im in images:
        image_at.append(offset)
        offset = _align(offset + len(im.image))
    total = offset
    out = bytearray(total)
    _HEADER.pack_into(out, 0, MAGIC, PACK_VERSION, capability, len(images), len(dtype_rows), fs.BLOCK,
                      fs.PROGRAMS_PER_SM, fs.MIN_TILES, len(ARG_TYPES), scratch, 0, total,
                      strings_at + signature)
    at = _HEADER.size
    for im, name, where in zip(images, names, image_at):
        v = im.variant
        _KERNEL.pack_into(out, at, v.kind, v.width, int(v.is_float), v.vec, im.num_warps, im.shared, v.cols,
                          v.table_width, strings_at + name, where, len(im.image), v.dense)
        at += _KERNEL.size
    for (_name, kind, units), dname in zip(dtype_rows, dnames):
        _DTYPE.pack_into(out, at, strings_at + dname, kind, units)
        at += _DTYPE.size
    out[strings_at:strings_at + len(strings)] = strings
    for im, where in zip(images, image_at):
        out[where:where + len(im.image)] = im.image
    return bytes(out)


def _align(n: int) -> int:
    return (n + IMAGE_ALIGN - 1) // IMAGE_ALIGN * IMAGE_ALIGN


def read_pack(data: bytes) -> dict:
    """A pack as Python values (tests, checks): header fields, ``kernels``, ``dtypes``."""

    def cstr(off: int) -> str:
        return data[off:data.index(b"\0", off)].decode()

    (magic, version, capability, n_kernels, n_dtypes, block, per_sm, min_tiles, n_args, n_scratch, _r, total,
     signature) = _HEADER.unpack_from(data, 0)
    if magic != MAGIC or total != len(data):
        raise ValueError("not a stats pack")
    kernels = []
    at = _HEADER.size
    for _ in range(n_kernels):
        kind, width, is_float, vec, warps, shared, cols, tw, name, image, size, dense = _KERNEL.unpack_from(data, at)
        kernels.append({"kind": kind, "width": width, "is_float": bool(is_float), "vec": vec, "num_warps": warps,
                        "shared": shared, "cols": cols, "dense": dense, "table_width": tw, "name": cstr(name),
                        "image": data[image:image + size], "offset": image})
        at += _KERNEL.size
    rows = []
    for _ in range(n_dtypes):
        name, kind, units = _DTYPE.unpack_from(data, at)
        rows.append((cstr(name), kind, units))
        at += _DTYPE.size
    return {"version": version, "capability": capability, "block": block, "programs_per_sm": per_sm,
            "min_tiles": min_tiles, "args": n_args, "scratch": n_scratch, "signature": cstr(signature),
            "kernels": kernels, "dtypes": rows}


# ---------------------------------------------------------------------------- compiling
def _triton_version() -> tuple[int, ...] | None:
    try:
        import triton
    except Exception:
        return None
    parts = re.findall(r"\d+", str(getattr(triton, "__version__", "")))[:2]
    return tuple(int(p) for p in parts) if len(parts) == 2 else None


def _kernel_source() -> str:
    from ..runtime import fused_stats_kernels

    with open(fused_stats_kernels.__file__, encoding="utf-8") as f:
        return f.read()


def compile_images(capability: int, chosen: list[Variant] | None = None,
                   workers: int | None = None) -> list[KernelImage]:
    """The cubins of ``chosen`` (default: :func:`variants`) for ``sm_<capability>``, compiled
    by parallel worker processes (in this process where none can start).

    Raises:
        BuildError: Triton failed, or is too old for this launch ABI.
    """
    from ..runtime import fused_stats as fs

    version = _triton_version()
    if version is None or version < MIN_TRITON:
        raise BuildError(f"triton >= {'.'.join(map(str, MIN_TRITON))} is needed (found {version})")
    chosen = list(chosen if chosen is not None else variants())
    from ..runtime import fused_stats_kernels

    with tempfile.TemporaryDirectory(prefix="aoti_debug_stats_") as tmp:
        base = {"kernels": os.path.abspath(fused_stats_kernels.__file__), "capability": int(capability),
                "num_warps": fs.NUM_WARPS, "out": tmp}
        n = max(1, min(len(chosen), workers or min(8, os.cpu_count() or 1)))
        jobs = [dict(base, variants=[v.job() for v in chosen[i::n]], timeout=max(1, WORKERS_TIMEOUT_S - 10),
                     trace=config.trace_build()) for i in range(n)]
        trace(f"compiling {len(chosen)} variants for sm_{capability} with {n} workers")
        try:
            results = _run_workers(jobs)
        except WorkersTimedOut as e:
            raise BuildError(str(e)) from e
        except (OSError, subprocess.SubprocessError, RuntimeError, ValueError) as e:
            # Workers that cannot start or that fail (an interpreter that is no plain Python,
            # say): the same compile in this process. Not after a timeout: what stopped the
            # workers could stop this compile too.
            log.info("aoti_debug: stats kernel workers failed (%s); compiling in this process", e)
            trace(f"workers failed ({e}); compiling in this process")
            from .stats_worker import compile_variants

            try:
                results = [r for job in jobs for r in compile_variants(job)]
            except Exception as e2:
                raise BuildError(f"Triton could not compile the stats kernel for sm_{capability}: "
                                 f"{type(e2).__name__}: {e2}") from e2
        by_file = {r["file"]: r for r in results}
        images = []
        for v in chosen:
            r = by_file.get(v.file)
            if r is None:
                raise BuildError(f"no cubin for {v.file}")
            if not plain_launch(r) or r["name"] != r["entry"]:
                raise BuildError(f"{v.file}: a launch native/device_stats.h does not make: {r}")
            with open(os.path.join(tmp, v.file), "rb") as f:
                image = f.read()
            if image[:4] != b"\x7fELF":
                raise BuildError(f"{v.file} is no ELF cubin")
            images.append(KernelImage(v, r["name"], image, r["num_warps"], r["shared"], tuple(r["params"])))
    return images


class WorkersTimedOut(RuntimeError):
    """The worker processes did not finish in :data:`WORKERS_TIMEOUT_S`."""


def trace(message: str) -> None:
    """One line of the build's phases on stderr under ``AOTI_DEBUG_TRACE_BUILD=1``."""
    if config.trace_build():
        sys.stderr.write(f"[aoti_debug build +{time.monotonic() - _T0:.2f}s pid={os.getpid()}] {message}\n")
        sys.stderr.flush()


def _tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "\n".join(f.read().strip().splitlines()[-lines:])
    except OSError:
        return ""


def _run_workers(jobs: list[dict], timeout: float | None = None) -> list[dict]:
    """Each job compiled by a ``stats_worker.py`` process of its own; their results.

    A worker reads its job from a file and writes its result to one, its stderr to a log
    (no pipe to fill or to hold open); nothing waits longer than ``timeout`` in all, and
    no worker outlives this call.

    Raises:
        WorkersTimedOut: they did not finish in time (the late one's log says where it was).
        RuntimeError: a worker failed (its last line).
        OSError: a worker could not start.
    """
    timeout = WORKERS_TIMEOUT_S if timeout is None else timeout
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stats_worker.py")
    env = dict(os.environ, TRITON_DISABLE_LINE_INFO="1")  # a third of the size; the same code
    deadline = time.monotonic() + timeout
    procs: list[tuple[subprocess.Popen, str, str]] = []  # this call's workers: none outlives it
    try:
        for i, job in enumerate(jobs):
            path = os.path.join(job["out"], f"job{i}.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(job, f)
            result = os.path.join(job["out"], f"result{i}.json")
            errors_log = os.path.join(job["out"], f"worker{i}.log")
            with open(errors_log, "wb") as err:
                p = subprocess.Popen([sys.executable, script, path, result], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=err, env=env)
            procs.append((p, result, errors_log))
            trace(f"worker {i} started: pid {p.pid}, {len(job['variants'])} variants for sm_{job['capability']}")
        out: list[dict] = []
        errors = []
        for i, (p, result, errors_log) in enumerate(procs):
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise WorkersTimedOut(f"the stats kernel's worker processes did not finish in {timeout:g} s "
                                      f"(worker {i}, pid {p.pid}: {_tail(errors_log, 12) or 'no output'})") from None
            trace(f"worker {i} exited with {p.returncode}; its log:\n{_tail(errors_log)}")
            if p.returncode != 0:
                last = _tail(errors_log, 1)
                errors.append(last or f"exit {p.returncode}")
                continue
            with open(result, encoding="utf-8") as f:
                out.extend(json.load(f))
        if errors:
            raise RuntimeError("; ".join(errors))
        return out
    finally:
        for p, _result, _log in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


# ---------------------------------------------------------------------------- cached builds
def pack_key(capability: int) -> str:
    """What a pack depends on: its format, Triton, the kernel's source and launch
    constants, the variants and the capability."""
    from ..runtime import fused_stats as fs

    import triton

    ident = json.dumps([PACK_VERSION, str(triton.__version__), _kernel_source(), fs.BLOCK, fs.NUM_WARPS, fs._TBLOCK,
                        fs._RBLOCK, fs.PROGRAMS_PER_SM, fs.MIN_TILES, [dataclasses.astuple(v) for v in variants()],
                        dtypes(), int(capability)])
    return hashlib.sha256(ident.encode()).hexdigest()[:12]


def _folder(capability: int) -> str:
    from .native_library import cache_folder

    return os.path.join(cache_folder(), f"stats-{pack_key(capability)}")


def _pack_name(capability: int) -> str:
    return f"pack-sm{int(capability)}.bin"


def _locked_build(folder: str, target: str, make) -> None:
    """``make(tmp_path)`` writes ``target`` under the folder's file lock (bounded:
    ``native_library.build_lock``), renamed into place when complete."""
    from .native_library import build_lock

    if os.path.exists(target):  # built: no lock to wait for
        return
    with build_lock(folder, trace=trace):
        trace(f"lock of {folder} held")
        if os.path.exists(target):
            trace(f"{os.path.basename(target)} is there")
            return
        fd, tmp = tempfile.mkstemp(prefix=".build-", dir=folder)
        os.close(fd)
        try:
            t0 = time.monotonic()
            trace(f"building {target}")
            make(tmp)
            os.replace(tmp, target)
            trace(f"built {os.path.basename(target)} in {time.monotonic() - t0:.1f} s")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def _built(what: str, build) -> str | None:
    """``build()``'s path, or None with one warning per process and ``what`` when it fails."""
    if not _lock.acquire(timeout=THREAD_LOCK_TIMEOUT_S):  # re-entrant: object_name -> pack_path
        _warn(what, f"another thread's build did not end in {THREAD_LOCK_TIMEOUT_S} s")
        return None
    try:
        if what in _failed:
            return None
        try:
            return build()
        except Exception as e:  # never takes the model's compile down: the host path remains
            _failed[what] = str(e)
            trace(f"{what} failed: {type(e).__name__}: {e}")
            _warn(what, str(e) if isinstance(e, BuildError) else f"{type(e).__name__}: {e}")
            return None
    finally:
        _lock.release()


def _warn(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning("aoti_debug: no stats kernel for the C++ runtime (%s); models compiled now copy CUDA tensors to "
                    "the host for their stats (slower)", message)


def pack_path(capability: int) -> str | None:
    """The pack for ``sm_<capability>``, built first if it is not there; None (one warning)
    when it cannot be built."""

    def build() -> str:
        folder = _folder(capability)
        target = os.path.join(folder, _pack_name(capability))

        def make(tmp: str) -> None:
            data = write_pack(capability, compile_images(capability), dtypes())
            with open(tmp, "wb") as f:
                f.write(data)

        _locked_build(folder, target, make)
        return target

    return _built(f"pack-sm{capability}", build)


def _object_source(pack_file: str) -> str:
    # %progbits/%object: the spelling GNU as takes on every target ('@' starts a comment on ARM).
    return "\n".join([
        f'\t.section .rodata.{SYMBOL},"a",%progbits',
        "\t.balign 256",
        f"\t.globl {SYMBOL}",
        f"\t.hidden {SYMBOL}",
        f"\t.type {SYMBOL}, %object",
        f"{SYMBOL}:",
        f'\t.incbin "{pack_file}"',
        f"\t.size {SYMBOL}, . - {SYMBOL}",
        '\t.section .note.GNU-stack,"",%progbits',
        "",
    ])


def object_name(capability: int) -> str | None:
    """The object holding the pack for ``sm_<capability>``, as an AOTInductor wrapper names it
    (relative to aoti_debug's cache folder), built first if it is not there; None (one
    warning) when it cannot be built."""

    def build() -> str:
        from . import native_library

        cxx, _flags = native_library.toolchain_flags()
        pack = pack_path(capability)
        if pack is None:
            raise BuildError("no pack")
        folder = os.path.dirname(pack)
        name = f"pack-sm{int(capability)}-{native_library.build_key(cxx, 'stats-object')}.o"
        target = os.path.join(folder, name)

        def make(tmp: str) -> None:
            work = tempfile.mkdtemp(prefix="obj-", dir=folder)
            try:
                shutil.copyfile(pack, os.path.join(work, "pack.bin"))
                with open(os.path.join(work, "pack.s"), "w", encoding="utf-8") as f:
                    f.write(_object_source("pack.bin"))
                r = subprocess.run([cxx, "-c", "pack.s", "-o", "pack.o"], cwd=work, capture_output=True, text=True,
                                   timeout=300)
                if r.returncode != 0:
                    raise BuildError(f"{cxx} could not assemble the stats pack: {r.stderr.strip()[-2000:]}")
                shutil.copyfile(os.path.join(work, "pack.o"), tmp)
            finally:
                shutil.rmtree(work, ignore_errors=True)

        _locked_build(folder, target, make)
        return f"{os.path.basename(folder)}/{name}"

    if sys.platform != "linux":
        return None
    return _built(f"object-sm{capability}", build)


def is_object_name(name: str) -> bool:
    """Whether ``name`` (from a wrapper's ``AOTI_DEBUG_LINKED_STATS``) is a pack object's."""
    return bool(_OBJECT_RE.fullmatch(name))


def object_for_link(name: str) -> str:
    """The path of the pack object a wrapper names, built again if it went missing.

    Raises:
        BuildError: not this installation's object, or it cannot be built.
    """
    from .native_library import cache_folder

    m = _OBJECT_RE.fullmatch(name)
    if m is None:
        raise BuildError(f"not a stats pack object: {name!r}")
    path = os.path.join(cache_folder(), name)
    if not os.path.exists(path) and object_name(int(m.group(1))) != name:
        raise BuildError(f"the stats pack object {name} is not this installation's")
    return path


# ---------------------------------------------------------------------------- what a wrapper gets
def capability() -> int | None:
    """The current CUDA device's compute capability as ``major*10 + minor`` (90), or None."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
        return int(major) * 10 + int(minor)
    except Exception:
        return None


def wanted(device: str, level: str) -> int | None:
    """The capability to build a pack for when a wrapper for ``device`` at ``level`` computes
    stats on the device (levels stats and print: save needs the values on the host), or None."""
    if device != "cuda" or level not in ("stats", "print") or sys.platform != "linux":
        return None
    return capability()
