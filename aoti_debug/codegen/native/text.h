// Small text and I/O helpers: whole-line writes to stderr, errno and environment text,
// file-name-safe names (format.schema.sanitize, format.writer.clean_run_id) and the
// number formats of the print and names lines.
#ifndef AOTI_DEBUG_PART_TEXT_H
#define AOTI_DEBUG_PART_TEXT_H

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "constants.h"

namespace AOTI_DEBUG_NS {
namespace {

// All `n` bytes at `p` to `fd` (one write unless the system takes part of it): 0, or the
// errno of the write that failed (ENOSPC for one that wrote nothing).
int write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : ENOSPC;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

void write_fd(int fd, const char* p, size_t n) { write_all(fd, p, n); }

// Whole lines, each with its newline, to stderr in one write (a side's print lines).
void write_prints(const std::string& lines) {
  if (lines.empty()) return;
  std::fflush(stderr);
  write_fd(2, lines.data(), lines.size());
}

// One write per line: a line is never interleaved and is out before the next kernel runs.
void emit_line(const std::string& line) { write_prints(line + "\n"); }

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

// How a value from the environment is shown in a warning (Python's repr for plain text).
std::string env_shown(const std::string& v) { return "'" + v + "'"; }

// What config.py strips around a number (C's isspace).
std::string trim_space(const std::string& v) {
  size_t b = v.find_first_not_of(" \t\n\r\v\f");
  if (b == std::string::npos) return "";
  size_t e = v.find_last_not_of(" \t\n\r\v\f");
  return v.substr(b, e - b + 1);
}

// Runs of bytes other than [A-Za-z0-9] and `keep` -> "_", the bytes of `keep` stripped at
// both ends, cut at `limit`; "" when nothing is left. What sanitize and clean_run_id share.
std::string squash(const char* text, const char* keep, size_t limit) {
  std::string out;
  bool in_bad = false;
  for (const char* p = text; *p; ++p) {
    char c = *p;
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || std::strchr(keep, c);
    if (ok) {
      out.push_back(c);
      in_bad = false;
    } else if (!in_bad) {
      out.push_back('_');
      in_bad = true;
    }
  }
  size_t b = out.find_first_not_of(keep);
  if (b == std::string::npos) return "";
  size_t e = out.find_last_not_of(keep);
  out = out.substr(b, e - b + 1);
  if (out.size() > limit) out.resize(limit);
  return out;
}

// format.schema.sanitize: runs of [^A-Za-z0-9_.] -> "_", strip "._", cut; "x" if empty.
std::string sanitize(const char* name, size_t limit) {
  std::string out = squash(name, "._", limit);
  return out.empty() ? "x" : out;
}

// format.writer.clean_run_id: AOTI_DEBUG_RUN_ID as one directory name, "" when nothing is
// left. Runs of bytes other than [A-Za-z0-9_.-] -> "_", "._-" stripped at both ends, cut
// at schema::kRunIdLimit: no "..", "/" or absolute path survives.
std::string clean_run_id(const std::string& raw) {
  return squash(raw.c_str(), "._-", static_cast<size_t>(schema::kRunIdLimit));
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

std::string shape_text(const std::vector<int64_t>& shape) {
  if (shape.empty()) return "scalar";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += "x";
    s += std::to_string(shape[i]);
  }
  return s;
}

// printf's "%.6g" (Python's f"{v:.6g}"), "-" for NaN; appended to `out`.
void fmt6_into(std::string& out, double v) {
  if (v != v) {
    out += '-';
    return;
  }
  char buf[40];
#if defined(__cpp_lib_to_chars) && __cpp_lib_to_chars >= 201611L
  out.append(buf, static_cast<size_t>(std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::general, 6).ptr - buf));
#else
  out.append(buf, static_cast<size_t>(std::snprintf(buf, sizeof(buf), "%.6g", v)));
#endif
}

std::string fmt6(double v) {
  std::string s;
  fmt6_into(s, v);
  return s;
}

std::string pad_phase(const char* phase) {
  std::string p = phase;
  while (p.size() < 6) p.push_back(' ');
  return p;
}

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_TEXT_H
