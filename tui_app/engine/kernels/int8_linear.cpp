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
// Without AVX-512 VNNI the same tiles are read by the portable body (portable.h, isa.h).
#include "isa.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include "int8.h"

namespace {

using int8k::kMaxK, int8k::kQuad, int8k::kRows;

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scale, int64_t N,
                       const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && scale.scalar_type() == at::kFloat,
              "int8_linear: float32 activations and scales");
  TORCH_CHECK(qweight.scalar_type() == at::kByte && qweight.dim() == 3 && qweight.size(2) == kRows * kQuad &&
              qweight.is_contiguous(), "int8_linear: contiguous uint8 tiles [tiles, K / 4, 64]");
  const int64_t K = x.size(-1), Kp = qweight.size(1) * kQuad;
  TORCH_CHECK(N >= 0 && (N + kRows - 1) / kRows == qweight.size(0) && (K + kQuad - 1) / kQuad * kQuad == Kp &&
              scale.numel() >= N, "int8_linear: shapes do not match");
  TORCH_CHECK(Kp <= kMaxK, "int8_linear: rows longer than ", kMaxK, " could overflow int32 sums");
  const at::Tensor xc = x.contiguous(), sc = scale.contiguous();
  const at::Tensor bc = bias ? bias->contiguous() : at::Tensor();
  TORCH_CHECK(!bc.defined() || (bc.scalar_type() == at::kFloat && bc.numel() == N), "int8_linear: bias");
  const int64_t M = c10::multiply_integers(x.sizes().begin(), x.sizes().end() - 1);  // not numel / K: K may be 0

  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = N;
  at::Tensor y = at::empty(sizes, x.options());
  int8k::matmul(xc.data_ptr<float>(), M, K, qweight.data_ptr<uint8_t>(), sc.data_ptr<float>(), N,
                bc.defined() ? bc.data_ptr<float>() : nullptr, y.data_ptr<float>());
  return y;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tokentop, m) {
  m.def("int8_linear(Tensor x, Tensor qweight, Tensor scale, int out_features, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(tokentop, CPU, m) { m.impl("int8_linear", int8_linear); }
