"""The product speaks only of itself: no tracked source or document refers to the work that
built it (numbered work sessions, numbered tracker issues, the helpers or machines that did it).

Walks ``git ls-files`` from the repository root and fails naming ``file:line`` for every
line that does. Upstream references stay legitimate: ``pytorch/pytorch#12345``, a GitHub
issue link, "issues" in general, a measurement on "a 2-core x86_64 machine".
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

pytestmark = pytest.mark.quick  # compiles nothing: make check runs it

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUFFIXES = (".py", ".md", ".h", ".cpp", ".cfg", ".toml")

# Built from pieces so that this file's own source does not match what it looks for.
_S = "sess" + "ion"
_I = "iss" + "ue"
_NUM = r"#?\d+"
PATTERN = re.compile("|".join([
    # a numbered work session, or a list of them
    rf"\b{_S}s?\s+{_NUM}\b",
    # a numbered tracker issue (not a step's issue time in ms, not "its base issues N launches")
    rf"\b{_I}\s+{_NUM}(?![\d.])(?!\s*(?:ms|us|µs|s)\b)",
    # a list of numbered issues
    rf"\b{_I}s\s+{_NUM}(?:\s*(?:,|and|&)\s*{_NUM})+\b",
    # the anchor of a section named after a session, the helpers' sessions, the machine that built it
    "#" + _S + "-",
    rf"\bhelper\s+{_S}s?\b",
    r"\b2-core\s+" + "V" + r"M\b",
]), re.IGNORECASE)


def _tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True,
                             timeout=60).stdout
    except (OSError, subprocess.CalledProcessError) as e:  # not a git checkout (an sdist)
        pytest.skip(f"needs a git checkout: {e}")
    names = [n for n in out.decode("utf-8", "surrogateescape").split("\0") if n]
    return [n for n in names if n.endswith(SUFFIXES) or os.path.basename(n) == "Makefile"]


def _offending_lines(path: str) -> list[str]:
    try:
        with open(os.path.join(REPO, path), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:  # deleted in the working tree, not yet from the index
        return []
    return [f"{path}:{i}: {line.strip()[:160]}" for i, line in enumerate(lines, 1) if PATTERN.search(line)]


def test_the_pattern_finds_what_it_should_and_nothing_else():
    s, i, vm = _S, _I, "V" + "M"
    flagged = [f"tried twice ({s}s 24 and 34)", f"{s.title()} 11 (H100), the tests", f"as in {s} 9",
               f"{i.title()} 12's case: other fusion", f"stats kernels ({i} 13):", f"see {i} #7",
               f"{i}s 12 and 13", f"[link](benchmarks.md#{s}-30-cuda)", f"a helper {s} ran it",
               f"on this project's 2-core {vm}"]
    kept = ["pytorch/pytorch#12345", f"GitHub {i} https://github.com/pytorch/pytorch/{i}s/12345",
            f"known {i}s", f"its base {i}s 43 launches", f"host {i} 0.767 ms", f"{i} 1.61 ms",
            f"the {s}'s counters", f"{s.title()}.submit_planned", "a shared helper", "helpers of shared parts",
            "on a 2-core x86_64 machine", f"2-core x86_64 {vm}", f"{s}_id = 3"]
    assert [x for x in flagged if not PATTERN.search(x)] == []
    assert [x for x in kept if PATTERN.search(x)] == []


def test_no_tracked_file_speaks_of_the_work_that_built_it():
    files = _tracked_files()
    assert files, "git ls-files listed nothing"
    bad = [hit for path in files for hit in _offending_lines(path)]
    assert not bad, "lines that speak of sessions, issues or helpers instead of the product:\n" + "\n".join(bad)
