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
// AOTI_DEBUG_FUSED_STATS=0. This part holds the pack, the layouts and the work buffers;
// how a side's tensors are planned and launched, and the sides that wait for one launch
// (Site::defers), are device_launch.h's.
#ifndef AOTI_DEBUG_PART_DEVICE_STATS_H
#define AOTI_DEBUG_PART_DEVICE_STATS_H

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
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

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_DEVICE_STATS_H
