"""Replay and repro on CUDA: a generated Triton kernel and a user-defined Triton kernel
(run with tools/gpu/run_gpu_tests.py -k replay).

- GPT-2 with ``aten.tanh``'s Triton lowering made 1e-4 too large: replaying every launch
  on the fp64 reference's inputs names the GELU Triton kernels ``culprit`` and nothing
  else; the repro of the first runs on the GPU without aoti_debug and shows the mismatch.
- A user-defined Triton kernel that adds a wrong constant, against a compile of the
  right one: the user kernel is the culprit, the Inductor kernel after it a propagator.
"""

from __future__ import annotations

import os

import pytest
import torch

import aoti_debug
from aoti_debug.replay import AGREES, CULPRIT, PROPAGATOR, UNJUDGED, replay
from aoti_debug.replay.repro import write_repro
from tests.conftest import dump_dir_restored, only_run
from tests.gpu.test_reference_gpu import _runs
from tests.test_replay import _launches, _run_repro

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

try:
    import triton
    import triton.language as tl

    @triton.jit
    def _shift(x_ptr, out_ptr, n, BIAS: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + BIAS, mask=mask)
except ImportError:  # pragma: no cover
    triton = None


def test_generated_triton_kernel_is_the_culprit(tmp_path_factory, tmp_path):
    runs = _runs(tmp_path_factory, torch.float32, "efficient")
    buggy, ref = runs.compiled("python", bug=True), runs.reference("fp64")
    result = replay(buggy, ref, launches=_launches(buggy))
    print(result)
    culprits = [r for r in result.launches if r.verdict == CULPRIT]
    assert culprits and all(r.kernel.startswith("triton_") for r in culprits), str(result)
    modules = [r.module for r in culprits]
    assert "model.transformer.h.0.mlp.act" in modules and all(m.endswith(".mlp.act") for m in modules), str(result)
    assert {r.verdict for r in result.launches if r.launch < culprits[0].launch} <= {AGREES, UNJUDGED}
    assert any(r.verdict == PROPAGATOR for r in result.launches), str(result)
    clean = replay(runs.compiled("python"), ref, launches=_launches(runs.compiled("python")))
    assert not clean.culprits, str(clean)
    out = write_repro(buggy, culprits[0].launch, str(tmp_path / "repro"), reference=ref)
    proc = _run_repro(out, str(tmp_path))
    assert proc.returncode == 1 and "MISMATCH" in proc.stdout, proc.stdout + proc.stderr


class _UserModel(torch.nn.Module):
    def __init__(self, bias: float):
        super().__init__()
        self.bias = bias

    def forward(self, x):
        a = torch.sin(x)
        out = torch.empty_like(a)
        n = out.numel()
        _shift[(triton.cdiv(n, 128),)](a, out, n, BIAS=self.bias, BLOCK=128)
        return torch.relu(out) * 3


@pytest.mark.skipif(triton is None, reason="needs triton")
def test_user_triton_kernel_is_the_culprit(tmp_path):
    x = torch.randn(4096, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    dumps = {}
    for name, bias in (("wrong", 1e-3), ("right", 0.0)):
        d = str(tmp_path / name)
        torch._dynamo.reset()
        with dump_dir_restored(), aoti_debug.enabled(level="save", dump_dir=d):
            torch.compile(_UserModel(bias))(x)
        dumps[name] = only_run(d)
    result = replay(dumps["wrong"], dumps["right"], launches=_launches(dumps["wrong"]))
    print(result)
    verdicts = {r.kernel: r.verdict for r in result.launches}
    user = [k for k in verdicts if "shift" in k]
    assert user and verdicts[user[0]] == CULPRIT, str(result)
    assert PROPAGATOR in verdicts.values(), str(result)
    launch = next(r.launch for r in result.launches if r.kernel == user[0])
    out = write_repro(dumps["wrong"], launch, str(tmp_path / "repro"), reference=dumps["right"])
    assert os.path.isfile(os.path.join(out, "kernel.py"))
    proc = _run_repro(out, str(tmp_path))
    assert proc.returncode == 1 and "MISMATCH" in proc.stdout, proc.stdout + proc.stderr
