"""The C++ runtime's sources: its parts, the constants generated from Python, and the
text that goes into a generated wrapper's header.

The runtime is a set of parts in ``native/`` (shipped as package data), one job each,
each a header that includes what it uses so that it builds alone (the native tests do
that): ``interface.h`` (what the wrapper passes), ``json.h``, ``text.h``, ``state.h``
(process-wide state and warnings), ``env.h``, ``graph.h``, ``dtypes.h``, ``names.h``,
``threads.h``, ``stats.h``, ``host_tensor.h``, ``device_driver.h``, ``device_ring.h``,
``device_stats.h``, ``device_launch.h``, ``own_dir.h``, ``sources.h``, ``run_json.h``, ``crc.h``, ``pt_writer.h``,
``manifest.h``, ``records.h``, ``flight.h``,
``flight_hooks.h``, ``run_dir.h``, ``entry.h``, and the wrapper-side glue (``glue_*.h``).

``constants.h`` is generated here, never written by hand: level codes from
:data:`aoti_debug.config.LEVELS`, record, stats and run.json keys from
:mod:`aoti_debug.format.schema`, file names and limits from :mod:`aoti_debug.format.writer`,
environment variable names from :mod:`aoti_debug.config`, and the namespace
``aoti_debug_<hash>``, a hash of all of the above (no number to bump by hand).

Where the parts go:

* JIT ``cpp_wrapper``: every part is built once into a shared library
  (``native_library.py``); the wrapper gets :func:`library_block`, the interface and a
  glue that loads that library at its first launch.
* AOTInductor: the runtime for the level's features is built once into a static object
  (``native_object.py``, ``native/object.cpp``) that AOTInductor links into the package;
  the wrapper gets :func:`linked_block`, the interface and a glue that calls it. Where
  that object cannot be linked (see ``native_object.linkable``), the parts the level
  needs, joined into one block (:func:`inline_block`). Either way the package needs
  nothing of aoti_debug where it runs.

The runtime reads ``AOTI_DEBUG_DIR``, ``AOTI_DEBUG_MAX_BYTES``, ``AOTI_DEBUG_RUN_ID``,
``AOTI_DEBUG_NAMES_ARGS``, ``RANK`` and ``WORLD_SIZE`` when the model runs, exactly as
the Python runtime does (config.py is the only Python reader of the environment; the
C++ runtime is the C++ one).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re

from .emit import cpp_string

#: The namespace generated call sites spell (``::aoti_debug_rt_1::launch(...)``): an
#: alias, defined in interface.h, of the hashed namespace the runtime's symbols carry.
NAMESPACE = "aoti_debug_rt_1"
#: The guard of the block in a wrapper's header (AOTI's constant-folding graph splices
#: in its parent's header: the block must define things once).
GUARD = "AOTI_DEBUG_RUNTIME_V1"

NATIVE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native")
CONSTANTS_FILE = "constants.h"

#: Runtime parts in dependency order, each with what it is needed for: ``names`` (every
#: level), ``records`` (stats, print, save) or ``files`` (save).
PARTS: tuple[tuple[str, str], ...] = (
    ("json.h", "names"),
    ("text.h", "names"),
    ("state.h", "names"),
    ("env.h", "names"),
    ("graph.h", "names"),
    ("dtypes.h", "names"),
    ("names.h", "names"),
    ("threads.h", "records"),
    ("stats.h", "records"),
    ("host_tensor.h", "records"),
    ("device_driver.h", "records"),
    ("device_ring.h", "records"),
    ("device_stats.h", "records"),
    ("device_launch.h", "records"),
    ("own_dir.h", "records"),
    ("sources.h", "records"),
    ("run_json.h", "records"),
    ("crc.h", "files"),
    ("pt_writer.h", "files"),
    ("manifest.h", "records"),
    ("records.h", "records"),
    ("flight.h", "records"),
    ("flight_hooks.h", "records"),
    ("run_dir.h", "records"),
    ("entry.h", "names"),
)
INTERFACE = "interface.h"
#: Built into the JIT library only (library.cpp): the Python runtime's CPU stats and records,
#: and its writer of device-ring records (runtime/ring_records.py).
CPU_SUMMARY = "cpu_summary.h"
CPU_RECORDS = "cpu_records.h"
#: ... and, where Python's headers are, the Python runtime's CPU side as one C function.
CPU_VALUES = "cpu_values.h"
#: ... and the Python runtime's planned CUDA side as one C function.
RING_SIDE = "ring_side.h"
#: ... and the hooks of its express launches (both sides planned) as one C function.
RING_EXPRESS = "ring_express.h"
RING_RECORDS = "ring_records.h"
GLUE_CUDA = "glue_cuda.h"
GLUE_INLINE = "glue_inline.h"
GLUE_LIBRARY = "glue_library.h"
GLUE_LINKED = "glue_linked.h"
LIBRARY_SOURCE = "library.cpp"
OBJECT_SOURCE = "object.cpp"
#: The macro that names, in a wrapper, the runtime object its package links (a path
#: relative to aoti_debug's folder in Inductor's cache): what the link step looks for.
LINK_MACRO = "AOTI_DEBUG_LINKED_OBJECT"
#: ... and the object holding its stats kernels (codegen/device_stats.py), where it has one.
LINK_STATS_MACRO = "AOTI_DEBUG_LINKED_STATS"
_LINK_RE = re.compile(rf'^#define (?:{LINK_MACRO}|{LINK_STATS_MACRO}) "([\w.+/-]+)"$', re.M)


def level_codes() -> dict[str, int]:
    """Level name -> the number the C++ runtime switches on (config.LEVELS)."""
    from ..config import LEVELS

    return {name: number for number, name in LEVELS.items() if name != "off"}


LEVEL_CODES = level_codes()


def features(level: str | None) -> dict[str, bool]:
    """What a runtime built for ``level`` needs (None: every level, the JIT library).

    Tensor files at every level that records: the flight recorder's trigger
    (``AOTI_DEBUG_TRIGGER``, read when the model runs) saves the tensors of the launch
    where NaN/Inf was born at level ``stats`` and ``print`` too."""
    return {"records": level != "names", "files": level != "names"}


def parts_for(level: str | None) -> list[str]:
    """The parts a runtime for ``level`` is joined from, in order."""
    need = features(level)
    return [name for name, what in PARTS if what == "names" or need[what]]


def _read(name: str) -> str:
    with open(os.path.join(NATIVE_DIR, name), encoding="utf-8") as f:
        return f.read()


def _cpp_name(name: str) -> str:
    """``kernel_call`` -> ``kKernelCall``: a Python name as a C++ constant."""
    return "k" + "".join(part.capitalize() for part in name.split("_"))


def level_enum_name(level: str) -> str:
    """The enumerator of ``level`` in the generated ``schema::Level`` (``kStats``)."""
    return _cpp_name(level)


def _constants_body() -> str:
    """constants.h without its namespace lines (what the namespace hash covers)."""
    from .. import config
    from ..format import provenance, schema, writer
    from ..runtime import flight

    def names(title: str, space: str, fields) -> list[str]:
        out = [f"// {title}", f"namespace {space} {{"]
        out += [f"constexpr const char* {_cpp_name(f)} = {cpp_string(f)};" for f in fields]
        return out + [f"}}  // namespace {space}"]

    if flight.SIGNALS != ("SIGTERM", "SIGINT"):
        raise AssertionError(f"the C++ runtime's flight recorder (native/flight_hooks.h) handles SIGTERM and SIGINT: "
                             f"{flight.SIGNALS}")
    if config.TRIGGERS != ("nonfinite",):
        raise AssertionError(f"the C++ runtime's flight recorder (native/flight.h) knows the trigger nonfinite only: "
                             f"{config.TRIGGERS}")
    levels = sorted(config.LEVELS.items())
    if [n for n, _ in levels] != list(range(len(levels))):
        raise AssertionError(f"config.LEVELS must number its levels 0..n-1: {config.LEVELS}")
    lines = [
        "namespace schema {",
        f"constexpr int kFormatVersion = {int(schema.FORMAT_VERSION)};",
        "// config.LEVELS",
        "enum Level : int { " + ", ".join(f"{_cpp_name(name)} = {n}" for n, name in levels) + " };",
        "inline const char* level_name(int level) {",
        "  static const char* const names[] = {" + ", ".join(cpp_string(name) for _, name in levels) + "};",
        f"  return level >= 0 && level < {len(levels)} ? names[level] : {cpp_string(config.LEVELS[0])};",
        "}",
        "// format.schema / format.writer file layout, config defaults",
        f"constexpr const char* kRunFile = {cpp_string(schema.RUN_FILE)};",
        f"constexpr const char* kManifestFile = {cpp_string(schema.MANIFEST_FILE)};",
        f"constexpr const char* kSitesFile = {cpp_string(provenance.SITES_FILE)};",
        f"constexpr const char* kTensorDir = {cpp_string(schema.TENSOR_DIR)};",
        f"constexpr const char* kOwnerFile = {cpp_string(writer.OWNER_FILE)};",
        f"constexpr int kMaxClaims = {int(writer.MAX_CLAIMS)};",
        f"constexpr int kRunIdLimit = {int(writer.RUN_ID_LIMIT)};",
        f"constexpr const char* kDefaultDumpDir = {cpp_string(config.DEFAULT_DIR)};",
        f"constexpr const char* kInputsKernel = {cpp_string(schema.INPUTS_KERNEL)};",
        "// config.ENV_*: what the runtime reads when the model runs",
        "namespace env {",
        f"constexpr const char* kDir = {cpp_string(config.ENV_DIR)};",
        f"constexpr const char* kRunId = {cpp_string(config.ENV_RUN_ID)};",
        f"constexpr const char* kMaxBytes = {cpp_string(config.ENV_MAX_BYTES)};",
        f"constexpr const char* kNamesArgs = {cpp_string(config.ENV_NAMES_ARGS)};",
        f"constexpr const char* kSaveLaunches = {cpp_string(config.ENV_SAVE_LAUNCHES)};",
        f"constexpr const char* kRing = {cpp_string(config.ENV_RING)};",
        f"constexpr const char* kTrigger = {cpp_string(config.ENV_TRIGGER)};",
        f"constexpr const char* kFusedStats = {cpp_string(config.ENV_FUSED_STATS)};",
        f"constexpr const char* kTraceDevice = {cpp_string(config.ENV_TRACE_DEVICE)};",
        "}  // namespace env",
        "// runtime.flight: the flight recorder's limits, and config.TRIGGERS (flight.h knows nonfinite)",
        "namespace flight {",
        f"constexpr long long kMaxRing = {int(config.MAX_RING)};",
        f"constexpr long long kMaxRecords = {int(flight.MAX_RING_RECORDS)};",
        f"constexpr int kWatchWindow = {int(flight._WATCH_WINDOW)};",
        f"constexpr int kMaxAhead = {int(flight._MAX_AHEAD)};",
        f"constexpr int kMaxDumpsListed = {int(flight._MAX_DUMPS_LISTED)};",
        f"constexpr const char* kNonfinite = {cpp_string(config.TRIGGERS[0])};",
        "}  // namespace flight",
        *names("format.schema.Record: the keys of a manifest record", "rec",
               [f.name for f in dataclasses.fields(schema.Record) if f.name not in schema.REFERENCE_ONLY_FIELDS]),
        *names("format.schema.STAT_KEYS", "stat", schema.STAT_KEYS),
        *names("format.schema.RunInfo: the keys of run.json", "info",
               [f.name for f in dataclasses.fields(schema.RunInfo)]),
        "}  // namespace schema",
    ]
    return "\n".join(lines) + "\n"


def content_namespace(native_dir: str = NATIVE_DIR) -> str:
    """``aoti_debug_<hash>``: a hash of the generated constants and of every source in
    ``native_dir``. Anything that could change a layout or a meaning changes it, so that
    runtimes built from other sources never share process-wide state or call each other."""
    digest = hashlib.sha256(_constants_body().encode())
    for name in sorted(os.listdir(native_dir)):
        if name.endswith((".h", ".cpp")):
            with open(os.path.join(native_dir, name), "rb") as f:
                digest.update(b"\0" + name.encode() + b"\0" + f.read())
    return "aoti_debug_" + digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def abi_namespace() -> str:
    """The namespace of this installation's runtime (:func:`content_namespace`)."""
    return content_namespace()


