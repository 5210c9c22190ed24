"""One benchmark run's rows as a JSON file, the README's overhead table's source.

``overhead.py --json PATH`` and ``overhead_cpu.py --json PATH`` write one run: what ran
(the command, the machine, torch, the commit, the date) and a row per configuration, in
one schema (:func:`row`), so that ``readme_table.py`` builds the README's table from the
files of ``benchmarks/results/`` and nothing else: every ratio in it is one run's.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: This file's format (``readme_table.py`` refuses another).
FORMAT = 1
#: The levels a row can be at: ours, then the built-in printer's (``aot_inductor.debug_intermediate_value_printer``).
LEVELS = ("base", "off", "save", "print", "names", "stats", "stats+ring", "stats+trigger",
          "built-in off", "built-in save", "built-in print", "built-in names")
_BUILTIN = {"0": "built-in off", "1": "built-in save", "2": "built-in print", "3": "built-in names"}


def level_of(ours: str | None, builtin: str | None) -> str:
    """A row's level from our level (``None``: not ours) and the built-in's (``"0"``–``"3"``)."""
    if ours:
        return ours
    if builtin:
        return _BUILTIN[builtin]
    return "base"


def row(*, model: str, wrapper: str, mode: str, level: str, step_s: float, steady_s: float | None = None,
        compile_s: float | None = None, bytes_per_step: float | None = None, records: float | None = None,
        base_step_s: float | None = None, base_steady_s: float | None = None, notes: str = "") -> dict[str, Any]:
    """One configuration's numbers: median step and back-to-back step (seconds), compile
    time (the first call less a step), bytes written and manifest records per step; and
    where the row timed an uninstrumented compile in its own process in turn with it
    (``overhead.py --paired``), that base's step and back-to-back step, which its ratios
    are to."""
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}")
    out = dict(model=model, wrapper=wrapper, mode=mode, level=level, step_s=step_s, steady_s=steady_s,
               compile_s=compile_s, bytes_per_step=bytes_per_step, records=records, notes=notes)
    if base_step_s is not None:
        out.update(base_step_s=base_step_s, base_steady_s=base_steady_s)
    return out


def commit() -> str:
    """The checkout's commit, ``+dirty`` when its tracked files differ from it ('' outside
    git); ``BENCH_COMMIT`` when set (a machine that runs a copy of the tree whose git
    metadata is not that tree's, as the GPU machine's may be)."""
    given = os.environ.get("BENCH_COMMIT", "").strip()
    if given:
        return given
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return head + ("+dirty" if head and dirty else "")


def write(path: str, *, tool: str, command: str, machine: str, torch_version: str, rows: list[dict],
          disk_bytes_per_s: float | None = None, extra: dict | None = None) -> None:
    """Write one run to ``path`` (its directory made)."""
    doc = dict(format=FORMAT, tool=tool, command=command, machine=machine, torch=torch_version, commit=commit(),
               date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
               disk_bytes_per_s=disk_bytes_per_s, rows=rows, **(extra or {}))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def read(path: str) -> dict:
    """One run written by :func:`write`; ValueError (one line) when it is not one."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a benchmark result ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{path}: not a benchmark result of format {FORMAT}")
    for key in ("tool", "command", "machine", "torch", "rows"):
        if key not in doc:
            raise ValueError(f"{path}: no {key!r}")
    for r in doc["rows"]:
        missing = {"model", "wrapper", "mode", "level", "step_s"} - set(r)
        if missing or r["level"] not in LEVELS:
            raise ValueError(f"{path}: a row without {sorted(missing)} or of an unknown level: {r}")
    return doc
