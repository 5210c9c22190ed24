"""Verdicts on what real models do: unwritten memory, RNG outputs, graph kinds, threads.

Each case is the smallest piece of real model code that showed the defect (HF's
``apply_rotary_pos_emb`` and ``repeat_kv``, Inductor's dropout seeds, a compiled
training step, a model called from several threads), in the Python wrapper and with
``cpp_wrapper=True``. Compiled functions are shared per module: compiles are the cost.
"""

from __future__ import annotations

import os
import threading

import pytest
import torch

import aoti_debug
from aoti_debug.compare import diff as compare
from tests.conftest import dump_dir_restored, only_run, records

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

WRAPPERS = ("python", "cpp")


def _config(wrapper: str):
    return torch._inductor.config.patch(cpp_wrapper=(wrapper == "cpp"))


def _run(fn, args, wrapper: str, level: str, root: str):
    """Call a compiled ``fn`` once with its records going to ``root``; its run directory."""
    os.makedirs(root, exist_ok=True)
    with dump_dir_restored(), aoti_debug.enabled(level=level, dump_dir=root), _config(wrapper):
        out = fn(*args)
        aoti_debug.flush()
    return out, only_run(root)


# --------------------------------------------------------------------------- RoPE
def _rope(q, k, cos, sin, v):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

    q2, k2 = apply_rotary_pos_emb(q, k, cos, sin)
    return q2, k2, repeat_kv(v, 2)


def _rope_args():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, 4, 8, 16, generator=g), torch.randn(1, 2, 8, 16, generator=g),
            torch.randn(1, 8, 16, generator=g), torch.randn(1, 8, 16, generator=g),
            torch.randn(1, 2, 8, 16, generator=g))


@pytest.fixture(scope="module", params=WRAPPERS)
def rope_runs(request, tmp_path_factory):
    """Two identical runs of RoPE + repeat_kv, compiled once, at level save."""
    wrapper = request.param
    root = tmp_path_factory.mktemp(f"rope_{wrapper}")
    torch._dynamo.reset()
    args = _rope_args()
    with aoti_debug.enabled(level="save", dump_dir=str(root / "compile")), _config(wrapper):
        fn = torch.compile(_rope)
        fn(*args)
    # Garbage in the allocator: the buffers RoPE's cat writes in halves start dirty.
    junk = [torch.full((4096,), float("nan")) for _ in range(8)]
    del junk
    runs = [_run(fn, args, wrapper, "save", str(root / name))[1] for name in ("a", "b")]
    return wrapper, args, runs


def test_rope_identical_runs_are_equal(rope_runs):
    _wrapper, _args, (a, b) = rope_runs
    result = compare(a, b)
    assert result, str(result)
    assert result.counts.get("uninitialised", 0) >= 2, result.counts


def test_rope_unwritten_buffer_is_metadata_only(rope_runs):
    wrapper, _args, (a, _b) = rope_runs
    recs = records(a)
    uninit = [r for r in recs if r.get("uninitialised")]
    assert uninit, "the buffer that RoPE's cat writes in halves must be flagged"
    for r in uninit:
        assert r["phase"] == "before" and r["wrapper"] == wrapper
        assert "stats" not in r or r["stats"] is None
        assert "file" not in r and "checksum" not in r
        assert r["shape"] and r["dtype"] == "float32"
    # Everything the launch wrote is still recorded with values.
    after = [r for r in recs if r["phase"] == "after"]
    assert after and all(r.get("stats") for r in after)


def test_rope_show_reports_no_phantom_nan(rope_runs):
    from aoti_debug.compare import summarize

    _wrapper, _args, (a, _b) = rope_runs
    run = summarize(a).runs[0]
    assert run.first_nonfinite is None, run.first_nonfinite


# --------------------------------------------------------------------------- RNG outputs
def _dropout(x):
    return torch.nn.functional.dropout(x, 0.5, training=True) * 2


