// The entry points: what one instrumented launch runs before (entry_launch) and after
// (entry_done) the kernel, and what a graph call runs at its end (entry_call_end), under
// the process-wide lock. Level names prints lines; the
// other levels open the run and record values, compiled in where AOTI_DEBUG_WITH_RECORDS
// is set (a names-only runtime leaves out stats, the run directory and the records).
// Nothing here throws into the model: a failure warns once and the model runs on.
#ifndef AOTI_DEBUG_PART_ENTRY_H
#define AOTI_DEBUG_PART_ENTRY_H

#include <cstddef>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

#include "constants.h"
#include "env.h"
#include "graph.h"
#include "interface.h"
#include "names.h"
#include "state.h"
#include "text.h"

#ifndef AOTI_DEBUG_WITH_RECORDS
#define AOTI_DEBUG_WITH_RECORDS 1
#endif
#if AOTI_DEBUG_WITH_RECORDS
#include "flight.h"
#include "flight_hooks.h"
#include "records.h"
#include "run_dir.h"
#include "run_json.h"
#endif

namespace AOTI_DEBUG_NS {
namespace {

// Caller holds S.mu. Whether this runtime was built with what the site's level needs.
bool level_built_in(Shared& S, const Site& site) {
#if AOTI_DEBUG_WITH_RECORDS
  (void)S;
  (void)site;
  return true;
#else
  if (site.level == schema::kNames) return true;
  warn_once(S, "level", std::string("level ") + schema::level_name(site.level) +
            " is not compiled into this runtime: nothing is recorded");
  return false;
#endif
}

// Deletes the handles borrowed for a call's values when the entry point returns.
struct ReleaseValues {
  const Value* values;
  size_t count;
  ~ReleaseValues() { Value::release(values, count); }
};

void hook_failed(Shared& S, const Site& site, const char* what) {
  warn_once(S, "hook", std::string("instrumentation of ") + site.kernel + " failed" + (what ? ": " : "") +
            (what ? what : ""));
}

// The values as the runtime reads them: lazy ones (interface.h) evaluated, what they
// made deleted when this goes out of scope. A value that cannot be made is "none", with
// one warning. Caller holds S.mu.
class Resolved {
 public:
  Resolved(Shared& S, const Site& site, const Value* values, size_t count) {
    values_.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      const LazyBase* lazy = values[i].lazy();
      if (!lazy) {
        values_.push_back(values[i]);
        continue;
      }
      try {
        values_.push_back(lazy->eval(lazy));
        made_.push_back(values_.back());
      } catch (const std::exception& e) {
        hook_failed(S, site, e.what());
        values_.push_back(Value(nullptr));
      } catch (...) {
        hook_failed(S, site, nullptr);
        values_.push_back(Value(nullptr));
      }
    }
  }
  ~Resolved() { Value::release(made_.data(), made_.size()); }
  Resolved(const Resolved&) = delete;
  Resolved& operator=(const Resolved&) = delete;
  const Value* data() const { return values_.data(); }
  size_t size() const { return values_.size(); }

