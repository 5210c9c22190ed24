"""``aoti-debug diff`` through click's CliRunner, on dumps of a real compiled model."""

from __future__ import annotations

import csv
import io
import json
import os

import pytest
from click.testing import CliRunner

from aoti_debug.cli import main
from tests.test_compare import build_real_dumps, copy_run, first_reader_of
from tests.test_reader import rewrite_manifest


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    return build_real_dumps(tmp_path_factory)


def diff(*args):
    result = CliRunner().invoke(main, ["diff", "--no-progress", *map(str, args)])
    # Never a traceback: the command ends by sys.exit, or by click's own error.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result


def error_line(result) -> str:
    lines = [l for l in result.output.splitlines() if l.startswith("Error: ")]
    assert len(lines) == 1, result.output
    return lines[0]


# -- results ------------------------------------------------------------------------------------
def test_equal_runs_exit_0(dumps):
    r = diff(dumps.save_a, dumps.save_b)
    assert r.exit_code == 0, r.output
    assert "FIRST DIVERGENCE" not in r.output
    assert r.output.rstrip().splitlines()[-1].startswith("EQUAL: ")


def test_perturbed_weight_exit_1_first_divergence_on_top(dumps):
    reader = first_reader_of(dumps.save_a, dumps.ln_weight)
    r = diff(dumps.save_a, dumps.save_p)
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    fd = next(l for l in lines if l.startswith("FIRST DIVERGENCE: "))
    assert fd.startswith(f"FIRST DIVERGENCE: launch {reader.launch} graph0 (inference 0/0) {reader.kernel} (call 0): input ")
    assert f"input {reader.arg}" in fd
    header = next(i for i, l in enumerate(lines) if l.startswith("status "))
    first_row = lines[header + 1].split()
    assert first_row[:3] == ["fail", "*", str(reader.launch)]
    assert "passing record(s) not listed" in r.output
    assert lines[-1].startswith("DIFFERENT: ")


def test_all_lists_passing_records(dumps):
    r = diff(dumps.save_a, dumps.save_p, "--all")
    rows = [l for l in r.output.splitlines() if l.startswith("pass ")]
    assert len(rows) >= 5 and "not listed" not in r.output


def test_tolerance_options_change_the_verdict(dumps):
    assert diff(dumps.save_a, dumps.save_p, "--atol", "10", "--rtol", "0").exit_code == 0
    r = diff(dumps.save_a, dumps.save_p, "--atol", "0", "--rtol", "0")
    assert r.exit_code == 1 and "tolerance atol=0 rtol=0" in r.output


def test_nan_infinite_or_negative_tolerance_is_bad_input(dumps):
    # A NaN tolerance once made every comparison pass: EQUAL, exit 0, for runs that differ.
    for option, value in (("--atol", "nan"), ("--rtol", "nan"), ("--rtol", "inf"), ("--atol", "-1"),
                          ("--rounding-factor", "nan")):
        r = diff(dumps.save_a, dumps.save_p, option, value)
        assert r.exit_code == 2, r.output
        assert error_line(r) == f"Error: {option} must be a finite number >= {1 if 'factor' in option else 0}, " \
                                f"not {value}"
        assert "EQUAL" not in r.output


def test_kernels_pattern_narrows(dumps):
    r = diff(dumps.save_a, dumps.save_p, "--kernels", "*softmax*", "--all")
    rows = [l for l in r.output.splitlines() if l.split()[:1] in (["pass"], ["fail"])]
    assert rows and all(" cpp_fused__softmax_1 " in l for l in rows)
    assert "kernels *softmax*" in r.output and "addmm" not in r.output


