// What device_stats.h launches with: the CUDA driver API, resolved from libcuda.so.1 by
// name (no CUDA headers, no link: one runtime serves CPU and GPU wrappers), the pack of
// stats kernels the wrapper lends (codegen/device_stats.py writes it) and its parser, the
// launcher's state per pack and device, and the bounded, traced wait for a stream
// (AOTI_DEBUG_TRACE_DEVICE=1 traces every driver call on stderr; a stream that keeps a
// side waiting 30 s is a warning).
#ifndef AOTI_DEBUG_PART_DEVICE_DRIVER_H
#define AOTI_DEBUG_PART_DEVICE_DRIVER_H

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <dlfcn.h>

#include "constants.h"
#include "interface.h"
#include "state.h"
#include "text.h"

namespace AOTI_DEBUG_NS {
namespace {

// The CUDA driver API as cuda.h declares what this part calls (CUDA 11.4+), by the
// symbol names cuda.h maps them to (the _v2 ones); explicit streams only, so the
// per-thread-default-stream variants (_ptsz) are never needed.
namespace cu {
using Result = int;                 // CUresult; 0 is CUDA_SUCCESS
using Device = int;                 // CUdevice
using DevPtr = unsigned long long;  // CUdeviceptr
using Handle = void*;               // CUcontext, CUmodule, CUfunction, CUstream
constexpr Result kNotReady = 600;   // CUDA_ERROR_NOT_READY (cuStreamQuery: work still pending)
constexpr int kAttrSms = 16;        // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
constexpr int kAttrMajor = 75;      // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrMinor = 76;      // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR

struct Api {
  Result (*init)(unsigned flags);
  Result (*ctx_get_current)(Handle* ctx);
  Result (*ctx_get_device)(Device* dev);
  Result (*device_get)(Device* dev, int ordinal);
  Result (*device_attribute)(int* value, int attribute, Device dev);
  Result (*module_load_data)(Handle* module, const void* image);
  Result (*module_get_function)(Handle* function, Handle module, const char* name);
  Result (*launch_kernel)(Handle function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned shared, Handle stream, void** params, void** extra);
  Result (*mem_alloc)(DevPtr* p, size_t n);
  Result (*mem_free)(DevPtr p);
  Result (*mem_alloc_host)(void** p, size_t n);
  Result (*mem_free_host)(void* p);
  Result (*copy_htod_async)(DevPtr dst, const void* src, size_t n, Handle stream);
  Result (*copy_dtoh_async)(void* dst, DevPtr src, size_t n, Handle stream);
  Result (*stream_synchronize)(Handle stream);
  Result (*stream_query)(Handle stream);
  Result (*stream_is_capturing)(Handle stream, int* status);  // CUstreamCaptureStatus: 0 none
  Result (*error_name)(Result error, const char** text);
  Result (*event_create)(Handle* event, unsigned flags);
  Result (*event_record)(Handle event, Handle stream);
  Result (*event_query)(Handle event);  // 0: done; kNotReady: pending; anything else: an error
  Result (*event_destroy)(Handle event);
};
constexpr unsigned kEventDisableTiming = 2;  // CU_EVENT_DISABLE_TIMING

// Resolves every entry from libcuda.so.1; "" or why not.
inline std::string load(Api& api) {
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = ::dlerror();
    return std::string("cannot load libcuda.so.1: ") + (e ? e : "unknown error");
  }
  std::string missing;
  auto bind = [&](auto& fn, const char* name) {
    void* sym = ::dlsym(h, name);
    if (!sym) missing += std::string(missing.empty() ? "" : ", ") + name;
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(sym);
  };
  bind(api.init, "cuInit");
  bind(api.ctx_get_current, "cuCtxGetCurrent");
  bind(api.ctx_get_device, "cuCtxGetDevice");
  bind(api.device_get, "cuDeviceGet");
  bind(api.device_attribute, "cuDeviceGetAttribute");
  bind(api.module_load_data, "cuModuleLoadData");
  bind(api.module_get_function, "cuModuleGetFunction");
  bind(api.launch_kernel, "cuLaunchKernel");
  bind(api.mem_alloc, "cuMemAlloc_v2");
  bind(api.mem_free, "cuMemFree_v2");
  bind(api.mem_alloc_host, "cuMemAllocHost_v2");
  bind(api.mem_free_host, "cuMemFreeHost");
  bind(api.copy_htod_async, "cuMemcpyHtoDAsync_v2");
  bind(api.copy_dtoh_async, "cuMemcpyDtoHAsync_v2");
  bind(api.stream_synchronize, "cuStreamSynchronize");
  bind(api.stream_query, "cuStreamQuery");
  bind(api.stream_is_capturing, "cuStreamIsCapturing");
  bind(api.error_name, "cuGetErrorName");
  bind(api.event_create, "cuEventCreate");
  bind(api.event_record, "cuEventRecord");
  bind(api.event_query, "cuEventQuery");
  bind(api.event_destroy, "cuEventDestroy_v2");
  if (!missing.empty()) return "libcuda.so.1 lacks " + missing;  // never closed: a handle of the process's driver
  Result r = api.init(0);
  return r == 0 ? "" : "cuInit failed with error " + std::to_string(r);
}

// The process's driver API for the Python runtime's launches (library.cpp, ring_side.h),
// loaded once (thread-safe); null where libcuda.so.1 cannot be used.
inline const Api* process_api() {
  static Api api;
  static const bool usable = load(api).empty();
  return usable ? &api : nullptr;
}

// The Python runtime's kept launches of its stats kernel (runtime/fused_stats.py,
// `_pack_launches`). `spec`: the launch count, then per launch 11 int64: CUfunction,
// programs, threads per program, shared bytes, CUstream, Triton's scratch pointers
// (passed null), and the kernel's parameters base, table, k, partials, counters; `out`
// and `k_total` are the side's ring rows. 0, -1 when libcuda.so.1 cannot be used (nothing
// launched), else the CUresult of the first launch that failed (the ones before it were made).
inline Result launch_kept(const int64_t* spec, uint64_t out, int32_t k_total) {
  const Api* api = process_api();
  if (!api) return -1;
  constexpr int kFields = 11;
  constexpr int kScratch = 4;
  const int64_t n = spec[0];
  const int64_t* p = spec + 1;
  for (int64_t i = 0; i < n; ++i, p += kFields) {
    uint64_t base = static_cast<uint64_t>(p[6]), table = static_cast<uint64_t>(p[7]);
    uint64_t part = static_cast<uint64_t>(p[9]), counters = static_cast<uint64_t>(p[10]);
    int32_t k = static_cast<int32_t>(p[8]);
    uint64_t scratch[kScratch] = {0, 0, 0, 0};
    void* params[7 + kScratch] = {&base, &table, &k, &part, &counters, &out, &k_total};
    const int64_t nscratch = p[5] < kScratch ? p[5] : kScratch;
    for (int64_t j = 0; j < nscratch; ++j) params[7 + j] = &scratch[j];
    Result r = api->launch_kernel(reinterpret_cast<Handle>(static_cast<intptr_t>(p[0])), static_cast<unsigned>(p[1]),
                                  1, 1, static_cast<unsigned>(p[2]), 1, 1, static_cast<unsigned>(p[3]),
                                  reinterpret_cast<Handle>(static_cast<intptr_t>(p[4])), params, nullptr);
    if (r != 0) return r;
  }
  return 0;
}
}  // namespace cu

// ---- the pack (codegen/device_stats.py writes it; the layout is described there)
constexpr char kPackMagic[8] = {'A', 'O', 'T', 'I', 'D', 'S', 'T', 'S'};
constexpr uint32_t kPackVersion = 3;
constexpr uint64_t kPackHeader = 64, kPackKernel = 64, kPackDtype = 16;
// The kernel's parameters as launch_group passes them (base, tab, k, part, counters, out,
// k_total), then Triton's scratch pointers (null: the pack holds no kernel that uses them).
constexpr const char* kKernelArgs = "u64 u64 u32 u64 u64 u64 u32";
constexpr uint32_t kKernelArgCount = 7;
constexpr uint32_t kMaxScratch = 4;
constexpr int kMaxShared = 48 * 1024;
// The strided kernel's table (fused_stats.plan_permuted): 9 int64 a tensor, then (size,
// logical stride, memory stride) per row dim, up to kMaxRowDims (fused_stats.MAX_ROW_DIMS).
constexpr uint32_t kMaxRowDims = 6;
constexpr uint32_t kPermTableWidth = 9 + 3 * kMaxRowDims;
// The dense kernel's table (fused_stats.plan_dense): 8 int64 a tensor, then (size, weight)
// per lane dim and per tile dim, up to kDenseMax each (fused_stats._DENSE_MAX). The pack's
// dense kernels read whole tiles (PART 0).
constexpr uint32_t kDenseMax = kMaxRowDims + 2;
constexpr uint32_t kDenseTableWidth = 8 + 4 * kDenseMax;

struct PackKernel {
  uint32_t kind, width, is_float, vec, num_warps, shared;
  uint32_t cols;   // the strided kernel's tile width (a power of two up to the block), 0: another kernel
  uint32_t dense;  // the dense kernel's tile (a power of two up to the block), 0: another kernel
  const char* name;
  const unsigned char* image;
};

struct Pack {
  uint32_t capability = 0, block = 0, per_sm = 0, min_tiles = 0, scratch = 0;
  std::vector<PackKernel> kernels;
  std::map<std::string, std::pair<uint32_t, uint32_t>> dtypes;  // torch name -> (kind, values per element)
};

template <class T>
T pack_field(const unsigned char* p, uint64_t at) {
  T v;
  std::memcpy(&v, p + at, sizeof(T));
  return v;
}

// A NUL-terminated string at `at` inside the `size` bytes at `p`, or null.
const char* pack_string(const unsigned char* p, uint64_t size, uint64_t at) {
  if (at >= size || !std::memchr(p + at, 0, static_cast<size_t>(size - at))) return nullptr;
  return reinterpret_cast<const char*>(p + at);
}

// `p` holds a pack of `size` bytes (0: as long as its header says, a linked symbol); "" or what is wrong.
std::string parse_pack(const unsigned char* p, uint64_t size, Pack& out) {
  if (!p) return "no pack";
  if (size != 0 && size < kPackHeader) return "the stats pack is truncated";
  if (std::memcmp(p, kPackMagic, sizeof(kPackMagic)) != 0) return "not a stats pack";
  if (pack_field<uint32_t>(p, 8) != kPackVersion) return "a stats pack of another version";
  uint64_t total = pack_field<uint64_t>(p, 48);
  if (size == 0) size = total;
  if (total != size || total < kPackHeader) return "the stats pack's size is wrong";
  out.capability = pack_field<uint32_t>(p, 12);
  uint32_t n_kernels = pack_field<uint32_t>(p, 16), n_dtypes = pack_field<uint32_t>(p, 20);
  out.block = pack_field<uint32_t>(p, 24);
  out.per_sm = pack_field<uint32_t>(p, 28);
  out.min_tiles = pack_field<uint32_t>(p, 32);
  uint32_t n_args = pack_field<uint32_t>(p, 36);
  out.scratch = pack_field<uint32_t>(p, 40);
  if (out.block == 0 || out.per_sm == 0 || out.min_tiles == 0) return "the stats pack's launch constants are zero";
  if (n_kernels > 4096 || n_dtypes > 4096 ||
      kPackHeader + kPackKernel * n_kernels + kPackDtype * n_dtypes > size) {
    return "the stats pack's tables do not fit";
  }
  const char* sig = pack_string(p, size, pack_field<uint64_t>(p, 56));
  std::string want = kKernelArgs;
  for (uint32_t i = 0; i < out.scratch; ++i) want += " u64";
  if (n_args != kKernelArgCount || out.scratch > kMaxScratch || !sig || want != sig) {
    return std::string("the stats kernel's parameters (") + (sig ? sig : "?") + ") are not the ones launched (" +
           want + ")";
  }
  for (uint32_t i = 0; i < n_kernels; ++i) {
    uint64_t at = kPackHeader + kPackKernel * i;
    PackKernel k;
    k.kind = pack_field<uint32_t>(p, at);
    k.width = pack_field<uint32_t>(p, at + 4);
    k.is_float = pack_field<uint32_t>(p, at + 8);
    k.vec = pack_field<uint32_t>(p, at + 12);
    k.num_warps = pack_field<uint32_t>(p, at + 16);
    k.shared = pack_field<uint32_t>(p, at + 20);
    k.cols = pack_field<uint32_t>(p, at + 24);
    const uint32_t table_width = pack_field<uint32_t>(p, at + 28);
    const uint64_t dense = pack_field<uint64_t>(p, at + 56);
    k.dense = static_cast<uint32_t>(dense);
    const bool strided_ok =
        dense != 0 ? k.cols == 0 && table_width == kDenseTableWidth && dense <= out.block && (dense & (dense - 1)) == 0 &&
                         dense * k.width >= 16
        : k.cols == 0 ? table_width == 0
                      : table_width == kPermTableWidth && (k.cols & (k.cols - 1)) == 0 && k.cols <= out.block &&
                            k.vec <= k.cols;
    k.name = pack_string(p, size, pack_field<uint64_t>(p, at + 32));
    uint64_t image = pack_field<uint64_t>(p, at + 40), bytes = pack_field<uint64_t>(p, at + 48);
    if (!k.name || image >= size || bytes < 4 || bytes > size - image || std::memcmp(p + image, "\177ELF", 4) != 0 ||
        (k.width != 1 && k.width != 2 && k.width != 4 && k.width != 8) || k.vec == 0 || 16 % (k.vec * k.width) != 0 ||
        k.num_warps == 0 || k.num_warps > 32 || k.shared > static_cast<uint32_t>(kMaxShared) || !strided_ok) {
      return "kernel " + std::to_string(i) + " of the stats pack is malformed";
    }
    k.image = p + image;
    out.kernels.push_back(k);
  }
  for (uint32_t i = 0; i < n_dtypes; ++i) {
    uint64_t at = kPackHeader + kPackKernel * n_kernels + kPackDtype * i;
    const char* name = pack_string(p, size, pack_field<uint64_t>(p, at));
    uint32_t units = pack_field<uint32_t>(p, at + 12);
    if (!name || (units != 1 && units != 2)) return "dtype " + std::to_string(i) + " of the stats pack is malformed";
    out.dtypes[name] = {pack_field<uint32_t>(p, at + 8), units};
  }
  return "";
}

// ---- the launcher's state: one per runtime copy (.so), used under shared().mu
struct Ring;

// A launch side's table as it was last copied to the device (the Python runtime's kept
// launches, fused_stats._sides): rows counted from the side's first, so that the same
// tensors at the same addresses give the same bytes call after call, and the side
// launches without copying its table again. Only this side's launches read `dev`, on
// `stream`, in order: rewriting it there is safe.
struct KeptTable {
  cu::DevPtr dev = 0;
  uint64_t cap = 0;              // bytes at `dev`
  std::vector<int64_t> table;    // what `dev` holds (empty: nothing valid)
};

// Kept tables by site, phase (true: before the launch) and stream.
using KeptKey = std::tuple<const void*, bool, cu::Handle>;

struct DeviceState {  // one pack on one device
  bool checked = false, usable = false;
  cu::Handle ctx = nullptr;
  int sms = 0;
  std::vector<cu::Handle> functions;  // per pack kernel, loaded on first use
  std::vector<char> unloadable;
  cu::DevPtr buf = 0;  // out | partials | tables | counters
  uint64_t cap = 0, out_bytes = 0, part_bytes = 0, tab_bytes = 0, counter_bytes = 0;
  Ring* ring = nullptr;  // level stats: where the kernels' results wait for the host (never freed)
  std::map<KeptKey, KeptTable> kept;
  cu::DevPtr kept_at = 0, kept_end = 0;  // the free part of the kept tables' current chunk
  uint64_t kept_total = 0;               // bytes of device memory taken for kept tables (never freed)
};

struct LoadedPack {
  std::string key;  // the file's path, or the linked symbol's address
  std::string error;  // why it is unusable ("" when fine)
  std::vector<unsigned char> bytes;  // a file's contents (kept: the parsed pack points into them)
  Pack pack;
  std::map<int, DeviceState> devices;  // by device ordinal
};

struct DeviceStats {
  bool tried = false, off = false, broken = false, trace = false;
  cu::Api api{};
  std::vector<LoadedPack*> packs;  // never freed: modules were loaded from them
  std::vector<std::pair<const DeviceOps*, LoadedPack*>> by_wrapper;  // each wrapper's (null: unusable)
  unsigned char* host = nullptr;   // pinned staging: tables and zeros in, results out
  uint64_t host_cap = 0;
};

DeviceStats& device_stats() {
  static DeviceStats* d = new DeviceStats();  // never destroyed: the driver may outlive us, or not
  return *d;
}

constexpr uint64_t kAlign = 256;
inline uint64_t round_up(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::string cu_error(DeviceStats& D, const char* call, cu::Result r) {
  const char* name = nullptr;
  if (D.api.error_name) D.api.error_name(r, &name);
  return std::string(call) + ": " + (name ? name : "error " + std::to_string(r));
}

// AOTI_DEBUG_TRACE_DEVICE=1: one line per step on stderr (where a hang or a failure is).
void trace(const DeviceStats& D, const std::string& line) {
  if (D.trace) emit_line("[aoti_debug device] " + line);
}

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof(b), "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// A side waits this long for its stream before it says so (once per process).
constexpr int kSlowWaitSeconds = 30;

// Waits for `stream`: cuStreamQuery until it is done, then cuStreamSynchronize for its
// error. One warning when it takes kSlowWaitSeconds, naming the launch after which the
// stats kernel went on the stream: a kernel that never ends (ours or an earlier one) is
// named instead of a silent hang. It then keeps waiting: the buffers are the kernel's
// until it ends, and the host path would wait for the same stream.
cu::Result wait_stream(Shared& S, DeviceStats& D, cu::Handle stream, const char* after) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  bool told = false;
  trace(D, "wait for stream " + hex(reinterpret_cast<uint64_t>(stream)));
  for (int polls = 0;; ++polls) {
    cu::Result r = D.api.stream_query(stream);
    if (r != cu::kNotReady) break;
    if (polls < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (!told && Clock::now() - t0 > std::chrono::seconds(kSlowWaitSeconds)) {
      told = true;
      warn_once(S, "device-stats-slow", "the CUDA stream has not finished the stats kernels launched after " +
                                            std::string(after) + " in " + std::to_string(kSlowWaitSeconds) +
                                            " s; still waiting (a kernel on that stream does not end?)");
    }
  }
  cu::Result r = D.api.stream_synchronize(stream);
  trace(D, "stream done after " +
               std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count()) +
               " us: " + (r == 0 ? std::string("ok") : cu_error(D, "cuStreamSynchronize", r)));
  return r;
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_DEVICE_DRIVER_H
