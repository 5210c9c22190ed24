// The manifest lines (and level print's lines) of one launch side of CPU values, for the
// Python runtime (runtime/cpu_records.py): the text its record dicts encode to
// (format.writer.encode_record, keys in protocol.record's order), built here from the
// values' metadata and, per value, the text of the fields that do not change from one
// call of the launch to the next, which the caller encodes once per launch site. Stats
// and checksum come from cpu_values + summarize, as in cpu_summary.h and the C++
// runtime's records: the three agree bit for bit.
#ifndef AOTI_DEBUG_PART_CPU_RECORDS_H
#define AOTI_DEBUG_PART_CPU_RECORDS_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "constants.h"
#include "dtypes.h"
#include "host_tensor.h"
#include "json.h"
#include "stats.h"
#include "text.h"

namespace AOTI_DEBUG_NS {
namespace {

// What one value of `spec` is (runtime/cpu_records.py spells the same numbers).
enum CpuItem : int64_t {
  kItemTensor = 0,  // a strided CPU tensor: metadata, stats, checksum
  kItemUnwritten = 1,  // a tensor no launch wrote yet: metadata only, "uninitialised"
  kItemInt = 2,     // a Python int, "kind": "scalar"
  kItemSymInt = 3,  // a Python int where codegen expected a symint, "kind": "symint"
  kItemNone = 4,    // None, "kind": "none"
};

struct CpuText {  // a run of bytes the caller owns
  const char* p;
  size_t n;
};

inline CpuText cpu_text(const int64_t* at) {
  return CpuText{reinterpret_cast<const char*>(static_cast<intptr_t>(at[0])), static_cast<size_t>(at[1])};
}

inline void put(std::string& o, CpuText t) { o.append(t.p, t.n); }

// Releases the GIL of the calling Python thread for as long as it lives, through the
// functions the caller passed (PyEval_SaveThread/PyEval_RestoreThread: this library
// does not link Python); does nothing without them.
class WithoutGil {
 public:
  WithoutGil(int64_t save, int64_t restore) : restore_(reinterpret_cast<void (*)(void*)>(restore)) {
    if (save && restore) state_ = reinterpret_cast<void* (*)()>(save)();
  }
  ~WithoutGil() {
    if (state_) restore_(state_);
  }
  WithoutGil(const WithoutGil&) = delete;
  WithoutGil& operator=(const WithoutGil&) = delete;

