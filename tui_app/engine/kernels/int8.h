// The int8 kernel's body, on raw pointers: int8_linear.cpp wraps it as an op, decode_step.cpp
// calls it once per projection of a fused decode step. See int8_linear.cpp for the why.
#pragma once  // the includer checks for AVX-512 first

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "activations.h"

namespace {
namespace int8k {

constexpr int64_t kRows = 16;    // rows per tile: one per int32 lane
constexpr int64_t kQuad = 4;     // weights of a row per lane and vector
constexpr int64_t kTokens = 4;   // tokens per pass over a tile's weights (their sums stay in registers)
constexpr int64_t kTaskBytes = 1 << 16;  // weights per thread task: small layers stay on one thread

// Packing (quant.py): byte 64 j + 4 r + i of a tile is weight 4 j + i of the tile's row r, plus 128.
// Sums stay in int32: |sum of (q + 128) * byte| <= 255 * 128 * K, below 2^31 for K up to kMaxK.
constexpr int64_t kMaxK = 65792;

// Tiles [t0, t1) of y for tokens m0 .. m0 + T - 1; K is padded to whole quads (zero activations).
template <int T>
void tiles(const int8_t* xh, const int8_t* xl, const int32_t* offset, const float* step, const uint8_t* w,
           const float* scale, const float* bias, float* y, int64_t K, int64_t N, int64_t m0, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* wt = w + t * kRows * K;
    __m512i h[T], l[T];
    for (int i = 0; i < T; ++i) h[i] = l[i] = _mm512_setzero_si512();
    for (int64_t k = 0; k < K; k += kQuad) {
      ahead(wt + kRows * k);
      const __m512i v = _mm512_loadu_si512(wt + kRows * k);
      for (int i = 0; i < T; ++i) {
        h[i] = _mm512_dpbusd_epi32(h[i], v, word(xh + (m0 + i) * K + k));
        l[i] = _mm512_dpbusd_epi32(l[i], v, word(xl + (m0 + i) * K + k));
      }
    }
    const int64_t n = t * kRows;
    const __mmask16 live = __mmask16((1u << std::min(kRows, N - n)) - 1);  // the last tile's padding rows are not written
    const __m512 s = _mm512_maskz_loadu_ps(live, scale + n);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(live, bias + n) : _mm512_setzero_ps();
    for (int i = 0; i < T; ++i) {
      const int64_t m = m0 + i;
      // sum of q * x16 = 256 (sum of q * hi) + sum of q * lo, each with the +128 taken off in int32
      const __m512 hq = _mm512_cvtepi32_ps(_mm512_sub_epi32(h[i], _mm512_set1_epi32(offset[2 * m])));
      const __m512 lq = _mm512_cvtepi32_ps(_mm512_sub_epi32(l[i], _mm512_set1_epi32(offset[2 * m + 1])));
      const __m512 d = _mm512_fmadd_ps(hq, _mm512_set1_ps(256.f), lq);
      _mm512_mask_storeu_ps(y + m * N + n, live, _mm512_fmadd_ps(_mm512_mul_ps(d, s), _mm512_set1_ps(step[m]), b));
    }
  }
}

using TilesFn = void (*)(const int8_t*, const int8_t*, const int32_t*, const float*, const uint8_t*, const float*,
                         const float*, float*, int64_t, int64_t, int64_t, int64_t, int64_t);
constexpr TilesFn kTilesFor[kTokens + 1] = {nullptr, tiles<1>, tiles<2>, tiles<3>, tiles<4>};

// y [M, N] = (x [M, K] @ w.T) * scale (+ bias) for the tiles at w ([ceil(N / 16), Kp / 4, 64] bytes,
// Kp = K rounded up to whole fours).
inline void matmul(const float* x, int64_t M, int64_t K, const uint8_t* w, const float* scale, int64_t N,
                   const float* bias, float* y) {
  const int64_t Kp = (K + kQuad - 1) / kQuad * kQuad, n_tiles = (N + kRows - 1) / kRows;
  if (M == 0 || N == 0) return;
  if (Kp == 0) {  // an empty sum: y is the bias (the tasks below are sized by Kp and would divide by it)
    empty_sum(M, N, bias, y);
    return;
  }
  thread_local std::vector<int8_t> hi_buf, lo_buf;
  thread_local std::vector<float> step_buf;
  thread_local std::vector<int32_t> offset_buf;
  int8_t* hi = scratch(hi_buf, M * Kp);
  int8_t* lo = scratch(lo_buf, M * Kp);
  float* step = scratch(step_buf, M);
  int32_t* offset = scratch(offset_buf, 2 * M);
  for (int64_t m = 0; m < M; ++m) {
    step[m] = split_int16(x + m * K, K, Kp, hi + m * Kp, lo + m * Kp);
    int32_t sh = 0, sl = 0;
    for (int64_t k = 0; k < Kp; ++k) sh += hi[m * Kp + k], sl += lo[m * Kp + k];
    offset[2 * m] = 128 * sh, offset[2 * m + 1] = 128 * sl;
  }
  at::parallel_for(0, n_tiles, std::max<int64_t>(1, kTaskBytes / (kRows * Kp)), [&](int64_t a, int64_t b) {
    for (int64_t m0 = 0; m0 < M; m0 += kTokens)
      kTilesFor[std::min(kTokens, M - m0)](hi, lo, offset, step, w, scale, bias, y, Kp, N, m0, a, b);
  });
}

}  // namespace int8k
}  // namespace
