"""Where NaN/Inf are born: ``find_births`` on hand-made records, and ``aoti-debug show``
on real compiled models (a causal mask then ``log`` of a negative; a matmul overflowing
to Inf then a LayerNorm making NaN)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from click.testing import CliRunner

import aoti_debug
from aoti_debug.cli import main
from aoti_debug.compare.births import Birth, Births, find_births, source_ops
from aoti_debug.compare.show import graph_title, summarize
from aoti_debug.format.schema import Record, Stats
from tests.conftest import only_run, records


# -- hand-made records ---------------------------------------------------------------------
class _Run:
    """Builds a manifest: ``launch()`` then ``rec()`` per value, seq counted."""

    def __init__(self):
        self.records: list[Record] = []
        self.calls: dict[str, int] = {}
        self.n = 0

    def launch(self, kernel: str, graph: str = "graph0") -> tuple[int, str, str, int]:
        self.n += 1
        call = self.calls[kernel] = self.calls.get(kernel, -1) + 1
        return (self.n, graph, kernel, call)

    def rec(self, launch, phase: str, arg: str, nan: int = 0, inf: int = 0, **flags) -> Record:
        n, graph, kernel, call = launch
        stats = None if flags.get("uninitialised") else Stats(min=0.0, max=1.0, nan=nan, inf=inf)
        r = Record(seq=len(self.records) + 1, launch=n, graph=graph, wrapper="python", kernel=kernel, op=kernel,
                   kernel_call=call, phase=phase, arg=arg, role="input" if phase == "before" else "output",
                   dtype="float32", shape=[4], numel=4, stats=stats, **flags)
        self.records.append(r)
        return r

    def step(self, kernel: str, ins: dict[str, tuple[int, int]], outs: dict[str, tuple[int, int]],
             graph: str = "graph0"):
        """One launch: inputs {arg: (nan, inf)} before, outputs after."""
        la = self.launch(kernel, graph)
        for arg, (nan, inf) in ins.items():
            self.rec(la, "before", arg, nan, inf)
        for arg, (nan, inf) in outs.items():
            self.rec(la, "after", arg, nan, inf)
        return la


def test_mask_inf_birth_never_hides_a_later_nan_birth():
    run = _Run()
    run.step("cpp_fused_full_triu_0", {}, {"buf0": (0, 6)})                      # the causal mask
    run.step("extern_kernels.bmm", {"arg0_1": (0, 0), "buf0": (0, 6)}, {"buf1": (0, 0)})  # finite again
    run.step("cpp_fused_log_sub_1", {"buf1": (0, 0)}, {"buf2": (64, 0)})          # NaN born here
    run.step("cpp_fused_add_2", {"buf2": (64, 0)}, {"buf3": (64, 0)})             # inherited
    b = find_births(run.records)
    assert isinstance(b, Births) and b.complete and b.notes == []
    assert [x.kernel for x in b.nan] == ["cpp_fused_log_sub_1"]
    assert [x.kernel for x in b.inf] == ["cpp_fused_full_triu_0"]
    assert b.first_nan.launch == 3 and b.first_inf.launch == 1
    assert str(b).index("NaN born in cpp_fused_log_sub_1") < str(b).index("Inf born in cpp_fused_full_triu_0")
    nan = b.first_nan
    assert (nan.value, nan.graph, nan.op, nan.kernel_call, nan.outputs, nan.nan, nan.inf) == (
        "nan", "graph0", "cpp_fused_log_sub_1", 0, ["buf2"], 64, 0)
    assert nan.inputs == 1 and not nan.inputs_nan and not nan.inputs_inf and nan.inputs_held == "finite"
    assert nan.source == ["log_sub"] and not nan.candidate
    assert str(nan) == ("NaN born in launch 3 graph0 cpp_fused_log_sub_1 call 0: nan=64 in buf2 "
                        "(from finite inputs); from log_sub")
    assert b.first_inf.inputs_held == "none" and "no inputs recorded" in str(b.first_inf)
    d = json.loads(json.dumps(b.to_dict()))
    assert d["first_nan"]["kernel"] == "cpp_fused_log_sub_1" and d["first_inf"]["kernel"] == "cpp_fused_full_triu_0"
    assert [x["launch"] for x in d["nan"]] == [3] and d["phases"] == ["before", "after"]
    assert d["nan"][0]["outputs"] == ["buf2"] and d["nan"][0]["inputs_held"] == "finite"
    assert list(b.to_frame()["kernel"]) == ["cpp_fused_log_sub_1", "cpp_fused_full_triu_0"]


def test_nan_inherited_is_not_a_birth_and_inf_to_nan_is():
    run = _Run()
    run.step("extern_kernels.mm", {"a": (0, 0), "b": (0, 0)}, {"buf0": (0, 16)})   # overflow: Inf born
    run.step("cpp_fused_native_layer_norm_0", {"buf0": (0, 16)}, {"buf1": (16, 0)})  # inf - inf: NaN born
    run.step("cpp_fused_relu_1", {"buf1": (16, 0)}, {"buf2": (16, 0)})              # NaN passed on
    run.step("cpp_fused_mul_2", {"buf2": (16, 0)}, {"buf3": (8, 8)})                # NaN in; Inf out: Inf born
    b = find_births(run.records)
    assert [(x.kernel, x.inputs_held) for x in b.nan] == [("cpp_fused_native_layer_norm_0", "Inf")]
    assert "from inputs holding Inf" in str(b.first_nan)
    assert [(x.kernel, x.inputs_held) for x in b.inf] == [("extern_kernels.mm", "finite"), ("cpp_fused_mul_2", "NaN")]
    assert b.first_inf.source == ["extern_kernels.mm"]


def test_a_launch_making_both_is_listed_in_both():
    run = _Run()
    run.step("cpp_fused_div_0", {"x": (0, 0)}, {"buf0": (2, 3), "buf1": (0, 1)})
    b = find_births(run.records)
    assert [x.outputs for x in b.nan] == [["buf0"]] and [x.outputs for x in b.inf] == [["buf0", "buf1"]]
    assert b.first_nan.nan == 2 and b.first_inf.inf == 4
    assert b.first_nan.key == ("graph0", "cpp_fused_div_0", 0, "nan") != b.first_inf.key


def test_uninitialised_and_volatile_records_take_no_part():
    run = _Run()
    la = run.launch("cpp_fused_native_layer_norm_0")
    # An in/out buffer no launch had written: metadata only, whatever it held.
    bad = run.rec(la, "before", "buf2", uninitialised=True)
    bad.stats = Stats(nan=5, inf=5)   # even a writer that left stats on must not count
    run.rec(la, "before", "x")
    run.rec(la, "after", "buf2", nan=4)
    lb = run.launch("torch.ops.aten.seed.default")
    run.rec(lb, "after", "seed", inf=1, volatile="RNG seed")
    b = find_births(run.records)
    assert [(x.kernel, x.inputs, x.inputs_nan) for x in b.nan] == [("cpp_fused_native_layer_norm_0", 1, False)]
    assert b.inf == []


def test_threads_interleaved_are_grouped_by_graph_and_launch():
    run = _Run()
    a = run.launch("cpp_fused_log_0", "graph0")
    c = run.launch("cpp_fused_log_0", "graph1")
    d = run.launch("cpp_fused_exp_1", "graph1")
    # Thread 1 runs graph0 (finite input, NaN out), thread 2 runs graph1 (NaN in, NaN out;
    # then finite in, Inf out); their records interleave.
    run.rec(a, "before", "x")
    run.rec(c, "before", "x", nan=3)
    run.rec(c, "after", "buf0", nan=3)
    run.rec(d, "before", "buf0")
    run.rec(a, "after", "buf0", nan=1)
    run.rec(d, "after", "buf1", inf=2)
    b = find_births(run.records)
    assert [(x.graph, x.launch) for x in b.nan] == [("graph0", 1)]
    assert [(x.graph, x.launch) for x in b.inf] == [("graph1", 3)]
    # Launch order, whatever order the records came in.
    run2 = _Run()
    e, f = run2.launch("k_a"), run2.launch("k_b")
    run2.rec(f, "after", "o", nan=1)
    run2.rec(e, "after", "o", nan=1)
    assert [x.launch for x in find_births(run2.records, phases=("before", "after")).nan] == [1, 2]


def test_many_launches_stay_correct_past_the_window():
    run = _Run()
    for i in range(10000):
        run.step(f"k{i % 3}", {"x": (0, 0)}, {"y": (0, 0)})
    run.step("k_log", {"x": (0, 0)}, {"y": (1, 0)})
    run.step("k_use", {"y": (1, 0)}, {"z": (1, 0)})
    b = find_births(run.records)
    assert [x.launch for x in b.nan] == [10001]


def test_after_only_births_are_candidates():
    run = _Run()
    for kernel, outs in (("mask", (0, 6)), ("log", (4, 0)), ("add", (4, 0)), ("exp", (4, 2))):
        run.rec(run.launch(kernel), "after", "out", *outs)
    b = find_births(run.records)
    assert b.phases == ("after",) and not b.complete and "candidate" in b.notes[0]
    assert [(x.kernel, x.candidate) for x in b.nan] == [("log", True)]
    assert [x.kernel for x in b.inf] == ["mask"]
    assert str(b.first_nan).startswith("NaN first seen in launch 2 graph0 log call 0")
    assert "candidate" in str(b.first_nan)
    assert str(b) == "NaN first seen in log (launch 2); Inf first seen in mask (launch 1)"
    # run.json's phases win over what the records show.
    assert find_births(run.records, phases=["after"]).nan[0].candidate


def test_before_only_names_no_birth():
    run = _Run()
    run.rec(run.launch("log"), "before", "x")
    run.rec(run.launch("add"), "before", "y", nan=3)
    b = find_births(run.records)
    assert b.nan == [] and b.inf == [] and b.phases == ("before",)
    assert "no birth can be named" in b.notes[0] and str(b) == "no birth can be named"
    assert b.to_dict()["complete"] is False


def test_source_ops_hook():
    r = _Run()
    rec = r.rec(r.launch("triton_per_fused__softmax_native_layer_norm_12"), "after", "o")
    assert source_ops(rec) == ["_softmax_native_layer_norm"]
    rec.kernel, rec.op = "extern_kernels.addmm", "aten.addmm"
    assert source_ops(rec) == ["aten.addmm"]
    recs = [r.rec(r.launch("k"), "after", "o", nan=1)]
    b = find_births(recs, source=lambda rec: ["aten.log", "model.head"])
    assert b.first_nan.source == ["aten.log", "model.head"]
    assert isinstance(b.first_nan, Birth)


def test_graph_title():
    assert graph_title("graph3", {"kind": "backward", "compile_id": "0/0"}) == "graph3 (backward of 0/0)"
    assert graph_title("graph0", {"kind": "forward", "compile_id": "0/0"}) == "graph0 (forward 0/0)"
    assert graph_title("graph1", {"kind": "inference", "compile_id": "1/0"}) == "graph1 (inference 1/0)"
    assert graph_title("graph2", {"kind": "inference"}) == "graph2 (inference)"
    assert graph_title("graph4", {"file": "x.py"}) == graph_title("graph4", None) == "graph4"


# -- real compiled models ------------------------------------------------------------------
class _MaskThenLog(torch.nn.Module):
    """A causal mask built from -inf (an Inf birth by design), an encoder that keeps the
    values finite, then ``log`` of negatives: the NaN is born after the mask."""

    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, x):
        mask = torch.full((x.shape[1], x.shape[1]), float("-inf")).triu(1)
        return torch.log(self.enc(x, mask=mask, is_causal=True) - 10)


class _Overflow(torch.nn.Module):
    """A matmul overflowing float32 to Inf, then a LayerNorm making NaN from inf - inf."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.ln = torch.nn.LayerNorm(8)
        with torch.no_grad():
            self.lin.weight.fill_(1.0)
            self.lin.bias.zero_()

    def forward(self, x):
        return self.ln(self.lin(x))


