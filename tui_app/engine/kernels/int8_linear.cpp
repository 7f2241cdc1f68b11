// y = (x @ w.T) * scale (+ bias) for int8 weights w [N, K] with one fp32 scale per output row.
//
// Why a kernel of our own: decode reads every weight once per token, so its speed is the rate at
// which a kernel streams weights from memory. MKL's fp32 GEMV streams at 11 GB/s on the 2-core
// EPYC this was built on, and widening int8 to fp32 to multiply is compute-bound at about 7.5 G
// weights/s. Here the weights are stored as the int4 kernel's are: sixteen rows are one tile, one
// row per int32 lane, each 64 bytes holding four weights of every row, so one vpdpbusd with a
// broadcast activation word multiplies 64 weights and each lane sums its own row (no shuffles,
// no horizontal sums). vpdpbusd wants one operand unsigned: the weights are stored as q + 128,
// and 128 * (sum of the activations) is taken off once per token. The activations are int16 split
// into two bytes (activations.h). Measured on the default model's LM head (49152 x 576): rows one
// by one 18.7 GB/s from memory, 39 from the cache; tiles 25.3 and 67, a plain read 24.2.
// Machines without AVX-512 (F, BW, VL, VNNI) fail this build and widen the weights (the reason is shown).
#if !defined(__AVX512F__) || !defined(__AVX512VNNI__) || !defined(__AVX512BW__) || !defined(__AVX512VL__)
#error "int8_linear needs AVX-512 (F, BW, VL, VNNI)"
#endif

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "activations.h"

namespace {

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

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scale, int64_t N,
                       const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && scale.scalar_type() == at::kFloat,
              "int8_linear: float32 activations and scales");
  TORCH_CHECK(qweight.scalar_type() == at::kByte && qweight.dim() == 3 && qweight.size(2) == kRows * kQuad &&
              qweight.is_contiguous(), "int8_linear: contiguous uint8 tiles [tiles, K / 4, 64]");
  const int64_t K = x.size(-1), Kp = qweight.size(1) * kQuad;
  TORCH_CHECK(N > 0 && (N + kRows - 1) / kRows == qweight.size(0) && (K + kQuad - 1) / kQuad * kQuad == Kp &&
              scale.numel() >= N, "int8_linear: shapes do not match");
  TORCH_CHECK(Kp <= kMaxK, "int8_linear: rows longer than ", kMaxK, " could overflow int32 sums");
  const at::Tensor xc = x.contiguous(), sc = scale.contiguous();
  const at::Tensor bc = bias ? bias->contiguous() : at::Tensor();
  TORCH_CHECK(!bc.defined() || (bc.scalar_type() == at::kFloat && bc.numel() == N), "int8_linear: bias");
  const int64_t M = K ? xc.numel() / K : 0;

  thread_local std::vector<int8_t> hi_buf, lo_buf;
  thread_local std::vector<float> step_buf;
  thread_local std::vector<int32_t> offset_buf;
  int8_t* hi = scratch(hi_buf, M * Kp);
  int8_t* lo = scratch(lo_buf, M * Kp);
  float* step = scratch(step_buf, M);
  int32_t* offset = scratch(offset_buf, 2 * M);
  const float* xp = xc.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m) {
    step[m] = split_int16(xp + m * K, K, Kp, hi + m * Kp, lo + m * Kp);
    int32_t sh = 0, sl = 0;
    for (int64_t k = 0; k < Kp; ++k) sh += hi[m * Kp + k], sl += lo[m * Kp + k];
    offset[2 * m] = 128 * sh, offset[2 * m + 1] = 128 * sl;
  }

  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = N;
  at::Tensor y = at::empty(sizes, x.options());
  const uint8_t* wp = qweight.data_ptr<uint8_t>();
  const float* sp = sc.data_ptr<float>();
  const float* bp = bc.defined() ? bc.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, qweight.size(0), std::max<int64_t>(1, kTaskBytes / (kRows * Kp)), [&](int64_t a, int64_t b) {
    for (int64_t m0 = 0; m0 < M; m0 += kTokens)
      kTilesFor[std::min(kTokens, M - m0)](hi, lo, offset, step, wp, sp, bp, yp, Kp, N, m0, a, b);
  });
  return y;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tokentop, m) {
  m.def("int8_linear(Tensor x, Tensor qweight, Tensor scale, int out_features, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(tokentop, CPU, m) { m.impl("int8_linear", int8_linear); }
