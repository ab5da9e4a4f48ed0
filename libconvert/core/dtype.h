// The safetensors dtype table (22 names, safetensors.md §4), in the reference's
// declaration order. Sizes are in bits because F4/F6 are sub-byte.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ckpt {

enum class Dtype : uint8_t {
  BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ,
  I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64,
};

inline constexpr int kDtypeCount = 22;

std::optional<Dtype> dtype_from_name(std::string_view name);  // exact, case-sensitive
const char* dtype_name(Dtype d);
uint32_t dtype_bits(Dtype d);
// Float types whose payload can hold NaN/Inf or reserved codes (checked by --deep).
bool dtype_is_float(Dtype d);

}  // namespace ckpt
