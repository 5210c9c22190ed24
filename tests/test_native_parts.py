"""The C++ runtime's parts (aoti_debug/codegen/native), each built alone; what each level
gets; the constants generated from Python; the JIT runtime library (built once, with
a content-hash namespace, by concurrent builders without harm) and what a wrapper does
when that library is missing."""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from aoti_debug import config
from aoti_debug.codegen import cpp_runtime, native_library
from aoti_debug.format import schema
from tests.conftest import REPO

CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
INCLUDE = os.path.join(os.path.dirname(torch.__file__), "include")
SHIM = "#include <torch/csrc/inductor/aoti_torch/c/shim.h>\n"


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    """A folder with the generated constants.h (what builds pass with -I)."""
    if CXX is None:
        pytest.fail("no C++ compiler: the C++ runtime cannot be checked")
    d = tmp_path_factory.mktemp("native_gen")
    cpp_runtime.write_constants(str(d))
    return d


def compile_cpp(gen, source: str, name: str, *flags: str) -> subprocess.CompletedProcess:
    path = gen / f"{name}.cpp"
    path.write_text(source)
    return subprocess.run([CXX, "-std=c++17", "-Wall", "-I", str(gen), "-I", cpp_runtime.NATIVE_DIR, "-I", INCLUDE,
                           *flags, str(path)], capture_output=True, text=True, cwd=str(gen))


def build_exe(gen, source: str, name: str) -> str:
    exe = str(gen / name)
    proc = compile_cpp(gen, source, name, "-O1", "-Wno-unused-function", "-o", exe)
    assert proc.returncode == 0, proc.stderr[:3000]
    return exe


# --------------------------------------------------------------------------- each part alone
PARTS = sorted(n for n in os.listdir(cpp_runtime.NATIVE_DIR) if n.endswith(".h"))


def test_every_part_is_listed():
    listed = {n for n, _ in cpp_runtime.PARTS} | {cpp_runtime.INTERFACE, cpp_runtime.CPU_SUMMARY, cpp_runtime.CPU_RECORDS,
                                                   cpp_runtime.RING_RECORDS, cpp_runtime.GLUE_CUDA, cpp_runtime.GLUE_INLINE,
                                                   cpp_runtime.GLUE_LIBRARY, cpp_runtime.GLUE_LINKED,
                                                   cpp_runtime.CPU_VALUES, cpp_runtime.RING_SIDE, cpp_runtime.RING_EXPRESS}
    assert listed == set(PARTS)


@pytest.mark.parametrize("part", PARTS)
def test_part_builds_alone(gen, part):
    """Each part includes what it uses: a translation unit of that part alone compiles
    without a warning (its helpers may be unused there)."""
    # -I <Python.h's folder>
    python = native_library._python_flags()[1:] if part in (cpp_runtime.CPU_VALUES, cpp_runtime.RING_SIDE,
                                                            cpp_runtime.RING_EXPRESS) else ()
    proc = compile_cpp(gen, f'#include "{part}"\n', "alone_" + part.replace(".", "_"), "-fsyntax-only",
                       "-Wno-unused-function", *python)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr[-3000:]


def test_no_source_file_is_over_900_lines():
    for folder, exts in ((cpp_runtime.NATIVE_DIR, (".h", ".cpp")), (os.path.dirname(cpp_runtime.__file__), (".py",))):
        for name in os.listdir(folder):
            if name.endswith(exts):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    assert sum(1 for _ in f) <= 900, name


# --------------------------------------------------------------------------- generated constants
_CONSTANTS = r"""
#include "constants.h"
#include <cstdio>
using namespace AOTI_DEBUG_NS::schema;
int main() {
  std::printf("%d\n", kFormatVersion);
  for (int i = -1; i <= 5; ++i) std::printf("%s\n", level_name(i));
  std::printf("%d %d %d %d %d\n", kSave, kPrint, kNames, kStats, kOff);
  std::printf("%s %s %s %s %d %d %s\n", kRunFile, kManifestFile, kTensorDir, kOwnerFile, kMaxClaims, kRunIdLimit,
              kDefaultDumpDir);
  std::printf("%s %s %s %s %s %s\n", rec::kKernelCall, rec::kUninitialised, stat::kAbsmax, info::kWorldSize,
              env::kMaxBytes, env::kNamesArgs);
  return 0;
}
"""


