// The environment values the runtime reads when the model runs, parsed as config.py
// parses them (config.parse_bool, parse_max_bytes, parse_count): a bad value warns
// once, naming the variable, and the default is used.
#ifndef AOTI_DEBUG_PART_ENV_H
#define AOTI_DEBUG_PART_ENV_H

#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "constants.h"
#include "state.h"
#include "text.h"

namespace AOTI_DEBUG_NS {
namespace {

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
  const char* name = schema::env::kMaxBytes;
  std::string raw = env_str(name);
  std::string v = trim_space(raw);
  if (v.empty()) return -1;
  if (!plain_number(v)) {
    warn_once(S, std::string("env-") + name, std::string(name) + "=" + env_shown(raw) +
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

// config.parse_launch_ranges: "12", "10..14", "40.." or several, comma-separated
// (config._RANGE_RE per part: up to 18 digits, then ".." and up to 18 digits); inclusive
// (first, last) ranges, last -1 for an open end. Unset: empty (save all). Anything else
// warns once, naming the variable, and every launch is saved.
std::vector<std::pair<int64_t, int64_t>> parse_save_launches(Shared& S) {
  const char* name = schema::env::kSaveLaunches;
  std::string raw = env_str(name);
  std::string v = trim_space(raw);
  std::vector<std::pair<int64_t, int64_t>> out;
  if (v.empty()) return out;
  auto number = [](const std::string& t, size_t& i, int64_t& x) {
    size_t k = i;
    x = 0;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9' && i - k < 18) x = x * 10 + (t[i++] - '0');
    return i > k && !(i < t.size() && t[i] >= '0' && t[i] <= '9');
  };
  size_t start = 0;
  while (true) {
    size_t comma = v.find(',', start);
    std::string part = trim_space(v.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    size_t i = 0;
    int64_t lo = 0, hi = 0;
    bool ok = number(part, i, lo);
    if (ok && i == part.size()) {
      hi = lo;
    } else if (ok && part.compare(i, 2, "..") == 0) {
      i += 2;
      if (i == part.size()) hi = -1;
      else ok = number(part, i, hi) && i == part.size() && hi >= lo;
    } else {
      ok = false;
    }
    if (!ok) {
      warn_once(S, std::string("env-") + name, std::string(name) + "=" + env_shown(raw) +
                " is not a list of launches such as 10..14,40..; every launch's tensors are saved");
      return {};
    }
    out.emplace_back(lo, hi);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// config.parse_ring: AOTI_DEBUG_RING, a whole number from 0 to config.MAX_RING (up to 9
// digits, "+" allowed); 0 when unset, empty or 0 (no ring). Anything else warns once,
// naming the variable, and the ring is off.
int64_t parse_ring(Shared& S) {
  const char* name = schema::env::kRing;
  std::string raw = env_str(name);
  std::string v = trim_space(raw);
  if (v.empty()) return 0;
  size_t i = v[0] == '+' ? 1 : 0;
  bool ok = v.size() > i && v.size() - i <= 9 && v.find_first_not_of("0123456789", i) == std::string::npos;
  long long x = ok ? std::strtoll(v.c_str() + i, nullptr, 10) : -1;
  if (!ok || x > schema::flight::kMaxRing) {
    warn_once(S, std::string("env-") + name, std::string(name) + "=" + env_shown(raw) +
              " is not a number of graph calls (a whole number from 1 to " + std::to_string(schema::flight::kMaxRing) +
              "; 0 turns the ring off); the ring is off (every record is written as it comes)");
    return 0;
  }
  return x;
}

// config.parse_trigger: AOTI_DEBUG_TRIGGER, nonfinite (any case, spaces trimmed) or unset.
// Anything else warns once, naming the variable, and there is no trigger.
bool parse_trigger(Shared& S) {
  const char* name = schema::env::kTrigger;
  std::string raw = env_str(name);
  std::string v = trim_space(raw);
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v.empty()) return false;
  if (v == schema::flight::kNonfinite) return true;
  warn_once(S, std::string("env-") + name, std::string(name) + "=" + env_shown(raw) + ": expected one of " +
            schema::flight::kNonfinite + "; no trigger is used");
  return false;
}

// RunSettings.saves: whether level save writes the tensor files of `launch`.
bool saves_launch(const Shared& S, int64_t launch) {
  if (S.save_launches.empty()) return true;
  for (const auto& r : S.save_launches)
    if (r.first <= launch && (r.second < 0 || launch <= r.second)) return true;
  return false;
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

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_ENV_H
