// aoti_debug C++ runtime: what instrumented C++ wrappers (cpp_wrapper=True and
// AOTInductor .so files) call around every kernel launch. Dump format version 1,
// the same layout the Python runtime writes (aoti_debug/format/schema.py):
//
//   <AOTI_DEBUG_DIR>/<run-id>/[rank<N>/]run.json
//                                       manifest.jsonl
//                                       tensors/c<seq>-<phase>-<kernel>-<arg>.pt
//
// Inlined once into each generated wrapper by aoti_debug/codegen/cpp_emitter.py.
// It relies only on the AOTI C shim (aoti_torch_*), the C++ standard library and
// POSIX, never on the libtorch C++ API, so that it also builds into shim-only AOTI
// models (aot_inductor.link_libtorch=False). Rules it keeps:
//  * Nothing here throws into the model or aborts it: a failure warns once on
//    stderr, goes into the record's "error" field and the model runs on. The one
//    exception is AOTI_DEBUG_SYNC: a device error found by the sync is reported
//    against the kernel that just ran and then thrown, as the model would have.
//  * Process-wide state (counters, the run directory) is shared by every wrapper
//    .so of a process through one STB_GNU_UNIQUE object (an inline function's
//    static, default visibility): .so files are loaded RTLD_LOCAL, so a plain
//    global would give each graph its own counters and colliding file names.
//    Bump the namespace number whenever struct Shared changes layout.
//  * Tensor files are written by this file itself in the torch zip format
//    (archive/data.pkl, archive/byteorder, archive/version, archive/data/0),
//    loadable with torch.load(weights_only=True); file names start with "c" (the
//    C++ writer; a run directory is claimed by one runtime, see claim_run).
//  * Stats and checksum follow aoti_debug/runtime/stats.py: min/max/mean/std/absmax
//    over finite values, nan and inf counts, checksum = sum_i bits_i*(2i+1) mod 2^64.
//    min/max/absmax/nan/inf and the checksum are exact and equal to the Python
//    runtime's; mean/std are computed in double with compensated sums, so they may
//    differ from torch's reduction order in the last bits.
#ifndef AOTI_DEBUG_RUNTIME_V1
#define AOTI_DEBUG_RUNTIME_V1 1

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#ifdef AOTI_DEBUG_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#include <immintrin.h>  // the CRC's carry-less multiply (target attribute, checked at run time)
#endif
#ifndef _WIN32  // POSIX only; on Windows the entry points below do nothing (one warning)
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>
#endif

#ifndef AOTI_DEBUG_PKG_VERSION
#define AOTI_DEBUG_PKG_VERSION ""
#endif
#ifndef AOTI_DEBUG_TORCH_VERSION
#define AOTI_DEBUG_TORCH_VERSION ""
#endif

#if defined(__GNUC__) && !defined(__clang__)
// AOTI compiles wrappers at -O1 with -fno-tree-loop-vectorize; the stats loops
// below run over every recorded byte and want the full optimiser.
#pragma GCC push_options
#pragma GCC optimize("O3")
#endif

namespace aoti_debug_rt_1 {

// ------------------------------------------------------------------------------
// What the emitted code passes in
// ------------------------------------------------------------------------------
struct Arg {
  const char* name;  // record name (buf3, arg0_1, ks0)
  const char* role;  // input | output | inout
  const char* kind;  // tensor | symint | scalar | unknown (a hint; the C++ type decides)
  const char* expr;  // the wrapper expression, for the record's "expr"
  int index;         // position among this phase's values as the Python runtime counts them
  int uninitialised;         // before a launch: no earlier launch wrote its storage (metadata only)
  const char* volatile_why;  // nondeterministic by contract (an RNG seed): why, or "" if not
};

struct Site {
  const char* graph;   // subgraph name, "" for the top-level graph
  const char* kernel;  // raw kernel name
  const char* op;      // canonical op name (format.schema.canonical_op)
  int level;           // 1 save, 2 print, 3 names, 4 stats
  int sync;            // AOTI_DEBUG_SYNC at compile time
  int index_base;      // number of "before" values of this launch (record "index")
  int n;               // number of args passed at this phase
  const Arg* args;
  const char* kernels;  // the compile-time kernel filter, for run.json
  const char* phases;   // the compile-time phases, for run.json
  const char* file;     // __FILE__ of the wrapper source
  int line;             // __LINE__ of this call in it
  const char* source;   // what Inductor says the kernel was made from ("" if unknown)
  const char* graph_kind;  // forward | backward | inference ("" if unknown), for run.json
  const char* compile_id;  // Dynamo's compile id of the graph ("" under AOTInductor export)
};

// c10::ScalarType values (stable ABI: the same numbers aoti_torch_dtype_*() return).
// Hard-coded so that shim-only hosts need not implement every dtype getter.
enum DType : int32_t {
  kU8 = 0, kI8 = 1, kI16 = 2, kI32 = 3, kI64 = 4, kF16 = 5, kF32 = 6, kF64 = 7,
  kC32 = 8, kC64 = 9, kC128 = 10, kBool = 11, kBF16 = 15, kF8E5M2 = 23,
  kF8E4M3FN = 24, kF8E5M2FNUZ = 25, kF8E4M3FNUZ = 26, kU16 = 27, kU32 = 28, kU64 = 29,
};
constexpr int32_t kDeviceCpu = 0;
constexpr int32_t kDeviceCuda = 1;

// One value handed to launch()/done(): a tensor handle, an ArrayRefTensor
// (borrowed as a handle), or a scalar with its C++ type.
class Value {
 public:
  enum Kind { kNone, kTensor, kInt, kDouble, kBool, kOther };

  Value(AtenTensorHandle h) : kind_(h ? kTensor : kNone), handle_(h) {}
  Value(std::nullptr_t) {}

  template <class T>
  Value(const T& x) {
    using U = std::decay_t<T>;
    if constexpr (std::is_same_v<U, bool>) {
      kind_ = kBool;
      i_ = x ? 1 : 0;
    } else if constexpr (std::is_integral_v<U> || std::is_enum_v<U>) {
      kind_ = kInt;
      i_ = static_cast<int64_t>(x);
    } else if constexpr (std::is_floating_point_v<U>) {
      kind_ = kDouble;
      d_ = static_cast<double>(x);
    } else if constexpr (std::is_convertible_v<const U&, AtenTensorHandle>) {
      handle_ = static_cast<AtenTensorHandle>(x);
      kind_ = handle_ ? kTensor : kNone;
    } else if constexpr (HasBorrow<U>::value) {
      // ArrayRefTensor (stack-allocation mode): a non-owning tensor over its memory.
      handle_ = x.borrowAsTensor();
      owned_ = handle_ != nullptr;
      kind_ = handle_ ? kTensor : kNone;
    } else {
      kind_ = kOther;
    }
  }

  Value(Value&& o) noexcept
      : kind_(o.kind_), handle_(o.handle_), owned_(o.owned_), i_(o.i_), d_(o.d_) {
    o.owned_ = false;
  }
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;
  ~Value() {
    if (owned_ && handle_) {
      aoti_torch_delete_tensor_object(handle_);
    }
  }

  Kind kind() const { return kind_; }
  AtenTensorHandle handle() const { return handle_; }
  int64_t as_int() const { return i_; }
  double as_double() const { return d_; }

 private:
  template <class U, class = void>
  struct HasBorrow : std::false_type {};
  template <class U>
  struct HasBorrow<U, std::void_t<decltype(std::declval<const U&>().borrowAsTensor())>>
      : std::true_type {};

  Kind kind_ = kNone;
  AtenTensorHandle handle_ = nullptr;
  bool owned_ = false;
  int64_t i_ = 0;
  double d_ = 0.0;
};

// ------------------------------------------------------------------------------
// Process-wide state, shared by every instrumented .so of the process
// ------------------------------------------------------------------------------
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
  int64_t seq = 0, launch = 0, graphs = 0;
  int64_t bytes_written = 0, max_bytes = -1;
  bool force_zip64 = false;
  std::vector<std::pair<std::string, std::string>> graph_info;  // label -> JSON object
  std::map<std::string, std::string> content_files;  // values identity -> tensor file
  std::map<std::string, int64_t> last_seq;           // run directory -> its last seq
  std::set<std::string> warned;
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
inline Shared& shared() {
  static Shared s;  // STB_GNU_UNIQUE with g++: one object per process
  return s;
}

// Which run directories this runtime claimed, and every warning it gave. An object of
// its own so that Shared keeps its layout (the same rule holds: bump the namespace
// number whenever this struct changes layout). Guarded by shared().mu.
struct Claims {
  long pid = 0;  // the process the claims belong to (a forked child has none)
  std::map<std::string, std::pair<std::string, std::string>> dirs;  // requested -> (claimed dir, run id)
  std::string failures;       // every warning, one JSON [key, message] per line (capped)
  int64_t failure_count = 0;
  std::vector<std::string> run_warnings;  // the current run's, one per key: run.json "warnings"
  std::set<std::string> run_keys;
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
inline Claims& claims() {
  static Claims c;  // STB_GNU_UNIQUE, as shared()
  return c;
}

#if !defined(_WIN32) && defined(__GNUC__)
// aoti_debug.runtime.failures() reads the C++ runtime's warnings through this (ctypes,
// dlopen(RTLD_NOLOAD) on the loaded libraries): a first line naming the process-wide
// state, then one JSON [key, message] line per warning. Returns the text's length and
// copies at most `cap` bytes of it into `buf`. A C signature that stays put when the
// namespace number changes. `used`: emitted although nothing here calls it.
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
#ifdef _WIN32
void warn_unsupported() {
  static const bool once = (std::fprintf(stderr, "[aoti_debug] warning: the C++ runtime needs POSIX; this model "
                                                 "runs uninstrumented\n"), true);
  (void)once;
}
[[maybe_unused]] void launch(const Site&, std::initializer_list<Value>) { warn_unsupported(); }
[[maybe_unused]] void done(const Site&, std::initializer_list<Value>) {}
#else

// ------------------------------------------------------------------------------
// Per-.so state: which graph label this wrapper got, per-kernel call counts
// ------------------------------------------------------------------------------
struct Local {
  uint64_t generation = 0;
  int64_t index = -1;
  bool announced = false;  // level names: the graph line is out
  int names_args = -1;     // level names: AOTI_DEBUG_NAMES_ARGS, read at this .so's first launch
  std::map<const Site*, int64_t*> site_calls;  // cache into `calls` (std::map nodes are stable)
  std::map<std::string, int64_t> calls;
  std::set<std::string> registered;
};

Local& local() {
  static Local l;
  return l;
}

thread_local int64_t tl_launch = 0;
thread_local int64_t tl_call = 0;

// ------------------------------------------------------------------------------
// small utilities
// ------------------------------------------------------------------------------
void write_fd(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// One write per line: a line is never interleaved and is out before the next kernel runs.
void emit_line(const std::string& line) {
  std::string s = line;
  s.push_back('\n');
  std::fflush(stderr);
  write_fd(2, s.data(), s.size());
}

void json_str(std::string& out, const std::string& s);
void write_info(Shared& S);

// Warnings kept for aoti_debug.runtime.failures(); later ones are only counted.
constexpr int64_t kMaxFailures = 10000;

// Caller holds S.mu. Prints the first warning of each key; keeps every one for
// aoti_debug.runtime.failures() and, one per key, in the current run's run.json.
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
    if (key != "run-json") write_info(S);  // no-op until the run's directory is usable
  }
  if (!S.warned.insert(key).second) return;
  emit_line("[aoti_debug] warning: " + message +
            " (model continues; further such warnings suppressed)");
}

std::string errno_text(int e) {
  char buf[256];
  buf[0] = 0;
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
  const char* m = strerror_r(e, buf, sizeof(buf));
  return std::string(m ? m : "error") + " (errno " + std::to_string(e) + ")";
#else
  if (strerror_r(e, buf, sizeof(buf)) != 0) std::snprintf(buf, sizeof(buf), "error");
  return std::string(buf) + " (errno " + std::to_string(e) + ")";
#endif
}

std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

void json_str(std::string& out, const char* s) {
  out.push_back('"');
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(s); *p; ++p) {
    unsigned char c = *p;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          out += b;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

void json_str(std::string& out, const std::string& s) { json_str(out, s.c_str()); }

// The shortest text that reads back to the same double (what Python's repr gives).
std::string fmt_double(double v) {
  char buf[40];
#if defined(__cpp_lib_to_chars) && __cpp_lib_to_chars >= 201611L
  auto res = std::to_chars(buf, buf + sizeof(buf) - 1, v);
  *res.ptr = 0;
#else
  std::snprintf(buf, sizeof(buf), "%.17g", v);  // exact, not always the shortest
#endif
  std::string s(buf);
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}

// A JSON number for a stat: null when NaN (Python's summary_to_stats gives None).
void json_stat(std::string& out, double v) {
  if (v != v) {
    out += "null";
  } else if (std::isinf(v)) {
    out += v > 0 ? "Infinity" : "-Infinity";
  } else {
    out += fmt_double(v);
  }
}

// format.schema.sanitize: runs of [^A-Za-z0-9_.] -> "_", strip "._", cut.
std::string sanitize(const char* name, size_t limit) {
  std::string out;
  bool in_bad = false;
  for (const char* p = name; *p; ++p) {
    char c = *p;
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
        c == '_' || c == '.';
    if (ok) {
      out.push_back(c);
      in_bad = false;
    } else if (!in_bad) {
      out.push_back('_');
      in_bad = true;
    }
  }
  size_t b = out.find_first_not_of("._");
  if (b == std::string::npos) return "x";
  size_t e = out.find_last_not_of("._");
  out = out.substr(b, e - b + 1);
  if (out.size() > limit) out.resize(limit);
  return out;
}

// format.writer.clean_run_id: AOTI_DEBUG_RUN_ID as one directory name, "" when nothing is
// left. Runs of bytes other than [A-Za-z0-9_.-] -> "_", "._-" stripped at both ends, cut
// at 100 (format.writer.RUN_ID_LIMIT): no "..", "/" or absolute path survives.
std::string clean_run_id(const std::string& raw) {
  std::string out;
  bool in_bad = false;
  for (char c : raw) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
        c == '.' || c == '-';
    if (ok) {
      out.push_back(c);
      in_bad = false;
    } else if (!in_bad) {
      out.push_back('_');
      in_bad = true;
    }
  }
  size_t b = out.find_first_not_of("._-");
  if (b == std::string::npos) return "";
  size_t e = out.find_last_not_of("._-");
  out = out.substr(b, e - b + 1);
  if (out.size() > 100) out.resize(100);
  return out;
}

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

// How a value from the environment is shown in a warning (Python's repr for plain text).
std::string env_shown(const std::string& v) { return "'" + v + "'"; }

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

std::string so_path() {
  Dl_info info;
  if (::dladdr(reinterpret_cast<void*>(&so_path), &info) && info.dli_fname) return info.dli_fname;
  return "";
}

// Where this graph's code is: the wrapper source if it is still there, else the .so.
std::string graph_file(const char* source_file) {
  if (source_file && *source_file && ::access(source_file, F_OK) == 0) return source_file;
  return so_path();
}

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

std::string device_label() {
#ifdef AOTI_DEBUG_CUDA
  int dev = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
    return prop.name;
  }
#endif
  return "cpu";
}

