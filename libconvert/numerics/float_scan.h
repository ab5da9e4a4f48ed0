// Payload checks for safetensors dtypes (--deep): NaN/Inf in float types and the
// reserved codes of the 8-bit formats (E4M3 0x7F/0xFF, E8M0 0xFF, FNUZ 0x80).
// Counts only; the caller turns counts into findings with file, tensor, offset.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "core/dtype.h"

namespace ckpt {

struct ValueScan {
  uint64_t nan = 0;        // NaN values (or NaN codes for E4M3/E8M0/FNUZ)
  uint64_t inf = 0;        // infinities
  std::optional<uint64_t> first_bad;  // byte offset of the first NaN/Inf/reserved code in the span

  void merge_after(const ValueScan& later, uint64_t later_base) {
    if (!first_bad && later.first_bad) first_bad = later_base + *later.first_bad;
    nan += later.nan;
    inf += later.inf;
  }
};

// Scans whole elements of `dtype` in `bytes` (bytes.size() is a multiple of the
// element size for byte-sized types). Types without NaN encodings scan clean.
ValueScan scan_values(Dtype dtype, std::span<const uint8_t> bytes);

}  // namespace ckpt
