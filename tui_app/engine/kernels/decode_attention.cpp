// Attention of one new token per sequence over a static KV cache, reading only the filled slots.
//
// Why: a compiled decode step keeps the static cache's full length (a bucket of 256, 512, ...
// slots) so its shapes never change; SDPA then reads every slot and masks the empty ones out. On
// the default model's int4 + compile step that was a fifth of the CPU time at 270 tokens in a
// 512-slot cache (perf: MKL's sgemv under the flash-attention kernel, one call per head). Here the
// shapes stay static and the position, a tensor, says how many slots to read.
//
// q [B, Hq, 1, D]; k, v [B, Hkv, S, D] (the cache layers); position [B, 1]: sequence b's slots
// 0..position[b] are filled (the engine's batches repeat one prompt, so all agree there, but the op
// takes each row's own: reading row 0's for every row gave the other rows wrong answers silently).
// Query head h reads K/V head h / (Hq / Hkv), as repeat_kv and SDPA's enable_gqa pair them.
// Returns [B, 1, Hq, D]: the layout transformers' attention functions return.
// ATen's vectors (isa.h): the exponentials are its exp_u20, which SDPA's CPU flash attention uses as well.
#include "isa.h"
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <vector>

#include "attention.h"

namespace {

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& position,
                            double scale) {
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat,
              "decode_attention: float32 query, keys and values");
  TORCH_CHECK(q.dim() == 4 && q.size(2) == 1 && k.dim() == 4 && k.sizes() == v.sizes() && k.is_contiguous() &&
                  v.is_contiguous(), "decode_attention: q [B, Hq, 1, D] and contiguous k, v [B, Hkv, S, D]");
  const int64_t B = q.size(0), Hq = q.size(1), D = q.size(3), Hkv = k.size(1), S = k.size(2);
  TORCH_CHECK(k.size(0) == B && k.size(3) == D && Hkv > 0 && Hq % Hkv == 0, "decode_attention: shapes do not match");
  TORCH_CHECK(position.scalar_type() == at::kLong && position.numel() == B, "decode_attention: an int64 position per sequence [B, 1]");
  const at::Tensor pc = position.contiguous();
  std::vector<int64_t> filled(B);
  for (int64_t b = 0; b < B; ++b) {
    filled[b] = pc.data_ptr<int64_t>()[b] + 1;
    TORCH_CHECK(filled[b] >= 1 && filled[b] <= S, "decode_attention: position outside the cache");
  }
  const at::Tensor qc = q.contiguous();
  at::Tensor out = at::empty({B, 1, Hq, D}, q.options());
  attn::attend(qc.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), B, Hq, Hkv, S, D, filled.data(), float(scale),
               out.data_ptr<float>());
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tokentop, m) {
  m.def("decode_attention(Tensor q, Tensor k, Tensor v, Tensor position, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(tokentop, CPU, m) { m.impl("decode_attention", decode_attention); }
