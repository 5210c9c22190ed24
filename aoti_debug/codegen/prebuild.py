"""What a machine's first instrumented compile builds, built ahead of it (``aoti-debug
doctor --build``), or from the start of that compile (:func:`start_early`).

An instrumented compile builds aoti_debug's C++ runtime the first time it needs it and
keeps it in Inductor's cache (``TORCHINDUCTOR_CACHE_DIR``, else
``/tmp/torchinductor_<user>``): the runtime library (the Python wrapper's CPU stats and
ring records, the C++ wrapper's runtime), AOTInductor's two runtime objects, and on a
CUDA machine the stats kernels' pack for its GPU with the object AOTInductor links it
from. Each is built once per content hash, compiler and torch, and takes from seconds to
a minute (the library: about 20 s of g++ at -O3 on a 2-core x86_64 machine). Building them
here, once (an image's build step, a job's setup), takes that out of the first compile.

What this does not build: the Python wrapper's Triton stats kernels on CUDA, whose
variants follow each model's dtypes and layouts (``AOTI_DEBUG_STATS_COMPILE``).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor


@dataclasses.dataclass
class Step:
    """One thing built (or found, or skipped)."""

    what: str
    state: str
    """``built``, ``present`` (there before), ``failed`` or ``skipped``."""
    seconds: float = 0.0
    path: str | None = None
    detail: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def line(self) -> str:
        took = f" in {self.seconds:.1f} s" if self.state == "built" else ""
        where = f": {self.path}" if self.path and self.state in ("built", "present") else ""
        why = f" ({self.detail})" if self.detail else ""
        return f"{self.state:<8} {self.what}{took}{where}{why}"


#: The AOTInductor runtime objects (``native_object.variant``): level names, and the others.
OBJECT_VARIANTS = ("names", "files")


def prebuild(library: bool = True, objects: tuple[str, ...] = OBJECT_VARIANTS, pack: bool | None = None,
             pack_object: bool = True) -> list[Step]:
    """Build what is asked into this process's Inductor cache, unless it is there.

    Args:
        library: the runtime library.
        objects: AOTInductor's runtime objects of these variants.
        pack: the stats kernels' pack for the current CUDA device (None: where there is one).
        pack_object: with the pack, the object AOTInductor links it from.

    Never raises for a failed build: its step says why.
    """
    from . import device_stats, native_library, native_object

    builds = [("runtime library (Python wrapper, cpp_wrapper)", native_library.build_spec)] if library else []
    builds += [(f"AOTInductor runtime object '{v}'", lambda v=v: native_object.object_spec(v)) for v in objects]
    # one compiler process each, at once where there are cores for them (the library and
    # the 'files' object take about as long: 21 s and 18 s on a 2-core x86_64 machine)
    workers = max(1, min(len(builds), os.cpu_count() or 1))
    with ThreadPoolExecutor(workers, thread_name_prefix="aoti_debug_prebuild") as pool:
        steps = list(pool.map(lambda b: _build(*b), builds))
    cap = device_stats.capability()
    if pack is None:
        pack = cap is not None
    if not pack:
        return steps
    if cap is None:
        steps.append(Step("stats kernels' pack (CUDA)", "skipped", detail="no CUDA device"))
        return steps
    folder = device_stats._folder(cap)  # (the pack and its objects)
    steps.append(_timed(f"stats kernels' pack for sm_{cap}", lambda: device_stats.pack_path(cap), folder))
    if pack_object and steps[-1].state != "failed":
        steps.append(_timed(f"stats kernels' pack object for sm_{cap} (AOTInductor)",
                            lambda: _in_cache(device_stats.object_name(cap)), folder))
    return steps


def _build(what: str, spec_of) -> Step:
    """A ``native_library.build`` of ``spec_of()``, timed; present when its file was there."""
    from . import native_library

    try:
        spec = spec_of()
        if os.path.exists(spec.path):
            return Step(what, "present", path=spec.path)
        t0 = time.perf_counter()
        native_library.build(spec)
        return Step(what, "built", time.perf_counter() - t0, spec.path)
    except Exception as e:  # (a CLI's step: said, never a traceback)
        return Step(what, "failed", detail=_one_line(e))


def _timed(what: str, make, folder: str) -> Step:
    """``make()``: a path in ``folder`` (built first where it was not there) or None (it
    could not be, and warned why); present when the folder held it before."""
    before = set(os.listdir(folder)) if os.path.isdir(folder) else set()
    t0 = time.perf_counter()
    try:
        path = make()
    except Exception as e:  # (a CLI's step: said, never a traceback)
        return Step(what, "failed", detail=_one_line(e))
    seconds = time.perf_counter() - t0
    if path is None:
        return Step(what, "failed", seconds, detail="the warning above says why")
    return Step(what, "present" if os.path.basename(path) in before else "built", seconds, path)


def _in_cache(name: str | None) -> str | None:
    from . import native_library

    return None if name is None else os.path.join(native_library.cache_folder(), name)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


_early: set[tuple] = set()
_early_lock = threading.Lock()


def start_early(level: str, cpp: bool, aot: bool, device: str = "cpu") -> threading.Thread | None:
    """Start building, on a thread of its own, what this compile's wrapper header will ask
    for (the runtime library; AOTInductor's runtime object of ``level``), when a wrapper is
    made: the build then runs beside Inductor's scheduling and kernel codegen instead of
    after them, and the header's own call waits for it (``native_library.built`` holds its
    lock while building; a failed build is not tried again and has warned once). Once per
    process and target (the thread returns at once where it was built before); None where
    nothing is to be built or it was started already."""
    from . import native_library, native_object
    from .python_emitter import STATS_LEVELS

    if aot:
        key, target = ("object", native_object.variant(level)), lambda: native_object.object_path(level)
    elif cpp:
        key, target = ("library",), native_library.library_path
    elif level in STATS_LEVELS:
        key, target = ("library",), native_library.stats_library_path
    else:
        return None
    if key in _early or (aot and native_object.linkable(device) is not None):
        return None  # (started already; an AOTInductor package that gets the runtime inline)
    with _early_lock:
        if key in _early:
            return None
        _early.add(key)
    thread = threading.Thread(target=_quietly, args=(target,), name="aoti_debug_build", daemon=True)
    thread.start()
    return thread


def _quietly(target) -> None:
    try:
        target()  # (a failure is warned by the target, once, and remembered)
    except Exception:  # pragma: no cover - the header's own call builds and warns
        pass
