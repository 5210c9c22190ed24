// The flight recorder (runtime/flight.py's, with the same rules and the same run.json
// "flight"): with AOTI_DEBUG_RING=N the records of the last N graph calls stay in memory
// and go to the manifest, as ordinary lines in seq order, when the process exits
// (normally, or through std::terminate), on SIGTERM/SIGINT (then the signal goes on to
// the handler it replaced), when the run directory changes, and when
// AOTI_DEBUG_TRIGGER=nonfinite fires at the first NaN/Inf birth. Then the birth launch's
// values are saved at once (its outputs and read-only inputs: still live in its done
// hook, on any device, as this runtime reads values synchronously), and both sides of
// the next launch of its site.
//
// A graph call is seen as flight.py sees it: the launches of a wrapper's top-level code
// run in the order of their site numbers, so a launch whose site number is not above the
// last one that thread launched in that wrapper starts the next call. A wrapper is known
// to have top-level launches from its first one on (Python knows it from the wrapper's
// import): until then, its subgraph launches count passes over each subgraph.
//
// Everything here runs under shared().mu but the signal handler, which only writes a
// byte to a pipe: a watcher thread takes the lock, writes the ring and sends the signal
// again, which the handler then passes on (so a signal that arrives while the model's
// thread holds the lock, or sits in malloc, cannot deadlock it).
#ifndef AOTI_DEBUG_PART_FLIGHT_H
#define AOTI_DEBUG_PART_FLIGHT_H

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#if defined(__GNUC__)
#include <cxxabi.h>
#endif

#include "constants.h"
#include "dtypes.h"
#include "env.h"
#include "host_tensor.h"
#include "interface.h"
#include "json.h"
#include "records.h"
#include "run_json.h"
#include "state.h"
#include "text.h"

