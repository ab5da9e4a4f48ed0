#include "numerics/int8_gemm_ref.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/checked_math.h"
#include "numerics/f64_lanes.h"
#include "numerics/fp8.h"
#include "numerics/int8_gemm_avx2.h"
#include "numerics/int8_gemm_avx512.h"

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

namespace {

// One code byte (two elements, low nibble first) at each shift -> the two int8
// lut_x2[c] << shift as a little-endian pair, built from kE2m1LutX2 once.
struct PairTable {
  uint16_t pair[4][256];
  PairTable() {
    for (int shift = 0; shift < 4; ++shift)
      for (int b = 0; b < 256; ++b) {
        const auto lo = static_cast<uint8_t>(kE2m1LutX2[b & 15] * (1 << shift));
        const auto hi = static_cast<uint8_t>(kE2m1LutX2[b >> 4] * (1 << shift));
        pair[shift][b] = static_cast<uint16_t>(lo | (hi << 8));
      }
  }
};

}  // namespace

bool decode_int8_shift(std::span<const uint8_t> mxfp4_slab, std::span<const uint8_t> shift2_slab,
                       const RemapParams& p, std::span<int8_t> q_out) {
  return decode_int8_shift_isa(ggml_dequant_isa(), mxfp4_slab, shift2_slab, p, q_out);
}

namespace {

// Row groups [g_begin, g_end) of one expert (rows [8·g_begin, min(8·g_end, p.rows))) into q,
// which starts at row 8·g_begin. Preconditions: p and the slabs valid (decode_int8_shift_isa).
void decode_groups(DequantIsa isa, std::span<const uint8_t> mxfp4_slab, std::span<const uint8_t> shift2_slab,
                   const RemapParams& p, uint64_t g_begin, uint64_t g_end, int8_t* q) {
  if (ggml_isa_runs_avx2(isa)) {
    int8_gemm_avx2::decode_int8_shift(mxfp4_slab.data(), shift2_slab.data(), p.rows, p.k, g_begin, g_end, q);
    return;
  }
  static const PairTable table;
  const uint64_t groups = ceil_div(p.rows, kRowsPerGroup), blocks = p.k / kBlock;
  // Tile by tile, each 128-byte tile read once and its 8 rows written 32 bytes each, in strips
  // of kStrip 32-blocks: for each strip, the row groups in order, so the reads are kStrip
  // sequential streams and each row gets kStrip·32 contiguous bytes. (Row by row would fetch
  // every tile 8 times at a stride of G·128 bytes; kb by kb would scatter the writes.)
  constexpr uint64_t kStrip = 8;
  for (uint64_t kb0 = 0; kb0 < blocks; kb0 += kStrip) {
    for (uint64_t g = g_begin; g < g_end; ++g) {
      const uint64_t rows = std::min(kRowsPerGroup, p.rows - g * kRowsPerGroup);
      for (uint64_t kb = kb0; kb < std::min(blocks, kb0 + kStrip); ++kb) {
        const uint8_t* tile = mxfp4_slab.data() + (kb * groups + g) * kTileBytes;
        for (uint64_t r8 = 0; r8 < rows; ++r8) {
          const uint64_t row = g * kRowsPerGroup + r8;
          const uint8_t* chunk = tile + r8 * kBlockBytes;
          const uint16_t* pair = table.pair[shift_of(shift2_slab, groups, row, kb)];
          int8_t* out = q + (row - g_begin * kRowsPerGroup) * p.k + kb * kBlock;
          for (uint64_t i = 0; i < kBlockBytes; ++i) {  // elements 2j (low nibble) and 2j+1 (high)
            const uint16_t v = pair[chunk[i]];
            out[2 * kTileSourceByte[i]] = static_cast<int8_t>(v & 0xFF);
            out[2 * kTileSourceByte[i] + 1] = static_cast<int8_t>(v >> 8);
          }
        }
      }
    }
  }
}

bool decode_args_ok(std::span<const uint8_t> mxfp4_slab, std::span<const uint8_t> shift2_slab, const RemapParams& p) {
  return p.k != 0 && p.k % kBlock == 0 && p.rows != 0 && checked_mul(p.rows, p.k) &&
         mxfp4_slab.size() == remap_mxfp4_bytes(p) && shift2_slab.size() == remap_shift2_bytes(p);
}

}  // namespace

bool decode_int8_shift_isa(DequantIsa isa, std::span<const uint8_t> mxfp4_slab, std::span<const uint8_t> shift2_slab,
                           const RemapParams& p, std::span<int8_t> q_out) {
  if (!decode_args_ok(mxfp4_slab, shift2_slab, p) || !size_is(q_out.size(), p.rows, p.k)) return false;
  decode_groups(isa, mxfp4_slab, shift2_slab, p, 0, ceil_div(p.rows, kRowsPerGroup), q_out.data());
  return true;
}

bool int8_shift_digest(std::span<const uint8_t> mxfp4_slab, std::span<const uint8_t> shift2_slab, const RemapParams& p,
                       const DigestWeights& w, F32Digest& out) {
  return int8_shift_digest_isa(ggml_dequant_isa(), mxfp4_slab, shift2_slab, p, w, out);
}

