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
// last one that thread launched in that wrapper starts the next call; so does the graph
// inputs' launch (schema::kInputsKernel), which codegen puts before every call's first
// launch whatever number it took, and the launch after it continues that call. A wrapper is known
// to have top-level launches from its first one on (Python knows it from the wrapper's
// import): until then, its subgraph launches count passes over each subgraph.
//
// Everything here runs under shared().mu; flight_hooks.h writes the ring at exit and on
// signals.
#ifndef AOTI_DEBUG_PART_FLIGHT_H
#define AOTI_DEBUG_PART_FLIGHT_H

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

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
  std::vector<std::string> signals;     // those whose handler writes the ring (flight_hooks.h)
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
inline Flight& flight_state() {
  static Flight f;  // STB_GNU_UNIQUE, as shared()
  return f;
}

namespace {

// What one thread knows of its graph calls (flight.py's thread-local `call` and `last`).
struct FlightThread {
  uint64_t generation = 0;
  std::shared_ptr<FlightCall> call;
  std::map<std::pair<const void*, std::string>, int64_t> last;  // (wrapper, subgraph or "") -> last site
};
thread_local FlightThread tl_flight;

// ---------------------------------------------------------------- records as the ring reads them
// Where the value of `key` starts in one of our own compact record lines (records.h):
// keys are the generated schema names and every string value is escaped, so `"key":`
// occurs only as that key.
const char* line_value(const std::string& line, const char* key) {
  char pattern[64];
  int n = std::snprintf(pattern, sizeof(pattern), "\"%s\":", key);
  size_t at = line.find(pattern);
  return at == std::string::npos ? nullptr : line.c_str() + at + n;
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
  json_str_list(o, F.signals);
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

// flight.py FlightRecorder.take, with a ring: the ring keeps `r` (of the graph call `c`).
void take(Flight& F, FlightCall& call, FlightRecord&& r) {
  if (call.dropped) {  // another thread's calls pushed this one out while it ran
    if (!call.lost) {
      call.lost = true;
      F.calls_dropped += 1;
    }
    if (!r.file.empty()) {
      F.refs[r.file] += 1;
      F.graveyard.push_back(r.file);
    }
    return;
  }
  while (!F.calls_kept.empty() && F.calls_kept.front()->number <= call.number - F.ring) drop_oldest(F);
  if (!r.file.empty()) F.refs[r.file] += 1;
  call.pending.push_back(std::move(r));
  F.records += 1;
  // Older calls leave first (never calls started after this one); then this call's oldest records.
  while (F.records > schema::flight::kMaxRecords && F.calls_kept.front().get() != &call) drop_oldest(F);
  if (F.records > schema::flight::kMaxRecords && !call.pending.empty()) {
    if (!call.pending.front().file.empty()) F.graveyard.push_back(call.pending.front().file);
    call.pending.pop_front();
    F.records -= 1;
    F.records_dropped += 1;
  }
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
    const char* leaf = nullptr;
    const int at = run_file_at(S, name, leaf);
    if (at >= 0) ::unlinkat(at, leaf, 0);
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
  // Stats on the device (device_stats.h) waited for the current stream only and copied
  // nothing: the device is synchronised here, as record_side does for the host path.
  if (err.empty() && t.device_type != kDeviceCpu && dev && dev->synchronize) {
    int e = dev->synchronize();
    if (e != 0)
      err = std::string("device error before reading values: ") +
            (dev->error_string ? dev->error_string(e) : "error " + std::to_string(e));
  }
  if (err.empty()) err = host_values(h, t, dev);
  const TypeInfo* ti = type_info(t.dtype);
  if (err.empty() && !ti) err = "unsupported dtype";
  const char* leaf = nullptr;
  const int at = run_file_at(S, name, leaf);
  if (err.empty())
    err = write_pt_at(at, leaf, S.path + "/" + name, *ti, t.shape, t.numel, t.data, t.nbytes, S.force_zip64);
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
  Flight next;
  next.generation = F.generation + 1;
  next.signals = F.signals;  // handlers stay installed from run to run (and in a forked child)
  F = std::move(next);
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

// ---------------------------------------------------------------- graph calls
// A launch of `site` in the wrapper `graph` starts (flight.py FlightRecorder.enter): true
// when it starts the next graph call. Caller holds S.mu; the run is open.
bool flight_enter(const Graph& graph, const Site& site) {
  Flight& F = flight_state();
  if (!F.on) return false;
  FlightThread& T = tl_flight;
  if (T.generation != F.generation) T = FlightThread{F.generation, nullptr, {}};
  bool sub = site.graph && *site.graph;
  if (!sub) F.top_graphs.insert(&graph);
  bool top = F.top_graphs.count(&graph) > 0;
  if (sub && top) {  // a subgraph's launches belong to the call in progress
    if (T.call) return false;
    new_call(F, T);
    return true;
  }
  auto key = std::make_pair(static_cast<const void*>(&graph), top ? std::string() : std::string(site.graph));
  auto it = T.last.find(key);
  bool first = it == T.last.end();
  int64_t before = first ? 0 : it->second;
  const bool starts = starts_graph_call(site);  // (device_launch.h; its number may be above the next launch's)
  T.last[key] = starts ? -1 : site.id;
  if (!starts && !first && site.id > before && T.call) return false;
  new_call(F, T);
  return true;
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
      std::string where = label + "\n";
      where += site.id >= 0 ? "s" + std::to_string(site.id) : std::string("k") + site.kernel;
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
void flight_side(Shared& S, Local& L, const Site& site, const std::string& label, const Graph& graph,
                 const Value* v, size_t count, const char* phase) {
  Flight& F = flight_state();
  FlightThread& T = tl_flight;
  if (T.generation != F.generation) T = FlightThread{F.generation, nullptr, {}};
  std::vector<std::string> lines;
  record_side(S, L, site, v, count, phase, label, graph.device, &lines);
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
    b->inputs_held = in->nan && in->inf ? "NaN+Inf" : in->nan ? "NaN" : in->inf ? "Inf"
                     : in->inputs ? "finite" : "none";
    F.fired = std::move(b);
    F.target = true;
    F.target_graph = label;
    F.target_site = site.id;
    F.target_kernel = site.kernel;
  }
  // Into the ring, or written as they come (no ring).
  if (F.ring && T.call) {
    for (FlightRecord& r : recs) take(F, *T.call, std::move(r));
  } else {
    std::string direct;
    for (const FlightRecord& r : recs) direct += r.line + "\n";
    append_manifest(S, direct);
  }
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
