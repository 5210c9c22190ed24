"""The fp64 verdict in the dtypes models run in: bfloat16 and float16, on real models.

transformers' Llama (RMSNorm through ``rsqrt``), GPT-2 (LayerNorm, whose decomposition
goes through ``rsqrt`` too) and BERT, random init, cast to bfloat16 or float16, run
under ``aoti_debug.reference(dtype=torch.float64)`` and compiled at level ``save``.
What must hold:

- compiled vs fp64 exits 0 for a clean compile, with a compared value in every module
  that materialised one, and at least as many values compared as the same model in
  float32 (a low-precision model is looked at no less);
- a 1% error injected into Inductor's ``aten.rsqrt`` lowering — 1.3 ulps of bfloat16,
  about 4x eager's own error — is named ``suspect`` at the first norm (exit 1), in the
  Python wrapper and the C++ wrapper, at ``save`` and at ``stats``.

Llama in bfloat16 in the Python wrapper is the fast tier; the rest is marked slow.
"""

from __future__ import annotations

import contextlib
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import aoti_debug  # noqa: E402
from aoti_debug.compare.verdict import SUSPECT  # noqa: E402
from tests.conftest import dump_dir_restored, only_run  # noqa: E402
from tests.real_models import BUILDERS  # noqa: E402
from tests.test_reference import wrong_lowering  # noqa: E402

#: The first norm each model computes: where an ``rsqrt`` bug is born.
FIRST_NORM = {"llama": "layers.0.input_layernorm", "gpt2": "h.0.ln_1", "bert": "embeddings.LayerNorm"}


def wrong_rsqrt(scale: float = 1.01):
    """A compiler bug: Inductor's lowering of ``aten.rsqrt`` made ``scale`` times too large
    (every RMSNorm and LayerNorm goes through it; :func:`wrong_lowering`)."""
    return wrong_lowering(torch.ops.aten.rsqrt.default, scale)


class Dumps:
    """Dumps of one model per dtype: its fp64 reference, compiled runs per (wrapper, level, bug)."""

    def __init__(self, root):
        self.root = root
        self._made: dict[tuple, str] = {}

    def _model(self, name: str, dtype: torch.dtype):
        m = BUILDERS[name]()
        m.module.to(dtype)
        return m

    def reference(self, name: str, dtype: torch.dtype) -> str:
        key = ("ref", name, dtype)
        if key not in self._made:
            m = self._model(name, dtype)
            d = str(self.root / f"{name}-{dtype}-ref".replace("torch.", ""))
            torch._dynamo.reset()
            with dump_dir_restored(), torch.no_grad(), \
                    aoti_debug.reference(dtype=torch.float64, dump_dir=d, level="save"):
                out = torch.compile(m.module)(*m.inputs)
            torch.testing.assert_close(out, m.eager(), rtol=0, atol=0)  # it is eager
            self._made[key] = only_run(d)
        return self._made[key]

    def compiled(self, name: str, dtype: torch.dtype, wrapper: str = "python", level: str = "save",
                 bug: bool = False) -> str:
        key = (name, dtype, wrapper, level, bug)
        if key not in self._made:
            m = self._model(name, dtype)
            tag = f"{name}-{dtype}-{wrapper}-{level}{'-bug' if bug else ''}".replace("torch.", "")
            d = str(self.root / tag)
            torch._dynamo.reset()
            with dump_dir_restored(), torch.no_grad(), (wrong_rsqrt() if bug else contextlib.nullcontext()), \
                    aoti_debug.enabled(level=level, dump_dir=d):
                out = torch.compile(m.module, options={"cpp_wrapper": wrapper == "cpp"})(*m.inputs)
            if not bug:
                tol = 2e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-4
                torch.testing.assert_close(out, m.eager(), rtol=tol, atol=tol)
            self._made[key] = only_run(d)
        return self._made[key]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    return Dumps(tmp_path_factory.mktemp("dtypes"))


def _diff(dumps: Dumps, name: str, dtype: torch.dtype, **compiled) -> aoti_debug.compare.DiffResult:
    return aoti_debug.diff(dumps.compiled(name, dtype, **compiled), dumps.reference(name, dtype))


def _explain(result) -> str:
    worst = sorted((rc for rc in result.compared or result.records if rc.ratio is not None),
                   key=lambda rc: -rc.ratio)[:8]
    return f"{result}\n{result.coverage.line()}\n" + "\n".join(f"{rc} ratio {rc.ratio:.3g} {rc.module}"
                                                               for rc in worst)


def _assert_clean(result) -> None:
    assert result.exit_code == 0, _explain(result)
    assert not result.coverage.blind, result.coverage.blind_line()
    assert all(rc.verdict != SUSPECT for rc in result.records), _explain(result)


def _assert_named(result, name: str) -> None:
    assert result.exit_code == 1, _explain(result)
    first = result.first_divergence
    assert first is not None, _explain(result)
    assert first.module and first.module.endswith(FIRST_NORM[name]), (first.module, _explain(result))
    named = [rc for rc in result.records if rc.first and rc.verdict == SUSPECT]
    assert named, _explain(result)


LOW = [pytest.param("llama", torch.bfloat16, id="llama-bf16"),
       pytest.param("llama", torch.float16, id="llama-fp16", marks=pytest.mark.slow),
       pytest.param("gpt2", torch.bfloat16, id="gpt2-bf16", marks=pytest.mark.slow),
       pytest.param("gpt2", torch.float16, id="gpt2-fp16", marks=pytest.mark.slow),
       pytest.param("bert", torch.bfloat16, id="bert-bf16", marks=pytest.mark.slow)]


@pytest.mark.parametrize("name,dtype", LOW)
def test_clean_low_precision_compile_is_rounding_everywhere_it_looks(dumps, name, dtype):
    result = aoti_debug.diff(dumps.compiled(name, dtype), dumps.reference(name, dtype), keep_all=True)
    _assert_clean(result)
    assert result.coverage.compared > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_low_precision_is_looked_at_no_less_than_float32(dumps, name):
    low = _diff(dumps, name, torch.bfloat16)
    full = _diff(dumps, name, torch.float32)
    _assert_clean(full)
    assert low.coverage.compared >= full.coverage.compared, (low.coverage.line(), full.coverage.line())


@pytest.mark.parametrize("name,dtype,wrapper,level", [
    pytest.param("llama", torch.bfloat16, "python", "save", id="llama-bf16-python-save"),
    pytest.param("llama", torch.bfloat16, "python", "stats", id="llama-bf16-python-stats", marks=pytest.mark.slow),
    pytest.param("llama", torch.bfloat16, "cpp", "save", id="llama-bf16-cpp-save", marks=pytest.mark.slow),
    pytest.param("llama", torch.float16, "python", "save", id="llama-fp16-python-save", marks=pytest.mark.slow),
    pytest.param("gpt2", torch.bfloat16, "python", "save", id="gpt2-bf16-python-save", marks=pytest.mark.slow),
])
def test_one_percent_norm_bug_is_suspect_at_the_first_norm(dumps, name, dtype, wrapper, level):
    result = aoti_debug.diff(dumps.compiled(name, dtype, wrapper, level, bug=True), dumps.reference(name, dtype))
    _assert_named(result, name)