def test_constants_are_generated_from_python(gen):
    from aoti_debug.format import writer

    out = subprocess.run([build_exe(gen, _CONSTANTS, "constants")], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0] == str(schema.FORMAT_VERSION)
    assert out[1:8] == ["off", *config.LEVELS.values(), "off"]
    assert out[8].split() == [str(config.LEVEL_NUMBERS[n]) for n in ("save", "print", "names", "stats", "off")]
    assert out[9].split() == [schema.RUN_FILE, schema.MANIFEST_FILE, schema.TENSOR_DIR, writer.OWNER_FILE,
                              str(writer.MAX_CLAIMS), str(writer.RUN_ID_LIMIT), config.DEFAULT_DIR]
    assert out[10].split() == ["kernel_call", "uninitialised", "absmax", "world_size", config.ENV_MAX_BYTES,
                               config.ENV_NAMES_ARGS]
    assert cpp_runtime.LEVEL_CODES == {n: k for k, n in config.LEVELS.items() if n != "off"}
    text = cpp_runtime.constants_header()
    for f in schema.Record.__dataclass_fields__:
        if f in schema.REFERENCE_ONLY_FIELDS:  # written by the eager reference only
            assert f'= "{f}";' not in text, f
        else:
            assert f'= "{f}";' in text, f


def test_namespace_is_a_hash_of_the_sources(tmp_path):
    copy = tmp_path / "native"
    shutil.copytree(cpp_runtime.NATIVE_DIR, copy)
    assert cpp_runtime.content_namespace(str(copy)) == cpp_runtime.abi_namespace()
    stats = copy / "stats.h"
    stats.write_text(stats.read_text() + "\n// changed\n")
    changed = cpp_runtime.content_namespace(str(copy))
    assert changed != cpp_runtime.abi_namespace() and changed.startswith("aoti_debug_")
    assert f"#define AOTI_DEBUG_NS {cpp_runtime.abi_namespace()}" in cpp_runtime.constants_header()


# --------------------------------------------------------------------------- json.h, text.h alone
_TEXT = r"""
#include "json.h"
#include "text.h"
#include <cstdio>
#include <cstdlib>
#include <string>
using namespace AOTI_DEBUG_NS;
// json S... | double X... | stat X... | fmt6 X... | sanitize LIMIT S...
int main(int argc, char** argv) {
  std::string mode = argv[1];
  for (int i = 2 + (mode == "sanitize"); i < argc; ++i) {
    std::string out;
    if (mode == "json") json_str(out, argv[i]);
    if (mode == "double") out = fmt_double(std::strtod(argv[i], nullptr));
    if (mode == "stat") json_stat(out, std::strtod(argv[i], nullptr));
    if (mode == "fmt6") out = fmt6(std::strtod(argv[i], nullptr));
    if (mode == "sanitize") out = sanitize(argv[i], std::atoi(argv[2]));
    std::printf("%s\n", out.c_str());
  }
  return 0;
}
"""

STRINGS = ["plain", 'quo"te', "back\\slash", "tab\tnew\nline\r", "\x01\x1f", "é ü 😀", "a/b:c d", "..x..", "___"]
#: Long ones: json_str scans eight bytes at a time, then byte by byte.
LONG_STRINGS = [f"cpp_fused_add_native_layer_norm_{c}_view_12345678" for c in ('"', "\\", "\n", "\x1f", "\x7f", "é")] + \
    ["é" * 9 + '"' + "x" * 9, "a" * 64, "b" * 7 + "\t", "c" + "~" * 15 + "\\"]


