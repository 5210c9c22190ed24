// The run directory: <AOTI_DEBUG_DIR>/<run-id>/[rank<N>/], claimed by this runtime
// with an O_EXCL .owner file (format.writer.claim_run_directory), and the manifest it
// appends to. A new run starts in a new process (fork) or when AOTI_DEBUG_DIR or
// AOTI_DEBUG_RUN_ID changed since the last record.
#ifndef AOTI_DEBUG_PART_RUN_DIR_H
#define AOTI_DEBUG_PART_RUN_DIR_H

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "constants.h"
#include "env.h"
#include "flight.h"
#include "interface.h"
#include "json.h"
#include "run_json.h"
#include "state.h"
#include "text.h"

namespace AOTI_DEBUG_NS {
namespace {

// os.path.join for a relative `b`.
std::string path_join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

// format.writer.run_directory
std::string run_directory(const std::string& root, const std::string& run_id, int rank, int world_size) {
  std::string path = path_join(root, run_id);
  if (world_size > 1) path = path_join(path, "rank" + std::to_string(rank));
  return path;
}


bool mkdirs(const std::string& path, std::string& err) {
  std::string cur;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    cur = path.substr(0, j);
    if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      err = "cannot create " + cur + ": " + errno_text(errno);
      return false;
    }
    i = j + 1;
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    err = path + " is not a directory";
    return false;
  }
  return true;
}

// format.writer._process_start_stamp: local start time of a process, from /proc.
std::string start_stamp(long pid) {
  time_t start = std::time(nullptr);
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
  FILE* f = std::fopen(path, "rb");
  if (f) {
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
    std::fclose(f);
    size_t close = text.rfind(')');
    long long ticks = -1;
    if (close != std::string::npos) {
      const char* p = text.c_str() + close + 1;
      for (int field = 0; field <= 19 && *p; ++field) {
        while (*p == ' ') ++p;
        const char* q = p;
        while (*q && *q != ' ') ++q;
        if (field == 19) ticks = std::strtoll(std::string(p, q).c_str(), nullptr, 10);
        p = q;
      }
    }
    long long btime = -1;
    FILE* s = std::fopen("/proc/stat", "rb");
    if (s) {
      char line[512];
      while (std::fgets(line, sizeof(line), s)) {
        if (std::strncmp(line, "btime ", 6) == 0) {
          btime = std::strtoll(line + 6, nullptr, 10);
          break;
        }
      }
      std::fclose(s);
    }
    long hz = ::sysconf(_SC_CLK_TCK);
    if (ticks >= 0 && btime >= 0 && hz > 0) start = static_cast<time_t>(btime + ticks / hz);
  }
  struct tm tmv;
  localtime_r(&start, &tmv);
  char out[32];
  std::strftime(out, sizeof(out), "%Y%m%d-%H%M%S", &tmv);
  return out;
}

// format.writer.default_run_id
std::string default_run_id(int world_size) {
  long pid = world_size > 1 ? static_cast<long>(::getppid()) : static_cast<long>(::getpid());
  return start_stamp(pid) + "-p" + std::to_string(pid);
}


// format.writer.owner_text
std::string owner_text() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  std::string o = "{\"host\": ";
  json_str(o, host);
  o += ", \"pid\": " + std::to_string(static_cast<long>(::getpid())) + ", \"runtime\": \"cpp\"}\n";
  return o;
}