def test_csv_json_markdown_html(dumps, tmp_path):
    r = diff(dumps.save_a, dumps.save_p, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.output)))
    assert r.exit_code == 1 and rows[0]["first"] == "True" and rows[0]["status"] == "fail"
    assert {"max_abs", "max_rel", "mismatch", "cosine", "nan_a", "inf_b", "bitwise"} <= set(rows[0])

    r = diff(dumps.save_a, dumps.save_p, "--format", "json", "--all")
    data = json.loads(r.output)
    assert data["verdict"] == "DIFFERENT" and data["exit_code"] == 1
    assert data["first_divergence"]["kind"] == "input"
    assert len(data["records"]) == sum(data["counts"].values())

    r = diff(dumps.save_a, dumps.save_p, "--format", "markdown")
    assert "| status | launch |" in r.output and "- FIRST DIVERGENCE: launch" in r.output

    out = tmp_path / "diff.html"
    r = diff(dumps.save_a, dumps.save_p, "--format", "html", "--output", out)
    assert r.exit_code == 1
    assert r.output.startswith("DIFFERENT: ") and f"report written to {out}" in r.output
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<table>" in page and "FIRST DIVERGENCE" in page


def test_stats_level_dumps_say_so(dumps):
    r = diff(dumps.stats_a, dumps.stats_b)
    assert r.exit_code == 0
    assert "stats-level dump (no tensor files): pairs are compared by their recorded stats and checksums" in r.output
    r = diff(dumps.stats_a, dumps.stats_p)
    assert r.exit_code == 1 and "FIRST DIVERGENCE: launch" in r.output and "stats differ" in r.output


def test_nan_planted_in_the_input(dumps):
    reader = first_reader_of(dumps.save_a, dumps.x)
    r = diff(dumps.save_nan, dumps.save_a)
    assert r.exit_code == 1
    fd = next(l for l in r.output.splitlines() if l.startswith("FIRST DIVERGENCE"))
    assert f"launch {reader.launch} graph0 (inference 0/0) {reader.kernel}" in fd and f"input {reader.arg}" in fd
    row = next(l for l in r.output.splitlines() if l.startswith("fail *") and f" {reader.arg} " in l)
    assert " 1/0 " in row  # NaN count in A / B


# -- bad input: one line, exit 2 -------------------------------------------------------------------
def test_missing_path(dumps, tmp_path):
    r = diff(tmp_path / "nope", dumps.save_a)
    assert r.exit_code == 2
    assert error_line(r) == f"Error: {tmp_path / 'nope'}: no such file or directory"


def test_directory_that_is_not_a_dump(dumps, tmp_path):
    r = diff(dumps.save_a, tmp_path)
    assert r.exit_code == 2 and "not an aoti_debug dump" in error_line(r)


def test_root_with_several_runs_names_them(dumps):
    r = diff(dumps.root, dumps.save_a)
    assert r.exit_code == 2
    line = error_line(r)
    assert "holds " in line and "save_a/" in line and "name one of them" in line


def test_newer_format_version(dumps, tmp_path):
    run = copy_run(dumps.save_b, tmp_path)
    info = json.load(open(os.path.join(run, "run.json")))
    info["format_version"] = 2
    json.dump(info, open(os.path.join(run, "run.json"), "w"))
    r = diff(dumps.save_a, run)
    assert r.exit_code == 2 and "format version 2" in error_line(r) and "upgrade aoti_debug" in error_line(r)


def test_truncated_last_manifest_line(dumps, tmp_path):
    run = copy_run(dumps.save_b, tmp_path)
    path = os.path.join(run, "manifest.jsonl")
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-40])
    r = diff(dumps.save_a, run)
    assert r.exit_code == 2  # the killed run lacks its last record
    assert "note: run B: manifest.jsonl ends in a truncated line (a killed run?)" in r.output
    assert "only in run A" in r.output and "no counterpart in run B" in r.output


def test_damaged_manifest_line_is_a_problem(dumps, tmp_path):
    run = copy_run(dumps.save_b, tmp_path)
    path = os.path.join(run, "manifest.jsonl")
    lines = open(path).read().splitlines(keepends=True)
    lines[2] = "{broken\n"
    open(path, "w").writelines(lines)
    r = diff(dumps.save_a, run)
    assert r.exit_code == 2
    assert "problem: run B: manifest.jsonl line 3: not valid JSON (skipped)" in r.output


