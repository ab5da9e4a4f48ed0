// Bit-exact dequantization of ggml blocks to f32 (gguf.md §5), matching ggml's own
// `to_float` output. Two implementations: the scalar reference (every type) and AVX2 block
// loops (ggml_dequant_avx2.cpp) for the common types, picked at run time by what the CPU
// has; the AVX2 results are proven bit-identical to the scalar ones on every code
// (tests/numerics/ggml_dequant_isa_test.cpp). Every product in these formats is exact in binary32 and the only
// rounding is the final `d·q − m` (or `+ m`) of the formats with a minimum, so the
// result is "the exact value rounded once to f32" — what ggml computes.
// Pure functions; no allocation after the first call (which verifies the tables); none throws.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace ckpt {

struct F32Digest;      // numerics/f32_digest.h
struct DigestWeights;  // numerics/f32_digest.h

// IEEE binary16 → binary32, exact, subnormals included; Inf stays Inf, NaN keeps its payload
// and is quiet (bit 22 set): ggml's conversion (ggml-impl.h) multiplies by 2^−112, which
// quiets a signalling NaN, and F16C does the same (real_client_llama compares every half
// with libggml-base's to_float). (Inline: the block loops of both ISAs call them once per block.)
inline float ggml_fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: man · 2^−24, exact in binary32
    const float v = static_cast<float>(man) * 0x1p-24f;
    return sign ? -v : v;
  }
  const uint32_t e32 = exp == 0x1F ? 0xFFu : exp + (127 - 15);
  const uint32_t quiet = exp == 0x1F && man != 0 ? 0x00400000u : 0;
  return std::bit_cast<float>(sign | (e32 << 23) | (man << 13) | quiet);
}
// bfloat16 → binary32: the bits shifted into the high half.
inline float ggml_bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }
// E8M0_TO_FP32_HALF: 2^(e−128); e < 2 gives fp32 denormals, 255 gives 2^127 (no NaN).
inline float ggml_e8m0_to_f32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}
// q · d + m (Q4_1, Q5_1) as ggml's `x0*d + m` computes on x86: when the product p and the
// minimum m are both NaN, the product's NaN (addss returns its first operand). Spelled out
// because compilers treat the addition as commutative and order it as they like (clang
// did, for 0 · inf + NaN: the fuzzer found it); p is already quiet (a product). Both ISAs
// use this rule (the AVX2 loops blend p where it is NaN).
inline float ggml_add_minimum(float p, float m) { return p != p ? p : p + m; }

// True for the types ggml_dequantize handles.
bool ggml_dequant_supported(int32_t type);
// "unsupported type IQ1_M (id 29)", "unsupported type Q4_2 (id 4, removed)",
// "unsupported type id 99 (not a ggml type)".
std::string ggml_unsupported_message(int32_t type);

// Dequantizes complete blocks of ggml type `type`. `out.size()` must be
// blocks × block_size and `whole_blocks.size()` a multiple of the type size.
// Returns false with `error` set ("unsupported type IQ1_M (id 29)", a size mismatch,
// or corrupt lookup tables) and leaves `out` unspecified.
bool ggml_dequantize(int32_t type, std::span<const uint8_t> whole_blocks, std::span<float> out, std::string& error);

// The instruction sets ggml_dequantize can run on, in order, each including the one before:
// `scalar` is the reference; `avx2` the AVX2 block loops; `avx512` the AVX-512 loops of the
// types that have one (ggml_dequant_has_avx512_loop) and the AVX2 loops of the rest. Every
// code outside numerics that has an AVX2 loop of its own runs it from avx2 up (isa >= avx2).
enum class DequantIsa { scalar, avx2, avx512 };

// What this CPU runs (checked once): avx512 when it has AVX-512F (and AVX2 and F16C), avx2
// when it has AVX2 and F16C, else scalar.
DequantIsa ggml_dequant_best_isa();
// What ggml_dequantize uses now: ggml_dequant_best_isa(), unless the environment's
// CKPT_DEQUANT_ISA asked for less at the first call (benchmarks time the reference, or the
// AVX2 loops on an AVX-512 CPU, that way) or ggml_dequant_force_isa was called. A value
// that ggml_dequant_isa_from_environment refuses runs the scalar reference (exact, never a
// guessed faster path); ckpt, ckpt-gpu and the test binary refuse it before any work.
DequantIsa ggml_dequant_isa();
// The ISA a CKPT_DEQUANT_ISA value asks for, clamped to what this CPU runs: "" or "auto"
// the best, "scalar", "avx2", "avx512". Anything else is false with `error` naming the
// value and the accepted ones.
bool parse_dequant_isa(std::string_view value, DequantIsa& isa, std::string& error);
// The same for the environment's CKPT_DEQUANT_ISA (unset is "auto").
bool ggml_dequant_isa_from_environment(DequantIsa& isa, std::string& error);
// Test and benchmark hook: makes ggml_dequantize use `isa` process-wide (an ISA the CPU
// lacks falls back to scalar). Returns the previous choice.
DequantIsa ggml_dequant_force_isa(DequantIsa isa);
// True when `isa` has its own block loop for `type` (other types run the scalar loop).
bool ggml_dequant_has_fast_path(DequantIsa isa, int32_t type);
// True when `type` has an AVX-512 loop (what DequantIsa::avx512 runs where the CPU has it).
bool ggml_dequant_has_avx512_loop(int32_t type);
// True when `isa` asks for AVX2 or more and this CPU runs AVX2: the check of every module
// with AVX2 loops of its own (the digest, the INT8-shift remap and decode, the GEMMs).
bool ggml_isa_runs_avx2(DequantIsa isa);
// Likewise for AVX-512 (the modules with AVX-512 loops of their own: the double product).
bool ggml_isa_runs_avx512(DequantIsa isa);
// ggml_dequantize on an explicit ISA (clamped to what the CPU runs), with no shared state:
// the tests compare the two paths through this.
bool ggml_dequantize_isa(DequantIsa isa, int32_t type, std::span<const uint8_t> whole_blocks, std::span<float> out,
                         std::string& error);

// The verify digest of the dequantization of complete blocks as elements first_index ..
// of a step: exactly f32_digest(ggml_dequantize(whole_blocks), first_index, w), every bit,
// for every input. Where ggml_dequant_has_fast_path (the AVX2 types) it is fused: each block
// loop's 8-float vectors go straight into the digest's sums and no f32 is stored (a block
// across a kDigestSpan boundary, only at a first_index that is not a multiple of the block
// size, is decoded to a buffer); other types and the scalar ISA dequantize 4096-element
// pieces on the stack and digest them. No allocation. Returns false with `error` set as
// ggml_dequantize does, or when first_index + elements > kDigestMaxElems; `out` is then
// unspecified. ggml_dequant_digest_isa on an explicit ISA (the tests compare them).
bool ggml_dequant_digest(int32_t type, std::span<const uint8_t> whole_blocks, uint64_t first_index,
                         const DigestWeights& w, F32Digest& out, std::string& error);
bool ggml_dequant_digest_isa(DequantIsa isa, int32_t type, std::span<const uint8_t> whole_blocks, uint64_t first_index,
                             const DigestWeights& w, F32Digest& out, std::string& error);

}  // namespace ckpt