// format.writer.describe_owner: who holds the run directory `path`, for a warning.
std::string describe_owner(const std::string& path) {
  std::string owner = path + "/" + schema::kOwnerFile;
  FILE* f = std::fopen(owner.c_str(), "rb");
  if (!f) {
    if (errno == ENOENT) return "an earlier run (no .owner file)";
    return std::string("another runtime (its .owner file is unreadable: ") + std::strerror(errno) + ")";
  }
  std::string text;
  char buf[1024];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0 && text.size() < 65536) text.append(buf, n);
  std::fclose(f);
  auto str_field = [&](const char* key, std::string& out) {
    size_t k = text.find(std::string("\"") + key + "\": \"");
    if (k == std::string::npos) return false;
    k += std::strlen(key) + 5;
    size_t e = text.find('"', k);
    if (e == std::string::npos) return false;
    out = text.substr(k, e - k);
    return true;
  };
  std::string runtime, host;
  size_t k = text.find("\"pid\": ");
  char* end = nullptr;
  long pid = k == std::string::npos ? 0 : std::strtol(text.c_str() + k + 7, &end, 10);
  if (k == std::string::npos || end == text.c_str() + k + 7 || !str_field("runtime", runtime)) {
    return "another runtime (its .owner file is not written yet or damaged)";
  }
  str_field("host", host);
  std::string name = runtime == "python" ? "Python" : runtime == "cpp" ? "C++" : runtime;
  char me[256] = {0};
  ::gethostname(me, sizeof(me) - 1);
  if (pid == static_cast<long>(::getpid()) && host == me) return "the " + name + " runtime of this process";
  return "the " + name + " runtime of pid " + std::to_string(pid) + " on host " + (host.empty() ? "?" : host);
}

// format.writer.claim_run_directory: create <root>/<id>[/rank<N>] and claim it with an
// O_EXCL .owner file (pid, runtime, host). When another process, or this process's
// Python runtime, holds it, <id>-2, -3, ... are tried: two claimants never share a
// directory. A directory with a run but no .owner (an older aoti_debug) counts as held.
// Sets S.path and S.run_id; `holder` says who held the first one tried ("" if free).
bool claim_run(Shared& S, const std::string& root, const std::string& id, std::string& holder,
               std::string& err) {
  for (int n = 1; n <= schema::kMaxClaims; ++n) {
    std::string rid = n == 1 ? id : id + "-" + std::to_string(n);
    std::string path = run_directory(root, rid, S.rank, S.world_size);
    if (!mkdirs(path, err)) return false;
    std::string owner = path + "/" + schema::kOwnerFile;
    struct stat st;
    bool legacy = ::lstat(owner.c_str(), &st) != 0 &&
        (::stat((path + "/" + schema::kRunFile).c_str(), &st) == 0 ||
         ::stat((path + "/" + schema::kManifestFile).c_str(), &st) == 0);
    if (!legacy) {
      int fd = ::open(owner.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd >= 0) {
        std::string text = owner_text();
        write_fd(fd, text.data(), text.size());
        ::close(fd);
        S.path = path;
        S.run_id = rid;
        return true;
      }
      if (errno != EEXIST) {
        err = "cannot create " + owner + ": " + errno_text(errno);
        return false;
      }
    }
    if (holder.empty()) holder = describe_owner(path);
  }
  err = run_directory(root, id, S.rank, S.world_size) + " and " + std::to_string(schema::kMaxClaims - 1) +
      " numbered siblings are all held by other runs";
  return false;
}