def test_json_and_names_as_python_writes_them(gen):
    exe = build_exe(gen, _TEXT, "text")

    def run(*args):
        return subprocess.run([exe, *args], capture_output=True, check=True).stdout.decode().split("\n")[:-1]

    assert [json.loads(x) for x in run("json", *STRINGS)] == STRINGS
    assert [json.loads(x) for x in run("json", *LONG_STRINGS)] == LONG_STRINGS
    doubles = ["0.1", "1e-300", "123456789.125", "-0.0", "3.0", "1e22", "2.5e-05", "1.7976931348623157e308"]
    assert run("double", *doubles) == [repr(float(x)) for x in doubles]
    # One policy for non-finite values: what format.schema.Stats.to_dict writes, strict JSON.
    stats = ["1.5", "inf", "-inf", "nan"]
    want = [json.dumps(v) for v in schema.Stats(min=1.5, max=float("inf"), mean=float("-inf")).to_dict().values()][:3]
    assert run("stat", *stats) == [*want, "null"]
    assert [json.loads(x, parse_constant=lambda c: pytest.fail(c)) for x in run("stat", *stats)] == [1.5, "inf", "-inf", None]
    # the print lines' numbers: Python's f"{v:.6g}", "-" for NaN
    numbers = ["0.1", "-0.0", "0", "1e-05", "0.0001", "123456", "1234567", "123456.5", "999999.5", "2.5e-300",
               "1.7976931348623157e308", "inf", "-inf", "nan", "-0.000123456789", "3.0000005", "1e16"]
    assert run("fmt6", *numbers) == [f"{float(x):.6g}" if x != "nan" else "-" for x in numbers]
    for limit in (80, 40, 3):
        assert run("sanitize", str(limit), *STRINGS) == [schema.sanitize(s, limit) for s in STRINGS]


# --------------------------------------------------------------------------- sources.h alone
_SOURCES = r"""
#include "sources.h"
#include <cstdio>
using namespace AOTI_DEBUG_NS;
// run_dir wrapper.cpp: copies the wrapper into run_dir (opened as a descriptor) and prints
// run.json's hashes ("" where refused) and the warning.
int main(int argc, char** argv) {
  Shared& S = shared();
  S.path = argv[1];
  S.dir_fd = ::open(argv[1], O_RDONLY | O_DIRECTORY);
  std::string copies = copy_sources(S, "graph0", argv[2]);
  std::printf("%s\n", copies.c_str());
  return 0;
}
"""