namespace AOTI_DEBUG_NS {

// One record the ring holds: its manifest line (no newline) and what the file
// bookkeeping and the at-once saving read of it.
struct FlightRecord {
  int64_t seq = 0;
  int64_t launch = 0;
  bool before = false;
  std::string arg;
  std::string line;
  std::string file;  // its tensor file ("" if none)
};

// One graph call's records not written yet (flight.py GraphCall).
struct FlightCall {
  int64_t number = 0;
  std::deque<FlightRecord> pending;
  bool written = false;  // some of its records are in the manifest
  bool dropped = false;  // it left the ring
  bool lost = false;     // ... with records never written (calls_dropped)
};

// A before-side tensor of a launch the trigger may fire on: read-only inputs keep a
// handle of their own until the launch's done hook (the at-once saving reads them there).
struct FlightInput {
  std::string arg, role;
  AtenTensorHandle handle = nullptr;
};

// What the birth watch knows of one launch's inputs (flight.py _Launch).
struct FlightLaunch {
  int64_t inputs = 0;
  bool nan = false, inf = false;
  std::vector<FlightInput> kept;
};

// What the trigger fired on: run.json flight.fired.
struct FlightBirth {
  std::string value, graph, kernel, arg, inputs_held;
  int64_t launch = 0, kernel_call = 0, site = -1, seq = 0, nan = 0, inf = 0, graph_call = 0, inputs = 0;
  std::vector<std::string> saved, not_saved;
  int64_t next_launch = -1;  // -1: the next occurrence was not reached
  std::vector<std::string> next_saved;
};

// The recorder of the current run. Guarded by shared().mu; one per process, shared by
// the JIT library and the AOTI .so files of the same sources, as shared() is.
struct Flight {
  long pid = 0;  // the process whose ring this is (a forked child writes none of it)
  uint64_t generation = 0;  // bumped at each run: threads' calls of an earlier one are stale
  bool on = false;
  int64_t ring = 0;  // 0: no ring
  bool trigger = false;
  std::deque<std::shared_ptr<FlightCall>> calls_kept;
  int64_t records = 0, calls = 0, calls_written = 0, calls_dropped = 0, records_dropped = 0;
  std::vector<std::string> dumps;  // each write, as JSON
  std::unique_ptr<FlightBirth> fired;
  std::map<int64_t, FlightLaunch> watch;  // launch -> its inputs
  std::set<std::string> inf_by_design;    // "<graph>\n<site>" whose Inf was born at its first call
  bool target = false;                    // the birth's site, whose next launch is saved in full
  std::string target_graph, target_kernel;
  int64_t target_site = -1;
  std::map<std::string, int64_t> refs;  // level save: tensor file -> records of the ring naming it
  std::set<std::string> permanent;      // ... files that written records name
  std::vector<std::string> graveyard;   // ... files of records that left the ring unwritten
  std::set<const void*> top_graphs;     // wrappers (their Graph) seen launching top-level code
};

// What outlives a run: the process's exit and signal hooks. The signal handler reads
// only the atomics.
struct FlightHooks {
  bool exit_hooks = false;  // atexit and std::terminate (inherited by a forked child, which checks the pid)
  std::terminate_handler previous_terminate = nullptr;
  std::string exit_reason;  // set by the Python runtime when an exception ends the process
  std::atomic<long> watcher_pid{0};  // the process whose watcher thread reads the pipe
  std::atomic<int> pipe_w{-1};
  int pipe_r = -1;
  std::atomic<int> passing[2] = {{0}, {0}};  // SIGTERM, SIGINT: the next one goes on to `previous`
  struct sigaction previous[2];
  void (*handler)(int, siginfo_t*, void*) = nullptr;
  std::vector<std::string> signals;  // run.json flight.signals
  uint64_t generations = 0;
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
inline Flight& flight_state() {
  static Flight f;  // STB_GNU_UNIQUE, as shared()
  return f;
}

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

// What one thread knows of its graph calls (flight.py's thread-local `call` and `last`).
struct FlightThread {
  uint64_t generation = 0;
  std::shared_ptr<FlightCall> call;
  std::map<std::pair<const void*, std::string>, int64_t> last;  // (wrapper, subgraph or "") -> last site
};
thread_local FlightThread tl_flight;

constexpr const char* kSignalNames[2] = {"SIGTERM", "SIGINT"};  // flight.SIGNALS (cpp_runtime checks)
constexpr int kSignals[2] = {SIGTERM, SIGINT};

// ---------------------------------------------------------------- records as the ring reads them
// Where the value of `key` starts in one of our own compact record lines (records.h):
// keys are the generated schema names and every string value is escaped, so `"key":`
// occurs only as that key.
const char* line_value(const std::string& line, const char* key) {
  std::string pattern = std::string("\"") + key + "\":";
  size_t at = line.find(pattern);
  return at == std::string::npos ? nullptr : line.c_str() + at + pattern.size();
}

int64_t line_int(const std::string& line, const char* key) {
  const char* p = line_value(line, key);
  return p ? std::strtoll(p, nullptr, 10) : 0;
}

// A tensor file's name (sanitised: nothing in it is escaped).
std::string line_file(const std::string& line) {
  const char* p = line_value(line, schema::rec::kFile);
  const char* end = p && *p == '"' ? std::strchr(p + 1, '"') : nullptr;
  return end ? std::string(p + 1, end) : std::string();
}

std::string local_time() {
  time_t now = std::time(nullptr);
  struct tm tmv;
  localtime_r(&now, &tmv);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S%z", &tmv);
  return buf;
}

void json_str_list(std::string& o, const std::vector<std::string>& v) {
  o += "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) o += ", ";
    json_str(o, v[i]);
  }
  o += "]";
}

// ---------------------------------------------------------------- run.json
std::string birth_json(const FlightBirth& b) {
  std::string o = "{\"arg\": ";
  json_str(o, b.arg);
  o += ", \"graph\": ";
  json_str(o, b.graph);
  o += ", \"graph_call\": " + std::to_string(b.graph_call) + ", \"inf\": " + std::to_string(b.inf) +
       ", \"inputs\": " + std::to_string(b.inputs) + ", \"inputs_held\": ";
  json_str(o, b.inputs_held);
  o += ", \"kernel\": ";
  json_str(o, b.kernel);
  o += ", \"kernel_call\": " + std::to_string(b.kernel_call) + ", \"launch\": " + std::to_string(b.launch) +
       ", \"nan\": " + std::to_string(b.nan) + ", \"next\": ";
  if (b.next_launch < 0) {
    o += "null";
  } else {
    o += "{\"launch\": " + std::to_string(b.next_launch) + ", \"saved\": ";
    json_str_list(o, b.next_saved);
    o += "}";
  }
  o += ", \"not_saved\": ";
  json_str_list(o, b.not_saved);
  o += ", \"saved\": ";
  json_str_list(o, b.saved);
  o += ", \"seq\": " + std::to_string(b.seq) + ", \"site\": " + (b.site >= 0 ? std::to_string(b.site) : "null");
  o += ", \"trigger\": ";
  json_str(o, schema::flight::kNonfinite);
  o += ", \"value\": ";
  json_str(o, b.value);
  return o + "}";
}

// flight.py FlightRecorder.summary, keys sorted as run.json's writer sorts them.
std::string flight_summary(const Flight& F) {
  std::string o = "{\"calls_dropped\": " + std::to_string(F.calls_dropped) +
      ", \"calls_in_ring\": " + std::to_string(F.calls_kept.size()) +
      ", \"calls_written\": " + std::to_string(F.calls_written) + ", \"dumps\": [";
  for (size_t i = 0; i < F.dumps.size(); ++i) o += (i ? ", " : "") + F.dumps[i];
  o += "], \"fired\": " + (F.fired ? birth_json(*F.fired) : std::string("null"));
  o += ", \"graph_calls\": " + std::to_string(F.calls) + ", \"max_records\": " +
       std::to_string(schema::flight::kMaxRecords) + ", \"records_dropped\": " + std::to_string(F.records_dropped) +
       ", \"ring\": " + (F.ring ? std::to_string(F.ring) : "null") + ", \"signals\": ";
  json_str_list(o, flight_hooks().signals);
  o += ", \"trigger\": ";
  if (F.trigger) {
    json_str(o, schema::flight::kNonfinite);
  } else {
    o += "null";
  }
  return o + "}";
}

// Caller holds S.mu. run.json with the recorder's state now.
void flight_publish(Shared& S) {
  S.flight = flight_summary(flight_state());
  write_info(S);
}

// ---------------------------------------------------------------- the ring
void drop_call(Flight& F, FlightCall& c) {
  c.dropped = true;
  if (c.pending.empty()) return;
  c.lost = true;
  F.calls_dropped += 1;
  F.records -= static_cast<int64_t>(c.pending.size());
  for (const FlightRecord& r : c.pending)
    if (!r.file.empty()) F.graveyard.push_back(r.file);
  std::deque<FlightRecord>().swap(c.pending);
}

void drop_oldest(Flight& F) {
  drop_call(F, *F.calls_kept.front());
  F.calls_kept.pop_front();
}

void new_call(Flight& F, FlightThread& T) {
  F.calls += 1;
  T.call = std::make_shared<FlightCall>();
  T.call->number = F.calls;
  F.calls_kept.push_back(T.call);
  // Calls leave the ring as later calls' records arrive (take); this bounds calls that
  // recorded nothing. Without a ring (a trigger alone) calls are only counted.
  size_t keep = F.ring ? static_cast<size_t>(F.ring) + schema::flight::kMaxAhead : 1;
  while (F.calls_kept.size() > keep) drop_oldest(F);
}

// flight.py FlightRecorder.take: true when the ring keeps `r` (then it is not written now).
bool take(Flight& F, FlightCall* call, FlightRecord&& r) {
  if (!F.ring || !call) return false;
  if (call->dropped) {  // another thread's calls pushed this one out while it ran
    if (!call->lost) {
      call->lost = true;
      F.calls_dropped += 1;
    }
    if (!r.file.empty()) {
      F.refs[r.file] += 1;
      F.graveyard.push_back(r.file);
    }
    return true;
  }
  while (!F.calls_kept.empty() && F.calls_kept.front()->number <= call->number - F.ring) drop_oldest(F);
  if (!r.file.empty()) F.refs[r.file] += 1;
  call->pending.push_back(std::move(r));
  F.records += 1;
  // Older calls leave first (never calls started after this one); then this call's oldest records.
  while (F.records > schema::flight::kMaxRecords && F.calls_kept.front().get() != call) drop_oldest(F);
  if (F.records > schema::flight::kMaxRecords && !call->pending.empty()) {
    if (!call->pending.front().file.empty()) F.graveyard.push_back(call->pending.front().file);
    call->pending.pop_front();
    F.records -= 1;
    F.records_dropped += 1;
  }
  return true;
}

// Level save: deletes the tensor files of records that left the ring unwritten, unless a
// record the ring keeps or the manifest holds names them; no later record may share them.
void bury(Shared& S, Flight& F) {
  std::vector<std::string> gone;
  gone.swap(F.graveyard);
  for (const std::string& name : gone) {
    auto it = F.refs.find(name);
    if (it != F.refs.end() && --it->second > 0) continue;
    if (F.permanent.count(name)) continue;
    if (it != F.refs.end()) F.refs.erase(it);
    for (auto c = S.content_files.begin(); c != S.content_files.end();) {
      c = c->second == name ? S.content_files.erase(c) : std::next(c);
    }
    ::unlink((S.path + "/" + name).c_str());
  }
}

// flight.py FlightRecorder.write: appends what the ring holds that is not written yet (seq
// order) and says so in run.json; how many records. Caller holds S.mu.
int64_t flight_write(Shared& S, const std::string& reason) {
  Flight& F = flight_state();
  std::vector<const FlightRecord*> recs;
  std::vector<int64_t> numbers;
  for (const auto& c : F.calls_kept) {
    if (!c->pending.empty()) numbers.push_back(c->number);
    for (const FlightRecord& r : c->pending) recs.push_back(&r);
  }
  std::sort(recs.begin(), recs.end(), [](const FlightRecord* a, const FlightRecord* b) { return a->seq < b->seq; });
  std::string lines;
  for (const FlightRecord* r : recs) {
    lines += r->line;
    lines += "\n";
  }
  if (!append_manifest(S, lines)) return 0;  // one warning; the records stay for the next write
  for (const auto& c : F.calls_kept) {
    if (c->pending.empty()) continue;
    if (!c->written) F.calls_written += 1;
    c->written = true;
    for (const FlightRecord& r : c->pending)
      if (!r.file.empty()) F.permanent.insert(r.file);
    std::deque<FlightRecord>().swap(c->pending);
  }
  F.records = 0;
  std::string d = "{\"graph_calls\": ";
  d += numbers.empty() ? "null"
                       : "[" + std::to_string(numbers.front()) + ", " + std::to_string(numbers.back()) + "]";
  d += ", \"reason\": ";
  json_str(d, reason);
  d += ", \"records\": " + std::to_string(recs.size()) + ", \"time\": ";
  json_str(d, local_time());
  F.dumps.push_back(d + "}");
  if (F.dumps.size() > static_cast<size_t>(schema::flight::kMaxDumpsListed)) F.dumps.erase(F.dumps.begin());
  flight_publish(S);
  return static_cast<int64_t>(recs.size());
}

// ---------------------------------------------------------------- tensor files the trigger saves
// Writes the values of `h` as the tensor file of `r` (unless it has one); true when it
// has one now. The record's line gets the file.
bool save_record(Shared& S, FlightRecord& r, const Site& site, AtenTensorHandle h, const DeviceOps* dev) {
  if (!r.file.empty()) return true;
  std::string name = tensor_file_name(r.seq, r.before ? "before" : "after", site.kernel, r.arg.c_str());
  std::string err;
#if AOTI_DEBUG_WITH_FILES
  HostTensor t;
  err = describe(h, t);
  if (err.empty()) err = host_values(h, t, dev);
  const TypeInfo* ti = type_info(t.dtype);
  if (err.empty() && !ti) err = "unsupported dtype";
  if (err.empty()) err = write_pt(S.path + "/" + name, *ti, t.shape, t.numel, t.data, t.nbytes, S.force_zip64);
#else
  (void)h;
  (void)dev;
  err = "tensor files are not compiled into this runtime";
#endif
  if (!err.empty()) {
    warn_once(S, "flight-save", "flight recorder: cannot write '" + S.path + "/" + name + "': " + err);
    return false;
  }
  r.file = name;
  std::string field = ",\"";
  field += schema::rec::kFile;
  field += "\":";
  json_str(field, name);
  r.line.insert(r.line.size() - 1, field);
  return true;
}

// The ring's record of (launch, side, arg) in `call`, or null (already written, dropped).
FlightRecord* pending_record(FlightCall* call, int64_t launch, bool before, const std::string& arg) {
  if (!call) return nullptr;
  for (auto it = call->pending.rbegin(); it != call->pending.rend(); ++it)
    if (it->launch == launch && it->before == before && it->arg == arg) return &*it;
  return nullptr;
}

void release_kept(FlightLaunch& l) {
  for (FlightInput& in : l.kept)
    if (in.handle) aoti_torch_delete_tensor_object(in.handle);
  l.kept.clear();
}

// ---------------------------------------------------------------- runs
// AOTI_DEBUG_RING / AOTI_DEBUG_TRIGGER for a new run (env.h parses them as config.py
// does). Caller holds S.mu.
void flight_start_run(Shared& S) {
  Flight& F = flight_state();
  FlightHooks& H = flight_hooks();
  F = Flight();
  F.generation = ++H.generations;
  F.pid = static_cast<long>(::getpid());
  F.ring = parse_ring(S);
  F.trigger = parse_trigger(S);
  F.on = F.ring > 0 || F.trigger;
  S.flight = F.on ? flight_summary(F) : std::string();
}

// The run ends (its directory or run id changed, or a forked child starts its own): in
// the process that recorded it, the ring is written first. Caller holds S.mu.
void flight_end_run(Shared& S, bool same_process) {
  Flight& F = flight_state();
  if (!F.on || !same_process || F.pid != static_cast<long>(::getpid())) return;
  if (S.usable) {
    flight_write(S, "close");
    bury(S, F);
  }
  for (auto& w : F.watch) release_kept(w.second);
  F.watch.clear();
  F.on = false;
}

// ---------------------------------------------------------------- exit and signals
// Writes the ring from outside a launch (exit, terminate, a signal's watcher): waits for
// the lock at most 10 s (a thread stuck inside a launch must not hang the exit).
// `reason` "": the exit's (flight_hooks().exit_reason, or "exit").
void flight_fatal_write(const std::string& reason, bool last) {
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

// Async-signal-safe: the previous disposition of a signal, as if ours had not been there.
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
void arm_signals(Shared& S) {
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
    if (std::find(H.signals.begin(), H.signals.end(), kSignalNames[i]) == H.signals.end()) {
      H.signals.push_back(kSignalNames[i]);
    }
  }
}

// ---------------------------------------------------------------- graph calls
// A launch of `site` in the wrapper `graph` starts (flight.py FlightRecorder.enter):
// maybe the next graph call. Caller holds S.mu; the run is open.
void flight_enter(Shared& S, const Graph& graph, const Site& site) {
  Flight& F = flight_state();
  if (!F.on) return;
  FlightHooks& H = flight_hooks();
  if (!H.exit_hooks) {
    H.exit_hooks = true;
    std::atexit(&flight_at_exit);
    H.previous_terminate = std::set_terminate(&flight_on_terminate);
  }
  FlightThread& T = tl_flight;
  if (T.generation != F.generation) T = FlightThread{F.generation, nullptr, {}};
  bool sub = site.graph && *site.graph;
  if (!sub) F.top_graphs.insert(&graph);
  bool top = F.top_graphs.count(&graph) > 0;
  if (sub && top) {  // a subgraph's launches belong to the call in progress
    if (!T.call) new_call(F, T);
    return;
  }
  auto key = std::make_pair(static_cast<const void*>(&graph), top ? std::string() : std::string(site.graph));
  auto it = T.last.find(key);
  bool first = it == T.last.end();
  int64_t before = first ? 0 : it->second;
  T.last[key] = site.id;
  if (first || site.id <= before || !T.call) {
    new_call(F, T);
    if (F.ring) arm_signals(S);
  }
}

// ---------------------------------------------------------------- one launch side
// flight.py BirthWatch.observe over one after side: the index of the first record whose
// NaN/Inf none of the launch's inputs held, or -1. An Inf made at a kernel's first call
// is by design (a causal mask), and so is that site's Inf later.
int find_birth(Flight& F, const FlightLaunch& in, const std::vector<FlightRecord>& recs,
               const std::vector<bool>& judged, const std::string& label, const Site& site, std::string& value) {
  for (size_t i = 0; i < recs.size(); ++i) {
    if (!judged[i]) continue;
    int64_t nan = line_int(recs[i].line, schema::stat::kNan), inf = line_int(recs[i].line, schema::stat::kInf);
    value = nan && !in.nan ? "nan" : inf && !in.inf ? "inf" : "";
    if (value == "inf") {
      std::string where = label + "\n" + (site.id >= 0 ? "s" + std::to_string(site.id) : std::string("k") + site.kernel);
      if (tl_call == 0 || F.inf_by_design.count(where)) {
        F.inf_by_design.insert(where);
        continue;
      }
    }
    if (!value.empty()) return static_cast<int>(i);
  }
  return -1;
}

// The birth launch's values, saved in its done hook where they are still live: its
// outputs and its read-only inputs (an inout arg's value before the launch is gone).
void save_at_once(Shared& S, FlightBirth& b, FlightLaunch& in, const Site& site, const Value* v,
                  size_t n, const DeviceOps* dev) {
  FlightCall* call = tl_flight.call.get();
  for (const FlightInput& k : in.kept) {
    FlightRecord* r = pending_record(call, b.launch, true, k.arg);
    if (!r) continue;
    if (!k.handle) {
      b.not_saved.push_back(k.arg + " before: the launch wrote it (" + k.role + "); see the next occurrence");
      continue;
    }
    if (save_record(S, *r, site, k.handle, dev)) b.saved.push_back(r->file);
  }
  for (size_t i = 0; i < n; ++i) {
    if (v[i].kind() != Value::kTensor) continue;
    FlightRecord* r = pending_record(call, b.launch, false, site.args[i].name);
    if (r && save_record(S, *r, site, v[i].handle(), dev)) b.saved.push_back(r->file);
  }
}

// One launch side with a flight recorder: its records into the ring (or the manifest),
// the birth watch, the trigger's saving and writes. Caller holds S.mu; the run is usable.
void flight_side(Shared& S, const Site& site, const std::string& label, const Graph& graph, const Value* v,
                 size_t count, const char* phase) {
  Flight& F = flight_state();
  FlightThread& T = tl_flight;
  if (T.generation != F.generation) T = FlightThread{F.generation, nullptr, {}};
  std::vector<std::string> lines;
  record_side(S, site, v, count, phase, label, graph.device, &lines);
  bool before = std::strcmp(phase, "before") == 0;
  size_t n = lines.size();
  std::vector<FlightRecord> recs(n);
  std::vector<bool> judged(n), uninitialised(n);
  for (size_t i = 0; i < n; ++i) {
    FlightRecord& r = recs[i];
    r.line = std::move(lines[i]);
    r.seq = line_int(r.line, schema::rec::kSeq);
    r.launch = tl_launch;
    r.before = before;
    r.arg = site.args[i].name;
    r.file = line_file(r.line);
    uninitialised[i] = line_value(r.line, schema::rec::kUninitialised) != nullptr;
    judged[i] = !uninitialised[i] && line_value(r.line, schema::rec::kVolatile) == nullptr;
  }
  // The birth's site again: both sides saved, as that launch's files.
  bool target = F.target && F.target_graph == label && F.target_site == site.id && F.target_kernel == site.kernel;
  if (target && F.fired) {
    for (size_t i = 0; i < n; ++i) {
      if (v[i].kind() != Value::kTensor || uninitialised[i]) continue;
      if (F.fired->next_launch < 0) F.fired->next_launch = tl_launch;
      if (save_record(S, recs[i], site, v[i].handle(), graph.device)) F.fired->next_saved.push_back(recs[i].file);
    }
  }
  // The birth watch.
  bool armed = F.trigger && !F.fired;
  FlightLaunch* in = nullptr;
  if (armed) {
    if (!F.watch.count(tl_launch)) {  // launches whose done hook never ran leave, oldest first
      while (F.watch.size() >= static_cast<size_t>(schema::flight::kWatchWindow)) {
        release_kept(F.watch.begin()->second);
        F.watch.erase(F.watch.begin());
      }
    }
    in = &F.watch[tl_launch];
  }
  int birth = -1;
  std::string value;
  if (in && before) {
    for (size_t i = 0; i < n; ++i) {
      if (judged[i]) {
        in->inputs += 1;
        in->nan |= line_int(recs[i].line, schema::stat::kNan) > 0;
        in->inf |= line_int(recs[i].line, schema::stat::kInf) > 0;
      }
      if (F.ring && v[i].kind() == Value::kTensor && !uninitialised[i]) {
        FlightInput k{site.args[i].name, site.args[i].role, nullptr};
        // A handle of our own: the wrapper's may be a view made for this call only.
        if (std::strcmp(site.args[i].role, "input") == 0 && aoti_torch_new_tensor_handle(v[i].handle(), &k.handle) != 0)
          k.handle = nullptr;
        in->kept.push_back(std::move(k));
      }
    }
  } else if (in) {
    birth = find_birth(F, *in, recs, judged, label, site, value);
  }
  if (birth >= 0) {
    auto b = std::make_unique<FlightBirth>();
    const FlightRecord& r = recs[static_cast<size_t>(birth)];
    b->value = value;
    b->graph = label;
    b->launch = tl_launch;
    b->kernel = site.kernel;
    b->kernel_call = tl_call;
    b->site = site.id;
    b->seq = r.seq;
    b->arg = r.arg;
    b->nan = line_int(r.line, schema::stat::kNan);
    b->inf = line_int(r.line, schema::stat::kInf);
    b->graph_call = T.call ? T.call->number : 0;
    b->inputs = in->inputs;
    b->inputs_held = in->nan && in->inf ? "NaN+Inf" : in->nan ? "NaN" : in->inf ? "Inf" : in->inputs ? "finite" : "none";
    F.fired = std::move(b);
    F.target = true;
    F.target_graph = label;
    F.target_site = site.id;
    F.target_kernel = site.kernel;
  }
  // Into the ring, or written as they come (no ring).
  std::string direct;
  for (FlightRecord& r : recs) {
    std::string line = r.line;
    if (!take(F, T.call.get(), std::move(r))) direct += line + "\n";
  }
  append_manifest(S, direct);
  if (birth >= 0) {
    if (F.ring) {
      save_at_once(S, *F.fired, *in, site, v, n, graph.device);
    } else {
      F.fired->not_saved.push_back("at once: without a ring the launch's records are already written");
    }
    flight_write(S, schema::flight::kNonfinite);
  }
  if (target && !before) {
    F.target = false;
    flight_write(S, std::string(schema::flight::kNonfinite) + ": next occurrence saved");
  }
  if (!before) {
    auto w = F.watch.find(tl_launch);
    if (w != F.watch.end()) {
      release_kept(w->second);
      F.watch.erase(w);
    }
  }
  if (!F.graveyard.empty()) bury(S, F);
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_FLIGHT_H
