// The int4 kernel's bodies, on raw pointers: int4_linear.cpp wraps them as an op, decode_step.cpp
// calls them once per projection of a fused decode step. See int4_linear.cpp for the why, and
// isa.h for which body a build gets.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "activations.h"
#include "portable.h"

namespace {
namespace int4k {

constexpr int64_t kGroup = 32;
constexpr int64_t kRows = 16;     // rows per tile: one per int32 lane
constexpr int64_t kTile = 320;    // bytes per tile and group: 4 x 64 of nibbles, 16 fp16 scales, 16 fp16 mins
constexpr int64_t kTaskBytes = 1 << 15;

// Packing (quant.py): byte 16 * 4 * j + 4 * r + t of a tile's group holds, for row r of the tile,
// weight 4j + t of the group in its low nibble and weight 16 + 4j + t in its high one. So the low
// nibbles of the j-th 64 bytes meet the group's activations 4j..4j+3 in every lane, the high ones
// 16+4j..16+4j+3. The high nibbles are used in place (16 q), their sums shifted back by 4: exact.

#if defined(TOKENTOP_VNNI)
constexpr int64_t kTokens = 4;  // tokens per pass over a tile's weights (their sums stay in registers)

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
  if (nothing_to_sum(M, N, groups, bias, y)) return;
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

#elif defined(TOKENTOP_AVX2)
constexpr int64_t kTokens = 2;  // AVX2 has 16 vector registers: a third token's sums would spill

// Four rows' bytes a vector, widened to int16 (vpmovzxbw): the low nibbles masked, the high ones
// shifted down, each vpmaddwd with the four int16 activations that meet them, so each int32 lane
// sums two products, two lanes a row. A group's sums (at most 32 * 15 * 32639 a row, exact in fp32)
// are joined per row (vphaddd), scaled in fp32 and summed over the groups; the mins as the VNNI
// body takes them.
template <int T>
void tiles(const int16_t* xq, const float* step, const float* sum, const uint8_t* w, const float* bias, float* y,
           int64_t groups, int64_t N, int64_t m0, int64_t t0, int64_t t1) {
  const int64_t K = groups * kGroup;
  const __m256i low4 = _mm256_set1_epi16(0x0F);
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* wt = w + t * groups * kTile;
    __m256 acc[T][2], shift[T][2];
    for (int i = 0; i < T; ++i) acc[i][0] = acc[i][1] = shift[i][0] = shift[i][1] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* wg = wt + g * kTile;
      for (int j = 0; j < kTile / 64; ++j) ahead(wg + 64 * j);
      __m256i s[T][4];
      for (auto& a : s)
        for (auto& v : a) v = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {
        __m256i xl[T], xh[T];
        for (int i = 0; i < T; ++i) {
          xl[i] = quad(xq + (m0 + i) * K + g * kGroup + 4 * j);
          xh[i] = quad(xq + (m0 + i) * K + g * kGroup + 16 + 4 * j);
        }
        for (int c = 0; c < 4; ++c) {
          const __m256i u = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wg + 64 * j + 16 * c)));
          const __m256i lo = _mm256_and_si256(u, low4), hi = _mm256_srli_epi16(u, 4);
          for (int i = 0; i < T; ++i)
            s[i][c] = _mm256_add_epi32(s[i][c], _mm256_add_epi32(_mm256_madd_epi16(lo, xl[i]), _mm256_madd_epi16(hi, xh[i])));
        }
      }
      for (int h = 0; h < 2; ++h) {  // rows 8h .. 8h + 7
        const __m256 scale = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wg + 256 + 16 * h)));
        const __m256 mins = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wg + 288 + 16 * h)));
        for (int i = 0; i < T; ++i) {
          // vphaddd gives rows 0 1 4 5 | 2 3 6 7 of its two inputs' four rows each; the permute puts them in order
          const __m256i rows = _mm256_permute4x64_epi64(_mm256_hadd_epi32(s[i][2 * h], s[i][2 * h + 1]), 0xD8);
          acc[i][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rows), scale, acc[i][h]);
          shift[i][h] = _mm256_fmadd_ps(mins, _mm256_set1_ps(sum[(m0 + i) * groups + g]), shift[i][h]);
        }
      }
    }
    const int64_t n = t * kRows, live = std::min(kRows, N - n);
    for (int i = 0; i < T; ++i) {
      float rows[kRows];
      for (int h = 0; h < 2; ++h) _mm256_storeu_ps(rows + 8 * h, _mm256_fmadd_ps(acc[i][h], _mm256_set1_ps(step[m0 + i]), shift[i][h]));
      for (int64_t r = 0; r < live; ++r) y[(m0 + i) * N + n + r] = rows[r] + (bias ? bias[n + r] : 0.f);
    }
  }
}

using TilesFn = void (*)(const int16_t*, const float*, const float*, const uint8_t*, const float*, float*, int64_t, int64_t,
                         int64_t, int64_t, int64_t);
constexpr TilesFn kTilesFor[kTokens + 1] = {nullptr, tiles<1>, tiles<2>};