// ------------------------------------------------------------------------------
// The run directory: run.json + manifest.jsonl
// ------------------------------------------------------------------------------
bool write_file_atomic(const std::string& path, const std::string& text, std::string& err) {
  std::string tmp = path + ".cpp." + std::to_string(static_cast<long>(::getpid())) + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    err = "cannot write " + tmp + ": " + errno_text(errno);
    return false;
  }
  const char* p = text.data();
  size_t n = text.size();
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      err = "cannot write " + tmp + ": " + errno_text(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = "cannot write " + path + ": " + errno_text(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

// format.schema.RunInfo, keys sorted as the Python writer writes them.
std::string run_info_json(Shared& S) {
  std::string o = "{\n";
  auto key = [&](const char* k) {
    o += " ";
    json_str(o, k);
    o += ": ";
  };
  key("aoti_debug_version"); json_str(o, AOTI_DEBUG_PKG_VERSION); o += ",\n";
  key("argv"); o += "[";
  std::vector<std::string> argv = cmdline();
  for (size_t i = 0; i < argv.size(); ++i) {
    if (i) o += ", ";
    json_str(o, argv[i]);
  }
  o += "],\n";
  key("device"); json_str(o, S.device); o += ",\n";
  key("format_version"); o += "1,\n";
  key("graphs"); o += "{";
  for (size_t i = 0; i < S.graph_info.size(); ++i) {
    if (i) o += ", ";
    json_str(o, S.graph_info[i].first);
    o += ": " + S.graph_info[i].second;
  }
  o += "},\n";
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  key("hostname"); json_str(o, host); o += ",\n";
  key("kernels"); json_str(o, S.kernels); o += ",\n";
  key("level"); json_str(o, S.level); o += ",\n";
  key("phases"); o += "[";
  {
    std::string ph = S.phases;
    size_t i = 0;
    bool first = true;
    while (i <= ph.size()) {
      size_t j = ph.find(',', i);
      if (j == std::string::npos) j = ph.size();
      if (j > i) {
        if (!first) o += ", ";
        json_str(o, ph.substr(i, j - i));
        first = false;
      }
      i = j + 1;
    }
  }
  o += "],\n";
  key("pid"); o += std::to_string(static_cast<long>(::getpid())) + ",\n";
  key("rank"); o += std::to_string(S.rank) + ",\n";
  key("run_id"); json_str(o, S.run_id); o += ",\n";
  key("start_time"); json_str(o, S.start_time); o += ",\n";
  key("sync"); o += S.sync ? "true,\n" : "false,\n";
  key("torch_version"); json_str(o, AOTI_DEBUG_TORCH_VERSION); o += ",\n";
  key("warnings"); o += "[";  // this run's warnings, one per kind (not in the Python writer's run.json)
  for (size_t i = 0; i < claims().run_warnings.size(); ++i) {
    if (i) o += ", ";
    json_str(o, claims().run_warnings[i]);
  }
  o += "],\n";
  key("world_size"); o += std::to_string(S.world_size) + ",\n";
  key("writer"); json_str(o, "cpp"); o += "\n}";
  return o;
}

void write_info(Shared& S) {
  if (!S.owns_info || !S.usable) return;
  std::string err;
  if (!write_file_atomic(S.path + "/run.json", run_info_json(S), err)) {
    warn_once(S, "run-json", "cannot update run.json: " + err);
  }
}

const char* level_name(int level) {
  switch (level) {
    case 1: return "save";
    case 2: return "print";
    case 3: return "names";
    case 4: return "stats";
    default: return "off";
  }
}

// What config.py strips around a number (C's isspace).
std::string trim_space(const std::string& v) {
  size_t b = v.find_first_not_of(" \t\n\r\v\f");
  if (b == std::string::npos) return "";
  size_t e = v.find_last_not_of(" \t\n\r\v\f");
  return v.substr(b, e - b + 1);
}

// config.parse_bool: 1/true/yes/on, 0/false/no/off or empty (any case, spaces trimmed);
// anything else is one warning naming the variable, and false. Caller holds S.mu.
int parse_bool_env(Shared& S, const char* name) {
  std::string v = trim_space(env_str(name));
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v.empty() || v == "0" || v == "false" || v == "no" || v == "off") return 0;
  if (v == "1" || v == "true" || v == "yes" || v == "on") return 1;
  warn_once(S, std::string("env-") + name, std::string(name) + "='" + v + "' is not a boolean (use 1 or 0); 0 is used");
  return 0;
}

// config._BYTES_RE: \+?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?
bool plain_number(const std::string& t) {
  size_t i = 0, n = t.size();
  auto digits = [&]() {
    size_t k = i;
    while (i < n && t[i] >= '0' && t[i] <= '9') ++i;
    return i - k;
  };
  if (i < n && t[i] == '+') ++i;
  size_t whole = digits();
  size_t frac = 0;
  if (i < n && t[i] == '.') {
    ++i;
    frac = digits();
  }
  if (whole == 0 && frac == 0) return false;
  if (i < n && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < n && (t[i] == '+' || t[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == n;
}

// config.parse_max_bytes: a plain decimal number >= 0 ("1000000", "1e9", "2.5e8"), cut
// to whole bytes and clamped to int64; -1 (no limit) when unset. Anything else (-5, abc,
// inf, nan, 0x10, 1_000) warns once, naming the variable, and means no limit.
int64_t parse_max_bytes(Shared& S) {
  std::string raw = env_str("AOTI_DEBUG_MAX_BYTES");
  std::string v = trim_space(raw);
  if (v.empty()) return -1;
  if (!plain_number(v)) {
    warn_once(S, "env-AOTI_DEBUG_MAX_BYTES", "AOTI_DEBUG_MAX_BYTES=" + env_shown(raw) +
              " is not a number of bytes (a number >= 0 such as 1e9); no limit is used");
    return -1;
  }
  const int64_t kMax = INT64_MAX;
  if (v.find_first_of(".eE") == std::string::npos) {  // digits: exact, as Python's int()
    int64_t x = 0;
    for (char c : v) {
      if (c == '+') continue;
      int d = c - '0';
      if (x > (kMax - d) / 10) return kMax;
      x = x * 10 + d;
    }
    return x;
  }
  const char* b = v.c_str() + (v[0] == '+' ? 1 : 0);
  double d = 0.0;
#if defined(__cpp_lib_to_chars) && __cpp_lib_to_chars >= 201611L
  auto res = std::from_chars(b, v.c_str() + v.size(), d);  // never the locale's decimal comma
  if (res.ec == std::errc::result_out_of_range) {  // 1e400 -> clamped, 1e-400 -> 0, as in Python
    size_t e = v.find_first_of("eE");
    return e != std::string::npos && v[e + 1] == '-' ? 0 : kMax;
  }
#else
  d = std::strtod(b, nullptr);
#endif
  if (!(d < 9223372036854775807.0)) return kMax;
  return static_cast<int64_t>(d);
}

// config.parse_count: RANK / WORLD_SIZE, up to 9 digits ("+" allowed) and >= minimum;
// `dflt` when unset. Anything else warns once, naming the variable, and gives `dflt`.
int env_int(Shared& S, const char* name, int dflt, int minimum, const char* instead) {
  std::string raw = env_str(name);
  std::string v = trim_space(raw);
  if (v.empty()) return dflt;
  size_t i = v[0] == '+' ? 1 : 0;
  bool ok = v.size() > i && v.size() - i <= 9 && v.find_first_not_of("0123456789", i) == std::string::npos;
  long x = ok ? std::strtol(v.c_str() + i, nullptr, 10) : 0;
  if (!ok || x < minimum) {
    warn_once(S, std::string("env-") + name, std::string(name) + "=" + env_shown(raw) +
              " is not a whole number >= " + std::to_string(minimum) + "; " + instead + " is used");
    return dflt;
  }
  return static_cast<int>(x);
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
  std::string owner = path + "/.owner";
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
  const int kMaxClaims = 1000;  // format.writer.MAX_CLAIMS
  for (int n = 1; n <= kMaxClaims; ++n) {
    std::string rid = n == 1 ? id : id + "-" + std::to_string(n);
    std::string path = run_directory(root, rid, S.rank, S.world_size);
    if (!mkdirs(path, err)) return false;
    std::string owner = path + "/.owner";
    struct stat st;
    bool legacy = ::lstat(owner.c_str(), &st) != 0 &&
        (::stat((path + "/run.json").c_str(), &st) == 0 || ::stat((path + "/manifest.jsonl").c_str(), &st) == 0);
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
  err = run_directory(root, id, S.rank, S.world_size) + " and " + std::to_string(kMaxClaims - 1) +
      " numbered siblings are all held by other runs";
  return false;
}

// Caller holds S.mu. Starts a new run when this is a new process (fork) or the
// dump directory / run id in the environment changed since the last record.
void ensure_run(Shared& S, const Site& site) {
  long pid = static_cast<long>(::getpid());
  std::string dir = env_str("AOTI_DEBUG_DIR");
  if (dir.empty()) dir = "aoti_debug_dump";
  std::string rid = env_str("AOTI_DEBUG_RUN_ID");
  if (S.pid == pid && S.opened && dir == S.env_dir && rid == S.env_run_id) return;
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
  C.run_warnings.clear();
  C.run_keys.clear();
  S.env_dir = dir;
  S.env_run_id = rid;
  S.level = level_name(site.level);
  S.sync = site.sync;
  S.kernels = site.kernels ? site.kernels : "";
  S.phases = site.phases ? site.phases : "before,after";
  S.rank = env_int(S, "RANK", 0, 0, "rank 0");
  S.world_size = env_int(S, "WORLD_SIZE", 1, 1, "world size 1");
  S.max_bytes = parse_max_bytes(S);
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
  S.device = device_label();
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
  if (!mkdirs(S.path + "/tensors", err)) {
    warn_once(S, "dump-dir", "cannot create dump directory '" + S.path + "': " + err);
    return;
  }
  std::string manifest = S.path + "/manifest.jsonl";
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
std::string graph_label(Shared& S, const Site& site) {
  const char* subgraph = site.graph;
  Local& L = local();
  if (L.generation != S.generation) {
    L.generation = S.generation;
    L.index = -1;
    L.announced = false;
    L.calls.clear();
    L.site_calls.clear();
    L.registered.clear();
  }
  if (L.index < 0) L.index = S.graphs++;
  std::string label = "graph" + std::to_string(L.index);
  if (subgraph && *subgraph) {
    label += "/";
    label += subgraph;
  }
  if (S.usable && L.registered.insert(label).second) {
    std::string o = "{\"file\": ";
    json_str(o, graph_file(site.file));
    if (subgraph && *subgraph) {
      o += ", \"subgraph\": ";
      json_str(o, subgraph);
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
  return label;
}

// ------------------------------------------------------------------------------
// Element types
// ------------------------------------------------------------------------------
struct TypeInfo {
  const char* name;     // torch dtype name without "torch."
  const char* storage;  // the pickled storage class (torch.FloatStorage or a dtype)
  int unit;             // bytes per checksum unit (complex: one part)
  int units;            // units per element (2 for complex)
  bool floating;
};

const TypeInfo* type_info(int32_t dt) {
  static const TypeInfo kF32i{"float32", "FloatStorage", 4, 1, true};
  static const TypeInfo kF64i{"float64", "DoubleStorage", 8, 1, true};
  static const TypeInfo kF16i{"float16", "HalfStorage", 2, 1, true};
  static const TypeInfo kBF16i{"bfloat16", "BFloat16Storage", 2, 1, true};
  static const TypeInfo kI64i{"int64", "LongStorage", 8, 1, false};
  static const TypeInfo kI32i{"int32", "IntStorage", 4, 1, false};
  static const TypeInfo kI16i{"int16", "ShortStorage", 2, 1, false};
  static const TypeInfo kI8i{"int8", "CharStorage", 1, 1, false};
  static const TypeInfo kU8i{"uint8", "ByteStorage", 1, 1, false};
  static const TypeInfo kBooli{"bool", "BoolStorage", 1, 1, false};
  static const TypeInfo kC64i{"complex64", "ComplexFloatStorage", 4, 2, true};
  static const TypeInfo kC128i{"complex128", "ComplexDoubleStorage", 8, 2, true};
  static const TypeInfo kC32i{"complex32", "complex32", 2, 2, true};
  static const TypeInfo kU16i{"uint16", "uint16", 2, 1, false};
  static const TypeInfo kU32i{"uint32", "uint32", 4, 1, false};
  static const TypeInfo kU64i{"uint64", "uint64", 8, 1, false};
  static const TypeInfo kE4M3{"float8_e4m3fn", "float8_e4m3fn", 1, 1, true};
  static const TypeInfo kE5M2{"float8_e5m2", "float8_e5m2", 1, 1, true};
  static const TypeInfo kE4M3Z{"float8_e4m3fnuz", "float8_e4m3fnuz", 1, 1, true};
  static const TypeInfo kE5M2Z{"float8_e5m2fnuz", "float8_e5m2fnuz", 1, 1, true};
  switch (dt) {
    case kF32: return &kF32i;
    case kF64: return &kF64i;
    case kF16: return &kF16i;
    case kBF16: return &kBF16i;
    case kI64: return &kI64i;
    case kI32: return &kI32i;
    case kI16: return &kI16i;
    case kI8: return &kI8i;
    case kU8: return &kU8i;
    case kBool: return &kBooli;
    case kC64: return &kC64i;
    case kC128: return &kC128i;
    case kC32: return &kC32i;
    case kU16: return &kU16i;
    case kU32: return &kU32i;
    case kU64: return &kU64i;
    case kF8E4M3FN: return &kE4M3;
    case kF8E5M2: return &kE5M2;
    case kF8E4M3FNUZ: return &kE4M3Z;
    case kF8E5M2FNUZ: return &kE5M2Z;
    default: return nullptr;
  }
}

// ------------------------------------------------------------------------------
// Stats + checksum (runtime/stats.py). Floating types go through one float32 (or
// float64) kernel written with GCC/Clang vector extensions: per 8 lanes it masks
// out NaN/Inf by their bits (immune to -ffast-math), keeps min/max, counts, and sums
// in double; a second pass sums squared deviations. The checksum is its own integer
// pass over the raw bits. Every value is read as the Python runtime reads it: half,
// bfloat16 and float8 widened to float32 exactly, complex as pairs of reals.
// ------------------------------------------------------------------------------
struct Summary {
  double mn = NAN, mx = NAN, mean = NAN, sd = NAN, absmax = NAN;
  int64_t nan = 0, inf = 0;
  uint64_t checksum = 0;
};

// Neumaier-compensated sum of block partials.
struct Sum {
  double s = 0.0, c = 0.0;
  void add(double x) {
    double t = s + x;
    if (std::fabs(s) >= std::fabs(x)) c += (s - t) + x; else c += (x - t) + s;
    s = t;
  }
  double value() const { return s + c; }
};

constexpr int64_t kBlock = 2048;  // multiple of 8; 2k+1 < 2^12 keeps block weights small

// sum_i bits_i * (2i+1) mod 2^64, by blocks: (2(b+k)+1) = (2k+1) + 2b, so a block adds
// sum_k bits*(2k+1) + 2b * sum_k bits; both block sums fit in 64 bits for bits < 2^32.
// One block's share of the checksum: elements q[0..m) sit at absolute index b0 + k.
template <class U>
uint64_t checksum_block(const U* q, int64_t m, int64_t b0) {
  if (sizeof(U) <= 4) {
    uint64_t weighted = 0, plain = 0;
    for (int64_t k = 0; k < m; ++k) {
      uint64_t bits = static_cast<uint64_t>(static_cast<uint32_t>(q[k]));
      weighted += bits * static_cast<uint32_t>(2 * k + 1);
      plain += bits;
    }
    return weighted + 2 * static_cast<uint64_t>(b0) * plain;
  }
  uint64_t total = 0;
  for (int64_t k = 0; k < m; ++k) total += static_cast<uint64_t>(q[k]) * (2 * static_cast<uint64_t>(b0 + k) + 1);
  return total;
}

template <class U>
uint64_t checksum(const U* p, int64_t n) {
  uint64_t total = 0;
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) total += checksum_block(p + b0, std::min(n - b0, kBlock), b0);
  return total;
}

struct FloatAcc {
  int64_t count = 0, nan = 0;
  double mn = INFINITY, mx = -INFINITY;
  Sum total, sq;
};

#if defined(__GNUC__) && !defined(__clang__)
// GCC vector extensions, as wide as the wrapper's -march allows: 32 bytes with AVX (CPU
// wrappers get -march=native), else 16 (SSE2 on any x86-64, NEON on arm64: GPU wrappers
// are compiled for the baseline ISA). Written for any width; no intrinsics.
#if defined(__AVX__)
#define AOTI_DEBUG_VB 32
#else
#define AOTI_DEBUG_VB 16
#endif
constexpr int kLanes = AOTI_DEBUG_VB / 4;  // float32 lanes per vector
typedef float aoti_vf __attribute__((vector_size(AOTI_DEBUG_VB)));
typedef float aoti_vfh __attribute__((vector_size(AOTI_DEBUG_VB / 2)));
typedef int32_t aoti_vi __attribute__((vector_size(AOTI_DEBUG_VB)));
typedef uint32_t aoti_vu __attribute__((vector_size(AOTI_DEBUG_VB)));
typedef double aoti_vd __attribute__((vector_size(AOTI_DEBUG_VB)));

// float32 lanes -> two vectors of doubles
inline void widen(const aoti_vf& v, aoti_vd& lo, aoti_vd& hi) {
  aoti_vfh a, b;
  std::memcpy(&a, &v, AOTI_DEBUG_VB / 2);
  std::memcpy(&b, reinterpret_cast<const char*>(&v) + AOTI_DEBUG_VB / 2, AOTI_DEBUG_VB / 2);
  lo = __builtin_convertvector(a, aoti_vd);
  hi = __builtin_convertvector(b, aoti_vd);
}

inline double lanes_sum(const aoti_vd& v) {
  double t = 0;
  for (int k = 0; k < kLanes / 2; ++k) t += v[k];
  return t;
}

struct F32Lanes {  // one vector of float32 values: bits, values, finite mask
  aoti_vu u;
  aoti_vf f;
  aoti_vi fin;
  explicit F32Lanes(const float* p) {
    std::memcpy(&u, p, AOTI_DEBUG_VB);
    std::memcpy(&f, p, AOTI_DEBUG_VB);
    fin = (u & 0x7f800000u) != 0x7f800000u;
  }
  aoti_vi nan() const { return (u & 0x7fffffffu) > 0x7f800000u; }
  aoti_vf finite_or_zero() const {
    aoti_vf zero = {};
    return fin ? f : zero;
  }
};
#endif

#if defined(__GNUC__) && !defined(__clang__)
typedef uint64_t aoti_vq __attribute__((vector_size(AOTI_DEBUG_VB)));
typedef uint32_t aoti_vuh __attribute__((vector_size(AOTI_DEBUG_VB / 2)));

// checksum_block for 32-bit elements in vector lanes (the float32 hot path).
inline uint64_t checksum_block32(const uint32_t* q, int64_t m, int64_t b0) {
  constexpr int H = kLanes / 2;  // uint64 lanes per vector
  aoti_vq w0, w1, acc0 = {}, acc1 = {}, plain0 = {}, plain1 = {};
  for (int j = 0; j < H; ++j) {
    w0[j] = 2 * j + 1;
    w1[j] = 2 * (j + H) + 1;
  }
  int64_t k = 0;
  for (; k + kLanes <= m; k += kLanes) {
    aoti_vuh lo, hi;
    std::memcpy(&lo, q + k, AOTI_DEBUG_VB / 2);
    std::memcpy(&hi, q + k + H, AOTI_DEBUG_VB / 2);
    aoti_vq a = __builtin_convertvector(lo, aoti_vq), b = __builtin_convertvector(hi, aoti_vq);
    acc0 += a * w0;
    acc1 += b * w1;
    plain0 += a;
    plain1 += b;
    w0 += 2 * kLanes;
    w1 += 2 * kLanes;
  }
  uint64_t weighted = 0, plain = 0;
  for (int j = 0; j < H; ++j) {
    weighted += acc0[j] + acc1[j];
    plain += plain0[j] + plain1[j];
  }
  for (; k < m; ++k) {
    weighted += static_cast<uint64_t>(q[k]) * static_cast<uint64_t>(2 * k + 1);
    plain += q[k];
  }
  return weighted + 2 * static_cast<uint64_t>(b0) * plain;
}
#endif

// One block of float32 values in one pass: counts, min/max, the sum, and the first two
// moments about a shift c (the block's first finite value), from which the block's sum
// of squared deviations is S2 - S1^2/n (the shifted-data algorithm: with c a sample of
// the data, as accurate as two passes for anything but pathological blocks).
struct BlockStats {
  int64_t count = 0, nan = 0;
  double mn = INFINITY, mx = -INFINITY, sum = 0, d1 = 0, d2 = 0;
};

inline void f32_block(const float* p, int64_t n, BlockStats& a) {
  int64_t i = 0;
  double c = 0;
  for (int64_t k = 0; k < n; ++k) {
    uint32_t b;
    std::memcpy(&b, p + k, 4);
    if ((b & 0x7f800000u) != 0x7f800000u) {
      c = p[k];
      break;
    }
  }
#if defined(__GNUC__) && !defined(__clang__)
  constexpr int64_t kStep = 2 * kLanes;
  if (n >= kStep) {
    aoti_vf vmin = aoti_vf{} + INFINITY;
    aoti_vf vmax = aoti_vf{} - INFINITY;
    aoti_vi vcount = {}, vnan = {};
    aoti_vd s0 = {}, s1 = {}, t0 = {}, t1 = {}, q0 = {}, q1 = {};
    const aoti_vd vc = aoti_vd{} + c;
    int64_t end = n / kStep * kStep;
    // Two vectors per step, written out by hand: the same body as a lambda called twice
    // measured 1.9x slower with AVX (GCC 12, 16 MiB of float32, one core).
    for (; i < end; i += kStep) {
      F32Lanes a0(p + i), a1(p + i + kLanes);
      vcount -= a0.fin;
      vcount -= a1.fin;
      vnan -= a0.nan();
      vnan -= a1.nan();
      vmin = (a0.fin & (a0.f < vmin)) ? a0.f : vmin;
      vmax = (a0.fin & (a0.f > vmax)) ? a0.f : vmax;
      vmin = (a1.fin & (a1.f < vmin)) ? a1.f : vmin;
      vmax = (a1.fin & (a1.f > vmax)) ? a1.f : vmax;
      aoti_vf m0 = __builtin_convertvector(-a0.fin, aoti_vf), m1 = __builtin_convertvector(-a1.fin, aoti_vf);
      aoti_vd x, y, w, z;
      // lanes that are not finite hold 0 and weigh 0: they add nothing below
      widen(a0.finite_or_zero(), x, y);
      widen(m0, w, z);
      s0 += x;
      s1 += y;
      x = (x - vc) * w;
      y = (y - vc) * z;
      t0 += x;
      t1 += y;
      q0 += x * x;
      q1 += y * y;
      widen(a1.finite_or_zero(), x, y);
      widen(m1, w, z);
      s0 += x;
      s1 += y;
      x = (x - vc) * w;
      y = (y - vc) * z;
      t0 += x;
      t1 += y;
      q0 += x * x;
      q1 += y * y;
    }
    for (int k = 0; k < kLanes; ++k) {
      a.count += vcount[k];
      a.nan += vnan[k];
      if (vmin[k] < a.mn) a.mn = vmin[k];
      if (vmax[k] > a.mx) a.mx = vmax[k];
    }
    a.sum += lanes_sum(s0 + s1);
    a.d1 += lanes_sum(t0 + t1);
    a.d2 += lanes_sum(q0 + q1);
  }
#endif
  for (; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, p + i, 4);
    if ((b & 0x7f800000u) != 0x7f800000u) {
      double v = p[i];
      ++a.count;
      a.mn = v < a.mn ? v : a.mn;
      a.mx = v > a.mx ? v : a.mx;
      a.sum += v;
      a.d1 += v - c;
      a.d2 += (v - c) * (v - c);
    } else if ((b & 0x7fffffffu) > 0x7f800000u) {
      ++a.nan;
    }
  }
}

inline bool f64_finite(uint64_t b) { return (b & 0x7ff0000000000000ull) != 0x7ff0000000000000ull; }
inline bool f64_nan(uint64_t b) { return (b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }

inline void f64_pass1(const double* p, int64_t n, FloatAcc& a) {
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    int64_t end = std::min(n, b0 + kBlock);
    double lane[4] = {0, 0, 0, 0};
    for (int64_t i = b0; i < end; ++i) {
      uint64_t b;
      std::memcpy(&b, p + i, 8);
      if (f64_finite(b)) {
        double v = p[i];
        ++a.count;
        a.mn = v < a.mn ? v : a.mn;
        a.mx = v > a.mx ? v : a.mx;
        lane[i & 3] += v;
      } else if (f64_nan(b)) {
        ++a.nan;
      }
    }
    a.total.add((lane[0] + lane[1]) + (lane[2] + lane[3]));
  }
}

inline void f64_pass2(const double* p, int64_t n, double mean, FloatAcc& a) {
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    int64_t end = std::min(n, b0 + kBlock);
    double lane[4] = {0, 0, 0, 0};
    for (int64_t i = b0; i < end; ++i) {
      uint64_t b;
      std::memcpy(&b, p + i, 8);
      if (f64_finite(b)) {
        double d = p[i] - mean;
        lane[i & 3] += d * d;
      }
    }
    a.sq.add((lane[0] + lane[1]) + (lane[2] + lane[3]));
  }
}

void finish_float(FloatAcc& a, int64_t n, Summary& out) {
  out.nan = a.nan;
  out.inf = n - a.count - a.nan;
  if (a.count == 0) return;  // all stats NaN (None), as in Python
  out.mn = a.mn;
  out.mx = a.mx;
  out.mean = a.total.value() / static_cast<double>(a.count);
  out.absmax = std::max(std::fabs(a.mn), std::fabs(a.mx));
}

void finish_std(FloatAcc& a, Summary& out) {
  if (a.count == 0) return;
  out.sd = a.count > 1 ? std::sqrt(a.sq.value() / static_cast<double>(a.count - 1)) : 0.0;
}

inline float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);
    float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}

// The 256 values of a float8 format (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz).
struct Fp8Table {
  float v[256];
  Fp8Table(int ebits, int bias, bool ieee_inf, bool fnuz) {
    int mbits = 7 - ebits;
    for (int b = 0; b < 256; ++b) {
      int sign = b >> 7, e = (b >> mbits) & ((1 << ebits) - 1), m = b & ((1 << mbits) - 1);
      float x;
      if (fnuz && b == 0x80) {
        x = NAN;
      } else if (ieee_inf && e == (1 << ebits) - 1) {
        x = m == 0 ? INFINITY : NAN;
      } else if (!ieee_inf && !fnuz && e == (1 << ebits) - 1 && m == (1 << mbits) - 1) {
        x = NAN;  // e4m3fn: S.1111.111 is NaN, no infinities
      } else if (e == 0) {
        x = std::ldexp(static_cast<float>(m), 1 - bias - mbits);
      } else {
        x = std::ldexp(1.0f + static_cast<float>(m) / static_cast<float>(1 << mbits), e - bias);
      }
      v[b] = (sign && !(x != x)) ? -x : x;
    }
  }
};

const float* fp8_table(int32_t dt) {
  static const Fp8Table e4m3fn(4, 7, false, false);
  static const Fp8Table e5m2(5, 15, true, false);
  static const Fp8Table e4m3fnuz(4, 8, false, true);
  static const Fp8Table e5m2fnuz(5, 16, false, true);
  switch (dt) {
    case kF8E4M3FN: return e4m3fn.v;
    case kF8E5M2: return e5m2.v;
    case kF8E4M3FNUZ: return e4m3fnuz.v;
    default: return e5m2fnuz.v;
  }
}

// Narrow floats: widen a block at a time to float32, then the float32 passes.
// Float values a block at a time, each block read from memory once: counts, min/max and
// sum, then (while it is in L1) squared deviations from the block's own mean, merged
// across blocks with Chan et al.'s pairwise update; mean from the compensated total.
struct BlockMoments {
  FloatAcc a;
  int64_t n = 0;
  double mean = 0, m2 = 0;
  void add_block(const float* q, int64_t m) {
    BlockStats b;
    f32_block(q, m, b);
    a.count += b.count;
    a.nan += b.nan;
    a.mn = std::min(a.mn, b.mn);
    a.mx = std::max(a.mx, b.mx);
    a.total.add(b.sum);
    if (b.count == 0) return;
    double bmean = b.sum / static_cast<double>(b.count);
    double bm2 = std::max(0.0, b.d2 - b.d1 * b.d1 / static_cast<double>(b.count));
    int64_t total = n + b.count;
    double delta = bmean - mean;
    mean += delta * static_cast<double>(b.count) / static_cast<double>(total);
    m2 += bm2 + delta * delta * static_cast<double>(n) * static_cast<double>(b.count) / static_cast<double>(total);
    n = total;
  }
  void finish(int64_t numel, Summary& out) {
    finish_float(a, numel, out);
    if (a.count) out.sd = a.count > 1 ? std::sqrt(m2 / static_cast<double>(a.count - 1)) : 0.0;
  }
  void merge(const BlockMoments& o) {
    a.count += o.a.count;
    a.nan += o.a.nan;
    a.mn = std::min(a.mn, o.a.mn);
    a.mx = std::max(a.mx, o.a.mx);
    a.total.add(o.a.total.s);
    a.total.add(o.a.total.c);
    if (o.n == 0) return;
    int64_t total = n + o.n;
    double delta = o.mean - mean;
    mean += delta * static_cast<double>(o.n) / static_cast<double>(total);
    m2 += o.m2 + delta * delta * static_cast<double>(n) * static_cast<double>(o.n) / static_cast<double>(total);
    n = total;
  }
};

// Blocks [b_begin, b_end) of a float32 array: moments and checksum share.
inline void f32_blocks(const float* p, int64_t n, int64_t b_begin, int64_t b_end, BlockMoments& bm, uint64_t& ck) {
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(p);
  for (int64_t blk = b_begin; blk < b_end; ++blk) {
    int64_t b0 = blk * kBlock;
    int64_t m = std::min(n - b0, kBlock);
    bm.add_block(p + b0, m);
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX2__)
    ck += checksum_block32(bits + b0, m, b0);  // 64-bit lanes pay off with AVX2; SSE2 does better scalar
#else
    ck += checksum_block(bits + b0, m, b0);
#endif
  }
}

// ------------------------------------------------------------------------------
// Threads for large tensors: the model's own OpenMP threads where the wrapper has them
// (CPU wrappers are built with -fopenmp; the model thread is waiting for us anyway),
// else short-lived std::threads (GPU wrappers), at most 16. Where no thread can be
// started, this thread does every part.
// ------------------------------------------------------------------------------
int workers() {
#ifdef _OPENMP
  return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
  static const int n = static_cast<int>(std::min(16u, std::max(1u, std::thread::hardware_concurrency())));
  return n;
#endif
}

// fn(0) .. fn(parts - 1), each once, in parallel where threads are available.
template <class Fn>
void run_parts(int64_t parts, Fn fn) {
#ifdef _OPENMP
  if (!omp_in_parallel()) {
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < parts; ++c) fn(c);
    return;
  }
#endif
  std::vector<std::thread> threads;
  int64_t started = 1;
  try {
    for (; started < parts; ++started) threads.emplace_back(fn, started);
  } catch (...) {  // no threads here (resource limits, a libc without them): go on alone
  }
  fn(0);
  for (int64_t c = started; c < parts; ++c) fn(c);
  for (auto& t : threads) t.join();
}

// Blocks combine exactly for counts, min/max and the checksum; mean and std combine
// pairwise, so their last bits may depend on the thread count.
template <class Fn>
void over_blocks(int64_t n, BlockMoments& out, uint64_t& ck, Fn fn) {
  int64_t nblocks = (n + kBlock - 1) / kBlock;
  int threads = workers();
  if (nblocks >= 64 && threads > 1) {
    int64_t chunks = std::min<int64_t>(nblocks, 4 * static_cast<int64_t>(threads));
#ifndef _OPENMP
    chunks = std::min<int64_t>(threads, nblocks / 32);  // one std::thread per chunk of >= 256 KiB (f32)
#endif
    std::vector<BlockMoments> parts(static_cast<size_t>(chunks));
    std::vector<uint64_t> cks(static_cast<size_t>(chunks), 0);
    run_parts(chunks, [&](int64_t c) {
      fn(c * nblocks / chunks, (c + 1) * nblocks / chunks, parts[static_cast<size_t>(c)], cks[static_cast<size_t>(c)]);
    });
    for (int64_t c = 0; c < chunks; ++c) {
      out.merge(parts[static_cast<size_t>(c)]);
      ck += cks[static_cast<size_t>(c)];
    }
    return;
  }
  fn(0, nblocks, out, ck);
}

void f32_summary(const float* p, int64_t n, Summary& out) {
  BlockMoments bm;
  uint64_t ck = 0;
  over_blocks(n, bm, ck, [&](int64_t b, int64_t e, BlockMoments& m, uint64_t& c) { f32_blocks(p, n, b, e, m, c); });
  bm.finish(n, out);
  out.checksum = ck;
}

// Narrow floats: widen a block to float32 (exactly), then the float32 block passes.
template <class U, class Conv>
void narrow_summary(const U* p, int64_t n, Conv conv, Summary& out) {
  BlockMoments bm;
  uint64_t ck = 0;
  over_blocks(n, bm, ck, [&](int64_t b, int64_t e, BlockMoments& m, uint64_t& c) {
    float buf[kBlock];
    for (int64_t blk = b; blk < e; ++blk) {
      int64_t b0 = blk * kBlock;
      int64_t len = std::min(n - b0, kBlock);
      for (int64_t k = 0; k < len; ++k) buf[k] = conv(p[b0 + k]);
      m.add_block(buf, len);
      c += checksum_block(p + b0, len, b0);
    }
  });
  bm.finish(n, out);
  out.checksum = ck;
}

template <class T, class U>
void int_summary(const T* p, int64_t n, Summary& out) {
  out.checksum = checksum(reinterpret_cast<const U*>(p), n);
  if (n == 0) return;
  double mn = INFINITY, mx = -INFINITY;
  Sum total, sq;
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    int64_t end = std::min(n, b0 + kBlock);
    double lane[4] = {0, 0, 0, 0};
    for (int64_t i = b0; i < end; ++i) {
      double v = static_cast<double>(p[i]);
      mn = v < mn ? v : mn;
      mx = v > mx ? v : mx;
      lane[i & 3] += v;
    }
    total.add((lane[0] + lane[1]) + (lane[2] + lane[3]));
  }
  double mean = total.value() / static_cast<double>(n);
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    int64_t end = std::min(n, b0 + kBlock);
    double lane[4] = {0, 0, 0, 0};
    for (int64_t i = b0; i < end; ++i) {
      double d = static_cast<double>(p[i]) - mean;
      lane[i & 3] += d * d;
    }
    sq.add((lane[0] + lane[1]) + (lane[2] + lane[3]));
  }
  out.mn = mn;
  out.mx = mx;
  out.mean = mean;
  out.sd = n > 1 ? std::sqrt(sq.value() / static_cast<double>(n - 1)) : 0.0;
  out.absmax = std::max(std::fabs(mn), std::fabs(mx));
}

