// The int8 kernel's bodies, on raw pointers: int8_linear.cpp wraps them as an op, decode_step.cpp
// calls them once per projection of a fused decode step. See int8_linear.cpp for the why, and
// isa.h for which body a build gets.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "activations.h"
#include "portable.h"

namespace {
namespace int8k {

constexpr int64_t kRows = 16;    // rows per tile: one per int32 lane
constexpr int64_t kQuad = 4;     // weights of a row per lane and vector
constexpr int64_t kTaskBytes = 1 << 16;  // weights per thread task: small layers stay on one thread

// Packing (quant.py): byte 64 j + 4 r + i of a tile is weight 4 j + i of the tile's row r, plus 128.
// Sums stay in int32: |sum of (q + 128) * byte| <= 255 * 128 * K, below 2^31 for K up to kMaxK.
constexpr int64_t kMaxK = 65792;

#if defined(TOKENTOP_VNNI)
constexpr int64_t kTokens = 4;  // tokens per pass over a tile's weights (their sums stay in registers)

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
  if (nothing_to_sum(M, N, Kp, bias, y)) return;
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

#elif defined(TOKENTOP_AVX2)
constexpr int64_t kTokens = 2;      // AVX2 has 16 vector registers: a third token's sums would spill
constexpr int64_t kWindow = 512;    // weights of a row summed in int32 before fp32 takes them

// Four rows a vector: their bytes widened to int16 (vpmovzxbw of q + 128), each row's four weights
// side by side, and vpmaddwd with the token's four int16 activations, so each int32 lane sums two
// products, two lanes a row. A lane gains at most 2 * 255 * 32639 a quad: below 2^31 for the 128
// quads of a window, then the sums go to fp32. 128 * (sum of the activations) is taken off at the
// end, as the VNNI body does.
template <int T>
void tiles(const int16_t* xq, const float* offset, const float* step, const uint8_t* w, const float* scale,
           const float* bias, float* y, int64_t Kp, int64_t N, int64_t m0, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* wt = w + t * kRows * Kp;
    __m256 acc[T][4];
    for (auto& a : acc)
      for (auto& v : a) v = _mm256_setzero_ps();
    for (int64_t k0 = 0; k0 < Kp; k0 += kWindow) {
      __m256i s[T][4];
      for (auto& a : s)
        for (auto& v : a) v = _mm256_setzero_si256();
      for (int64_t k = k0, k1 = std::min(Kp, k0 + kWindow); k < k1; k += kQuad) {
        const uint8_t* wk = wt + kRows * k;
        ahead(wk);
        __m256i u[4];
        for (int c = 0; c < 4; ++c) u[c] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wk + 16 * c)));
        for (int i = 0; i < T; ++i) {
          const __m256i xv = quad(xq + (m0 + i) * Kp + k);
          for (int c = 0; c < 4; ++c) s[i][c] = _mm256_add_epi32(s[i][c], _mm256_madd_epi16(u[c], xv));
        }
      }
      for (int i = 0; i < T; ++i)
        for (int c = 0; c < 4; ++c) acc[i][c] = _mm256_add_ps(acc[i][c], _mm256_cvtepi32_ps(s[i][c]));
    }
    const int64_t n = t * kRows, live = std::min(kRows, N - n);
    for (int i = 0; i < T; ++i) {
      const int64_t m = m0 + i;
      float lanes[2 * kRows];  // row r's two sums at 2r and 2r + 1
      for (int c = 0; c < 4; ++c) _mm256_storeu_ps(lanes + 8 * c, acc[i][c]);
      for (int64_t r = 0; r < live; ++r)
        y[m * N + n + r] = (lanes[2 * r] + lanes[2 * r + 1] - offset[m]) * scale[n + r] * step[m] + (bias ? bias[n + r] : 0.f);
    }
  }
}

using TilesFn = void (*)(const int16_t*, const float*, const float*, const uint8_t*, const float*, const float*, float*,
                         int64_t, int64_t, int64_t, int64_t, int64_t);
constexpr TilesFn kTilesFor[kTokens + 1] = {nullptr, tiles<1>, tiles<2>};

