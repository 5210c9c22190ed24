// run.json: the run's header (format.schema.RunInfo, keys sorted as the Python writer
// writes them), rewritten atomically whenever a graph or a warning is added.
#ifndef AOTI_DEBUG_PART_RUN_JSON_H
#define AOTI_DEBUG_PART_RUN_JSON_H

#include <cstdio>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "constants.h"
#include "graph.h"
#include "interface.h"
#include "json.h"
#include "own_dir.h"
#include "sources.h"
#include "state.h"
#include "text.h"

#ifndef AOTI_DEBUG_PKG_VERSION
#define AOTI_DEBUG_PKG_VERSION ""
#endif
#ifndef AOTI_DEBUG_TORCH_VERSION
#define AOTI_DEBUG_TORCH_VERSION ""
#endif

namespace AOTI_DEBUG_NS {
namespace {

std::vector<std::string> cmdline() {
  std::vector<std::string> out;
  FILE* f = std::fopen("/proc/self/cmdline", "rb");
  if (!f) return out;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  std::fclose(f);
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find('\0', i);
    if (j == std::string::npos) j = text.size();
    out.push_back(text.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

// The device the model runs on, as the wrapper's device functions name it.
std::string device_label(const DeviceOps* dev) {
  char name[256] = {0};
  if (dev && dev->device_name && dev->device_name(name, sizeof(name)) == 0) return name;
  return "cpu";
}

// format.schema.RunInfo, keys sorted as the Python writer writes them.
std::string run_info_json(Shared& S) {
  namespace I = schema::info;
  std::string o = "{\n";
  auto key = [&](const char* k) {
    o += " ";
    json_str(o, k);
    o += ": ";
  };
  auto str_list = [&](const std::vector<std::string>& v) {
    o += "[";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) o += ", ";
      json_str(o, v[i]);
    }
    o += "]";
  };
  key(I::kAotiDebugVersion); json_str(o, AOTI_DEBUG_PKG_VERSION); o += ",\n";
  key(I::kArgv); str_list(cmdline()); o += ",\n";
  key(I::kDevice); json_str(o, S.device); o += ",\n";
  if (!S.flight.empty()) {
    key(I::kFlight); o += S.flight + ",\n";
  }
  key(I::kFormatVersion); o += std::to_string(schema::kFormatVersion) + ",\n";
  key(I::kGraphs); o += "{";
  for (size_t i = 0; i < S.graph_info.size(); ++i) {
    if (i) o += ", ";
    json_str(o, S.graph_info[i].first);
    o += ": " + S.graph_info[i].second;
  }
  o += "},\n";
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  key(I::kHostname); json_str(o, host); o += ",\n";
  key(I::kKernels); json_str(o, S.kernels); o += ",\n";
  key(I::kLevel); json_str(o, S.level); o += ",\n";
  std::vector<std::string> phases;
  for (size_t i = 0; i <= S.phases.size();) {
    size_t j = S.phases.find(',', i);
    if (j == std::string::npos) j = S.phases.size();
    if (j > i) phases.push_back(S.phases.substr(i, j - i));
    i = j + 1;
  }
  key(I::kPhases); str_list(phases); o += ",\n";
  key(I::kPid); o += std::to_string(static_cast<long>(::getpid())) + ",\n";
  key(I::kRank); o += std::to_string(S.rank) + ",\n";
  key(I::kRunId); json_str(o, S.run_id); o += ",\n";
  key(I::kStartTime); json_str(o, S.start_time); o += ",\n";
  key(I::kSync); o += S.sync ? "true,\n" : "false,\n";
  key(I::kTorchVersion); json_str(o, AOTI_DEBUG_TORCH_VERSION); o += ",\n";
  key(I::kUid); o += std::to_string(static_cast<long>(::getuid())) + ",\n";
  key(I::kWarnings); str_list(claims().run_warnings); o += ",\n";  // this run's, one per kind
  key(I::kWorldSize); o += std::to_string(S.world_size) + ",\n";
  key(I::kWriter); json_str(o, "cpp"); o += "\n}";
  return o;
}

// Caller holds S.mu. No-op until the run's directory is claimed and usable.
void write_info(Shared& S) {
  if (!S.owns_info || !S.usable) return;
  claims().info_stale = false;
  std::string err;
  if (!write_file_atomic_at(S.dir_fd, schema::kRunFile, S.path + "/" + schema::kRunFile, run_info_json(S), err)) {
    warn_once(S, "run-json", "cannot update run.json: " + err);
  }
}

// Caller holds S.mu. Lists a graph in run.json the first time it records in this run.
void register_graph(Shared& S, Local& L, const std::string& label, const Site& site, const void* anchor) {
  if (!S.usable || !L.registered.insert(label).second) return;
  std::string o = "{\"file\": ";
  std::string file = graph_file(anchor, site.file);
  json_str(o, file);
  std::string copies = copy_sources(S, label, file);  // what replay may run (sources.h)
  if (!copies.empty()) o += ", \"sources\": " + copies;
  if (site.graph && *site.graph) {
    o += ", \"subgraph\": ";
    json_str(o, site.graph);
  }
  if (site.graph_kind && *site.graph_kind) {
    o += ", \"kind\": ";
    json_str(o, site.graph_kind);
  }
  if (site.compile_id && *site.compile_id) {
    o += ", \"compile_id\": ";
    json_str(o, site.compile_id);
  }
  o += ", \"wrapper\": \"cpp\"}";
  S.graph_info.emplace_back(label, o);
  write_info(S);
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_RUN_JSON_H
