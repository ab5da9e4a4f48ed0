#include "numerics/float_scan.h"

#include <cstring>

namespace ckpt {
namespace {

// Counts elements whose masked bits mark NaN (> inf_bits) or Inf (== inf_bits):
// the exponent-all-ones test for IEEE-style formats. Branch-free so it vectorizes.
template <typename U>
ValueScan scan_ieee(std::span<const uint8_t> bytes, U abs_mask, U inf_bits) {
  ValueScan r;
  const size_t n = bytes.size() / sizeof(U);
  const uint8_t* p = bytes.data();
  uint64_t nan = 0, inf = 0;
  for (size_t i = 0; i < n; ++i) {
    U v;
    std::memcpy(&v, p + i * sizeof(U), sizeof(U));
    U a = static_cast<U>(v & abs_mask);
    nan += a > inf_bits;
    inf += a == inf_bits;
  }
  r.nan = nan;
  r.inf = inf;
  if (nan + inf > 0) {
    for (size_t i = 0; i < n; ++i) {
      U v;
      std::memcpy(&v, p + i * sizeof(U), sizeof(U));
      if (static_cast<U>(v & abs_mask) >= inf_bits) {
        r.first_bad = i * sizeof(U);
        break;
      }
    }
  }
  return r;
}

// 8-bit formats with NaN codes only (no infinity): counts bytes matching `is_nan`.
template <typename Pred>
ValueScan scan_codes(std::span<const uint8_t> bytes, Pred is_nan) {
  ValueScan r;
  uint64_t nan = 0;
  for (uint8_t b : bytes) nan += is_nan(b) ? 1 : 0;
  r.nan = nan;
  if (nan > 0)
    for (size_t i = 0; i < bytes.size(); ++i)
      if (is_nan(bytes[i])) {
        r.first_bad = i;
        break;
      }
  return r;
}

}  // namespace

ValueScan scan_values(Dtype dtype, std::span<const uint8_t> bytes) {
  switch (dtype) {
    case Dtype::F32:
    case Dtype::C64:  // two f32 per element
      return scan_ieee<uint32_t>(bytes, 0x7FFFFFFFu, 0x7F800000u);
    case Dtype::F64:
      return scan_ieee<uint64_t>(bytes, 0x7FFFFFFFFFFFFFFFull, 0x7FF0000000000000ull);
    case Dtype::F16:
      return scan_ieee<uint16_t>(bytes, 0x7FFF, 0x7C00);
    case Dtype::BF16:
      return scan_ieee<uint16_t>(bytes, 0x7FFF, 0x7F80);
    case Dtype::F8_E5M2:
      return scan_ieee<uint8_t>(bytes, 0x7F, 0x7C);
    case Dtype::F8_E4M3:  // E4M3FN: no infinity; 0x7F and 0xFF are NaN
      return scan_codes(bytes, [](uint8_t b) { return (b & 0x7F) == 0x7F; });
    case Dtype::F8_E8M0:  // 0xFF is NaN/reserved
      return scan_codes(bytes, [](uint8_t b) { return b == 0xFF; });
    case Dtype::F8_E4M3FNUZ:
    case Dtype::F8_E5M2FNUZ:  // FNUZ: the negative-zero code 0x80 is the only NaN
      return scan_codes(bytes, [](uint8_t b) { return b == 0x80; });
    default:
      return {};
  }
}

}  // namespace ckpt
