// Wrapper side, GPU wrappers (AOTI_DEBUG_CUDA): the CUDA runtime functions, the current
// stream and the stats kernels lent to the runtime (DeviceOps), and AOTI_DEBUG_SYNC's
// check after a launch. CPU wrappers lend
// nothing and their kernels run synchronously: the "before" line already names a crash.
#ifndef AOTI_DEBUG_PART_GLUE_CUDA_H
#define AOTI_DEBUG_PART_GLUE_CUDA_H

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "interface.h"

#ifdef AOTI_DEBUG_CUDA
#include <cuda_runtime_api.h>

// Weak: a host or package without them still loads (stats on the host, device_stats.h).
#if defined(__GNUC__)
extern "C" __attribute__((weak)) AOTITorchError aoti_torch_get_current_cuda_stream(int32_t, void**);
#define AOTI_DEBUG_CURRENT_STREAM aoti_torch_get_current_cuda_stream
#else
#define AOTI_DEBUG_CURRENT_STREAM nullptr
#endif
#if defined(AOTI_DEBUG_STATS_PACK_SYMBOL) && defined(__GNUC__)
extern "C" __attribute__((weak)) const unsigned char AOTI_DEBUG_STATS_PACK_SYMBOL[];
#define AOTI_DEBUG_STATS_PACK_DATA AOTI_DEBUG_STATS_PACK_SYMBOL
#else
#define AOTI_DEBUG_STATS_PACK_DATA nullptr
#endif
#ifndef AOTI_DEBUG_STATS_PACK_FILE
#define AOTI_DEBUG_STATS_PACK_FILE ""
#endif
#endif

namespace AOTI_DEBUG_NS {
namespace {

#ifdef AOTI_DEBUG_CUDA
const DeviceOps kCudaOps = {
    [] { return static_cast<int>(cudaDeviceSynchronize()); },
    [](int e) { return cudaGetErrorString(static_cast<cudaError_t>(e)); },
    [](void* dst, const void* src, size_t n) {
      return static_cast<int>(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
    },
    [](void** p, size_t n) { return static_cast<int>(cudaMallocHost(p, n)); },
    [](void* p) { (void)cudaFreeHost(p); },
    [] { (void)cudaGetLastError(); },
    [](char* buf, size_t cap) {
      int dev = 0;
      cudaDeviceProp prop;
      if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return 1;
      std::snprintf(buf, cap, "%s", prop.name);
      return 0;
    },
    [](int32_t device, void** stream) {
      auto fn = AOTI_DEBUG_CURRENT_STREAM;
      return fn ? static_cast<int>(fn(device, stream)) : -1;
    },
    AOTI_DEBUG_STATS_PACK_DATA,
    AOTI_DEBUG_STATS_PACK_FILE,
};
const DeviceOps* const kWrapperDevice = &kCudaOps;

// AOTI_DEBUG_SYNC: a device error after the launch is reported against its kernel and
// thrown, as the model would have failed later without the sync.
// `values`: released here when it throws (the runtime releases them otherwise).
void sync_device(const Site& site, int64_t launch, const Value* values, size_t n) {
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return;
  Value::release(values, n);
  std::string msg = cudaGetErrorString(e);
  std::string line = "[aoti_debug] error after launch=" + std::to_string(launch) + " kernel=" + site.kernel +
      ": " + msg + "\n";
  std::fputs(line.c_str(), stderr);  // stderr is unbuffered: out before the throw
  std::fflush(stderr);
  throw std::runtime_error("CUDA error after " + std::string(site.kernel) + ": " + msg);
}
#else
const DeviceOps* const kWrapperDevice = nullptr;
inline void sync_device(const Site&, int64_t, const Value*, size_t) {}
#endif

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_GLUE_CUDA_H