// `data` holds `numel` contiguous row-major elements of type `dt`.
bool summarize(const void* data, int64_t numel, int32_t dt, Summary& s) {
  const TypeInfo* ti = type_info(dt);
  if (!ti) return false;
  int64_t n = numel * ti->units;
  switch (dt) {
    case kF32:
    case kC64:
      f32_summary(static_cast<const float*>(data), n, s);
      return true;
    case kF64:
    case kC128: {
      const double* p = static_cast<const double*>(data);
      FloatAcc a;
      f64_pass1(p, n, a);
      finish_float(a, n, s);
      if (a.count) f64_pass2(p, n, s.mean, a);
      finish_std(a, s);
      s.checksum = checksum(static_cast<const uint64_t*>(data), n);
      return true;
    }
    case kF16:
    case kC32:
      narrow_summary(static_cast<const uint16_t*>(data), n, half_to_float, s);
      return true;
    case kBF16:
      narrow_summary(static_cast<const uint16_t*>(data), n,
                     [](uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }, s);
      return true;
    case kF8E4M3FN:
    case kF8E5M2:
    case kF8E4M3FNUZ:
    case kF8E5M2FNUZ: {
      const float* table = fp8_table(dt);
      narrow_summary(static_cast<const uint8_t*>(data), n, [table](uint8_t b) { return table[b]; }, s);
      return true;
    }
    case kI64: int_summary<int64_t, uint64_t>(static_cast<const int64_t*>(data), n, s); return true;
    case kI32: int_summary<int32_t, uint32_t>(static_cast<const int32_t*>(data), n, s); return true;
    case kI16: int_summary<int16_t, uint16_t>(static_cast<const int16_t*>(data), n, s); return true;
    case kI8: int_summary<int8_t, uint8_t>(static_cast<const int8_t*>(data), n, s); return true;
    case kU8:
    case kBool: int_summary<uint8_t, uint8_t>(static_cast<const uint8_t*>(data), n, s); return true;
    case kU16: int_summary<uint16_t, uint16_t>(static_cast<const uint16_t*>(data), n, s); return true;
    case kU32: int_summary<uint32_t, uint32_t>(static_cast<const uint32_t*>(data), n, s); return true;
    case kU64: int_summary<uint64_t, uint64_t>(static_cast<const uint64_t*>(data), n, s); return true;
    default: return false;
  }
}