def test_dropout_seeds_are_volatile_and_listed_apart(tmp_path):
    torch._dynamo.reset()
    x = torch.randn(64)
    with aoti_debug.enabled(level="stats", dump_dir=str(tmp_path / "c")):
        fn = torch.compile(_dropout)
        fn(x)
    torch.manual_seed(1)
    _, a = _run(fn, (x,), "python", "stats", str(tmp_path / "a"))
    torch.manual_seed(2)  # other seeds: the dropout mask differs too, but not the seeds' record
    _, b = _run(fn, (x,), "python", "stats", str(tmp_path / "b"))
    seeds = [r for r in records(a) if r.get("volatile")]
    assert seeds and all("aten.randint" in r["volatile"] for r in seeds), records(a)
    result = compare(a, b)
    assert result.counts.get("volatile") == len(seeds)
    # The seeds are never named: the kernel that draws from them is where runs part.
    first = result.first_divergence
    assert first is not None and "randint" not in first.op, str(result)
    assert "native_dropout" in first.kernel

    from click.testing import CliRunner

    from aoti_debug.cli import main

    out = CliRunner().invoke(main, ["diff", a, b])
    assert out.exit_code == 1 and "not compared: 1 volatile" in out.output, out.output
    # What a user knows to be noise: the dropout kernel's mask differs with the seed.
    out = CliRunner().invoke(main, ["diff", a, b, "--ignore", "*native_dropout*", "--all"])
    assert out.exit_code == 0, out.output
    assert "ignored" in out.output and "volatile" in out.output


def test_volatile_outputs_from_op_schemas():
    from aoti_debug.codegen.inductor import _volatile_returns

    ops = torch.ops.aten
    eff = _volatile_returns(ops._scaled_dot_product_efficient_attention.default)
    assert sorted(eff) == [2, 3] and "RNG seed" in eff[2] and "RNG offset" in eff[3]
    flash = _volatile_returns(ops._scaled_dot_product_flash_attention.default)
    assert sorted(flash) == [6, 7, 8]
    cudnn = _volatile_returns(ops._scaled_dot_product_cudnn_attention.default)
    assert sorted(cudnn) == [6, 7, 8]
    assert sorted(_volatile_returns(ops.randint.low_out)) == [0]
    assert _volatile_returns(ops.mm.default) == {}
    assert _volatile_returns(ops._scaled_dot_product_flash_attention_for_cpu.default) == {}


# --------------------------------------------------------------------------- training step
class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    """A compiled training step (forward, loss, backward) run twice, then with a NaN weight."""
    root = tmp_path_factory.mktemp("train")
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = _Net()
    x, target = torch.randn(4, 8), torch.randn(4, 4)
    compiled = torch.compile(net)

    def step():
        net.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(compiled(x), target)
        loss.backward()
        return loss

    with aoti_debug.enabled(level="stats", dump_dir=str(root / "compile")):
        step()
    runs = [_run(step, (), "python", "stats", str(root / name))[1] for name in ("a", "b")]
    with torch.no_grad():
        net.norm.weight[3] = float("nan")
    runs.append(_run(step, (), "python", "stats", str(root / "nan"))[1])
    return runs


def test_training_graphs_are_labelled(training):
    from aoti_debug.format.reader import RunReader

    with RunReader(training[0]) as reader:
        graphs = reader.info.graphs
    kinds = sorted(g.get("kind") for g in graphs.values())
    assert kinds == ["backward", "forward"], graphs
    assert all(g.get("compile_id") for g in graphs.values()), graphs


def test_training_identical_steps_are_equal(training):
    result = compare(training[0], training[1])
    assert result, str(result)


def test_training_nan_weight_traced_to_first_reader(training):
    result = compare(training[2], training[0])
    first = result.first_divergence
    assert first is not None and first.kind == "input", str(result)
    # The LayerNorm weight is read first by the kernel fused from the norm.
    assert "native_layer_norm" in first.kernel or "layer_norm" in first.kernel, str(first)
    graph = first.graph
    from aoti_debug.format.reader import RunReader

    with RunReader(training[2]) as reader:
        assert reader.info.graphs[graph]["kind"] == "forward"


