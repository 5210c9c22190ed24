// When the flight recorder's ring is written from outside a launch (flight.h has the
// ring): at exit (normal, or std::terminate: an uncaught C++ exception, with its type and
// message; the Python runtime tells an uncaught Python exception through
// aoti_debug_runtime_exit_reason), and on SIGTERM/SIGINT. Installed at the first graph
// call of a process (flight_arm), the signal handlers re-armed at each.
//
// The signal handler only writes a byte to a pipe: a watcher thread takes the lock,
// writes the ring and sends the signal again, which the handler then passes on to the
// handler it replaced (or the default action: the process dies of the signal as it would
// have). So a signal that arrives while the model's thread holds the lock, or sits in
// malloc, cannot deadlock it. A forked child has no watcher: the handler passes its
// signals on at once.
#ifndef AOTI_DEBUG_PART_FLIGHT_HOOKS_H
#define AOTI_DEBUG_PART_FLIGHT_HOOKS_H

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <typeinfo>
#include <utility>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#if defined(__GNUC__)
#include <cxxabi.h>
#endif

#include "constants.h"
#include "flight.h"
#include "interface.h"
#include "manifest.h"
#include "state.h"
#include "text.h"

namespace AOTI_DEBUG_NS {

// What outlives a run: the process's exit and signal hooks. The signal handler reads
// only the atomics.
struct FlightHooks {
  bool exit_hooks = false;  // atexit and std::terminate (inherited by a forked child, which checks the pid)
  std::terminate_handler previous_terminate = nullptr;
  std::string exit_reason;  // set by the Python runtime when an exception ends the process
  std::atomic<long> armed_pid{0};    // the process that armed the hooks (a forked child inherits them)
  std::atomic<long> watcher_pid{0};  // the process whose watcher thread reads the pipe
  std::atomic<int> pipe_w{-1};
  int pipe_r = -1;
  std::atomic<int> passing[2] = {{0}, {0}};  // SIGTERM, SIGINT: the next one goes on to `previous`
  struct sigaction previous[2];
  void (*handler)(int, siginfo_t*, void*) = nullptr;
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
inline FlightHooks& flight_hooks() {
  static FlightHooks h;  // STB_GNU_UNIQUE, as shared()
  return h;
}

#if defined(__GNUC__)
// The Python runtime's exit hook tells the C++ runtimes of its process that an uncaught
// exception ends it ("exception: <type>: <message>"): the ring's last write at exit says
// so, as the Python runtime's does. A C signature that stays put when the namespace changes.
extern "C" __attribute__((visibility("default"), used)) inline void aoti_debug_runtime_exit_reason(
    const char* reason) {
  Shared& S = shared();
  std::lock_guard<std::mutex> guard(S.mu);
  flight_hooks().exit_reason = reason ? reason : "";
}
#endif

namespace {

constexpr const char* kSignalNames[2] = {"SIGTERM", "SIGINT"};  // flight.SIGNALS (cpp_runtime checks)
constexpr int kSignals[2] = {SIGTERM, SIGINT};

// ---------------------------------------------------------------- exit and signals
// Writes the ring from outside a launch (exit, terminate, a signal's watcher): waits for
// the lock at most 10 s (a thread stuck inside a launch must not hang the exit).
// `reason` "": the exit's (flight_hooks().exit_reason, or "exit").
void flight_fatal_write(const std::string& reason, bool last) {
  // A forked child that recorded nothing has no ring of its own (and may have been
  // forked while another thread held the lock): nothing to wait for.
  if (flight_hooks().armed_pid.load() != static_cast<long>(::getpid())) return;
  Shared& S = shared();
  std::unique_lock<std::mutex> lock(S.mu, std::defer_lock);
  for (int i = 0; i < 1000 && !lock.try_lock(); ++i) ::usleep(10000);
  if (!lock.owns_lock()) return;
  Flight& F = flight_state();
  if (!F.on || F.pid != static_cast<long>(::getpid()) || !S.usable) return;
  try {
    const std::string& told = flight_hooks().exit_reason;
    flight_write(S, !reason.empty() ? reason : !told.empty() ? told : std::string("exit"));
    if (last) {
      bury(S, F);
      F.on = false;
    }
  } catch (...) {  // std::bad_alloc: the process is going down anyway
  }
}

void flight_at_exit() { flight_fatal_write("", true); }

void flight_on_terminate() {
  std::string reason = "exception";
  try {
    std::exception_ptr e = std::current_exception();
    if (e) std::rethrow_exception(e);
    reason = "terminate";
  } catch (const std::exception& x) {
    const char* type = typeid(x).name();
    std::string name = type;
#if defined(__GNUC__)
    int status = 0;
    char* pretty = abi::__cxa_demangle(type, nullptr, nullptr, &status);
    if (pretty && status == 0) name = pretty;
    std::free(pretty);
#endif
    std::string what = x.what() ? x.what() : "";
    reason = "exception: " + name + ": " + what.substr(0, std::min(what.find('\n'), size_t(200)));
  } catch (...) {
    reason = "exception: unknown";
  }
  flight_fatal_write(reason, true);
  std::terminate_handler previous = flight_hooks().previous_terminate;
  if (previous) previous();
  std::abort();
}

// Async-signal-safe: hands the signal to the watcher thread, or passes it on (the watcher
// sent it again, or this is a forked child without a watcher).
void flight_on_signal(int sig, siginfo_t* info, void* ctx) {
  int saved = errno;
  FlightHooks& H = flight_hooks();
  int i = sig == SIGTERM ? 0 : 1;
  int w = H.pipe_w.load();
  if (!H.passing[i].exchange(0) && H.watcher_pid.load() == static_cast<long>(::getpid()) && w >= 0) {
    unsigned char b = static_cast<unsigned char>(sig);
    if (::write(w, &b, 1) == 1) {
      errno = saved;
      return;
    }
  }
  pass_signal(H.previous[i], sig, info, ctx);
  errno = saved;
}

void* flight_watcher(void* arg) {
  int fd = static_cast<int>(reinterpret_cast<intptr_t>(arg));
  for (;;) {
    unsigned char b = 0;
    ssize_t n = ::read(fd, &b, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1) return nullptr;
    int i = b == SIGTERM ? 0 : 1;
    flight_fatal_write(std::string("signal ") + kSignalNames[i], false);
    flight_hooks().passing[i].store(1);
    ::kill(::getpid(), kSignals[i]);
  }
}

// A pipe and a watcher thread for this process (a forked child makes its own). Caller
// holds S.mu.
bool start_watcher(Shared& S, FlightHooks& H) {
  long pid = static_cast<long>(::getpid());
  if (H.watcher_pid.load() == pid) return true;
  H.watcher_pid.store(0);
  int old = H.pipe_w.exchange(-1);
  if (old >= 0) ::close(old);
  if (H.pipe_r >= 0) ::close(H.pipe_r);
  H.pipe_r = -1;
  int fds[2];
  if (::pipe(fds) != 0) {
    warn_once(S, "flight-signal", "flight recorder: cannot handle signals (pipe: " + errno_text(errno) + ")");
    return false;
  }
  for (int fd : fds) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  sigset_t block, mask;
  sigemptyset(&block);
  for (int sig : kSignals) sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &mask);  // the watcher never runs the handler itself
  pthread_t thread;
  int rc = pthread_create(&thread, nullptr, &flight_watcher, reinterpret_cast<void*>(static_cast<intptr_t>(fds[0])));
  pthread_sigmask(SIG_SETMASK, &mask, nullptr);
  if (rc != 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    warn_once(S, "flight-signal", "flight recorder: cannot handle signals (thread: " + errno_text(rc) + ")");
    return false;
  }
  pthread_detach(thread);
  H.pipe_r = fds[0];
  H.pipe_w.store(fds[1]);
  H.watcher_pid.store(pid);
  return true;
}

// At each graph call with a ring: our handler on SIGTERM and SIGINT, installed again
// (before what replaced it) if something replaced it since, e.g. Python's flight recorder
// of the same process. Caller holds S.mu.
void arm_signals(Shared& S, Flight& F) {
  FlightHooks& H = flight_hooks();
  if (!start_watcher(S, H)) return;
  if (!H.handler) H.handler = &flight_on_signal;
  for (int i = 0; i < 2; ++i) {
    struct sigaction cur;
    if (::sigaction(kSignals[i], nullptr, &cur) != 0) continue;
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == H.handler) continue;
    struct sigaction ours;
    std::memset(&ours, 0, sizeof(ours));
    ours.sa_sigaction = H.handler;
    sigemptyset(&ours.sa_mask);
    bool plain = !(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN);
    // Keep the interrupted calls' behaviour of the handler we pass the signal to.
    ours.sa_flags = SA_SIGINFO | (plain ? SA_RESTART : (cur.sa_flags & (SA_RESTART | SA_ONSTACK)));
    H.previous[i] = cur;
    if (::sigaction(kSignals[i], &ours, nullptr) != 0) {
      warn_once(S, std::string("flight-signal-") + kSignalNames[i],
                std::string("flight recorder: cannot handle ") + kSignalNames[i] + ": " + errno_text(errno));
      continue;
    }
    if (std::find(F.signals.begin(), F.signals.end(), kSignalNames[i]) == F.signals.end()) {
      F.signals.push_back(kSignalNames[i]);
    }
  }
}

// At a graph call's start (flight_enter): the exit hooks once per process, and with a ring
// the signal handlers, put back in front if something replaced them since, e.g. the
// Python runtime's flight recorder of the same process. Caller holds S.mu.
void flight_arm(Shared& S) {
  Flight& F = flight_state();
  FlightHooks& H = flight_hooks();
  if (!H.exit_hooks) {
    H.exit_hooks = true;
    std::atexit(&flight_at_exit);
    H.previous_terminate = std::set_terminate(&flight_on_terminate);
  }
  H.armed_pid.store(static_cast<long>(::getpid()));
  if (F.ring) arm_signals(S, F);
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_FLIGHT_HOOKS_H
