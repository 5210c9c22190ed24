// Process-wide state and the warnings it keeps, shared by every instrumented library
// of a process: the JIT runtime library and each AOTInductor .so built from the same
// sources. They share it through one STB_GNU_UNIQUE object per struct (an inline
// function's static with default visibility, GCC's default on Linux): .so files are
// loaded RTLD_LOCAL, so a plain global would give each its own counters and colliding
// file names. AOTI_DEBUG_NS is derived from a hash of all parts, so two builds that
// disagree on a layout never share an object.
#ifndef AOTI_DEBUG_PART_STATE_H
#define AOTI_DEBUG_PART_STATE_H

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "constants.h"
#include "json.h"
#include "text.h"

namespace AOTI_DEBUG_NS {

struct Shared {
  std::mutex mu;
  long pid = 0;
  uint64_t generation = 0;  // bumped whenever a new run directory is opened
  bool opened = false;      // a run was attempted for the current env
  bool usable = false;      // ... and its directory + manifest are writable
  bool owns_info = false;   // run.json is ours to write (set once the run's directory is claimed)
  std::string env_dir, env_run_id;
  std::string path, run_id, level, device, kernels, phases, start_time;
  int sync = 0;
  int rank = 0, world_size = 1;
  int manifest_fd = -1;
  // The run directory and its tensors/, opened without following a link (run_dir.h):
  // every file of the run is created relative to them, never by path.
  int dir_fd = -1, tensor_fd = -1;
  int64_t seq = 0, launch = 0, graphs = 0;
  int64_t bytes_written = 0, max_bytes = -1;
  // AOTI_DEBUG_SAVE_LAUNCHES: inclusive (first, last) ranges, last -1 = to the end;
  // empty: every launch's tensors are saved.
  std::vector<std::pair<int64_t, int64_t>> save_launches;
  bool force_zip64 = false;
  std::vector<std::pair<std::string, std::string>> graph_info;  // label -> JSON object
  std::map<std::string, std::string> content_files;  // values identity -> tensor file
  std::set<std::string> sites_written;               // "<graph>\n<site>" whose provenance this run wrote
  std::map<std::string, int64_t> last_seq;           // run directory -> its last seq
  std::string flight;  // run.json "flight" as JSON (flight.h), "" without a flight recorder
  std::set<std::string> warned;
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
inline Shared& shared() {
  static Shared s;  // STB_GNU_UNIQUE with g++: one object per process
  return s;
}

// Which run directories this runtime claimed, and every warning it gave. Guarded by
// shared().mu.
struct Claims {
  long pid = 0;  // the process the claims belong to (a forked child has none)
  std::map<std::string, std::pair<std::string, std::string>> dirs;  // requested -> (claimed dir, run id)
  // claimed dir -> device and inode of it and of its tensors/: a run this runtime comes
  // back to is opened again and must be the very directory it made (run_dir.h).
  std::map<std::string, std::vector<uint64_t>> dir_ids;
  std::string failures;       // every warning, one JSON [key, message] per line (capped)
  int64_t failure_count = 0;
  std::vector<std::string> run_warnings;  // the current run's, one per key: run.json "warnings"
  std::set<std::string> run_keys;
  bool info_stale = false;  // run_warnings grew since run.json was last written
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
inline Claims& claims() {
  static Claims c;  // STB_GNU_UNIQUE, as shared()
  return c;
}

#if defined(__GNUC__)
// aoti_debug.runtime.failures() reads the C++ runtime's warnings through this (ctypes,
// dlopen(RTLD_NOLOAD) on the loaded libraries): a first line naming the process-wide
// state, then one JSON [key, message] line per warning. Returns the text's length and
// copies at most `cap` bytes of it into `buf`. A C signature that stays put when the
// namespace changes. `used`: emitted although nothing here calls it.
extern "C" __attribute__((visibility("default"), used)) inline size_t aoti_debug_runtime_warnings(char* buf,
                                                                                                   size_t cap) {
  Shared& S = shared();
  std::lock_guard<std::mutex> guard(S.mu);
  Claims& C = claims();
  char head[40];
  std::snprintf(head, sizeof(head), "%p\n", static_cast<void*>(&C));
  std::string text = head + C.failures;
  if (buf && cap) std::memcpy(buf, text.data(), std::min(cap, text.size()));
  return text.size();
}
#endif

namespace {

// This process's id, without a system call at every launch (glibc caches none since
// 2.25, and the runtime asks at each launch whether it is still the process that opened
// its run): read once, and again in a forked child before any of the child's code runs
// (the pthread_atfork handler, which glibc drops when this library is unloaded). Where
// the handler cannot be registered, each call asks the kernel. Async-signal-safe once
// called outside a handler (its first call registers the handler): the runtime's first
// launch calls it, before any line is held for a signal handler to write.
std::atomic<long> pid_seen{0};

void pid_forked() { pid_seen.store(static_cast<long>(::getpid()), std::memory_order_relaxed); }

long this_pid() {
  static const bool tracked = pthread_atfork(nullptr, nullptr, &pid_forked) == 0;
  if (!tracked) return static_cast<long>(::getpid());
  long p = pid_seen.load(std::memory_order_relaxed);
  if (p == 0) {
    p = static_cast<long>(::getpid());
    pid_seen.store(p, std::memory_order_relaxed);
  }
  return p;
}

// The launch being instrumented on this thread (set by the entry points).
thread_local int64_t tl_launch = 0;
thread_local int64_t tl_call = 0;

// Warnings kept for aoti_debug.runtime.failures(); later ones are only counted.
constexpr int64_t kMaxFailures = 10000;

// Caller holds S.mu. Prints the first warning of each key; keeps every one for
// aoti_debug.runtime.failures() and, one per key, for the current run's run.json
// (written by the entry point that gave it, once the run's directory is usable).
void warn_once(Shared& S, const std::string& key, const std::string& message) {
  Claims& C = claims();
  if (C.failure_count++ < kMaxFailures) {
    C.failures += "[";
    json_str(C.failures, key);
    C.failures += ", ";
    json_str(C.failures, message);
    C.failures += "]\n";
  }
  if (C.run_keys.insert(key).second) {
    C.run_warnings.push_back(message);
    if (key != "run-json") C.info_stale = true;
  }
  if (!S.warned.insert(key).second) return;
  emit_line("[aoti_debug] warning: " + message +
            " (model continues; further such warnings suppressed)");
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_STATE_H
