"""The runtime objects that AOTInductor links into its packages (codegen/native_object.py):
built once per level's features and reused, linked into a .so that exports nothing new,
and left out (the runtime inlined) where a package cannot link them."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys

import pytest
import torch

from aoti_debug import config
from aoti_debug.codegen import cpp_emitter, cpp_runtime, native_object, patches
from aoti_debug.codegen.manager import Manager
from tests.conftest import REPO
from tests.test_cpp_emitter import LAUNCH, _Wrapper

CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
INCLUDE = os.path.join(os.path.dirname(torch.__file__), "include")


def test_each_level_links_the_object_of_its_features():
    # tensor files at every level that records: the flight recorder's trigger saves tensors
    assert {lvl: native_object.variant(lvl) for lvl in ("names", "print", "stats", "save")} == {
        "names": "names", "print": "files", "stats": "files", "save": "files"}
    names = {native_object.object_spec(v).name for v in ("names", "files")}
    assert len(names) == 2
    for name in names:
        assert name.startswith(cpp_runtime.abi_namespace() + "-obj-") and name.endswith(".o")
        block = cpp_runtime.linked_block("cpu", "stats", name)
        assert cpp_runtime.linked_objects(block + block) == [name]  # spliced twice: linked once
        # the glue (with the CUDA side that lends the stats kernels), not the runtime
        assert "entry_launch" not in block and len(block) < 22000
        stats = "stats-0123456789ab/pack-sm90-0123456789ab.o"
        with_stats = cpp_runtime.linked_block("cuda", "stats", name, stats=stats)
        assert cpp_runtime.linked_objects(with_stats + with_stats) == [name, stats]
        assert "#define AOTI_DEBUG_STATS_PACK_SYMBOL aoti_debug_stats_pack_v1" in with_stats
    with pytest.raises(ValueError):
        cpp_runtime.linked_block("cpu", "stats", "../../etc/x.o")
    with pytest.raises(ValueError):
        cpp_runtime.linked_block("cuda", "stats", name, stats="../x.o")


_CHILD = """
import sys
sys.path.insert(0, {repo!r})
from aoti_debug.codegen import native_library, native_object
if {forbid_build!r}:
    def no_build(spec):
        raise AssertionError("built again: " + spec.path)
    native_library.build = no_build
