// Which body each kernel compiles, decided by what the compiler targets (native.py builds with
// -march=native, or -mcpu=native on ARM):
// - TOKENTOP_VNNI, AVX-512 with VNNI: vpdpbusd multiplies the weights' bytes with int16 activations
//   split into two bytes (activations.h), 64 products an instruction;
// - TOKENTOP_AVX2, AVX2 with FMA and F16C (x86 since 2013-2015, AMD's EPYC and Ryzen before Zen 4
//   among them): the weights' bytes or nibbles widened to int16 and vpmaddwd with the same int16
//   activations unsplit, so the same numbers as VNNI's to float rounding;
// - otherwise the generic body (portable.h): the weights widened to fp32 in registers in plain C++
//   vectors, which the compiler lowers to NEON, SVE or SSE2 alike.
// native.py's TOKENTOP_CPU_KERNELS picks below the best: `portable` builds without AVX-512 (the
// AVX2 body on x86), `generic` defines TOKENTOP_GENERIC (the plain body), so one machine tests all.
#pragma once

#if !defined(TOKENTOP_PORTABLE) && !defined(TOKENTOP_GENERIC) && defined(__AVX512F__) && defined(__AVX512VNNI__) && \
    defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define TOKENTOP_VNNI 1
#elif !defined(TOKENTOP_GENERIC) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define TOKENTOP_AVX2 1
#endif

// ATen's vector type for attention.h (as inductor's own C++ kernels use it), for the ISA this build
// targets; defined before any ATen header, so every kernel includes this first.
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define CPU_CAPABILITY_AVX512
#elif defined(__AVX2__) && defined(__FMA__)
#define CPU_CAPABILITY_AVX2
#endif  // elsewhere ATen picks NEON on ARM by itself, or its plain C++ loops

#include <cstdint>

// Asks for the weights' cache line kAhead bytes past p. Both kernels read their tiles as one
// sequential stream, yet on a VM with ~8-11 GB/s to memory (2026-11-22, before f62053c) they
// streamed at ~0.75 of a plain sum over the same bytes: the arithmetic between loads keeps fewer
// lines in flight than the hardware prefetcher needs. Asked for 8 KiB ahead (one line per 64 bytes
// read), the fused int4 step took 0.77x the time and int8's 0.82x (one process, alternating, the
// same tokens); 1 KiB ahead gained 0.94x, 16 KiB 0.87x. Past a layer's end the line is its neighbour's in the pool (the layers
// lie in call order), and past the pool's end a prefetch is dropped, never a fault.
constexpr int64_t kAhead = 8192;
inline void ahead(const uint8_t* p) { __builtin_prefetch(p + kAhead, 0, 3); }
