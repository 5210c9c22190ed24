// Stats and checksums of CUDA tensors computed on the device (levels stats and print),
// by the kernel the Python runtime launches (runtime/fused_stats_kernels.py): compiled
// when the model was (codegen/device_stats.py) into a pack of cubins that the wrapper
// lends (DeviceOps::stats_pack / stats_pack_file), loaded and launched through the CUDA
// driver API (device_driver.h). All CUDA tensors of a launch side go in one launch per
// element kind on the wrapper's stream, with the table fused_stats._launch builds, and
// only their results come back: 9 doubles per tensor (no device-wide sync, no copy of the
// tensors). At levels stats and print they go into a ring on the device and the side's
// records (and print lines) wait in a queue, with no synchronisation (device_ring.h);
// with a flight recorder (which judges each side as it is made) and at level print under
// AOTI_DEBUG_SYNC they are copied into pinned memory and waited for with one
// cuStreamSynchronize per side. Strided tensors of the kinds the
// pack has the strided kernel for are read in place, as the Python runtime reads them
// (fused_stats._perm_layout, plan_permuted: a launch per kind and tile width); other
// non-contiguous or misaligned tensors are first copied on the device (as the Python
// runtime's .contiguous()). What the pack
// does not cover (other dtypes, other devices) keeps the host path (host_tensor.h); so
// does everything once the device path failed (one warning), and everything under
// AOTI_DEBUG_FUSED_STATS=0.
#ifndef AOTI_DEBUG_PART_DEVICE_STATS_H
#define AOTI_DEBUG_PART_DEVICE_STATS_H

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
#include "dtypes.h"
#include "host_tensor.h"
#include "interface.h"
#include "state.h"
#include "stats.h"
#include "text.h"