def test_cpp_source_copies_never_go_through_a_link(gen, tmp_path):
    """The C++ runtime's copies of a wrapper (native/sources.h) are made through the run
    directory's descriptor: a link planted at sources/ or sources/<graph>/ is refused
    with one warning, a link at a copy's name is replaced."""
    import hashlib

    exe = build_exe(gen, _SOURCES, "sources")
    target = tmp_path / "elsewhere"
    target.mkdir()
    wrapper = tmp_path / "gen" / "cabc.cpp"
    wrapper.parent.mkdir()
    wrapper.write_text("// generated wrapper\n")
    (wrapper.parent / "kernels.cpp").write_text("// its kernels\n")

    def copy(run):
        proc = subprocess.run([exe, str(run), str(wrapper)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip(), proc.stderr

    planted = tmp_path / "run1"
    planted.mkdir()
    os.symlink(target, planted / "sources")
    out, err = copy(planted)
    assert out == "" and "symbolic link" in err, err
    inner = tmp_path / "run2"
    (inner / "sources").mkdir(parents=True)
    os.symlink(target, inner / "sources" / "graph0")
    out, err = copy(inner)
    assert out == "" and "symbolic link" in err, err
    good = tmp_path / "run3"
    (good / "sources" / "graph0").mkdir(parents=True)
    os.symlink(target / "x.cpp", good / "sources" / "graph0" / "cabc.cpp")
    out, err = copy(good)
    want = {n: hashlib.sha256((wrapper.parent / n).read_bytes()).hexdigest() for n in ("cabc.cpp", "kernels.cpp")}
    assert json.loads(out) == want, (out, err)
    assert not (good / "sources" / "graph0" / "cabc.cpp").is_symlink()
    assert os.listdir(target) == []


# --------------------------------------------------------------------------- pt_writer.h alone
_PT = r"""
#include "pt_writer.h"
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
using namespace AOTI_DEBUG_NS;
// out.pt data.bin dtype zip64 dims...
int main(int argc, char** argv) {
  std::ifstream f(argv[2], std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const TypeInfo* ti = type_info(std::atoi(argv[3]));
  std::vector<int64_t> shape;
  int64_t numel = 1;
  for (int i = 5; i < argc; ++i) numel *= shape.emplace_back(std::atoll(argv[i]));
  std::string err = write_pt(argv[1], *ti, shape, numel, bytes.data(), bytes.size(), argv[4][0] == '1');
  std::printf("%s\n", err.c_str());
  return err.empty() ? 0 : 1;
}
"""
_DTYPE_CODES = {torch.float32: 6, torch.float16: 5, torch.bfloat16: 15, torch.int64: 4, torch.bool: 11,
                torch.uint8: 0, torch.complex64: 9, torch.float64: 7,
                # no typed storage class: pickled as torch.save does (_rebuild_tensor_v3)
                torch.uint16: 27, torch.uint32: 28, torch.uint64: 29, torch.float8_e4m3fn: 24, torch.float8_e5m2: 23}


@pytest.mark.parametrize("zip64", [False, True])
def test_pt_files_load_with_torch(gen, tmp_path, zip64):
    exe = build_exe(gen, _PT, "pt")
    g = torch.Generator().manual_seed(0)
    for dtype, code in _DTYPE_CODES.items():
        for shape in ((), (0,), (3, 5), (2, 1, 70000)):
            t = torch.randn(shape, generator=g, dtype=torch.float64)
            if dtype == torch.bool:
                t = t > 0
            elif dtype.itemsize == 1 and dtype.is_floating_point:
                t = t.to(dtype)  # float8: in range
            else:
                t = ((t.abs() if dtype in (torch.uint16, torch.uint32, torch.uint64) else t) * 100).to(dtype)
            data = tmp_path / "data.bin"
            data.write_bytes(t.reshape(-1).view(torch.uint8).numpy().tobytes())
            out = tmp_path / f"t-{code}-{len(shape)}-{int(zip64)}.pt"
            subprocess.run([exe, str(out), str(data), str(code), "1" if zip64 else "0", *map(str, shape)], check=True)
            for mmap in (False, True):
                loaded = torch.load(str(out), weights_only=True, mmap=mmap)
                assert loaded.dtype == dtype and loaded.shape == t.shape
                assert torch.equal(loaded.reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8)), (dtype, shape)


# --------------------------------------------------------------------------- levels
# A function each level's block must have or must not have.
_MARKERS = {"describe_args": "names", "summarize": "records", "ensure_run": "records", "record_side": "records",
            "crc32_of": "files", "write_pt": "files"}


def _defines(block: str, function: str):
    """A definition of ``function`` in ``block`` (a line that starts with its return type)."""
    return re.search(rf"^[A-Za-z][\w:<>*& ]* {function}\(", block, re.M)


@pytest.mark.parametrize("level", ["names", "print", "stats", "save"])
def test_each_level_gets_what_it_needs_and_it_builds(gen, level):
    block = cpp_runtime.inline_block("cpu", level)
    need = cpp_runtime.features(level)
    for marker, what in _MARKERS.items():
        assert bool(_defines(block, marker)) == (what == "names" or need[what]), (level, marker)
    assert block.count(f"#define {cpp_runtime.GUARD} 1") == 1
    # twice in one translation unit (AOTI's constant-folding graph splices its header in)
    proc = compile_cpp(gen, SHIM + block + block + "\nint main() { return 0; }\n", "level_" + level, "-fsyntax-only")
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr[-3000:]


#: The CUDA runtime API the GPU glue calls, as cuda_runtime_api.h declares it (CUDA 12), so
#: that the GPU wrapper's side is compiled on machines without CUDA too.
_CUDA_STUB = r"""
#pragma once
#include <cstddef>
enum cudaError { cudaSuccess = 0 };
typedef enum cudaError cudaError_t;
enum cudaMemcpyKind { cudaMemcpyDeviceToHost = 2 };
struct cudaDeviceProp { char name[256]; };
cudaError_t cudaDeviceSynchronize(void);
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMallocHost(void** ptr, size_t size);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device);
"""


@pytest.mark.parametrize("kind", ["library", "save", "names"])
def test_gpu_wrapper_side_builds(gen, kind):
    (gen / "cuda_runtime_api.h").write_text(_CUDA_STUB)
    block = (cpp_runtime.library_block("cuda", "/x/lib.so") if kind == "library"
             else cpp_runtime.inline_block("cuda", kind))
    assert "#define AOTI_DEBUG_CUDA 1" in block
    proc = compile_cpp(gen, SHIM + block + "\nint main() { return 0; }\n", "gpu_" + kind, "-fsyntax-only")
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr[:3000]


def test_jit_wrappers_get_only_the_glue():
    block = cpp_runtime.library_block("cpu", "/x/lib'\"s.so")
    assert '#define AOTI_DEBUG_LIBRARY "/x/lib\'\\"s.so"' in block
    for marker in _MARKERS:
        assert not _defines(block, marker), marker
    # The interface, the generated constants and the glue: a small part of the runtime.
    assert len(block) < len(cpp_runtime.inline_block("cpu", "save")) / 5 and "dlopen" in block


# --------------------------------------------------------------------------- the library
@pytest.fixture(scope="module")
def library():
    path = native_library.library_path()
    assert path and os.path.isfile(path), "the runtime library could not be built"
    return path


def test_library_exports_its_entry_points_and_shares_state(library):
    lib = ctypes.CDLL(library, mode=os.RTLD_LOCAL)
    lib.aoti_debug_rt_abi.restype = ctypes.c_char_p
    assert lib.aoti_debug_rt_abi().decode() == cpp_runtime.abi_namespace()
    for name in ("aoti_debug_rt_launch", "aoti_debug_rt_done", "aoti_debug_rt_call_end", "aoti_debug_rt_pending",
                 "aoti_debug_runtime_warnings",
                 "aoti_debug_runtime_exit_reason", "aoti_debug_runtime_flush", "aoti_debug_rt_cpu_summaries",
                 "aoti_debug_rt_cpu_records", "aoti_debug_rt_ring_records", "aoti_debug_rt_dtype_name",
                 "aoti_debug_rt_kept_launches", "aoti_debug_rt_write_pt"):
        assert hasattr(lib, name), name
    if shutil.which("nm"):
        symbols = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True).stdout
        ours = [line.split()[-1] for line in symbols.splitlines() if "aoti_debug" in line]
        unique = [line.split()[-1] for line in symbols.splitlines() if " u " in line and "aoti_debug" in line]
        # process-wide state as STB_GNU_UNIQUE objects (shared with AOTI .so files of the same sources)
        assert any("6sharedEvE1s" in s for s in unique) and any("6claimsEvE1c" in s for s in unique), unique
        assert any("4heldEvE1h" in s for s in unique), unique  # manifest.h's held lines
        c_names = sorted(s for s in ours if not s.startswith("_Z"))
        # the Python runtime's CPU side and planned CUDA side functions: built in where Python's headers are (here)
        assert native_library._python_flags()
        assert c_names == ["aoti_debug_rt_abi", "aoti_debug_rt_call_end", "aoti_debug_rt_cpu_records", "aoti_debug_rt_cpu_summaries",
                           "aoti_debug_rt_cpu_values_function", "aoti_debug_rt_done", "aoti_debug_rt_dtype_name", "aoti_debug_rt_kept_launches",
                           "aoti_debug_rt_launch", "aoti_debug_rt_pending", "aoti_debug_rt_ring_express_function", "aoti_debug_rt_ring_records",
                           "aoti_debug_rt_ring_side_function", "aoti_debug_rt_write_pt",
                           "aoti_debug_runtime_exit_reason", "aoti_debug_runtime_flush",
                           "aoti_debug_runtime_warnings"]


