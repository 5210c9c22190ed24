// The manifest lines of device-ring records for the Python runtime's writer thread
// (runtime/ring_records.py): what format.writer.encode_record gives a record dict whose
// stats and checksum device_ring.fill set from a row read back from the device, built
// here from the row itself and, per record, the text of its fields that do not change
// from one call of the launch to the next (encoded once by the caller from the record
// dict). Planned sides at level print also get their print lines (format.schema.print_line
// of each record, in record order): after the manifest lines in the output buffer, for
// the writer to print. Called without the GIL (ctypes.CDLL): it touches no Python object.
// On the calling thread only: formatting a batch in parts on the runtime's threads was
// measured and lost on the GPU host (a second OpenMP team spinning beside torch's: a
// lockstep flush 4-17 ms instead of ~0.7; docs/performance.md, "The lockstep flush").
// A debugging tool does not take cores from the model it instruments.
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
  kRingSlotPrintEnd,  // written back: the end of the print lines after them
  kRingHeader
};
constexpr int64_t kRingLayout = 7;
// Entries follow the header, each starting with its kind:
// - kRingEntryRecord, one record: seq, launch, kernel call, the address of its stats row
//   (8 doubles: min, max, mean, std, absmax, nan, inf, count: fused_stats' packed
//   layout), the address of its checksum (int64), then (pointer, length) of its text
//   between "launch" and "kernel_call" and of its text after "kernel_call" (without the
//   closing brace);
// - kRingEntrySide, one call of a planned launch side (ring_records.SidePlan): its first
//   seq, launch, kernel call, the addresses of its first ring row's stats and checksum,
//   then (pointer, count) of its records' template: per record (kRingTemplate int64) its
//   seq offset, ring row offset (-1: a fixed record, written without stats), the
//   (pointer, length) of its two texts and of its two print texts, the print line being
//   the first, the launch, the second and, for a record with a row, its stats
//   (append_print_stats; a first text of length 0: no print line);
// - kRingEntryLine, a line made by the caller (a planned side's record whose stats the
//   Python runtime read on the host): (pointer, length), its newline included;
// - kRingEntrySideTaken, a call of a planned side some of whose inputs take the row of
//   the launch that wrote them (SiteArg.reuse), in this segment or an earlier one: as
//   kRingEntrySide, then (pointer, count) of the taken rows, each the addresses of its
//   stats and its checksum (two int64); a template row offset k <= -2 names taken row
//   -2 - k;
// - kRingEntryBase, the host copy of one segment that the kRingEntryBaseSide entries
//   after it (up to the next kRingEntryBase) name rows of: the addresses of its stats
//   rows and its checksums, and its number of rows;
// - kRingEntryBaseSide, a call of a planned side whose rows, taken ones included, are
//   all in the last kRingEntryBase's segment (ring_records.SideRun): its first seq,
//   launch, kernel call, first ring row, (pointer, count) of its template (as
//   kRingEntrySide's), the number n of its taken rows, then those n row numbers; a
//   template row offset k >= 0 names row first + k, one k <= -2 taken row -2 - k. A row
//   outside the segment is malformed.
enum RingEntry : int64_t {
  kRingEntryRecord = 0,
  kRingEntrySide = 1,
  kRingEntryLine = 2,
  kRingEntrySideTaken = 3,
  kRingEntryBase = 4,
  kRingEntryBaseSide = 5
};
constexpr size_t kRingRecord = 10;
constexpr size_t kRingSide = 8;
constexpr size_t kRingLine = 3;
constexpr size_t kRingSideTaken = 10;
constexpr size_t kRingBase = 4;
constexpr size_t kRingBaseSide = 8;  // and its taken rows
constexpr size_t kRingTemplate = 10;