namespace AOTI_DEBUG_NS {
namespace {

LoadedPack* load_pack(Shared& S, DeviceStats& D, const DeviceOps& dev) {
  std::string key;
  if (dev.stats_pack) {
    char b[32];
    std::snprintf(b, sizeof(b), "@%p", static_cast<const void*>(dev.stats_pack));
    key = b;
  } else {
    key = dev.stats_pack_file;
  }
  for (LoadedPack* p : D.packs) {
    if (p->key == key) return p->error.empty() ? p : nullptr;
  }
  LoadedPack* lp = new LoadedPack();
  lp->key = key;
  D.packs.push_back(lp);
  if (dev.stats_pack) {
    lp->error = parse_pack(dev.stats_pack, 0, lp->pack);
  } else {
    FILE* f = std::fopen(key.c_str(), "rb");
    if (!f) {
      lp->error = "cannot open " + key;
    } else {
      unsigned char chunk[65536];
      size_t got;
      while ((got = std::fread(chunk, 1, sizeof(chunk), f)) > 0) lp->bytes.insert(lp->bytes.end(), chunk, chunk + got);
      std::fclose(f);
      lp->error = parse_pack(lp->bytes.data(), lp->bytes.size(), lp->pack);
    }
  }
  trace(D, "pack " + key + ": " + (lp->error.empty() ? std::to_string(lp->pack.kernels.size()) + " kernels for sm_" +
                                                          std::to_string(lp->pack.capability)
                                                    : lp->error));
  if (!lp->error.empty()) {
    warn_once(S, "device-stats-pack", "the stats kernels cannot be used (" + lp->error +
                                         "): CUDA tensors are copied to the host for their stats");
    return nullptr;
  }
  return lp;
}

// The pack a wrapper lends, loaded once per source; null when unusable.
LoadedPack* find_pack(Shared& S, DeviceStats& D, const DeviceOps& dev) {
  for (const auto& w : D.by_wrapper) {
    if (w.first == &dev) return w.second;
  }
  LoadedPack* lp = load_pack(S, D, dev);
  D.by_wrapper.emplace_back(&dev, lp);
  return lp;
}

// The pack's state on the current context's device, `ordinal`; null when it cannot be used there.
DeviceState* device_state(Shared& S, DeviceStats& D, LoadedPack& lp, int ordinal) {
  DeviceState& ds = lp.devices[ordinal];
  cu::Handle ctx = nullptr;
  if (D.api.ctx_get_current(&ctx) != 0 || !ctx) return nullptr;  // no context on this thread: host path
  if (ds.checked && ds.ctx == ctx) return ds.usable ? &ds : nullptr;
  cu::Device cur = -1, want = -1;
  if (D.api.ctx_get_device(&cur) != 0 || D.api.device_get(&want, ordinal) != 0 || cur != want) {
    return nullptr;  // tensors of another device than the current one: host path
  }
  ds = DeviceState();
  ds.checked = true;
  ds.ctx = ctx;
  int major = 0, minor = 0;
  if (D.api.device_attribute(&ds.sms, cu::kAttrSms, cur) != 0 || D.api.device_attribute(&major, cu::kAttrMajor, cur) ||
      D.api.device_attribute(&minor, cu::kAttrMinor, cur) || ds.sms <= 0) {
    warn_once(S, "device-stats-device", "cannot read the CUDA device's attributes: stats on the host");
    return nullptr;
  }
  if (static_cast<uint32_t>(major * 10 + minor) != lp.pack.capability) {
    warn_once(S, "device-stats-arch", "the stats kernels were compiled for sm_" + std::to_string(lp.pack.capability) +
                                          ", cuda:" + std::to_string(ordinal) + " is sm_" +
                                          std::to_string(major * 10 + minor) + ": stats on the host");
    return nullptr;
  }
  ds.functions.assign(lp.pack.kernels.size(), nullptr);
  ds.unloadable.assign(lp.pack.kernels.size(), 0);
  ds.usable = true;
  trace(D, "cuda:" + std::to_string(ordinal) + " context " + hex(reinterpret_cast<uint64_t>(ctx)) + ": sm_" +
               std::to_string(major * 10 + minor) + ", " + std::to_string(ds.sms) + " SMs");
  return &ds;
}

// A driver error that leaves the context unusable (an earlier kernel's fault: illegal
// address, assert, launch failure...): every later call returns it, whatever it is.
bool context_broken(cu::Result r) { return r >= 700 && r < 800; }

// The function of pack kernel `i`, loaded on first use; null (one warning) when it cannot
// be. A broken context is not the kernel's fault: `fault` gets the error (no warning here,
// the kernel is tried again on another context), and the caller names the launch.
cu::Handle kernel_function(Shared& S, DeviceStats& D, LoadedPack& lp, DeviceState& ds, size_t i, std::string& fault) {
  if (ds.functions[i] || ds.unloadable[i]) return ds.functions[i];
  cu::Handle module = nullptr, fn = nullptr;
  const char* call = "cuModuleLoadData";
  const PackKernel& pk = lp.pack.kernels[i];
  trace(D, "load kernel " + std::to_string(i) + " (kind " + std::to_string(pk.kind) + ", vec " +
               std::to_string(pk.vec) + ")");
  cu::Result r = D.api.module_load_data(&module, pk.image);
  if (r == 0) {
    call = "cuModuleGetFunction";
    r = D.api.module_get_function(&fn, module, pk.name);
  }
  trace(D, "loaded kernel " + std::to_string(i) + ": " + (r == 0 && fn ? std::string("ok") : cu_error(D, call, r)));
  if (context_broken(r)) {
    fault = cu_error(D, call, r);
    return nullptr;
  }
  if (r != 0 || !fn) {
    ds.unloadable[i] = 1;
    warn_once(S, "device-stats-load", "cannot load the stats kernel (" + cu_error(D, call, r) +
                                          "): those tensors' stats on the host");
    return nullptr;
  }
  return ds.functions[i] = fn;
}

// How the strided kernel reads a tensor in place (fused_stats._Perm): `[rows, inner]`,
// the inner run of unit memory stride and logical stride `inner_stride`, the rows over
// `nd` row dims of (size, logical stride, memory stride), innermost first; `cols` the
// tile width. `cols` 0: the tensor is read as a contiguous one.
struct PermLayout {
  uint32_t cols = 0;
  int64_t inner = 0, inner_stride = 0;
  uint32_t nd = 0;
  int64_t dims[kMaxRowDims][3] = {};
};

// fused_stats._perm_layout: the layout of a non-contiguous tensor with a unit-stride dim
// of size > 1 (dims adjacent in both logical and memory order merged, size-1 dims
// ignored), or false (empty, a negative stride, no unit-stride dim, too many row dims,
// kMaxPermRows rows or more: the kernel decomposes row numbers in 32 bits).
constexpr int64_t kMaxPermRows = int64_t{1} << 31;  // fused_stats.MAX_PERM_ROWS

bool perm_layout(const HostTensor& t, PermLayout& out) {
  struct Dim {
    int64_t ms, ls, n;
  };
  Dim dims[64];
  size_t nd = 0;
  int64_t logical = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    const int64_t size = t.shape[i], stride = t.stride[i];
    if (size != 1) {
      if (stride < 0) return false;
      if (nd && stride == dims[nd - 1].ms * dims[nd - 1].n) {
        dims[nd - 1].n *= size;  // the next dim in memory too
      } else {
        if (nd == 64) return false;
        dims[nd++] = {stride, logical, size};
      }
    }
    logical *= size;
  }
  if (logical == 0 || nd < 2 || nd - 1 > kMaxRowDims) return false;
  size_t best = nd;  // the longest unit-stride dim, the logically innermost of equals
  for (size_t i = 0; i < nd; ++i) {
    if (dims[i].ms == 1 && (best == nd || dims[i].n > dims[best].n ||
                            (dims[i].n == dims[best].n && dims[i].ls < dims[best].ls))) {
      best = i;
    }
  }
  if (best == nd || logical / dims[best].n >= kMaxPermRows) return false;
  out.inner = dims[best].n;
  out.inner_stride = dims[best].ls;
  for (size_t i = best + 1; i < nd; ++i) dims[i - 1] = dims[i];
  --nd;
  // Row dims in memory order, innermost first (by memory stride, then logical stride, size).
  std::sort(dims, dims + nd, [](const Dim& a, const Dim& b) {
    return a.ms != b.ms ? a.ms < b.ms : a.ls != b.ls ? a.ls < b.ls : a.n < b.n;
  });
  out.nd = static_cast<uint32_t>(nd);
  for (size_t i = 0; i < nd; ++i) {
    out.dims[i][0] = dims[i].n;
    out.dims[i][1] = dims[i].ls;
    out.dims[i][2] = dims[i].ms;
  }
  return true;
}

// fused_stats._cols among the strided kernel's tile widths the pack has for `kind` (0: none):
// the one that reads a row of `inner` elements for the least lanes plus per-row work.
constexpr int64_t kPermRowCost = 16;  // fused_stats._ROW_COST

uint32_t perm_cols(const Pack& pk, uint32_t kind, int64_t inner) {
  uint32_t best = 0;
  int64_t cost = 0;
  for (const PackKernel& k : pk.kernels) {
    if (k.kind != kind || k.cols == 0 || k.vec != 1) continue;
    const int64_t cb = k.cols, c = (inner + cb - 1) / cb * (cb + kPermRowCost);
    if (best == 0 || c < cost || (c == cost && k.cols < best)) {
      best = k.cols;
      cost = c;
    }
  }
  return best;
}

// How the dense kernel reads a tensor that fills a dense block of memory in another order
// (fused_stats._Dense): in memory order, tiles of `block` elements, element t * block + a
// of logical index f(t) + w(a), each a sum of mixed-radix digits times weights: (size,
// weight) per digit, innermost first, the last taking the quotient. `block` 0: not dense.
struct DenseLayout {
  uint32_t block = 0;
  uint32_t nl = 0, nt = 0;
  int64_t lanes[kDenseMax][2] = {}, tiles[kDenseMax][2] = {};
};

// fused_stats._dense_layout, among the tiles the pack has a dense kernel of `kind` for:
// whether `perm` (a tensor read in place) fills a dense block and a tile of the pack's
// block or half of it keeps its logical index affine within each tile.
bool dense_layout(const Pack& pk, uint32_t kind, uint32_t width, const PermLayout& perm, DenseLayout& out) {
  int64_t dims[kMaxRowDims + 1][2];
  uint32_t nd = 0;
  dims[nd][0] = perm.inner;
  dims[nd++][1] = perm.inner_stride;
  int64_t numel = perm.inner;
  for (uint32_t d = 0; d < perm.nd; ++d) {
    if (perm.dims[d][2] != numel) return false;  // gaps, a stride-0 dim or overlaps
    dims[nd][0] = perm.dims[d][0];
    dims[nd++][1] = perm.dims[d][1];
    numel *= perm.dims[d][0];
  }
  if (numel >= (int64_t{1} << 32)) return false;
  for (const int64_t b : {static_cast<int64_t>(pk.block), static_cast<int64_t>(pk.block / 2)}) {
    if (b < 16 / static_cast<int64_t>(width) || (b & (b - 1)) != 0) continue;
    bool packed = false;
    for (const PackKernel& k : pk.kernels) packed = packed || (k.kind == kind && k.dense == b);
    if (!packed) continue;
    uint32_t k = 0;  // the first dim whose period does not divide the tile
    int64_t period = 1;
    while (k < nd && b % (period * dims[k][0]) == 0) period *= dims[k++][0];
    if (k < nd && dims[k][0] % (b / period) != 0) continue;  // dim k would wrap inside a tile
    out = DenseLayout();
    out.block = static_cast<uint32_t>(b);
    if (k == nd) {  // the whole tensor in one tile
      for (uint32_t d = 0; d < nd; ++d) {
        out.lanes[d][0] = d + 1 < nd ? dims[d][0] : 0;
        out.lanes[d][1] = dims[d][1];
      }
      out.nl = nd;
      out.nt = 1;
      return true;
    }
    const int64_t part = b / period;
    for (uint32_t d = 0; d < k; ++d) {
      out.lanes[d][0] = dims[d][0];
      out.lanes[d][1] = dims[d][1];
    }
    out.lanes[k][1] = dims[k][1];
    out.nl = k + 1;
    out.tiles[0][0] = dims[k][0] / part;
    out.tiles[0][1] = part * dims[k][1];
    for (uint32_t d = k + 1; d < nd; ++d) {
      out.tiles[d - k][0] = dims[d][0];
      out.tiles[d - k][1] = dims[d][1];
    }
    out.nt = nd - k;
    out.tiles[out.nt - 1][0] = 0;  // the last takes the quotient
    return true;
  }
  return false;
}

// One tensor for the device: its position among the side's values, its row in the
// results, the kernel's element kind and width, its values and where they are.
struct DeviceItem {
  size_t index;
  int64_t row;
  uint32_t kind;
  int64_t numel;
  uint64_t ptr;
  bool copy;  // non-contiguous or misaligned: read from a contiguous copy made on the device
  PermLayout perm;  // read in place by the strided kernel (perm.cols > 0)
  DenseLayout dense;  // read in place by the dense kernel (dense.block > 0)
};

// Deletes the device copies made for non-contiguous tensors when the side is done.
struct DeviceCopies {
  std::vector<AtenTensorHandle> handles;
  ~DeviceCopies() {
    for (AtenTensorHandle h : handles) aoti_torch_delete_tensor_object(h);
  }
};

// A contiguous device copy of `h` (on the current stream: the wrapper's), its data pointer; 0 when none.
uint64_t contiguous_copy(AtenTensorHandle h, const HostTensor& t, DeviceCopies& copies) {
  std::vector<int64_t> cstride(t.shape.size());
  int64_t st = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    cstride[i] = st;
    st *= std::max<int64_t>(t.shape[i], 1);
  }
  AtenTensorHandle c = nullptr;
  if (aoti_torch_empty_strided(static_cast<int64_t>(t.shape.size()), t.shape.data(), cstride.data(), t.dtype,
                               t.device_type, t.device_index, &c) != 0 || !c) {
    return 0;
  }
  copies.handles.push_back(c);
  void* p = nullptr;
  if (aoti_torch_copy_(c, h, 0) != 0 || aoti_torch_get_data_ptr(c, &p) != 0) return 0;
  return reinterpret_cast<uint64_t>(p);
}

