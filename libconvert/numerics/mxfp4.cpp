#include "numerics/mxfp4.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

namespace ckpt {
namespace {

// |e2m1| doubled: {0, 0.5, 1, 1.5, 2, 3, 4, 6} × 2 (spec §1 mag_x2).
constexpr std::array<uint32_t, 8> kMagX2 = {0, 1, 2, 3, 4, 6, 8, 12};

constexpr uint16_t kNan = 0x7FC0;

// BF16 bits of mag_x2 · 2^(b−128), from the bit fields alone: mag_x2 = m · 2^t with m ∈ {1, 3}.
// Normal when the leading bit's exponent L ≥ −126 (exponent field L + 127, mantissa 0 or 0x40
// for m = 3); below that the value is the integer m · 2^(t + b + 5) times the subnormal
// quantum 2^−133, and t + b + 5 ≥ 5 so it always is one. L ≥ 128 is beyond BF16 (NaN here;
// callers reject it first).
constexpr uint16_t magnitude_bits(uint32_t mag_x2, int b) {
  if (mag_x2 == 0) return 0;
  const int t = std::countr_zero(mag_x2);
  const uint32_t m = mag_x2 >> t;  // 1 or 3
  const int lead = t + (m == 3 ? 1 : 0) + b - 128;
  if (lead >= 128) return kNan;
  if (lead >= -126) return static_cast<uint16_t>((lead + 127) << 7 | (m == 3 ? 0x40 : 0));
  return static_cast<uint16_t>(m << (t + b + 5));
}

// kTable[b][c]: the BF16 bits of code c under scale byte b (0..254), sign included.
using ScaleTable = std::array<uint16_t, 16>;
constexpr std::array<ScaleTable, 255> kTable = [] {
  std::array<ScaleTable, 255> t{};
  for (int b = 0; b < 255; ++b)
    for (int c = 0; c < 16; ++c)
      t[b][c] = static_cast<uint16_t>(magnitude_bits(kMagX2[c & 7], b) | ((c & 8) ? 0x8000 : 0));
  return t;
}();
static_assert(kTable[127][2] == 0x3F80, "e2m1 code 2 is 1.0");
static_assert(kTable[0][1] == 0x0020, "0.5 · 2^-127 is the BF16 subnormal 32 · 2^-133");
static_assert(kTable[254][3] == 0x7F40, "1.5 · 2^127 is finite");
static_assert(kTable[5][8] == 0x8000, "code 8 is -0");

// Smallest magnitude index that overflows at b = 253 (|e2m1| = 4) and b = 254 (|e2m1| = 2).
constexpr uint8_t overflow_from(uint8_t scale) { return scale == 254 ? 4 : scale == 253 ? 6 : 8; }

}  // namespace

float e2m1_to_float(uint8_t code) {
  const float mag = static_cast<float>(kMagX2[code & 7]) * 0.5f;
  return (code & 8) ? -mag : mag;
}

bool mxfp4_bf16_overflows(uint8_t code, uint8_t scale) { return (code & 7) >= overflow_from(scale); }

uint16_t mxfp4_bf16(uint8_t code, uint8_t scale) {
  const uint16_t sign = (code & 8) ? 0x8000 : 0;
  if (scale == 0xFF || code > 15 || mxfp4_bf16_overflows(code, scale)) return sign | kNan;
  return kTable[scale][code];
}

const char* mxfp4_fault_name(Mxfp4Fault::Kind k) {
  switch (k) {
    case Mxfp4Fault::scale_nan: return "scale_nan";
    case Mxfp4Fault::overflow: return "overflow";
    case Mxfp4Fault::bad_arguments: return "bad_arguments";
  }
  return "unknown";
}

std::optional<Mxfp4Fault> dequant_mxfp4_rows(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                             uint64_t k, uint64_t row_begin, std::span<uint8_t> out_bf16_le) {
  if (k == 0 || k % 32 != 0 || packed.size() % (k / 2) != 0) return Mxfp4Fault{};
  const uint64_t rows = packed.size() / (k / 2), blocks = k / 32;
  if (scales.size() != rows * blocks || out_bf16_le.size() / 4 != packed.size() || out_bf16_le.size() % 4 != 0)
    return Mxfp4Fault{};
  const uint8_t* in = packed.data();
  uint8_t* out = out_bf16_le.data();
  for (uint64_t block = 0; block < rows * blocks; ++block, in += 16, out += 64) {
    const uint8_t b = scales[block];
    const uint64_t first = (row_begin * blocks + block) * 32;  // element index of the block's first value
    if (b == 0xFF) return Mxfp4Fault{Mxfp4Fault::scale_nan, first};
    if (b >= 253) {
      const uint8_t limit = overflow_from(b);
      for (uint64_t j = 0; j < 32; ++j)
        if (((in[j / 2] >> (4 * (j % 2))) & 7) >= limit) return Mxfp4Fault{Mxfp4Fault::overflow, first + j};
    }
    const ScaleTable& t = kTable[b];
    for (int j = 0; j < 16; ++j) {  // one byte: element 2j (low nibble), then 2j+1 (high nibble)
      const uint32_t pair = uint32_t{t[in[j] & 0xF]} | uint32_t{t[in[j] >> 4]} << 16;
      if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(out + 4 * j, &pair, 4);
      } else {
        for (int i = 0; i < 4; ++i) out[4 * j + i] = static_cast<uint8_t>(pair >> (8 * i));
      }
    }
  }
  return std::nullopt;
}

std::optional<Mxfp4Fault> dequant_mxfp4_transposed(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                                   uint64_t rows, uint64_t k, uint64_t row_begin,
                                                   std::vector<uint8_t>& scratch, std::span<uint8_t> out_bf16_le) {
  if (k == 0 || k % 32 != 0 || packed.size() != rows * (k / 2) || out_bf16_le.size() != 2 * rows * k)
    return Mxfp4Fault{};
  scratch.resize(out_bf16_le.size());
  if (auto fault = dequant_mxfp4_rows(packed, scales, k, row_begin, scratch)) return fault;
  constexpr uint64_t kTile = 64;  // 64 x 64 BF16 tiles: both sides stay in L1
  const uint8_t* in = scratch.data();
  uint8_t* out = out_bf16_le.data();
  for (uint64_t r0 = 0; r0 < rows; r0 += kTile)
    for (uint64_t c0 = 0; c0 < k; c0 += kTile) {
      const uint64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(k, c0 + kTile);
      for (uint64_t r = r0; r < r1; ++r)
        for (uint64_t c = c0; c < c1; ++c) std::memcpy(out + 2 * (c * rows + r), in + 2 * (r * k + c), 2);
    }
  return std::nullopt;
}

}  // namespace ckpt
