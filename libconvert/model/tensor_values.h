// Streams one tensor's values as little-endian f32, or its stored bytes, to a sink in
// bounded chunks (the whole tensor is never in memory). The f32 values are exact:
// ggml blocks through ggml_dequantize (bit-identical to ggml's to_float), FP8 and
// MXFP4 safetensors weights as the exact product of code and scale (deepseek-v4.md §7).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "core/outcome.h"
#include "formats/loader.h"

namespace ckpt {

enum class DumpAs { f32, raw };

// Why a dump failed, so the CLI can pick its exit code.
enum class DumpError {
  none,
  not_found,    // no tensor of that name
  unsupported,  // a type or dtype without an f32 path, or an FP8 weight without a usable scale
  bad_value,    // a NaN code (E4M3 0x7F/0xFF, E8M0 0xFF) or broken sizes in the header
  io,           // reading the input failed
  sink,         // the sink returned false (writing the output failed)
};
// What a dump failure means for the exit code (core/outcome.h): the input's fault is 1,
// reading or writing 3.
inline Outcome outcome_of(DumpError e) {
  static constexpr Outcome kOutcome[] = {Outcome::ok,       Outcome::findings, Outcome::findings,
                                         Outcome::findings, Outcome::io,       Outcome::io};
  return kOutcome[static_cast<int>(e)];
}

using DumpSink = std::function<bool(std::span<const uint8_t>)>;

// Chunk size in output values (f32) or bytes (raw); every chunk but the last is at least
// this large where the tensor is, and a GGUF chunk holds whole blocks.
inline constexpr uint64_t kDumpChunkValues = 1u << 18;

// GGUF: every type ggml_dequant_supported() accepts. safetensors: F32, F16, BF16; F8_E4M3
// with its scale (X.weight ↔ X.scale E8M0 or X.weight_scale_inv F32; bare P ↔ P.scale;
// block from config.json quantization_config.weight_block_size, default 128×128); MXFP4
// experts (*.ffn.experts.E.w{1,2,3}.weight I8 [o, i/2] + .scale E8M0 [o, i/32]).
// `raw` writes the stored bytes of any tensor. On failure returns false with `error`
// naming the tensor (and element for a NaN code); the sink may already have received
// the chunks before the failing one.
bool dump_tensor(const LoadedModel& m, const std::string& name, DumpAs as, const DumpSink& sink, std::string& error,
                 DumpError* why = nullptr);

}  // namespace ckpt