def constants_header() -> str:
    """The generated ``constants.h``."""
    ns = abi_namespace()
    return "\n".join([
        "// Generated by aoti_debug/codegen/cpp_runtime.py from config.py and format/: do not edit.",
        "#ifndef AOTI_DEBUG_PART_CONSTANTS_H",
        "#define AOTI_DEBUG_PART_CONSTANTS_H",
        f"#define AOTI_DEBUG_NS {ns}",
        f"#define AOTI_DEBUG_NS_NAME {cpp_string(ns)}",
        "namespace AOTI_DEBUG_NS {",
        _constants_body() + "}  // namespace AOTI_DEBUG_NS",
        "#endif  // AOTI_DEBUG_PART_CONSTANTS_H",
        "",
    ])


def write_constants(folder: str) -> str:
    """Write constants.h into ``folder`` (for builds with ``-I folder``); its path."""
    path = os.path.join(folder, CONSTANTS_FILE)
    with open(path, "w", encoding="utf-8") as f:
        f.write(constants_header())
    return path


# ---------------------------------------------------------------------------- joining parts
_GUARD_RE = re.compile(r"^#(ifndef|define|endif)\s*(//\s*)?AOTI_DEBUG_PART_\w+_H\b.*$")
_LOCAL_INCLUDE_RE = re.compile(r'^#include "[\w.]+"\s*$')
_SYSTEM_INCLUDE_RE = re.compile(r"^#include <[\w./]+>\s*$")


