// The manifest's writes. A side's lines are written at once (append_manifest), or held
// (hold_lines) until the graph call that made them ends and then written in one write
// with the rest of the call's: appending to a file costs far more per write than per
// byte (a GPT-2 step's 42 sides: ~80 us in 42 writes, ~22 us in one, ext4;
// benchmarks/manifest_writes.py).
//
// A graph's sides hold their lines once its wrapper has called call_end (entry.h), which
// the code generator emits before the wrapper hands back its outputs
// (wrapper_lines.wrap_generate_return). Held lines are also written when they reach
// kHeldBytes, when a line is written at once (the order in the file is the records'),
// at aoti_debug.flush(), when a new run starts, at exit, and when the process gets a
// crash signal or SIGTERM: the handler writes what is held (write() is async-signal-safe;
// the buffer never moves and `used` counts whole lines only) and passes the signal on to
// the handler it replaced. What is lost is what no handler sees: a SIGKILL in the middle
// of a call loses that call's records. AOTI_DEBUG_SYNC sides are written at once.
#ifndef AOTI_DEBUG_PART_MANIFEST_H
#define AOTI_DEBUG_PART_MANIFEST_H

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include <signal.h>
#include <unistd.h>

#include "device_ring.h"
#include "state.h"
#include "text.h"

namespace AOTI_DEBUG_NS {

// The signals whose handler writes held lines before passing them on: the crashes, and
// SIGTERM (SIGINT becomes Python's KeyboardInterrupt and an ordinary exit).
constexpr int kHeldSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM};
constexpr int kHeldSignalCount = sizeof(kHeldSignals) / sizeof(kHeldSignals[0]);

// Lines held for the manifest, process-wide (STB_GNU_UNIQUE, as shared()). Written under
// shared().mu, and read by the signal handler, which takes no lock: it reads the atomics.
struct Held {
  char* buf = nullptr;           // kHeldBytes, allocated at the first hold, never freed
  std::atomic<size_t> used{0};   // bytes of whole lines in buf
  std::atomic<int> fd{-1};       // the manifest they go to
  std::atomic<long> pid{0};      // the process that holds them (a forked child drops them)
  std::atomic<int> writing{0};   // someone is writing them: the handler leaves them alone
  bool (*write)(Shared& S) = nullptr;  // write_held of the copy that holds (for aoti_debug_runtime_flush)
  long hooked_pid = 0;           // the process whose signals are hooked
  struct sigaction previous[kHeldSignalCount];
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
inline Held& held() {
  static Held h;  // STB_GNU_UNIQUE, as shared()
  return h;
}

#if defined(__GNUC__)
// aoti_debug.flush() (runtime/session.py) writes what the C++ runtimes of its process
// queued (waiting, bounded, for the device's results) and held. A C signature that stays
// put when the namespace changes.
extern "C" __attribute__((visibility("default"), used)) inline void aoti_debug_runtime_flush() {
  Shared& S = shared();
  std::lock_guard<std::mutex> guard(S.mu);
  DeviceQueue& Q = device_queue();
  if (Q.drain && !Q.sides.empty()) Q.drain(S, true);
  Held& H = held();
  if (H.write && H.used.load()) H.write(S);
}
#endif

namespace {

constexpr size_t kHeldBytes = size_t{1} << 20;

void manifest_failed(Shared& S, int e) {
  warn_once(S, "manifest", "cannot append to manifest in '" + S.path + "': " + errno_text(e));
}

// Caller holds S.mu. Writes the held lines (a forked child drops its parent's); false (one
// warning) when they could not all be written: they are dropped either way.
bool write_held(Shared& S) {
  Held& H = held();
  if (H.used.load() == 0) return true;
  if (H.pid.load() != this_pid()) {
    H.used.store(0);
    return true;
  }
  int e = 0;
  if (!H.writing.exchange(1)) {
    e = write_all(H.fd.load(), H.buf, H.used.load());
    H.used.store(0);
    H.writing.store(0);
    if (e) manifest_failed(S, e);
  }
  return e == 0;
}

// Caller holds S.mu. Appends `lines` (whole lines) to the manifest now, after the held
// ones (in the same write where they fit). False (one warning) when not all were written.
bool append_manifest(Shared& S, const std::string& lines) {
  if (lines.empty()) return write_held(S);
  if (S.manifest_fd < 0) return false;
  Held& H = held();
  size_t used = H.used.load();
  if (used && H.pid.load() == this_pid() && H.fd.load() == S.manifest_fd &&
      used + lines.size() <= kHeldBytes) {
    std::memcpy(H.buf + used, lines.data(), lines.size());
    if (H.used.compare_exchange_strong(used, used + lines.size())) return write_held(S);
    // (a signal handler wrote the held lines meanwhile: these are still to go)
  }
  if (!write_held(S)) return false;
  if (int e = write_all(S.manifest_fd, lines.data(), lines.size())) {
    manifest_failed(S, e);
    return false;
  }
  return true;
}

// Async-signal-safe: the previous disposition of a signal, as if ours had not been there
// (the flight recorder's handler passes its signals on with it too).
void pass_signal(const struct sigaction& prev, int sig, siginfo_t* info, void* ctx) {
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) prev.sa_sigaction(sig, info, ctx);
    return;
  }
  if (prev.sa_handler == SIG_IGN) return;
  if (prev.sa_handler == SIG_DFL) {
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
    ::raise(sig);  // pending until this handler returns: the process dies of it as it would have
    return;
  }
  prev.sa_handler(sig);
}

