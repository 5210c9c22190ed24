// How a launch side's CUDA tensors go to the stats kernels (device_stats.h's packs,
// layouts and buffers): planned as fused_stats._launch plans them (one launch per element
// kind and tile width or dense tile), launched on the wrapper's stream into the ring's
// rows (levels stats and print) or into the side's own buffer, waited for (a flight
// recorder, print under AOTI_DEBUG_SYNC). At levels stats and print the sides of a
// wrapper that calls pending() (Site::defers) wait instead and go as one launch (PendingRun).
#ifndef AOTI_DEBUG_PART_DEVICE_LAUNCH_H
#define AOTI_DEBUG_PART_DEVICE_LAUNCH_H

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "constants.h"
#include "device_driver.h"
#include "device_ring.h"
#include "device_stats.h"
#include "dtypes.h"
#include "host_tensor.h"
#include "interface.h"
#include "state.h"
#include "stats.h"
#include "text.h"

namespace AOTI_DEBUG_NS {
namespace {

// Whether `site` is the graph inputs' (codegen's manager.Inputs), read before every graph
// call's first launch whatever site number it took: it starts a graph call (here, the ring's
// segment; flight.h, the flight recorder's call).
bool starts_graph_call(const Site& site) { return std::strcmp(site.kernel, schema::kInputsKernel) == 0; }

// How `items` (all on the current context's device) are read, as fused_stats._launch
// plans them: one group per kind and tile width or dense tile, in order of first
// appearance, each with its kernel, base, programs and rows of `table`. Items whose kind
// the pack has no kernel for are in no group (the host path); "" or a kernel's load fault.
struct Plan {
  struct Group {
    size_t kernel;
    uint64_t base;
    int64_t programs;
    uint64_t tab_at;
    int64_t tw;  // int64 per table row
    std::vector<size_t> members;
  };
  std::vector<Group> groups;
  std::vector<int64_t> table;
  uint64_t tab_bytes = 0;
  int64_t max_group_programs = 0;
  bool widest = true;  // every group reads 16-byte vectors where its kind has them (a run may take it)
};

std::string plan_items(Shared& S, DeviceStats& D, LoadedPack& lp, DeviceState& ds, const std::vector<DeviceItem>& items,
                       Plan& plan) {
  const Pack& pk = lp.pack;
  const int64_t block = pk.block;
  const int64_t max_programs = std::max<int64_t>(1, static_cast<int64_t>(pk.per_sm) * ds.sms);
  const int64_t min_tiles = pk.min_tiles;
  std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> kinds;
  for (const DeviceItem& it : items) {
    const std::tuple<uint32_t, uint32_t, uint32_t> key(it.kind, it.perm.cols, it.dense.block);
    if (std::find(kinds.begin(), kinds.end(), key) == kinds.end()) kinds.push_back(key);
  }
  std::vector<int64_t>& table = plan.table;
  for (const auto& [kind, cols, dense] : kinds) {
    Plan::Group g;
    for (size_t j = 0; j < items.size(); ++j) {
      if (items[j].kind == kind && items[j].perm.cols == cols && items[j].dense.block == dense) g.members.push_back(j);
    }
    uint32_t width = 0;
    for (const PackKernel& k : pk.kernels) {
      if (k.kind == kind) width = k.width;
    }
    if (width == 0) continue;  // no kernel for this kind: host path
    uint64_t base = 0;
    bool live = false;
    for (size_t j : g.members) {
      if (items[j].numel > 0 && (!live || items[j].ptr < base)) {
        base = items[j].ptr;
        live = true;
      }
    }
    if (!live) base = ds.buf;  // fused_stats: the output buffer stands in when every tensor is empty
    uint32_t vec = 16 / width;
    // fused_stats.plan / plan_permuted: 16 bytes of elements when the base and every
    // tensor's offset from it are 16-byte aligned; read in place, also every inner run and
    // row stride a multiple of the vector, and a tile row at least one.
    bool aligned = base % 16 == 0 && (cols == 0 || cols >= vec);
    for (size_t j : g.members) {
      const DeviceItem& it = items[j];
      if (vec > 1 && it.numel > 0 && (it.ptr - base) % 16 != 0) aligned = false;
      if (vec > 1 && cols) {
        if (it.perm.inner % vec) aligned = false;
        for (uint32_t d = 0; d < it.perm.nd; ++d) aligned = aligned && it.perm.dims[d][2] % vec == 0;
      }
    }
    if (!aligned) vec = 1;
    auto find = [&](uint32_t v) {
      size_t found = pk.kernels.size();
      for (size_t i = 0; i < pk.kernels.size(); ++i) {
        const PackKernel& k = pk.kernels[i];
        if (k.kind == kind && k.vec == v && k.cols == cols && k.dense == dense) found = i;
      }
      return found;
    };
    size_t kernel = find(vec);
    if (kernel == pk.kernels.size() && vec > 1) kernel = find(vec = 1);  // (a pack without the vector form)
    if (kernel == pk.kernels.size()) continue;
    plan.widest = plan.widest && (aligned || 16 / width == 1);
    std::string fault;
    cu::Handle fn = kernel_function(S, D, lp, ds, kernel, fault);
    if (!fault.empty()) return fault;
    if (!fn) continue;
    const uint64_t unit = static_cast<uint64_t>(width) * vec;
    g.kernel = kernel;
    g.base = base;
    g.programs = 0;
    g.tab_at = plan.tab_bytes;
    g.tw = cols ? kPermTableWidth : dense ? kDenseTableWidth : 6;
    for (size_t j : g.members) {
      const DeviceItem& it = items[j];
      const int64_t n = it.numel;
      // Tiles of `block` elements (dense: of its tile); read in place, of [block / cols, cols] over [rows, inner].
      const int64_t tile = dense ? static_cast<int64_t>(dense) : block;
      const int64_t tiles = cols ? (n / it.perm.inner + block / cols - 1) / (block / cols) *
                                       ((it.perm.inner + cols - 1) / cols)
                                 : (n + tile - 1) / tile;
      const int64_t per = std::max(min_tiles, (tiles + max_programs - 1) / max_programs);
      const int64_t nprog = std::max<int64_t>(1, (tiles + per - 1) / per);
      table.push_back(n ? static_cast<int64_t>((it.ptr - base) / unit) : 0);
      table.push_back(n);
      table.push_back(g.programs);
      table.push_back(nprog);
      table.push_back(per);
      table.push_back(it.row);
      if (cols) {
        table.push_back(it.perm.inner / vec);
        table.push_back(it.perm.inner_stride);
        table.push_back(it.perm.nd);
        for (uint32_t d = 0; d < kMaxRowDims; ++d) {
          const bool used = d < it.perm.nd;
          table.push_back(used ? it.perm.dims[d][0] : 0);
          table.push_back(used ? it.perm.dims[d][1] : 0);
          table.push_back(used ? it.perm.dims[d][2] / vec : 0);
        }
      } else if (dense) {  // fused_stats.plan_dense: the walk's period 2**62 where it never wraps
        table.push_back(it.dense.nl);
        table.push_back(it.dense.nt);
        for (uint32_t d = 0; d < kDenseMax; ++d) {
          table.push_back(it.dense.lanes[d][0]);
          table.push_back(it.dense.lanes[d][1]);
        }
        for (uint32_t d = 0; d < kDenseMax; ++d) {
          table.push_back(d == 0 && it.dense.nt == 1 ? int64_t{1} << 62 : it.dense.tiles[d][0]);
          table.push_back(it.dense.tiles[d][1]);
        }
      }
      g.programs += nprog;
    }
    table.resize(round_up(table.size() * 8) / 8, 0);  // the next group's table 256-byte aligned
    plan.tab_bytes = table.size() * 8;
    plan.max_group_programs = std::max(plan.max_group_programs, g.programs);
    plan.groups.push_back(std::move(g));
  }
  return "";
}

// Launches `plan`'s groups over `items` on `stream`. With `seg`, into its rows from
// `first` (the table's rows count from it: a segment's rows from `first`, a multiple of 8,
// are rows from 0 of `out` moved by `first` rows, whose checksums, at out + 8 * k_total +
// row, stay in place with k_total less 7/8 of `first`); without, into the side's own
// buffer, copied and waited for here into `results`. The table is staged at `staged` of
// the segment's pinned twin (a waiting run's room), or where the segment's staging is
// used up to (null). With `kept` (the side's table as last copied, KeptTable), a table
// equal to it is not copied again. "" or the failing call.
std::string launch_plan(Shared& S, DeviceStats& D, LoadedPack& lp, DeviceState& ds, cu::Handle stream,
                        const char* after, Plan& plan, const std::vector<DeviceItem>& items, Segment* seg,
                        uint32_t first, unsigned char* staged, cu::DevPtr counters, KeptTable* kept,
                        std::vector<Summary>* results) {
  const Pack& pk = lp.pack;
  const int64_t m = static_cast<int64_t>(items.size());
  const uint64_t tab_bytes = plan.tab_bytes;
  const uint64_t out_bytes = seg ? 0 : static_cast<uint64_t>(9 * m) * 8;
  // Growing the buffers frees the old ones: queued kernels of earlier sides may still read them.
  if (seg && (static_cast<uint64_t>(plan.max_group_programs) * 72 > ds.part_bytes || tab_bytes > ds.tab_bytes) &&
      ds.buf) {
    if (cu::Result r = wait_stream(S, D, stream, after); r != 0) return cu_error(D, "cuStreamSynchronize", r);
  }
  std::string err = reserve(S, D, ds, stream, after, out_bytes,
                            static_cast<uint64_t>(plan.max_group_programs) * 9 * 8, tab_bytes,
                            seg ? 0 : static_cast<uint64_t>(m) * 4);
  if (!err.empty()) return err;
  // An all-empty group's base was chosen before the buffer may have moved: it stands on the new one.
  cu::DevPtr d_out = ds.buf, d_part = ds.buf + ds.out_bytes, d_tab = d_part + ds.part_bytes,
             d_counters = d_tab + ds.tab_bytes;
  if (seg) {
    d_out = seg->dev + uint64_t{first} * 64;
    d_counters = counters;
  }
  const size_t tab_count = static_cast<size_t>(tab_bytes / 8);
  if (kept && kept->table.size() == tab_count && std::memcmp(kept->table.data(), plan.table.data(), tab_bytes) == 0) {
    d_tab = kept->dev;  // on the device already
  } else {
    if (kept && kept_slot(D, ds, *kept, tab_bytes)) {
      d_tab = kept->dev;
      kept->table.clear();  // valid again once the copy is queued
    }
    // The table is staged in pinned memory that no later side writes before the copy ran:
    // the segment's (reused after its event; a run's room was taken with its sides),
    // else the side's own (waited for below).
    const bool own_room = seg && !staged;
    if (own_room) staged = seg->host + kSegmentResults + seg->tab_used;
    if (!seg) staged = D.host;
    std::memcpy(staged, plan.table.data(), static_cast<size_t>(tab_bytes));
    cu::Result r = D.api.copy_htod_async(d_tab, staged, static_cast<size_t>(tab_bytes), stream);
    if (r != 0) return cu_error(D, "cuMemcpyHtoDAsync", r);
    if (own_room) seg->tab_used += tab_bytes;
    if (kept && d_tab == kept->dev) kept->table.assign(plan.table.begin(), plan.table.begin() + tab_count);
  }
  int32_t k_total = static_cast<int32_t>(seg ? kSegmentRows - first / 8 * 7 : m);
  cu::DevPtr scratch[kMaxScratch] = {0, 0, 0, 0};
  for (Plan::Group& g : plan.groups) {
    bool empty = true;
    for (size_t j : g.members) empty = empty && items[j].numel == 0;
    cu::DevPtr base = empty ? d_out : g.base;
    cu::DevPtr tab = d_tab + g.tab_at;
    int32_t k = static_cast<int32_t>(g.members.size());
    void* params[kKernelArgCount + kMaxScratch] = {&base, &tab, &k, &d_part, &d_counters, &d_out, &k_total};
    for (uint32_t i = 0; i < pk.scratch; ++i) params[kKernelArgCount + i] = &scratch[i];
    const PackKernel& pkk = pk.kernels[g.kernel];
    if (D.trace) {  // (the line is not made otherwise: a launch side's hot path)
      trace(D, "launch kernel " + std::to_string(g.kernel) + " after " + after + ": grid " +
                   std::to_string(g.programs) + ", block " + std::to_string(32 * pkk.num_warps) + ", shared " +
                   std::to_string(pkk.shared) + ", k " + std::to_string(k) + ", k_total " + std::to_string(k_total) +
                   ", base " + hex(base) + ", stream " + hex(reinterpret_cast<uint64_t>(stream)));
    }
    cu::Result r = D.api.launch_kernel(ds.functions[g.kernel], static_cast<unsigned>(g.programs), 1, 1,
                                       32 * pkk.num_warps, 1, 1, pkk.shared, stream, params, nullptr);
    if (r != 0) return cu_error(D, "cuLaunchKernel", r);
  }
  if (seg) return "";  // the results come with the segment's
  cu::Result r = D.api.copy_dtoh_async(D.host, d_out, static_cast<size_t>(out_bytes), stream);
  if (r != 0) return cu_error(D, "cuMemcpyDtoHAsync", r);
  r = wait_stream(S, D, stream, after);
  if (r != 0) return cu_error(D, "cuStreamSynchronize", r);
  const double* o = reinterpret_cast<const double*>(D.host);
  for (const Plan::Group& g : plan.groups) {
    for (size_t j : g.members) {
      uint64_t checksum;
      std::memcpy(&checksum, o + 8 * m + items[j].row, sizeof(checksum));
      (*results)[items[j].index] = row_summary(o + items[j].row * 8, checksum);
    }
  }
  return "";
}

// Sides whose stats launch waits in a segment (Site::defers, levels stats and print): their items,
// rows counted from the run's first side's first row, go as one launch per kind and
// layout (launch_waiting) where the wrapper says that what follows may write one of their
// tensors (entry_pending), at the graph call's end (entry_call_end), or before the
// segment is shipped. Their rows and table bytes are taken when each side is made, so
// its records are queued with their rows as a launched side's are.
struct PendingRun {
  LoadedPack* lp = nullptr;
  DeviceState* ds = nullptr;
  cu::Handle stream = nullptr;
  cu::DevPtr counters = 0;
  uint32_t first = 0;   // the first side's first row
  uint64_t tab_at = 0;  // where its table bytes start in the segment's staging
  KeptKey kept;         // the first side's: the run's table is kept in its slot
  std::string after;    // the last side's kernel
  std::vector<DeviceItem> items;
  // A new handle of each waiting tensor: its memory goes to no other buffer before the
  // launch is queued (a wrapper frees a buffer after its last use; codegen's pending
  // lines come only before what writes one), as the Python runtime's references hold.
  std::vector<AtenTensorHandle> held;
  ~PendingRun() {
    for (AtenTensorHandle h : held) aoti_torch_delete_tensor_object(h);
  }
};

// The segments with a waiting run (this runtime's), in the order the runs began.
std::vector<Segment*>& waiting_segments() {
  static std::vector<Segment*> v;
  return v;
}

void launch_run(Shared& S, DeviceStats& D, Segment& g) {
  std::unique_ptr<PendingRun> run(static_cast<PendingRun*>(g.run));
  g.run = nullptr;
  auto& waiting = waiting_segments();
  waiting.erase(std::remove(waiting.begin(), waiting.end(), &g), waiting.end());
  if (!run || run->items.empty()) return;
  std::string err;
  if (D.broken) {
    err = "not launched: the device path failed before";
  } else {
    try {
      Plan plan;
      err = plan_items(S, D, *run->lp, *run->ds, run->items, plan);
      size_t planned = 0;
      for (const Plan::Group& pg : plan.groups) planned += pg.members.size();
      if (err.empty() && planned != run->items.size()) err = "a waiting side's kernel went missing";
      if (err.empty() && run->tab_at + plan.tab_bytes > kSegmentTables) err = "a waiting run's table outgrew its room";
      if (err.empty()) {
        KeptTable& kept = run->ds->kept[run->kept];
        err = launch_plan(S, D, *run->lp, *run->ds, run->stream, run->after.c_str(), plan, run->items, &g, run->first,
                          g.host + kSegmentResults + run->tab_at, run->counters, &kept, nullptr);
      }
    } catch (...) {  // std::bad_alloc
      err = "out of host memory for a waiting run";
    }
  }
  if (!err.empty()) {  // its rows hold nothing: every record of the segment says why
    g.error = err;
    if (!D.broken) device_failed(S, D, run->after, err);
  }
}

// Every waiting run of this runtime launched (entry_pending, entry_call_end). Caller holds S.mu.
void launch_waiting_runs(Shared& S) {
  auto& waiting = waiting_segments();
  if (waiting.empty()) return;
  DeviceStats& D = device_stats();
  while (!waiting.empty()) launch_run(S, D, *waiting.front());
}

// New handles of the planned items' tensors into `held` (PendingRun::held); false, and
// none kept, where one cannot be made (the side then launches at once).
bool hold(const Value* v, const std::vector<DeviceItem>& items, const Plan& plan, std::vector<AtenTensorHandle>& held) {
  for (const Plan::Group& g : plan.groups) {
    for (size_t j : g.members) {
      AtenTensorHandle h = nullptr;
      if (aoti_torch_new_tensor_handle(v[items[j].index].handle(), &h) != 0 || !h) {
        for (AtenTensorHandle each : held) aoti_torch_delete_tensor_object(each);
        held.clear();
        return false;
      }
      held.push_back(h);
    }
  }
  return true;
}

// The device's summaries of `items` (all on the current context's device), launched on
// `stream` as fused_stats._launch launches them; "" or the failing call. Items whose
// kind the pack has no kernel for are left out (`launched` says which were done).
// With a ring (`R`, levels stats and print), the results go to rows of its current segment, which
// `seg` then names, `items`' rows are those rows, and nothing is waited for; with `wait`
// too (Site::defers) and every tensor read in 16-byte vectors where its kind has them,
// the side joins the segment's waiting run instead of launching (PendingRun). Without a
// ring (or when no segment has room for the side), into the side's own buffer, copied
// and waited for here, and `results` holds them.
std::string launch_side(Shared& S, DeviceStats& D, LoadedPack& lp, DeviceState& ds, cu::Handle stream,
                        const char* after, const Value* v, std::vector<DeviceItem>& items,
                        std::vector<Summary>& results, std::vector<char>& launched, Ring* R, Segment*& seg,
                        const KeptKey& key, bool wait) {
  seg = nullptr;
  const int64_t m = static_cast<int64_t>(items.size());
  Plan plan;
  std::string err = plan_items(S, D, lp, ds, items, plan);
  if (!err.empty()) return err;
  if (plan.groups.empty()) return "";
  if (R) seg = take_rows(S, D, *R, stream, after, static_cast<uint32_t>(m), plan.tab_bytes);
  if (D.broken) return "";  // a wait for a segment failed (warned): the host path
  const uint32_t first = seg ? seg->used : 0;
  if (seg) {
    for (DeviceItem& it : items) it.row += first;
  }
  bool copied = false;
  for (const DeviceItem& it : items) copied = copied || it.copy;
  std::vector<AtenTensorHandle> held;
  if (seg && wait && plan.widest && !copied && hold(v, items, plan, held)) {
    // Rows and table bytes taken now; the launch waits (a side with a device copy does
    // not: the copy is freed with the side).
    PendingRun* run = static_cast<PendingRun*>(seg->run);
    if (run && (run->stream != stream || run->lp != &lp || run->ds != &ds)) {
      launch_run(S, D, *seg);  // (one stream, pack and device a run)
      run = nullptr;
    }
    if (!run) {
      auto fresh = std::make_unique<PendingRun>();
      fresh->lp = &lp;
      fresh->ds = &ds;
      fresh->stream = stream;
      fresh->counters = R->counters;
      fresh->first = first;
      fresh->tab_at = seg->tab_used;
      fresh->kept = key;
      waiting_segments().push_back(seg);
      launch_waiting = &launch_run;
      run = fresh.release();
      seg->run = run;
    }
    run->after = after;
    run->held.insert(run->held.end(), held.begin(), held.end());
    for (const Plan::Group& g : plan.groups) {
      for (size_t j : g.members) {
        DeviceItem it = items[j];
        it.row -= run->first;
        run->items.push_back(it);
        launched[it.index] = 1;
      }
    }
    seg->tab_used += plan.tab_bytes;
    seg->used += static_cast<uint32_t>(m);
    return "";
  }
  // A run waiting in this segment stages its table in the room its sides took, from
  // its first side's: it goes first, before this side's table is staged after that room.
  if (seg && seg->run) launch_run(S, D, *seg);
  if (D.broken) return "";
  KeptTable& kept = ds.kept[key];
  if (seg) seg->used += static_cast<uint32_t>(m);
  err = launch_plan(S, D, lp, ds, stream, after, plan, items, seg, first, nullptr, R ? R->counters : 0, &kept,
                    &results);
  if (!err.empty()) return err;
  for (const Plan::Group& g : plan.groups) {
    for (size_t j : g.members) launched[items[j].index] = 1;
  }
  return "";
}

// Where a side's results wait on the device (levels stats and print): the segment, and per value its row.
struct Deferred {
  Segment* segment = nullptr;
  DeviceStats* owner = nullptr;
  std::vector<uint32_t> rows;
};

// The summaries of the CUDA tensors among `v` (one launch side) that the device computes:
// `done[i]` is 1 where `out[i]` holds one, 2 where it comes later, from row
// `deferred.rows[i]` of `deferred.segment` (with `defer`: levels stats and print, records queued).
// `skip[i]` (where given): not this one (an input taken from its producer: records.h).
// Caller holds S.mu. Never throws.
void device_summaries(Shared& S, const Site& site, const Value* v, size_t n, const char* phase, const DeviceOps* dev,
                      std::vector<Summary>& out, std::vector<char>& done, bool defer, Deferred& deferred,
                      const std::vector<char>* skip = nullptr) {
  if (!dev || !dev->current_stream || (!dev->stats_pack && !(dev->stats_pack_file && *dev->stats_pack_file))) return;
  DeviceStats& D = device_stats();
  if (D.broken || D.off) return;
  const bool before = std::strcmp(phase, "before") == 0;
  DeviceCopies copies;
  std::vector<DeviceItem> items;
  std::vector<HostTensor> metas;  // per item
  try {
    LoadedPack* lp = nullptr;
    int32_t device = -1;
    for (size_t i = 0; i < n; ++i) {
      if (v[i].kind() != Value::kTensor || (before && site.args[i].uninitialised) || (skip && (*skip)[i])) continue;
      HostTensor t;
      if (!describe(v[i].handle(), t).empty() || t.device_type != kDeviceCuda) continue;
      if (!D.tried) {
        D.tried = true;
        const char* off = std::getenv(schema::env::kFusedStats);
        D.off = off && std::strcmp(off, "0") == 0;
        const char* tr = std::getenv(schema::env::kTraceDevice);
        D.trace = tr && *tr && std::strcmp(tr, "0") != 0;
        trace(D, D.off ? "off (AOTI_DEBUG_FUSED_STATS=0)" : "loading libcuda.so.1");
        if (D.off) return;
        std::string why = cu::load(D.api);
        trace(D, why.empty() ? "driver ready" : why);
        if (!why.empty()) {
          D.broken = true;
          warn_once(S, "device-stats-driver", why + ": CUDA tensors are copied to the host for their stats");
          return;
        }
      }
      if (!lp && !(lp = find_pack(S, D, *dev))) return;
      const TypeInfo* ti = type_info(t.dtype);
      auto kind = ti ? lp->pack.dtypes.find(ti->name) : lp->pack.dtypes.end();
      if (kind == lp->pack.dtypes.end()) continue;  // a dtype the kernel does not read: host path
      if (device < 0) device = t.device_index;
      if (t.device_index != device) continue;  // one device per side here; others: host path
      uint32_t width = 0;
      for (const PackKernel& k : lp->pack.kernels) {
        if (k.kind == kind->second.first) width = k.width;
      }
      if (width == 0) continue;
      void* p = nullptr;
      if (aoti_torch_get_data_ptr(v[i].handle(), &p) != 0) continue;
      uint64_t ptr = reinterpret_cast<uint64_t>(p);
      bool copy = t.numel > 0 && (!is_contiguous(t) || ptr % width != 0);
      PermLayout perm;
      DenseLayout dense;
      if (copy && ptr % width == 0 && kind->second.second == 1 && perm_layout(t, perm)) {
        if (dense_layout(lp->pack, kind->second.first, width, perm, dense)) {
          copy = false;  // read in place, in memory order, by the dense kernel
        } else if ((perm.cols = perm_cols(lp->pack, kind->second.first, perm.inner)) != 0) {
          copy = false;  // read in place by the strided kernel
        }
      }
      items.push_back({i, 0, kind->second.first, t.numel * static_cast<int64_t>(kind->second.second), ptr, copy,
                       perm, dense});
      metas.push_back(std::move(t));
    }
    if (items.empty()) return;
    DeviceState* ds = device_state(S, D, *lp, device);
    if (!ds) return;
    void* stream = nullptr;
    if (dev->current_stream(device, &stream) != 0) {
      warn_once(S, "device-stats-stream", "cannot get the current CUDA stream: stats on the host");
      return;
    }
    int capturing = 0;
    std::string err;
    if (cu::Result r = D.api.stream_is_capturing(stream, &capturing); r != 0) {
      err = cu_error(D, "cuStreamIsCapturing", r);  // the first call after a fault: its sticky error
    } else if (capturing != 0) {
      return;  // inside a CUDA graph capture: the host path (which records nothing there)
    }
    if (err.empty()) {
      // Only now anything goes on the stream: the copies of non-contiguous tensors first.
      std::vector<DeviceItem> ready;
      for (size_t j = 0; j < items.size(); ++j) {
        DeviceItem it = items[j];
        if (it.copy && !(it.ptr = contiguous_copy(v[it.index].handle(), metas[j], copies))) continue;
        it.row = static_cast<int64_t>(ready.size());
        ready.push_back(it);
      }
      items.swap(ready);
      if (items.empty()) return;
      Ring* R = defer ? ring_of(S, D, *ds, stream, site.kernel, err) : nullptr;
      // A graph call starts the next one: ship the last. A call starts at a before side
      // whose site number is not above the last one's (flight.h's rule), or at the graph
      // inputs' side (after args only), which codegen puts before every call's first
      // launch whatever its number: its rows then go in the new call's segment, where the
      // call's launches take them (records.h: a side takes rows of one earlier segment).
      const bool starts_call = !before && starts_graph_call(site);
      if (R && (before || starts_call) && site.id >= 0) {
        auto last = R->last_site.find(dev);
        if (last != R->last_site.end() && (starts_call || site.id <= last->second) && R->current >= 0) {
          ship(S, D, R->seg[R->current]);
        }
        R->last_site[dev] = starts_call ? -1 : site.id;
      }
      if (err.empty() && !D.broken) {
        out.assign(n, Summary());
        done.assign(n, 0);
        Segment* seg = nullptr;
        const bool wait = site.defers && (site.level == schema::kStats || site.level == schema::kPrint) && !site.sync;
        err = launch_side(S, D, *lp, *ds, stream, site.kernel, v, items, out, done, R, seg,
                          KeptKey(&site, before, stream), wait);
        if (err.empty() && seg) {
          deferred.segment = seg;
          deferred.owner = &D;
          deferred.rows.assign(n, 0);
          for (const DeviceItem& it : items) {
            if (!done[it.index]) continue;
            done[it.index] = 2;
            deferred.rows[it.index] = static_cast<uint32_t>(it.row);
          }
        }
      } else if (err.empty()) {
        return;  // a wait for an earlier segment gave up (warned): the host path
      }
    }
    if (!err.empty()) {
      done.assign(n, 0);
      deferred = Deferred();
      device_failed(S, D, site.kernel, err);
    }
  } catch (...) {  // std::bad_alloc: the host path for this side
    done.assign(n, 0);
    deferred = Deferred();
  }
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_DEVICE_LAUNCH_H
