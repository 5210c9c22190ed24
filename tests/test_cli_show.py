"""``aoti-debug show`` through click's CliRunner, on dumps of real compiled models."""

from __future__ import annotations

import csv
import io
import json
import re
import os

import pytest
import torch
from click.testing import CliRunner

import aoti_debug
from aoti_debug.cli import main
from tests.conftest import only_run, records
from tests.test_compare import build_real_dumps, copy_run, first_reader_of


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    return build_real_dumps(tmp_path_factory)


@pytest.fixture(scope="module")
def nan_made_by_a_kernel(tmp_path_factory):
    """A compiled function whose fused kernel turns finite inputs into NaN (log of negatives)."""
    root = str(tmp_path_factory.mktemp("nan_kernel"))

    def f(x, y):
        return torch.log(x * y) + 1, torch.relu(x)

    x = torch.linspace(-1, 1, 16)
    with aoti_debug.enabled(level="save", dump_dir=root):
        torch.compile(f)(x, torch.ones(16))
        aoti_debug.flush()
    return only_run(root)


def show(*args):
    result = CliRunner().invoke(main, ["show", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result


def test_show_a_run(dumps):
    run = only_run(dumps.save_a)
    recs = records(run)
    r = show(dumps.save_a)
    assert r.exit_code == 0, r.output
    launches = len({x["launch"] for x in recs})
    kernels = {x["kernel"] for x in recs}
    # Graphs are named for what they are (run.json's kind and compile id).
    title = "graph0 (inference 0/0)"
    assert f"1 graph(s) ({title}), {len(kernels)} kernel(s), {launches} launch(es), {len(recs)} record(s)" in r.output
    assert "first NaN/Inf: none" in r.output and "born in" not in r.output
    table = r.output.split("\n\n")[-1]
    for k in kernels:
        assert k in table
    addmm = next(l for l in table.splitlines() if l.startswith(f"{title} extern_kernels.addmm"))
    # op, module (two Linear layers: two module paths), calls, records
    assert re.search(r" aten\.addmm +several \(2\) +2 +8 ", addmm), addmm


def test_value_ranges_are_those_the_kernel_wrote(dumps):
    data = json.loads(show(dumps.save_a, "--format", "json").output)
    run = only_run(dumps.save_a)
    outs = [x for x in records(run) if x["kernel"].startswith("cpp_fused__softmax") and x["phase"] == "after"]
    k = next(k for k in data["runs"][0]["kernels"] if k["kernel"].startswith("cpp_fused__softmax"))
    assert k["min"] == min(x["stats"]["min"] for x in outs)
    assert k["max"] == max(x["stats"]["max"] for x in outs)
    assert data["runs"][0]["records"] == len(records(run))


def test_first_nan_from_a_graph_input(dumps):
    reader = first_reader_of(dumps.save_a, dumps.x)
    r = show(dumps.save_nan)
    line = next(l for l in r.output.splitlines() if l.startswith("first NaN: "))
    assert (f"launch {reader.launch} graph0 (inference 0/0) {reader.kernel} call 0 before {reader.arg} (nan=1 inf=0)"
            in line)
    assert "a graph input (no instrumented kernel wrote it)" in line
    assert "first Inf: none" in r.output
    # The NaN came in from outside: no launch gave birth to it.
    assert "born in" not in r.output and "no launch made NaN/Inf from inputs without it" in r.output
    assert r.exit_code == 0


def test_first_nan_produced_by_a_kernel(nan_made_by_a_kernel):
    r = show(nan_made_by_a_kernel, "--format", "json")
    nf = json.loads(r.output)["runs"][0]["first_nonfinite"]
    assert nf["phase"] == "after" and nf["producer"] == nf["kernel"] and nf["nan"] > 0
    assert nf["kernel"].startswith("cpp_fused_") and "log" in nf["kernel"]
    assert "from finite inputs" in nf["summary"]
    text = show(nan_made_by_a_kernel).output
    assert f"first NaN: seq {nf['seq']} " in text and f"produced by {nf['kernel']}" in text
    assert f"NaN born in launch {nf['launch']} graph0 (inference 0/0) {nf['kernel']} call 0: " in text


def test_stats_level_run(dumps):
    r = show(dumps.stats_a)
    assert r.exit_code == 0 and "level stats" in r.output and " in 0 file(s)" in r.output


def test_root_with_several_runs_shows_each(dumps):
    r = show(dumps.root)
    assert r.exit_code == 0
    assert r.output.splitlines()[0] == f"{dumps.root}: {len(dumps.runs)} runs"
    assert r.output.count("\nrun ") + r.output.startswith("run ") == len(dumps.runs)


def test_formats(dumps, tmp_path):
    rows = list(csv.DictReader(io.StringIO(show(dumps.save_a, "-f", "csv").output)))
    assert {"run", "graph", "kernel", "calls", "bytes", "min", "max", "nan", "inf"} <= set(rows[0])
    assert "| graph | kernel |" in show(dumps.save_a, "-f", "markdown").output
    out = tmp_path / "show.html"
    r = show(dumps.save_a, "-f", "html", "-o", out)
    assert r.exit_code == 0 and "report written to" in r.output
    assert "<table>" in out.read_text()


def test_bad_input(dumps, tmp_path):
    r = show(tmp_path / "missing")
    assert r.exit_code == 2 and r.output.strip() == f"Error: {tmp_path / 'missing'}: no such file or directory"
    r = show(tmp_path)
    assert r.exit_code == 2 and "not an aoti_debug dump" in r.output and len(r.output.strip().splitlines()) == 1
    run = copy_run(dumps.save_a, tmp_path / "v")
    info = json.load(open(os.path.join(run, "run.json")))
    info["format_version"] = 7
    json.dump(info, open(os.path.join(run, "run.json"), "w"))
    r = show(run)
    assert r.exit_code == 2 and "format version 7" in r.output and len(r.output.strip().splitlines()) == 1


def test_truncated_and_damaged_manifests(dumps, tmp_path):
    run = copy_run(dumps.save_a, tmp_path / "t")
    path = os.path.join(run, "manifest.jsonl")
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-30])
    r = show(run)
    assert r.exit_code == 0 and "note: manifest.jsonl ends in a truncated line (a killed run?)" in r.output
    assert f"{len(records(only_run(dumps.save_a))) - 1} record(s)" in r.output
    open(path, "ab").write(b"\n{oops\n" + data.splitlines(keepends=True)[0])
    r = show(run)
    assert r.exit_code == 2 and "problem: manifest.jsonl line " in r.output