// Async-signal-safe: the held lines to the manifest, then the signal on to the handler
// ours replaced.
void held_on_signal(int sig, siginfo_t* info, void* ctx) {
  int saved = errno;
  Held& H = held();
  if (H.pid.load() == this_pid() && !H.writing.exchange(1)) {
    size_t n = H.used.exchange(0);
    if (n) (void)write_all(H.fd.load(), H.buf, n);  // (async-signal-safe: write(2) and errno only)
    H.writing.store(0);
  }
  for (int i = 0; i < kHeldSignalCount; ++i) {
    if (kHeldSignals[i] == sig) pass_signal(H.previous[i], sig, info, ctx);
  }
  errno = saved;
}

void write_held_at_exit() {
  Shared& S = shared();
  std::unique_lock<std::mutex> lock(S.mu, std::defer_lock);
  for (int i = 0; i < 1000 && !lock.try_lock(); ++i) ::usleep(10000);  // at most 10 s, as drain_at_exit
  if (lock.owns_lock()) write_held(S);
}

// Caller holds S.mu. What writes held lines when no call end comes, besides the exit hook:
// the signal handlers, once per process `pid` (a forked child hooks its own).
void hook_signals(Shared& S, Held& H, long pid) {
  H.hooked_pid = pid;
  for (int i = 0; i < kHeldSignalCount; ++i) {
    struct sigaction cur;
    if (::sigaction(kHeldSignals[i], nullptr, &cur) != 0) continue;
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == &held_on_signal) continue;
    struct sigaction ours;
    std::memset(&ours, 0, sizeof(ours));
    ours.sa_sigaction = &held_on_signal;
    sigemptyset(&ours.sa_mask);
    bool plain = !(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN);
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK | (plain ? SA_RESTART : (cur.sa_flags & SA_RESTART));
    H.previous[i] = cur;
    if (::sigaction(kHeldSignals[i], &ours, nullptr) != 0) {
      warn_once(S, "held-signal", std::string("cannot handle signal ") + std::to_string(kHeldSignals[i]) +
                                      ": a crash loses the records of the graph call it ends (" + errno_text(errno) +
                                      ")");
    }
  }
}

// Caller holds S.mu. Holds `lines` (whole lines) for the manifest until the graph call
// ends; written at once where they cannot be held. False (one warning) when some lines
// could not be written.
bool hold_lines(Shared& S, const std::string& lines) {
  if (lines.empty()) return true;
  if (S.manifest_fd < 0) return false;
  Held& H = held();
  const long pid = S.pid;  // (ensure_run checked it at this launch)
  if (H.pid.load() != pid) {  // a forked child: what its parent held is its parent's
    H.used.store(0);
    H.pid.store(pid);
  }
  if (!H.buf) {
    H.buf = static_cast<char*>(std::malloc(kHeldBytes));
    if (!H.buf) return append_manifest(S, lines);
    H.write = &write_held;
    std::atexit(&write_held_at_exit);  // once per process image (a forked child inherits it)
  }
  if (H.hooked_pid != pid) hook_signals(S, H, pid);
  size_t used = H.used.load();
  if ((used && H.fd.load() != S.manifest_fd) || used + lines.size() > kHeldBytes) {
    if (!write_held(S)) return append_manifest(S, lines);
    used = 0;
  }
  if (lines.size() > kHeldBytes) return append_manifest(S, lines);
  H.fd.store(S.manifest_fd);
  std::memcpy(H.buf + used, lines.data(), lines.size());
  if (!H.used.compare_exchange_strong(used, used + lines.size())) {
    // A signal handler wrote what was held between the read and now: these go first.
    std::memmove(H.buf, H.buf + used, lines.size());
    H.used.store(lines.size());
  }
  return true;
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_MANIFEST_H
