// Shared by the int8 and int4 kernels: each token's activations are rounded to int16 with one
// step per token, its largest |x| landing on qmax (the kernels pick qmax so int32 sums cannot
// overflow).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

inline float int16_step(const float* x, int64_t K, float qmax) {
  float amax = 0.f;
  for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::abs(x[k]));
  return amax > 0.f ? amax / qmax : 1.f;
}