// ------------------------------------------------------------------------------
// .pt writer: the torch zip format, stored (uncompressed), 64-byte aligned data
// ------------------------------------------------------------------------------
struct Crc32 {
  uint32_t t[8][256];
  Crc32() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (0xEDB88320u ^ (c >> 1)) : (c >> 1);
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    }
  }
  uint32_t operator()(const void* data, size_t n, uint32_t crc = 0) const {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    crc = ~crc;
    while (n >= 8) {
      uint32_t a, b;
      std::memcpy(&a, p, 4);
      std::memcpy(&b, p + 4, 4);
      a ^= crc;
      crc = t[7][a & 0xff] ^ t[6][(a >> 8) & 0xff] ^ t[5][(a >> 16) & 0xff] ^ t[4][a >> 24] ^
          t[3][b & 0xff] ^ t[2][(b >> 8) & 0xff] ^ t[1][(b >> 16) & 0xff] ^ t[0][b >> 24];
      p += 8;
      n -= 8;
    }
    while (n--) crc = t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
  }
};

const Crc32& crc32() {
  static const Crc32 c;
  return c;
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define AOTI_DEBUG_CRC_CLMUL 1
// CRC-32 (zip's polynomial) by carry-less multiplication folding, as in zlib/Chromium's
// crc32_simd.c (Intel, "Fast CRC Computation Using PCLMULQDQ"). `len` >= 64, multiple of
// 16; `crc` is the running value without zip's final inversion (caller inverts).
__attribute__((target("pclmul,sse4.1"))) uint32_t crc32_clmul(const unsigned char* buf, size_t len,
                                                               uint32_t crc) {
  alignas(16) static const uint64_t k1k2[] = {0x0154442bd4ull, 0x01c6e41596ull};
  alignas(16) static const uint64_t k3k4[] = {0x01751997d0ull, 0x00ccaa009eull};
  alignas(16) static const uint64_t k5k0[] = {0x0163cd6124ull, 0x0000000000ull};
  alignas(16) static const uint64_t poly[] = {0x01db710641ull, 0x01f7011641ull};
  __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;
  x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x00));
  x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x10));
  x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x20));
  x4 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x30));
  x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128(static_cast<int>(crc)));
  x0 = _mm_load_si128(reinterpret_cast<const __m128i*>(k1k2));
  buf += 64;
  len -= 64;
  while (len >= 64) {
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
    x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
    x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
    x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
    y5 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x00));
    y6 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x10));
    y7 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x20));
    y8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x30));
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
    x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
    x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
    x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
    buf += 64;
    len -= 64;
  }
  x0 = _mm_load_si128(reinterpret_cast<const __m128i*>(k3k4));
  x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
  x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
  x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
  x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
  x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
  x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
  x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
  x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
  x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
  while (len >= 16) {
    x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf));
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    buf += 16;
    len -= 16;
  }
  x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
  x3 = _mm_setr_epi32(~0, 0, ~0, 0);
  x1 = _mm_srli_si128(x1, 8);
  x1 = _mm_xor_si128(x1, x2);
  x0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(k5k0));
  x2 = _mm_srli_si128(x1, 4);
  x1 = _mm_and_si128(x1, x3);
  x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
  x1 = _mm_xor_si128(x1, x2);
  x0 = _mm_load_si128(reinterpret_cast<const __m128i*>(poly));
  x2 = _mm_and_si128(x1, x3);
  x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
  x2 = _mm_and_si128(x2, x3);
  x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
  x1 = _mm_xor_si128(x1, x2);
  return static_cast<uint32_t>(_mm_extract_epi32(x1, 1));
}
#endif

