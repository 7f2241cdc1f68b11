// y = x @ w.T (+ bias) for int4 weights in groups of 32 along K: w = scale * q + min, q in 0..15,
// scale and min in fp16 (as in GGUF's Q4_1).
//
// Why: torchao's int4 on CPU has no fused kernel for this CPU and decoded slower than fp32; decode
// reads every weight once per token, so the kernel must stream them at the memory's pace.
// Two things decide that, both measured on the 2-core EPYC this was built on:
// - The work per weight. Each token's activations are int16 split into two bytes (activations.h),
//   so vpdpbusd multiplies 64 nibbles with 64 activation bytes. Sixteen rows are one tile, one row
//   per int32 lane: a group's activations are the same for all sixteen lanes (a broadcast), each
//   lane sums its own row, and the per-group scales and mins of the sixteen rows are one vector
//   each. No lane shuffles, no horizontal sums: rows one by one ran at 20 GB/s from the cache.
// - The order of the reads. A tile's group is 320 bytes in one piece: 256 of nibbles, then the 16
//   rows' scales and mins. One sequential stream per layer reads at the rate of a plain sum over
//   the same bytes (20.1-20.8 GB/s vs 20.3-20.6), where weights, scales and mins in three arrays
//   read at 15.5-16 (software prefetching made either slower there; on a VM with half that
//   bandwidth the one stream gains from asking for lines 8 KiB ahead: isa.h's ahead()).
// The mins need no work per weight: sum_k x_k * min_g = min_g * (sum of x over the group).
// Without AVX-512 VNNI the same tiles are read by the portable body (portable.h, isa.h).
#include "isa.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include "int4.h"

namespace {

using int4k::kGroup, int4k::kRows, int4k::kTile;

at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& packed, int64_t N, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "int4_linear: float32 activations");
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.dim() == 3 && packed.size(2) == kTile && packed.is_contiguous(),
              "int4_linear: contiguous uint8 tiles [tiles, groups, 320]");
  const int64_t groups = packed.size(1), K = groups * kGroup;
  TORCH_CHECK(x.size(-1) == K && N >= 0 && (N + kRows - 1) / kRows == packed.size(0), "int4_linear: shapes do not match");
  const at::Tensor xc = x.contiguous();
  const at::Tensor bc = bias ? bias->contiguous() : at::Tensor();
  TORCH_CHECK(!bc.defined() || (bc.scalar_type() == at::kFloat && bc.numel() == N), "int4_linear: bias");
  const int64_t M = c10::multiply_integers(x.sizes().begin(), x.sizes().end() - 1);  // not numel / K: K may be 0

  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = N;
  at::Tensor y = at::empty(sizes, x.options());
  int4k::matmul(xc.data_ptr<float>(), M, K, packed.data_ptr<uint8_t>(), N, bc.defined() ? bc.data_ptr<float>() : nullptr,
                y.data_ptr<float>());
  return y;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tokentop, m) {
  m.def("int4_linear(Tensor x, Tensor packed, int out_features, Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(tokentop, CPU, m) { m.impl("int4_linear", int4_linear); }
