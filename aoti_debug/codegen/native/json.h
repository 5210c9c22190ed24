// JSON values as both writers spell them: strings escaped as Python's json module
// does for what we write, doubles as Python's repr (the shortest round trip), stats
// with null for NaN (format.schema.Stats) and the strings "inf"/"-inf" for infinities
// (format.schema._jsonable: one policy for non-finite values in both writers).
#ifndef AOTI_DEBUG_PART_JSON_H
#define AOTI_DEBUG_PART_JSON_H

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "constants.h"

namespace AOTI_DEBUG_NS {
namespace {

// The first byte at or after `p` (and before `end`) that a JSON string must escape: a
// control character, '"' or '\\'. Eight bytes at a time (kernel names are long).
inline const unsigned char* json_plain_end(const unsigned char* p, const unsigned char* end) {
  constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
  for (; end - p >= 8; p += 8) {
    uint64_t x;
    std::memcpy(&x, p, 8);
    uint64_t quote = x ^ (kOnes * '"'), slash = x ^ (kOnes * '\\');
    // a byte < 0x20, or a zero byte of `quote` or `slash` (bytes >= 0x80 never count)
    uint64_t hit = ((x - kOnes * 0x20) | (quote - kOnes) | (slash - kOnes)) & ~x & kHigh;
    if (hit) break;
  }
  while (p < end && *p >= 0x20 && *p != '"' && *p != '\\') ++p;
  return p;
}

void json_str(std::string& out, const char* s) {
  out.push_back('"');
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s);
  const unsigned char* end = p + std::strlen(s);
  for (;;) {
    // Characters that need no escape are copied a run at a time.
    const unsigned char* run = p;
    p = json_plain_end(p, end);
    out.append(reinterpret_cast<const char*>(run), static_cast<size_t>(p - run));
    if (p == end) break;
    unsigned char c = *p++;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default: {
        char b[8];
        std::snprintf(b, sizeof(b), "\\u%04x", c);
        out += b;
      }
    }
  }
  out.push_back('"');
}

void json_str(std::string& out, const std::string& s) { json_str(out, s.c_str()); }

// Appends the shortest text that reads back to the same double (what Python's repr
// gives), without a temporary string: records write several per value.
void json_double(std::string& out, double v) {
  char buf[40];
#if defined(__cpp_lib_to_chars) && __cpp_lib_to_chars >= 201611L
  char* end = std::to_chars(buf, buf + sizeof(buf), v).ptr;
#else
  char* end = buf + std::snprintf(buf, sizeof(buf), "%.17g", v);  // exact, not always the shortest
#endif
  bool plain = true;  // an integral value: Python writes "3.0", to_chars "3"
  for (const char* c = buf; c < end; ++c) plain &= *c != '.' && *c != 'e' && *c != 'n' && *c != 'i';
  out.append(buf, static_cast<size_t>(end - buf));
  if (plain) out += ".0";
}

std::string fmt_double(double v) {
  std::string s;
  json_double(s, v);
  return s;
}

void json_int(std::string& out, int64_t v) {
  char buf[24];
  out.append(buf, static_cast<size_t>(std::to_chars(buf, buf + sizeof(buf), v).ptr - buf));
}

// A JSON number for a stat: null when NaN (Python's summary_to_stats gives None).
void json_stat(std::string& out, double v) {
  if (v != v) {
    out += "null";
  } else if (std::isinf(v)) {
    out += v > 0 ? "\"inf\"" : "\"-inf\"";
  } else {
    json_double(out, v);
  }
}

void json_ints(std::string& o, const int64_t* v, size_t n) {
  o += "[";
  for (size_t i = 0; i < n; ++i) {
    if (i) o += ",";
    json_int(o, v[i]);
  }
  o += "]";
}

void json_ints(std::string& o, const std::vector<int64_t>& v) { json_ints(o, v.data(), v.size()); }

// `"key":` for a key from the generated schema names, with the separator before it.
std::string json_key(const char* key, const char* before = ",") {
  std::string k = before;
  json_str(k, key);
  return k + ":";
}

// A compact JSON object built key by key; keys come from the generated schema names
// (constants.h), so a renamed field in format/schema.py fails this build.
class JsonObject {
 public:
  JsonObject() {
    s_.reserve(512);  // a record's size: no regrowth while it is built
    s_.push_back('{');
  }
  JsonObject& key(const char* k) {
    if (s_.size() > 1) s_.push_back(',');
    json_str(s_, k);
    s_.push_back(':');
    return *this;
  }
  JsonObject& str(const char* k, const char* v) {
    key(k);
    json_str(s_, v);
    return *this;
  }
  JsonObject& str(const char* k, const std::string& v) { return str(k, v.c_str()); }
  JsonObject& num(const char* k, int64_t v) {
    key(k);
    json_int(s_, v);
    return *this;
  }
  JsonObject& boolean(const char* k, bool v) {
    key(k);
    s_ += v ? "true" : "false";
    return *this;
  }
  JsonObject& raw(const char* k, const std::string& json) {
    key(k);
    s_ += json;
    return *this;
  }
  JsonObject& ints(const char* k, const std::vector<int64_t>& v) {
    key(k);
    json_ints(s_, v);
    return *this;
  }
  // Writes the key and hands back the text, for the caller to append the value's JSON.
  std::string& value(const char* k) {
    key(k);
    return s_;
  }
  // Appends fields encoded already (`inner()` of another object) as fields of this one.
  JsonObject& fields(const std::string& text) {
    if (s_.size() > 1 && !text.empty()) s_.push_back(',');
    s_ += text;
    return *this;
  }
  // The fields, without the braces.
  std::string inner() const { return s_.substr(1); }
  size_t size() const { return s_.size(); }  // of the text so far (close() adds one byte)
  std::string close() const { return s_ + "}"; }
  // Appends the closed object to `out` (no copy of its own).
  void close_into(std::string& out) const {
    out += s_;
    out += '}';
  }

 private:
  std::string s_;
};

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_JSON_H
