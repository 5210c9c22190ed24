"""Settings of aoti_debug. This is the only module that reads environment variables.

Two kinds of settings exist because they are read at two different times:

* :class:`CompileSettings` decide the code Inductor generates (level, kernel
  filter, sync, phases). They are fixed when a graph is compiled and are part of
  every compile-cache key.
* :class:`RunSettings` are read by the runtime when a compiled graph first
  records something (dump directory, byte budget, run id), so one compiled
  artifact can dump somewhere new on every run.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
from typing import Callable, Literal, Mapping

from .errors import ConfigError

LevelName = Literal["off", "save", "print", "names", "stats"]
Phase = Literal["before", "after"]

#: PyTorch's numbering (0-3) plus our level 4.
LEVELS: dict[int, LevelName] = {0: "off", 1: "save", 2: "print", 3: "names", 4: "stats"}
LEVEL_NUMBERS: dict[str, int] = {name: num for num, name in LEVELS.items()}

ENV_LEVEL = "AOTI_DEBUG_LEVEL"
ENV_KERNELS = "AOTI_DEBUG_KERNELS"
ENV_DIR = "AOTI_DEBUG_DIR"
ENV_SYNC = "AOTI_DEBUG_SYNC"
ENV_PHASES = "AOTI_DEBUG_PHASES"
ENV_MAX_BYTES = "AOTI_DEBUG_MAX_BYTES"
ENV_RUN_ID = "AOTI_DEBUG_RUN_ID"
ENV_NAMES_ARGS = "AOTI_DEBUG_NAMES_ARGS"
ENV_REFERENCE = "AOTI_DEBUG_REFERENCE"
ENV_SAVE_LAUNCHES = "AOTI_DEBUG_SAVE_LAUNCHES"
ENV_RING = "AOTI_DEBUG_RING"
ENV_TRIGGER = "AOTI_DEBUG_TRIGGER"
#: ``0``: record every input of a launch from its own values, never from the record of
#: the launch that wrote it (``format.protocol.SiteArg.reuse``): for a write no launch
#: owns (a kernel writing out of bounds) that shows between the two. Default on.
ENV_REUSE = "AOTI_DEBUG_REUSE"
#: ``0``: stats of CUDA tensors without the fused Triton kernel (read when the model runs:
#: the Python runtime's torch-op path, the C++ runtime's host copies). For comparisons.
ENV_FUSED_STATS = "AOTI_DEBUG_FUSED_STATS"
#: ``background``: a stats-kernel variant not compiled yet is compiled on background
#: threads while its tensors' stats take the torch-op path (Python runtime, CUDA), so that a
#: machine's first instrumented call does not wait for Triton's compiles, one after another;
#: ``inline`` (the default): compiled at its first launch, on the model's thread.
ENV_STATS_COMPILE = "AOTI_DEBUG_STATS_COMPILE"
STATS_COMPILE_MODES = ("inline", "background")
#: ``1``: the build of the CUDA stats kernels for the C++ runtime (codegen/device_stats.py:
#: lock, worker processes, their phases) is traced on stderr, with times. For diagnosis.
ENV_TRACE_BUILD = "AOTI_DEBUG_TRACE_BUILD"
#: ``1``: the C++ runtime traces each CUDA driver call of its stats on the device
#: (native/device_stats.h) on stderr, read when the model first records a CUDA tensor.
ENV_TRACE_DEVICE = "AOTI_DEBUG_TRACE_DEVICE"
#: ``AOTI_DEBUG_TRIGGER`` values: ``nonfinite`` fires at the first NaN/Inf birth (runtime/flight.py).
TRIGGERS = ("nonfinite",)
#: The largest ``AOTI_DEBUG_RING``: the ring's memory is bounded by its records anyway
#: (``runtime.flight.MAX_RING_RECORDS``); more graph calls than this is a typo.
MAX_RING = 1_000_000
#: ``AOTI_DEBUG_REFERENCE`` values: run compiled functions eagerly in the model's dtypes,
#: or in float64 beside them (``aoti_debug.reference``).
REFERENCE_MODES = ("eager", "fp64")
#: PyTorch's own switches, honoured when ours are unset.
ENV_TORCH_LEVEL = "AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER"
ENV_TORCH_KERNELS = "AOT_INDUCTOR_FILTERED_KERNELS_TO_PRINT"

DEFAULT_DIR = "aoti_debug_dump"


def parse_level(value: str | int | None) -> LevelName:
    """Accept ``0..4`` or a level name (any case); ``None``/empty means ``off``."""
    if value is None:
        return "off"
    text = str(value).strip().lower()
    if text == "":
        return "off"
    if text.isdigit() and int(text) in LEVELS:
        return LEVELS[int(text)]
    if text in LEVEL_NUMBERS:
        return text  # type: ignore[return-value]
    choices = ", ".join(f"{n}/{name}" for n, name in LEVELS.items())
    raise ConfigError(f"unknown aoti_debug level {value!r}: use one of {choices}")


def parse_phases(value: str | tuple[str, ...] | None) -> tuple[Phase, ...]:
    if value is None or value == "":
        return ("before", "after")
    items = value.split(",") if isinstance(value, str) else list(value)
    phases = []
    for item in items:
        item = item.strip().lower()
        if item not in ("before", "after"):
            raise ConfigError(f"unknown phase {item!r} in {ENV_PHASES}: use before, after or before,after")
        if item not in phases:
            phases.append(item)
    if not phases:
        raise ConfigError(f"{ENV_PHASES} names no phase: use before, after or before,after")
    return tuple(sorted(phases, key=("before", "after").index))  # type: ignore[arg-type]


def parse_bool(name: str, value: str | None) -> bool:
    if value is None:
        return False
    text = value.strip().lower()
    if text in ("", "0", "false", "no", "off"):
        return False
    if text in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"{name}={value!r} is not a boolean: use 1 or 0")


def trace_build(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``AOTI_DEBUG_TRACE_BUILD`` asks for the stats kernels' build phases on
    stderr (a value that is no boolean counts as on: it was set to see them)."""
    value = (os.environ if env is None else env).get(ENV_TRACE_BUILD)
    try:
        return parse_bool(ENV_TRACE_BUILD, value)
    except ConfigError:
        return True