// Returns 0 and the lines (one per record, in order), then the print lines, in the output
// buffer; -1 when `spec` is malformed; -3 when the buffer is too small (kRingSlotPrintEnd
// holds what is needed, nothing is written); -5 for another layout.
int ring_records(int64_t* spec) {
  namespace R = schema::rec;
  static const std::string kSeq = json_key(R::kSeq, "{"), kLaunch = json_key(R::kLaunch),
      kCall = json_key(R::kKernelCall);
  if (spec[kRingSlotLayout] != kRingLayout) return -5;
  const size_t spec_len = static_cast<size_t>(spec[kRingSlotLength]);
  const int64_t count = spec[kRingSlotCount];
  if (spec_len < kRingHeader || count < 0) return -1;
  thread_local std::string lines, prints;
  lines.clear();
  prints.clear();
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
  // The stats row and checksum at a row's two addresses (null, null: none).
  struct Row {
    const double* stats;
    const int64_t* sum;
  };
  auto at_addresses = [&](int64_t stats, int64_t sum) {
    return Row{reinterpret_cast<const double*>(ptr(stats)), reinterpret_cast<const int64_t*>(ptr(sum))};
  };
  // The lines of one call of a planned side from seq `seq`: the `n` records of its
  // template at address `tmpl`, a row offset k >= 0 being `ring(k)`, one k <= -2
  // `taken(-2 - k)` (the side entries without taken rows give none: a fixed record, as
  // -1). False when a record's texts or a row it names are not there.
  auto side = [&](int64_t seq, int64_t launch, int64_t call, int64_t tmpl, int64_t n, auto&& ring, auto&& taken) {
    const int64_t* t = reinterpret_cast<const int64_t*>(ptr(tmpl));
    if (n < 0 || (!t && n)) return false;
    for (int64_t k = 0; k < n; ++k, t += kRingTemplate) {
      if (!texts_ok(ptr(t[2]), t[3], ptr(t[4]), t[5]) || !texts_ok(ptr(t[6]), t[7], ptr(t[8]), t[9])) return false;
      Row row{nullptr, nullptr};
      if (t[1] >= 0) {
        row = ring(t[1]);
        if (!row.stats || !row.sum) return false;
      } else if (t[1] <= -2) {
        bool ok = true;
        row = taken(-2 - t[1], ok);
        if (!ok) return false;
      }
      line(seq + t[0], launch, call, ptr(t[2]), t[3], ptr(t[4]), t[5], row.stats, row.sum);
      if (t[7] > 0) {
        prints.append(ptr(t[6]), static_cast<size_t>(t[7]));
        json_int(prints, launch);
        prints.append(ptr(t[8]), static_cast<size_t>(t[9]));
        if (row.stats) {
          const Summary sm = row_summary(row.stats, static_cast<uint64_t>(*row.sum));
          append_print_stats(prints, &sm);
        }
        prints += '\n';
      }
    }
    return true;
  };
  auto fixed = [](int64_t, bool&) { return Row{nullptr, nullptr}; };
  // The segment of the last kRingEntryBase: its rows' addresses and their number.
  int64_t base_stats = 0, base_sums = 0, base_rows = -1;
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
    } else if (r[0] == kRingEntrySide || r[0] == kRingEntrySideTaken) {
      const bool takes = r[0] == kRingEntrySideTaken;
      if (at + (takes ? kRingSideTaken : kRingSide) > spec_len || !ptr(r[4]) || !ptr(r[5])) return -1;
      // Row offset k of the side's first row, in the segment's host copy.
      auto ring = [&](int64_t k) { return at_addresses(r[4] + 64 * k, r[5] + 8 * k); };
      if (takes) {
        const int64_t* rows = reinterpret_cast<const int64_t*>(ptr(r[8]));
        const int64_t n_taken = r[9];
        if (n_taken < 0 || (!rows && n_taken)) return -1;
        auto taken = [&](int64_t j, bool& ok) {
          Row row = j < n_taken ? at_addresses(rows[2 * j], rows[2 * j + 1]) : Row{nullptr, nullptr};
          ok = row.stats && row.sum;
          return row;
        };
        if (!side(r[1], r[2], r[3], r[6], r[7], ring, taken)) return -1;
        at += kRingSideTaken;
      } else {
        if (!side(r[1], r[2], r[3], r[6], r[7], ring, fixed)) return -1;
        at += kRingSide;
      }
    } else if (r[0] == kRingEntryBase) {
      if (at + kRingBase > spec_len || !ptr(r[1]) || !ptr(r[2]) || r[3] < 0) return -1;
      base_stats = r[1];
      base_sums = r[2];
      base_rows = r[3];
      at += kRingBase;
    } else if (r[0] == kRingEntryBaseSide) {
      if (at + kRingBaseSide > spec_len || base_rows < 0 || r[4] < 0 || r[7] < 0 ||
          static_cast<uint64_t>(r[7]) > spec_len - at - kRingBaseSide)
        return -1;
      const int64_t first = r[4], n_taken = r[7];
      const int64_t* rows = r + kRingBaseSide;
      // Row `row` of the base's segment (null, null: it has no such row).
      auto in_base = [&](int64_t row) {
        return row >= 0 && row < base_rows ? at_addresses(base_stats + 64 * row, base_sums + 8 * row)
                                           : Row{nullptr, nullptr};
      };
      auto ring = [&](int64_t k) { return k < base_rows - first ? in_base(first + k) : Row{nullptr, nullptr}; };
      auto taken = [&](int64_t j, bool& ok) {
        Row row = j < n_taken ? in_base(rows[j]) : Row{nullptr, nullptr};
        ok = row.stats && row.sum;
        return row;
      };
      if (!side(r[1], r[2], r[3], r[5], r[6], ring, taken)) return -1;
      at += kRingBaseSide + static_cast<size_t>(n_taken);
    } else if (r[0] == kRingEntryLine) {
      if (at + kRingLine > spec_len || !texts_ok(ptr(r[1]), r[2], nullptr, 0)) return -1;
      lines.append(ptr(r[1]), static_cast<size_t>(r[2]));
      at += kRingLine;
    } else {
      return -1;
    }
  }
  spec[kRingSlotEnd] = static_cast<int64_t>(lines.size());
  spec[kRingSlotPrintEnd] = static_cast<int64_t>(lines.size() + prints.size());
  if (lines.size() + prints.size() > static_cast<size_t>(spec[kRingSlotCap])) return -3;
  char* out = reinterpret_cast<char*>(static_cast<intptr_t>(spec[kRingSlotOut]));
  std::memcpy(out, lines.data(), lines.size());
  std::memcpy(out + lines.size(), prints.data(), prints.size());
  return 0;
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_RING_RECORDS_H