 private:
  void (*restore_)(void*);
  void* state_ = nullptr;
};

// The slots of `spec`'s header, in order (runtime/cpu_records.py writes them so and
// passes kCpuLayout: a caller written for another layout gets -5).
enum CpuSlot : size_t {
  kSlotLayout,      // kCpuLayout
  kSlotLength,      // the number of int64 in `spec`
  kSlotCount,       // values on the side
  kSlotSeq,         // the first value's record number
  kSlotLaunch,
  kSlotCall,        // the kernel call
  kSlotFd,          // the manifest's descriptor, -1: the lines go to the output buffer
  kSlotTexts,       // the side's texts (CpuTexts), and how many int64 they are
  kSlotTextsLen,
  kSlotSave,        // PyEval_SaveThread, 0: the GIL is kept
  kSlotRestore,     // PyEval_RestoreThread
  kSlotNogilBytes,  // tensor bytes above which the GIL is released
  kSlotOut,         // (pointer, capacity) of the output buffer
  kSlotCap,
  kSlotLinesEnd,    // written back: the end of the manifest lines in the buffer (0: written to fd)
  kSlotPrintEnd,    // written back: the end of the print lines in the buffer
  kSlotErrno,       // written back: errno of a failed write
  kCpuHeader
};
constexpr int64_t kCpuLayout = 2;

// A side's texts, (pointer, length) pairs the caller encodes once per launch site:
// [0] the record fields between "launch" and "kernel_call", [1] the print prefix
// ("[aoti_debug] <phase> <kernel> launch=", length 0: no print lines), then per value
// three: its fields after "kernel_call", its print text as a tensor (" <arg> (<role>) ")
// and as a scalar (" <arg> = ").
constexpr size_t kTextsHead = 4, kTextsValue = 6;

// The bytes of the tensors `spec` describes (the walk stops where `spec` is malformed:
// cpu_records checks it again).
uint64_t cpu_records_bytes(const int64_t* spec, size_t spec_len) {
  uint64_t total = 0;
  size_t at = kCpuHeader;
  for (int64_t i = 0; i < spec[kSlotCount] && at + 2 <= spec_len; ++i) {
    int64_t kind = spec[at];
    at += 2;
    if (kind == kItemInt || kind == kItemSymInt) {
      at += 1;
    } else if (kind == kItemTensor || kind == kItemUnwritten) {
      if (at + 3 > spec_len || spec[at + 2] < 0 || at + 3 + 2 * static_cast<size_t>(spec[at + 2]) > spec_len) break;
      const TypeInfo* ti = type_info(static_cast<int32_t>(spec[at + 1]));
      int64_t numel = 1;
      for (int64_t d = 0; d < spec[at + 2]; ++d) numel *= spec[at + 3 + d];
      if (ti && kind == kItemTensor) total += static_cast<uint64_t>(numel) * static_cast<uint64_t>(ti->unit * ti->units);
      at += 3 + 2 * static_cast<size_t>(spec[at + 2]);
    }
  }
  return total;
}

// `spec`: the header (CpuSlot), then per value its kind (CpuItem) and the number of its
// texts (kSlotTexts), then for a tensor its data pointer, dtype (c10::ScalarType), ndim,
// sizes and strides (in elements); for an int its value. The manifest lines, one per
// value, are written to the descriptor in one write (or into the output buffer), then
// the print lines into the buffer (in record order, as hooks._side_text prints a side);
// the header's last slots get where they end and an errno. Returns 0; -1 when `spec`
// is malformed; -3 when the output buffer is too small (kSlotPrintEnd then holds what
// is needed; nothing is written); -4 when the write failed (kSlotErrno); -5 for
// another layout; 1 + i when the i-th value's dtype is not read here (nothing is
// written).
int cpu_records(int64_t* spec) {
  namespace R = schema::rec;
  static const std::string kSeq = json_key(R::kSeq, "{"), kLaunch = json_key(R::kLaunch),
      kCall = json_key(R::kKernelCall), kKind = json_key(R::kKind), kDtype = json_key(R::kDtype),
      kShape = json_key(R::kShape), kStride = json_key(R::kStride), kDevice = json_key(R::kDevice),
      kNumel = json_key(R::kNumel),
      kValue = json_key(R::kValue), kUnwritten = json_key(R::kUninitialised);
  constexpr int64_t kMaxDim = 64;
  if (spec[kSlotLayout] != kCpuLayout) return -5;
  const size_t spec_len = static_cast<size_t>(spec[kSlotLength]);
  if (spec_len < kCpuHeader) return -1;
  const int64_t count = spec[kSlotCount], seq = spec[kSlotSeq], launch = spec[kSlotLaunch], call = spec[kSlotCall];
  const int64_t* texts = reinterpret_cast<const int64_t*>(static_cast<intptr_t>(spec[kSlotTexts]));
  const size_t texts_len = static_cast<size_t>(spec[kSlotTextsLen]);
  if (!texts || texts_len < kTextsHead) return -1;
  const CpuText head = cpu_text(texts), prefix = cpu_text(texts + 2);
  const int fd = static_cast<int>(spec[kSlotFd]);
  char* out = reinterpret_cast<char*>(static_cast<intptr_t>(spec[kSlotOut]));
  const size_t cap = static_cast<size_t>(spec[kSlotCap]);
  int64_t* result = spec + kSlotLinesEnd;
  WithoutGil nogil(cpu_records_bytes(spec, spec_len) > static_cast<uint64_t>(spec[kSlotNogilBytes]) ? spec[kSlotSave] : 0,
                   spec[kSlotRestore]);
  thread_local std::string lines, prints;
  thread_local std::vector<unsigned char> buf;
  lines.clear();
  prints.clear();
  // A tensor's print line (hooks._print_line); without stats (memory no launch wrote)
  // its stats print as "-".
  auto print_tensor = [&](CpuText ptensor, const TypeInfo* ti, const int64_t* shape, int64_t nd, const Summary* sm) {
    put(prints, prefix);
    json_int(prints, launch);
    put(prints, ptensor);
    prints += ti->name;
    prints += '[';
    prints += nd ? "" : "scalar";
    for (int64_t d = 0; d < nd; ++d) {
      if (d) prints += 'x';
      json_int(prints, shape[d]);
    }
    prints += "] cpu";
    append_print_stats(prints, sm);
    prints += '\n';
  };
  size_t at = kCpuHeader;
  for (int64_t i = 0; i < count; ++i) {
    if (at + 2 > spec_len) return -1;
    const int64_t kind = spec[at], text = spec[at + 1];
    if (text < 0 || kTextsHead + kTextsValue * static_cast<size_t>(text + 1) > texts_len) return -1;
    const int64_t* value_texts = texts + kTextsHead + kTextsValue * static_cast<size_t>(text);
    const CpuText body = cpu_text(value_texts), ptensor = cpu_text(value_texts + 2), pscalar = cpu_text(value_texts + 4);
    at += 2;
    lines += kSeq;
    json_int(lines, seq + i);
    lines += kLaunch;
    json_int(lines, launch);
    lines += ',';
    put(lines, head);
    lines += kCall;
    json_int(lines, call);
    lines += ',';
    put(lines, body);
    lines += kKind;
    if (kind == kItemInt || kind == kItemSymInt) {
      if (at + 1 > spec_len) return -1;
      lines += kind == kItemInt ? "\"scalar\"" : "\"symint\"";
      lines += kValue;
      json_int(lines, spec[at]);
      lines += kDtype;
      lines += "\"int\"}\n";
      if (prefix.n) {
        put(prints, prefix);
        json_int(prints, launch);
        put(prints, pscalar);
        json_int(prints, spec[at]);
        prints += '\n';
      }
      at += 1;
      continue;
    }
    if (kind == kItemNone) {
      lines += "\"none\"}\n";
      if (prefix.n) {
        put(prints, prefix);
        json_int(prints, launch);
        put(prints, pscalar);
        prints += "None\n";
      }
      continue;
    }
    if ((kind != kItemTensor && kind != kItemUnwritten) || at + 3 > spec_len) return -1;
    const void* data = reinterpret_cast<const void*>(static_cast<intptr_t>(spec[at]));
    const int32_t dtype = static_cast<int32_t>(spec[at + 1]);
    const int64_t nd = spec[at + 2];
    if (nd < 0 || nd > kMaxDim || at + 3 + 2 * static_cast<size_t>(nd) > spec_len) return -1;
    const int64_t* shape = spec + at + 3;
    const int64_t* stride = shape + nd;
    at += 3 + 2 * static_cast<size_t>(nd);
    const TypeInfo* ti = type_info(dtype);
    if (!ti) return static_cast<int>(1 + i);
    int64_t numel = 1;
    for (int64_t d = 0; d < nd; ++d) numel *= shape[d];
    lines += "\"tensor\"";
    lines += kDtype;
    lines += '"';
    lines += ti->name;
    lines += '"';
    lines += kShape;
    json_ints(lines, shape, static_cast<size_t>(nd));
    lines += kStride;
    json_ints(lines, stride, static_cast<size_t>(nd));
    lines += kDevice;
    lines += "\"cpu\"";
    lines += kNumel;
    json_int(lines, numel);
    if (kind == kItemUnwritten) {  // memory no launch had written: not data (no stats)
      lines += kUnwritten;
      lines += "true}\n";
      if (prefix.n) print_tensor(ptensor, ti, shape, nd, nullptr);
      continue;
    }
    if (numel != 0 && data == nullptr) return static_cast<int>(1 + i);
    Summary sm;
    const void* values = numel == 0 ? ""
        : cpu_values(data, static_cast<size_t>(ti->unit * ti->units), shape, stride, static_cast<size_t>(nd), numel,
                     buf);
    if (!summarize(values, numel, dtype, sm)) return static_cast<int>(1 + i);
    append_record_stats(lines, sm);
    lines += "}\n";
    if (prefix.n) print_tensor(ptensor, ti, shape, nd, &sm);
  }
  const size_t in_out = fd < 0 ? lines.size() : 0;
  const size_t need = in_out + prints.size();
  result[0] = static_cast<int64_t>(in_out);
  result[1] = static_cast<int64_t>(need);
  result[2] = 0;
  if (need > cap) return -3;
  if (fd >= 0) {  // one write: a killed process leaves whole lines
    result[2] = write_all(fd, lines.data(), lines.size());
    if (result[2]) return -4;
  }
  std::memcpy(out, lines.data(), in_out);
  std::memcpy(out + in_out, prints.data(), prints.size());
  return 0;
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_CPU_RECORDS_H