def unclosed_bracket(pattern: str) -> bool:
    """True when a ``[`` of a glob has no closing ``]``.

    ``fnmatch`` silently matches such a ``[`` literally, so ``AOTI_DEBUG_KERNELS='['``
    used to select nothing without a word. The scan follows ``fnmatch.translate``: a
    ``]`` right after ``[`` or ``[!`` belongs to the set (``[]]`` is a valid set).
    """
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            j = pattern.find("]", j)
            if j < 0:
                return True
            i = j + 1
    return False


@dataclasses.dataclass(frozen=True)
class KernelFilter:
    """Case-insensitive glob patterns on kernel names; ``!pat`` excludes.

    With no include pattern every kernel is included unless excluded. A launch
    matches when its raw kernel name or its canonical op name matches.
    """

    patterns: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str | None, name: str | None = None) -> "KernelFilter":
        """Parse ``a*,!b*``; ``name`` (an environment variable) is named in errors.

        Raises:
            ConfigError: an empty exclude (``!``) or a pattern with an unclosed ``[``.
        """
        if not text:
            return cls(())
        where = f"{name}={text!r}" if name else f"kernel filter {text!r}"
        pats = tuple(p.strip().lower() for p in text.split(",") if p.strip())
        for p in pats:
            if p in ("!",):
                raise ConfigError(f"{where}: empty exclude pattern '!'")
            if unclosed_bracket(p):
                raise ConfigError(f"{where}: pattern {p!r} has an unclosed '[' (write [[] to match a literal '[')")
        return cls(pats)

    @property
    def includes(self) -> tuple[str, ...]:
        return tuple(p for p in self.patterns if not p.startswith("!"))

    @property
    def excludes(self) -> tuple[str, ...]:
        return tuple(p[1:] for p in self.patterns if p.startswith("!"))

    def matches(self, *names: str) -> bool:
        lowered = [n.lower() for n in names if n]
        if any(fnmatch.fnmatchcase(n, p) for n in lowered for p in self.excludes):
            return False
        if not self.includes:
            return True
        return any(fnmatch.fnmatchcase(n, p) for n in lowered for p in self.includes)

    def __str__(self) -> str:
        return ",".join(self.patterns)