path = native_object.object_path("stats")
import os
st = os.stat(path)
print(path, st.st_ino, st.st_mtime_ns)
"""


def test_object_is_built_once_and_reused(tmp_path):
    """A fresh cache builds the object; a later process (and a level with the same
    features) finds it without compiling."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for forbid in (False, True):
        r = subprocess.run([sys.executable, "-c", _CHILD.format(repo=REPO, forbid_build=forbid)], env=env,
                           capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append(r.stdout.split())
    assert runs[0] == runs[1]  # same file, not rebuilt
    folder = os.path.dirname(runs[0][0])
    assert folder.startswith(str(tmp_path / "cache" / "aoti_debug"))
    assert sorted(os.listdir(folder)) == ["aoti_debug_rt-files.o", "build.lock"]  # no temporary left


@pytest.fixture(scope="module")
def files_object():
    if CXX is None:
        pytest.fail("no C++ compiler: the runtime object cannot be checked")
    path = native_object.object_path("save")
    assert path and os.path.isfile(path), "the runtime object could not be built"
    return path


_TU = """
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
{header}
extern "C" void model(AtenTensorHandle arg0_1, AtenTensorHandle buf1, AtenTensorHandle buf2, int64_t s0) {{
  static constexpr int64_t int_array_0[] = {{2, 3}};
  static constexpr int64_t int_array_1[] = {{3, 1}};
  {before}
  {after}
}}
"""


def _exports(tmp_path, header: str, objects: list[str], name: str) -> set[str]:
    """The dynamic symbols of a wrapper with ``header`` and two launch sites, linked with
    ``objects`` as AOTI links a package (-shared -fPIC, no visibility flags)."""
    m = Manager(config.make_compile_settings("save"))
    launch, wrapper = dataclasses.replace(LAUNCH), _Wrapper()
    before = cpp_emitter.site_line(m, launch, "before", wrapper)
    after = cpp_emitter.site_line(m, launch, "after", wrapper)
    src = tmp_path / f"{name}.cpp"
    src.write_text(_TU.format(header=header, before=before, after=after))
    so = str(tmp_path / f"{name}.so")
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    proc = subprocess.run([CXX, "-std=c++17", "-O1", "-fPIC", "-shared", "-Wall", "-I", INCLUDE, str(src), *objects,
                           "-o", so, "-Wl,--no-undefined", f"-L{torch_lib}", "-ltorch_cpu", "-lc10"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = subprocess.run(["nm", "-D", "--defined-only", so], capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_linked_package_exports_nothing_new(files_object, tmp_path):
    """A wrapper with the linked glue and the object exports no symbol of its own that the
    same wrapper with the runtime inlined does not: the entry points stay hidden; the
    process-wide state (STB_GNU_UNIQUE) and aoti_debug_runtime_warnings are exported."""
    if shutil.which("nm") is None:
        pytest.fail("nm is not on the PATH: cannot check the exports")
    name = native_object.object_spec("files").name
    linked = _exports(tmp_path, cpp_runtime.linked_block("cpu", "save", name), [files_object], "linked")
    inline = _exports(tmp_path, cpp_runtime.inline_block("cpu", "save"), [], "inline")
    ours = {s for s in linked if "aoti_debug" in s}
    # The accessors of the process-wide state have default visibility (their static is
    # then STB_GNU_UNIQUE); whether a copy of one is emitted out of line depends on the
    # inlining, so the inlined runtime may lack one. Nothing else may be new.
    accessors = ("6sharedEv", "6claimsEv", "12device_queueEv")
    assert {s for s in ours - inline if not s.endswith(accessors)} == set(), sorted(ours - inline)
    assert "aoti_debug_runtime_warnings" in ours
    ns = cpp_runtime.abi_namespace()
    assert {f"_ZZN{len(ns)}{ns}6sharedEvE1s", f"_ZZN{len(ns)}{ns}6claimsEvE1c"} <= ours
    assert not [s for s in linked if "linked_launch" in s or "linked_done" in s or "entry_" in s]
    # Beyond that, only instantiations of standard-library templates may differ (the
    # compiler inlines differently at -O3); libstdc++ declares them with default visibility.
    new = [s for s in linked - inline if not s.startswith(("_ZNSt", "_ZNKSt", "_ZSt", "_ZZNSt"))
           and not ("aoti_debug" in s and s.endswith(accessors))]
    assert not new, new


def test_packages_that_cannot_link_get_the_runtime_inline():
    import aoti_debug

    with aoti_debug.enabled(level="stats"):
        assert native_object.linkable("cpu") is None
        assert native_object.linkable("cuda") is None
        assert native_object.linkable("xpu") == "device xpu"
        with torch._inductor.config.patch({"aot_inductor.package_cpp_only": True}):
            assert native_object.linkable("cpu") == "aot_inductor.package_cpp_only"
        with torch._inductor.config.patch({"aot_inductor.emit_multi_arch_kernel": True}):
            assert native_object.linkable("cuda") == "aot_inductor.emit_multi_arch_kernel"
    assert not patches.installed()
    assert native_object.linkable("cpu") == "AotCodeCompiler.compile is not patched"


def test_link_step_gets_a_copy_and_the_list_is_left_clean(files_object):
    """While AotCodeCompiler compiles, a copy of the object is in the list its link step
    reads; afterwards (also after a failure) the list is as it was."""
    from torch._inductor.codecache import CUDACodeCache

    name = native_object.object_spec("files").name
    before = list(CUDACodeCache.aot_kernels_o)
    with pytest.raises(RuntimeError, match="compile failed"):
        with native_object.linked([name]):
            (copy,) = [p for p in CUDACodeCache.aot_kernels_o if p not in before]
            assert copy != files_object and open(copy, "rb").read() == open(files_object, "rb").read()
            raise RuntimeError("compile failed")
    assert CUDACodeCache.aot_kernels_o == before and not os.path.exists(copy)


def _cpuinfo(tmp_path, flags: str) -> str:
    path = tmp_path / f"cpuinfo-{flags.replace(' ', '-')}"
    path.write_text(f"processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 {flags}\n\nprocessor\t: 1\n")
    return str(path)


def test_isa_flags_from_cpuinfo_without_inductors_probe(tmp_path, monkeypatch):
    """The runtime's vector flags come from the CPU's flags, as Inductor would pick them,
    without Inductor's probe builds (20-40 s in a fresh cache, on CUDA models too)."""
    from torch._inductor import cpu_vec_isa

    from aoti_debug.codegen import native_library

    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.setattr(cpu_vec_isa, "pick_vec_isa", lambda: pytest.fail("Inductor's ISA probe ran"))
    avx512 = _cpuinfo(tmp_path, "avx2 fma f16c avx512f avx512dq avx512vl avx512bw")
    assert native_library._isa_flags(avx512) == ["-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma"]
    assert native_library._isa_flags(_cpuinfo(tmp_path, "avx2 fma f16c")) == ["-mavx2", "-mfma", "-mf16c"]
    assert native_library._isa_flags(_cpuinfo(tmp_path, "avx fma")) == []
    assert native_library._isa_flags(str(tmp_path / "missing")) == []
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert native_library._isa_flags(avx512) == ["-mavx2", "-mfma", "-mf16c"]
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    assert native_library._isa_flags(avx512) == []


def test_isa_flags_agree_with_inductor_here():
    """On this machine: the flags Inductor's own probe picks (x86 with AVX2 or AVX-512);
    elsewhere none (the compiler's defaults)."""
    import platform

    from torch._inductor import cpu_vec_isa

    from aoti_debug.codegen import native_library

    if platform.machine() not in ("x86_64", "AMD64"):
        assert native_library._isa_flags() == []
        return
    isa = cpu_vec_isa.pick_vec_isa()
    inductor = isa.build_arch_flags().split() if isa else []
    ours = native_library._isa_flags()
    # Extensions Inductor adds for its own matmul kernels (VNNI, AVX512-BF16, AMX on CPUs
    # that have them); the runtime's stats loops use none of them.
    unused = ("-mavx512bf16", "-mavx512vnni", "-mamx-tile", "-mamx-bf16", "-mamx-int8", "-mamx-fp16")
    inductor = [f for f in inductor if f not in unused]
    assert sorted(set(ours)) == sorted(set(inductor))