bool int8_shift_digest_isa(DequantIsa isa, std::span<const uint8_t> mxfp4_slab, std::span<const uint8_t> shift2_slab,
                           const RemapParams& p, const DigestWeights& w, F32Digest& out) {
  if (!decode_args_ok(mxfp4_slab, shift2_slab, p) || p.rows * p.k / 4 > kDigestMaxElems) return false;
  // Row groups decoded into a piece of about 256 KiB (in L2) and digested there: the decode
  // never reaches main memory. Rows are k bytes (k % 32 == 0), so pieces are whole words.
  const uint64_t groups = ceil_div(p.rows, kRowsPerGroup), group_bytes = kRowsPerGroup * p.k;
  const uint64_t per_piece = std::max<uint64_t>(1, (uint64_t{256} << 10) / group_bytes);
  std::vector<int8_t> piece(std::min(groups, per_piece) * group_bytes);
  out = F32Digest{};
  for (uint64_t g = 0; g < groups; g += per_piece) {
    const uint64_t g_end = std::min(groups, g + per_piece);
    const uint64_t bytes = (std::min(p.rows, g_end * kRowsPerGroup) - g * kRowsPerGroup) * p.k;
    decode_groups(isa, mxfp4_slab, shift2_slab, p, g, g_end, piece.data());
    out += int8_digest_isa(isa, std::span<const int8_t>(piece.data(), bytes), g * group_bytes / 4, w);
  }
  return true;
}

bool int8_gemm_bf16(std::span<const int8_t> a, std::span<const float> a_scale, std::span<const int8_t> q,
                    std::span<const float> channel_scale, uint64_t m, uint64_t n, uint64_t k,
                    std::span<int32_t> acc_out, std::span<uint16_t> out_bf16) {
  return int8_gemm_bf16_isa(ggml_dequant_isa(), a, a_scale, q, channel_scale, m, n, k, acc_out, out_bf16);
}

bool int8_gemm_bf16_isa(DequantIsa isa, std::span<const int8_t> a, std::span<const float> a_scale,
                        std::span<const int8_t> q, std::span<const float> channel_scale, uint64_t m, uint64_t n,
                        uint64_t k, std::span<int32_t> acc_out, std::span<uint16_t> out_bf16) {
  // |acc| <= k·128·128 for any int8 inputs (k·127·96 for quantized activations and decoded
  // weights), which must fit int32.
  constexpr uint64_t kMaxK = INT32_MAX / (128 * 128);
  if (k > kMaxK || !size_is(a.size(), m, k) || !size_is(q.size(), n, k) || a_scale.size() != m) return false;
  if (channel_scale.size() != n || !size_is(out_bf16.size(), m, n)) return false;
  if (!acc_out.empty() && acc_out.size() != out_bf16.size()) return false;
  if (m == 0 || n == 0) return true;  // empty spans may hold null pointers
  std::vector<int32_t> own;
  std::span<int32_t> acc = acc_out;
  if (acc.empty()) {
    own.resize(out_bf16.size());
    acc = own;
  }
  if (ggml_isa_runs_avx2(isa)) {
    int8_gemm_avx2::int32_gemm(a.data(), q.data(), m, n, k, acc.data());
  } else {
    for (uint64_t r = 0; r < m; ++r) {
      const int8_t* ar = a.data() + r * k;
      for (uint64_t c = 0; c < n; ++c) {
        const int8_t* qc = q.data() + c * k;
        int32_t sum = 0;
        for (uint64_t i = 0; i < k; ++i) sum += int32_t(ar[i]) * int32_t(qc[i]);
        acc[r * n + c] = sum;
      }
    }
  }
  // The epilogue (spec §5), one path for both ISAs: fp32 left to right, then BF16 RNE.
  for (uint64_t r = 0; r < m; ++r)
    for (uint64_t c = 0; c < n; ++c) {
      const float scaled = (static_cast<float>(acc[r * n + c]) * a_scale[r]) * channel_scale[c];
      out_bf16[r * n + c] = bf16_from_float_rne(scaled);
    }
  return true;
}

bool gemm_f64(std::span<const float> x, std::span<const float> w, uint64_t m, uint64_t n, uint64_t k,
              std::span<double> y) {
  return gemm_f64_isa(ggml_dequant_isa(), x, w, m, n, k, y);
}

bool gemm_f64_isa(DequantIsa isa, std::span<const float> x, std::span<const float> w, uint64_t m, uint64_t n,
                  uint64_t k, std::span<double> y) {
  if (!size_is(x.size(), m, k) || !size_is(w.size(), n, k) || !size_is(y.size(), m, n)) return false;
  if (m == 0 || n == 0) return true;
  if (ggml_isa_runs_avx512(isa) && int8_gemm_avx512::supported()) {
    int8_gemm_avx512::f64_gemm(x.data(), w.data(), m, n, k, y.data());
    return true;
  }
  if (ggml_isa_runs_avx2(isa) && int8_gemm_avx2::fma_supported()) {
    int8_gemm_avx2::f64_gemm(x.data(), w.data(), m, n, k, y.data());
    return true;
  }
  for (uint64_t r = 0; r < m; ++r) {
    const float* xr = x.data() + r * k;
    for (uint64_t c = 0; c < n; ++c) {
      double lane[4] = {0, 0, 0, 0};
      y[r * n + c] = f64_lanes_finish(lane, xr, w.data() + c * k, 0, k);
    }
  }
  return true;
}

}  // namespace ckpt