 private:
  std::vector<Value> values_, made_;
};

#if AOTI_DEBUG_WITH_RECORDS
// One side's records (stats, print, save), what entry_launch and entry_done share: the
// graph in run.json, the values recorded, run.json rewritten if it fell behind. Caller
// holds S.mu.
void record_phase(Shared& S, Local& L, const std::string& label, const Site& site, Graph* graph,
                  const Value* values, size_t count, const char* phase) {
  register_graph(S, L, label, site, graph);
  if (S.usable) {
    Resolved r(S, site, values, count);
    if (flight_state().on) {
      flight_side(S, L, site, label, *graph, r.data(), r.size(), phase);
    } else {
      record_side(S, L, site, r.data(), r.size(), phase, label, graph->device);
    }
  }
  if (claims().info_stale) write_info(S);
}
#endif

void entry_launch(Graph* graph, Token* token, const Site* site_ptr, const Value* values, size_t count) noexcept {
  ReleaseValues release{values, count};
  const Site& site = *site_ptr;
  Shared& S = shared();
  std::lock_guard<std::mutex> guard(S.mu);
  try {
    if (!level_built_in(S, site)) return;
    if (site.level == schema::kNames) {
      if (S.pid != this_pid()) {  // a forked child counts afresh
        S.pid = this_pid();
        S.launch = 0;
        S.warned.clear();
      }
    } else {
#if AOTI_DEBUG_WITH_RECORDS
      ensure_run(S, site, graph->device);
#endif
    }
    S.launch += 1;
    tl_launch = S.launch;
    Local& L = graph_local(*graph);
    std::string label = graph_label(S, L, site);
    tl_call = next_call(L, site);
    token->launch = tl_launch;
    token->call = tl_call;
    if (site.level == schema::kNames) {
      if (L.names_args < 0) L.names_args = parse_bool_env(S, schema::env::kNamesArgs);  // as config.parse_bool
      announce_graph(L, site, graph);
      emit_line(names_line("before", tl_launch, label, site.kernel, tl_call));
      if (L.names_args > 0) {
        Resolved r(S, site, values, count);
        describe_args(site, r.data(), r.size());
      }
      return;
    }
#if AOTI_DEBUG_WITH_RECORDS
    if (flight_enter(*graph, site)) flight_arm(S);
    record_phase(S, L, label, site, graph, values, count, "before");
#endif
  } catch (const std::exception& e) {
    hook_failed(S, site, e.what());
  } catch (...) {
    hook_failed(S, site, nullptr);
  }
}

void entry_done(Graph* graph, Token* token, const Site* site_ptr, const Value* values, size_t count) noexcept {
  ReleaseValues release{values, count};
  const Site& site = *site_ptr;
  Shared& S = shared();
  std::lock_guard<std::mutex> guard(S.mu);
  try {
    if (!level_built_in(S, site)) return;
    tl_launch = token->launch;
    tl_call = token->call;
    Local& L = graph_local(*graph);
    std::string label = graph_label(S, L, site);
    if (site.level == schema::kNames) {
      emit_line(names_line("after", tl_launch, label, site.kernel, tl_call));
      return;
    }
#if AOTI_DEBUG_WITH_RECORDS
    record_phase(S, L, label, site, graph, values, count, "after");
#else
    (void)values;
    (void)count;
#endif
  } catch (const std::exception& e) {
    hook_failed(S, site, e.what());
  } catch (...) {
    hook_failed(S, site, nullptr);
  }
}

// The end of one call of a graph (the wrapper calls it before it hands back its outputs):
// the lines its sides held go to the manifest in one write, and from now on its sides hold
// theirs (manifest.h). A call that ends in an exception skips it: its lines go with the
// next write. Never throws.
void entry_call_end(Graph* graph) noexcept {
  Shared& S = shared();
  std::lock_guard<std::mutex> guard(S.mu);
  try {
#if AOTI_DEBUG_WITH_RECORDS
    launch_waiting_runs(S);  // what the caller does with the outputs may write them
#endif
    Local& L = graph_local(*graph);
    L.ends_calls = true;
#if AOTI_DEBUG_WITH_RECORDS
    links_of(L).call += 1;  // what its launches made is this call's no more
    write_held(S);
#endif
  } catch (...) {  // std::bad_alloc making the graph's state: its sides write at once
  }
}

// The wrapper's next line may write a tensor that a side of this call read (Site::defers;
// codegen's Manager._pending): the stats launches that wait for it go now
// (device_launch.h's PendingRun). Never throws.
void entry_pending(Graph* graph) noexcept {
  (void)graph;
#if AOTI_DEBUG_WITH_RECORDS
  Shared& S = shared();
  std::lock_guard<std::mutex> guard(S.mu);
  launch_waiting_runs(S);
#endif
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_ENTRY_H