# --------------------------------------------------------------------------- threads
def _mlp(x, w1, w2):
    return torch.relu(x @ w1) @ w2 + 1


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_four_threads_records_belong_to_their_launch(wrapper, tmp_path):
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    w1, w2 = torch.randn(16, 32, generator=g), torch.randn(32, 8, generator=g)
    inputs = [torch.randn(4, 16, generator=g) for _ in range(4)]
    with aoti_debug.enabled(level="stats", dump_dir=str(tmp_path / "compile")), _config(wrapper):
        fn = torch.compile(_mlp)
        fn(inputs[0], w1, w2)

    errors: list[BaseException] = []

    def work(x):
        try:
            for _ in range(5):
                fn(x, w1, w2)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    with dump_dir_restored(), aoti_debug.enabled(level="stats", dump_dir=str(tmp_path / "run")), _config(wrapper):
        threads = [threading.Thread(target=work, args=(x,)) for x in inputs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        aoti_debug.flush()
    assert not errors
    run = only_run(str(tmp_path / "run"))
    recs = records(run)
    seqs = [r["seq"] for r in recs]
    assert len(seqs) == len(set(seqs)), "seq values repeat"
    by_launch: dict[int, set] = {}
    for r in recs:
        by_launch.setdefault(r["launch"], set()).add((r["graph"], r["kernel"], r["kernel_call"]))
    assert all(len(v) == 1 for v in by_launch.values()), "a launch holds records of two kernel calls"
    calls: dict[tuple, list[int]] = {}
    for (graph, kernel, call), in by_launch.values():
        calls.setdefault((graph, kernel), []).append(call)
    # Threads may each compile (Dynamo was reset): per graph, each call number once.
    for key, seen in calls.items():
        assert sorted(seen) == list(range(len(seen))), (key, sorted(seen))
    per_kernel: dict[str, int] = {}
    for (_graph, kernel), seen in calls.items():
        per_kernel[kernel] = per_kernel.get(kernel, 0) + len(seen)
    assert per_kernel == {"extern_kernels.mm": 40, **{k: 20 for k in per_kernel if k.startswith("cpp_fused")}} \
        or per_kernel.get("extern_kernels.mm") is None and set(per_kernel.values()) <= {20, 40}, per_kernel
    result = compare(run, run)
    assert result.exit_code == 0, str(result)


# --------------------------------------------------------------------------- births in a diff
def _log_model(x):
    return torch.log(x - 0.5) * 2


def test_diff_lists_births_one_run_has(tmp_path):
    from click.testing import CliRunner

    from aoti_debug.cli import main

    torch._dynamo.reset()
    with aoti_debug.enabled(level="stats", dump_dir=str(tmp_path / "c")):
        fn = torch.compile(_log_model)
        fn(torch.ones(8))
    _, clean = _run(fn, (torch.ones(8),), "python", "stats", str(tmp_path / "clean"))
    x = torch.ones(8)
    x[2] = 0.25  # log of a negative: a NaN is born in the compiled kernel
    _, bad = _run(fn, (x,), "python", "stats", str(tmp_path / "bad"))
    result = compare(bad, clean)
    assert result.births_a is not None and result.births_a.first_nan is not None
    assert result.births_b is not None and result.births_b.first_nan is None
    assert len(result.birth_differences) == 1 and result.birth_differences[0].startswith("only in run A: NaN born")
    out = CliRunner().invoke(main, ["diff", bad, clean])
    assert out.exit_code == 1 and "NaN/Inf births that differ:" in out.output, out.output
    out = CliRunner().invoke(main, ["diff", bad, clean, "--format", "json"])
    import json

    data = json.loads(out.output)
    assert data["births_a"]["nan"] and data["birth_differences"]
