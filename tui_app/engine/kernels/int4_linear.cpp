// y = x @ w.T (+ bias) for int4 weights in groups of 32 along K: w = scale * q + min, q in 0..15,
// scale and min in fp16 (as in GGUF's Q4_1).
//
// Why: torchao's int4 on CPU has no fused kernel for this CPU and decoded slower than fp32.
// As in int8_linear.cpp, each token's activations are rounded to int16 and the products summed
// in int32, here by AVX-512 VNNI. The work per weight is what bounds int4 (it reads about half the bytes
// of int8), so the nibbles are never moved across lanes: one 64-byte load holds four groups as 32
// int16 words of four nibbles each, and a shift and a mask per nibble position give 32 int16 lanes
// that one vpdpwssd multiplies with activations stored in the matching order. Word w of a group
// lands in int32 lane w / 2 of the sums, so lanes 4g..4g+3 hold group g, and one conversion and one
// multiply-add by the four scales (each spread over its four lanes) finish the four groups.
// The mins need no work per weight: sum_k x_k * min_g = min_g * (sum of x over the group).
// Machines without AVX-512 (F, BW, VL, VNNI) fail this build and keep torchao's path (the reason is shown).
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

#if !defined(__AVX512F__) || !defined(__AVX512VNNI__) || !defined(__AVX512BW__) || !defined(__AVX512VL__)
#error "int4_linear needs AVX-512 (F, BW, VL, VNNI)"
#endif

namespace {

constexpr int64_t kGroup = 32;
constexpr int64_t kChunk = 4;  // groups per 64-byte load
constexpr int64_t kPrefetch = 2048;
constexpr int64_t kTaskBytes = 1 << 15;

// Packing (quant.py): byte j of a group holds q_j (low nibble) and q_{j+16} (high), so the int16
// word w holds, from its low bits up, q_{2w}, q_{2w+16}, q_{2w+1}, q_{2w+17}. Nibble position i of
// every word is one vector of weights: weights 2w, 2w + 16, 2w + 1, 2w + 17 of each group for
// i = 0..3. The activations are stored as four matching vectors per chunk of four groups, zero past
// the last group.

// Groups per row rounded up to whole chunks: the length of the stored activations.
inline int64_t padded_groups(int64_t groups) { return (groups + kChunk - 1) / kChunk * kChunk; }

void rows(const int16_t* xq, const float* xs, const float* gsum, const uint8_t* w, const uint16_t* scale,
          const uint16_t* mins, const float* bias, float* y, int64_t M, int64_t K, int64_t N, int64_t n0, int64_t n1) {
  const int64_t groups = K / kGroup, padded = padded_groups(groups), chunks = padded / kChunk;
  const __m512i low4 = _mm512_set1_epi16(0x000F);
  const __m512i spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* wr = w + n * (K / 2);
    const uint16_t* sr = scale + n * groups;
    const uint16_t* mr = mins + n * groups;
    for (int64_t m = 0; m < M; ++m) {
      const int16_t* xm = xq + m * padded * kGroup;
      const float* gs = gsum + m * padded;
      __m512 acc = _mm512_setzero_ps();
      __m128 shift = _mm_setzero_ps();
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t g = c * kChunk, left = std::min(kChunk, groups - g);
        const __mmask8 four = __mmask8((1u << left) - 1);
        if (m == 0) _mm_prefetch(reinterpret_cast<const char*>(wr + g * 16 + kPrefetch), _MM_HINT_T0);
        const __m512i v = left == kChunk ? _mm512_loadu_si512(wr + g * 16)
                                         : _mm512_maskz_loadu_epi8((__mmask64(1) << (16 * left)) - 1, wr + g * 16);
        const int16_t* xc = xm + g * kGroup;
        __m512i d = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v, low4), _mm512_loadu_si512(xc));
        d = _mm512_dpwssd_epi32(d, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4), _mm512_loadu_si512(xc + 32));
        d = _mm512_dpwssd_epi32(d, _mm512_and_si512(_mm512_srli_epi16(v, 8), low4), _mm512_loadu_si512(xc + 64));
        d = _mm512_dpwssd_epi32(d, _mm512_srli_epi16(v, 12), _mm512_loadu_si512(xc + 96));
        const __m512 s = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_maskz_loadu_epi16(four, sr + g))));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc);
        shift = _mm_fmadd_ps(_mm_cvtph_ps(_mm_maskz_loadu_epi16(four, mr + g)), _mm_loadu_ps(gs + g), shift);
      }
      const __m128 h = _mm_add_ps(shift, _mm_movehl_ps(shift, shift));
      const float sh = _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
      y[m * N + n] = _mm512_reduce_add_ps(acc) * xs[m] + sh + (bias ? bias[n] : 0.f);
    }
  }
}

