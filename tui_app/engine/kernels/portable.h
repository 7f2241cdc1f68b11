// The portable bodies' vectors: one lane per row of a tile (the layout quant.py packs for the VNNI
// kernels, so one packing serves both), written in GCC's vector extensions (GCC and Clang) at the
// target's own width: AVX2's 8 lanes, NEON's 4, AVX-512's 16. No intrinsic, so the same source
// builds for x86 and ARM (but for fp16's convert, below).
//
// Why fp32 products rather than an integer dot product: AVX2 and NEON's byte multiplies (vpmaddubsw,
// sdot) either saturate on the VNNI layout's unsigned weights or need ARM's dot-product extension,
// and a weight widened to fp32 in a register is one shift or mask, one convert and one fused
// multiply-add: it never leaves the registers, so decode still reads one or half a byte a weight,
// the point of the lever. The activations stay fp32, exact where the VNNI path rounds them.
#pragma once

#include <c10/util/Half.h>

#include <cstdint>
#include <cstring>

#include "isa.h"
#if defined(__AVX__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace {
namespace vec16 {

// One vector of the target's own width: GCC lowers wider ones to several registers, but kept
// arrays of them on the stack (measured: int8 at 5 GB/s, the accumulators stored and reloaded
// through general registers each step). A tile's 16 rows are kParts of these.
#if defined(__AVX512F__)
constexpr int kBytes = 64;
#elif defined(__AVX__)
constexpr int kBytes = 32;
#else
constexpr int kBytes = 16;
#endif
constexpr int kLanes = kBytes / 4, kParts = 16 / kLanes;
typedef float f32 __attribute__((vector_size(kBytes)));
typedef int32_t i32 __attribute__((vector_size(kBytes)));

inline i32 words(const uint8_t* p) {
  i32 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline f32 widen(i32 v) { return __builtin_convertvector(v, f32); }

// kLanes fp16 values at p (scales or mins) as fp32, with F16C's or NEON's convert: GCC 12 lowers
// a convert of a _Float16 vector to one instruction per lane.
inline f32 halves(const uint8_t* p) {
#if defined(__AVX512F__)
  return f32(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
#elif defined(__F16C__) && defined(__AVX__)
  return f32(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif defined(__ARM_NEON)
  float16x4_t h;
  std::memcpy(&h, p, sizeof h);
  return f32(vcvt_f32_f16(h));
#else
  f32 v;
  for (int i = 0; i < kLanes; ++i) v[i] = float(c10::Half(reinterpret_cast<const uint16_t*>(p)[i], c10::Half::from_bits()));
  return v;
#endif
}

// Rows [0, live) of y = the tile's sums (kParts vectors) * scale (+ bias): a tile's last rows past N
// are padding and not written.
inline void store(float* y, const f32* v, const float* scale, const float* bias, int64_t live) {
  for (int64_t r = 0; r < live; ++r) y[r] = v[r / kLanes][r % kLanes] * (scale ? scale[r] : 1.f) + (bias ? bias[r] : 0.f);
}

}  // namespace vec16
}  // namespace
