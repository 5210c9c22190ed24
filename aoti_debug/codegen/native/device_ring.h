// Levels stats and print without a stream synchronisation per side (device_stats.h
// launches into it): the device ring of results, the queue of launch sides waiting for
// them, in record order, and its writing (records.h queues and hands it the manifest; a
// side's print lines go to stderr when its records are written).
#ifndef AOTI_DEBUG_PART_DEVICE_RING_H
#define AOTI_DEBUG_PART_DEVICE_RING_H

#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "constants.h"
#include "device_driver.h"
#include "state.h"
#include "stats.h"
#include "text.h"

namespace AOTI_DEBUG_NS {
namespace {

// ---- level stats: the device ring (no stream synchronisation per side)
// The kernels of a side write their results into rows of the current segment of a ring
// on the device (8 doubles per row, then one checksum per row, as the kernel writes them
// for k_total = the segment's rows), and the side's records are queued with the rows
// their stats and checksums go into. A segment is shipped (two cuMemcpyDtoHAsync of its used rows into
// its pinned twin, then one cuEventRecord) when it is full, when a graph call starts the
// next one, at a change of stream and run, and at exit; queued sides are written, in
// record order, once their segment's event has completed (polled with cuEventQuery at
// each later side, waited for, bounded, where a segment must be reused or everything
// written). Each segment's pinned memory also stages the tables of its sides: the
// copies that read them precede its event on the stream, so a segment is reused only
// after every copy from it ended.
#ifndef AOTI_DEBUG_DEVICE_SEGMENT_ROWS
#define AOTI_DEBUG_DEVICE_SEGMENT_ROWS 2048
#endif
#ifndef AOTI_DEBUG_DEVICE_SEGMENTS
#define AOTI_DEBUG_DEVICE_SEGMENTS 4
#endif
constexpr uint32_t kSegmentRows = AOTI_DEBUG_DEVICE_SEGMENT_ROWS;
constexpr int kSegments = AOTI_DEBUG_DEVICE_SEGMENTS;
constexpr uint64_t kSegmentResults = uint64_t{kSegmentRows} * 9 * 8;           // results, device and host
constexpr uint64_t kSegmentTables = uint64_t{kSegmentRows} * 48 + 64 * 1024;   // tables, host (staging)
// A segment whose event has not completed after this long is given up (one warning):
// its records say so, and the device path is off for the process (its buffers may still
// be in use by a kernel that never ends).
constexpr int kGiveUpSeconds = 300;

struct Segment {
  enum State { kFree, kFilling, kShipped, kDone };
  State state = kFree;
  cu::DevPtr dev = 0;
  unsigned char* host = nullptr;  // results' twin, then table staging
  cu::Handle event = nullptr, stream = nullptr;
  uint32_t used = 0;
  uint64_t tab_used = 0;
  int64_t sides = 0;    // queued sides that read it (and a side that takes rows of it, while made)
  uint64_t fills = 0;   // how often it was taken to be filled: a row is the same row only in one fill
  std::string after;    // the kernel after which its first stats kernel was queued
  std::string error;    // kDone: why its results are not there ("" when they are)
  // Sides with rows here whose stats launch waits (Site::defers): device_launch.h's
  // PendingRun, launched as one before the segment is shipped; null when none waits.
  void* run = nullptr;
};

// Launches `g`'s waiting sides (device_launch.h sets it; caller holds S.mu).
void (*launch_waiting)(Shared& S, DeviceStats& D, Segment& g) = nullptr;

struct Ring {
  cu::DevPtr counters = 0;  // one per row (the kernels leave them at zero), shared by the segments
  Segment seg[kSegments];
  int current = -1;
  cu::Handle stream = nullptr;  // the stream its segments' work is on
  std::map<const void*, int> last_site;  // per wrapper: the last "before" site (graph calls, as flight.h)
};

}  // namespace

// One queued record: where its stats, checksum and end go in its side's lines.
struct QueuedHole {
  size_t stats_at, checksum_at, end_at;
  uint32_t row;
  bool taken = false;  // a row of the side's `taken` segment (an input's producer's), not of `segment`
  size_t print_at = std::string::npos;  // level print: where its print line's stats go in `prints`
};

// One launch side's manifest lines (and at level print its print lines), waiting for the
// results of `segment` (a Segment of this runtime) or, when null, for earlier sides only.
struct QueuedSide {
  std::string lines;
  std::string prints;
  std::vector<QueuedHole> holes;
  void* segment = nullptr;
  void* owner = nullptr;  // its DeviceStats
  void* taken = nullptr;  // an earlier segment whose rows some of its inputs take (records.h's links), or null
};

// Sides queued for the manifest, in record order. Shared by every runtime copy of the
// process (as shared()), so that no copy's records overtake another's.
struct DeviceQueue {
  long pid = 0;
  std::deque<QueuedSide> sides;
  bool (*append)(Shared& S, const std::string& lines) = nullptr;
  void (*drain)(Shared& S, bool wait) = nullptr;  // drain_queue of the copy that queued
  bool exit_hook = false;
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
inline DeviceQueue& device_queue() {
  static DeviceQueue q;  // STB_GNU_UNIQUE, as shared()
  return q;
}

namespace {

std::string seconds_text(int s) { return std::to_string(s) + " s"; }

// The named warning of a failed device path; from then on the host path.
void device_failed(Shared& S, DeviceStats& D, const std::string& after, const std::string& err) {
  D.broken = true;
  warn_once(S, "device-stats", "CUDA error while computing stats on the device after " + after + " (" + err +
                                   "; an earlier kernel may have faulted): CUDA tensors are copied to the host for "
                                   "their stats from now on");
}

// The ring of `ds`, made on first use on `stream`; null (and why in `err`) when it cannot be.
Ring* ring_of(Shared& S, DeviceStats& D, DeviceState& ds, cu::Handle stream, const char* after, std::string& err) {
  if (ds.ring) return ds.ring;
  Ring* R = new Ring();
  const uint64_t counters = round_up(uint64_t{kSegmentRows} * 4);
  cu::DevPtr dev = 0;
  void* host = nullptr;
  cu::Result r = D.api.mem_alloc(&dev, static_cast<size_t>(counters + kSegments * kSegmentResults));
  trace(D, "ring: " + std::to_string(kSegments) + " segments of " + std::to_string(kSegmentRows) + " rows: " +
               (r == 0 ? hex(dev) : cu_error(D, "cuMemAlloc", r)));
  if (r != 0) {
    err = cu_error(D, "cuMemAlloc", r);
    delete R;
    return nullptr;
  }
  const char* call = "cuMemAllocHost";
  r = D.api.mem_alloc_host(&host, static_cast<size_t>(kSegments * (kSegmentResults + kSegmentTables)));
  for (int i = 0; r == 0 && i < kSegments; ++i) {
    call = "cuEventCreate";
    r = D.api.event_create(&R->seg[i].event, cu::kEventDisableTiming);
  }
  if (r == 0) {  // the counters start at zero (one wait, once)
    std::memset(host, 0, static_cast<size_t>(counters));
    call = "cuMemcpyHtoDAsync";
    r = D.api.copy_htod_async(dev, host, static_cast<size_t>(counters), stream);
    if (r == 0) {
      call = "cuStreamSynchronize";
      r = wait_stream(S, D, stream, after);
    }
  }
  if (r != 0) {  // left as they are: the process takes the host path from now on
    err = cu_error(D, call, r);
    return nullptr;
  }
  R->counters = dev;
  for (int i = 0; i < kSegments; ++i) {
    R->seg[i].dev = dev + counters + i * kSegmentResults;
    R->seg[i].host = static_cast<unsigned char*>(host) + i * (kSegmentResults + kSegmentTables);
  }
  R->stream = stream;
  return ds.ring = R;
}

// Its results go to the host: its used rows copied into the pinned twin, then its event. Caller holds S.mu.
void ship(Shared& S, DeviceStats& D, Segment& g) {
  if (g.run && launch_waiting) launch_waiting(S, D, g);  // (its rows' stats before its copies)
  if (g.state != Segment::kFilling) return;
  // The used rows only, 72 bytes a tensor: their stats (8 doubles a row), then their checksums.
  const char* call = "cuMemcpyDtoHAsync";
  const uint64_t stats_end = uint64_t{kSegmentRows} * 64;
  cu::Result r = 0;
  if (g.used > 0) r = D.api.copy_dtoh_async(g.host, g.dev, static_cast<size_t>(uint64_t{g.used} * 64), g.stream);
  if (r == 0 && g.used > 0)
    r = D.api.copy_dtoh_async(g.host + stats_end, g.dev + stats_end, static_cast<size_t>(uint64_t{g.used} * 8),
                              g.stream);
  if (r == 0) {
    call = "cuEventRecord";
    r = D.api.event_record(g.event, g.stream);
  }
  if (D.trace) {
    trace(D, "ship segment of " + std::to_string(g.used) + " rows (first after " + g.after + ") on stream " +
                 hex(reinterpret_cast<uint64_t>(g.stream)) + ": " +
                 (r == 0 ? std::string("ok") : cu_error(D, call, r)));
  }
  g.state = Segment::kShipped;
  if (r != 0) {
    g.state = Segment::kDone;
    g.error = cu_error(D, call, r);
    device_failed(S, D, g.after, g.error);
  }
}

// Whether `g`'s results are on the host (or known not to come): polls its event, and with
// `wait` until it completes, warning after kSlowWaitSeconds, giving up after kGiveUpSeconds.
bool settle(Shared& S, DeviceStats& D, Segment& g, bool wait) {
  if (g.state == Segment::kDone) return true;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  bool told = false;
  if (wait && D.trace) trace(D, "wait for segment (first after " + g.after + ")");
  for (int polls = 0;; ++polls) {
    cu::Result r = D.api.event_query(g.event);
    if (r == 0) break;
    if (r != cu::kNotReady) {
      g.state = Segment::kDone;
      g.error = cu_error(D, "cuEventQuery", r);
      device_failed(S, D, g.after, g.error);
      return true;
    }
    if (!wait) return false;
    if (polls < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    const auto waited = Clock::now() - t0;
    if (!told && waited > std::chrono::seconds(kSlowWaitSeconds)) {
      told = true;
      warn_once(S, "device-stats-slow", "the CUDA stream has not finished the stats kernels launched after " +
                                            g.after + " in " + seconds_text(kSlowWaitSeconds) +
                                            "; still waiting (a kernel on that stream does not end?)");
    }
    if (waited > std::chrono::seconds(kGiveUpSeconds)) {
      g.state = Segment::kDone;
      g.error = "not finished in " + seconds_text(kGiveUpSeconds);
      D.broken = true;  // its buffers may still be written: never used again
      warn_once(S, "device-stats-late", "the stats kernels launched after " + g.after + " have not finished in " +
                                            seconds_text(kGiveUpSeconds) + ": their records have no stats, and CUDA "
                                            "tensors are copied to the host for their stats from now on");
      return true;
    }
  }
  if (wait && D.trace) {
    trace(D, "segment done after " +
                 std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count()) +
                 " us");
  }
  g.state = Segment::kDone;
  return true;
}

// The stats a hole's row holds.
Summary hole_summary(const Segment& g, const QueuedHole& h) {
  uint64_t checksum;
  std::memcpy(&checksum, g.host + uint64_t{kSegmentRows} * 64 + uint64_t{h.row} * 8, sizeof(checksum));
  return row_summary(reinterpret_cast<const double*>(g.host) + uint64_t{h.row} * 8, checksum);
}

// A queued side's print lines with the stats of its holes' rows filled in (a failed
// segment's: none, as format.schema.print_stats writes a tensor without stats).
std::string filled_prints(const QueuedSide& q, const Segment& own, const Segment* taken) {
  std::string o;
  o.reserve(q.prints.size() + q.holes.size() * 120);
  size_t at = 0;
  for (const QueuedHole& h : q.holes) {
    if (h.print_at == std::string::npos) continue;
    const Segment& g = h.taken && taken ? *taken : own;
    o.append(q.prints, at, h.print_at - at);
    if (g.error.empty()) {
      const Summary sm = hole_summary(g, h);
      append_print_stats(o, &sm);
    } else {
      append_print_stats(o, nullptr);
    }
    at = h.print_at;
  }
  o.append(q.prints, at, std::string::npos);
  return o;
}

// A queued side's lines with its results filled in (or, for a failed segment, no stats
// and the error); a hole marked `taken` from `taken`'s rows.
std::string filled(const QueuedSide& q, const Segment& own, const Segment* taken) {
  std::string o;
  o.reserve(q.lines.size() + q.holes.size() * 200);
  size_t at = 0;
  for (const QueuedHole& h : q.holes) {
    const Segment& g = h.taken && taken ? *taken : own;
    o.append(q.lines, at, h.stats_at - at);
    if (g.error.empty()) {
      const Summary sm = hole_summary(g, h);
      append_stats_json(o, sm);
      o.append(q.lines, h.stats_at, h.checksum_at - h.stats_at);
      o += '"';
      append_checksum(o, sm.checksum);
      o += '"';
      at = h.checksum_at;
    } else {
      o += "null";
      o.append(q.lines, h.stats_at, h.checksum_at - h.stats_at);
      o += "null";
      o.append(q.lines, h.checksum_at, h.end_at - h.checksum_at);
      o += ",\"";
      o += schema::rec::kError;
      o += "\":";
      json_str(o, "stats on the device: " + g.error);
      at = h.end_at;
    }
  }
  o.append(q.lines, at, std::string::npos);
  return o;
}

// `g` free for the next fill (its results read, or never to be).
void free_segment(Segment& g) {
  g.state = Segment::kFree;
  g.used = 0;
  g.tab_used = 0;
  g.error.clear();
}

// One reader of `g` less (a queued side written, or a side that took none of its rows):
// the last one frees it for the next fill.
void unpin(Segment& g) {
  if (--g.sides == 0 && g.state == Segment::kDone) free_segment(g);
}

// Writes the first queued side if it can be (or appends its lines to `batch`, for the
// caller to write): false when it waits for its segment (and `wait` is false). Caller
// holds S.mu.
bool drain_one(Shared& S, bool wait, std::string* batch = nullptr) {
  DeviceQueue& Q = device_queue();
  if (Q.sides.empty()) return false;
  QueuedSide& q = Q.sides.front();
  if (q.segment) {
    Segment& g = *static_cast<Segment*>(q.segment);
    Segment* t = static_cast<Segment*>(q.taken);
    DeviceStats& D = *static_cast<DeviceStats*>(q.owner);
    for (Segment* each : {t, &g}) {  // (the taken one was shipped first)
      if (!each) continue;
      if (each->state == Segment::kFilling) {
        if (!wait) return false;
        ship(S, D, *each);
      }
      if (!settle(S, D, *each, wait)) return false;
    }
    std::string prints = q.prints.empty() ? std::string() : filled_prints(q, g, t);
    q.lines = filled(q, g, t);  // (std::bad_alloc: nothing changed)
    q.prints.swap(prints);
    q.holes.clear();
    q.segment = q.taken = nullptr;
    for (Segment* each : {t, &g}) {
      if (each) unpin(*each);
    }
  }
  if (batch) {
    *batch += q.lines;  // (std::bad_alloc: the side stays queued, its lines filled)
  } else if (Q.append) {
    Q.append(S, q.lines);
  }
  write_prints(q.prints);
  Q.sides.pop_front();
  return true;
}

// Writes the queued sides that are ready, in order, a write for all of them (or for each
// kDrainBatch bytes); with `wait` all of them (bounded: settle). Caller holds S.mu. Never
// throws.
constexpr size_t kDrainBatch = size_t{4} << 20;

void drain_queue(Shared& S, bool wait) {
  DeviceQueue& Q = device_queue();
  if (Q.pid != this_pid()) {  // a forked child: the parent's sides are the parent's
    Q.sides.clear();
    Q.pid = this_pid();
    return;
  }
  std::string batch;
  try {
    while (drain_one(S, wait, &batch)) {
      if (batch.size() >= kDrainBatch) {
        if (Q.append) Q.append(S, batch);
        batch.clear();
      }
    }
  } catch (...) {  // std::bad_alloc: what is left stays queued
  }
  if (Q.append) Q.append(S, batch);
}

// At exit: everything queued goes to the manifest (waiting for the lock at most 10 s, as
// the flight recorder's exit write).
void drain_at_exit() {
  Shared& S = shared();
  std::unique_lock<std::mutex> lock(S.mu, std::defer_lock);
  for (int i = 0; i < 1000 && !lock.try_lock(); ++i) ::usleep(10000);
  if (lock.owns_lock()) drain_queue(S, true);
}

// Rows for a side of `m` tensors whose tables take `tab_bytes`, from the segment's `used`
// (made a multiple of 8) on: the current segment of `R` or the next one (shipping the
// current one, waiting for the next to be free); null when none can be had (the side
// then waits for its results, as a flight recorder's sides do).
Segment* take_rows(Shared& S, DeviceStats& D, Ring& R, cu::Handle stream, const char* after, uint32_t m,
                   uint64_t tab_bytes) {
  if (m > kSegmentRows || tab_bytes > kSegmentTables) return nullptr;
  if (R.stream != stream) {  // the work buffers are shared: the earlier stream's work ends first
    if (R.current >= 0) ship(S, D, R.seg[R.current]);
    drain_queue(S, true);
    for (const Segment& g : R.seg)
      if (g.state != Segment::kFree) return nullptr;
    R.stream = stream;
  }
  Segment* g = R.current >= 0 ? &R.seg[R.current] : nullptr;
  const uint32_t at = g ? (g->used + 7) / 8 * 8 : 0;  // a side's rows start at a multiple of 8 (launch_side)
  if (g && g->state == Segment::kFilling && at + m <= kSegmentRows && g->tab_used + tab_bytes <= kSegmentTables) {
    g->used = at;
    return g;
  }
  if (g) ship(S, D, *g);
  const int next = (R.current + 1) % kSegments;
  Segment& n = R.seg[next];
  while (n.state != Segment::kFree && drain_one(S, true)) {
  }
  if (n.state != Segment::kFree && n.sides == 0 && !D.broken) {  // rows no record reads (a side that failed)
    ship(S, D, n);
    settle(S, D, n, true);
    if (n.state == Segment::kDone && n.error.empty()) free_segment(n);
  }
  if (n.state != Segment::kFree || D.broken) return nullptr;
  n.state = Segment::kFilling;
  n.fills += 1;
  n.stream = stream;
  n.after = after;
  R.current = next;
  return &n;
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_DEVICE_RING_H
