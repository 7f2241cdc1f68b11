// The decode attention kernel's body, on raw pointers: decode_attention.cpp wraps it as an op,
// decode_step.cpp calls it once per layer of a fused decode step. See decode_attention.cpp for the why.
#pragma once  // the includer defines CPU_CAPABILITY_* before any ATen header, as decode_attention.cpp does

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {
namespace attn {

using Vec = at::vec::Vectorized<float>;

float hsum(const Vec& v) {
  return at::vec::vec_reduce_all<float>([](Vec& x, Vec& y) { return x + y; }, v);
}

float dot(const float* a, const float* b, int64_t n) {
  int64_t d = 0;
  Vec acc(0.f);
  for (; d + Vec::size() <= n; d += Vec::size()) acc = at::vec::fmadd(Vec::loadu(a + d), Vec::loadu(b + d), acc);
  float sum = hsum(acc);
  for (; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// w[0..n) = exp(w - max) / sum
void softmax(float* w, int64_t n) {
  const float top = *std::max_element(w, w + n);
  int64_t s = 0;
  Vec sum_v(0.f);
  for (; s + Vec::size() <= n; s += Vec::size()) {
    const Vec e = (Vec::loadu(w + s) - Vec(top)).exp_u20();
    e.store(w + s);
    sum_v = sum_v + e;
  }
  float sum = hsum(sum_v);
  for (; s < n; ++s) sum += (w[s] = std::exp(w[s] - top));
  const float inv = 1.f / sum;
  for (s = 0; s < n; ++s) w[s] *= inv;
}

// out += p * v over n floats
void axpy(float* out, float p, const float* v, int64_t n) {
  int64_t d = 0;
  for (; d + Vec::size() <= n; d += Vec::size()) at::vec::fmadd(Vec(p), Vec::loadu(v + d), Vec::loadu(out + d)).store(out + d);
  for (; d < n; ++d) out[d] += p * v[d];
}

// out [B, Hq, D] = attention of q [B, Hq, D] over slots [0, filled) of k, v [B, Hkv, S, D].
inline void attend(const float* qp, const float* kp, const float* vp, int64_t B, int64_t Hq, int64_t Hkv, int64_t S,
                   int64_t D, int64_t filled, float sc, float* op) {
  const int64_t G = Hq / Hkv;
  // One task per (sequence, K/V head): its G query heads share each K and V row while it is in L1.
  at::parallel_for(0, B * Hkv, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> w(G * filled);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / Hkv, g = t % Hkv;
      const float* kh = kp + (b * Hkv + g) * S * D;
      const float* vh = vp + (b * Hkv + g) * S * D;
      const float* qg = qp + (b * Hq + g * G) * D;
      float* og = op + (b * Hq + g * G) * D;
      for (int64_t s = 0; s < filled; ++s)
        for (int64_t j = 0; j < G; ++j) w[j * filled + s] = dot(qg + j * D, kh + s * D, D) * sc;
      for (int64_t j = 0; j < G; ++j) softmax(w.data() + j * filled, filled);
      std::fill(og, og + G * D, 0.f);
      for (int64_t s = 0; s < filled; ++s)
        for (int64_t j = 0; j < G; ++j) axpy(og + j * D, w[j * filled + s], vh + s * D, D);
    }
  });
}

}  // namespace attn
}  // namespace
