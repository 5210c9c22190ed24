"""What a dump says never reaches a terminal raw, and bad tolerances are errors.

Hand-written dumps (the real RunWriter, no compile) whose kernel names, arg names,
module paths, source lines, graph files and argv hold ESC sequences, CR, BEL, C1
controls and bidi overrides: ``show``, ``diff``, ``replay`` and ``locate`` print them as
escapes in every human-readable format, while JSON and CSV keep the exact strings.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys

import pytest
import torch
from click.testing import CliRunner

import aoti_debug
from aoti_debug.cli import main
from aoti_debug.errors import ConfigError, ToleranceError
from aoti_debug.format.schema import names_line
from aoti_debug.locate import Verdict
from aoti_debug.locate.sources import Source
from aoti_debug.locate.trace import LaunchState
from aoti_debug.printable import UNPRINTABLE, printable
from aoti_debug.replay.engine import replay as library_replay
from tests.test_reader import write_run

pytestmark = pytest.mark.quick  # compiles nothing: make check runs it

#: What a hostile dump puts in its strings: clear screen, set the window title (OSC
#: ended by BEL), CR, an 8-bit CSI, a right-to-left override, newline, tab and DEL.
EVIL = "\x1b[2J\x1b]0;title\x07\r\x9b\u202e\n\t\x7f"
#: None of these may reach a terminal raw.
RAW = ("\x1b", "\x07", "\r", "\x9b", "\u202e", "\x7f")
KERNEL = "cpp_fused_" + EVIL + "add_0"
ARG = "x" + EVIL
MODULE = "model.h" + EVIL
CODE = "y = x + 1" + EVIL


def assert_clean(result) -> None:
    """No raw control character on stdout or stderr, and no traceback."""
    for stream in (result.stdout, result.stderr):
        for ch in RAW:
            assert ch not in stream, (ch, stream)
    assert "Traceback" not in result.output


def _hostile_run(path, y: torch.Tensor) -> str:
    """One launch of KERNEL: input ARG, output ``y``, with provenance, graph file and argv
    all carrying EVIL."""
    run = write_run(path, {ARG: torch.ones(4), "y": y}, kernel=KERNEL)
    manifest = os.path.join(run, "manifest.jsonl")
    recs = [json.loads(line) for line in open(manifest)]
    for r in recs:
        r["phase"], r["role"] = ("before", "input") if r["arg"] == ARG else ("after", "output")
        r["site"] = 0
    with open(manifest, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs)
    with open(os.path.join(run, "run.json")) as f:
        info = json.load(f)
    info["argv"] = ["train.py", EVIL]
    info["graphs"] = {"graph0": {"wrapper": "python", "file": "/tmp/out" + EVIL + ".py", "kind": "inference",
                                 "compile_id": "0/0"}}
    with open(os.path.join(run, "run.json"), "w") as f:
        json.dump(info, f)
    provenance = {"nodes": ["add" + EVIL], "aten": ["aten.add" + EVIL], "module": MODULE,
                  "source": "model.py:3 in forward" + EVIL, "code": CODE,
                  "outputs": {"y": {"node": "add" + EVIL, "aten": "aten.add.Tensor", "module": MODULE}}}
    with open(os.path.join(run, "sites.jsonl"), "w") as f:
        f.write(json.dumps({"graph": "graph0", "site": 0, "kernel": KERNEL, "provenance": provenance}) + "\n")
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run A (a NaN born in KERNEL) and run B, whose output differs from A's by 0.5."""
    root = tmp_path_factory.mktemp("hostile")
    a = _hostile_run(root / "a", torch.tensor([0.0, float("nan"), 2.0, 3.0]))
    b = _hostile_run(root / "b", torch.tensor([0.5, 1.5, 2.5, 3.5]))
    return a, b


def strings(data) -> set[str]:
    """Every string value in a JSON document."""
    if isinstance(data, str):
        return {data}
    if isinstance(data, dict):
        return set().union(*map(strings, data.values())) if data else set()
    if isinstance(data, list):
        return set().union(*map(strings, data)) if data else set()
    return set()


def cli(*args, input=None):
    result = CliRunner().invoke(main, [*map(str, args)], input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


# -- the helper ---------------------------------------------------------------------------------
def test_printable_escapes_controls_c1_and_bidi_only():
    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert printable("\r\n\t\x07\x7f\x9b\u202e\u2066") == "\\r\\n\\t\\x07\\x7f\\x9b\\u202e\\u2066"
    assert printable("é 中 ü ~ \\x1b") == "é 中 ü ~ \\x1b"  # printable text and backslashes stay
    assert printable(printable(EVIL)) == printable(EVIL)
    assert printable("a\nb\x1b", keep_newlines=True) == "a\nb\\x1b"
    assert printable(None) == "None" and printable(3) == "3"
    escaped = printable("".join(map(chr, sorted(UNPRINTABLE))))
    assert escaped.isascii() and escaped.isprintable()
    for code in (*range(0x20), 0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)):
        assert chr(code) not in printable(chr(code))


