#include "numerics/int8_gemm_ref.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/checked_math.h"
#include "numerics/fp8.h"

namespace ckpt {
namespace {

constexpr uint64_t kBlock = 32;
constexpr uint64_t kBlockBytes = 16;
constexpr uint64_t kRowsPerGroup = 8;
constexpr uint64_t kTileBytes = 128;

bool size_is(size_t size, uint64_t a, uint64_t b) {
  auto product = checked_mul(a, b);
  return product && size == *product;
}

// max|x| / 127 as the kernel computes it; only an all-zero row gets 1.0 (an infinite max
// gives an infinite scale there too, and this reference must not be kinder than the GPU).
float row_scale(std::span<const float> row) {
  float amax = 0;
  for (float v : row) amax = std::max(amax, std::fabs(v));  // a NaN never wins the `<` inside max
  return amax == 0 ? 1.0f : amax / 127.0f;
}

int8_t quantize_one(float v, float scale) {
  const float r = std::nearbyint(v / scale);  // default FE_TONEAREST: ties to even
  if (std::isnan(r)) return 0;
  return static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
}

// Row `row`'s shift for 32-block kb, from the shift2 slab [S, G, 8].
unsigned shift_of(std::span<const uint8_t> shift2, uint64_t groups, uint64_t row, uint64_t kb) {
  const uint8_t byte = shift2[(kb / 4) * groups * kRowsPerGroup + row];
  return (byte >> (2 * (kb % 4))) & 3;
}

}  // namespace

bool quantize_activations(std::span<const float> x, uint64_t m, uint64_t k, std::span<int8_t> a_i8,
                          std::span<float> a_scale, float clamp_abs) {
  if (!size_is(x.size(), m, k) || a_i8.size() != x.size() || a_scale.size() != m) return false;
  std::vector<float> row(k);
  for (uint64_t r = 0; r < m; ++r) {
    auto src = x.subspan(r * k, k);
    std::copy(src.begin(), src.end(), row.begin());
    if (clamp_abs > 0)
      for (float& v : row) v = std::clamp(v, -clamp_abs, clamp_abs);
    a_scale[r] = row_scale(row);
    for (uint64_t c = 0; c < k; ++c) a_i8[r * k + c] = quantize_one(row[c], a_scale[r]);
  }
  return true;
}

bool decode_int8_shift(std::span<const uint8_t> mxfp4_slab, std::span<const uint8_t> shift2_slab,
                       const RemapParams& p, std::span<int8_t> q_out) {
  if (p.k == 0 || p.k % kBlock != 0 || p.rows == 0 || !size_is(q_out.size(), p.rows, p.k)) return false;
  if (mxfp4_slab.size() != remap_mxfp4_bytes(p) || shift2_slab.size() != remap_shift2_bytes(p)) return false;
  const uint64_t groups = ceil_div(p.rows, kRowsPerGroup), blocks = p.k / kBlock;
  for (uint64_t row = 0; row < p.rows; ++row) {
    for (uint64_t kb = 0; kb < blocks; ++kb) {
      const uint8_t* chunk = mxfp4_slab.data() + (kb * groups + row / kRowsPerGroup) * kTileBytes +
                             (row % kRowsPerGroup) * kBlockBytes;
      const int scale = 1 << shift_of(shift2_slab, groups, row, kb);
      int8_t* q = q_out.data() + row * p.k + kb * kBlock;
      for (uint64_t i = 0; i < kBlockBytes; ++i) {
        const uint64_t j = kTileSourceByte[i];  // elements 2j (low nibble) and 2j+1 (high)
        q[2 * j] = static_cast<int8_t>(kE2m1LutX2[chunk[i] & 15] * scale);
        q[2 * j + 1] = static_cast<int8_t>(kE2m1LutX2[chunk[i] >> 4] * scale);
      }
    }
  }
  return true;
}

bool int8_gemm_bf16(std::span<const int8_t> a, std::span<const float> a_scale, std::span<const int8_t> q,
                    std::span<const float> channel_scale, uint64_t m, uint64_t n, uint64_t k,
                    std::span<int32_t> acc_out, std::span<uint16_t> out_bf16) {
  // |acc| <= k·128·128 for any int8 inputs (k·127·96 for quantized activations and decoded
  // weights), which must fit int32.
  constexpr uint64_t kMaxK = INT32_MAX / (128 * 128);
  if (k > kMaxK || !size_is(a.size(), m, k) || !size_is(q.size(), n, k) || a_scale.size() != m) return false;
  if (channel_scale.size() != n || !size_is(out_bf16.size(), m, n)) return false;
  if (!acc_out.empty() && acc_out.size() != out_bf16.size()) return false;
  for (uint64_t r = 0; r < m; ++r) {
    const int8_t* ar = a.data() + r * k;
    for (uint64_t c = 0; c < n; ++c) {
      const int8_t* qc = q.data() + c * k;
      int32_t acc = 0;
      for (uint64_t i = 0; i < k; ++i) acc += int32_t(ar[i]) * int32_t(qc[i]);
      if (!acc_out.empty()) acc_out[r * n + c] = acc;
      const float scaled = (static_cast<float>(acc) * a_scale[r]) * channel_scale[c];
      out_bf16[r * n + c] = bf16_from_float_rne(scaled);
    }
  }
  return true;
}

}  // namespace ckpt
