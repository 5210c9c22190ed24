// Stats and checksums of CUDA tensors computed on the device (levels stats and print),
// by the kernel the Python runtime launches (runtime/fused_stats_kernels.py): compiled
// when the model was (codegen/device_stats.py) into a pack of cubins that the wrapper
// lends (DeviceOps::stats_pack / stats_pack_file), loaded and launched through the CUDA
// driver API, resolved from libcuda.so.1 by name (no CUDA headers, no link: one runtime
// serves CPU and GPU wrappers). All CUDA tensors of a launch side go in one launch per
// element kind on the wrapper's stream, with the table fused_stats._launch builds, and
// only their results come back: 9 doubles per tensor, copied into pinned memory, then
// one cuStreamSynchronize per side (no device-wide sync, no copy of the tensors).
// Non-contiguous or misaligned tensors are first copied on the device (as the Python
// runtime's .contiguous()). What the pack does not cover (other dtypes, other devices)
// keeps the host path (host_tensor.h); so does everything once the device path failed
// (one warning), and everything under AOTI_DEBUG_FUSED_STATS=0. AOTI_DEBUG_TRACE_DEVICE=1
// traces every driver call on stderr; a stream that keeps a side waiting 30 s is a warning.
#ifndef AOTI_DEBUG_PART_DEVICE_STATS_H
#define AOTI_DEBUG_PART_DEVICE_STATS_H

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <unistd.h>

#include "constants.h"
#include "dtypes.h"
#include "host_tensor.h"
#include "interface.h"
#include "state.h"
#include "stats.h"
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
}  // namespace cu

// ---- the pack (codegen/device_stats.py writes it; the layout is described there)
constexpr char kPackMagic[8] = {'A', 'O', 'T', 'I', 'D', 'S', 'T', 'S'};
constexpr uint32_t kPackVersion = 1;
constexpr uint64_t kPackHeader = 64, kPackKernel = 64, kPackDtype = 16;
// The kernel's parameters as launch_group passes them (base, tab, k, part, counters, out,
// k_total), then Triton's scratch pointers (null: the pack holds no kernel that uses them).
constexpr const char* kKernelArgs = "u64 u64 u32 u64 u64 u64 u32";
constexpr uint32_t kKernelArgCount = 7;
constexpr uint32_t kMaxScratch = 4;
constexpr int kMaxShared = 48 * 1024;