@dataclasses.dataclass(frozen=True)
class CompileSettings:
    """What the generated code does; fixed at compile time."""

    level: LevelName = "off"
    """Instrumentation level (DESIGN.md "Levels")."""
    kernels: KernelFilter = KernelFilter()
    """Launches that do not match get no code at all."""
    sync: bool = False
    """Synchronise the device after every instrumented launch."""
    phases: tuple[Phase, ...] = ("before", "after")
    """Which sides of a launch are recorded (inputs before, outputs after)."""
    reuse: bool = True
    """At levels stats and print, an input that is an earlier instrumented launch's output,
    untouched since, takes that record's stats (``AOTI_DEBUG_REUSE``)."""

    @property
    def active(self) -> bool:
        return self.level != "off"

    def cache_tag(self) -> str:
        """A string that differs whenever the generated code would differ."""
        if not self.active:
            return ""
        tag = f"aoti_debug:{self.level}:{self.kernels}:{int(self.sync)}:{'+'.join(self.phases)}"
        return tag if self.reuse else tag + ":noreuse"

    def to_dict(self) -> dict:
        return {
            "level": self.level,
            "kernels": str(self.kernels),
            "sync": self.sync,
            "phases": list(self.phases),
            "reuse": self.reuse,
        }


def compile_settings_from_env(env: Mapping[str, str] | None = None) -> CompileSettings:
    """Read the compile-time switches; ours win over PyTorch's fallbacks."""
    env = os.environ if env is None else env
    raw_level = env.get(ENV_LEVEL)
    if raw_level in (None, ""):
        raw_level = env.get(ENV_TORCH_LEVEL)
    kernels_var = ENV_KERNELS
    raw_kernels = env.get(ENV_KERNELS)
    if raw_kernels in (None, ""):
        kernels_var, raw_kernels = ENV_TORCH_KERNELS, env.get(ENV_TORCH_KERNELS)
    return CompileSettings(
        level=parse_level(raw_level),
        kernels=KernelFilter.parse(raw_kernels, kernels_var),
        sync=parse_bool(ENV_SYNC, env.get(ENV_SYNC)),
        phases=parse_phases(env.get(ENV_PHASES)),
        reuse=parse_bool(ENV_REUSE, (env.get(ENV_REUSE) or "").strip() or "1"),  # unset or empty: on
    )


def make_compile_settings(
    level: str | int = "save",
    kernels: str | None = None,
    sync: bool = False,
    phases: str | tuple[str, ...] | None = None,
    reuse: bool = True,
) -> CompileSettings:
    """Settings from Python arguments (``aoti_debug.enable``)."""
    return CompileSettings(
        level=parse_level(level),
        kernels=KernelFilter.parse(kernels),
        sync=bool(sync),
        phases=parse_phases(phases),
        reuse=bool(reuse),
    )


def parse_reference(value: str | None) -> str | None:
    """``eager``, ``fp64`` or None (unset / empty): the reference mode asked for.

    Raises:
        ConfigError: any other value.
    """
    if value is None or not value.strip():
        return None
    mode = value.strip().lower()
    if mode not in REFERENCE_MODES:
        raise ConfigError(f"{ENV_REFERENCE}={value!r}: expected one of {', '.join(REFERENCE_MODES)}")
    return mode


