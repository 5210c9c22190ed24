"""HF GPT-2 on CUDA with SDPA: verdicts on a real model (run with tools/gpu/run_gpu_tests.py).

The SDPA variants return RNG seed and offset tensors that change on every call; they
are recorded as ``volatile`` and never named as the divergence. Identical runs must
diff equal, and a perturbed LayerNorm weight of a middle layer must be named at the
first kernel that reads it.
"""

from __future__ import annotations

import os

import pytest
import torch

import aoti_debug
from aoti_debug.compare import diff as compare
from tests.conftest import dump_dir_restored, only_run, records

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _gpt2(dtype):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=3, n_embd=128, n_head=4, vocab_size=512, n_positions=64,
                     attn_implementation="sdpa")
    return GPT2LMHeadModel(cfg).cuda().to(dtype).eval()


class _Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids).logits


def _backend(name):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel({"efficient": SDPBackend.EFFICIENT_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[name])


# (Not flash attention: it takes no attention mask, and HF GPT-2 passes one under Dynamo.)
CASES = [("efficient", torch.float32, "python"), ("efficient", torch.float32, "cpp"),
         ("efficient", torch.float16, "python")]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{str(c[1])[6:]}-{c[2]}")
def gpt2_runs(request, tmp_path_factory):
    backend, dtype, wrapper = request.param
    root = tmp_path_factory.mktemp(f"gpt2_{backend}_{wrapper}")
    model = _Logits(_gpt2(dtype))
    ids = torch.randint(0, 512, (2, 32), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    torch._dynamo.reset()
    config = torch._inductor.config.patch(cpp_wrapper=(wrapper == "cpp"))

    def run(name):
        path = str(root / name)
        os.environ["AOTI_DEBUG_DIR"] = path
        with torch.no_grad(), _backend(backend), config, aoti_debug.enabled(level="stats", dump_dir=path):
            out = compiled(ids)
        aoti_debug.flush()
        torch.cuda.synchronize()
        return out, only_run(path)

    with dump_dir_restored():
        compiled = torch.compile(model)
        out, a = run("a")
        _, b = run("b")
        norm = model.model.transformer.h[1].ln_1.weight
        with torch.no_grad():
            norm.mul_(1.01)
        _, p = run("perturbed")
        with torch.no_grad():
            norm.div_(1.01)
    with torch.no_grad(), _backend(backend):
        expected = model(ids)
    return request.param, out, expected, a, b, p, norm


def test_compiled_matches_eager(gpt2_runs):
    (_backend_name, dtype, _wrapper), out, expected, *_ = gpt2_runs
    tol = 1e-3 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out, expected, atol=tol, rtol=tol)


def test_sdpa_seeds_are_volatile(gpt2_runs):
    (backend, _dtype, wrapper), _out, _exp, a, *_ = gpt2_runs
    recs = records(a)
    assert recs, f"{wrapper} wrapper recorded nothing"
    sdpa = [r for r in recs if "scaled_dot_product" in r["op"] and r["phase"] == "after"]
    assert sdpa, {r["op"] for r in recs}
    volatile = [r for r in sdpa if r.get("volatile")]
    assert volatile, sdpa
    assert all(("RNG" in r["volatile"]) or ("unused" in r["volatile"]) or ("debug" in r["volatile"])
               for r in volatile)
    # The attention output itself is compared.
    assert any(not r.get("volatile") and r["kind"] == "tensor" for r in sdpa)


def test_identical_runs_diff_equal(gpt2_runs):
    *_, a, b, _p, _norm = gpt2_runs
    result = compare(a, b)
    assert result, str(result)


def test_perturbed_norm_named_at_first_reader(gpt2_runs):
    *_, a, _b, p, norm = gpt2_runs
    result = compare(p, a)
    first = result.first_divergence
    assert first is not None and first.kind == "input", str(result)
    assert "scaled_dot_product" not in first.op, str(first)
    # The divergent input is the layer-1 ln_1 weight: same shape, its values scaled by 1.01.
    bad = [rc for rc in result.records if rc.first and rc.a is not None and rc.a.phase == "before"]
    assert any(rc.a.shape == list(norm.shape) for rc in bad), [(rc.a.arg, rc.a.shape) for rc in bad]
    assert "layer_norm" in first.kernel or "native_layer_norm" in first.kernel or "red_fused" in first.kernel, first
