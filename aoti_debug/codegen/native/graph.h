// Per-graph state: which label ("graph<N>", "/<subgraph>" appended) a wrapper got in
// the current run, its per-kernel call counts, and where its code is.
#ifndef AOTI_DEBUG_PART_GRAPH_H
#define AOTI_DEBUG_PART_GRAPH_H

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <unistd.h>

#include "constants.h"
#include "interface.h"
#include "state.h"

namespace AOTI_DEBUG_NS {
namespace {

struct Local {
  uint64_t generation = 0;
  int64_t index = -1;
  bool announced = false;  // level names: the graph line is out
  int names_args = -1;     // level names: AOTI_DEBUG_NAMES_ARGS, read at this graph's first launch
  std::map<const Site*, int64_t*> site_calls;  // cache into `calls` (std::map nodes are stable)
  std::map<std::string, int64_t> calls;
  std::set<std::string> registered;  // labels listed in run.json
  // per site and phase: the record fields that do not change between calls (records.h)
  std::map<std::pair<const Site*, bool>, std::vector<std::string>> texts;
  // The wrapper calls call_end before it returns (entry_call_end): its sides hold their
  // manifest lines until then (manifest.h). Kept across runs: it is the code's.
  bool ends_calls = false;
};

// Caller holds shared().mu. Allocated at the wrapper's first launch; kept for as long
// as the process runs (a wrapper .so is not unloaded while its model may run).
Local& graph_local(Graph& g) {
  if (!g.state) g.state = new Local();
  return *static_cast<Local*>(g.state);
}

// Caller holds S.mu. A new run (S.generation) numbers graphs afresh, in order of first use.
std::string graph_label(Shared& S, Local& L, const Site& site) {
  if (L.generation != S.generation) {
    L.generation = S.generation;
    L.index = -1;
    L.announced = false;
    L.calls.clear();
    L.site_calls.clear();
    L.registered.clear();
    L.texts.clear();
  }
  if (L.index < 0) L.index = S.graphs++;
  std::string label = "graph" + std::to_string(L.index);
  if (site.graph && *site.graph) {
    label += "/";
    label += site.graph;
  }
  return label;
}

// The n-th call of this site's kernel in this graph and run (the record's kernel_call).
int64_t next_call(Local& L, const Site& site) {
  int64_t*& counter = L.site_calls[&site];
  if (!counter) counter = &L.calls[std::string(site.graph) + '\x1f' + site.kernel];
  return (*counter)++;
}

// Where a graph's code is: the wrapper source if it is still there, else the .so that
// holds `anchor` (an object of the wrapper: its Graph).
std::string graph_file(const void* anchor, const char* source_file) {
  if (source_file && *source_file && ::access(source_file, F_OK) == 0) return source_file;
  Dl_info info;
  if (::dladdr(anchor, &info) && info.dli_fname) return info.dli_fname;
  return "";
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_GRAPH_H
