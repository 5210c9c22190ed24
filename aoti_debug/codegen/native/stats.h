// Stats + checksum (runtime/stats.py): min/max/mean/std/absmax over finite values, nan
// and inf counts, checksum = sum_i bits_i*(2i+1) mod 2^64. min/max/absmax/nan/inf and the
// checksum are exact and equal to the Python runtime's; mean/std are computed in double
// with compensated sums, so they may differ from torch's reduction order in the last bits.
//
// Floating types of 32 bits and less go through one kernel written with GCC vector
// extensions (float_block; the same loop scalar elsewhere): one pass over each block of 2048 values that keeps min/max,
// counts, moments about a shift in double and the checksum, with no multiply per
// element; it reads every value as the Python runtime does, half, bfloat16 and float8
// widened to float32 exactly (F16In, BF16In, F8In), complex as pairs of reals. float64
// and integers take two scalar passes and an integer checksum pass. Measured with
// AVX2 (GCC 12, one core, L2-resident float32): 0.35-0.5 ns per element, was 1.3.
#ifndef AOTI_DEBUG_PART_STATS_H
#define AOTI_DEBUG_PART_STATS_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "constants.h"
#include "dtypes.h"
#include "interface.h"
#include "json.h"
#include "text.h"
#include "threads.h"

namespace AOTI_DEBUG_NS {
namespace {

struct Summary {
  double mn = NAN, mx = NAN, mean = NAN, sd = NAN, absmax = NAN;
  int64_t nan = 0, inf = 0;
  uint64_t checksum = 0;
};

// A count the stats kernel wrote as a double, as a record holds it (stats.stats_fields:
// int(value)); 0 for a value no count can be (a row that was never written).
inline int64_t row_count(double v) { return v == v && std::fabs(v) < 9.2e18 ? static_cast<int64_t>(v) : 0; }

// One row of the stats kernel's results (runtime/fused_stats.py): min, max, mean, std,
// absmax, nan count, inf count as doubles; its checksum comes from the checksum column.
Summary row_summary(const double* row, uint64_t checksum) {
  Summary sm;
  sm.mn = row[0];
  sm.mx = row[1];
  sm.mean = row[2];
  sm.sd = row[3];
  sm.absmax = row[4];
  sm.nan = row_count(row[5]);
  sm.inf = row_count(row[6]);
  sm.checksum = checksum;
  return sm;
}

// format.schema.Stats as a JSON object, keys from schema::stat: what both runtimes
// write into a record (the Python runtime gets it through cpu_summary.h and cpu_records.h).
void append_stats_json(std::string& o, const Summary& sm) {
  namespace K = schema::stat;
  static const std::string kMin = json_key(K::kMin, "{"), kMax = json_key(K::kMax), kMean = json_key(K::kMean),
      kStd = json_key(K::kStd), kAbsmax = json_key(K::kAbsmax), kNan = json_key(K::kNan), kInf = json_key(K::kInf);
  for (const auto& [key, v] : {std::pair<const std::string*, double>{&kMin, sm.mn}, {&kMax, sm.mx},
                                {&kMean, sm.mean}, {&kStd, sm.sd}, {&kAbsmax, sm.absmax}}) {
    o += *key;
    json_stat(o, v);
  }
  o += kNan;
  json_int(o, sm.nan);
  o += kInf;
  json_int(o, sm.inf);
  o += "}";
}

std::string stats_json(const Summary& sm) {
  std::string o;
  append_stats_json(o, sm);
  return o;
}

// The checksum as a record spells it: 16 lower-case hex digits (stats.format_checksum).
void append_checksum(std::string& o, uint64_t v) {
  char buf[16];
  for (int i = 15; i >= 0; --i, v >>= 4) buf[i] = "0123456789abcdef"[v & 15];
  o.append(buf, 16);
}

// A record's stats and checksum after its other fields: `,"stats":{...},"checksum":"..."`
// (the Python runtime's CPU and device-ring records, cpu_records.h and ring_records.h).
void append_record_stats(std::string& o, const Summary& sm) {
  static const std::string kStats = json_key(schema::rec::kStats), kChecksum = json_key(schema::rec::kChecksum);
  o += kStats;
  append_stats_json(o, sm);
  o += kChecksum;
  o += '"';
  append_checksum(o, sm.checksum);
  o += '"';
}

// A level print line's stats (format.schema.print_stats): " min=... max=... mean=...
// std=... absmax=... nan=N inf=N", each float as "%.6g" spells it ("-" where it is none:
// NaN); null `sm`: a tensor without stats (memory no launch wrote), all "-" and counts 0.
void append_print_stats(std::string& o, const Summary* sm) {
  const double none = std::nan("");
  for (const auto& [name, v] : {std::pair<const char*, double>{" min=", sm ? sm->mn : none},
                                {" max=", sm ? sm->mx : none}, {" mean=", sm ? sm->mean : none},
                                {" std=", sm ? sm->sd : none}, {" absmax=", sm ? sm->absmax : none}}) {
    o += name;
    fmt6_into(o, v);
  }
  o += " nan=";
  json_int(o, sm ? sm->nan : 0);
  o += " inf=";
  json_int(o, sm ? sm->inf : 0);
}

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
constexpr int kLanes = AOTI_DEBUG_VB / 4;  // 32-bit lanes per vector
typedef float aoti_vf __attribute__((vector_size(AOTI_DEBUG_VB)));
typedef int32_t aoti_vi __attribute__((vector_size(AOTI_DEBUG_VB)));
typedef uint32_t aoti_vu __attribute__((vector_size(AOTI_DEBUG_VB)));
typedef uint16_t aoti_vs __attribute__((vector_size(AOTI_DEBUG_VB / 2)));
typedef double aoti_vd __attribute__((vector_size(AOTI_DEBUG_VB)));
typedef uint64_t aoti_vq __attribute__((vector_size(AOTI_DEBUG_VB)));
// kLanes doubles / uint64s, two vectors' worth: converting to these is one vcvtps2pd /
// vpmovzxdq per half (GCC 12 converts a half-width vector a pair of lanes at a time).
typedef double aoti_vdw __attribute__((vector_size(2 * AOTI_DEBUG_VB)));
typedef uint64_t aoti_vqw __attribute__((vector_size(2 * AOTI_DEBUG_VB)));

#if __GNUC__ >= 12
#define AOTI_DEBUG_HALVES(w, lo, hi) \
  do { \
    lo = __builtin_shufflevector(w, w, AOTI_DEBUG_LO); \
    hi = __builtin_shufflevector(w, w, AOTI_DEBUG_HI); \
  } while (0)
#if AOTI_DEBUG_VB == 32
#define AOTI_DEBUG_LO 0, 1, 2, 3
#define AOTI_DEBUG_HI 4, 5, 6, 7
#else
#define AOTI_DEBUG_LO 0, 1
#define AOTI_DEBUG_HI 2, 3
#endif
#else
#define AOTI_DEBUG_HALVES(w, lo, hi) \
  do { \
    std::memcpy(&lo, &w, AOTI_DEBUG_VB); \
    std::memcpy(&hi, reinterpret_cast<const char*>(&w) + AOTI_DEBUG_VB, AOTI_DEBUG_VB); \
  } while (0)
#endif

// float32 lanes -> two vectors of doubles; uint32 lanes -> two vectors of uint64
inline void widen(const aoti_vf& v, aoti_vd& lo, aoti_vd& hi) {
  aoti_vdw w = __builtin_convertvector(v, aoti_vdw);
  AOTI_DEBUG_HALVES(w, lo, hi);
}

inline void widen(const aoti_vu& v, aoti_vq& lo, aoti_vq& hi) {
  aoti_vqw w = __builtin_convertvector(v, aoti_vqw);
  AOTI_DEBUG_HALVES(w, lo, hi);
}
#endif

inline float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline bool f32_finite(uint32_t b) { return (b & 0x7f800000u) != 0x7f800000u; }
inline bool f32_nan(uint32_t b) { return (b & 0x7fffffffu) > 0x7f800000u; }

// IEEE half bits -> the float32 bits of the same value (exact; NaN payloads kept).
inline uint32_t half_bits(uint32_t h) {
  uint32_t sign = (h & 0x8000u) << 16, em = h & 0x7fffu;
  if (em >= 0x7c00u) return sign | 0x7f800000u | (em << 13);  // inf, nan
  if (em >= 0x0400u) return sign | ((em << 13) + (112u << 23));
  float sub = static_cast<float>(em) * 5.9604644775390625e-08f;  // em * 2^-24: subnormal or zero, exact
  uint32_t b;
  std::memcpy(&b, &sub, 4);
  return sign | b;
}

// The 256 values of a float8 format (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz) as float32 bits.
struct Fp8Table {
  uint32_t v[256];
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
      x = (sign && !(x != x)) ? -x : x;
      std::memcpy(&v[b], &x, 4);
    }
  }
};

