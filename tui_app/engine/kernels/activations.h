// Shared by the int8 and int4 kernels. Their VNNI bodies round each token's activations to int16
// with one step per token (its largest |x| lands on kQmax) and split each int16 into two int8
// bytes, x = 256 hi + lo, both in -128..127; the portable bodies multiply the fp32 activations as
// they are. Why split: AVX-512 VNNI multiplies bytes (vpdpbusd, 64 per instruction, one operand
// unsigned: the weights), twice the rate of its int16 form, and the int16 rounding keeps the
// activations' error some 40x below the weights' own. Rounding each group of 32 to int8 instead
// (llama.cpp's Q8 activations) raised the int4 variant's decode perplexity from 24.56 to 25.00 on
// the default model, more than its weights cost.
//
// Why vectorized by hand: this runs once per call, 211 calls per decode step, and GCC leaves the
// loops scalar (a float max and nearbyint are not vectorized without -ffast-math): measured, a
// scalar rounding cost 3 us per call, 0.6 ms of a ~11 ms int4 step. The vector conversion rounds
// to nearest even, as nearbyint does in the default rounding mode, so the integers are the same.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "isa.h"
#include "scratch.h"

// True where y [M, N] needs no product: no tokens or no outputs, or no inputs (x with no columns,
// K here in whatever unit the body counts: y is then the bias, or zeros, as torch's linear gives;
// the bodies size their tasks by K and would divide by it).
inline bool nothing_to_sum(int64_t M, int64_t N, int64_t K, const float* bias, float* y) {
  if (M == 0 || N == 0) return true;
  if (K > 0) return false;
  for (int64_t m = 0; m < M; ++m) {
    if (bias)
      std::copy(bias, bias + N, y + m * N);
    else
      std::fill(y + m * N, y + (m + 1) * N, 0.f);
  }
  return true;
}

#if defined(TOKENTOP_VNNI)
#include <immintrin.h>

// The largest int16 whose high byte, rounded as below, still fits int8: 127 * 256 + 127.
constexpr float kQmax = 32639.f;

// Rounds x[0, K) to int16 with one step (returned), split into hi and lo; [K, Kp) are zeros.
inline float split_int16(const float* x, int64_t K, int64_t Kp, int8_t* hi, int8_t* lo) {
  __m512 m = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
  float amax = _mm512_reduce_max_ps(m);
  for (; k < K; ++k) amax = std::max(amax, std::abs(x[k]));
  const float step = amax > 0.f ? amax / kQmax : 1.f, inv = 1.f / step;
  const __m512 s = _mm512_set1_ps(inv);
  const __m512i half = _mm512_set1_epi32(128);
  for (k = 0; k + 16 <= K; k += 16) {
    const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + k), s));
    const __m512i h = _mm512_srai_epi32(_mm512_add_epi32(v, half), 8);  // rounds, so lo is -128..127
    _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + k), _mm512_cvtepi32_epi8(h));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + k), _mm512_cvtepi32_epi8(_mm512_sub_epi32(v, _mm512_slli_epi32(h, 8))));
  }
  for (; k < K; ++k) {
    const int32_t v = int32_t(std::nearbyint(x[k] * inv)), h = (v + 128) >> 8;
    hi[k] = int8_t(h);
    lo[k] = int8_t(v - h * 256);
  }
  std::fill(hi + K, hi + Kp, int8_t(0));
  std::fill(lo + K, lo + Kp, int8_t(0));
  return step;
}

// Four activation bytes at p, broadcast to all rows. Read from the activations themselves, the
// broadcast is one load (vpbroadcastd m32); copied to a stack array first, each word went through
// a general register to a vector. Measured on the int4 kernel, 1536 x 576 in the L2 cache: 1 / 4 / 8
// tokens 20.8 / 61.9 / 119 -> 15.9 / 42.6 / 78.8 us a call; from memory, 1 token, unchanged (~28 GB/s).
inline __m512i word(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

#elif defined(TOKENTOP_AVX2)
#include <immintrin.h>

// The largest int16 the VNNI bodies use, so both give the same integers.
constexpr float kQmax = 32639.f;

// Rounds x[0, K) to int16 with one step (returned), as split_int16 does but unsplit; [K, Kp) are zeros.
inline float round_int16(const float* x, int64_t K, int64_t Kp, int16_t* q) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + k), magnitude));
  float lanes[8];
  _mm256_storeu_ps(lanes, m);
  float amax = *std::max_element(lanes, lanes + 8);
  for (; k < K; ++k) amax = std::max(amax, std::abs(x[k]));
  const float step = amax > 0.f ? amax / kQmax : 1.f, inv = 1.f / step;
  const __m256 s = _mm256_set1_ps(inv);
  for (k = 0; k + 8 <= K; k += 8) {
    const __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k), s));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
  }
  for (; k < K; ++k) q[k] = int16_t(std::nearbyint(x[k] * inv));
  std::fill(q + K, q + Kp, int16_t(0));
  return step;
}

// Four int16 activations at p, (x0, x1) and (x2, x3) in every pair of int32 lanes: what vpmaddwd
// multiplies with a row's four weights widened to int16.
inline __m256i quad(const int16_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm256_set1_epi64x(v);
}
#endif