// Grows the pinned staging buffer and the device buffer of `ds` to what a side needs
// (doubling). Every earlier side ended with a stream synchronisation, so nothing still
// uses the buffers being replaced.
std::string reserve(Shared& S, DeviceStats& D, DeviceState& ds, cu::Handle stream, const char* after,
                    uint64_t out_bytes, uint64_t part_bytes, uint64_t tab_bytes, uint64_t counter_bytes) {
  const bool grow = out_bytes > ds.out_bytes || part_bytes > ds.part_bytes || tab_bytes > ds.tab_bytes ||
                    counter_bytes > ds.counter_bytes;
  struct Sizes {
    uint64_t out_bytes, part_bytes, tab_bytes, counter_bytes;
  } want = {ds.out_bytes, ds.part_bytes, ds.tab_bytes, ds.counter_bytes};
  if (grow) {
    want.out_bytes = round_up(std::max(out_bytes, ds.out_bytes) * 2);
    want.part_bytes = round_up(std::max(part_bytes, ds.part_bytes) * 2);
    want.tab_bytes = round_up(std::max(tab_bytes, ds.tab_bytes) * 2);
    want.counter_bytes = round_up(std::max(counter_bytes, ds.counter_bytes) * 2);
  }
  const uint64_t host_need = std::max({want.out_bytes, want.tab_bytes, want.counter_bytes});
  if (host_need > D.host_cap) {
    void* p = nullptr;
    cu::Result r = D.api.mem_alloc_host(&p, static_cast<size_t>(host_need));
    if (r != 0) return cu_error(D, "cuMemAllocHost", r);
    if (D.host) D.api.mem_free_host(D.host);
    D.host = static_cast<unsigned char*>(p);
    D.host_cap = host_need;
  }
  if (!grow) return "";
  if (ds.buf) D.api.mem_free(ds.buf);
  ds.buf = 0;
  ds.out_bytes = ds.part_bytes = ds.tab_bytes = ds.counter_bytes = 0;
  const uint64_t total = want.out_bytes + want.part_bytes + want.tab_bytes + want.counter_bytes;
  cu::DevPtr buf = 0;
  cu::Result r = D.api.mem_alloc(&buf, static_cast<size_t>(total));
  trace(D, "cuMemAlloc " + std::to_string(total) + " bytes (out " + std::to_string(want.out_bytes) + ", partials " +
               std::to_string(want.part_bytes) + ", tables " + std::to_string(want.tab_bytes) + ", counters " +
               std::to_string(want.counter_bytes) + "): " + (r == 0 ? hex(buf) : cu_error(D, "cuMemAlloc", r)));
  if (r != 0) return cu_error(D, "cuMemAlloc", r);
  // The counters start at zero; each launch leaves the ones it used at zero again.
  std::memset(D.host, 0, static_cast<size_t>(want.counter_bytes));
  const char* call = "cuMemcpyHtoDAsync";
  r = D.api.copy_htod_async(buf + want.out_bytes + want.part_bytes + want.tab_bytes, D.host,
                            static_cast<size_t>(want.counter_bytes), stream);
  if (r == 0) {
    call = "cuStreamSynchronize";
    r = wait_stream(S, D, stream, after);  // done before the staging buffer is written again
  }
  if (r != 0) {
    D.api.mem_free(buf);
    return cu_error(D, call, r);
  }
  ds.buf = buf;
  ds.out_bytes = want.out_bytes;
  ds.part_bytes = want.part_bytes;
  ds.tab_bytes = want.tab_bytes;
  ds.counter_bytes = want.counter_bytes;
  return "";
}

