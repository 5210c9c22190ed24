// zip's CRC-32: carry-less multiplication folding where the CPU has it (checked against
// the table at first use), else slicing-by-8; large buffers in parallel parts combined
// with crc32_combine (zlib).
#ifndef AOTI_DEBUG_PART_CRC_H
#define AOTI_DEBUG_PART_CRC_H

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#include <immintrin.h>  // the carry-less multiply (target attribute, checked at run time)
#endif

#include "constants.h"
#include "threads.h"

namespace AOTI_DEBUG_NS {
namespace {

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

}  // namespace
}  // namespace AOTI_DEBUG_NS

#endif  // AOTI_DEBUG_PART_CRC_H
