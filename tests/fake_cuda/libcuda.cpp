// A stand-in for libcuda.so.1 (tests/test_device_stats.py): "device" memory is host
// memory, a "cubin" is the ELF magic, "FAKE" and its kernel's kind, width and vec, and
// cuLaunchKernel does what the stats kernel does, with the C++ runtime's own summarize()
// (stats.h), so that the device path's records equal the host path's to the bit (the
// strided kernel's tensors gathered into logical order first, from its table). Every
// call is logged (FAKE_CU_LOG) for the test to check the launches against fused_stats.plan.
// FAKE_CU_SMS, FAKE_CU_CC: the device; FAKE_CU_FAIL=launch|sync|capture-query|load|event:
// that call (cuLaunchKernel, cuStreamSynchronize, cuStreamIsCapturing, cuModuleLoadData,
// cuEventQuery) fails with
// CUDA_ERROR_ILLEGAL_ADDRESS; FAKE_CU_CAPTURING: the stream is being captured.
// FAKE_CU_EVENT_DELAY=N: the stream is slow: a copy to the host lands only when the
// stream is synchronised or an event recorded after it completes, and an event answers
// "not ready" N times first (the host sees garbage if it reads before).
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "stats.h"

using namespace aoti_debug_rt_1;

namespace {
struct FakeKernel {
  uint32_t kind, width, vec, cols;  // cols: the strided kernel's tile width (0: another kernel)
  uint32_t dense;                   // the dense kernel's tile (0: another kernel)
};
constexpr int kPermTw = 27;   // device_driver.h's kPermTableWidth
constexpr int kDenseTw = 40;  // device_driver.h's kDenseTableWidth
constexpr int kDenseMax = 8;  // device_driver.h's kDenseMax

// The dense kernel's mixed-radix digits of `x` times their weights (fused_stats_kernels._digits).
int64_t digits(int64_t x, const int64_t* pairs, int64_t nd) {
  int64_t w = 0;
  for (int64_t j = 0; j + 1 < nd; ++j) {
    w += (x % pairs[2 * j]) * pairs[2 * j + 1];
    x /= pairs[2 * j];
  }
  return w + x * pairs[2 * nd - 1];
}
int g_context;

void logf(const char* fmt, ...) {
  const char* path = std::getenv("FAKE_CU_LOG");
  if (!path) return;
  FILE* f = std::fopen(path, "a");
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(f, fmt, ap);
  va_end(ap);
  std::fclose(f);
}

bool failing(const char* what) {
  const char* f = std::getenv("FAKE_CU_FAIL");
  return f && std::strcmp(f, what) == 0;
}

int env_int(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : dflt;
}

// fused_stats._KINDS code -> c10::ScalarType
int32_t c10_of(uint32_t kind) {
  static const int32_t map[] = {11, 0, 1, 24, 23, 2, 5, 15, 3, 6, 4, 7, 27, 28, 29};
  return kind < 15 ? map[kind] : -1;
}

// Copies to the host the stream has not done yet (FAKE_CU_EVENT_DELAY).
struct Copy {
  void* dst;
  std::vector<unsigned char> bytes;
};
std::vector<Copy> g_queued;

struct FakeEvent {
  int pending;
  std::vector<Copy> copies;
};

void land(std::vector<Copy>& copies) {
  for (Copy& c : copies) std::memcpy(c.dst, c.bytes.data(), c.bytes.size());
  copies.clear();
}

void* alloc(size_t n, int fill) {
  size_t size = (n + 255) / 256 * 256 + 256;
  void* p = std::aligned_alloc(256, size);
  std::memset(p, fill, size);
  return p;
}
}  // namespace