# -- show ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["table", "markdown", "html"])
def test_show_prints_no_control_characters(runs, fmt):
    r = cli("show", runs[0], "--format", fmt)
    assert r.exit_code == 0, r.output
    assert_clean(r)
    # Shown, as escapes: the kernel, its module, the NaN birth's source.
    assert printable(KERNEL) in r.output or printable(KERNEL)[:30] in r.output
    assert "\\x1b[2J" in r.output and "\\u202e" in r.output


def test_show_json_and_csv_keep_the_exact_strings(runs):
    r = cli("show", runs[0], "--format", "json")
    assert r.exit_code == 0 and "\x1b" not in r.output  # JSON escapes controls itself
    assert {KERNEL, MODULE} <= strings(json.loads(r.output))
    r = cli("show", runs[0], "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.output)))
    assert {row["kernel"] for row in rows} == {KERNEL}


def test_show_report_file_and_its_summary(runs, tmp_path):
    out = tmp_path / "show.md"
    r = cli("show", runs[0], "--format", "markdown", "-o", out)
    assert r.exit_code == 0, r.output
    assert_clean(r)
    text = out.read_text()
    assert not any(ch in text for ch in RAW) and "\\x1b[2J" in text


def test_error_messages_are_escaped(tmp_path):
    r = cli("show", str(tmp_path / ("missing" + EVIL)))
    assert r.exit_code == 2
    assert_clean(r)
    assert len(r.output.splitlines()) == 1 and "missing\\x1b[2J" in r.output


# -- diff ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["table", "markdown", "html"])
def test_diff_prints_no_control_characters(runs, fmt):
    r = cli("diff", "--no-progress", *runs, "--format", fmt, "--all")
    assert r.exit_code == 1, r.output
    assert_clean(r)
    assert "FIRST DIVERGENCE" in r.output and "\\x1b]0;title\\x07" in r.output


def test_diff_json_and_csv_keep_the_exact_strings(runs, tmp_path):
    r = cli("diff", "--no-progress", *runs, "--format", "json", "--all")
    data = json.loads(r.output)
    assert r.exit_code == 1 and "\x1b" not in r.output
    assert {KERNEL, ARG, MODULE} <= strings(data)
    assert data["first_divergence"]["kernel"] == KERNEL
    r = cli("diff", "--no-progress", *runs, "--format", "csv", "--all")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert {row["kernel"] for row in rows} == {KERNEL} and ARG in {row["arg"] for row in rows}
    assert not any(ch in r.stderr for ch in RAW)


def test_diff_report_file_summary_is_escaped(runs, tmp_path):
    out = tmp_path / "diff.txt"
    r = cli("diff", "--no-progress", *runs, "-o", out)
    assert r.exit_code == 1
    assert_clean(r)
    assert not any(ch in out.read_text() for ch in RAW)


# -- replay -------------------------------------------------------------------------------------
class _FakeReplay:
    """A replay result whose text holds raw controls: the CLI's last line of defence."""

    launches: list = []
    culprits: list = []
    exit_code = 0

    def __str__(self) -> str:
        return f"launch 1 {KERNEL} (graph0) in {MODULE}: AGREES\nnote: {EVIL}"

    def to_dict(self) -> dict:
        return {"kernel": KERNEL}


def test_replay_output_is_escaped_whatever_the_renderer_did(runs, monkeypatch, tmp_path):
    monkeypatch.setattr(aoti_debug.replay, "replay", lambda *a, **k: _FakeReplay())
    r = cli("replay", *runs)
    assert r.exit_code == 0, r.output
    assert_clean(r)
    assert "AGREES" in r.output and "\\x1b[2J" in r.output
    r = cli("replay", *runs, "-o", tmp_path / "replay.txt")
    assert_clean(r)
    assert not any(ch in (tmp_path / "replay.txt").read_text() for ch in RAW)
    r = cli("replay", *runs, "--format", "json")
    assert json.loads(r.output) == {"kernel": KERNEL}


def test_replay_that_cannot_run_the_dump_prints_no_control_characters(runs):
    # Its kernel and generated source file hold EVIL, and the file is not there: bad input.
    r = cli("replay", *runs, input="")
    assert r.exit_code == 2, r.output
    assert_clean(r)


# -- locate -------------------------------------------------------------------------------------
def _located() -> Verdict:
    launch = LaunchState(launch=2, kernel=KERNEL, graph="graph0", module=MODULE, user_line=CODE,
                         args=[{"name": ARG, "role": "input", "kind": "tensor", "dtype": "float32", "shape": [4],
                                "stride": [1], "device": "cpu"}])
    source = Source(file="/tmp/out" + EVIL + ".py", line=3, code=CODE, nodes=["add" + EVIL], aten=["aten.add"])
    return Verdict("located", ["python", "train.py"], kind="signal", launch=launch, completed=1, started=2,
                   error="Fatal Python error: Aborted" + EVIL, signal="SIGABRT", source=source,
                   notes=["note" + EVIL])


def test_locate_verdict_renders_escapes():
    text = _located().render()
    assert not any(ch in text for ch in RAW)
    assert "\\x1b[2J" in text and "\\u202e" in text
    # One line per row: a newline inside a value is shown, not obeyed.
    assert all(line.startswith(("aoti-debug locate:", "  ")) for line in text.splitlines())


def test_locate_cli_text_escapes_and_json_keeps(monkeypatch):
    monkeypatch.setattr(aoti_debug.locate, "locate", lambda *a, **k: _located())
    r = cli("locate", "--", "python", "train" + EVIL + ".py")
    assert r.exit_code == 1, r.output
    assert_clean(r)
    assert "\\x1b[2J" in r.output
    r = cli("locate", "--quiet", "--format", "json", "--", "python", "train.py")
    assert json.loads(r.output)["launch"]["kernel"] == KERNEL


def test_locate_end_to_end_kernel_name_from_the_stream():
    kernel = "cpp_fused_\x1b]0;title\x07\x9b\u202e_0"  # no whitespace: the runtime line's grammar
    cmd = [sys.executable, "-c", "import os, sys\n"
           f"sys.stderr.write({names_line('before', 1, 'graph0', kernel, 0)!r} + '\\n'); sys.stderr.flush()\n"
           "os.abort()\n"]
    r = cli("locate", "--quiet", "--", *cmd)
    assert r.exit_code == 1, r.output
    assert_clean(r)
    assert "\\x1b]0;title\\x07\\x9b\\u202e" in r.output


# -- options ------------------------------------------------------------------------------------
BAD_OPTIONS = [("--atol", "nan"), ("--rtol", "nan"), ("--rtol", "inf"), ("--atol", "-inf"), ("--atol", "-1"),
               ("--rtol", "-0.5"), ("--rounding-factor", "nan"), ("--rounding-factor", "inf"),
               ("--rounding-factor", "0.5"), ("--atol", "abc")]


@pytest.mark.parametrize("command", ["diff", "replay"])
@pytest.mark.parametrize("option,value", BAD_OPTIONS)
def test_bad_tolerances_are_one_line_exit_2(runs, command, option, value):
    extra = ["--no-progress"] if command == "diff" else []
    r = cli(command, *extra, *runs, option, value)
    assert r.exit_code == 2, r.output
    lines = r.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {option} "), r.output


def test_nan_tolerance_no_longer_passes_a_difference(runs):
    # Before: --atol nan said EQUAL (exit 0) for outputs 0.5 apart.
    assert cli("diff", "--no-progress", *runs, "--atol", "nan").exit_code == 2
    assert cli("diff", "--no-progress", *runs, "--atol", "1", "--rtol", "0").exit_code == 1  # A's NaN
    r = cli("diff", "--no-progress", *runs, "--atol", "0", "--rtol", "0")
    assert r.exit_code == 1 and "tolerance atol=0 rtol=0" in r.output


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1"])
def test_locate_timeout_is_checked(value):
    r = cli("locate", "--timeout", value, "--", "true")
    assert r.exit_code == 2 and len(r.output.splitlines()) == 1, r.output
    assert r.output.startswith("Error: --timeout must be a finite number > 0")


@pytest.mark.parametrize("kwargs", [{"atol": float("nan")}, {"rtol": float("nan")}, {"atol": -1.0},
                                    {"rtol": float("inf")}, {"rounding_factor": float("nan")},
                                    {"rounding_factor": 0.0}, {"rounding_factor": float("inf")}])
def test_library_rejects_bad_tolerances(runs, kwargs):
    with pytest.raises(ToleranceError) as e:
        aoti_debug.diff(*runs, **kwargs)
    assert isinstance(e.value, ConfigError) and isinstance(e.value, ValueError)
    with pytest.raises(ToleranceError):
        library_replay(*runs, **kwargs)
