// y = x @ w.T (+ bias) for int4 weights in groups of 32 along K: w = scale * q + min, q in 0..15.
//
// Why: torchao's int4 on CPU has no fused kernel for this CPU and decoded slower than fp32.
// As in int8_linear.cpp, each token's activations are rounded to int16 and the products summed
// in int32, here by AVX-512 VNNI: a group's 32 nibbles become 16 pairs of int16 lanes that one
// vpdpwssd multiplies with the matching pairs of activations; each group's sum is then scaled in
// fp32. The mins need no work per weight: sum_k x_k * min_g = min_g * (sum of x over the group).
// Machines without AVX-512 VNNI fail this build and keep torchao's path (the reason is shown).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "activations.h"

#if !defined(__AVX512F__) || !defined(__AVX512VNNI__) || !defined(__AVX512BW__)
#error "int4_linear needs AVX-512 (F, BW, VNNI)"
#endif

namespace {

constexpr int64_t kGroup = 32;
constexpr int64_t kPrefetch = 2048;
constexpr int64_t kTaskBytes = 1 << 15;

// Packing (quant.py): byte j of a group holds weight j in its low nibble and weight j + 16 in its
// high one, so lane j of the 16 lanes pairs (q_j, q_{j+16}); activations are stored in the same
// order, (x_j, x_{j+16}) side by side.
inline __m512i nibble_pairs(const uint8_t* p) {
  const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  // (v | v << 12) & 0x000F000F: the low nibble stays in bits 0-3, the high one lands in 16-19.
  return _mm512_ternarylogic_epi32(v, _mm512_slli_epi32(v, 12), _mm512_set1_epi32(0x000F000F), 0xA8);
}

void rows(const int16_t* xq, const float* xs, const float* gsum, const uint8_t* w, const float* scale,
          const float* mins, const float* bias, float* y, int64_t M, int64_t K, int64_t N, int64_t n0, int64_t n1) {
  const int64_t groups = K / kGroup;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* wr = w + n * (K / 2);
    _mm_prefetch(reinterpret_cast<const char*>(wr + kPrefetch), _MM_HINT_T0);
    const float* sr = scale + n * groups;
    const float* mr = mins + n * groups;
    for (int64_t m = 0; m < M; ++m) {
      const int16_t* xm = xq + m * K;
      __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
      int64_t g = 0;
      for (; g + 1 < groups; g += 2) {  // two groups per pass: two independent accumulators
        const __m512i d0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(xm + g * kGroup), nibble_pairs(wr + g * 16));
        const __m512i d1 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(xm + (g + 1) * kGroup), nibble_pairs(wr + (g + 1) * 16));
        a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_set1_ps(sr[g]), a0);
        a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_set1_ps(sr[g + 1]), a1);
      }
      if (g < groups) {
        const __m512i d0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(xm + g * kGroup), nibble_pairs(wr + g * 16));
        a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_set1_ps(sr[g]), a0);
      }
      float shift = 0.f;
      const float* gs = gsum + m * groups;
      for (int64_t j = 0; j < groups; ++j) shift += mr[j] * gs[j];
      y[m * N + n] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) * xs[m] + shift + (bias ? bias[n] : 0.f);
    }
  }
}

at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scale,
                       const at::Tensor& mins, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && scale.scalar_type() == at::kFloat && mins.scalar_type() == at::kFloat,
              "int4_linear: float32 activations, scales and mins");
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.dim() == 2 && packed.is_contiguous(),
              "int4_linear: a contiguous 2-D uint8 weight, two nibbles per byte");
  const int64_t N = packed.size(0), K = packed.size(1) * 2, groups = K / kGroup;
  TORCH_CHECK(K % kGroup == 0 && x.size(-1) == K && scale.numel() == N * groups && mins.numel() == N * groups,
              "int4_linear: shapes do not match");
  const at::Tensor xc = x.contiguous(), sc = scale.contiguous(), mc = mins.contiguous();
  const at::Tensor bc = bias ? bias->contiguous() : at::Tensor();
  TORCH_CHECK(!bc.defined() || (bc.scalar_type() == at::kFloat && bc.numel() == N), "int4_linear: bias");
  const int64_t M = xc.numel() / K;

  // An int32 lane sums two products per group, each below 2^15 * 15: int16 at full scale is safe.
  const float qmax = 32767.f;
  std::vector<int16_t> xq(M * K);
  std::vector<float> xs(M), gsum(M * groups);
  const float* xp = xc.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = xp + m * K;
    const float inv = 1.f / (xs[m] = int16_step(xm, K, qmax));
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = xm + g * kGroup;
      int16_t* out = xq.data() + m * K + g * kGroup;
      float t = 0.f;
      for (int64_t j = 0; j < kGroup / 2; ++j) {
        out[2 * j] = int16_t(std::nearbyint(xg[j] * inv));
        out[2 * j + 1] = int16_t(std::nearbyint(xg[j + kGroup / 2] * inv));
        t += xg[j] + xg[j + kGroup / 2];
      }
      gsum[m * groups + g] = t;
    }
  }

  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = N;
  at::Tensor y = at::empty(sizes, x.options());
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  const float* sp = sc.data_ptr<float>();
  const float* mp = mc.data_ptr<float>();
  const float* bp = bc.defined() ? bc.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, N, std::max<int64_t>(1, kTaskBytes / (K / 2)), [&](int64_t a, int64_t b) {
    rows(xq.data(), xs.data(), gsum.data(), wp, sp, mp, bp, yp, M, K, N, a, b);
  });
  return y;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tokentop, m) {
  m.def("int4_linear(Tensor x, Tensor packed, Tensor scale, Tensor mins, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(tokentop, CPU, m) { m.impl("int4_linear", int4_linear); }
