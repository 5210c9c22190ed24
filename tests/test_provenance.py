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
from aoti_debug.format.provenance import (SITES_FILE, Provenance, ValueOrigin, module_of, module_path, module_raw_of,
                                          parse_site_line, source_line)
from tests.conftest import only_run


@pytest.mark.parametrize("raw,want", [
    ("L['self'].model.transformer.h.0.ln_1", "model.transformer.h.0.ln_1"),  # Dynamo
    ("L['self'].layers[3].mlp", "layers.3.mlp"),
    ("L['self']._modules['encoder']._modules['0']", "encoder.0"),
    ("model.layers.1.mlp.down_proj", "model.layers.1.mlp.down_proj"),  # torch.export
    ("L['self']", ""),
    ("L['mod'].fc", "fc"),
    ("L['fn'].1", "1"),  # torch.compile of an nn.Sequential
    ("G['m'].model.layers.0.input_layernorm", "model.layers.0.input_layernorm"),  # a function around a global
    ("self.layers.0", "layers.0"),
    ("selfattn.q", "selfattn.q"),  # a module named like self is no prefix
])
def test_module_path_as_users_write_it(raw, want):
    assert module_path(raw) == want


ROPE = "G['__import_transformers_dot_models_dot_mistral_dot_modeling_mistral'].apply_rotary_pos_emb"


def _meta(*paths: str) -> dict:
    """An ``nn_module_stack`` as Dynamo writes it: id -> (source name, class), outermost first."""
    return {"nn_module_stack": {f"{140000 + i}": (p, torch.nn.Module) for i, p in enumerate(paths)}}


@pytest.mark.parametrize("stack,want", [
    # torch.compile(model): the module itself is L['self'] and never in the stack
    (("L['self'].model", "L['self'].model.layers.0", "L['self'].model.layers.0.input_layernorm"),
     "model.layers.0.input_layernorm"),
    # torch.compile(fn) where fn calls a global model: the outermost entry is that model
    (("G['m']", "G['m'].model", "G['m'].model.layers.0.input_layernorm"), "model.layers.0.input_layernorm"),
    (("G['m'].module", "G['m'].module.model", "G['m'].module.model.layers.0"), "model.layers.0"),
    # a model handed to the compiled function as an argument
    (("L['mod']", "L['mod'].model.layers.1.mlp"), "model.layers.1.mlp"),
    # a free function transformers lists as a module: its name and file, after its caller
    (("L['self'].model", "L['self'].model.layers.0.self_attn", ROPE),
     "model.layers.0.self_attn.apply_rotary_pos_emb (modeling_mistral.py)"),
    (("G['m']", "G['m'].model.layers.1.self_attn", ROPE),
     "model.layers.1.self_attn.apply_rotary_pos_emb (modeling_mistral.py)"),
    ((ROPE,), "apply_rotary_pos_emb (modeling_mistral.py)"),
    # torch.export: paths are relative to the exported module already
    (("", "model", "model.layers.0.input_layernorm"), "model.layers.0.input_layernorm"),
    ((), ""),
])
def test_module_of_names_the_module_as_the_user_knows_it(stack, want):
    meta = _meta(*stack)
    assert module_of(meta) == want
    assert module_raw_of(meta) == (stack[-1] if stack else "")


def test_export_stack_of_strings():
    """A deserialised export graph holds (path, class name) pairs of strings."""
    meta = {"nn_module_stack": {"L__self__": ("", "LogitsOnly"), "L__self___h_0": ("h.0", "Block")}}
    assert module_of(meta) == "h.0" and module_raw_of(meta) == "h.0"


@pytest.fixture(scope="module")
def llama_metas():
    """The FX node metas of a real transformers Llama, captured by Dynamo three ways:
    ``torch.compile(model)``, and a compiled function calling it as a global and as an argument."""
    from tests.real_models import llama

    m = llama()
    metas: dict[str, list[dict]] = {}

    def capture(name):
        def backend(gm, _example_inputs):
            metas[name] = [dict(n.meta) for n in gm.graph.nodes if n.op != "placeholder"]
            return gm
        return backend

    global _LLAMA
    _LLAMA = m.module

    def called_global(x):
        return _LLAMA(x)

    def called_argument(mod, x):
        return mod(x)

    with torch.no_grad():
        torch._dynamo.reset()
        torch.compile(m.module, backend=capture("module"))(*m.inputs)
        torch._dynamo.reset()
        torch.compile(called_global, backend=capture("global"))(*m.inputs)
        torch._dynamo.reset()
        torch.compile(called_argument, backend=capture("argument"))(m.module, *m.inputs)
        torch._dynamo.reset()
    return metas


def test_real_llama_module_paths_agree_however_compiled(llama_metas):
    paths = {name: [module_of(meta) for meta in metas] for name, metas in llama_metas.items()}
    assert paths["module"] == paths["global"] == paths["argument"]  # so values pair across the three
    modules = set(paths["module"])
    assert "model.model.layers.0.input_layernorm" in modules and "model.lm_head" in modules
    raws = {module_raw_of(meta) for meta in llama_metas["global"]}
    assert "G['_LLAMA'].model.model.layers.0.input_layernorm" in raws
    assert not any(p.startswith(("L[", "G", "L.", "self")) for p in modules), sorted(modules)
    rope = sorted(p for p in modules if "apply_rotary_pos_emb" in p)
    if any("__import_" in r for r in raws):  # transformers lists the function in the stack
        assert rope == [f"model.model.layers.{i}.self_attn.apply_rotary_pos_emb (modeling_llama.py)"
                        for i in range(2)], rope


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
    assert norm[0].module_raw == "L['fn'].1"  # Dynamo's own name, for tools
    assert run.info.graphs["graph0"]["sites"]  # merged into run.json's view, as the contract says


# Other sizes than run_dir's model: Inductor's FX graph cache keys no module paths.
_NET = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.LayerNorm(6)).eval()


def _called_net(x):
    return _NET(x)


def test_reports_name_the_module_and_json_keeps_dynamos_name(tmp_path):
    """A compiled function around a global model: show and diff name ``1``, their JSON
    also ``G['_NET'].1``."""
    root = str(tmp_path / "dump")
    torch._dynamo.reset()
    with torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=root):
        torch.compile(_called_net)(torch.randn(4, 8))
    aoti_debug.flush()
    torch._dynamo.reset()
    run = only_run(root)
    shown = json.loads(CliRunner().invoke(main, ["show", run, "--format", "json"]).output)
    norm = [k for k in shown["runs"][0]["kernels"] if "layer_norm" in k["kernel"]]
    assert norm and norm[0]["module"] == "1" and norm[0]["module_raw"] == "G['_NET'].1", norm
    text = CliRunner().invoke(main, ["show", run]).output
    assert "G['_NET']" not in text and "G._NET" not in text
    result = aoti_debug.diff(run, run, keep_all=True).to_dict()
    rows = [r for r in result["records"] if r["module"] == "1"]
    assert rows and all(r["module_raw"] == "G['_NET'].1" for r in rows)


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