def test_corrupt_and_missing_tensor_files(dumps, tmp_path):
    run = copy_run(dumps.save_p, tmp_path)
    reader = first_reader_of(dumps.save_a, dumps.ln_weight)
    bad = next(r for r in _records(run) if r["seq"] == reader.seq)
    open(os.path.join(run, bad["file"]), "wb").write(b"\x00" * 100)
    r = diff(dumps.save_a, run)
    assert r.exit_code == 2
    assert f"run B: seq {bad['seq']} {bad['kernel']} call 0 before {bad['arg']}: tensor file" in r.output
    assert "is corrupt" in r.output
    os.unlink(os.path.join(run, bad["file"]))
    r = diff(dumps.save_a, run, "--format", "json")
    note = next(x["note"] for x in json.loads(r.output)["records"] if x["seq_b"] == bad["seq"])
    assert note.endswith("is missing") and r.exit_code == 2


def test_full_reads_files_behind_equal_checksums(dumps, tmp_path):
    run = copy_run(dumps.save_b, tmp_path)
    victim = next(r for r in _records(run) if r.get("file") and r["phase"] == "after")
    open(os.path.join(run, victim["file"]), "wb").write(b"garbage")
    assert diff(dumps.save_a, run).exit_code == 0  # checksums agree: the file is not needed
    r = diff(dumps.save_a, run, "--full")
    assert r.exit_code == 2 and "is corrupt" in r.output


def test_manifest_path_outside_the_dump(dumps, tmp_path):
    run = copy_run(dumps.save_p, tmp_path)

    def edit(recs):
        for rec in recs:
            if rec.get("file"):
                rec["file"] = "../../../../../../etc/hostname"

    rewrite_manifest(run, edit)
    r = diff(dumps.save_a, run, "--full")
    assert r.exit_code == 2 and "points outside the dump" in r.output


def test_shape_and_dtype_differences_are_per_record(dumps, tmp_path):
    r = diff(dumps.save_a, dumps.save_shape)
    assert r.exit_code == 2 and "shape differs: 4x8 in A, 6x8 in B" in r.output
    run = copy_run(dumps.save_b, tmp_path)

    def edit(recs):
        recs[0]["dtype"] = "float64"

    rewrite_manifest(run, edit)
    r = diff(dumps.save_a, run, "--format", "json")
    notes = [x["note"] for x in json.loads(r.output)["records"] if x["status"] == "mismatch"]
    assert r.exit_code == 2 and notes == ["dtype differs: float32 in A, float64 in B"]


def test_different_kernel_sets(dumps):
    r = diff(dumps.save_a, dumps.save_filtered)
    assert r.exit_code == 2
    assert "record(s) of run A have no counterpart in run B (kernels: extern_kernels.addmm)" in r.output
    assert any(l.startswith("only_a ") for l in r.output.splitlines())


def test_unwritable_output_file(dumps, tmp_path):
    r = diff(dumps.save_a, dumps.save_b, "--output", tmp_path / "no" / "dir" / "x.txt")
    assert r.exit_code == 2 and "cannot write" in error_line(r)


def _records(run):
    with open(os.path.join(run, "manifest.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_limit_caps_the_listing_but_not_the_counts(dumps):
    r = diff(dumps.save_a, dumps.save_p, "--all", "--limit", "3", "--format", "json")
    data = json.loads(r.output)
    firsts = [x for x in data["records"] if x["first"]]
    assert firsts and data["records"][0]["first"] and r.exit_code == 1  # always kept
    assert len(data["records"]) == 3 + len(firsts)  # the cap was reached before the divergence
    assert data["dropped"] == sum(data["counts"].values()) - len(data["records"])
    text = diff(dumps.save_a, dumps.save_p, "--limit", "1").output
    assert "compared but not listed; --limit raises the cap" in text


def test_progress_bar_when_asked(dumps):
    result = CliRunner().invoke(main, ["diff", "--progress", str(dumps.save_a), str(dumps.save_b)])
    assert result.exit_code == 0 and "comparing" in result.output