def env_requests_instrumentation(env: Mapping[str, str] | None = None) -> bool:
    """Cheap check used at ``import torch`` time: is any level switch set non-zero?"""
    env = os.environ if env is None else env
    for name in (ENV_LEVEL, ENV_TORCH_LEVEL):
        value = env.get(name)
        if value is not None and value.strip().lower() not in ("", "0", "off"):
            return True
    return False


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """Where and how much a running model dumps; read at run time."""

    dump_dir: str = DEFAULT_DIR
    """Dump root; each process run gets ``<dump_dir>/<run-id>/``."""
    max_bytes: int | None = None
    """Stop writing tensor files after this many bytes (stats continue)."""
    run_id: str | None = None
    """Fixed run id as given (all ranks of one job must agree); default derived per process.
    The runtime sanitises it (``format.writer.clean_run_id``): a run never leaves ``dump_dir``."""
    rank: int = 0
    world_size: int = 1
    names_args: bool = False
    """Level ``names`` also prints each launch's wrapper line and its args' metadata
    (dtype, shape, stride, device: no values, no sync); ``aoti-debug locate`` sets it."""
    save_launches: tuple[tuple[int, int | None], ...] | None = None
    """Level ``save`` writes tensor files for these launches only (inclusive ranges; an
    open end runs to the last launch); the others get stats and checksums. None: all."""
    ring: int | None = None
    """Flight recorder: keep the records of the last ``ring`` graph calls in memory and
    write them at exit, on a fatal signal or when a trigger fires. None: every record is
    written as it comes."""
    trigger: Literal["nonfinite"] | None = None
    """``nonfinite``: at the first NaN/Inf birth, write the ring and save the tensors of
    the launch where it was born. None: no trigger."""

    def saves(self, launch: int) -> bool:
        """Whether level ``save`` writes the tensor files of ``launch``."""
        if self.save_launches is None:
            return True
        return any(lo <= launch and (hi is None or launch <= hi) for lo, hi in self.save_launches)