const uint32_t* fp8_table(int32_t dt) {
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

// The i-th element of type U at `p`, whatever the alignment.
template <class U>
inline U bits_at(const unsigned char* p, int64_t i) {
  U b;
  std::memcpy(&b, p + static_cast<int64_t>(sizeof(U)) * i, sizeof(U));
  return b;
}

// How the float kernel reads one element type: `fbits(i)` is element i as float32 bits
// (exact: every type here widens to float32 without rounding), `cbits(i)` its checksum
// unit (the raw bits, zero-extended); `load` the same for kLanes elements at once.
struct F32In {
  const unsigned char* p;
  uint32_t fbits(int64_t i) const { return bits_at<uint32_t>(p, i); }
  uint32_t cbits(int64_t i) const { return fbits(i); }
#ifdef AOTI_DEBUG_VB
  void load(int64_t i, aoti_vu& f, aoti_vu& c) const {
    std::memcpy(&f, p + 4 * i, AOTI_DEBUG_VB);
    c = f;
  }
#endif
};

// 16-bit elements: their raw bits are the checksum unit.
struct Bits16In {
  const unsigned char* p;
  uint32_t cbits(int64_t i) const { return bits_at<uint16_t>(p, i); }
#ifdef AOTI_DEBUG_VB
  aoti_vu cbits_lanes(int64_t i) const {
    aoti_vs s;
    std::memcpy(&s, p + 2 * i, AOTI_DEBUG_VB / 2);
    return __builtin_convertvector(s, aoti_vu);
  }
#endif
};

struct BF16In : Bits16In {
  uint32_t fbits(int64_t i) const { return cbits(i) << 16; }
#ifdef AOTI_DEBUG_VB
  void load(int64_t i, aoti_vu& f, aoti_vu& c) const {
    c = cbits_lanes(i);
    f = c << 16;
  }
#endif
};

struct F16In : Bits16In {
  uint32_t fbits(int64_t i) const { return half_bits(cbits(i)); }
#ifdef AOTI_DEBUG_VB
  void load(int64_t i, aoti_vu& f, aoti_vu& c) const {  // half_bits, lane by lane
    c = cbits_lanes(i);
    aoti_vu sign = (c & 0x8000u) << 16, em = c & 0x7fffu;
    aoti_vf sub = __builtin_convertvector((aoti_vi)em, aoti_vf) * 5.9604644775390625e-08f;
    aoti_vu subbits;
    std::memcpy(&subbits, &sub, AOTI_DEBUG_VB);
    aoti_vu normal = (em << 13) + (112u << 23), special = (em << 13) | 0x7f800000u;
    f = sign | (em >= 0x7c00u ? special : em >= 0x0400u ? normal : subbits);
  }
#endif
};

struct F8In {
  const unsigned char* p;
  const uint32_t* table;
  uint32_t cbits(int64_t i) const { return p[i]; }
  uint32_t fbits(int64_t i) const { return table[p[i]]; }
#ifdef AOTI_DEBUG_VB
  void load(int64_t i, aoti_vu& f, aoti_vu& c) const {
    for (int l = 0; l < kLanes; ++l) {
      c[l] = p[i + l];
      f[l] = table[p[i + l]];
    }
  }
#endif
};

// One block of float values in one pass over memory: counts, min/max, the first two
// moments about a shift c (the block's first finite value), from which the block's sum
// of squared deviations is d2 - d1^2/n (the shifted-data algorithm: with c a sample of
// the data, as accurate as two passes for anything but pathological blocks), and the
// block's share of the checksum. A lane that is not finite holds c instead: it adds 0
// to the moments and cannot be a min or a max, so the vector loop needs one select per
// vector and no masks in double. The checksum needs no multiply per element:
// sum_k k*bits_k over R rounds of L lanes is, per lane, R*A - B with A the running sum
// of its bits and B the sum of A after each round, plus the lane's offset times A.
struct BlockStats {
  int64_t count = 0, nan = 0;
  double mn = INFINITY, mx = -INFINITY, c = 0, d1 = 0, d2 = 0;
  uint64_t checksum = 0;  // sum over the block of bits * (2 * absolute index + 1)
};

template <class In>
void float_block(const In& in, int64_t b0, int64_t m, BlockStats& a) {
  float cf = 0;
  for (int64_t k = 0; k < m; ++k) {
    uint32_t b = in.fbits(b0 + k);
    if (f32_finite(b)) {
      cf = bits_to_float(b);
      break;
    }
  }
  const double c = cf;
  a.c = c;
  uint64_t plain = 0, weighted = 0;  // sum of bits, sum of k * bits (k: index in the block)
  int64_t k = 0;
#ifdef AOTI_DEBUG_VB
  if (m >= kLanes) {
    const aoti_vf vcf = aoti_vf{} + cf;
    const aoti_vd vc = aoti_vd{} + c;
    aoti_vf vmin = vcf, vmax = vcf;
    aoti_vi vcount = {};
    aoti_vd t0 = {}, t1 = {}, q0 = {}, q1 = {};
    aoti_vq sum0 = {}, sum1 = {}, sums0 = {}, sums1 = {};
    const int64_t end = m / kLanes * kLanes;
    for (; k < end; k += kLanes) {
      aoti_vu fb, cb;
      in.load(b0 + k, fb, cb);
      aoti_vi fin = (fb & 0x7f800000u) != 0x7f800000u;
      aoti_vf x;
      std::memcpy(&x, &fb, AOTI_DEBUG_VB);
      x = fin ? x : vcf;
      vmin = x < vmin ? x : vmin;
      vmax = x > vmax ? x : vmax;
      vcount -= fin;
      aoti_vd lo, hi;
      widen(x, lo, hi);
      lo -= vc;
      hi -= vc;
      t0 += lo;
      t1 += hi;
      q0 += lo * lo;
      q1 += hi * hi;
      aoti_vq ul, uh;
      widen(cb, ul, uh);
      sum0 += ul;
      sum1 += uh;
      sums0 += sum0;
      sums1 += sum1;
    }
    const uint64_t rounds = static_cast<uint64_t>(end / kLanes);
    constexpr int H = kLanes / 2;
    for (int j = 0; j < H; ++j) {
      plain += sum0[j] + sum1[j];
      weighted += kLanes * (rounds * sum0[j] - sums0[j]) + static_cast<uint64_t>(j) * sum0[j];
      weighted += kLanes * (rounds * sum1[j] - sums1[j]) + static_cast<uint64_t>(j + H) * sum1[j];
      a.d1 += t0[j] + t1[j];
      a.d2 += q0[j] + q1[j];
    }
    for (int l = 0; l < kLanes; ++l) a.count += vcount[l];
    if (a.count) {
      for (int l = 0; l < kLanes; ++l) {
        a.mn = std::min<double>(a.mn, vmin[l]);
        a.mx = std::max<double>(a.mx, vmax[l]);
      }
    }
  }
#endif
  for (; k < m; ++k) {
    uint32_t cb = in.cbits(b0 + k);
    plain += cb;
    weighted += static_cast<uint64_t>(k) * cb;
    uint32_t b = in.fbits(b0 + k);
    if (f32_finite(b)) {
      double v = bits_to_float(b);
      ++a.count;
      a.mn = v < a.mn ? v : a.mn;
      a.mx = v > a.mx ? v : a.mx;
      a.d1 += v - c;
      a.d2 += (v - c) * (v - c);
    }
  }
  if (a.count < m) {  // something is not finite: count the NaNs (the rest is inf)
    for (k = 0; k < m; ++k) a.nan += f32_nan(in.fbits(b0 + k));
  }
  a.checksum = (2 * static_cast<uint64_t>(b0) + 1) * plain + 2 * weighted;
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

// Float values a block at a time, each block read from memory once (float_block), merged
// across blocks with Chan et al.'s pairwise update; the mean from the compensated total.
struct BlockMoments {
  FloatAcc a;
  int64_t n = 0;
  double mean = 0, m2 = 0;
  void add(const BlockStats& b) {
    a.count += b.count;
    a.nan += b.nan;
    a.mn = std::min(a.mn, b.mn);
    a.mx = std::max(a.mx, b.mx);
    if (b.count == 0) return;
    double cn = b.c * static_cast<double>(b.count);  // exact: a float times at most 2^11
    a.total.add(cn);
    a.total.add(b.d1);
    double bmean = b.c + b.d1 / static_cast<double>(b.count);
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

// Float values of any width, read through `in` (F32In, BF16In, F16In, F8In).
template <class In>
void float_summary(const In& in, int64_t n, Summary& out) {
  BlockMoments bm;
  uint64_t ck = 0;
  over_blocks(n, bm, ck, [&](int64_t b, int64_t e, BlockMoments& m, uint64_t& c) {
    for (int64_t blk = b; blk < e; ++blk) {
      BlockStats s;
      int64_t b0 = blk * kBlock;
      float_block(in, b0, std::min(n - b0, kBlock), s);
      m.add(s);
      c += s.checksum;
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
      float_summary(F32In{static_cast<const unsigned char*>(data)}, n, s);
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
      float_summary(F16In{{static_cast<const unsigned char*>(data)}}, n, s);
      return true;
    case kBF16:
      float_summary(BF16In{{static_cast<const unsigned char*>(data)}}, n, s);
      return true;
    case kF8E4M3FN:
    case kF8E5M2:
    case kF8E4M3FNUZ:
    case kF8E5M2FNUZ:
      float_summary(F8In{static_cast<const unsigned char*>(data), fp8_table(dt)}, n, s);
      return true;
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

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_STATS_H
