// Shared by the int8 and int4 kernels: each token's activations are rounded to int16 with one
// step per token, its largest |x| landing on qmax (the kernels pick qmax so int32 sums cannot
// overflow).
//
// Why vectorized by hand: this runs once per call, 211 calls per decode step, and GCC leaves both
// loops scalar (a float max and nearbyint are not vectorized without -ffast-math): measured, the
// scalar rounding cost 3 us per call, 0.6 ms of a ~11 ms int4 step. The vector conversion rounds
// to nearest even, as nearbyint does in the default rounding mode, so the integers are the same.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define TOKENTOP_AVX512 1
#endif

inline float int16_step(const float* x, int64_t K, float qmax) {
  float amax = 0.f;
  int64_t k = 0;
#ifdef TOKENTOP_AVX512
  __m512 m = _mm512_setzero_ps();
  for (; k + 16 <= K; k += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
  amax = _mm512_reduce_max_ps(m);
#endif
  for (; k < K; ++k) amax = std::max(amax, std::abs(x[k]));
  return amax > 0.f ? amax / qmax : 1.f;
}

// out[k] = round(x[k] * inv); |x[k] * inv| <= qmax <= 32767 by the choice of step.
inline void round_int16(const float* x, int64_t K, float inv, int16_t* out) {
  int64_t k = 0;
#ifdef TOKENTOP_AVX512
  const __m512 s = _mm512_set1_ps(inv);
  for (; k + 16 <= K; k += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k),
                        _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + k), s))));
#endif
  for (; k < K; ++k) out[k] = int16_t(std::nearbyint(x[k] * inv));
}

// A buffer per thread reused across calls: allocating three vectors per call cost more than
// the rounding itself on the small layers. It grows to the largest call and is reused.
template <typename T>
inline T* scratch(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}