// zip's CRC-32 of `n` bytes: carry-less multiplication where the CPU has it and it
// agrees with the table on a self-test, else the slicing-by-8 table.
uint32_t crc32_of(const void* data, size_t n) {
  const Crc32& table = crc32();
#ifdef AOTI_DEBUG_CRC_CLMUL
  static const bool fast = [] {
    if (!__builtin_cpu_supports("pclmul") || !__builtin_cpu_supports("sse4.1")) return false;
    unsigned char probe[1000];
    for (int i = 0; i < 1000; ++i) probe[i] = static_cast<unsigned char>(i * 131 + 7);
    for (size_t len : {64, 80, 128, 992}) {
      if (~crc32_clmul(probe, len, ~0u) != crc32()(probe, len)) return false;
    }
    return true;
  }();
  if (fast && n >= 64) {
    size_t head = n & ~static_cast<size_t>(15);
    uint32_t crc = ~crc32_clmul(static_cast<const unsigned char*>(data), head, ~0u);
    return table(static_cast<const unsigned char*>(data) + head, n - head, crc);
  }
#endif
  return table(data, n);
}

// crc32_combine (zlib): the CRC of A||B from crc(A), crc(B) and len(B), by multiplying
// crc(A) by x^(8 len(B)) modulo the polynomial (reflected bit order).
uint32_t crc_multmodp(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ 0xEDB88320u : b >> 1;
  }
  return p;
}

