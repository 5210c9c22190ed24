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
  kRingSlotCount,   // entries
  kRingSlotOut,     // (pointer, capacity) of the output buffer
  kRingSlotCap,
  kRingSlotEnd,     // written back: the end of the lines in the buffer (or the bytes needed)
  kRingHeader
};
constexpr int64_t kRingLayout = 5;
// Entries follow the header, each starting with its kind:
// - kRingEntryRecord, one record: seq, launch, kernel call, the address of its stats row
//   (8 doubles: min, max, mean, std, absmax, nan, inf, count: fused_stats' packed
//   layout), the address of its checksum (int64), then (pointer, length) of its text
//   between "launch" and "kernel_call" and of its text after "kernel_call" (without the
//   closing brace);
// - kRingEntrySide, one call of a planned launch side (ring_records.SidePlan): its first
//   seq, launch, kernel call, the addresses of its first ring row's stats and checksum,
//   then (pointer, count) of its records' template: per record (kRingTemplate int64) its
//   seq offset, ring row offset (-1: a fixed record, written without stats), and the
//   (pointer, length) of its two texts;
// - kRingEntryLine, a line made by the caller (a planned side's record whose stats the
//   Python runtime read on the host): (pointer, length), its newline included;
// - kRingEntrySideTaken, a call of a planned side some of whose inputs take the row of
//   the launch that wrote them (SiteArg.reuse), in this segment or an earlier one: as
//   kRingEntrySide, then (pointer, count) of the taken rows, each the addresses of its
//   stats and its checksum (two int64); a template row offset k <= -2 names taken row
//   -2 - k.
enum RingEntry : int64_t { kRingEntryRecord = 0, kRingEntrySide = 1, kRingEntryLine = 2, kRingEntrySideTaken = 3 };
constexpr size_t kRingRecord = 10;
constexpr size_t kRingSide = 8;
constexpr size_t kRingLine = 3;
constexpr size_t kRingSideTaken = 10;
constexpr size_t kRingTemplate = 6;

// Returns 0 and the lines (one per record, in order) in the output buffer; -1 when
// `spec` is malformed; -3 when the buffer is too small (kRingSlotEnd holds what is
// needed, nothing is written); -5 for another layout.
int ring_records(int64_t* spec) {
  namespace R = schema::rec;
  static const std::string kSeq = json_key(R::kSeq, "{"), kLaunch = json_key(R::kLaunch),
      kCall = json_key(R::kKernelCall);
  if (spec[kRingSlotLayout] != kRingLayout) return -5;
  const size_t spec_len = static_cast<size_t>(spec[kRingSlotLength]);
  const int64_t count = spec[kRingSlotCount];
  if (spec_len < kRingHeader || count < 0) return -1;
  thread_local std::string lines;
  lines.clear();
  auto ptr = [](int64_t v) { return reinterpret_cast<const char*>(static_cast<intptr_t>(v)); };
  // One line; `row` null: a fixed record (no stats, no checksum).
  auto line = [&](int64_t seq, int64_t launch, int64_t call, const char* head, int64_t head_len, const char* body,
                  int64_t body_len, const double* row, const int64_t* sum) {
    lines += kSeq;
    json_int(lines, seq);
    lines += kLaunch;
    json_int(lines, launch);
    lines += ',';
    lines.append(head, static_cast<size_t>(head_len));
    lines += kCall;
    json_int(lines, call);
    lines += ',';
    lines.append(body, static_cast<size_t>(body_len));
    if (row) append_record_stats(lines, row_summary(row, static_cast<uint64_t>(*sum)));
    lines += "}\n";
  };
  auto texts_ok = [](const char* head, int64_t head_len, const char* body, int64_t body_len) {
    return head_len >= 0 && body_len >= 0 && (head || !head_len) && (body || !body_len);
  };
  // The lines of a side entry `r` (kRingEntrySide, or kRingEntrySideTaken with `takes`):
  // its template's records, a row offset k >= 0 being row k of the rows at r[4], r[5],
  // one k <= -2 taken row -2 - k (`taken`: two addresses a row) when `takes` (else, as
  // -1, a fixed record).
  auto side = [&](const int64_t* r, const int64_t* taken, int64_t n_taken, bool takes) {
    const char* stats = ptr(r[4]);
    const char* sums = ptr(r[5]);
    const int64_t* t = reinterpret_cast<const int64_t*>(ptr(r[6]));
    if (!stats || !sums || r[7] < 0 || (!t && r[7]) || n_taken < 0 || (!taken && n_taken)) return false;
    for (int64_t k = 0; k < r[7]; ++k, t += kRingTemplate) {
      if (!texts_ok(ptr(t[2]), t[3], ptr(t[4]), t[5])) return false;
      const double* stat_row = nullptr;
      const int64_t* sum = nullptr;
      if (t[1] >= 0) {
        stat_row = reinterpret_cast<const double*>(stats + 64 * t[1]);
        sum = reinterpret_cast<const int64_t*>(sums + 8 * t[1]);
      } else if (takes && t[1] <= -2) {
        const int64_t j = -2 - t[1];
        if (j >= n_taken || !taken[2 * j] || !taken[2 * j + 1]) return false;
        stat_row = reinterpret_cast<const double*>(ptr(taken[2 * j]));
        sum = reinterpret_cast<const int64_t*>(ptr(taken[2 * j + 1]));
      }
      line(r[1] + t[0], r[2], r[3], ptr(t[2]), t[3], ptr(t[4]), t[5], stat_row, sum);
    }
    return true;
  };
  size_t at = kRingHeader;
  for (int64_t i = 0; i < count; ++i) {
    if (at >= spec_len) return -1;
    const int64_t* r = spec + at;
    if (r[0] == kRingEntryRecord) {
      if (at + kRingRecord > spec_len) return -1;
      const double* row = reinterpret_cast<const double*>(ptr(r[4]));
      const int64_t* sum = reinterpret_cast<const int64_t*>(ptr(r[5]));
      if (!row || !sum || !texts_ok(ptr(r[6]), r[7], ptr(r[8]), r[9])) return -1;
      line(r[1], r[2], r[3], ptr(r[6]), r[7], ptr(r[8]), r[9], row, sum);
      at += kRingRecord;
    } else if (r[0] == kRingEntrySide) {
      if (at + kRingSide > spec_len || !side(r, nullptr, 0, false)) return -1;
      at += kRingSide;
    } else if (r[0] == kRingEntrySideTaken) {
      if (at + kRingSideTaken > spec_len || !side(r, reinterpret_cast<const int64_t*>(ptr(r[8])), r[9], true))
        return -1;
      at += kRingSideTaken;
    } else if (r[0] == kRingEntryLine) {
      if (at + kRingLine > spec_len || !texts_ok(ptr(r[1]), r[2], nullptr, 0)) return -1;
      lines.append(ptr(r[1]), static_cast<size_t>(r[2]));
      at += kRingLine;
    } else {
      return -1;
    }
  }
  spec[kRingSlotEnd] = static_cast<int64_t>(lines.size());
  if (lines.size() > static_cast<size_t>(spec[kRingSlotCap])) return -3;
  std::memcpy(reinterpret_cast<char*>(static_cast<intptr_t>(spec[kRingSlotOut])), lines.data(), lines.size());
  return 0;
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_RING_RECORDS_H
