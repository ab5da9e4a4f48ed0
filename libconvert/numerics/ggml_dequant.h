// Bit-exact dequantization of ggml blocks to f32 (gguf.md §5), matching ggml's own
// `to_float` output. Every product in these formats is exact in binary32 and the only
// rounding is the final `d·q − m` (or `+ m`) of the formats with a minimum, so the
// result is "the exact value rounded once to f32" — what ggml computes.
// Pure functions; no allocation after the first call (which verifies the tables); none throws.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace ckpt {

// IEEE binary16 → binary32, exact, subnormals included; Inf stays Inf, NaN keeps its payload.
float ggml_fp16_to_f32(uint16_t h);
// bfloat16 → binary32: the bits shifted into the high half.
float ggml_bf16_to_f32(uint16_t h);
// E8M0_TO_FP32_HALF: 2^(e−128); e < 2 gives fp32 denormals, 255 gives 2^127 (no NaN).
float ggml_e8m0_to_f32_half(uint8_t e);

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

}  // namespace ckpt