uint32_t crc32_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
  static const std::vector<uint32_t> x2n = [] {  // x^(2^k) mod p
    std::vector<uint32_t> t(32);
    uint32_t p = 1u << 30;  // x^1
    t[0] = p;
    for (int k = 1; k < 32; ++k) t[static_cast<size_t>(k)] = p = crc_multmodp(p, p);
    return t;
  }();
  uint32_t xp = 1u << 31;  // x^0
  for (unsigned k = 3; len2; len2 >>= 1, ++k) {  // x^(8 len2): bytes to bits
    if (len2 & 1) xp = crc_multmodp(x2n[k & 31], xp);
  }
  return crc_multmodp(xp, crc1) ^ crc2;
}

// crc32_of over large data in parallel parts, combined in order.
uint32_t crc32_parallel(const void* data, uint64_t n) {
  int threads = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(workers()), n >> 21));  // >= 2 MiB each
  if (n < (8u << 20) || threads < 2) return crc32_of(data, static_cast<size_t>(n));
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t chunk = ((n / static_cast<uint64_t>(threads)) + 63) & ~static_cast<uint64_t>(63);
  std::vector<uint32_t> crc(static_cast<size_t>(threads), 0);
  std::vector<uint64_t> len(static_cast<size_t>(threads), 0);
  run_parts(threads, [&](int64_t i) {
    uint64_t b = std::min(n, static_cast<uint64_t>(i) * chunk), e = std::min(n, b + chunk);
    len[static_cast<size_t>(i)] = e - b;
    crc[static_cast<size_t>(i)] = crc32_of(p + b, static_cast<size_t>(e - b));
  });
  uint32_t out = crc[0];
  for (size_t i = 1; i < crc.size(); ++i) out = crc32_combine(out, crc[i], len[i]);
  return out;
}

void put16(std::string& o, uint32_t v) {
  o.push_back(static_cast<char>(v & 0xff));
  o.push_back(static_cast<char>((v >> 8) & 0xff));
}
void put32(std::string& o, uint32_t v) {
  put16(o, v & 0xffff);
  put16(o, v >> 16);
}
void put64(std::string& o, uint64_t v) {
  put32(o, static_cast<uint32_t>(v));
  put32(o, static_cast<uint32_t>(v >> 32));
}

// Pickle protocol 2 of torch._utils._rebuild_tensor_v2 over a persistent-id storage.
void pickle_int(std::string& o, int64_t v) {
  if (v >= 0 && v < 256) {
    o.push_back('K');
    o.push_back(static_cast<char>(v));
  } else if (v >= 0 && v < 65536) {
    o.push_back('M');
    put16(o, static_cast<uint32_t>(v));
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    o.push_back('J');
    put32(o, static_cast<uint32_t>(static_cast<int32_t>(v)));
  } else {
    o.push_back('\x8a');
    o.push_back(8);
    put64(o, static_cast<uint64_t>(v));
  }
}

void pickle_str(std::string& o, const std::string& s) {
  o.push_back('X');
  put32(o, static_cast<uint32_t>(s.size()));
  o += s;
}

void pickle_tuple(std::string& o, const std::vector<int64_t>& v) {
  if (v.empty()) {
    o.push_back(')');
    return;
  }
  if (v.size() > 3) o.push_back('(');
  for (int64_t x : v) pickle_int(o, x);
  if (v.size() == 1) o.push_back('\x85');
  else if (v.size() == 2) o.push_back('\x86');
  else if (v.size() == 3) o.push_back('\x87');
  else o.push_back('t');
}

std::string tensor_pickle(const TypeInfo& ti, const std::vector<int64_t>& shape, int64_t numel) {
  std::vector<int64_t> stride(shape.size());
  int64_t st = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    stride[i] = st;
    st *= std::max<int64_t>(shape[i], 1);
  }
  std::string o = "\x80\x02";
  o += "ctorch._utils\n_rebuild_tensor_v2\n";
  o += "((";
  pickle_str(o, "storage");
  o += "ctorch\n";
  o += ti.storage;
  o += "\n";
  pickle_str(o, "0");
  pickle_str(o, "cpu");
  pickle_int(o, numel);
  o += "tQ";
  pickle_int(o, 0);
  pickle_tuple(o, shape);
  pickle_tuple(o, stride);
  o += "\x89";
  o += "ccollections\nOrderedDict\n)R";
  o += "tR.";
  return o;
}

struct ZipEntry {
  std::string name;
  uint32_t crc;
  uint64_t size;
  uint64_t offset;
};

// Local header for `name` at `offset`, padded so that its data starts 64-aligned.
void local_header(std::string& o, ZipEntry& e, bool zip64) {
  e.offset = o.size();
  size_t fixed = 30 + e.name.size() + (zip64 ? 20 : 0);
  size_t pad = (64 - (e.offset + fixed + 4) % 64) % 64;
  put32(o, 0x04034b50u);
  put16(o, zip64 ? 45 : 20);
  put16(o, 0);  // flags
  put16(o, 0);  // stored
  put16(o, 0);  // time
  put16(o, 0x21);  // date 1980-01-01
  put32(o, e.crc);
  put32(o, zip64 ? 0xffffffffu : static_cast<uint32_t>(e.size));
  put32(o, zip64 ? 0xffffffffu : static_cast<uint32_t>(e.size));
  put16(o, static_cast<uint32_t>(e.name.size()));
  put16(o, static_cast<uint32_t>((zip64 ? 20 : 0) + 4 + pad));
  o += e.name;
  if (zip64) {
    put16(o, 0x0001);
    put16(o, 16);
    put64(o, e.size);
    put64(o, e.size);
  }
  put16(o, 0x4246);  // "FB": torch's padding field
  put16(o, static_cast<uint32_t>(pad));
  o.append(pad, 'Z');
}

void central_entry(std::string& o, const ZipEntry& e, bool zip64) {
  put32(o, 0x02014b50u);
  put16(o, zip64 ? 45 : 20);
  put16(o, zip64 ? 45 : 20);
  put16(o, 0);
  put16(o, 0);
  put16(o, 0);
  put16(o, 0x21);
  put32(o, e.crc);
  put32(o, zip64 ? 0xffffffffu : static_cast<uint32_t>(e.size));
  put32(o, zip64 ? 0xffffffffu : static_cast<uint32_t>(e.size));
  put16(o, static_cast<uint32_t>(e.name.size()));
  put16(o, zip64 ? 28 : 0);
  put16(o, 0);  // comment
  put16(o, 0);  // disk
  put16(o, 0);  // internal attributes
  put32(o, 0);  // external attributes
  put32(o, zip64 ? 0xffffffffu : static_cast<uint32_t>(e.offset));
  o += e.name;
  if (zip64) {
    put16(o, 0x0001);
    put16(o, 24);
    put64(o, e.size);
    put64(o, e.size);
    put64(o, e.offset);
  }
}

// Writes `path`; returns "" or an error text. `data` is `nbytes` contiguous bytes.
std::string write_pt(const std::string& path, const TypeInfo& ti, const std::vector<int64_t>& shape,
                     int64_t numel, const void* data, uint64_t nbytes, bool force_zip64) {
  auto crc = [](const void* p, size_t n) { return crc32_of(p, n); };
  std::string pkl = tensor_pickle(ti, shape, numel);
  static const std::string kByteorder = "little";
  static const std::string kVersion = "3\n";
  const std::string archive = "archive/";
  std::vector<ZipEntry> entries = {
      {archive + "data.pkl", crc(pkl.data(), pkl.size()), pkl.size(), 0},
      {archive + "byteorder", crc(kByteorder.data(), kByteorder.size()), kByteorder.size(), 0},
      {archive + "version", crc(kVersion.data(), kVersion.size()), kVersion.size(), 0},
      {archive + "data/0", crc32_parallel(data, nbytes), nbytes, 0},
  };
  const std::string* small[3] = {&pkl, &kByteorder, &kVersion};
  std::string head;
  for (int i = 0; i < 3; ++i) {
    local_header(head, entries[i], false);
    head += *small[i];
  }
  bool big = force_zip64 || nbytes >= 0xffffffffull;
  local_header(head, entries[3], big);
  uint64_t cd_offset = head.size() + nbytes;
  std::string tail;
  for (int i = 0; i < 4; ++i) central_entry(tail, entries[i], i == 3 && big);
  uint64_t cd_size = tail.size();
  bool big_cd = big || cd_offset >= 0xffffffffull;
  if (big_cd) {
    uint64_t z64_offset = cd_offset + cd_size;
    put32(tail, 0x06064b50u);  // zip64 end of central directory record
    put64(tail, 44);
    put16(tail, 45);
    put16(tail, 45);
    put32(tail, 0);
    put32(tail, 0);
    put64(tail, 4);
    put64(tail, 4);
    put64(tail, cd_size);
    put64(tail, cd_offset);
    put32(tail, 0x07064b50u);  // locator
    put32(tail, 0);
    put64(tail, z64_offset);
    put32(tail, 1);
  }
  put32(tail, 0x06054b50u);
  put16(tail, 0);
  put16(tail, 0);
  put16(tail, 4);
  put16(tail, 4);
  put32(tail, big_cd ? 0xffffffffu : static_cast<uint32_t>(cd_size));
  put32(tail, big_cd ? 0xffffffffu : static_cast<uint32_t>(cd_offset));
  put16(tail, 0);

  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "save: cannot open " + path + ": " + errno_text(errno);
  struct iovec iov[3] = {
      {const_cast<char*>(head.data()), head.size()},
      {const_cast<void*>(data), static_cast<size_t>(nbytes)},
      {const_cast<char*>(tail.data()), tail.size()},
  };
  int first = 0;
  std::string err;
  while (first < 3) {
    ssize_t w = ::writev(fd, iov + first, 3 - first);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      err = "save: cannot write " + path + ": " + errno_text(w < 0 ? errno : ENOSPC);
      break;
    }
    size_t left = static_cast<size_t>(w);
    while (first < 3 && left >= iov[first].iov_len) {
      left -= iov[first].iov_len;
      ++first;
    }
    if (first < 3) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  if (::close(fd) != 0 && err.empty()) err = "save: cannot close " + path + ": " + errno_text(errno);
  if (!err.empty()) ::unlink(path.c_str());
  return err;
}

// ------------------------------------------------------------------------------
// Tensors: metadata, a contiguous host view of the values
// ------------------------------------------------------------------------------
struct HostTensor {
  int32_t dtype = -1;
  int32_t device_type = 0;
  int32_t device_index = 0;
  std::vector<int64_t> shape, stride;
  int64_t numel = 0;
  const void* data = nullptr;  // contiguous row-major host bytes, or null
  uint64_t nbytes = 0;
  std::vector<unsigned char> gathered;
  AtenTensorHandle host_copy = nullptr;
  ~HostTensor() {
    if (host_copy) aoti_torch_delete_tensor_object(host_copy);
  }
};

std::string device_string(int32_t type, int32_t index) {
  if (type == kDeviceCpu) return "cpu";
  if (type == kDeviceCuda) return "cuda:" + std::to_string(index);
  return "device" + std::to_string(type) + ":" + std::to_string(index);
}