def _body(name: str) -> tuple[list[str], list[str]]:
    """A part as (unconditional system includes, the rest): its include guard and its
    includes of other parts dropped (the parts are joined in dependency order)."""
    includes, body, depth = [], [], 0
    for line in _read(name).splitlines():
        if _GUARD_RE.match(line) or _LOCAL_INCLUDE_RE.match(line):
            continue
        if line.startswith("#if"):
            depth += 1
        elif line.startswith("#endif"):
            depth -= 1
        if depth == 0 and _SYSTEM_INCLUDE_RE.match(line):
            includes.append(line)
        else:
            body.append(line)
    return includes, body


def _join(names: list[str]) -> tuple[list[str], list[str]]:
    includes: list[str] = []
    body: list[str] = []
    for name in names:
        inc, text = _body(name)
        includes += [x for x in inc if x not in includes]
        body += [f"// ---- {name}", *text]
    return includes, body


def _versions() -> list[str]:
    from .. import __version__

    try:
        import torch

        torch_version = str(torch.__version__)
    except ImportError:  # pragma: no cover
        torch_version = ""
    return [f"#define AOTI_DEBUG_PKG_VERSION {cpp_string(__version__)}",
            f"#define AOTI_DEBUG_TORCH_VERSION {cpp_string(torch_version)}"]


