"""The exact C++ the emitter writes around one launch (golden snippet), and that it
compiles against both runtime blocks a wrapper's header can get: the library glue
(JIT cpp_wrapper) and the inlined runtime of each level (AOTInductor)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess

import pytest
import torch

from aoti_debug import config
from aoti_debug.codegen import cpp_emitter, cpp_runtime
from aoti_debug.codegen.launch import Launch, LaunchArg
from aoti_debug.codegen.manager import Manager

CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
INCLUDE = os.path.join(os.path.dirname(torch.__file__), "include")

VIEW = "wrap_with_raii_handle_if_needed(reinterpret_tensor_wrapper(buf1, 2, int_array_0, int_array_1, 0L))"
LAUNCH = Launch(
    kernel="cpp_fused_add_0", op="cpp_fused_add_0", kind="cpp", source="add",
    args=[LaunchArg("arg0_1", "arg0_1", "input"),
          LaunchArg("buf0", VIEW, "inout"),
          LaunchArg("s0", "s0", "input", kind="symint"),
          LaunchArg("buf2", "buf2", "output", volatile=(("", "rng seed"),))],
)
NS = "::aoti_debug_rt_1"

GOLDEN_BEFORE = (
    f'{{ static constexpr {NS}::Arg aoti_debug_args[] = {{'
    f'{{"arg0_1", "input", "tensor", "arg0_1", 0, 0, ""}}, '
    f'{{"buf0", "inout", "tensor", "{VIEW}", 1, 0, ""}}, '
    f'{{"s0", "input", "symint", "s0", 2, 0, ""}}}}; '
    f'static constexpr {NS}::Site aoti_debug_site = {{"", "cpp_fused_add_0", "cpp_fused_add_0", '
    f'{NS}::schema::kStats, 0, 3, 3, aoti_debug_args, "", "before,after", __FILE__, __LINE__, "add", "", "", 0, "", 1}}; '
    f'{NS}::launch(aoti_debug_site, {{arg0_1, {NS}::view(buf1, 2, int_array_0, int_array_1, 0L), s0}}); }}'
)
GOLDEN_AFTER = (
    f'{{ static constexpr {NS}::Arg aoti_debug_args[] = {{'
    f'{{"buf0", "inout", "tensor", "{VIEW}", 0, 0, ""}}, '
    f'{{"buf2", "output", "tensor", "buf2", 1, 0, "rng seed"}}}}; '
    f'static constexpr {NS}::Site aoti_debug_site = {{"", "cpp_fused_add_0", "cpp_fused_add_0", '
    f'{NS}::schema::kStats, 0, 3, 2, aoti_debug_args, "", "before,after", __FILE__, __LINE__, "add", "", "", 0, "", 1}}; '
    f'{NS}::done(aoti_debug_site, {{{NS}::view(buf1, 2, int_array_0, int_array_1, 0L), buf2}}); }}'
)


class _Wrapper:
    """What the emitter needs of a wrapper here: somewhere to count its sites."""


def _lines(level: str) -> tuple[str, str]:
    m = Manager(config.make_compile_settings(level))
    launch, wrapper = dataclasses.replace(LAUNCH), _Wrapper()
    return cpp_emitter.site_line(m, launch, "before", wrapper), cpp_emitter.site_line(m, launch, "after", wrapper)


def test_cpp_emitter_golden():
    """One line per phase (so that ``__LINE__`` is the launch's line), the level as the
    generated enum names it, a view passed as plain data, inputs before and outputs after,
    and ``Site::defers`` last (level stats: the wrapper calls ``pending()``)."""
    before, after = _lines("stats")
    assert before == GOLDEN_BEFORE
    assert after == GOLDEN_AFTER
    assert "\n" not in before + after


@pytest.mark.parametrize("level", [name for name in config.LEVELS.values() if name != "off"])
def test_level_is_named_by_the_generated_enum(level):
    before, _ = _lines(level)
    assert f"{NS}::schema::{cpp_runtime.level_enum_name(level)}," in before
    assert f"{cpp_runtime.level_enum_name(level)} = {cpp_runtime.LEVEL_CODES[level]}" in cpp_runtime.constants_header()


_TU = """
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
{header}
void wrapper(AtenTensorHandle arg0_1, AtenTensorHandle buf1, AtenTensorHandle buf2, int64_t s0) {{
  static constexpr int64_t int_array_0[] = {{2, 3}};
  static constexpr int64_t int_array_1[] = {{3, 1}};
  {before}
  {after}
}}
"""


@pytest.mark.parametrize("block", ["library", "linked", "names", "stats", "print", "save"])
def test_emitted_lines_compile_against_the_runtime(tmp_path, block):
    if CXX is None:
        pytest.skip("needs a C++ compiler: g++ or c++ is not on the PATH")
    level = "stats" if block in ("library", "linked") else block
    if block == "library":
        header = cpp_runtime.library_block("cpu", "/nonexistent/libaoti_debug_rt.so")
    elif block == "linked":
        header = cpp_runtime.linked_block("cpu", level, "aoti_debug_0-obj-0/aoti_debug_rt-records.o")
    else:
        header = cpp_runtime.inline_block("cpu", level)
    before, after = _lines(level)
    src = tmp_path / "tu.cpp"
    src.write_text(_TU.format(header=header, before=before, after=after))
    proc = subprocess.run([CXX, "-std=c++17", "-fsyntax-only", "-Wall", "-Wno-unused-function", "-I", INCLUDE,
                           str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