inline void matmul(const float* x, int64_t M, int64_t K, const uint8_t* w, int64_t N, const float* bias, float* y) {
  const int64_t groups = K / kGroup, n_tiles = (N + kRows - 1) / kRows;
  if (nothing_to_sum(M, N, groups, bias, y)) return;
  thread_local std::vector<int16_t> q_buf;
  thread_local std::vector<float> step_buf, sum_buf;
  int16_t* q = scratch(q_buf, M * K);
  float* step = scratch(step_buf, M);
  float* sum = scratch(sum_buf, M * groups);
  for (int64_t m = 0; m < M; ++m) step[m] = round_int16(x + m * K, K, K, q + m * K);
  for (int64_t i = 0; i < M * groups; ++i) {
    const float* p = x + i * kGroup;
    const __m256 v = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)),
                                   _mm256_add_ps(_mm256_loadu_ps(p + 16), _mm256_loadu_ps(p + 24)));
    float lanes[8];
    _mm256_storeu_ps(lanes, v);
    sum[i] = std::accumulate(lanes, lanes + 8, 0.f);
  }
  at::parallel_for(0, n_tiles, std::max<int64_t>(1, kTaskBytes / (groups * kTile)), [&](int64_t a, int64_t b) {
    for (int64_t m0 = 0; m0 < M; m0 += kTokens)
      kTilesFor[std::min(kTokens, M - m0)](q, step, sum, w, bias, y, groups, N, m0, a, b);
  });
}

#else
constexpr int64_t kTokens = 4;

// Tiles [t0, t1) of y for tokens m0 .. m0 + T - 1 of x [M, K], sum [M, groups] each group's sum of x.
// Lane r of the j-th 64-byte run of a group holds four bytes of row r: byte t's low nibble is
// weight 4j + t, its high nibble weight 16 + 4j + t. A group's products are summed apart and then
// scaled: sum_k x_k (s q_k + min) = s (sum_k x_k q_k) + min (sum_k x_k).
template <int T>
void tiles(const float* x, const float* sum, const uint8_t* w, const float* bias, float* y, int64_t groups, int64_t N,
           int64_t m0, int64_t t0, int64_t t1) {
  using namespace vec16;
  constexpr int A = T == 1 ? 4 : 1;  // sums per row vector: one token's products would wait on each other
  const int64_t K = groups * kGroup;
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* wt = w + t * groups * kTile;
    f32 acc[T][kParts] = {};
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* wg = wt + g * kTile;
      for (int j = 0; j < kTile / 64; ++j) ahead(wg + 64 * j);
      for (int p = 0; p < kParts; ++p) {
        f32 dot[T][A] = {};
        for (int j = 0; j < 4; ++j) {
          const i32 v = words(wg + 64 * j + p * kBytes);
          for (int b = 0; b < 4; ++b) {
            const i32 s = v >> (8 * b);  // arithmetic, but only the low byte is kept
            const f32 lo = widen(s & 15), hi = widen((s >> 4) & 15);
            for (int i = 0; i < T; ++i) {
              const float* xg = x + (m0 + i) * K + g * kGroup;
              dot[i][(2 * b) % A] += lo * xg[4 * j + b];
              dot[i][(2 * b + 1) % A] += hi * xg[16 + 4 * j + b];
            }
          }
        }
        const f32 scale = halves(wg + 256 + p * kBytes / 2), mins = halves(wg + 288 + p * kBytes / 2);
        for (int i = 0; i < T; ++i) {
          f32 d = dot[i][0];
          for (int a = 1; a < A; ++a) d += dot[i][a];
          acc[i][p] += d * scale + mins * sum[(m0 + i) * groups + g];
        }
      }
    }
    const int64_t n = t * kRows;
    for (int i = 0; i < T; ++i) store(y + (m0 + i) * N + n, acc[i], nullptr, bias ? bias + n : nullptr, std::min(kRows, N - n));
  }
}

using TilesFn = void (*)(const float*, const float*, const uint8_t*, const float*, float*, int64_t, int64_t, int64_t, int64_t,
                         int64_t);
constexpr TilesFn kTilesFor[kTokens + 1] = {nullptr, tiles<1>, tiles<2>, tiles<3>, tiles<4>};

inline void matmul(const float* x, int64_t M, int64_t K, const uint8_t* w, int64_t N, const float* bias, float* y) {
  const int64_t groups = K / kGroup, n_tiles = (N + kRows - 1) / kRows;
  if (nothing_to_sum(M, N, groups, bias, y)) return;
  thread_local std::vector<float> sum_buf;
  float* sum = scratch(sum_buf, M * groups);
  for (int64_t i = 0; i < M * groups; ++i) sum[i] = std::accumulate(x + i * kGroup, x + (i + 1) * kGroup, 0.f);
  at::parallel_for(0, n_tiles, std::max<int64_t>(1, kTaskBytes / (groups * kTile)), [&](int64_t a, int64_t b) {
    for (int64_t m0 = 0; m0 < M; m0 += kTokens) kTilesFor[std::min(kTokens, M - m0)](x, sum, w, bias, y, groups, N, m0, a, b);
  });
}
#endif

}  // namespace int4k
}  // namespace
