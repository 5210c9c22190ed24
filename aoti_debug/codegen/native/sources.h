// Copies of a graph's generated source in the run directory, for replay
// (runtime/sources.py is the Python writer's side of the same layout):
//   <run>/sources/<graph>/<wrapper>.cpp and the .cpp files beside it (AOTInductor's
//   kernels), and run.json graphs[<graph>]["sources"] = {file name: sha256}.
// Replay runs only these copies, checked against their hashes. Once per graph and run.
#ifndef AOTI_DEBUG_PART_SOURCES_H
#define AOTI_DEBUG_PART_SOURCES_H

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "constants.h"
#include "json.h"
#include "own_dir.h"
#include "state.h"
#include "text.h"

namespace AOTI_DEBUG_NS {
namespace {

// FIPS 180-4 SHA-256, hex digest of `data`.
std::string sha256_hex(const std::string& data) {
  static const uint32_t K[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  std::string m = data;
  uint64_t bits = static_cast<uint64_t>(data.size()) * 8;
  m.push_back(static_cast<char>(0x80));
  while (m.size() % 64 != 56) m.push_back('\0');
  for (int i = 7; i >= 0; --i) m.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  for (size_t off = 0; off < m.size(); off += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      const unsigned char* p = reinterpret_cast<const unsigned char*>(m.data() + off + 4 * i);
      w[i] = (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
    }
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint32_t v : h)
    for (int i = 28; i >= 0; i -= 4) out.push_back(hex[(v >> i) & 0xf]);
  return out;
}

// runtime.sources.FILE_NAME: [A-Za-z0-9_][A-Za-z0-9_.-]{0,199}
bool plain_file_name(const std::string& n) {
  if (n.empty() || n.size() > 200) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
              (i > 0 && (c == '.' || c == '-'));
    if (!ok) return false;
  }
  return true;
}

// runtime.sources.graph_folder: sources/<the graph's label before any "/", sanitised>
std::string source_folder(const std::string& label) {
  std::string base = label.substr(0, label.find('/'));
  std::string out;
  for (char c : base) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-';
    out.push_back(ok ? c : '_');
  }
  size_t dots = out.find_first_not_of('.');
  out = dots == std::string::npos ? std::string() : out.substr(dots);
  return std::string("sources/") + (out.empty() ? "graph" : out);
}

bool read_small_file(const std::string& path, std::string& out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char buf[65536];
  size_t n;
  out.clear();
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    out.append(buf, n);
    if (out.size() > (size_t(64) << 20)) break;
  }
  bool ok = !std::ferror(f) && out.size() <= (size_t(64) << 20);
  std::fclose(f);
  return ok;
}

// The folder `rel` ("sources/<graph>") below the run directory `run_fd`, made where
// missing and opened part by part with open_own_dir; -1 with `why` set where refused.
int open_source_folder(int run_fd, const std::string& rel, std::string& why) {
  int dir = ::fcntl(run_fd, F_DUPFD_CLOEXEC, 0);
  if (dir < 0) {
    why = errno_text(errno);
    return -1;
  }
  size_t start = 0;
  while (start <= rel.size()) {
    size_t slash = rel.find('/', start);
    std::string part = rel.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    ::mkdirat(dir, part.c_str(), 0755);  // EEXIST: made earlier, or planted (open_own_dir tells)
    int inner = open_own_dir(dir, part.c_str(), why);
    if (inner < 0 && why.empty()) why = errno_text(errno);
    ::close(dir);
    if (inner < 0) return -1;
    dir = inner;
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return dir;
}

// Caller holds S.mu. Copies a C++ wrapper `file` and the .cpp files beside it into the
// run directory (through S.dir_fd, never a path); returns run.json's
// `{"name": "sha256", ...}`, or "" where the wrapper could not be copied (warned once:
// replay then says the dump holds no verified copy).
std::string copy_sources(Shared& S, const std::string& label, const std::string& file) {
  size_t slash = file.rfind('/');
  std::string dir = slash == std::string::npos ? "." : file.substr(0, slash);
  std::string main = slash == std::string::npos ? file : file.substr(slash + 1);
  if (main.size() < 5 || main.compare(main.size() - 4, 4, ".cpp") != 0) return "";  // a .so: no source left
  if (S.dir_fd < 0) return "";
  std::vector<std::string> names{main};
  if (DIR* d = ::opendir(dir.c_str())) {
    std::vector<std::string> beside;
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != main && n.size() > 4 && n.compare(n.size() - 4, 4, ".cpp") == 0) beside.push_back(n);
    }
    ::closedir(d);
    std::sort(beside.begin(), beside.end());
    names.insert(names.end(), beside.begin(), beside.end());
  }
  std::string why;
  int folder = open_source_folder(S.dir_fd, source_folder(label), why);
  if (folder < 0) {
    warn_once(S, "source-copy", "cannot keep a copy of " + file + " for replay: " + S.path + "/" +
                                    source_folder(label) + ": " + why);
    return "";
  }
  std::string o = "{";
  bool any = false;
  for (size_t i = 0; i < names.size(); ++i) {
    std::string data, err;
    bool ok = plain_file_name(names[i]) && read_small_file(dir + "/" + names[i], data) &&
              write_file_atomic_at(folder, names[i].c_str(), names[i], data, err);
    if (!ok) {
      if (i == 0) {
        ::close(folder);
        warn_once(S, "source-copy", "cannot keep a copy of " + file + " for replay" + (err.empty() ? "" : ": " + err));
        return "";
      }
      continue;
    }
    if (any) o += ", ";
    json_str(o, names[i]);
    o += ": ";
    json_str(o, sha256_hex(data));
    any = true;
  }
  ::close(folder);
  return o + "}";
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_SOURCES_H