struct PackKernel {
  uint32_t kind, width, is_float, vec, num_warps, shared;
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
    k.name = pack_string(p, size, pack_field<uint64_t>(p, at + 32));
    uint64_t image = pack_field<uint64_t>(p, at + 40), bytes = pack_field<uint64_t>(p, at + 48);
    if (!k.name || image >= size || bytes < 4 || bytes > size - image || std::memcmp(p + image, "\177ELF", 4) != 0 ||
        (k.width != 1 && k.width != 2 && k.width != 4 && k.width != 8) || k.vec == 0 || 16 % (k.vec * k.width) != 0 ||
        k.num_warps == 0 || k.num_warps > 32 || k.shared > static_cast<uint32_t>(kMaxShared)) {
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

struct DeviceState {  // one pack on one device
  bool checked = false, usable = false;
  cu::Handle ctx = nullptr;
  int sms = 0;
  std::vector<cu::Handle> functions;  // per pack kernel, loaded on first use
  std::vector<char> unloadable;
  cu::DevPtr buf = 0;  // out | partials | tables | counters
  uint64_t cap = 0, out_bytes = 0, part_bytes = 0, tab_bytes = 0, counter_bytes = 0;
  Ring* ring = nullptr;  // level stats: where the kernels' results wait for the host (never freed)
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

// ---- level stats: the device ring (no stream synchronisation per side)
// The kernels of a side write their results into rows of the current segment of a ring
// on the device (8 doubles per row, then one checksum per row, as the kernel writes them
// for k_total = the segment's rows), and the side's records are queued with the rows
// their stats and checksums go into. A segment is shipped (one cuMemcpyDtoHAsync into
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
  int64_t sides = 0;    // queued sides that read it
  std::string after;    // the kernel after which its first stats kernel was queued
  std::string error;    // kDone: why its results are not there ("" when they are)
};

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
};

// One launch side's manifest lines, waiting for the results of `segment` (a Segment of
// this runtime) or, when null, for earlier sides only.
struct QueuedSide {
  std::string lines;
  std::vector<QueuedHole> holes;
  void* segment = nullptr;
  void* owner = nullptr;  // its DeviceStats
};

// Sides queued for the manifest, in record order. Shared by every runtime copy of the
// process (as shared()), so that no copy's records overtake another's.
struct DeviceQueue {
  long pid = 0;
  std::deque<QueuedSide> sides;
  bool (*append)(Shared& S, const std::string& lines) = nullptr;
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

// Its results go to the host: one copy into the pinned twin, then its event. Caller holds S.mu.
void ship(Shared& S, DeviceStats& D, Segment& g) {
  if (g.state != Segment::kFilling) return;
  const char* call = "cuMemcpyDtoHAsync";
  cu::Result r = D.api.copy_dtoh_async(g.host, g.dev, static_cast<size_t>(kSegmentResults), g.stream);
  if (r == 0) {
    call = "cuEventRecord";
    r = D.api.event_record(g.event, g.stream);
  }
  trace(D, "ship segment of " + std::to_string(g.used) + " rows (first after " + g.after + ") on stream " +
               hex(reinterpret_cast<uint64_t>(g.stream)) + ": " + (r == 0 ? std::string("ok") : cu_error(D, call, r)));
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
  if (wait) trace(D, "wait for segment (first after " + g.after + ")");
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
  if (wait) {
    trace(D, "segment done after " +
                 std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count()) +
                 " us");
  }
  g.state = Segment::kDone;
  return true;
}

// A queued side's lines with its results filled in (or, for a failed segment, no stats
// and the error).
std::string filled(const QueuedSide& q, const Segment& g) {
  std::string o;
  o.reserve(q.lines.size() + q.holes.size() * 200);
  size_t at = 0;
  for (const QueuedHole& h : q.holes) {
    o.append(q.lines, at, h.stats_at - at);
    if (g.error.empty()) {
      const double* s = reinterpret_cast<const double*>(g.host) + uint64_t{h.row} * 8;
      Summary sm;
      sm.mn = s[0];
      sm.mx = s[1];
      sm.mean = s[2];
      sm.sd = s[3];
      sm.absmax = s[4];
      sm.nan = static_cast<int64_t>(s[5]);
      sm.inf = static_cast<int64_t>(s[6]);
      std::memcpy(&sm.checksum, g.host + uint64_t{kSegmentRows} * 64 + uint64_t{h.row} * 8, sizeof(sm.checksum));
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

// Writes the first queued side if it can be: false when it waits for its segment (and
// `wait` is false). Caller holds S.mu.
bool drain_one(Shared& S, bool wait) {
  DeviceQueue& Q = device_queue();
  if (Q.sides.empty()) return false;
  QueuedSide& q = Q.sides.front();
  if (q.segment) {
    Segment& g = *static_cast<Segment*>(q.segment);
    DeviceStats& D = *static_cast<DeviceStats*>(q.owner);
    if (g.state == Segment::kFilling) {
      if (!wait) return false;
      ship(S, D, g);
    }
    if (!settle(S, D, g, wait)) return false;
    q.lines = filled(q, g);
    if (--g.sides == 0) {
      g.state = Segment::kFree;
      g.used = 0;
      g.tab_used = 0;
      g.error.clear();
    }
  }
  if (Q.append) Q.append(S, q.lines);
  Q.sides.pop_front();
  return true;
}

// Writes the queued sides that are ready, in order; with `wait` all of them (bounded:
// settle). Caller holds S.mu. Never throws.
void drain_queue(Shared& S, bool wait) {
  DeviceQueue& Q = device_queue();
  if (Q.pid != static_cast<long>(::getpid())) {  // a forked child: the parent's sides are the parent's
    Q.sides.clear();
    Q.pid = static_cast<long>(::getpid());
    return;
  }
  try {
    while (drain_one(S, wait)) {
    }
  } catch (...) {  // std::bad_alloc: what is left stays queued
  }
}

// At exit: everything queued goes to the manifest (waiting for the lock at most 10 s, as
// the flight recorder's exit write).
void drain_at_exit() {
  Shared& S = shared();
  std::unique_lock<std::mutex> lock(S.mu, std::defer_lock);
  for (int i = 0; i < 1000 && !lock.try_lock(); ++i) ::usleep(10000);
  if (lock.owns_lock()) drain_queue(S, true);
}

// Rows for a side of `m` tensors whose tables take `tab_bytes`: the current segment of
// `R` or the next one (shipping the current one, waiting for the next to be free); null
// when none can be had (the side then waits for its results as level print does).
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
  if (g && g->state == Segment::kFilling && g->used + m <= kSegmentRows && g->tab_used + tab_bytes <= kSegmentTables)
    return g;
  if (g) ship(S, D, *g);
  const int next = (R.current + 1) % kSegments;
  Segment& n = R.seg[next];
  while (n.state != Segment::kFree && drain_one(S, true)) {
  }
  if (n.state != Segment::kFree || D.broken) return nullptr;
  n.state = Segment::kFilling;
  n.stream = stream;
  n.after = after;
  R.current = next;
  return &n;
}

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

// One tensor for the device: its position among the side's values, its row in the
// results, the kernel's element kind and width, its values and where they are.
struct DeviceItem {
  size_t index;
  int64_t row;
  uint32_t kind;
  int64_t numel;
  uint64_t ptr;
  bool copy;  // non-contiguous or misaligned: read from a contiguous copy made on the device
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
  DeviceState want = ds;
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

// The device's summaries of `items` (all on the current context's device), launched on
// `stream` as fused_stats._launch launches them; "" or the failing call. Items whose
// kind the pack has no kernel for are left out (`launched` says which were done).
// With a ring (`R`, level stats), the results go to rows of its current segment, which
// `seg` then names, `items`' rows are those rows, and nothing is waited for; without one
// (or when no segment has room for the side), into the side's own buffer, copied and
// waited for here, and `results` holds them.
std::string launch_side(Shared& S, DeviceStats& D, LoadedPack& lp, DeviceState& ds, cu::Handle stream,
                        const char* after, std::vector<DeviceItem>& items, std::vector<Summary>& results,
                        std::vector<char>& launched, Ring* R, Segment*& seg) {
  seg = nullptr;
  const Pack& pk = lp.pack;
  const int64_t m = static_cast<int64_t>(items.size());
  const int64_t block = pk.block;
  const int64_t max_programs = std::max<int64_t>(1, static_cast<int64_t>(pk.per_sm) * ds.sms);
  const int64_t min_tiles = pk.min_tiles;
  // One group per kind, in order of first appearance.
  std::vector<uint32_t> kinds;
  for (const DeviceItem& it : items) {
    if (std::find(kinds.begin(), kinds.end(), it.kind) == kinds.end()) kinds.push_back(it.kind);
  }
  struct Group {
    size_t kernel;
    uint64_t base;
    int64_t programs;
    uint64_t tab_at;
    std::vector<size_t> members;
  };
  std::vector<Group> groups;
  std::vector<int64_t> table;
  uint64_t tab_bytes = 0;
  int64_t max_group_programs = 0;
  for (uint32_t kind : kinds) {
    Group g;
    for (size_t j = 0; j < items.size(); ++j) {
      if (items[j].kind == kind) g.members.push_back(j);
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
    bool aligned = base % 16 == 0;
    for (size_t j : g.members) {
      if (vec > 1 && items[j].numel > 0 && (items[j].ptr - base) % 16 != 0) aligned = false;
    }
    if (!aligned) vec = 1;
    size_t kernel = pk.kernels.size();
    for (size_t i = 0; i < pk.kernels.size(); ++i) {
      if (pk.kernels[i].kind == kind && pk.kernels[i].vec == vec) kernel = i;
    }
    if (kernel == pk.kernels.size()) continue;
    std::string fault;
    cu::Handle fn = kernel_function(S, D, lp, ds, kernel, fault);
    if (!fault.empty()) return fault;
    if (!fn) continue;
    const uint64_t unit = static_cast<uint64_t>(width) * vec;
    g.kernel = kernel;
    g.base = base;
    g.programs = 0;
    g.tab_at = tab_bytes;
    for (size_t j : g.members) {
      const int64_t n = items[j].numel;
      const int64_t tiles = (n + block - 1) / block;
      const int64_t per = std::max(min_tiles, (tiles + max_programs - 1) / max_programs);
      const int64_t nprog = std::max<int64_t>(1, (tiles + per - 1) / per);
      table.push_back(n ? static_cast<int64_t>((items[j].ptr - base) / unit) : 0);
      table.push_back(n);
      table.push_back(g.programs);
      table.push_back(nprog);
      table.push_back(per);
      table.push_back(items[j].row);
      g.programs += nprog;
    }
    table.resize(round_up(table.size() * 8) / 8, 0);  // the next group's table 256-byte aligned
    tab_bytes = table.size() * 8;
    max_group_programs = std::max(max_group_programs, g.programs);
    groups.push_back(std::move(g));
  }
  if (groups.empty()) return "";
  if (R) seg = take_rows(S, D, *R, stream, after, static_cast<uint32_t>(m), tab_bytes);
  if (D.broken) return "";  // a wait for a segment failed (warned): the host path
  if (seg) {  // the rows of the segment's next free ones
    for (const Group& g : groups) {
      for (size_t i = 0; i < g.members.size(); ++i) table[g.tab_at / 8 + 6 * i + 5] += seg->used;
    }
    for (DeviceItem& it : items) it.row += seg->used;
  }
  const uint64_t out_bytes = seg ? 0 : static_cast<uint64_t>(9 * m) * 8;
  // Growing the buffers frees the old ones: queued kernels of earlier sides may still read them.
  if (R && (static_cast<uint64_t>(max_group_programs) * 72 > ds.part_bytes || tab_bytes > ds.tab_bytes) && ds.buf) {
    if (cu::Result r = wait_stream(S, D, stream, after); r != 0) return cu_error(D, "cuStreamSynchronize", r);
  }
  std::string err = reserve(S, D, ds, stream, after, out_bytes, static_cast<uint64_t>(max_group_programs) * 9 * 8,
                            tab_bytes, seg ? 0 : static_cast<uint64_t>(m) * 4);
  if (!err.empty()) return err;
  // An all-empty group's base was chosen before the buffer may have moved: it stands on the new one.
  cu::DevPtr d_out = ds.buf, d_part = ds.buf + ds.out_bytes, d_tab = d_part + ds.part_bytes,
             d_counters = d_tab + ds.tab_bytes;
  // The table is staged in pinned memory that no later side writes before the copy ran:
  // the segment's (reused after its event), else the side's own (waited for below).
  unsigned char* staged = D.host;
  if (seg) {
    staged = seg->host + kSegmentResults + seg->tab_used;
    d_out = seg->dev;
    d_counters = R->counters;
  }
  std::memcpy(staged, table.data(), static_cast<size_t>(tab_bytes));
  cu::Result r = D.api.copy_htod_async(d_tab, staged, static_cast<size_t>(tab_bytes), stream);
  if (r != 0) return cu_error(D, "cuMemcpyHtoDAsync", r);
  if (seg) {
    seg->tab_used += tab_bytes;
    seg->used += static_cast<uint32_t>(m);
  }
  int32_t k_total = static_cast<int32_t>(seg ? kSegmentRows : m);
  cu::DevPtr scratch[kMaxScratch] = {0, 0, 0, 0};
  for (Group& g : groups) {
    bool empty = true;
    for (size_t j : g.members) empty = empty && items[j].numel == 0;
    cu::DevPtr base = empty ? d_out : g.base;
    cu::DevPtr tab = d_tab + g.tab_at;
    int32_t k = static_cast<int32_t>(g.members.size());
    void* params[kKernelArgCount + kMaxScratch] = {&base, &tab, &k, &d_part, &d_counters, &d_out, &k_total};
    for (uint32_t i = 0; i < pk.scratch; ++i) params[kKernelArgCount + i] = &scratch[i];
    const PackKernel& pkk = pk.kernels[g.kernel];
    trace(D, "launch kernel " + std::to_string(g.kernel) + " after " + after + ": grid " + std::to_string(g.programs) +
                 ", block " + std::to_string(32 * pkk.num_warps) + ", shared " + std::to_string(pkk.shared) + ", k " +
                 std::to_string(k) + ", k_total " + std::to_string(k_total) + ", base " + hex(base) + ", stream " +
                 hex(reinterpret_cast<uint64_t>(stream)));
    r = D.api.launch_kernel(ds.functions[g.kernel], static_cast<unsigned>(g.programs), 1, 1, 32 * pkk.num_warps, 1,
                            1, pkk.shared, stream, params, nullptr);
    if (r != 0) return cu_error(D, "cuLaunchKernel", r);
  }
  if (seg) {  // the results come with the segment's
    for (const Group& g : groups) {
      for (size_t j : g.members) launched[items[j].index] = 1;
    }
    return "";
  }
  r = D.api.copy_dtoh_async(D.host, d_out, static_cast<size_t>(out_bytes), stream);
  if (r != 0) return cu_error(D, "cuMemcpyDtoHAsync", r);
  r = wait_stream(S, D, stream, after);
  if (r != 0) return cu_error(D, "cuStreamSynchronize", r);
  const double* o = reinterpret_cast<const double*>(D.host);
  for (const Group& g : groups) {
    for (size_t j : g.members) {
      const double* s = o + items[j].row * 8;
      Summary& sm = results[items[j].index];
      sm.mn = s[0];
      sm.mx = s[1];
      sm.mean = s[2];
      sm.sd = s[3];
      sm.absmax = s[4];
      sm.nan = static_cast<int64_t>(s[5]);
      sm.inf = static_cast<int64_t>(s[6]);
      std::memcpy(&sm.checksum, o + 8 * m + items[j].row, sizeof(sm.checksum));
      launched[items[j].index] = 1;
    }
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
// Caller holds S.mu. Never throws.
void device_summaries(Shared& S, const Site& site, const Value* v, size_t n, const char* phase, const DeviceOps* dev,
                      std::vector<Summary>& out, std::vector<char>& done, bool defer, Deferred& deferred) {
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
      if (v[i].kind() != Value::kTensor || (before && site.args[i].uninitialised)) continue;
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
      items.push_back({i, 0, kind->second.first, t.numel * static_cast<int64_t>(kind->second.second), ptr, copy});
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
        err = launch_side(S, D, *lp, *ds, stream, site.kernel, items, out, done, R, seg);
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