inline void matmul(const float* x, int64_t M, int64_t K, const uint8_t* w, const float* scale, int64_t N,
                   const float* bias, float* y) {
  const int64_t Kp = (K + kQuad - 1) / kQuad * kQuad, n_tiles = (N + kRows - 1) / kRows;
  if (nothing_to_sum(M, N, Kp, bias, y)) return;
  thread_local std::vector<int16_t> q_buf;
  thread_local std::vector<float> step_buf, offset_buf;
  int16_t* q = scratch(q_buf, M * Kp);
  float* step = scratch(step_buf, M);
  float* offset = scratch(offset_buf, M);
  for (int64_t m = 0; m < M; ++m) {
    step[m] = round_int16(x + m * K, K, Kp, q + m * Kp);
    int64_t sum = 0;
    for (int64_t k = 0; k < Kp; ++k) sum += q[m * Kp + k];
    offset[m] = 128.f * float(sum);
  }
  at::parallel_for(0, n_tiles, std::max<int64_t>(1, kTaskBytes / (kRows * Kp)), [&](int64_t a, int64_t b) {
    for (int64_t m0 = 0; m0 < M; m0 += kTokens)
      kTilesFor[std::min(kTokens, M - m0)](q, offset, step, w, scale, bias, y, Kp, N, m0, a, b);
  });
}

#else
constexpr int64_t kTokens = 4;

// Tiles [t0, t1) of y for tokens m0 .. m0 + T - 1 of x [M, Kp] (zeros past K). Lane r of a 64-byte
// run holds four weights of row r as q + 128: flipping each byte's top bit gives q's two's
// complement byte, and a shift left then an arithmetic shift right sign-extends each byte.
template <int T>
void tiles(const float* x, const uint8_t* w, const float* scale, const float* bias, float* y, int64_t Kp, int64_t N,
           int64_t m0, int64_t t0, int64_t t1) {
  using namespace vec16;
  constexpr int A = T == 1 ? 4 : 1;  // sums per row vector: one token's four products a quad would wait on each other
  const i32 flip = i32{} + int32_t(0x80808080u);
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* wt = w + t * kRows * Kp;
    f32 acc[T][kParts][A] = {};
    for (int64_t k = 0; k < Kp; k += kQuad) {
      ahead(wt + kRows * k);
      for (int p = 0; p < kParts; ++p) {
        const i32 v = words(wt + kRows * k + p * kBytes) ^ flip;
        const f32 q[4] = {widen((v << 24) >> 24), widen((v << 16) >> 24), widen((v << 8) >> 24), widen(v >> 24)};
        for (int i = 0; i < T; ++i)
          for (int b = 0; b < 4; ++b) acc[i][p][b % A] += q[b] * x[(m0 + i) * Kp + k + b];
      }
    }
    const int64_t n = t * kRows;
    for (int i = 0; i < T; ++i) {
      f32 sum[kParts];
      for (int p = 0; p < kParts; ++p) {
        sum[p] = acc[i][p][0];
        for (int a = 1; a < A; ++a) sum[p] += acc[i][p][a];
      }
      store(y + (m0 + i) * N + n, sum, scale + n, bias ? bias + n : nullptr, std::min(kRows, N - n));
    }
  }
}

using TilesFn = void (*)(const float*, const uint8_t*, const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t,
                         int64_t);
constexpr TilesFn kTilesFor[kTokens + 1] = {nullptr, tiles<1>, tiles<2>, tiles<3>, tiles<4>};

inline void matmul(const float* x, int64_t M, int64_t K, const uint8_t* w, const float* scale, int64_t N,
                   const float* bias, float* y) {
  const int64_t Kp = (K + kQuad - 1) / kQuad * kQuad, n_tiles = (N + kRows - 1) / kRows;
  if (nothing_to_sum(M, N, Kp, bias, y)) return;
  const float* xp = x;
  if (Kp != K) {  // rows padded to whole fours: the padding's weights are zeros, its activations must be numbers
    thread_local std::vector<float> pad_buf;
    float* p = scratch(pad_buf, M * Kp);
    for (int64_t m = 0; m < M; ++m) {
      std::copy(x + m * K, x + (m + 1) * K, p + m * Kp);
      std::fill(p + m * Kp + K, p + (m + 1) * Kp, 0.f);
    }
    xp = p;
  }
  at::parallel_for(0, n_tiles, std::max<int64_t>(1, kTaskBytes / (kRows * Kp)), [&](int64_t a, int64_t b) {
    for (int64_t m0 = 0; m0 < M; m0 += kTokens) kTilesFor[std::min(kTokens, M - m0)](xp, w, scale, bias, y, Kp, N, m0, a, b);
  });
}
#endif

}  // namespace int8k
}  // namespace
