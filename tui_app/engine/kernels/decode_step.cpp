// A quantized Llama's decode step for one new token per sequence, in one call: the embedding row,
// RoPE's cos and sin at the position, then each decoder layer (RMSNorm, q/k/v as one joined
// projection, RoPE, the static cache's write, attention over its filled slots, o, the residual,
// RMSNorm, gate/up joined, SiLU(gate) * up, down, the residual), the final RMSNorm and the LM head.
//
// Why: decode of the default model is memory-bound and the kernels stream its weights at the
// memory's pace, yet a compiled int4 step spent ~1.9 ms of ~5.6 outside them (perf at 5a79cd8, 2026-11-22):
// dynamo and Python around the graph, the C++ wrapper's boxed op calls, its allocations and tensor
// checks, and ~150 small fused kernels between the 121 kernel calls; called eagerly layer by layer
// the Python around them cost more (embedding and RoPE 0.3 ms, the final norm 0.25). Here each
// projection is the kernels' own function (int4.h, int8.h, attention.h) on raw pointers with
// buffers reused across calls; what is left per layer is a few loops over 576 to 3072 floats.
//
// The same numbers as transformers' LlamaDecoderLayer over a StaticCache to float rounding: the
// cache layer's `cumulative_length` says where this token's K/V go and is advanced, as
// StaticLayer.update does; the tests check the logits and greedy tokens against the layer-by-layer step.
#include "isa.h"  // first: it picks the projections' bodies and attention.h's ATen vectors
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "attention.h"
#include "int4.h"
#include "int8.h"

namespace {

using attn::Vec;

// y = x / sqrt(mean(x^2) + eps) * w over n floats (LlamaRMSNorm in fp32)
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y) {
  Vec acc(0.f);
  int64_t i = 0;
  for (; i + Vec::size() <= n; i += Vec::size()) {
    const Vec v = Vec::loadu(x + i);
    acc = at::vec::fmadd(v, v, acc);
  }
  float sum = attn::hsum(acc);
  for (; i < n; ++i) sum += x[i] * x[i];
  const float r = 1.f / std::sqrt(sum / float(n) + eps);
  for (i = 0; i < n; ++i) y[i] = w[i] * (x[i] * r);
}

// x (one head of `d` floats) = x * cos + rotate_half(x) * sin, rotate_half(x) = (-x[d/2:], x[:d/2])
void rope(float* x, const float* cos, const float* sin, int64_t d) {
  const int64_t h = d / 2;
  for (int64_t i = 0; i < h; ++i) {
    const float a = x[i], b = x[i + h];
    x[i] = a * cos[i] - b * sin[i];
    x[i + h] = b * cos[i + h] + a * sin[i + h];
  }
}

// out[i] = silu(gate[i]) * up[i] = gate / (1 + exp(-gate)) * up
void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + Vec::size() <= n; i += Vec::size()) {
    const Vec g = Vec::loadu(gate + i);
    (g / (Vec(1.f) + g.neg().exp()) * Vec::loadu(up + i)).store(out + i);
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
}

// One projection of the pooled weights.
struct Projection {
  const uint8_t* w;
  const float* scale;  // int8's row scales; null for int4
  int64_t N, K;

  void operator()(const float* x, int64_t M, float* y) const {
    if (scale)
      int8k::matmul(x, M, K, w, scale, N, nullptr, y);
    else
      int4k::matmul(x, M, K, w, N, nullptr, y);
  }
};

// The projection at layout (offset of its tiles in the weight pool in bytes, offset of its scales
// in the scale pool or -1 for int4, out features, in features), checked to lie inside its pools.
Projection projection(const at::Tensor& weights, const std::optional<at::Tensor>& scales, at::IntArrayRef q) {
  const int64_t off = q[0], soff = q[1], N = q[2], K = q[3];
  TORCH_CHECK(N > 0 && K > 0 && (scales ? K <= int8k::kMaxK : K % int4k::kGroup == 0), "decode_step: a projection's shape");
  const int64_t tiles = (N + int8k::kRows - 1) / int8k::kRows;  // both formats: 16 rows a tile
  const int64_t bytes = scales ? tiles * int8k::kRows * ((K + int8k::kQuad - 1) / int8k::kQuad * int8k::kQuad)
                               : tiles * (K / int4k::kGroup) * int4k::kTile;
  TORCH_CHECK(off >= 0 && off + bytes <= weights.numel() && (!scales || (soff >= 0 && soff + N <= scales->numel())),
              "decode_step: a projection outside its pool");
  return {weights.data_ptr<uint8_t>() + off, scales ? scales->data_ptr<float>() + soff : nullptr, N, K};
}