// Metadata of `h`; "" or an error text.
std::string describe(AtenTensorHandle h, HostTensor& t) {
  int64_t ndim = 0;
  int64_t* sizes = nullptr;
  int64_t* strides = nullptr;
  if (aoti_torch_get_dim(h, &ndim) || aoti_torch_get_sizes(h, &sizes) ||
      aoti_torch_get_strides(h, &strides) || aoti_torch_get_dtype(h, &t.dtype) ||
      aoti_torch_get_device_type(h, &t.device_type) ||
      aoti_torch_get_device_index(h, &t.device_index)) {
    return "cannot read tensor metadata through the AOTI shim";
  }
  t.shape.assign(sizes, sizes + ndim);
  t.stride.assign(strides, strides + ndim);
  t.numel = 1;
  for (int64_t s : t.shape) t.numel *= s;
  return "";
}

bool is_contiguous(const HostTensor& t) {
  int64_t expected = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    if (t.shape[i] != 1 && t.stride[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

template <class E>
inline void gather_row(unsigned char* out, const unsigned char* src, int64_t n, int64_t stride) {
  E* o = reinterpret_cast<E*>(out);
  const E* s = reinterpret_cast<const E*>(src);
  for (int64_t j = 0; j < n; ++j) o[j] = s[j * stride];
}

#ifdef AOTI_DEBUG_CUDA
// One pinned host buffer per .so (grown to the largest tensor up to 256 MiB; larger ones
// take the shim's copy), used under S.mu. Never freed: the CUDA runtime may be torn down
// before this .so's statics at exit.
void* pinned_buffer(uint64_t n) {
  constexpr uint64_t kMax = 256ull << 20;
  static void* buf = nullptr;
  static uint64_t cap = 0;
  static bool failed = false;
  if (n > kMax || failed) return nullptr;
  if (n > cap) {
    uint64_t want = 1ull << 20;
    while (want < n) want <<= 1;
    void* p = nullptr;
    if (cudaMallocHost(&p, static_cast<size_t>(want)) != cudaSuccess) {
      (void)cudaGetLastError();
      failed = true;  // pinned memory refused: the shim's copy from now on
      return nullptr;
    }
    if (buf) cudaFreeHost(buf);
    buf = p;
    cap = want;
  }
  return buf;
}
#endif

// Makes t.data point at contiguous host bytes; "" or an error text.
std::string host_values(AtenTensorHandle h, HostTensor& t) {
  const TypeInfo* ti = type_info(t.dtype);
  if (!ti) return "unsupported dtype " + std::to_string(t.dtype);
  size_t esize = static_cast<size_t>(ti->unit * ti->units);
  t.nbytes = static_cast<uint64_t>(t.numel) * esize;
  if (t.numel == 0) {
    t.data = "";
    return "";
  }
  if (t.device_type == kDeviceCpu) {
    void* p = nullptr;
    if (aoti_torch_get_data_ptr(h, &p) || !p) return "cannot read the tensor's data pointer";
    if (is_contiguous(t)) {
      t.data = p;
      return "";
    }
    // Gather a strided CPU tensor in row-major order.
    t.gathered.resize(t.nbytes);
    size_t nd = t.shape.size();
    std::vector<int64_t> idx(nd, 0);
    const unsigned char* base = static_cast<const unsigned char*>(p);
    unsigned char* out = t.gathered.data();
    int64_t inner = nd ? t.shape[nd - 1] : 1;
    int64_t inner_stride = nd ? t.stride[nd - 1] : 0;
    for (int64_t done = 0; done < t.numel; done += inner) {
      int64_t off = 0;
      for (size_t d = 0; d + 1 < nd; ++d) off += idx[d] * t.stride[d];
      const unsigned char* src = base + off * static_cast<int64_t>(esize);
      if (inner_stride == 1) {
        std::memcpy(out, src, static_cast<size_t>(inner) * esize);
      } else {
        switch (esize) {
          case 1: gather_row<uint8_t>(out, src, inner, inner_stride); break;
          case 2: gather_row<uint16_t>(out, src, inner, inner_stride); break;
          case 4: gather_row<uint32_t>(out, src, inner, inner_stride); break;
          case 8: gather_row<uint64_t>(out, src, inner, inner_stride); break;
          default:
            for (int64_t j = 0; j < inner; ++j) {
              std::memcpy(out + j * esize, src + j * inner_stride * static_cast<int64_t>(esize), esize);
            }
        }
      }
      out += inner * esize;
      for (size_t d = nd >= 1 ? nd - 1 : 0; d-- > 0;) {
        if (++idx[d] < t.shape[d]) break;
        idx[d] = 0;
      }
    }
    t.data = t.gathered.data();
    return "";
  }
#ifdef AOTI_DEBUG_CUDA
  // A contiguous CUDA tensor: one copy into this .so's reusable pinned buffer (several
  // times the speed of a copy into fresh pageable memory). The device was synchronised
  // before the side was read (record_side).
  if (t.device_type == kDeviceCuda && is_contiguous(t)) {
    void* src = nullptr;
    void* dst = pinned_buffer(t.nbytes);
    if (dst && aoti_torch_get_data_ptr(h, &src) == 0 && src) {
      if (cudaMemcpy(dst, src, static_cast<size_t>(t.nbytes), cudaMemcpyDeviceToHost) == cudaSuccess) {
        t.data = dst;
        return "";
      }
      (void)cudaGetLastError();  // the shim's copy below reports what is wrong
    }
  }
#endif
  // A device tensor: a contiguous CPU copy through the shim (synchronous copy).
  std::vector<int64_t> cstride(t.shape.size());
  int64_t st = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    cstride[i] = st;
    st *= std::max<int64_t>(t.shape[i], 1);
  }
  if (aoti_torch_empty_strided(static_cast<int64_t>(t.shape.size()), t.shape.data(), cstride.data(),
                               t.dtype, kDeviceCpu, 0, &t.host_copy)) {
    t.host_copy = nullptr;
    return "copy: cannot allocate a host buffer";
  }
  if (aoti_torch_copy_(t.host_copy, h, 0)) return "copy: device to host copy failed";
  void* p = nullptr;
  if (aoti_torch_get_data_ptr(t.host_copy, &p) || !p) return "copy: no host data pointer";
  t.data = p;
  return "";
}

// ------------------------------------------------------------------------------
// Records
// ------------------------------------------------------------------------------
std::string fmt6(double v) {
  if (v != v) return "-";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string pad_phase(const char* phase) {
  std::string p = phase;
  while (p.size() < 6) p.push_back(' ');
  return p;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  if (shape.empty()) return "scalar";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += "x";
    s += std::to_string(shape[i]);
  }
  return s;
}

void json_ints(std::string& o, const std::vector<int64_t>& v) {
  o += "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) o += ",";
    o += std::to_string(v[i]);
  }
  o += "]";
}

// One write for all lines of one launch side: each write holds whole lines only.
void append_manifest(Shared& S, const std::string& lines) {
  if (S.manifest_fd < 0 || lines.empty()) return;
  const char* p = lines.data();
  size_t n = lines.size();
  while (n > 0) {
    ssize_t w = ::write(S.manifest_fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      warn_once(S, "manifest", "cannot append to manifest in '" + S.path + "': " +
                                   errno_text(w < 0 ? errno : ENOSPC));
      return;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// kind, dtype, shape, stride, device, numel: what a record says of any tensor.
const TypeInfo* record_metadata(AtenTensorHandle h, HostTensor& t, std::string& err, std::string& rec) {
  err = describe(h, t);
  const TypeInfo* ti = err.empty() ? type_info(t.dtype) : nullptr;
  rec += ",\"kind\":\"tensor\",\"dtype\":";
  json_str(rec, ti ? ti->name : ("dtype" + std::to_string(t.dtype)).c_str());
  rec += ",\"shape\":";
  json_ints(rec, t.shape);
  rec += ",\"stride\":";
  json_ints(rec, t.stride);
  rec += ",\"device\":";
  json_str(rec, device_string(t.device_type, t.device_index));
  rec += ",\"numel\":" + std::to_string(t.numel);
  return ti;
}

void record_tensor(Shared& S, const Site& site, const Arg& a, const char* phase,
                   AtenTensorHandle h, std::string& rec) {
  HostTensor t;
  std::string err;
  const TypeInfo* ti = record_metadata(h, t, err, rec);
  if (a.uninitialised && std::strcmp(phase, "before") == 0) {
    // Memory no launch had written yet: what it holds is not data (no stats, no file).
    rec += ",\"uninitialised\":true";
    return;
  }
  if (err.empty()) err = host_values(h, t);
  Summary sm;
  bool have_stats = err.empty() && t.data && summarize(t.data, t.numel, t.dtype, sm);
  if (err.empty() && !have_stats) err = "stats: unsupported dtype";
  bool saving = site.level == 1 && err.empty();
  std::string content_key;
  if (have_stats) {
    std::string st = "{\"min\":";
    json_stat(st, sm.mn);
    st += ",\"max\":";
    json_stat(st, sm.mx);
    st += ",\"mean\":";
    json_stat(st, sm.mean);
    st += ",\"std\":";
    json_stat(st, sm.sd);
    st += ",\"absmax\":";
    json_stat(st, sm.absmax);
    st += ",\"nan\":" + std::to_string(sm.nan) + ",\"inf\":" + std::to_string(sm.inf) + "}";
    char ck[24];
    std::snprintf(ck, sizeof(ck), "%016llx", static_cast<unsigned long long>(sm.checksum));
    rec += ",\"stats\":" + st + ",\"checksum\":\"" + ck + "\"";
    // Identity of the values (as hooks._content_key): dtype, shape, checksum, exact stats.
    content_key = std::string(ti->name) + "|" + shape_text(t.shape) + "|" + ck + "|" + st;
  } else {
    rec += ",\"stats\":null";
  }
  if (saving && !content_key.empty()) {
    auto same = S.content_files.find(content_key);
    if (same != S.content_files.end()) {
      // Identical values already on disk (a weight read every call, an input that is
      // the unchanged output of an earlier launch): point at that file.
      rec += ",\"file\":";
      json_str(rec, same->second);
      rec += ",\"shared\":true";
      saving = false;
    }
  }
  if (saving && S.max_bytes >= 0 && S.bytes_written + static_cast<int64_t>(t.nbytes) > S.max_bytes) {
    rec += ",\"skipped\":\"AOTI_DEBUG_MAX_BYTES reached\"";
    saving = false;
  }
  if (saving) {
    S.bytes_written += static_cast<int64_t>(t.nbytes);
    char seq[24];
    std::snprintf(seq, sizeof(seq), "c%08lld", static_cast<long long>(S.seq));
    std::string fname = std::string(seq) + "-" + phase + "-" + sanitize(site.kernel, 80) + "-" +
        sanitize(a.name, 40) + ".pt";
    std::string werr = write_pt(S.path + "/tensors/" + fname, *ti, t.shape, t.numel, t.data, t.nbytes,
                                S.force_zip64);
    if (werr.empty()) {
      rec += ",\"file\":";
      json_str(rec, "tensors/" + fname);
      if (!content_key.empty()) S.content_files.emplace(content_key, "tensors/" + fname);
    } else {
      err = werr;
      warn_once(S, "save", werr);
    }
  } else if (!err.empty()) {
    warn_once(S, "tensor-" + err.substr(0, err.find(':')),
              std::string("cannot record ") + a.name + " of " + site.kernel + ": " + err);
  }
  if (!err.empty()) {
    rec += ",\"error\":";
    json_str(rec, err);
  }
  if (site.level == 2) {
    std::string line = "[aoti_debug] " + pad_phase(phase) + " " + site.kernel + " launch=" +
        std::to_string(tl_launch) + " " + a.name + " (" + a.role + ") " + (ti ? ti->name : "?") + "[" +
        shape_text(t.shape) + "] " + device_string(t.device_type, t.device_index) +
        " min=" + (have_stats ? fmt6(sm.mn) : "-") + " max=" + (have_stats ? fmt6(sm.mx) : "-") +
        " mean=" + (have_stats ? fmt6(sm.mean) : "-") + " std=" + (have_stats ? fmt6(sm.sd) : "-") +
        " absmax=" + (have_stats ? fmt6(sm.absmax) : "-") + " nan=" + std::to_string(sm.nan) +
        " inf=" + std::to_string(sm.inf);
    emit_line(line);
  }
}

void record_scalar(const Site& site, const Arg& a, const char* phase, const Value& v, std::string& rec) {
  std::string value;
  const char* dtype = nullptr;
  const char* kind = std::strcmp(a.kind, "symint") == 0 ? "symint" : "scalar";
  switch (v.kind()) {
    case Value::kInt: value = std::to_string(v.as_int()); dtype = "int"; break;
    case Value::kBool: value = v.as_int() ? "true" : "false"; dtype = "bool"; break;
    case Value::kDouble: {
      double d = v.as_double();
      value = d != d ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : fmt_double(d);
      dtype = "float";
      break;
    }
    case Value::kNone: kind = "none"; break;
    default: kind = "other"; value = "\"unknown\""; break;
  }
  rec += ",\"kind\":";
  json_str(rec, kind);
  if (!value.empty()) rec += ",\"value\":" + value;
  if (dtype) {
    rec += ",\"dtype\":";
    json_str(rec, dtype);
  }
  if (site.level == 2) {
    std::string shown = v.kind() == Value::kBool ? (v.as_int() ? "True" : "False")
        : v.kind() == Value::kDouble ? (v.as_double() != v.as_double() ? "nan" : fmt_double(v.as_double()))
        : v.kind() == Value::kNone ? "None" : value;
    if (v.kind() == Value::kDouble && std::isinf(v.as_double())) shown = v.as_double() > 0 ? "inf" : "-inf";
    emit_line("[aoti_debug] " + pad_phase(phase) + " " + site.kernel + " launch=" +
              std::to_string(tl_launch) + " " + a.name + " = " + shown);
  }
}

// Caller holds S.mu; the run is open.
void record_side(Shared& S, const Site& site, std::initializer_list<Value> vals, const char* phase,
                 const std::string& label) {
  size_t n = std::min(static_cast<size_t>(site.n), vals.size());
  const Value* v = vals.begin();
  std::string lines;
#ifdef AOTI_DEBUG_CUDA
  // The model may run on a stream of its own (AOTI's run(stream)); the shim's copy runs
  // on the current one: wait for the device before reading any of its tensors.
  for (size_t i = 0; i < n; ++i) {
    int32_t dev = kDeviceCpu;
    if (v[i].kind() == Value::kTensor && aoti_torch_get_device_type(v[i].handle(), &dev) == 0 &&
        dev != kDeviceCpu) {
      cudaError_t e = cudaDeviceSynchronize();
      if (e != cudaSuccess) warn_once(S, "device-sync", std::string("device error before reading values: ") +
                                                          cudaGetErrorString(e));
      break;
    }
  }
#endif
  for (size_t i = 0; i < n; ++i) {
    const Arg& a = site.args[i];
    S.seq += 1;
    std::string rec = "{\"seq\":" + std::to_string(S.seq) + ",\"launch\":" + std::to_string(tl_launch) +
        ",\"graph\":";
    json_str(rec, label);
    rec += ",\"wrapper\":\"cpp\",\"kernel\":";
    json_str(rec, site.kernel);
    rec += ",\"op\":";
    json_str(rec, site.op);
    rec += ",\"kernel_call\":" + std::to_string(tl_call) + ",\"phase\":";
    json_str(rec, phase);
    rec += ",\"arg\":";
    json_str(rec, a.name);
    rec += ",\"role\":";
    json_str(rec, a.role);
    int64_t index = (std::strcmp(phase, "before") == 0 ? 0 : site.index_base) + a.index;
    rec += ",\"index\":" + std::to_string(index);
    if (a.expr && *a.expr && std::strcmp(a.expr, a.name) != 0) {
      rec += ",\"expr\":";
      json_str(rec, a.expr);
    }
    if (a.volatile_why && *a.volatile_why) {
      rec += ",\"volatile\":";
      json_str(rec, a.volatile_why);
    }
    if (v[i].kind() == Value::kTensor) {
      record_tensor(S, site, a, phase, v[i].handle(), rec);
    } else {
      record_scalar(site, a, phase, v[i], rec);
    }
    lines += rec;
    lines += "}\n";
  }
  append_manifest(S, lines);
}

std::string names_line(const char* phase, int64_t launch, const std::string& graph, const char* kernel,
                       int64_t call) {
  return std::string("[aoti_debug] ") + phase + " launch=" + std::to_string(launch) + " graph=" + graph +
      " kernel=" + kernel + " call=" + std::to_string(call);
}

// format.schema.graph_line: once per graph at level names, before its first launch.
void announce_graph(const Site& site) {
  Local& L = local();
  if (L.announced) return;
  L.announced = true;
  std::string label = "graph" + std::to_string(L.index);
  emit_line("[aoti_debug] graph=" + label + " wrapper=cpp file=" + graph_file(site.file));
}

// format.schema._field: no spaces in a value, "-" for an empty one.
std::string field(const std::string& v) {
  std::string o;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      space = !o.empty();
      continue;
    }
    if (space) o.push_back('_');
    space = false;
    o.push_back(c);
  }
  return o.empty() ? "-" : o;
}

std::string int_list(const int64_t* v, int64_t n) {
  std::string o = "[";
  for (int64_t i = 0; i < n; ++i) {
    if (i) o += ",";
    o += std::to_string(v[i]);
  }
  return o + "]";
}

// AOTI_DEBUG_NAMES_ARGS (aoti-debug locate): format.schema.site_line and one arg_line per
// value: metadata only (no values, no sync), safe to read right before a faulting launch.
void describe_args(const Site& site, std::initializer_list<Value> vals) {
  std::string src;  // site_line joins whitespace runs with one space
  bool sp = false;
  for (const char* p = site.source ? site.source : ""; *p; ++p) {
    if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
      sp = !src.empty();
      continue;
    }
    if (sp) src.push_back(' ');
    sp = false;
    src.push_back(*p);
  }
  emit_line("[aoti_debug] site launch=" + std::to_string(tl_launch) + " line=" + std::to_string(site.line) +
            " from=" + src);
  size_t n = std::min(static_cast<size_t>(site.n), vals.size());
  const Value* v = vals.begin();
  for (size_t i = 0; i < n; ++i) {
    const Arg& a = site.args[i];
    std::string line = "[aoti_debug] arg launch=" + std::to_string(tl_launch) + " name=" + field(a.name) +
        " role=" + field(a.role);
    switch (v[i].kind()) {
      case Value::kTensor: {
        AtenTensorHandle h = v[i].handle();
        int64_t ndim = 0, offset = 0, nbytes = 0;
        int64_t* sizes = nullptr;
        int64_t* strides = nullptr;
        int32_t dtype = -1, dev = 0, idx = 0;
        void* ptr = nullptr;
        aoti_torch_get_dim(h, &ndim);
        aoti_torch_get_sizes(h, &sizes);
        aoti_torch_get_strides(h, &strides);
        aoti_torch_get_dtype(h, &dtype);
        aoti_torch_get_device_type(h, &dev);
        aoti_torch_get_device_index(h, &idx);
        const TypeInfo* ti = type_info(dtype);
        line += " kind=tensor dtype=" + (ti ? std::string(ti->name) : "dtype" + std::to_string(dtype));
        line += " shape=" + (sizes ? int_list(sizes, ndim) : std::string("-"));
        line += " stride=" + (strides ? int_list(strides, ndim) : std::string("-"));
        line += " device=" + device_string(dev, idx);
        if (aoti_torch_get_storage_offset(h, &offset) == 0) line += " offset=" + std::to_string(offset);
        if (aoti_torch_get_data_ptr(h, &ptr) == 0) {
          char buf[32];
          std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(ptr)));
          line += std::string(" ptr=") + buf;
        }
        if (aoti_torch_get_storage_size(h, &nbytes) == 0) line += " nbytes=" + std::to_string(nbytes);
        break;
      }
      case Value::kInt:
      case Value::kDouble:
      case Value::kBool: {
        const char* kind = std::strcmp(a.kind, "symint") == 0 ? "symint" : "scalar";
        std::string value = v[i].kind() == Value::kInt ? std::to_string(v[i].as_int())
            : v[i].kind() == Value::kBool ? (v[i].as_int() ? "True" : "False")
            : fmt_double(v[i].as_double());
        line += std::string(" kind=") + kind + " value=" + field(value);
        break;
      }
      case Value::kNone: line += " kind=none"; break;
      default: line += " kind=other type=unknown"; break;
    }
    emit_line(line);
  }
}