#: ``AOTI_DEBUG_MAX_BYTES``: a plain decimal number (``1000000``, ``1e9``, ``2.5e8``), no sign but
#: ``+``, no ``inf``/``nan``, no ``_``. The C++ runtime (``parse_max_bytes``) accepts exactly this.
_BYTES_RE = re.compile(r"\+?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
#: ``RANK``/``WORLD_SIZE``: up to 9 digits (``+`` allowed); the C++ runtime's ``env_int`` accepts exactly this.
_COUNT_RE = re.compile(r"\+?[0-9]{1,9}")
#: What both runtimes strip around a number (C's isspace; str.strip() would take more).
_SPACE = " \t\n\r\x0b\x0c"

_INT64_MAX = (1 << 63) - 1

Warn = Callable[[str, str], None]
"""``warn(key, message)``: how :func:`run_settings_from_env` reports a bad value it replaced."""


def parse_max_bytes(value: str | None) -> int | None:
    """``AOTI_DEBUG_MAX_BYTES`` as a byte count; None (no limit) when unset or empty.

    Raises:
        ConfigError: anything but a finite number >= 0 (``-5``, ``abc``, ``inf``, ``nan``).
    """
    text = (value or "").strip(_SPACE)
    if text == "":
        return None
    if not _BYTES_RE.fullmatch(text):
        raise ConfigError(f"{ENV_MAX_BYTES}={value!r} is not a number of bytes (a number >= 0 such as 1e9)")
    number = int(text) if text.lstrip("+").isdigit() else float(text)
    # Clamped to int64 as in the C++ runtime (1e400 parses as inf there and here).
    return int(min(number, _INT64_MAX))


_RANGE_RE = re.compile(r"([0-9]{1,18})(?:\.\.([0-9]{1,18})?)?")


def parse_launch_ranges(value: str | None) -> tuple[tuple[int, int | None], ...] | None:
    """``AOTI_DEBUG_SAVE_LAUNCHES``: ``12``, ``10..14``, ``40..`` or several, comma-separated,
    as inclusive ``(first, last)`` ranges (``last`` None: to the end); None when unset.

    Raises:
        ConfigError: anything else (``5..2``, ``a..b``, ``-3``).
    """
    text = (value or "").strip(_SPACE)
    if text == "":
        return None
    out = []
    for part in text.split(","):
        m = _RANGE_RE.fullmatch(part.strip(_SPACE))
        if m is None:
            raise ConfigError(f"{ENV_SAVE_LAUNCHES}={value!r}: {part.strip()!r} is not a launch number or a range "
                              f"such as 10..14 or 40..")
        lo = int(m[1])
        hi = int(m[2]) if m[2] else (None if m[0].endswith("..") else lo)
        if hi is not None and hi < lo:
            raise ConfigError(f"{ENV_SAVE_LAUNCHES}={value!r}: the range {part.strip()} ends before it starts")
        out.append((lo, hi))
    return tuple(out)


def parse_ring(value: str | None) -> int | None:
    """``AOTI_DEBUG_RING``: how many graph calls the flight recorder keeps; None (no ring)
    when unset, empty or ``0``.

    Raises:
        ConfigError: anything but a whole number from 0 to :data:`MAX_RING`.
    """
    text = (value or "").strip(_SPACE)
    if text == "":
        return None
    if not _COUNT_RE.fullmatch(text) or int(text) > MAX_RING:
        raise ConfigError(f"{ENV_RING}={value!r} is not a number of graph calls (a whole number from 1 to "
                          f"{MAX_RING}; 0 turns the ring off)")
    return int(text) or None


def parse_trigger(value: str | None) -> str | None:
    """``AOTI_DEBUG_TRIGGER``: ``nonfinite`` (any case) or None when unset or empty.

    Raises:
        ConfigError: any other value.
    """
    text = (value or "").strip(_SPACE).lower()
    if text == "":
        return None
    if text not in TRIGGERS:
        raise ConfigError(f"{ENV_TRIGGER}={value!r}: expected one of {', '.join(TRIGGERS)}")
    return text


def parse_count(name: str, value: str | None, default: int, minimum: int) -> int:
    """``RANK`` / ``WORLD_SIZE``: a whole number >= ``minimum``; ``default`` when unset or empty.

    Raises:
        ConfigError: anything else (``-1``, ``two``, ``1.5``).
    """
    text = (value or "").strip(_SPACE)
    if text == "":
        return default
    if not _COUNT_RE.fullmatch(text) or int(text) < minimum:
        raise ConfigError(f"{name}={value!r} is not a whole number >= {minimum}")
    return int(text)


def run_settings_from_env(env: Mapping[str, str] | None = None, warn: Warn | None = None) -> RunSettings:
    """Read the run-time variables.

    Args:
        warn: with it, a bad value is reported as ``warn(key, message)`` (the message
            names the variable and what is used instead) and only that value falls
            back to its default; without it, a bad value raises :class:`ConfigError`.
    """
    env = os.environ if env is None else env

    def checked(name: str, parse: Callable[[], object], default: object, instead: str) -> object:
        try:
            return parse()
        except ConfigError as e:
            if warn is None:
                raise
            warn(f"env-{name}", f"{e}; {instead}")
            return default

    max_bytes = checked(ENV_MAX_BYTES, lambda: parse_max_bytes(env.get(ENV_MAX_BYTES)), None, "no limit is used")
    rank = checked("RANK", lambda: parse_count("RANK", env.get("RANK"), 0, 0), 0, "rank 0 is used")
    world_size = checked("WORLD_SIZE", lambda: parse_count("WORLD_SIZE", env.get("WORLD_SIZE"), 1, 1), 1,
                         "world size 1 is used")
    names_args = checked(ENV_NAMES_ARGS, lambda: parse_bool(ENV_NAMES_ARGS, env.get(ENV_NAMES_ARGS)), False,
                         "0 is used")
    save_launches = checked(ENV_SAVE_LAUNCHES, lambda: parse_launch_ranges(env.get(ENV_SAVE_LAUNCHES)), None,
                            "every launch's tensors are saved")
    ring = checked(ENV_RING, lambda: parse_ring(env.get(ENV_RING)), None,
                   "the ring is off (every record is written as it comes)")
    trigger = checked(ENV_TRIGGER, lambda: parse_trigger(env.get(ENV_TRIGGER)), None, "no trigger is used")
    return RunSettings(
        dump_dir=_dump_dir_override or env.get(ENV_DIR) or DEFAULT_DIR,
        save_launches=save_launches,  # type: ignore[arg-type]
        ring=ring,  # type: ignore[arg-type]
        trigger=trigger,  # type: ignore[arg-type]
        max_bytes=max_bytes,  # type: ignore[arg-type]
        run_id=env.get(ENV_RUN_ID) or None,
        rank=rank,  # type: ignore[arg-type]
        world_size=world_size,  # type: ignore[arg-type]
        names_args=names_args,  # type: ignore[arg-type]
    )


def child_env(
    base: Mapping[str, str],
    level: str | int | None = None,
    kernels: str | None = None,
    dump_dir: str | None = None,
    sync: bool | None = None,
    phases: str | None = None,
    names_args: bool | None = None,
    reference: str | None = None,
    save_launches: str | None = None,
    ring: str | int | None = None,
    trigger: str | None = None,
    reuse: bool | None = None,
) -> dict[str, str]:
    """Environment for a child process (``aoti-debug run`` / ``locate``).

    Raises:
        ConfigError: a value the child's runtime would reject.
    """
    env = dict(base)
    if ring is not None:
        parse_ring(str(ring))
        env[ENV_RING] = str(ring)
    if trigger is not None:
        parse_trigger(trigger)
        env[ENV_TRIGGER] = trigger
    if save_launches is not None:
        parse_launch_ranges(save_launches)
        env[ENV_SAVE_LAUNCHES] = save_launches
    if reference is not None:
        env[ENV_REFERENCE] = parse_reference(reference) or ""
    if level is not None:
        env[ENV_LEVEL] = parse_level(level)
    if kernels is not None:
        KernelFilter.parse(kernels)
        env[ENV_KERNELS] = kernels
    if dump_dir is not None:
        env[ENV_DIR] = dump_dir
    if sync is not None:
        env[ENV_SYNC] = "1" if sync else "0"
    if phases is not None:
        parse_phases(phases)
        env[ENV_PHASES] = phases
    if names_args is not None:
        env[ENV_NAMES_ARGS] = "1" if names_args else "0"
    if reuse is not None:
        env[ENV_REUSE] = "1" if reuse else "0"
    return env


_dump_dir_override: str | None = None


_env_dir_before_override: str | None = None


def set_dump_dir(path: str | None) -> None:
    """Set the dump root for this process (``enable(dump_dir=...)``); None restores the env's.

    Mirrored into ``AOTI_DEBUG_DIR`` so that the C++ runtime of a cpp_wrapper module or an
    AOTInductor model loaded in this process, which reads the environment, follows it too.
    """
    global _dump_dir_override, _env_dir_before_override
    if path is not None and _dump_dir_override is None:
        _env_dir_before_override = os.environ.get(ENV_DIR)
    _dump_dir_override = path
    if path is not None:
        os.environ[ENV_DIR] = path
    elif _env_dir_before_override is None:
        os.environ.pop(ENV_DIR, None)
    else:
        os.environ[ENV_DIR] = _env_dir_before_override


def get_dump_dir_override() -> str | None:
    return _dump_dir_override
