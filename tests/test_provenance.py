"""Provenance of launch sites (format/provenance.py): module paths as users write them,
the user's source line from an FX ``stack_trace``, the JSON both runtimes write into
``sites.jsonl``, and a reader that turns a damaged sites file into notes, never into a
refused dump or a traceback."""

from __future__ import annotations

import json
import os

import pytest
import torch
from click.testing import CliRunner

import aoti_debug
from aoti_debug.cli import main
from aoti_debug.format import reader
from aoti_debug.format.provenance import SITES_FILE, Provenance, ValueOrigin, module_path, parse_site_line, source_line
from tests.conftest import only_run


@pytest.mark.parametrize("raw,want", [
    ("L['self'].model.transformer.h.0.ln_1", "model.transformer.h.0.ln_1"),  # Dynamo
    ("L['self'].layers[3].mlp", "layers.3.mlp"),
    ("L['self']._modules['encoder']._modules['0']", "encoder.0"),
    ("model.layers.1.mlp.down_proj", "model.layers.1.mlp.down_proj"),  # torch.export
    ("L['self']", ""),
    ("L['mod'].fc", "fc"),
    ("L['fn'].1", "1"),  # torch.compile of an nn.Sequential
])
def test_module_path_as_users_write_it(raw, want):
    assert module_path(raw) == want


def test_source_line_is_the_innermost_frame():
    trace = ('  File "/x/train.py", line 10, in main\n    y = model(x)\n'
             '  File "/y/modeling.py", line 412, in forward\n    h = self.ln_2(h)\n        ^^^^^^^^^^^^^^\n')
    assert source_line(trace) == ("/y/modeling.py:412 in forward", "h = self.ln_2(h)")
    assert source_line("") == ("", "")
    assert source_line("no frames here") == ("", "")


def test_round_trip_and_label():
    p = Provenance(nodes=("var_mean", "add_5"), aten=("aten.native_layer_norm.default",), module="h.0.ln_1",
                   source="/y/modeling.py:412 in forward", code="h = self.ln_2(h)",
                   outputs=(("buf1", ValueOrigin("add_5", "aten.native_layer_norm.default", "h.0.ln_1", "ln",
                                                 "/y/modeling.py:412 in forward", "h = self.ln_2(h)")),))
    line = json.dumps({"graph": "graph0", "site": 3, "kernel": "k", "provenance": json.loads(p.to_json())})
    graph, site, back = parse_site_line(line)
    assert (graph, site, back) == ("graph0", 3, p)
    assert back.label() == "h.0.ln_1 @ modeling.py:412 in forward"
    assert p.to_json().isascii() and '"""' not in p.to_json()


@pytest.mark.parametrize("line", [
    b"", b"not json", b"[]", b'{"graph": "", "site": 0, "provenance": {}}', b'{"graph": "g", "site": -1, "provenance": {}}',
    b'{"graph": "g", "site": true, "provenance": {}}', b'{"graph": "g", "site": 0, "provenance": []}',
    b'{"graph": "g", "site": 0, "provenance": {"nodes": "abc"}}',
    b'{"graph": "g", "site": 0, "provenance": {"nodes": [1]}}',
    b'{"graph": "g", "site": 0, "provenance": {"outputs": {"buf0": 3}}}',
    b'{"graph": "g", "site": 0, "provenance": {"outputs": []}}',
    b'{"graph": "g", "site": 0, "provenance": {"module": 7}}',
    b"[" * 100000,
])
def test_a_bad_site_line_is_one_phrase(line):
    with pytest.raises(ValueError) as e:
        parse_site_line(line)
    assert "\n" not in str(e.value) and len(str(e.value)) < 100


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("prov"))
    torch._dynamo.reset()
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)).eval()
    with torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=root):
        torch.compile(m)(torch.randn(4, 8))
    aoti_debug.flush()
    return only_run(root)


def test_python_wrapper_writes_each_site_once(run_dir):
    with open(os.path.join(run_dir, SITES_FILE)) as f:
        lines = [json.loads(x) for x in f]
    run = reader.open_run(run_dir)
    recs = list(run.records())
    assert sorted((x["graph"], x["site"]) for x in lines) == sorted({(r.graph, r.site) for r in recs})
    norm = [run.provenance(r) for r in recs if r.phase == "after" and "layer_norm" in r.kernel]
    assert norm and norm[0].module == "1" and "aten.native_layer_norm.default" in norm[0].aten
    assert run.info.graphs["graph0"]["sites"]  # merged into run.json's view, as the contract says


def test_damaged_sites_file_is_a_note_not_a_failure(run_dir, tmp_path):
    import shutil

    copy = str(tmp_path / "run")
    shutil.copytree(run_dir, copy)
    with open(os.path.join(copy, SITES_FILE), "ab") as f:
        f.write(b'{"graph": "graph0", "site": "x"}\n\xff\xfe garbage\n')
    run = reader.open_run(copy)
    assert run.sites and len([n for n in run.notes if SITES_FILE in n]) == 2
    r = CliRunner().invoke(main, ["show", copy])
    assert r.exit_code == 0 and "Traceback" not in r.output and SITES_FILE in r.output
    same = CliRunner().invoke(main, ["diff", "--no-progress", copy, run_dir])
    assert same.exit_code == 0, same.output
