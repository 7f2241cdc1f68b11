// The int4 kernel's body, on raw pointers: int4_linear.cpp wraps it as an op, decode_step.cpp
// calls it once per projection of a fused decode step. See int4_linear.cpp for the why.
#pragma once  // the includer checks for AVX-512 first

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "activations.h"

namespace {
namespace int4k {

constexpr int64_t kGroup = 32;
constexpr int64_t kRows = 16;     // rows per tile: one per int32 lane
constexpr int64_t kTile = 320;    // bytes per tile and group: 4 x 64 of nibbles, 16 fp16 scales, 16 fp16 mins
constexpr int64_t kTokens = 4;    // tokens per pass over a tile's weights (their sums stay in registers)
constexpr int64_t kTaskBytes = 1 << 15;

// Packing (quant.py): byte 16 * 4 * j + 4 * r + t of a tile's group holds, for row r of the tile,
// weight 4j + t of the group in its low nibble and weight 16 + 4j + t in its high one. So the low
// nibbles of the j-th 64 bytes meet the group's activations 4j..4j+3 in every lane, the high ones
// 16+4j..16+4j+3. The high nibbles are used in place (16 q), their sums shifted back by 4: exact.

// Each token's activations as int16 bytes (hi and lo [M, K]), its step, and its sum per group [M, groups].
void round_tokens(const float* x, int64_t M, int64_t K, int8_t* hi, int8_t* lo, float* step, float* sum) {
  const int64_t groups = K / kGroup;
  for (int64_t m = 0; m < M; ++m) step[m] = split_int16(x + m * K, K, K, hi + m * K, lo + m * K);
  for (int64_t i = 0; i < M * groups; ++i)
    sum[i] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_loadu_ps(x + i * kGroup), _mm512_loadu_ps(x + i * kGroup + 16)));
}

// Tiles [t0, t1) of y for tokens m0 .. m0 + T - 1.
template <int T>
void tiles(const int8_t* xh, const int8_t* xl, const float* step, const float* sum, const uint8_t* w, const float* bias, float* y,
           int64_t groups, int64_t N, int64_t m0, int64_t t0, int64_t t1) {
  const int64_t K = groups * kGroup;
  const __m512i low4 = _mm512_set1_epi8(0x0F), high4 = _mm512_set1_epi8(char(0xF0));
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* wt = w + t * groups * kTile;
    __m512 acc[T], shift[T];
    for (int i = 0; i < T; ++i) acc[i] = shift[i] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* wg = wt + g * kTile;
      for (int j = 0; j < kTile / 64; ++j) ahead(wg + 64 * j);
      __m512i lo[4], hi[4];
      for (int j = 0; j < 4; ++j) {
        const __m512i v = _mm512_loadu_si512(wg + 64 * j);
        lo[j] = _mm512_and_si512(v, low4);
        hi[j] = _mm512_and_si512(v, high4);
      }
      const __m512 scale = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg + 256)));
      const __m512 mins = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg + 288)));
      for (int i = 0; i < T; ++i) {
        const int64_t m = m0 + i;
        const int8_t* h = xh + m * K + g * kGroup;
        const int8_t* l = xl + m * K + g * kGroup;
        __m512i hl = _mm512_setzero_si512(), hh = hl, ll = hl, lh = hl;
        for (int j = 0; j < 4; ++j) {
          hl = _mm512_dpbusd_epi32(hl, lo[j], word(h + 4 * j));
          hh = _mm512_dpbusd_epi32(hh, hi[j], word(h + 16 + 4 * j));
          ll = _mm512_dpbusd_epi32(ll, lo[j], word(l + 4 * j));
          lh = _mm512_dpbusd_epi32(lh, hi[j], word(l + 16 + 4 * j));
        }
        // sum of q * x16 = 256 (sum of q * hi) + sum of q * lo; below 2^24, so exact in fp32
        const __m512i d = _mm512_add_epi32(_mm512_slli_epi32(_mm512_add_epi32(hl, _mm512_srai_epi32(hh, 4)), 8),
                                           _mm512_add_epi32(ll, _mm512_srai_epi32(lh, 4)));
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), scale, acc[i]);
        shift[i] = _mm512_fmadd_ps(mins, _mm512_set1_ps(sum[m * groups + g]), shift[i]);
      }
    }
    const int64_t n = t * kRows;
    const __mmask16 live = __mmask16((1u << std::min(kRows, N - n)) - 1);  // the last tile's padding rows are not written
    const __m512 b = bias ? _mm512_maskz_loadu_ps(live, bias + n) : _mm512_setzero_ps();
    for (int i = 0; i < T; ++i)
      _mm512_mask_storeu_ps(y + (m0 + i) * N + n, live, _mm512_add_ps(_mm512_fmadd_ps(acc[i], _mm512_set1_ps(step[m0 + i]), shift[i]), b));
  }
}

using TilesFn = void (*)(const int8_t*, const int8_t*, const float*, const float*, const uint8_t*, const float*, float*,
                         int64_t, int64_t, int64_t, int64_t, int64_t);
constexpr TilesFn kTilesFor[kTokens + 1] = {nullptr, tiles<1>, tiles<2>, tiles<3>, tiles<4>};

// y [M, N] = x [M, K] @ w.T (+ bias) for the tiles at w ([ceil(N / 16), K / 32, 320] bytes).
inline void matmul(const float* x, int64_t M, int64_t K, const uint8_t* w, int64_t N, const float* bias, float* y) {
  const int64_t groups = K / kGroup, n_tiles = (N + kRows - 1) / kRows;
  if (M == 0 || N == 0) return;
  if (groups == 0) {  // an empty sum: y is the bias (the tasks below are sized by the groups and would divide by them)
    empty_sum(M, N, bias, y);
    return;
  }
  thread_local std::vector<int8_t> hi_buf, lo_buf;
  thread_local std::vector<float> step_buf, sum_buf;
  int8_t* hi = scratch(hi_buf, M * K);
  int8_t* lo = scratch(lo_buf, M * K);
  float* step = scratch(step_buf, M);
  float* sum = scratch(sum_buf, M * groups);
  round_tokens(x, M, K, hi, lo, step, sum);
  at::parallel_for(0, n_tiles, std::max<int64_t>(1, kTaskBytes / (groups * kTile)), [&](int64_t a, int64_t b) {
    for (int64_t m0 = 0; m0 < M; m0 += kTokens)
      kTilesFor[std::min(kTokens, M - m0)](hi, lo, step, sum, w, bias, y, groups, N, m0, a, b);
  });
}

}  // namespace int4k
}  // namespace
