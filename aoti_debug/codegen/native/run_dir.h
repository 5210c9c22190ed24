// The run directory: <AOTI_DEBUG_DIR>/<run-id>/[rank<N>/], created new by this runtime
// and claimed with an O_EXCL .owner file (format.writer.claim_run_directory), and the
// manifest it appends to. Below the dump root no link is followed: the run directory and
// its tensors/ are opened with O_DIRECTORY|O_NOFOLLOW, checked (fstat against lstat, our
// uid) and kept open (Shared::dir_fd, tensor_fd); every file is created relative to them.
// A new run starts in a new process (fork) or when AOTI_DEBUG_DIR or AOTI_DEBUG_RUN_ID
// changed since the last record.
#ifndef AOTI_DEBUG_PART_RUN_DIR_H
#define AOTI_DEBUG_PART_RUN_DIR_H

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "constants.h"
#include "env.h"
#include "flight.h"
#include "interface.h"
#include "json.h"
#include "own_dir.h"
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


// The dump root and the directories above it: the user's, made where missing, links followed.
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
  int fd = ::open(owner.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  FILE* f = fd >= 0 ? ::fdopen(fd, "rb") : nullptr;
  if (!f) {
    if (fd >= 0) ::close(fd);
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

// Device and inode of a descriptor's file, appended to `out`.
bool add_identity(int fd, std::vector<uint64_t>& out) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return false;
  out.push_back(static_cast<uint64_t>(st.st_dev));
  out.push_back(static_cast<uint64_t>(st.st_ino));
  return true;
}

// The run's directory descriptors (closed when a run ends or a new one starts).
void set_run_fds(Shared& S, int dir_fd, int tensor_fd) {
  if (S.dir_fd >= 0) ::close(S.dir_fd);
  if (S.tensor_fd >= 0) ::close(S.tensor_fd);
  S.dir_fd = dir_fd;
  S.tensor_fd = tensor_fd;
}

// format.writer._claim_at: create the run directory `rid` (`rid`/rank<N>) below
// `root_fd`, new, and claim it. 1: claimed (`dir_fd`, `tensor_fd` open); 0: held or
// refused, `why` says by whom or what; -1: it cannot be created (`err`).
int claim_at(int root_fd, const std::string& path, const std::string& rid, int rank, int world_size, int& dir_fd,
             int& tensor_fd, std::string& why, std::string& err) {
  int parent = root_fd;
  std::string leaf = rid;
  if (world_size > 1) {
    // <rid>/ is shared by the ranks of one job: it may exist, as a directory of ours.
    std::string shared_dir = path.substr(0, path.rfind('/'));
    if (::mkdirat(root_fd, rid.c_str(), 0755) != 0 && errno != EEXIST) {
      err = "cannot create " + shared_dir + ": " + errno_text(errno);
      return -1;
    }
    parent = open_own_dir(root_fd, rid.c_str(), why);
    if (parent < 0) {
      if (!why.empty()) return 0;
      err = "cannot open " + shared_dir + ": " + errno_text(errno);
      return -1;
    }
    leaf = "rank" + std::to_string(rank);
  }
  int fd = -1;
  int e = 0;
  if (::mkdirat(parent, leaf.c_str(), 0755) != 0) {  // new, made here: nobody else's files are in it
    e = errno;
    if (e == EEXIST) {
      why = refusal_at(parent, leaf.c_str());
      if (why.empty()) why = describe_owner(path);
    }
  } else {
    fd = open_own_dir(parent, leaf.c_str(), why);
    e = errno;
    if (fd < 0 && why.empty() && e == ENOENT) why = "a directory that was removed while it was opened";
  }
  if (parent != root_fd) ::close(parent);
  if (fd < 0) {
    if (!why.empty()) return 0;
    err = "cannot create " + path + ": " + errno_text(e);
    return -1;
  }
  int owner = ::openat(fd, schema::kOwnerFile, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (owner < 0) {
    e = errno;
    ::close(fd);
    if (e == EEXIST) {
      why = describe_owner(path);
      return 0;
    }
    err = "cannot create " + path + "/" + schema::kOwnerFile + ": " + errno_text(e);
    return -1;
  }
  std::string text = owner_text();
  write_fd(owner, text.data(), text.size());
  ::close(owner);
  if (::mkdirat(fd, schema::kTensorDir, 0755) != 0 && errno != EEXIST) {
    err = "cannot create " + path + "/" + schema::kTensorDir + ": " + errno_text(errno);
    ::close(fd);
    return -1;
  }
  int tensors = open_own_dir(fd, schema::kTensorDir, why);
  if (tensors < 0) {
    e = errno;
    ::close(fd);
    if (!why.empty()) {
      why = std::string("a directory whose ") + schema::kTensorDir + "/ is " + why;
      return 0;
    }
    err = "cannot open " + path + "/" + schema::kTensorDir + ": " + errno_text(e);
    return -1;
  }
  dir_fd = fd;
  tensor_fd = tensors;
  return 1;
}

// format.writer.claim_run_directory: create <root>/<id>[/rank<N>] (new: mkdir) and claim
// it with an O_EXCL .owner file (pid, runtime, host). When it exists already (another
// process, this process's Python runtime, an older aoti_debug, a link or another user's
// directory), <id>-2, -3, ... are tried: two claimants never share a directory and no
// run is written through a link. Sets S.path, S.run_id and the run's directory
// descriptors; `holder` says who or what held the first one tried ("" if free).
bool claim_run(Shared& S, const std::string& root, const std::string& id, std::string& holder,
               std::string& err) {
  if (!mkdirs(root, err)) return false;
  int root_fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) {
    err = "cannot open " + root + ": " + errno_text(errno);
    return false;
  }
  for (int n = 1; n <= schema::kMaxClaims; ++n) {
    std::string rid = n == 1 ? id : id + "-" + std::to_string(n);
    std::string path = run_directory(root, rid, S.rank, S.world_size);
    int fd = -1, tensors = -1;
    std::string why;
    int got = claim_at(root_fd, path, rid, S.rank, S.world_size, fd, tensors, why, err);
    if (got < 0) {
      ::close(root_fd);
      return false;
    }
    if (got == 0) {
      if (holder.empty()) holder = why;
      continue;
    }
    ::close(root_fd);
    std::vector<uint64_t> ids;
    add_identity(fd, ids);
    add_identity(tensors, ids);
    claims().dir_ids[path] = ids;
    set_run_fds(S, fd, tensors);
    S.path = path;
    S.run_id = rid;
    return true;
  }
  ::close(root_fd);
  err = run_directory(root, id, S.rank, S.world_size) + " and " + std::to_string(schema::kMaxClaims - 1) +
      " numbered siblings are all held by other runs";
  return false;
}

// format.writer._reopen_claimed: the run directory S.path (run id S.run_id below `root`)
// that this runtime claimed before, opened again without following a link; it must be
// the very directory it made (device and inode, and those of its tensors/).
bool reopen_claimed(Shared& S, const std::string& root, std::string& err) {
  int root_fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) {
    err = "cannot open " + root + ": " + errno_text(errno);
    return false;
  }
  std::string why;
  int dir = open_own_dir(root_fd, S.run_id.c_str(), why);
  int e = errno;
  ::close(root_fd);
  if (dir >= 0 && S.world_size > 1) {
    int rank_dir = open_own_dir(dir, ("rank" + std::to_string(S.rank)).c_str(), why);
    e = errno;
    ::close(dir);
    dir = rank_dir;
  }
  int tensors = dir >= 0 ? open_own_dir(dir, schema::kTensorDir, why) : -1;
  if (dir >= 0 && tensors < 0) e = errno;
  std::vector<uint64_t> ids;
  if (tensors >= 0) {
    add_identity(dir, ids);
    add_identity(tensors, ids);
  }
  if (tensors < 0 || ids != claims().dir_ids[S.path]) {
    err = tensors < 0 ? S.path + ": " + (why.empty() ? errno_text(e) : why)
                      : S.path + " is no longer the directory this process claimed";
    if (dir >= 0) ::close(dir);
    if (tensors >= 0) ::close(tensors);
    return false;
  }
  set_run_fds(S, dir, tensors);
  return true;
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
    C.dir_ids.clear();
    C.pid = pid;
  }
  if (S.manifest_fd >= 0) ::close(S.manifest_fd);
  S.manifest_fd = -1;
  set_run_fds(S, -1, -1);
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
    std::string err;
    if (!reopen_claimed(S, dir, err)) {
      warn_once(S, "dump-dir", "cannot open dump directory '" + S.path + "': " + err);
      return;
    }
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
  S.manifest_fd = ::openat(S.dir_fd, schema::kManifestFile, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC,
                           0644);
  if (S.manifest_fd < 0) {
    warn_once(S, "dump-dir", "cannot open '" + S.path + "/" + schema::kManifestFile + "': " + errno_text(errno));
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