def runtime_source(level: str | None = None) -> str:
    """The runtime for ``level`` (None: every level) as one block: the parts joined in
    order, the interface first and the inline glue last, ready to follow the AOTI shim
    header in a translation unit."""
    need = features(level)
    head_inc, head = _join([INTERFACE])
    part_inc, parts = _join(parts_for(level))
    glue_inc, glue = _join([GLUE_CUDA, GLUE_INLINE])
    out = [
        f"#define AOTI_DEBUG_WITH_RECORDS {int(need['records'])}",
        f"#define AOTI_DEBUG_WITH_FILES {int(need['files'])}",
        *constants_header().splitlines(),
        *head_inc, *head,
        "#ifndef _WIN32  // POSIX only; on Windows the entry points do nothing (one warning)",
        *[x for x in part_inc if x not in head_inc],
        "#if defined(__GNUC__) && !defined(__clang__)",
        "// AOTI compiles wrappers at -O1 with -fno-tree-loop-vectorize; the stats loops run",
        "// over every recorded byte and want the full optimiser.",
        "#pragma GCC push_options",
        '#pragma GCC optimize("O3")',
        "#endif",
        "#ifdef __GNUC__  // a level's parts leave some helpers of shared parts unused",
        "#pragma GCC diagnostic push",
        '#pragma GCC diagnostic ignored "-Wunused-function"',
        "#endif",
        *parts,
        "#ifdef __GNUC__",
        "#pragma GCC diagnostic pop",
        "#endif",
        "#if defined(__GNUC__) && !defined(__clang__)",
        "#pragma GCC pop_options",
        "#endif",
        "#endif  // _WIN32",
        *[x for x in glue_inc if x not in head_inc and x not in part_inc], *glue,
    ]
    return "\n".join(out) + "\n"


