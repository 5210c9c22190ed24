"""``aoti-debug doctor``: can this environment be instrumented, and will its C++ build
load? Versions, the C++ compiler Inductor would use, and every hook of the patch table.

The report is an object: truthy when every required part is there, ``exit_code`` 0 or
2, a one-line ``__str__``, ``to_dict()`` for JSON and ``render()`` for people.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field

from .patches import PatchStatus


@dataclass
class CompilerReport:
    """The C++ compiler Inductor would use (cpp_wrapper, AOTInductor, C++ CPU kernels)."""

    name: str | None
    """As configured (``g++``, ``$CXX``); None when none was found."""
    origin: str
    """Where the choice comes from (``CXX``, Inductor's default, ``--cxx``), or why none."""
    path: str | None = None
    version: str | None = None
    libstdcxx: str | None = None
    """What ``-print-file-name=libstdc++.so`` answered."""
    static_libstdcxx: bool = False
    suggestion: str | None = None
    """A compiler on PATH that links libstdc++ as a shared library."""

    @property
    def found(self) -> bool:
        return self.name is not None and self.version is not None

    def fix(self) -> str | None:
        """What to do when the compiler links libstdc++ statically."""
        if not self.static_libstdcxx:
            return None
        why = (f"{self.name} finds no libstdc++.so (only libstdc++.a): AOTI packages built with it "
               "crash on load (a second, static libstdc++ inside the .so)")
        if self.suggestion:
            return f"{why}; set CXX={self.suggestion}"
        return f"{why}; set CXX to a compiler that links libstdc++ as a shared library (none found on PATH)"


@dataclass
class DoctorReport:
    versions: dict
    compiler: CompilerReport
    patches: list[PatchStatus]
    installed: bool
    """Whether the patches are installed in this process (else: what install would do)."""
    checked_torch: tuple = field(default=())

    @property
    def missing(self) -> list[PatchStatus]:
        return [s for s in self.patches if s.status == "missing"]

    @property
    def problems(self) -> list[str]:
        """What makes aoti_debug unusable here (exit 2)."""
        out = []
        if self.missing:
            names = ", ".join(s.patch.name for s in self.missing)
            out.append(f"required Inductor hooks missing from torch {self.versions['torch']}: {names}; "
                       "aoti_debug.enable() raises UnsupportedTorchError and nothing is instrumented")
        if not self.compiler.found:
            out.append(f"no C++ compiler found ({self.compiler.origin}): cpp_wrapper=True, AOTInductor and "
                       "Inductor's C++ CPU kernels cannot be compiled (install g++ or set CXX)")
        return out

    @property
    def warnings(self) -> list[str]:
        out = []
        fix = self.compiler.fix()
        if fix:
            out.append(fix)
        version = self.versions.get("torch_version")
        if self.checked_torch and version and tuple(version) not in self.checked_torch:
            checked = ", ".join(f"{a}.{b}" for a, b in self.checked_torch)
            out.append(f"torch {self.versions['torch']} is not one aoti_debug is checked on ({checked}); "
                       "every required hook is there, but their behaviour may differ")
        return out

    @property
    def exit_code(self) -> int:
        return 2 if self.problems else 0

    def __bool__(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        if self.problems:
            return f"aoti-debug doctor: {len(self.problems)} problem(s): " + "; ".join(self.problems)
        extra = f" ({len(self.warnings)} warning(s))" if self.warnings else ""
        return f"aoti-debug doctor: OK{extra}"

    def to_dict(self) -> dict:
        c = self.compiler
        return {
            "ok": bool(self), "exit_code": self.exit_code, "problems": self.problems, "warnings": self.warnings,
            "versions": {k: v for k, v in self.versions.items() if k != "torch_version"},
            "compiler": {"name": c.name, "origin": c.origin, "path": c.path, "version": c.version,
                         "libstdcxx": c.libstdcxx, "static_libstdcxx": c.static_libstdcxx,
                         "suggestion": c.suggestion, "fix": c.fix()},
            "patches": {"installed": self.installed, "counts": self._counts(),
                        "entries": [s.to_dict() for s in self.patches]},
        }

    def _counts(self) -> dict:
        counts: dict = {}
        for s in self.patches:
            counts[s.status] = counts.get(s.status, 0) + 1
        return counts

    def render(self) -> str:
        """A readable table."""
        v, c = self.versions, self.compiler
        rows = [("python", v["python"]), ("platform", v["platform"]), ("torch", v["torch"]),
                ("cuda", v["cuda"] or "none (CPU build)"), ("triton", v["triton"] or "not installed"),
                ("aoti_debug", v["aoti_debug"])]
        if c.name is None:
            rows.append(("C++ compiler", f"NONE ({c.origin})"))
        else:
            where = f" = {c.path}" if c.path and c.path != c.name else ""
            rows.append(("C++ compiler", f"{c.name}{where} (from {c.origin})"))
            rows.append(("  version", c.version or "does not run"))
            if c.libstdcxx is not None:
                kind = "STATIC (no libstdc++.so)" if c.static_libstdcxx else "shared"
                rows.append(("  libstdc++", f"{kind}: {c.libstdcxx}"))
        width = max(len(k) for k, _ in rows)
        out = [f"{k:<{width}}  {val}" for k, val in rows]
        counts = ", ".join(f"{n} {k}" for k, n in sorted(self._counts().items()))
        state = "installed in this process" if self.installed else "not installed in this process"
        out += ["", f"Inductor hooks: {len(self.patches)} ({counts}; {state})"]
        owner = None
        width = max(len(s.patch.attr) for s in self.patches)
        for s in self.patches:
            p = s.patch
            if p.owner != owner:
                owner = p.owner
                out.append(f"  {p.module.removeprefix('torch._inductor.')}.{p.cls}")
            note = s.detail if s.status in ("missing", "skipped", "inherited") else p.reason.split("; in ")[0]
            if s.status in ("missing", "skipped"):
                note = f"{note} -- {p.reason}"
            note = note.replace("torch._inductor.", "")
            need = "required" if p.required else "optional"
            out.append(f"    {s.status:<9}  {need:<8}  {p.attr:<{width}}  {_clip(note, 90)}")
        out.append("")
        for w in self.warnings:
            out.append(f"WARNING: {w}")
        for p in self.problems:
            out.append(f"PROBLEM: {p}")
        if not self.problems:
            out.append("OK: every required Inductor hook is present and a C++ compiler was found.")
        return "\n".join(out) + "\n"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _dist_version(*names: str) -> str | None:
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _versions() -> dict:
    import torch

    from .. import __version__
    from .patches import torch_version

    return {
        "python": platform.python_version(), "platform": f"{sys.platform} {platform.machine()}",
        "torch": torch.__version__, "torch_version": torch_version(), "cuda": torch.version.cuda,
        "triton": _dist_version("triton", "pytorch-triton", "pytorch-triton-rocm"), "aoti_debug": __version__,
    }


def check_compiler(cxx: str | None = None) -> CompilerReport:
    """Describe ``cxx``, or the compiler Inductor would use when None."""
    from . import toolchain

    if cxx is None:
        name, origin = toolchain.inductor_compiler()
        if name is None:
            return CompilerReport(None, origin)
    else:
        name, origin = cxx, "--cxx"
    path = toolchain.resolve(name)
    report = CompilerReport(name, origin, path=path, version=toolchain.compiler_version(path))
    if report.version is None:
        return report
    report.libstdcxx = toolchain.print_libstdcxx(path)
    report.static_libstdcxx = report.libstdcxx is not None and not os.path.isabs(report.libstdcxx)
    if report.static_libstdcxx:
        report.suggestion = toolchain.shared_libstdcxx_compiler(exclude=path)
    return report


def doctor(cxx: str | None = None) -> DoctorReport:
    """Check this environment: versions, C++ compiler, every hook of the patch table.

    Args:
        cxx: a compiler to check instead of the one Inductor would use.
    """
    from . import patches

    return DoctorReport(versions=_versions(), compiler=check_compiler(cxx), patches=patches.report(),
                        installed=patches.installed(), checked_torch=patches.CHECKED_TORCH)
