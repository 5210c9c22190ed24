// Stats and checksum of strided CPU tensors described by plain numbers: what the Python
// runtime (runtime/native_stats.py) calls through the library's C ABI, so that both
// runtimes summarise a CPU tensor with the same code (cpu_values + summarize, as
// record_tensor does), not a second implementation in torch ops.
#ifndef AOTI_DEBUG_PART_CPU_SUMMARY_H
#define AOTI_DEBUG_PART_CPU_SUMMARY_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "constants.h"
#include "dtypes.h"
#include "host_tensor.h"
#include "stats.h"

namespace AOTI_DEBUG_NS {
namespace {

// Per tensor, `spec` holds data pointer, dtype (c10::ScalarType), ndim, ndim sizes and
// ndim strides (in elements). `stats` gets 8 doubles per tensor: min, max, mean, std,
// absmax, nan, inf and a status (0 summarised, 1 dtype not read here), NaN where no
// finite value exists; `checksums` one checksum each; `text` one line per tensor, the
// stats as JSON exactly as the C++ runtime's records spell them (stats_json; empty for
// a tensor not summarised), NUL-terminated. Returns -1 when `spec` is shorter than its
// tensors need or an ndim is out of range, -3 when `text_cap` is too small (nothing
// after it is written), else 0.
int cpu_summaries(const int64_t* spec, size_t spec_len, size_t count, double* stats, uint64_t* checksums,
                  char* text, size_t text_cap) {
  constexpr int64_t kMaxDim = 64;
  // Strided tensors are gathered here: kept per thread between calls (a fresh buffer
  // pays a page fault per 4 KiB and zeroes it, step after step), up to 64 MiB.
  constexpr size_t kKeepBytes = size_t{64} << 20;
  static thread_local std::vector<unsigned char> buf;
  struct Trim {
    ~Trim() {
      if (buf.capacity() > kKeepBytes) std::vector<unsigned char>().swap(buf);
    }
  } trim;
  size_t at = 0, text_at = 0;
  for (size_t i = 0; i < count; ++i) {
    if (at + 3 > spec_len) return -1;
    const void* data = reinterpret_cast<const void*>(static_cast<intptr_t>(spec[at]));
    int32_t dtype = static_cast<int32_t>(spec[at + 1]);
    int64_t nd = spec[at + 2];
    if (nd < 0 || nd > kMaxDim || at + 3 + 2 * static_cast<size_t>(nd) > spec_len) return -1;
    const int64_t* shape = spec + at + 3;
    const int64_t* stride = shape + nd;
    at += 3 + 2 * static_cast<size_t>(nd);
    double* out = stats + 8 * i;
    Summary sm;
    const TypeInfo* ti = type_info(dtype);
    int64_t numel = 1;
    for (int64_t d = 0; d < nd; ++d) numel *= shape[d];
    bool ok = ti != nullptr && (numel == 0 || data != nullptr);
    if (ok) {
      const void* values = numel == 0 ? ""
          : cpu_values(data, static_cast<size_t>(ti->unit * ti->units), shape, stride, static_cast<size_t>(nd), numel,
                       buf);
      ok = summarize(values, numel, dtype, sm);
    }
    out[0] = sm.mn;
    out[1] = sm.mx;
    out[2] = sm.mean;
    out[3] = sm.sd;
    out[4] = sm.absmax;
    out[5] = static_cast<double>(sm.nan);
    out[6] = static_cast<double>(sm.inf);
    out[7] = ok ? 0.0 : 1.0;
    checksums[i] = sm.checksum;
    std::string line = ok ? stats_json(sm) : std::string();
    if (text_at + line.size() + 2 > text_cap) return -3;
    std::memcpy(text + text_at, line.data(), line.size());
    text_at += line.size();
    text[text_at++] = '\n';
  }
  if (text_cap) text[text_at < text_cap ? text_at : text_cap - 1] = '\0';
  return 0;
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_CPU_SUMMARY_H
