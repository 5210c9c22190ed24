"""The result of ``aoti-debug locate``: which kernel faulted, where it lives, what it was given.

A :class:`Verdict` is truthy when the command ran clean (like a passing comparison);
``exit_code`` is the CLI's (0 clean, 1 located, 3 a fault that could not be attributed).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from ..printable import printable
from .sources import Source
from .trace import LaunchState

Status = Literal["clean", "located", "unattributed"]
#: How the faulting launch failed.
FaultKind = Literal["device-error", "signal", "exception", "hang"]

EXIT_CODES: dict[str, int] = {"clean": 0, "located": 1, "unattributed": 3}


@dataclasses.dataclass
class SanitizerReport:
    """The first error compute-sanitizer reported when the reproduction ran under it."""

    command: list[str]
    report: list[str] = dataclasses.field(default_factory=list)
    """Its first error block, as printed (``=========`` prefixes removed)."""
    kernel: str | None = None
    """The kernel the report names, where it names one."""
    note: str | None = None
    """Why there is no report (not on PATH, no error found, timed out)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "SanitizerReport":
        return cls(**{k: v for k, v in d.items() if k in {f.name for f in dataclasses.fields(cls)}})


@dataclasses.dataclass
class Verdict:
    """What ``locate`` found out about one run of a command."""

    status: Status
    command: list[str]
    kind: FaultKind | None = None
    launch: LaunchState | None = None
    """The faulting launch (kernel, graph, call, and the metadata of its args where printed)."""
    completed: int = 0
    """Launches that completed before the fault (or in the whole run, when clean)."""
    started: int = 0
    error: str | None = None
    """The failure as reported: the device's message, the signal, the exception line."""
    returncode: int | None = None
    signal: str | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    wrapper: str | None = None
    """``python`` or ``cpp`` (C++ wrapper / AOTInductor), as the runtime reported it."""
    source: Source | None = None
    unfinished: list[LaunchState] = dataclasses.field(default_factory=list)
    """Other launches that started and never completed (the faulting one was called from
    inside them, or they raised and the command carried on)."""
    last_completed: LaunchState | None = None
    reason: str | None = None
    """Why the fault could not be attributed (status ``unattributed``)."""
    notes: list[str] = dataclasses.field(default_factory=list)
    output_tail: list[str] = dataclasses.field(default_factory=list)
    """The last lines the command printed (unattributed faults only)."""
    sanitizer: SanitizerReport | None = None

    # -- protocol ------------------------------------------------------------------------
    def __bool__(self) -> bool:
        return self.status == "clean"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    @property
    def kernel(self) -> str | None:
        return self.launch.kernel if self.launch is not None else None

    def __str__(self) -> str:
        if self.status == "clean":
            return f"clean: the command ran without a fault ({self.completed} instrumented launches); nothing to locate"
        if self.status == "unattributed":
            return f"unattributed fault: {self.error or 'the command failed'}: {self.reason}"
        assert self.launch is not None
        how = {
            "device-error": "failed its post-launch sync",
            "signal": f"was running when the process died of {self.signal}",
            "exception": "raised and never completed",
            "hang": "was still running when the command was stopped at the timeout",
        }.get(self.kind or "", "never completed")
        done = f"{self.completed} completed launch" + ("" if self.completed == 1 else "es")
        return f"located: launch {self.launch.launch} {self.launch.kernel} ({self.launch.graph or '?'}) {how}, after {done}"

    def headline(self) -> str:
        """The first line of :meth:`render` (the rows below it carry the details)."""
        if self.status == "unattributed":
            return f"a fault that could not be attributed: {self.error or 'the command failed'}"
        return str(self)

    # -- persistence ---------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["exit_code"] = self.exit_code
        d["summary"] = str(self)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Verdict":
        fields = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in fields}
        for key in ("launch", "last_completed"):
            if kw.get(key) is not None:
                kw[key] = LaunchState.from_dict(kw[key])
        kw["unfinished"] = [LaunchState.from_dict(x) for x in kw.get("unfinished") or []]
        if kw.get("source") is not None:
            kw["source"] = Source.from_dict(kw["source"])
        if kw.get("sanitizer") is not None:
            kw["sanitizer"] = SanitizerReport.from_dict(kw["sanitizer"])
        return cls(**kw)

    # -- rendering -----------------------------------------------------------------------
    def render(self) -> str:
        """The readable multi-line verdict the CLI prints (control characters escaped)."""
        out = [f"aoti-debug locate: {self.headline()}"]

        def row(label: str, value: object) -> None:
            if value not in (None, "", []):
                out.append(f"  {label:<12} {value}")

        if self.status == "located":
            la = self.launch
            assert la is not None
            row("kernel", la.kernel)
            row("module", la.module)
            row("user code", la.user_line)
            row("graph", f"{la.graph or '?'} (call {la.call} of this kernel in it)")
            row("launch", f"{la.launch} (launches started: {self.started}; completed before it: {self.completed})")
            row("error", self.error)
            if self.signal and (self.error or "").find(self.signal) < 0:
                row("signal", self.signal)
            row("wrapper", self.wrapper)
            src = self.source
            if src is not None:
                where = src.where
                if where and src.found_by == "traceback":
                    where += "  (from the Python traceback)"
                row("file", where)
                row("code", src.code)
                if src.other_lines:
                    row("ambiguous", f"chosen by its call count ({la.call}); the kernel is also launched at line(s) "
                        + ", ".join(map(str, src.other_lines[:8])))
                row("fused from", ", ".join(src.nodes))
                row("aten ops", ", ".join(src.aten))
                if src.user_function:
                    row("user kernel", src.user_function + (f"  ({src.user_source})" if src.user_source else ""))
                elif src.provenance and not (src.nodes or src.aten):
                    row("made from", src.provenance)
                row("definition", src.definition)
                row("kernel file", src.kernel_file)
            else:
                row("file", "unknown: the runtime named no file and no traceback reached the wrapper")
            if la.args:
                out.append("  args at this launch:")
                for a in la.args:
                    out.append("    " + format_arg(a))
            for u in self.unfinished[:5]:
                row("unfinished", f"launch {u.launch} {u.kernel} ({u.graph}) also started and never completed")
        else:
            row("why", self.reason)
            if self.signal and (self.error or "").find(self.signal) < 0:
                row("signal", self.signal)
            row("returncode", self.returncode)
            if self.last_completed is not None:
                lc = self.last_completed
                row("last done", f"launch {lc.launch} {lc.kernel} ({lc.graph})")
            row("launches", f"started {self.started}, completed {self.completed}" if self.started else None)
            if self.output_tail:
                out.append("  last output:")
                out.extend("    " + t for t in self.output_tail)
        if self.sanitizer is not None:
            s = self.sanitizer
            if s.report:
                out.append("  compute-sanitizer (first error):")
                out.extend("    " + t for t in s.report)
                if s.kernel and self.kernel and s.kernel.split("+")[0] != self.kernel:
                    out.append(f"    note: the sanitizer names {s.kernel}")
            else:
                row("sanitizer", s.note)
        for n in self.notes:
            row("note", n)
        # Kernel names, module paths, source lines and CMD's output may hold anything:
        # each line's control characters are shown as escapes (a value's newline too).
        return "\n".join(map(printable, out))


def format_arg(a: dict) -> str:
    """``buf0 (input) float32[8, 4] stride [4, 1] offset 0 cpu`` for one arg's metadata."""
    name, role, kind = a.get("name", "?"), a.get("role", "?"), a.get("kind", "?")
    if kind == "tensor":
        shape = ", ".join(map(str, a.get("shape") or []))
        stride = ", ".join(map(str, a.get("stride") or []))
        text = f"{name} ({role}) {a.get('dtype', '?')}[{shape}] stride [{stride}]"
        if a.get("offset"):
            text += f" offset {a['offset']}"
        text += f" {a.get('device', '?')}"
        if a.get("ptr"):
            text += f" ptr {a['ptr']}"
        if a.get("nbytes") is not None:
            text += f" storage {a['nbytes']} B"
        return text
    if kind in ("scalar", "symint"):
        return f"{name} ({role}) {kind} = {a.get('value', '?')}"
    return f"{name} ({role}) {kind}" + (f" {a['type']}" if a.get("type") else "")
