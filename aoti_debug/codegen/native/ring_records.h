// The manifest lines of device-ring records for the Python runtime's writer thread
// (runtime/ring_records.py): what format.writer.encode_record gives a record dict whose
// stats and checksum device_ring.fill set from a row read back from the device, built
// here from the row itself and, per record, the text of its fields that do not change
// from one call of the launch to the next (encoded once by the caller from the record
// dict). Called without the GIL (ctypes.CDLL): it touches no Python object.
#ifndef AOTI_DEBUG_PART_RING_RECORDS_H
#define AOTI_DEBUG_PART_RING_RECORDS_H

#include <cstdint>
#include <cstring>
#include <string>

#include "constants.h"
#include "json.h"
#include "stats.h"

namespace AOTI_DEBUG_NS {
namespace {

// The slots of `spec`'s header (runtime/ring_records.py writes them so and passes
// kRingLayout: a caller written for another layout gets -5).
enum RingSlot : size_t {
  kRingSlotLayout,  // kRingLayout
  kRingSlotLength,  // the number of int64 in `spec`
  kRingSlotCount,   // records
  kRingSlotOut,     // (pointer, capacity) of the output buffer
  kRingSlotCap,
  kRingSlotEnd,     // written back: the end of the lines in the buffer (or the bytes needed)
  kRingHeader
};
constexpr int64_t kRingLayout = 1;
// Per record: seq, launch, kernel call, the address of its stats row (8 doubles: min,
// max, mean, std, absmax, nan, inf, count: fused_stats' packed layout), the address of
// its checksum (int64), then (pointer, length) of its text between "launch" and
// "kernel_call" and of its text after "kernel_call" (without the closing brace).
constexpr size_t kRingRecord = 9;

// Returns 0 and the lines (one per record, in order) in the output buffer; -1 when
// `spec` is malformed; -3 when the buffer is too small (kRingSlotEnd holds what is
// needed, nothing is written); -5 for another layout.
int ring_records(int64_t* spec) {
  namespace R = schema::rec;
  static const std::string kSeq = json_key(R::kSeq, "{"), kLaunch = json_key(R::kLaunch),
      kCall = json_key(R::kKernelCall), kStats = json_key(R::kStats), kChecksum = json_key(R::kChecksum);
  if (spec[kRingSlotLayout] != kRingLayout) return -5;
  const size_t spec_len = static_cast<size_t>(spec[kRingSlotLength]);
  const int64_t count = spec[kRingSlotCount];
  if (spec_len < kRingHeader || count < 0 || kRingHeader + kRingRecord * static_cast<size_t>(count) > spec_len)
    return -1;
  thread_local std::string lines;
  lines.clear();
  const int64_t* r = spec + kRingHeader;
  for (int64_t i = 0; i < count; ++i, r += kRingRecord) {
    const double* row = reinterpret_cast<const double*>(static_cast<intptr_t>(r[3]));
    const int64_t* sum = reinterpret_cast<const int64_t*>(static_cast<intptr_t>(r[4]));
    const char* head = reinterpret_cast<const char*>(static_cast<intptr_t>(r[5]));
    const char* body = reinterpret_cast<const char*>(static_cast<intptr_t>(r[7]));
    if (!row || !sum || (!head && r[6]) || (!body && r[8]) || r[6] < 0 || r[8] < 0) return -1;
    lines += kSeq;
    json_int(lines, r[0]);
    lines += kLaunch;
    json_int(lines, r[1]);
    lines += ',';
    lines.append(head, static_cast<size_t>(r[6]));
    lines += kCall;
    json_int(lines, r[2]);
    lines += ',';
    lines.append(body, static_cast<size_t>(r[8]));
    const Summary sm = row_summary(row, static_cast<uint64_t>(*sum));
    lines += kStats;
    append_stats_json(lines, sm);
    lines += kChecksum;
    lines += '"';
    append_checksum(lines, sm.checksum);
    lines += "\"}\n";
  }
  spec[kRingSlotEnd] = static_cast<int64_t>(lines.size());
  if (lines.size() > static_cast<size_t>(spec[kRingSlotCap])) return -3;
  std::memcpy(reinterpret_cast<char*>(static_cast<intptr_t>(spec[kRingSlotOut])), lines.data(), lines.size());
  return 0;
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_RING_RECORDS_H
