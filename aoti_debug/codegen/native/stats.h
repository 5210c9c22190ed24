// Stats + checksum (runtime/stats.py): min/max/mean/std/absmax over finite values, nan
// and inf counts, checksum = sum_i bits_i*(2i+1) mod 2^64. min/max/absmax/nan/inf and the
// checksum are exact and equal to the Python runtime's; mean/std are computed in double
// with compensated sums, so they may differ from torch's reduction order in the last bits.
//
// Floating types go through one float32 (or float64) kernel written with GCC/Clang
// vector extensions: per 8 lanes it masks out NaN/Inf by their bits (immune to
// -ffast-math), keeps min/max, counts, and sums in double; a second pass sums squared
// deviations. The checksum is its own integer pass over the raw bits. Every value is
// read as the Python runtime reads it: half, bfloat16 and float8 widened to float32
// exactly, complex as pairs of reals.
#ifndef AOTI_DEBUG_PART_STATS_H
#define AOTI_DEBUG_PART_STATS_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "constants.h"
#include "dtypes.h"
#include "interface.h"
#include "json.h"
#include "threads.h"

namespace AOTI_DEBUG_NS {
namespace {

struct Summary {
  double mn = NAN, mx = NAN, mean = NAN, sd = NAN, absmax = NAN;
  int64_t nan = 0, inf = 0;
  uint64_t checksum = 0;
};

// format.schema.Stats as a JSON object, keys from schema::stat: what both runtimes
// write into a record (the Python runtime gets it through cpu_summary.h).
std::string stats_json(const Summary& sm) {
  namespace K = schema::stat;
  std::string o = "{";
  auto stat = [&](const char* k, double v) {
    if (o.size() > 1) o += ",";
    json_str(o, k);
    o += ":";
    json_stat(o, v);
  };
  stat(K::kMin, sm.mn);
  stat(K::kMax, sm.mx);
  stat(K::kMean, sm.mean);
  stat(K::kStd, sm.sd);
  stat(K::kAbsmax, sm.absmax);
  o += ",";
  json_str(o, K::kNan);
  o += ":" + std::to_string(sm.nan) + ",";
  json_str(o, K::kInf);
  o += ":" + std::to_string(sm.inf) + "}";
  return o;
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

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_STATS_H