void sync_device(const Site& site) {
#ifdef AOTI_DEBUG_CUDA
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return;
  std::string msg = cudaGetErrorString(e);
  emit_line("[aoti_debug] error after launch=" + std::to_string(tl_launch) + " kernel=" + site.kernel +
            ": " + msg);
  throw std::runtime_error("CUDA error after " + std::string(site.kernel) + ": " + msg);
#else
  (void)site;  // CPU kernels run synchronously: the "before" line already names a crash
#endif
}

// ------------------------------------------------------------------------------
// Entry points (called by the generated wrapper around each instrumented launch).
// Internal linkage like everything but shared(): each .so keeps its own labels.
// ------------------------------------------------------------------------------
[[maybe_unused]] void launch(const Site& site, std::initializer_list<Value> vals) {
  Shared& S = shared();
  std::lock_guard<std::mutex> guard(S.mu);
  try {
    if (site.level != 3) {
      ensure_run(S, site);
    } else {
      if (S.pid != static_cast<long>(::getpid())) {
        S.pid = static_cast<long>(::getpid());
        S.launch = 0;
        S.warned.clear();
      }
    }
    S.launch += 1;
    tl_launch = S.launch;
    std::string label = graph_label(S, site);
    Local& L = local();
    int64_t*& counter = L.site_calls[&site];
    if (!counter) counter = &L.calls[std::string(site.graph) + '\x1f' + site.kernel];
    tl_call = (*counter)++;
    if (site.level == 3) {
      if (L.names_args < 0) L.names_args = parse_bool_env(S, "AOTI_DEBUG_NAMES_ARGS");  // as config.parse_bool
      announce_graph(site);
      emit_line(names_line("before", tl_launch, label, site.kernel, tl_call));
      if (L.names_args > 0) describe_args(site, vals);
      return;
    }
    if (S.usable) record_side(S, site, vals, "before", label);
  } catch (const std::exception& e) {
    warn_once(S, "hook", std::string("instrumentation of ") + site.kernel + " failed: " + e.what());
  } catch (...) {
    warn_once(S, "hook", std::string("instrumentation of ") + site.kernel + " failed");
  }
}

[[maybe_unused]] void done(const Site& site, std::initializer_list<Value> vals) {
  if (site.sync) sync_device(site);  // a device error propagates, named
  Shared& S = shared();
  std::lock_guard<std::mutex> guard(S.mu);
  try {
    std::string label = graph_label(S, site);
    if (site.level == 3) {
      emit_line(names_line("after", tl_launch, label, site.kernel, tl_call));
      return;
    }
    if (S.usable) record_side(S, site, vals, "after", label);
  } catch (const std::exception& e) {
    warn_once(S, "hook", std::string("instrumentation of ") + site.kernel + " failed: " + e.what());
  } catch (...) {
    warn_once(S, "hook", std::string("instrumentation of ") + site.kernel + " failed");
  }
}

#endif  // _WIN32
}  // namespace
}  // namespace aoti_debug_rt_1

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#endif  // AOTI_DEBUG_RUNTIME_V1
