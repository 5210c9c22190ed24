// Threads for large tensors: the process's OpenMP threads where the runtime is built
// with OpenMP (the model thread is waiting for us anyway), else short-lived
// std::threads, at most 16. Where no thread can be started, this thread does every part.
#ifndef AOTI_DEBUG_PART_THREADS_H
#define AOTI_DEBUG_PART_THREADS_H

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "constants.h"

namespace AOTI_DEBUG_NS {
namespace {

int workers() {
#ifdef _OPENMP
  return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
  static const int n = static_cast<int>(std::min(16u, std::max(1u, std::thread::hardware_concurrency())));
  return n;
#endif
}

// fn(0) .. fn(parts - 1), each once, in parallel where threads are available.
template <class Fn>
void run_parts(int64_t parts, Fn fn) {
#ifdef _OPENMP
  if (!omp_in_parallel()) {
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < parts; ++c) fn(c);
    return;
  }
#endif
  std::vector<std::thread> threads;
  int64_t started = 1;
  try {
    for (; started < parts; ++started) threads.emplace_back(fn, started);
  } catch (...) {  // no threads here (resource limits, a libc without them): go on alone
  }
  fn(0);
  for (int64_t c = started; c < parts; ++c) fn(c);
  for (auto& t : threads) t.join();
}


}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_THREADS_H