at::Tensor decode_step(const at::Tensor& ids, const at::Tensor& position, const at::Tensor& embed, const at::Tensor& inv_freq,
                       double rope_scale, at::TensorList norms, const at::Tensor& weights, const std::optional<at::Tensor>& scales,
                       at::IntArrayRef layout, const at::Tensor& head, const at::Tensor& head_scales, at::IntArrayRef head_layout,
                       at::TensorList keys, at::TensorList values, at::TensorList lengths, int64_t heads, double eps,
                       double scaling) {
  const int64_t L = keys.size();
  TORCH_CHECK(L > 0 && values.size() == size_t(L) && lengths.size() == size_t(L) && norms.size() == size_t(2 * L + 1) &&
                  layout.size() == size_t(16 * L) && head_layout.size() == 4,
              "decode_step: per layer two norms, K, V, a length and four projections; the final norm; the head");
  TORCH_CHECK(ids.scalar_type() == at::kLong && ids.dim() == 2 && ids.size(1) == 1 && position.scalar_type() == at::kLong &&
                  position.numel() == ids.numel(), "decode_step: int64 ids and positions [B, 1]");
  TORCH_CHECK(embed.scalar_type() == at::kFloat && embed.dim() == 2 && embed.is_contiguous(), "decode_step: a float32 embedding table");
  TORCH_CHECK(inv_freq.scalar_type() == at::kFloat && inv_freq.is_contiguous(), "decode_step: float32 inverse frequencies");
  TORCH_CHECK(head.scalar_type() == at::kByte && head.is_contiguous() && head_scales.scalar_type() == at::kFloat &&
                  head_scales.is_contiguous(), "decode_step: an int8 head (uint8 tiles, float32 scales)");
  TORCH_CHECK(weights.scalar_type() == at::kByte && weights.is_contiguous(), "decode_step: a contiguous uint8 weight pool");
  TORCH_CHECK(!scales || (scales->scalar_type() == at::kFloat && scales->is_contiguous()), "decode_step: float32 scales");
  const int64_t B = ids.size(0), V = embed.size(0), D = embed.size(1), Hkv = keys[0].size(1), S = keys[0].size(2),
                hd = keys[0].size(3);
  TORCH_CHECK(heads > 0 && heads % Hkv == 0 && hd % 2 == 0 && inv_freq.numel() == hd / 2, "decode_step: heads and RoPE do not match");
  const int64_t qn = heads * hd, kvn = Hkv * hd;
  for (int64_t l = 0; l < L; ++l) {
    for (const at::Tensor& t : {keys[l], values[l]})
      TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous() && t.dim() == 4 && t.size(0) == B &&
                      t.size(1) == Hkv && t.size(2) == S && t.size(3) == hd, "decode_step: K, V [B, Hkv, S, head_dim]");
    TORCH_CHECK(lengths[l].scalar_type() == at::kLong && lengths[l].numel() == 1, "decode_step: int64 lengths");
  }
  for (const at::Tensor& n : norms)
    TORCH_CHECK(n.scalar_type() == at::kFloat && n.is_contiguous() && n.numel() == D, "decode_step: norms of D floats");

  std::vector<Projection> proj(4 * L);
  for (int64_t p = 0; p < 4 * L; ++p) proj[p] = projection(weights, scales, layout.slice(4 * p, 4));
  const Projection lm_head = projection(head, head_scales, head_layout);
  TORCH_CHECK(lm_head.K == D && lm_head.scale, "decode_step: the head is int8 over D inputs");
  for (int64_t l = 0; l < L; ++l) {
    const Projection &qkv = proj[4 * l], &o = proj[4 * l + 1], &gate_up = proj[4 * l + 2], &down = proj[4 * l + 3];
    TORCH_CHECK(qkv.K == D && qkv.N == qn + 2 * kvn && o.K == qn && o.N == D && gate_up.K == D && gate_up.N % 2 == 0 &&
                    down.K == gate_up.N / 2 && down.N == D, "decode_step: projections of the wrong shapes");
  }

  thread_local std::vector<float> h_buf, cos_buf, sin_buf;
  float* h = scratch(h_buf, B * D);
  float* cp = scratch(cos_buf, B * hd);
  float* sp = scratch(sin_buf, B * hd);
  const at::Tensor ic = ids.contiguous(), pc = position.contiguous();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t id = ic.data_ptr<int64_t>()[b];
    TORCH_CHECK(id >= 0 && id < V, "decode_step: a token id outside the vocabulary");
    std::copy(embed.data_ptr<float>() + id * D, embed.data_ptr<float>() + (id + 1) * D, h + b * D);
    // as LlamaRotaryEmbedding: freqs = position * inv_freq (fp32), repeated for both halves
    const float at = float(pc.data_ptr<int64_t>()[b]);
    for (int64_t i = 0; i < hd / 2; ++i) {
      const float f = at * inv_freq.data_ptr<float>()[i];
      cp[b * hd + i] = cp[b * hd + i + hd / 2] = std::cos(f) * float(rope_scale);
      sp[b * hd + i] = sp[b * hd + i + hd / 2] = std::sin(f) * float(rope_scale);
    }
  }
  const int64_t I = proj[2].N / 2;
  thread_local std::vector<float> x_buf, qkv_buf, q_buf, att_buf, gu_buf, act_buf, y_buf;
  float* x = scratch(x_buf, B * D);
  float* qkv = scratch(qkv_buf, B * (qn + 2 * kvn));
  float* q = scratch(q_buf, B * qn);
  float* att = scratch(att_buf, B * qn);
  float* gu = scratch(gu_buf, B * 2 * I);
  float* act = scratch(act_buf, B * I);
  float* y = scratch(y_buf, B * D);
  thread_local std::vector<int64_t> filled_buf;
  int64_t* filled = scratch(filled_buf, B);
  const float e = float(eps);

  for (int64_t l = 0; l < L; ++l) {
    int64_t& length = lengths[l].data_ptr<int64_t>()[0];
    const int64_t pos = length;
    TORCH_CHECK(pos >= 0 && pos < S, "decode_step: the static cache is full");
    const float* w_in = norms[2 * l].data_ptr<float>();
    for (int64_t b = 0; b < B; ++b) rms_norm(h + b * D, w_in, D, e, x + b * D);
    proj[4 * l](x, B, qkv);
    float* kc = keys[l].data_ptr<float>();
    float* vc = values[l].data_ptr<float>();
    for (int64_t b = 0; b < B; ++b) {
      float* row = qkv + b * (qn + 2 * kvn);
      const float *c = cp + b * hd, *s = sp + b * hd;
      for (int64_t j = 0; j < heads; ++j) {
        rope(row + j * hd, c, s, hd);
        std::copy(row + j * hd, row + (j + 1) * hd, q + b * qn + j * hd);
      }
      for (int64_t g = 0; g < Hkv; ++g) {
        float* k = row + qn + g * hd;
        rope(k, c, s, hd);
        std::copy(k, k + hd, kc + ((b * Hkv + g) * S + pos) * hd);
        std::copy(row + qn + kvn + g * hd, row + qn + kvn + (g + 1) * hd, vc + ((b * Hkv + g) * S + pos) * hd);
      }
    }
    length = pos + 1;
    std::fill(filled, filled + B, pos + 1);  // one cache length for the batch: StaticLayer's cumulative_length
    attn::attend(q, kc, vc, B, heads, Hkv, S, hd, filled, float(scaling), att);
    proj[4 * l + 1](att, B, y);
    for (int64_t i = 0; i < B * D; ++i) h[i] += y[i];
    const float* w_post = norms[2 * l + 1].data_ptr<float>();
    for (int64_t b = 0; b < B; ++b) rms_norm(h + b * D, w_post, D, e, x + b * D);
    proj[4 * l + 2](x, B, gu);
    for (int64_t b = 0; b < B; ++b) silu_mul(gu + b * 2 * I, gu + b * 2 * I + I, I, act + b * I);
    proj[4 * l + 3](act, B, y);
    for (int64_t i = 0; i < B * D; ++i) h[i] += y[i];
  }
  for (int64_t b = 0; b < B; ++b) rms_norm(h + b * D, norms[2 * L].data_ptr<float>(), D, e, x + b * D);
  at::Tensor logits = at::empty({B, 1, lm_head.N}, embed.options());
  lm_head(x, B, logits.data_ptr<float>());
  return logits;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tokentop, m) {
  // The cache tensors and lengths are written in place; the logits [B, 1, vocab] come back.
  m.def("decode_step(Tensor ids, Tensor position, Tensor embed, Tensor inv_freq, float rope_scale, Tensor[] norms, "
        "Tensor weights, Tensor? scales, int[] layout, Tensor head, Tensor head_scales, int[] head_layout, "
        "Tensor(a!)[] keys, Tensor(b!)[] values, Tensor(c!)[] lengths, int heads, float eps, float scaling) -> Tensor");
}

TORCH_LIBRARY_IMPL(tokentop, CPU, m) { m.impl("decode_step", decode_step); }