// Caller holds S.mu. Starts a new run when this is a new process (fork) or the
// dump directory / run id in the environment changed since the last record.
void ensure_run(Shared& S, const Site& site, const DeviceOps* dev) {
  long pid = this_pid();
  const char* env_dir = std::getenv(schema::env::kDir);
  const char* env_rid = std::getenv(schema::env::kRunId);
  if (!env_dir || !*env_dir) env_dir = schema::kDefaultDumpDir;
  if (!env_rid) env_rid = "";
  // (compared in place: a launch's check makes no string)
  if (S.pid == pid && S.opened && S.env_dir == env_dir && S.env_run_id == env_rid) return;
  std::string dir = env_dir, rid = env_rid;
  flush_records(S);                 // queued records (device_stats.h) go to the run that made them
  flight_end_run(S, S.pid == pid);  // the ring goes to the run that recorded it
  Claims& C = claims();
  if (S.pid != pid) {  // a forked child starts its own run, like the Python session
    S.warned.clear();
    S.last_seq.clear();
    if (S.manifest_fd >= 0) ::close(S.manifest_fd);
    S.manifest_fd = -1;
  }
  if (C.pid != pid) {  // the parent's directories are not this process's
    C.dirs.clear();
    C.pid = pid;
  }
  if (S.manifest_fd >= 0) ::close(S.manifest_fd);
  S.manifest_fd = -1;
  if (S.opened && S.pid == pid && S.usable) S.last_seq[S.path] = S.seq;
  S.pid = pid;
  S.opened = true;
  S.usable = false;
  S.owns_info = false;
  S.generation += 1;
  S.launch = 0;
  S.graphs = 0;
  S.bytes_written = 0;
  S.graph_info.clear();
  S.content_files.clear();
  S.sites_written.clear();
  C.run_warnings.clear();
  C.run_keys.clear();
  S.env_dir = dir;
  S.env_run_id = rid;
  S.level = schema::level_name(site.level);
  S.sync = site.sync;
  S.kernels = site.kernels ? site.kernels : "";
  S.phases = site.phases ? site.phases : "before,after";
  S.rank = env_int(S, "RANK", 0, 0, "rank 0");
  S.world_size = env_int(S, "WORLD_SIZE", 1, 1, "world size 1");
  S.max_bytes = parse_max_bytes(S);
  S.save_launches = parse_save_launches(S);
  flight_start_run(S);
  S.force_zip64 = env_str("AOTI_DEBUG_ZIP64") == "1";
  std::string id = clean_run_id(rid);
  S.run_id = id.empty() ? default_run_id(S.world_size) : id;
  if (!rid.empty() && id != rid) {
    warn_once(S, "run-id:" + rid, "AOTI_DEBUG_RUN_ID=" + env_shown(rid) + " is not a plain name; " +
              (id.empty() ? "the default run id " : "run id ") + env_shown(S.run_id) +
              " is used (a run never leaves AOTI_DEBUG_DIR)");
  }
  std::string wanted = run_directory(dir, S.run_id, S.rank, S.world_size);
  S.path = wanted;
  S.device = device_label(dev);
  {
    time_t now = std::time(nullptr);
    struct tm tmv;
    localtime_r(&now, &tmv);
    char buf[64];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S%z", &tmv);
    S.start_time = buf;
  }
  auto known = C.dirs.find(wanted);
  if (known != C.dirs.end()) {
    // A run directory this runtime claimed before (the environment switched back to
    // it) is used again and continues its numbering: no file is overwritten.
    S.path = known->second.first;
    S.run_id = known->second.second;
    auto it = S.last_seq.find(S.path);
    S.seq = it == S.last_seq.end() ? 0 : it->second;
  } else {
    std::string holder, err;
    if (!claim_run(S, dir, S.run_id, holder, err)) {
      S.path = wanted;
      warn_once(S, "dump-dir", "cannot create dump directory '" + wanted + "': " + err);
      return;
    }
    if (!holder.empty()) {
      warn_once(S, "claim:" + wanted, "run directory '" + wanted + "' is held by " + holder +
                "; this C++ runtime writes to '" + S.path + "' instead");
    }
    C.dirs[wanted] = {S.path, S.run_id};
    S.seq = 0;
  }
  std::string err;
  if (!mkdirs(S.path + "/" + schema::kTensorDir, err)) {
    warn_once(S, "dump-dir", "cannot create dump directory '" + S.path + "': " + err);
    return;
  }
  std::string manifest = S.path + "/" + schema::kManifestFile;
  S.manifest_fd = ::open(manifest.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (S.manifest_fd < 0) {
    warn_once(S, "dump-dir", "cannot open '" + manifest + "': " + errno_text(errno));
    return;
  }
  S.usable = true;
  S.owns_info = true;  // the directory is this runtime's alone
  write_info(S);
}

// "graph<N>" for this .so (N in order of first use in the run), "/<subgraph>" appended.

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_RUN_DIR_H