def _dump(root: str, model: torch.nn.Module, x: torch.Tensor) -> str:
    torch.manual_seed(0)
    with torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=root):
        torch.compile(model.eval())(x)
        aoti_debug.flush()
    return only_run(root)


@pytest.fixture(scope="module")
def mask_run(tmp_path_factory):
    torch.manual_seed(0)
    return _dump(str(tmp_path_factory.mktemp("mask")), _MaskThenLog(), torch.randn(2, 4, 8))


@pytest.fixture(scope="module")
def overflow_run(tmp_path_factory):
    return _dump(str(tmp_path_factory.mktemp("overflow")), _Overflow(), torch.full((2, 8), 1e38))


def show(*args):
    result = CliRunner().invoke(main, ["show", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result


def _line(text: str, start: str) -> str:
    return next(l for l in text.splitlines() if l.startswith(start))


def test_show_names_the_nan_birth_before_the_mask(mask_run):
    r = show(mask_run)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    nan = next(i for i, l in enumerate(lines) if l.startswith("NaN born in launch "))
    inf = next(i for i, l in enumerate(lines) if l.startswith("Inf born in launch "))
    assert nan < inf, r.output
    assert "log" in lines[nan] and "(from finite inputs)" in lines[nan]
    assert "triu" in lines[inf] and "graph0 (inference 0/0)" in lines[inf]
    first_nan = _line(r.output, "first NaN: ")
    assert " graph0 (inference 0/0) cpp_fused_" in first_nan and "log" in first_nan and "after" in first_nan
    assert "triu" in _line(r.output, "first Inf: ")
    assert "1 graph(s) (graph0 (inference 0/0))" in r.output
    table = r.output.split("NaN/Inf births: ")[1].split("\n\n")[0].splitlines()
    assert table[0].startswith("1 NaN, 1 Inf")
    assert table[2].startswith("NaN ") and "log" in table[2] and "finite" in table[2]
    assert table[3].startswith("Inf ") and "triu" in table[3] and " none " in table[3]
    # The mask made Inf in the launch that launches first; the NaN still heads the summary.
    data = json.loads(show(mask_run, "--format", "json").output)["runs"][0]
    born = data["births"]
    assert born["first_inf"]["launch"] < born["first_nan"]["launch"]
    assert [b["kernel"] for b in born["nan"]] == [born["first_nan"]["kernel"]]
    assert "log" in born["first_nan"]["kernel"] and "triu" in born["first_inf"]["kernel"]
    assert born["first_nan"]["outputs"] and born["first_nan"]["graph"] == "graph0"
    assert data["first_nan"]["kernel"] == born["first_nan"]["kernel"]
    assert data["first_inf"]["kernel"] == born["first_inf"]["kernel"]
    assert data["graph_titles"] == {"graph0": "graph0 (inference 0/0)"}
    nan, inf = born["first_nan"], born["first_inf"]
    assert data["summary"].endswith(f"NaN born in {nan['kernel']} (launch {nan['launch']}); "
                                    f"Inf born in {inf['kernel']} (launch {inf['launch']})")
    k = {x["kernel"]: x for x in data["kernels"]}
    assert k[born["first_nan"]["kernel"]]["nan_births"] == 1 and k[born["first_inf"]["kernel"]]["inf_births"] == 1
    assert not summarize(mask_run)


def test_show_overflow_then_layer_norm(overflow_run):
    data = json.loads(show(overflow_run, "--format", "json").output)["runs"][0]["births"]
    assert [b["op"] for b in data["inf"]] == ["aten.addmm"], data
    assert data["inf"][0]["inputs_held"] == "finite"
    nan = data["first_nan"]
    assert "layer_norm" in nan["kernel"] and nan["inputs_held"] == "Inf" and not nan["inputs_nan"], data
    assert nan["launch"] > data["first_inf"]["launch"] and len(data["nan"]) == 1
    text = show(overflow_run).output
    assert _line(text, "NaN born in ").index(nan["kernel"]) and "from inputs holding Inf" in _line(text, "NaN born in ")
    assert "extern_kernels.addmm" in _line(text, "Inf born in ")
    assert text.index("NaN born in ") < text.index("Inf born in ")


def test_renderings_carry_the_births(mask_run, tmp_path):
    md = show(mask_run, "-f", "markdown").output
    assert "### NaN/Inf births: 1 NaN, 1 Inf" in md and "| born | launch | graph |" in md
    out = tmp_path / "show.html"
    assert show(mask_run, "-f", "html", "-o", out).exit_code == 0
    page = out.read_text()
    assert "<h2>NaN/Inf births: 1 NaN, 1 Inf" in page and page.count("<table>") == 2
    csv_text = show(mask_run, "-f", "csv").output
    assert "nan_births" in csv_text.splitlines()[0] and "inf_births" in csv_text.splitlines()[0]


def _partial_copy(run: str, dst, phase: str) -> str:
    """The run with only one side of each launch, as ``AOTI_DEBUG_PHASES=<phase>`` writes it."""
    out = os.path.join(str(dst), os.path.basename(run))
    shutil.copytree(run, out)
    info = json.load(open(os.path.join(out, "run.json")))
    info["phases"] = [phase]
    json.dump(info, open(os.path.join(out, "run.json"), "w"))
    with open(os.path.join(out, "manifest.jsonl"), "w") as f:
        for rec in records(run):
            if rec["phase"] == phase:
                f.write(json.dumps(rec) + "\n")
    return out


def test_one_sided_runs_say_what_cannot_be_concluded(mask_run, tmp_path):
    after = show(_partial_copy(mask_run, tmp_path / "a", "after")).output
    assert "note: the run recorded outputs only (phases=after)" in after
    assert "NaN/Inf birth candidates" in after and "NaN first seen in launch " in after
    assert "(phases=after), so whether it was born there is unknown" in _line(after, "first NaN: ")
    before = show(_partial_copy(mask_run, tmp_path / "b", "before")).output
    assert "note: the run recorded inputs only (phases=before): no birth can be named" in before
    assert "born in launch" not in before and "NaN/Inf births" not in before
    assert "(phases=before), so its writer is unknown" in _line(before, "first Inf: ")
