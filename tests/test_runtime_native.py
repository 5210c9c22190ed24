"""The C++ runtime's numeric core, its parts stats.h and crc.h built alone and without
OpenMP (so large tensors go through their own std::threads): stats, checksum and the
zip CRC of large and odd-sized inputs, against the Python runtime and zlib."""

from __future__ import annotations

import os
import shutil
import subprocess
import zlib

import pytest
import torch

from aoti_debug.codegen import cpp_runtime
from aoti_debug.runtime.stats import tensor_stats

CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="needs a C++ compiler")

_HARNESS = r"""
#include "stats.h"
#include "crc.h"
#include <fstream>
#include <iterator>
using namespace aoti_debug_rt_1;
// argv: file dtype-code numel -> crc (serial), crc (parallel), checksum, stats
int main(int argc, char** argv) {
  std::ifstream f(argv[1], std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  int32_t dt = std::atoi(argv[2]);
  int64_t numel = std::atoll(argv[3]);
  Summary s;
  if (!summarize(bytes.data(), numel, dt, s)) return 3;
  std::printf("%08x %08x %016llx %.17g %.17g %.17g %.17g %.17g %lld %lld %d\n", crc32_of(bytes.data(), bytes.size()),
              crc32_parallel(bytes.data(), bytes.size()), static_cast<unsigned long long>(s.checksum), s.mn, s.mx,
              s.mean, s.sd, s.absmax, static_cast<long long>(s.nan), static_cast<long long>(s.inf), workers());
  return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    d = tmp_path_factory.mktemp("native")
    cpp_runtime.write_constants(str(d))
    (d / "main.cpp").write_text(_HARNESS)
    include = os.path.join(os.path.dirname(torch.__file__), "include")
    exe = str(d / "stats")
    proc = subprocess.run([CXX, "-std=c++17", "-O1", "-I", str(d), "-I", cpp_runtime.NATIVE_DIR, "-I", include,
                           str(d / "main.cpp"), "-o", exe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return exe, d


# c10::ScalarType codes (the runtime's kF32, kBF16, kI64).
_CODES = {torch.float32: 6, torch.bfloat16: 15, torch.int64: 4}


@pytest.mark.parametrize("numel,dtype", [(3_000_001, torch.float32), (5_000_003, torch.bfloat16),
                                         (1_100_001, torch.int64), (1000, torch.float32)])
def test_threaded_stats_checksum_and_crc_match_python(harness, numel, dtype):
    exe, d = harness
    g = torch.Generator().manual_seed(numel)
    t = (torch.randn(numel, generator=g) * 3 + 1).to(dtype) if dtype.is_floating_point else \
        torch.randint(-10**12, 10**12, (numel,), generator=g, dtype=dtype)
    if dtype.is_floating_point:
        t[7] = float("nan")
        t[numel // 2] = float("inf")
    raw = t.view(torch.uint8).numpy().tobytes() if t.element_size() > 1 else t.numpy().tobytes()
    path = d / f"t{numel}.bin"
    path.write_bytes(raw)
    out = subprocess.run([exe, str(path), str(_CODES[dtype]), str(numel)], capture_output=True, text=True, check=True)
    crc, crc_par, checksum, mn, mx, mean, sd, absmax, nan, inf, workers = out.stdout.split()
    assert int(crc, 16) == int(crc_par, 16) == zlib.crc32(raw)
    stats, expected_checksum = tensor_stats(t)
    assert checksum == expected_checksum
    assert (int(nan), int(inf)) == (stats.nan, stats.inf)
    assert (float(mn), float(mx), float(absmax)) == (stats.min, stats.max, stats.absmax)
    assert float(mean) == pytest.approx(stats.mean, rel=1e-9, abs=1e-9)
    assert float(sd) == pytest.approx(stats.std, rel=1e-9)
    assert int(workers) >= 1