def test_concurrent_builders_make_one_library(tmp_path):
    """Two processes build into an empty cache at once: one library, complete, loadable."""
    code = ("import sys; sys.path.insert(0, {repo!r}); from aoti_debug.codegen import native_library as n; "
            "p = n.library_path(); import ctypes, os; ctypes.CDLL(p, mode=os.RTLD_LOCAL); print(p)").format(repo=REPO)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    paths = {out.strip() for out, _ in outs}
    assert len(paths) == 1
    folder = os.path.dirname(paths.pop())
    assert sorted(os.listdir(folder)) == ["build.lock", native_library.LIBRARY_FILE]  # no temporary left


def test_missing_library_warns_once_and_the_model_runs(tmp_path, monkeypatch, capfd):
    import aoti_debug

    monkeypatch.setattr(native_library, "library_path", lambda: str(tmp_path / "gone" / "libaoti_debug_rt.so"))
    monkeypatch.setenv("AOTI_DEBUG_DIR", str(tmp_path / "dump"))

    def f(x):
        return torch.relu(x) * 3 + 1

    x = torch.randn(8, 8)
    torch._dynamo.reset()
    with aoti_debug.enabled(level="save"), torch._inductor.config.patch(cpp_wrapper=True, fx_graph_cache=False):
        g = torch.compile(f)
        out1, out2 = g(x), g(x + 1)
    torch.testing.assert_close(out1, f(x))
    torch.testing.assert_close(out2, f(x + 1))
    err = capfd.readouterr().err
    assert err.count("cannot load the aoti_debug C++ runtime library") == 1, err[-3000:]
    assert not os.path.exists(tmp_path / "dump")
