// The decode attention kernel's body, on raw pointers: decode_attention.cpp wraps it as an op,
// decode_step.cpp calls it once per layer of a fused decode step. See decode_attention.cpp for the why.
#pragma once  // the includer defines CPU_CAPABILITY_* before any ATen header, as decode_attention.cpp does

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#if defined(CPU_CAPABILITY_AVX512)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "scratch.h"

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
  int64_t s = 0;
  Vec top_v(-std::numeric_limits<float>::infinity());
  for (; s + Vec::size() <= n; s += Vec::size()) top_v = at::vec::maximum(top_v, Vec::loadu(w + s));
  float top = at::vec::vec_reduce_all<float>([](Vec& x, Vec& y) { return at::vec::maximum(x, y); }, top_v);
  for (; s < n; ++s) top = std::max(top, w[s]);
  Vec sum_v(0.f);
  for (s = 0; s + Vec::size() <= n; s += Vec::size()) {
    const Vec e = (Vec::loadu(w + s) - Vec(top)).exp_u20();
    e.store(w + s);
    sum_v = sum_v + e;
  }
  float sum = hsum(sum_v);
  for (; s < n; ++s) sum += (w[s] = std::exp(w[s] - top));
  const float inv = 1.f / sum;
  for (s = 0; s + Vec::size() <= n; s += Vec::size()) (Vec::loadu(w + s) * Vec(inv)).store(w + s);
  for (; s < n; ++s) w[s] *= inv;
}

// out += p * v over n floats
void axpy(float* out, float p, const float* v, int64_t n) {
  int64_t d = 0;
  for (; d + Vec::size() <= n; d += Vec::size()) at::vec::fmadd(Vec(p), Vec::loadu(v + d), Vec::loadu(out + d)).store(out + d);
  for (; d < n; ++d) out[d] += p * v[d];
}

#if defined(CPU_CAPABILITY_AVX512)
// Lane i of the result = the sum of v[i]'s 16 lanes: the 16 horizontal sums of a block of slots as
// one transpose folded into 15 adds, where summing each vector on its own takes 4 dependent
// shuffle-adds (measured: this attention was ~0.1 us a slot and K/V head, most of it in those sums).
__attribute__((always_inline)) inline __m512 sum16(const __m512* v) {
  __m512 a[8], b[4];
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: [x0+x2, y0+y2, x1+x3, y1+y3] of x = v[2i], y = v[2i+1]
    a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i)  // per 128-bit lane: the lane's sums of v[4i .. 4i+3]
    b[i] = _mm512_add_ps(_mm512_shuffle_ps(a[2 * i], a[2 * i + 1], 0x44), _mm512_shuffle_ps(a[2 * i], a[2 * i + 1], 0xEE));
  const __m512 c0 = _mm512_add_ps(_mm512_shuffle_f32x4(b[0], b[1], 0x44), _mm512_shuffle_f32x4(b[0], b[1], 0xEE));
  const __m512 c1 = _mm512_add_ps(_mm512_shuffle_f32x4(b[2], b[3], 0x44), _mm512_shuffle_f32x4(b[2], b[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(c0, c1, 0x88), _mm512_shuffle_f32x4(c0, c1, 0xDD));
}

// w[s] = scale * q . k[s] for the m <= 16 slots of one block, D = 16 C: their sums in one vector.
template <int C>
void block_scores(const float* q, const float* k, int64_t m, float scale, float* w) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) {
    acc[i] = _mm512_setzero_ps();
    if (i < m)
      for (int c = 0; c < C; ++c) acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * c), _mm512_loadu_ps(k + i * 16 * C + 16 * c), acc[i]);
  }
  _mm512_mask_storeu_ps(w, __mmask16((1u << m) - 1), _mm512_mul_ps(sum16(acc), _mm512_set1_ps(scale)));
}

