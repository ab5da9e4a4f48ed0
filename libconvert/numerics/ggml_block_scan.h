// The content layer of a GGUF check (gguf.md §3 "Content layer", ggml_validate_row_data):
// NaN/Inf in F32/F64/F16/BF16 elements, NaN/Inf in the fp16 (Q8_K: f32) scale fields of
// every quantized block, and MXFP4's reserved E8M0 exponent 0xFF. Integer types and
// NVFP4 (every UE4M3 byte decodes to a finite value) have nothing to check.
// Streams: call once per chunk of whole blocks; counts accumulate in the result.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace ckpt {

struct BlockScanResult {
  uint64_t nan = 0, inf = 0;   // float elements (F32/F64/F16/BF16)
  uint64_t bad_scales = 0;     // NaN/Inf block scale fields (d, dmin, m, s, ...)
  uint64_t bad_e8m0 = 0;       // MXFP4 blocks with e == 0xFF
  // base_offset + position in the span of the first bad element or scale field seen
  // (with base_offset 0: relative to the span start). Set once, by the first bad byte.
  std::optional<uint64_t> first_bad_byte;
  uint64_t total_bad() const { return nan + inf + bad_scales + bad_e8m0; }
};

// `whole_blocks` holds complete blocks of ggml type `type` (a trailing partial block is
// ignored); `base_offset` is added to positions recorded in first_bad_byte. Unknown and
// removed types are ignored (the structural reader rejects them).
void scan_ggml_blocks(int32_t type, std::span<const uint8_t> whole_blocks, uint64_t base_offset, BlockScanResult& r);

}  // namespace ckpt
