"""Llama (transformers, random init) in bfloat16 on CUDA against its fp64 reference (run
with tools/gpu/run_gpu_tests.py).

On the GPU the whole RMSNorm is one Triton reduction that stores only its bfloat16
output: a 1% error injected into Inductor's ``aten.rsqrt`` lowering is 1.3 ulps of
bfloat16 there, and must still be named ``suspect`` at the first norm, while a clean
compile is ``rounding`` everywhere it looks and looks in every module.
"""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

import aoti_debug
from aoti_debug.compare.verdict import SUSPECT
from tests.conftest import dump_dir_restored, only_run
from tests.real_models import llama
from tests.test_reference_dtypes import FIRST_NORM, wrong_rsqrt

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class Runs:
    def __init__(self, root):
        self.root = root
        m = llama()
        self.model = m.module.cuda().to(torch.bfloat16)
        self.inputs = tuple(x.cuda() for x in m.inputs)
        with torch.no_grad():
            self.eager = self.model(*self.inputs)
        self._dumps: dict[str, str] = {}

    def reference(self) -> str:
        if "ref" not in self._dumps:
            d = str(self.root / "ref")
            torch._dynamo.reset()
            with dump_dir_restored(), torch.no_grad(), \
                    aoti_debug.reference(dtype=torch.float64, dump_dir=d, level="save"):
                out = torch.compile(self.model)(*self.inputs)
            torch.testing.assert_close(out, self.eager, rtol=0, atol=0)
            self._dumps["ref"] = only_run(d)
        return self._dumps["ref"]

    def compiled(self, level: str = "save", bug: bool = False) -> str:
        name = f"{level}{'-bug' if bug else ''}"
        if name not in self._dumps:
            d = str(self.root / name)
            torch._dynamo.reset()
            with dump_dir_restored(), torch.no_grad(), (wrong_rsqrt() if bug else contextlib.nullcontext()), \
                    aoti_debug.enabled(level=level, dump_dir=d):
                torch.compile(self.model)(*self.inputs)
            self._dumps[name] = only_run(d)
        return self._dumps[name]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return Runs(tmp_path_factory.mktemp("llama_bf16"))


def _explain(result) -> str:
    worst = sorted((rc for rc in (result.compared or result.records) if rc.ratio is not None),
                   key=lambda rc: -rc.ratio)[:8]
    return f"{result}\n{result.coverage.line()}\n" + "\n".join(f"{rc} ratio {rc.ratio:.3g} {rc.module}"
                                                               for rc in worst)


def test_clean_bf16_llama_is_rounding_everywhere_it_looks(runs):
    result = aoti_debug.diff(runs.compiled(), runs.reference(), keep_all=True)
    assert result.exit_code == 0, _explain(result)
    assert not result.coverage.blind and result.coverage.compared >= 20, result.coverage.line()
    print(f"max ratio {max(rc.ratio for rc in result.compared if rc.ratio is not None):.3g}; "
          f"{result.coverage.line()}")


@pytest.mark.parametrize("level", ["save", "stats"])
def test_one_percent_rsqrt_bug_is_suspect_at_the_first_norm(runs, level):
    result = aoti_debug.diff(runs.compiled(level, bug=True), runs.reference())
    first = result.first_divergence
    assert result.exit_code == 1 and first is not None, _explain(result)
    assert first.module.endswith(FIRST_NORM["llama"]) and first.kernel.startswith("triton_"), str(first)
    assert any(rc.first and rc.verdict == SUSPECT for rc in result.records), _explain(result)


# ------------------------------------------------------------------------- AOTInductor
class Packages:
    """The bf16 Llama exported once; its fp64 reference (record_reference) and the dumps
    of its AOTInductor packages (clean, and with the rsqrt bug), each made on first use."""

    def __init__(self, runs: Runs):
        self.runs, self.root = runs, runs.root
        with torch.no_grad():
            self.program = torch.export.export(runs.model, runs.inputs)
        self._dumps: dict[str, str] = {}

    def reference(self) -> str:
        if "ref" not in self._dumps:
            d = str(self.root / "aoti-ref")
            with dump_dir_restored():
                out = aoti_debug.record_reference(self.program, self.runs.inputs, dump_dir=d, dtype=torch.float64)
            torch.testing.assert_close(out, self.runs.eager, rtol=0, atol=0)
            self._dumps["ref"] = only_run(d)
        return self._dumps["ref"]

    def package(self, bug: bool = False) -> str:
        name = "aoti-bug" if bug else "aoti"
        if name not in self._dumps:
            with (wrong_rsqrt() if bug else contextlib.nullcontext()), aoti_debug.enabled(level="save"):
                pkg = torch._inductor.aoti_compile_and_package(self.program,
                                                               package_path=str(self.root / f"{name}.pt2"))
            runner = torch._inductor.aoti_load_package(pkg)
            d = str(self.root / name)
            with dump_dir_restored(), torch.no_grad():
                os.environ["AOTI_DEBUG_DIR"] = d  # read by the .so when a run starts
                runner(*self.runs.inputs)
            self._dumps[name] = only_run(d)
        return self._dumps[name]


@pytest.fixture(scope="module")
def packages(runs):
    return Packages(runs)


def test_clean_bf16_llama_package_is_rounding_everywhere_it_looks(packages):
    result = aoti_debug.diff(packages.package(), packages.reference(), keep_all=True)
    assert result.exit_code == 0, _explain(result)
    assert not result.coverage.blind and result.coverage.compared >= 20, result.coverage.line()


def test_one_percent_rsqrt_bug_in_the_package_is_suspect_at_the_first_norm(packages):
    result = aoti_debug.diff(packages.package(bug=True), packages.reference())
    first = result.first_divergence
    assert result.exit_code == 1 and first is not None, _explain(result)
    assert first.module.endswith(FIRST_NORM["llama"]), str(first)
    assert any(rc.first and rc.verdict == SUSPECT for rc in result.records), _explain(result)