// out[0, D) += sum of w[s] v[s] over the m slots of one block; two sets of sums halve the FMA chains.
template <int C>
void block_values(const float* w, const float* v, int64_t m, float* out) {
  __m512 even[C], odd[C];
  for (int c = 0; c < C; ++c) {
    even[c] = _mm512_loadu_ps(out + 16 * c);
    odd[c] = _mm512_setzero_ps();
  }
  int64_t s = 0;
  for (; s + 2 <= m; s += 2) {
    const __m512 p = _mm512_set1_ps(w[s]), r = _mm512_set1_ps(w[s + 1]);
    for (int c = 0; c < C; ++c) {
      even[c] = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + s * 16 * C + 16 * c), even[c]);
      odd[c] = _mm512_fmadd_ps(r, _mm512_loadu_ps(v + (s + 1) * 16 * C + 16 * c), odd[c]);
    }
  }
  if (s < m)
    for (int c = 0; c < C; ++c) even[c] = _mm512_fmadd_ps(_mm512_set1_ps(w[s]), _mm512_loadu_ps(v + s * 16 * C + 16 * c), even[c]);
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + 16 * c, _mm512_add_ps(even[c], odd[c]));
}

// The G query heads of one K/V head over n slots, head size 16 C. Blocks of slots outermost: each
// block of K and V comes from L2 once and serves every query head from L1 (head by head over the
// whole cache read it G times from L2, which bound this at ~1.8 MB a call at 400 slots).
template <int C>
void group16(const float* q, const float* k, const float* v, int64_t G, int64_t n, float sc, float* w, float* out) {
  constexpr int64_t D = 16 * C;
  for (int64_t s0 = 0; s0 < n; s0 += 16)
    for (int64_t j = 0; j < G; ++j) block_scores<C>(q + j * D, k + s0 * D, std::min<int64_t>(16, n - s0), sc, w + j * n + s0);
  for (int64_t j = 0; j < G; ++j) softmax(w + j * n, n);
  std::fill(out, out + G * D, 0.f);
  for (int64_t s0 = 0; s0 < n; s0 += 16)
    for (int64_t j = 0; j < G; ++j) block_values<C>(w + j * n + s0, v + s0 * D, std::min<int64_t>(16, n - s0), out + j * D);
}
using GroupFn = void (*)(const float*, const float*, const float*, int64_t, int64_t, float, float*, float*);
constexpr GroupFn kGroupFor[9] = {nullptr, group16<1>, group16<2>, group16<3>, group16<4>, group16<5>, group16<6>, group16<7>, group16<8>};
#endif

// out [B, Hq, D] = attention of q [B, Hq, D] over slots [0, filled[b]) of k, v [B, Hkv, S, D], sequence by sequence.
inline void attend(const float* qp, const float* kp, const float* vp, int64_t B, int64_t Hq, int64_t Hkv, int64_t S,
                   int64_t D, const int64_t* filled_at, float sc, float* op) {
  const int64_t G = Hq / Hkv;
  // One task per (sequence, K/V head): its G query heads share each K and V row while it is in L1.
  at::parallel_for(0, B * Hkv, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> w_buf;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / Hkv, g = t % Hkv, filled = filled_at[b];
      float* w = scratch(w_buf, G * filled);
      const float* kh = kp + (b * Hkv + g) * S * D;
      const float* vh = vp + (b * Hkv + g) * S * D;
      const float* qg = qp + (b * Hq + g * G) * D;
      float* og = op + (b * Hq + g * G) * D;
#if defined(CPU_CAPABILITY_AVX512)
      if (D % 16 == 0 && D > 0 && D <= 128) {
        kGroupFor[D / 16](qg, kh, vh, G, filled, sc, w, og);
        continue;
      }
#endif
      for (int64_t s = 0; s < filled; ++s)
        for (int64_t j = 0; j < G; ++j) w[j * filled + s] = dot(qg + j * D, kh + s * D, D) * sc;
      for (int64_t j = 0; j < G; ++j) softmax(w + j * filled, filled);
      std::fill(og, og + G * D, 0.f);
      for (int64_t s = 0; s < filled; ++s)
        for (int64_t j = 0; j < G; ++j) axpy(og + j * D, w[j * filled + s], vh + s * D, D);
    }
  });
}

}  // namespace attn
}  // namespace
