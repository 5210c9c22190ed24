"""The patch table: a hook this torch lacks is an error you can read, never a silent
no-op; install is all or nothing and uninstall restores every original."""

from __future__ import annotations

import importlib

import pytest
import torch

import aoti_debug
from aoti_debug.codegen import inductor, patches
from aoti_debug.errors import UnsupportedTorchError


def _originals() -> dict:
    """What each table entry's class holds now (its own ``__dict__``, not inherited)."""
    out = {}
    for p in patches.PATCHES:
        try:
            cls = getattr(importlib.import_module(p.module), p.cls)
        except (ImportError, AttributeError):
            continue
        out[(p.owner, p.attr)] = cls.__dict__.get(p.attr)
    return out


def _assert_untouched(before: dict) -> None:
    after = _originals()
    changed = [k for k, v in before.items() if after.get(k) is not v]
    assert not changed, f"left patched: {changed}"
    assert not any(hasattr(v, "__aoti_debug_original__") for v in after.values())


def test_table_has_no_duplicates_and_every_entry_says_why():
    keys = [(p.owner, p.attr) for p in patches.PATCHES]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    for p in patches.PATCHES:
        assert p.owner.startswith("torch._inductor.") and ":" in p.owner, p.owner
        assert len(p.reason) > 20, p.name
        assert p.since is None or p.until is None or p.since < p.until, p.name


def test_every_required_patch_applies_on_this_torch():
    statuses = patches.report()
    assert not [s.patch.name for s in statuses if s.status == "missing"]
    assert inductor.TORCH_VERSION == patches.torch_version()
    # torch 2.13 has every hook of the table, the multi-output one included; an older torch
    # (2.11, the GPU machine) skips those its range leaves out, and only those.
    version = patches.torch_version()
    assert {s.status for s in statuses if s.patch.expected_on(version)} <= {"ready", "inherited"}
    assert {s.status for s in statuses if not s.patch.expected_on(version)} <= {"skipped", "ready", "inherited"}


def test_missing_required_hook_raises_and_patches_nothing(monkeypatch):
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    before = _originals()
    monkeypatch.delattr(PythonWrapperCodegen, "generate_kernel_call")
    with pytest.raises(UnsupportedTorchError) as e:
        aoti_debug.enable(level="stats")
    message = str(e.value)
    assert "torch._inductor.codegen.wrapper.PythonWrapperCodegen.generate_kernel_call" in message
    assert torch.__version__ in message and "Nothing was patched" in message
    assert not inductor.installed()
    assert inductor.active_settings() is None
    assert "aoti_debug" not in torch.compiler.config.cache_key_tag
    monkeypatch.undo()
    _assert_untouched(before)


def test_missing_hook_reported_by_report(monkeypatch):
    from torch._inductor.graph import GraphLowering

    monkeypatch.delattr(GraphLowering, "codegen_with_cpp_wrapper")
    missing = [s for s in patches.report() if s.status == "missing"]
    assert [s.patch.name for s in missing] == ["torch._inductor.graph.GraphLowering.codegen_with_cpp_wrapper"]
    assert "has no attribute" in missing[0].detail


class _Unpatched:
    def generate_kernel_call(self, *a, **k):
        pass


class _Child(_Unpatched):
    pass


def test_inherited_from_an_unpatched_class_is_missing(monkeypatch):
    """A class whose launch method resolves to a class outside the table would run
    uninstrumented: that is missing, not inherited."""
    entry = patches.Patch(f"{__name__}:_Child", "generate_kernel_call", lambda f: f, True, "a subclass entry")
    monkeypatch.setattr(patches, "PATCHES", (entry,))
    [status] = [s for s in patches.report() if s.patch is entry]
    assert status.status == "missing" and "inherits generate_kernel_call" in status.detail
    assert "_Unpatched, which is not patched" in status.detail


def test_optional_absent_hook_is_skipped_and_enable_works(monkeypatch):
    from torch._inductor.codegen import cpp_wrapper_cpu_array_ref

    monkeypatch.delattr(cpp_wrapper_cpu_array_ref, "CppWrapperCpuArrayRef")
    aoti_debug.enable(level="stats")
    assert inductor.installed()
    version = patches.torch_version()
    skipped = [s for s in patches.report() if s.status == "skipped" and s.patch.expected_on(version)]
    assert skipped and all(s.patch.cls == "CppWrapperCpuArrayRef" and not s.patch.required for s in skipped)
    assert all("no class CppWrapperCpuArrayRef" in s.detail and "optional" in s.detail for s in skipped)
    aoti_debug.disable()
    assert not inductor.installed()


@pytest.mark.parametrize("owner,attr,since", [
    ("torch._inductor.codegen.wrapper:PythonWrapperCodegen", "generate_extern_kernel_multi_out", "torch >= 2.13"),
    ("torch._inductor.ir:UserDefinedTritonKernel", "_codegen", "torch >= 2.13"),
])
def test_out_of_range_hook_is_skipped_not_missing(monkeypatch, owner, attr, since):
    """Hooks that torch 2.13 added are required there; torch 2.11 lacks them (checked on
    the GPU machine) and that is expected, not an error."""
    module, cls = owner.split(":")
    monkeypatch.delattr(getattr(importlib.import_module(module), cls), attr, raising=False)  # (absent on 2.11)
    name = f"{module}.{cls}.{attr}"
    now = {s.patch.name: s.status for s, _ in patches.resolve((2, 13))}
    assert now[name] == "missing"
    older = {s.patch.name: s for s, _ in patches.resolve((2, 11))}
    assert older[name].status == "skipped" and since in older[name].detail
    assert not [s for s in older.values() if s.status == "missing"]


def test_round_trip_restores_every_original():
    before = _originals()
    aoti_debug.enable(level="stats")
    aoti_debug.enable(level="names")  # idempotent: patched once, settings updated
    applied = [s for s in patches.report() if s.status == "applied"]
    assert applied and inductor.installed()
    now = _originals()
    for s in applied:
        key = (s.patch.owner, s.patch.attr)
        assert now[key] is not before[key] and now[key].__aoti_debug_original__ is before[key]
    assert inductor.active_settings().level == "names"
    aoti_debug.disable()
    aoti_debug.disable()
    assert not inductor.installed()
    _assert_untouched(before)


def test_patch_overwritten_from_outside_is_not_installed(monkeypatch):
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    aoti_debug.enable(level="stats")
    monkeypatch.setattr(PythonWrapperCodegen, "define_kernel", lambda *a, **k: None)
    assert not inductor.installed()


@pytest.mark.parametrize("level,sync,cpp,keeps", [
    ("stats", False, False, True),   # device work only: captured into the CUDA graph
    ("stats", True, False, False),   # a sync after every launch cannot be captured
    ("stats", False, True, False),   # the C++ runtime copies values to the host
    ("print", False, False, False),
    ("save", False, False, False),
    ("names", False, False, False),
])
def test_which_levels_keep_cuda_graphs(level, sync, cpp, keeps):
    from aoti_debug import config
    from aoti_debug.codegen.wrapper_lines import cudagraph_refusal

    reason = cudagraph_refusal(config.CompileSettings(level=level, sync=sync), cpp_wrapper=cpp)
    assert (reason is None) == keeps, reason
    if reason:
        assert f"level {level}" in reason and "without CUDA graphs" in reason
