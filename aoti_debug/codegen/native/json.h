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
#include <string>
#include <vector>

#include "constants.h"

namespace AOTI_DEBUG_NS {
namespace {

void json_str(std::string& out, const char* s) {
  out.push_back('"');
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s);
  for (;;) {
    // Characters that need no escape are copied a run at a time (kernel names are long).
    const unsigned char* run = p;
    while (*p >= 0x20 && *p != '"' && *p != '\\') ++p;
    out.append(reinterpret_cast<const char*>(run), static_cast<size_t>(p - run));
    unsigned char c = *p;
    if (!c) break;
    ++p;
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
    out += v > 0 ? "\"inf\"" : "\"-inf\"";
  } else {
    out += fmt_double(v);
  }
}

void json_ints(std::string& o, const std::vector<int64_t>& v) {
  o += "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) o += ",";
    o += std::to_string(v[i]);
  }
  o += "]";
}

// A compact JSON object built key by key; keys come from the generated schema names
// (constants.h), so a renamed field in format/schema.py fails this build.
class JsonObject {
 public:
  JsonObject() : s_("{") {}
  JsonObject& key(const char* k) {
    if (s_.size() > 1) s_.push_back(',');
    json_str(s_, k);
    s_.push_back(':');
    return *this;
  }
  JsonObject& str(const char* k, const std::string& v) {
    key(k);
    json_str(s_, v);
    return *this;
  }
  JsonObject& num(const char* k, int64_t v) {
    key(k);
    s_ += std::to_string(v);
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
  std::string close() const { return s_ + "}"; }

 private:
  std::string s_;
};

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_JSON_H
