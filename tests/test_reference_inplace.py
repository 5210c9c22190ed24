"""In-place updates of graph inputs against an fp64 reference.

An optimizer step, a KV-cache write or ``x.copy_(f(x))`` updates a tensor the graph was
given; nothing inside the graph may read the result, so the update is the only place
a wrong kernel shows. Inductor makes the kernel that computes the value write it into
the input itself; the reference records the node that updates it (``copy_``, ``add_``)
as that node's value, and the two pair:

- clean, the update is compared (``rounding``) and the diff is EQUAL;
- with the lowering the update uses made 1% wrong, the update is the first divergence,
  ``suspect``, in the Python and the C++ wrapper: never EQUAL.
"""

from __future__ import annotations

import pytest
import torch

import aoti_debug
from aoti_debug.compare import diff
from aoti_debug.compare.verdict import ROUNDING, SUSPECT
from tests.conftest import only_run
from tests.test_reference import wrong_lowering


def sgd_like_step(p: torch.Tensor, g: torch.Tensor) -> None:
    """Updates ``p`` in place and returns nothing: the update is the graph's only effect."""
    p.add_(torch.sqrt(g.abs()) * torch.sign(g), alpha=-0.1)


def transpose_in_place(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    x.copy_(torch.sqrt(x.transpose(-1, -2).abs()))
    return torch.tanh(x @ w)


def _dumps(root, fn, args, cpp: bool, bug: bool) -> tuple[str, str]:
    """(compiled run, fp64 reference) of ``fn`` on copies of ``args``."""
    torch._dynamo.reset()
    with torch._inductor.config.patch(cpp_wrapper=cpp):
        with (wrong_lowering(torch.ops.aten.sqrt.default, 1.01) if bug else _nothing()), \
                aoti_debug.enabled(level="save", dump_dir=str(root / "a")):
            torch.compile(fn)(*[a.clone() for a in args])
        torch._dynamo.reset()
        with aoti_debug.reference(dtype=torch.float64, dump_dir=str(root / "b")):
            torch.compile(fn)(*[a.clone() for a in args])
    torch._dynamo.reset()
    return only_run(str(root / "a")), only_run(str(root / "b"))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _args(fn):
    torch.manual_seed(0)
    if fn is sgd_like_step:
        return torch.randn(64, 32), torch.randn(64, 32)
    return torch.randn(16, 16), torch.randn(16, 16)


@pytest.mark.parametrize("cpp", [False, True], ids=["python", "cpp"])
@pytest.mark.parametrize("fn", [sgd_like_step, transpose_in_place], ids=["add_", "copy_"])
def test_a_clean_in_place_update_is_compared_and_rounding(tmp_path, fn, cpp):
    a, b = _dumps(tmp_path, fn, _args(fn), cpp, bug=False)
    result = diff(a, b, keep_passing=True)
    assert result.exit_code == 0, str(result)
    updated = [r for r in result.records
               if r.a is not None and r.a.phase == "after" and r.a.arg.startswith(("arg", "primals"))]
    assert updated and all(r.verdict == ROUNDING for r in updated), \
        [(r.a.arg if r.a else None, r.status, r.verdict) for r in result.records]


@pytest.mark.parametrize("cpp", [False, True], ids=["python", "cpp"])
@pytest.mark.parametrize("fn", [sgd_like_step, transpose_in_place], ids=["add_", "copy_"])
def test_a_wrong_in_place_update_is_the_first_divergence(tmp_path, fn, cpp):
    a, b = _dumps(tmp_path, fn, _args(fn), cpp, bug=True)
    result = diff(a, b)
    assert result.exit_code == 1, str(result)
    first = result.first_divergence
    assert first is not None and first.verdict == SUSPECT, str(result)
    # The update itself: in the kernel that writes the graph input.
    assert first.kind == "born" and any(o.startswith(("arg", "primals")) for o in first.outputs), str(result)
