// y = (x @ w.T) * scale (+ bias) for int8 weights w [N, K] with one fp32 scale per output row.
//
// Why a kernel of our own: decode reads every weight once per token, so its speed is the rate at
// which a kernel streams weights from memory. MKL's fp32 GEMV streams at 11 GB/s on the 2-core
// EPYC this was built on, widening int8 to fp32 and multiplying in fp32 is compute-bound at about
// 7.5 G weights/s, while the memory delivers 25-27 GB/s. Here each token's activations are rounded
// to int16 (one scale per token) and the products are summed in int32, which the compiler turns
// into 32 multiply-adds per instruction (vpdpwssd on AVX-512 VNNI, vpmaddwd on AVX2): the kernel
// then runs at the memory's pace. The int16 rounding adds a relative error below 1e-4 of the
// largest activation, some 40x below what rounding the weights to int8 already costs.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "activations.h"

namespace {

constexpr int64_t kPrefetch = 4096;     // bytes ahead of the row being read: measured best of 0-8192
constexpr int64_t kTaskBytes = 1 << 16; // weights per thread task: small layers stay on one thread

// Rows [n0, n1) of y for all M tokens; each weight row is read once and used for every token
// while it sits in L1.
void rows(const int16_t* xq, const float* xs, const int8_t* w, const float* scale, const float* bias,
          float* y, int64_t M, int64_t K, int64_t N, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const int8_t* wr = w + n * K;
    __builtin_prefetch(wr + kPrefetch);
    const float add = bias ? bias[n] : 0.f;
    for (int64_t m = 0; m < M; ++m) {
      const int16_t* xm = xq + m * K;
      int32_t acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += int32_t(xm[k]) * int32_t(wr[k]);
      y[m * N + n] = float(acc) * xs[m] * scale[n] + add;
    }
  }
}

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scale,
                       const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && scale.scalar_type() == at::kFloat,
              "int8_linear: float32 activations and scales");
  TORCH_CHECK(qweight.scalar_type() == at::kChar && qweight.dim() == 2 && qweight.is_contiguous(),
              "int8_linear: a contiguous 2-D int8 weight");
  const int64_t N = qweight.size(0), K = qweight.size(1);
  TORCH_CHECK(x.size(-1) == K && scale.numel() == N, "int8_linear: shapes do not match");
  const at::Tensor xc = x.contiguous(), sc = scale.contiguous();
  const at::Tensor bc = bias ? bias->contiguous() : at::Tensor();
  TORCH_CHECK(!bc.defined() || (bc.scalar_type() == at::kFloat && bc.numel() == N), "int8_linear: bias");
  const int64_t M = K ? xc.numel() / K : 0;

  // The largest |int16| such that K products with |w| <= 127 cannot overflow int32.
  const float qmax = float(std::min(32767.0, std::floor(2147483647.0 / (127.0 * std::max<int64_t>(K, 1)))));
  thread_local std::vector<int16_t> xq_buf;
  thread_local std::vector<float> xs_buf;
  int16_t* xq = scratch(xq_buf, M * K);
  float* xs = scratch(xs_buf, M);
  const float* xp = xc.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = xp + m * K;
    round_int16(xm, K, 1.f / (xs[m] = int16_step(xm, K, qmax)), xq + m * K);
  }

  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = N;
  at::Tensor y = at::empty(sizes, x.options());
  const int8_t* wp = qweight.data_ptr<int8_t>();
  const float* sp = sc.data_ptr<float>();
  const float* bp = bc.defined() ? bc.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, N, std::max<int64_t>(1, kTaskBytes / std::max<int64_t>(K, 1)), [&](int64_t a, int64_t b) {
    rows(xq, xs, wp, sp, bp, yp, M, K, N, a, b);
  });
  return y;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tokentop, m) {
  m.def("int8_linear(Tensor x, Tensor qweight, Tensor scale, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(tokentop, CPU, m) { m.impl("int8_linear", int8_linear); }