at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scale,
                       const at::Tensor& mins, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && scale.scalar_type() == at::kHalf && mins.scalar_type() == at::kHalf,
              "int4_linear: float32 activations, float16 scales and mins");
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.dim() == 2 && packed.is_contiguous(),
              "int4_linear: a contiguous 2-D uint8 weight, two nibbles per byte");
  const int64_t N = packed.size(0), K = packed.size(1) * 2, groups = K / kGroup;
  TORCH_CHECK(K % kGroup == 0 && x.size(-1) == K && scale.numel() == N * groups && mins.numel() == N * groups,
              "int4_linear: shapes do not match");
  const at::Tensor xc = x.contiguous(), sc = scale.contiguous(), mc = mins.contiguous();
  const at::Tensor bc = bias ? bias->contiguous() : at::Tensor();
  TORCH_CHECK(!bc.defined() || (bc.scalar_type() == at::kFloat && bc.numel() == N), "int4_linear: bias");
  const int64_t M = xc.numel() / K;

  // An int32 lane sums eight products, each below 2^15 * 15: int16 at full scale is safe.
  const float qmax = 32767.f;
  const int64_t padded = padded_groups(groups);
  thread_local std::vector<int16_t> xq_buf;
  thread_local std::vector<float> xs_buf, gsum_buf;
  int16_t* xq = scratch(xq_buf, M * padded * kGroup);
  float* xs = scratch(xs_buf, M);
  float* gsum = scratch(gsum_buf, M * padded);
  // Lanes 0-7 of the even/odd split hold a group half's even-indexed weights' activations, 8-15 its odd ones.
  const __m256i split = _mm256_set_epi16(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
  const float* xp = xc.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = xp + m * K;
    const __m512 inv = _mm512_set1_ps(1.f / (xs[m] = int16_step(xm, K, qmax)));
    int16_t* xqm = xq + m * padded * kGroup;
    std::fill(xqm + groups * kGroup, xqm + padded * kGroup, int16_t(0));  // the last chunk's missing groups
    std::fill(gsum + m * padded + groups, gsum + (m + 1) * padded, 0.f);
    for (int64_t g = 0; g < groups; ++g) {
      const __m512 lo = _mm512_loadu_ps(xm + g * kGroup), hi = _mm512_loadu_ps(xm + g * kGroup + 16);
      const __m256i a = _mm256_permutexvar_epi16(split, _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(lo, inv))));
      const __m256i b = _mm256_permutexvar_epi16(split, _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(hi, inv))));
      // vector i of the chunk, lanes 8 * (g % 4) .. + 7: the activations of nibble i of words 0-7
      int16_t* out = xqm + (g / kChunk) * kChunk * kGroup + (g % kChunk) * 8;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(a));            // weights 2w
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 32), _mm256_castsi256_si128(b));       // 2w + 16
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 64), _mm256_extracti128_si256(a, 1));  // 2w + 1
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 96), _mm256_extracti128_si256(b, 1));  // 2w + 17
      gsum[m * padded + g] = _mm512_reduce_add_ps(_mm512_add_ps(lo, hi));
    }
  }

  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = N;
  at::Tensor y = at::empty(sizes, x.options());
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  const auto* sp = reinterpret_cast<const uint16_t*>(sc.data_ptr<at::Half>());
  const auto* mp = reinterpret_cast<const uint16_t*>(mc.data_ptr<at::Half>());
  const float* bp = bc.defined() ? bc.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, N, std::max<int64_t>(1, kTaskBytes / (K / 2)), [&](int64_t a, int64_t b) {
    rows(xq, xs, gsum, wp, sp, mp, bp, yp, M, K, N, a, b);
  });
  return y;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tokentop, m) {
  m.def("int4_linear(Tensor x, Tensor packed, Tensor scale, Tensor mins, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(tokentop, CPU, m) { m.impl("int4_linear", int4_linear); }