def _block(device: str, title: str, lines: list[str]) -> str:
    head = [f"// ---- aoti_debug instrumentation: {title} ----", f"#ifndef {GUARD}", f"#define {GUARD} 1"]
    if device == "cuda":
        head += ["#ifndef AOTI_DEBUG_CUDA", "#define AOTI_DEBUG_CUDA 1", "#endif"]
    text = "\n".join(head + lines + [f"#endif  // {GUARD}", "// ---- end of aoti_debug ----", ""])
    # The JIT cpp_wrapper puts the C++ inside a Python r\"\"\"...\"\"\" literal.
    if '"""' in text:
        raise AssertionError("the C++ runtime must not contain three double quotes in a row")
    return text


def inline_block(device: str, level: str) -> str:
    """What an AOTInductor wrapper's header gets: the runtime for ``level``, compiled into
    the package (nothing of aoti_debug is needed where it runs)."""
    title = f"runtime for level {level} ({', '.join(parts_for(level))})"
    return _block(device, title, _versions() + runtime_source(level).splitlines())


def _object_name(name: str) -> str:
    if not _LINK_RE.fullmatch(f'#define {LINK_MACRO} "{name}"') or ".." in name.split("/"):
        raise ValueError(f"not a runtime object name: {name!r}")
    return name


def linked_block(device: str, level: str, name: str, stats: str | None = None) -> str:
    """What an AOTInductor wrapper's header gets when its package links the runtime object
    ``name`` (built for ``level``'s features): the interface and a glue that calls it.
    ``stats``: the object holding the stats kernels (``device_stats.object_name``), linked
    too, whose symbol the glue lends the runtime."""
    from .device_stats import SYMBOL

    inc, body = _join([INTERFACE, GLUE_CUDA, GLUE_LINKED])
    lines = [f"#define {LINK_MACRO} {cpp_string(_object_name(name))}"]
    if stats:
        lines += [f"#define {LINK_STATS_MACRO} {cpp_string(_object_name(stats))}",
                  f"#define AOTI_DEBUG_STATS_PACK_SYMBOL {SYMBOL}"]
    lines += [*constants_header().splitlines(), *inc, *body]
    return _block(device, f"runtime for level {level}, linked: {name}", lines)


def linked_objects(code: str) -> list[str]:
    """The runtime objects that the wrapper ``code`` needs linked (:func:`linked_block`),
    each once (a constant-folding graph splices its parent's header in again)."""
    return list(dict.fromkeys(m.group(1) for m in _LINK_RE.finditer(code)))


def library_block(device: str, library: str, stats: str = "") -> str:
    """What a JIT cpp_wrapper's header gets: the interface and a glue that loads the
    runtime library at ``library`` ("" when it could not be built: the model then runs
    uninstrumented, with one warning). ``stats``: the file holding the stats kernels
    (``device_stats.pack_path``), or "" (CUDA tensors' stats then on the host)."""
    inc, body = _join([INTERFACE, GLUE_CUDA, GLUE_LIBRARY])
    lines = [f"#define AOTI_DEBUG_LIBRARY {cpp_string(library)}"]
    if stats:
        lines.append(f"#define AOTI_DEBUG_STATS_PACK_FILE {cpp_string(stats)}")
    lines += [*constants_header().splitlines(), *inc, *body]
    return _block(device, "runtime library " + (library or "(not built)"), lines)