// Room on the device for `k`'s table of `bytes` (its slot, or a new one from the kept
// tables' chunks; the caller clears `k.table` before writing there); false when the
// kept tables already took kKeptLimit bytes or the allocation failed (the side's table
// then goes where an unkept one goes, and `k` still describes its slot).
constexpr uint64_t kKeptChunk = uint64_t{1} << 20, kKeptLimit = uint64_t{64} << 20;

bool kept_slot(DeviceStats& D, DeviceState& ds, KeptTable& k, uint64_t bytes) {
  if (k.dev && k.cap >= bytes) return true;
  const uint64_t want = round_up(bytes);
  if (ds.kept_end - ds.kept_at < want) {
    const uint64_t chunk = std::max(kKeptChunk, want);
    if (ds.kept_total + chunk > kKeptLimit) return false;
    cu::DevPtr p = 0;
    cu::Result r = D.api.mem_alloc(&p, static_cast<size_t>(chunk));
    trace(D, "cuMemAlloc " + std::to_string(chunk) + " bytes for kept tables: " +
                 (r == 0 ? hex(p) : cu_error(D, "cuMemAlloc", r)));
    if (r != 0) return false;
    ds.kept_total += chunk;
    ds.kept_at = p;
    ds.kept_end = p + chunk;
  }
  k.dev = ds.kept_at;
  k.cap = want;
  ds.kept_at += want;
  return true;
}

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
// row, stay in place with k_total less 7/8 of `first`); without, into the side's own buffer, copied and waited for here into
// `results`. The table is staged at `staged` of the segment's pinned twin (a waiting
// run's room), or where the segment's staging is used up to (null). With `kept` (the
// side's table as last copied, KeptTable), a table equal to it is not copied again. ""
// or the failing call.
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