extern "C" {
int cuInit(unsigned) { return 0; }
int cuCtxGetCurrent(void** ctx) {
  *ctx = std::getenv("FAKE_CU_NO_CTX") ? nullptr : &g_context;
  return 0;
}
int cuCtxGetDevice(int* dev) {
  *dev = 0;
  return 0;
}
int cuDeviceGet(int* dev, int ordinal) {
  *dev = ordinal;
  return 0;
}
int cuDeviceGetAttribute(int* value, int attribute, int) {
  int cc = env_int("FAKE_CU_CC", 90);
  if (attribute == 16) *value = env_int("FAKE_CU_SMS", 132);
  else if (attribute == 75) *value = cc / 10;
  else if (attribute == 76) *value = cc % 10;
  else return 1;
  return 0;
}
int cuModuleLoadData(void** module, const void* image) {
  const unsigned char* p = static_cast<const unsigned char*>(image);
  if (failing("load")) return 700;  // the context broken by an earlier kernel's fault
  if (std::memcmp(p, "\177ELFFAKE", 8) != 0) return 200;  // CUDA_ERROR_INVALID_IMAGE
  FakeKernel* k = new FakeKernel;
  std::memcpy(k, p + 8, sizeof(FakeKernel));
  logf("load %u %u %u %u\n", k->kind, k->width, k->vec, k->cols);
  *module = k;
  return 0;
}
int cuModuleGetFunction(void** function, void* module, const char* name) {
  const FakeKernel* k = static_cast<const FakeKernel*>(module);
  const char* want = k->cols ? "_stats_kernel_perm" : k->dense ? "_stats_kernel_dense" : "_stats_kernel";
  if (std::strcmp(name, want) != 0) return 500;  // CUDA_ERROR_NOT_FOUND
  *function = module;
  return 0;
}
int cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void* stream, void** params, void** extra) {
  if (failing("launch")) return 700;
  const FakeKernel* k = static_cast<const FakeKernel*>(function);
  uint64_t base = *static_cast<uint64_t*>(params[0]);
  const int64_t* tab = reinterpret_cast<const int64_t*>(*static_cast<uint64_t*>(params[1]));
  int32_t n = *static_cast<int32_t*>(params[2]);
  double* part = reinterpret_cast<double*>(*static_cast<uint64_t*>(params[3]));
  int32_t* counters = reinterpret_cast<int32_t*>(*static_cast<uint64_t*>(params[4]));
  double* out = reinterpret_cast<double*>(*static_cast<uint64_t*>(params[5]));
  int32_t k_total = *static_cast<int32_t*>(params[6]);
  uint64_t scratch0 = *static_cast<uint64_t*>(params[7]), scratch1 = *static_cast<uint64_t*>(params[8]);
  logf("launch kind=%u width=%u vec=%u cols=%u dense=%u grid=%u,%u,%u block=%u,%u,%u shared=%u k=%d k_total=%d stream=%p "
       "scratch=%llu,%llu extra=%p base=%llu aligned=%d\n", k->kind, k->width, k->vec, k->cols, k->dense, gx, gy, gz, bx, by, bz,
       shared, n, k_total, stream, static_cast<unsigned long long>(scratch0), static_cast<unsigned long long>(scratch1),
       static_cast<void*>(extra), static_cast<unsigned long long>(base % 16), (base % 16) == 0);
  for (uint64_t i = 0; i < static_cast<uint64_t>(gx) * 9; ++i) part[i] = 0.0;  // partials: 9 per program
  const int tw = k->cols ? kPermTw : k->dense ? kDenseTw : 6;
  for (int32_t r = 0; r < n; ++r) {
    const int64_t* t = tab + tw * r;
    uint64_t ptr = base + static_cast<uint64_t>(t[0]) * k->width * k->vec;
    logf("row q=%lld n=%lld first=%lld nprog=%lld per=%lld row=%lld mod16=%llu counter=%d", static_cast<long long>(t[0]),
         static_cast<long long>(t[1]), static_cast<long long>(t[2]), static_cast<long long>(t[3]),
         static_cast<long long>(t[4]), static_cast<long long>(t[5]), static_cast<unsigned long long>(ptr % 16),
         counters[t[5]]);
    for (int j = 6; j < tw; ++j) logf(" t%d=%lld", j, static_cast<long long>(t[j]));
    logf("\n");
    std::vector<unsigned char> gathered;
    if (k->cols && t[1] > 0) {
      // The strided kernel's reading, element (row, col) at mem(row) * vec + col of logical
      // index base(row) + col * inner_stride (fused_stats_kernels._row_bases), into logical order.
      const int64_t vec = k->vec, inner = t[6] * vec, rows = t[1] / inner, nd = t[8];
      gathered.resize(static_cast<size_t>(t[1]) * k->width);
      for (int64_t row = 0; row < rows; ++row) {
        int64_t rr = row, lb = 0, mb = 0;
        for (int64_t d = 0; d < nd; ++d) {
          const int64_t* dim = t + 9 + 3 * d;
          const int64_t i = d + 1 < nd ? rr % dim[0] : rr;  // the outermost takes the quotient left
          lb += i * dim[1];
          mb += i * dim[2];
          rr = d + 1 < nd ? rr / dim[0] : 0;
        }
        for (int64_t c = 0; c < inner; ++c) {
          std::memcpy(gathered.data() + (lb + c * t[7]) * k->width,
                      reinterpret_cast<const unsigned char*>(ptr) + (mb * vec + c) * k->width, k->width);
        }
      }
      ptr = reinterpret_cast<uint64_t>(gathered.data());
    } else if (k->dense && t[1] > 0) {
      // The dense kernel's reading: element t * tile + a in memory order, of logical index
      // f(t) + w(a) (the lanes' and the tiles' digits), into logical order.
      gathered.resize(static_cast<size_t>(t[1]) * k->width);
      const int64_t* lanes = t + 8;
      const int64_t* tiles = t + 8 + 2 * kDenseMax;
      for (int64_t m = 0; m < t[1]; ++m) {
        const int64_t li = digits(m / k->dense, tiles, t[7]) + digits(m % k->dense, lanes, t[6]);
        if (li < 0 || li >= t[1]) return 1;
        std::memcpy(gathered.data() + li * k->width, reinterpret_cast<const unsigned char*>(ptr) + m * k->width,
                    k->width);
      }
      ptr = reinterpret_cast<uint64_t>(gathered.data());
    }
    Summary s;
    if (t[1] > 0 && !summarize(reinterpret_cast<const void*>(ptr), t[1], c10_of(k->kind), s)) return 1;
    double* o = out + 8 * t[5];
    o[0] = s.mn;
    o[1] = s.mx;
    o[2] = s.mean;
    o[3] = s.sd;
    o[4] = s.absmax;
    o[5] = static_cast<double>(s.nan);
    o[6] = static_cast<double>(s.inf);
    o[7] = static_cast<double>(t[1]);
    std::memcpy(out + 8 * k_total + t[5], &s.checksum, sizeof(s.checksum));
  }
  return 0;
}
int cuMemAlloc_v2(unsigned long long* p, size_t n) {
  *p = reinterpret_cast<unsigned long long>(alloc(n, 0xAB));  // not zero: the runtime zeroes its counters
  logf("alloc %zu\n", n);
  return 0;
}
int cuMemFree_v2(unsigned long long p) {
  std::free(reinterpret_cast<void*>(p));
  return 0;
}
int cuMemAllocHost_v2(void** p, size_t n) {
  *p = alloc(n, 0xCD);
  return 0;
}
int cuMemFreeHost(void* p) {
  std::free(p);
  return 0;
}
int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void* src, size_t n, void*) {
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
  logf("htod %zu\n", n);
  return 0;
}
int cuMemcpyDtoHAsync_v2(void* dst, unsigned long long src, size_t n, void*) {
  logf("dtoh %zu\n", n);
  if (env_int("FAKE_CU_EVENT_DELAY", -1) < 0) {
    std::memcpy(dst, reinterpret_cast<const void*>(src), n);
    return 0;
  }
  const unsigned char* s = reinterpret_cast<const unsigned char*>(src);
  g_queued.push_back({dst, std::vector<unsigned char>(s, s + n)});  // what the stream copies later
  std::memset(dst, 0xEE, n);
  return 0;
}
int cuStreamSynchronize(void*) {
  if (failing("sync")) return 700;
  logf("sync\n");
  land(g_queued);
  return 0;
}
int cuEventCreate(void** event, unsigned flags) {
  *event = new FakeEvent{};
  logf("event-create %u\n", flags);
  return 0;
}
int cuEventRecord(void* event, void*) {
  FakeEvent* e = static_cast<FakeEvent*>(event);
  e->copies.swap(g_queued);
  g_queued.clear();
  e->pending = env_int("FAKE_CU_EVENT_DELAY", 0);
  logf("event-record\n");
  return 0;
}
int cuEventQuery(void* event) {
  if (failing("event")) return 700;
  FakeEvent* e = static_cast<FakeEvent*>(event);
  if (e->pending > 0) {
    e->pending -= 1;
    logf("event-query pending\n");
    return 600;  // CUDA_ERROR_NOT_READY
  }
  land(e->copies);
  logf("event-query ready\n");
  return 0;
}
int cuEventDestroy_v2(void* event) {
  delete static_cast<FakeEvent*>(event);
  return 0;
}
int cuStreamQuery(void*) {  // the work is done when it is queued: the runtime then synchronizes for the error
  logf("query\n");
  return 0;
}
int cuStreamIsCapturing(void*, int* status) {  // a sticky error from an earlier fault fails every call
  if (failing("capture-query")) return 700;  // CUDA_ERROR_ILLEGAL_ADDRESS
  *status = std::getenv("FAKE_CU_CAPTURING") ? 1 : 0;
  return 0;
}
int cuGetErrorName(int error, const char** name) {
  *name = error == 700 ? "CUDA_ERROR_ILLEGAL_ADDRESS" : "CUDA_ERROR_UNKNOWN";
  return 0;
}
}