// Sides whose stats launch waits in a segment (Site::defers, level stats): their items,
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

// The device's summaries of `items` (all on the current context's device), launched on
// `stream` as fused_stats._launch launches them; "" or the failing call. Items whose
// kind the pack has no kernel for are left out (`launched` says which were done).
// With a ring (`R`, level stats), the results go to rows of its current segment, which
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
  if (seg && wait && plan.widest && !copied) {
    for (const Plan::Group& g : plan.groups) {
      for (size_t j : g.members) {
        AtenTensorHandle h = nullptr;
        if (aoti_torch_new_tensor_handle(v[items[j].index].handle(), &h) != 0 || !h) {
          wait = false;  // (then this side launches now)
          break;
        }
        held.push_back(h);
      }
      if (!wait) break;
    }
    if (!wait) {
      for (AtenTensorHandle h : held) aoti_torch_delete_tensor_object(h);
      held.clear();
    }
  }
  if (seg && wait && plan.widest && !copied) {
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

// Where a side's results wait on the device (level stats): the segment, and per value its row.
struct Deferred {
  Segment* segment = nullptr;
  DeviceStats* owner = nullptr;
  std::vector<uint32_t> rows;
};

// The summaries of the CUDA tensors among `v` (one launch side) that the device computes:
// `done[i]` is 1 where `out[i]` holds one, 2 where it comes later, from row
// `deferred.rows[i]` of `deferred.segment` (with `defer`: level stats, records queued).
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
      if (R && before && site.id >= 0) {  // a graph call starts the next one (flight.h's rule): ship the last
        auto last = R->last_site.find(dev);
        if (last != R->last_site.end() && site.id <= last->second && R->current >= 0) ship(S, D, R->seg[R->current]);
        R->last_site[dev] = site.id;
      }
      if (err.empty() && !D.broken) {
        out.assign(n, Summary());
        done.assign(n, 0);
        Segment* seg = nullptr;
        const bool wait = site.defers && site.level == schema::kStats && !site.sync;
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

#endif  // AOTI_DEBUG_PART_DEVICE_STATS_H
