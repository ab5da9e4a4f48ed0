#include "numerics/int8_shift.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/checked_math.h"
#include "numerics/int8_shift_avx2.h"

namespace ckpt {
namespace {

constexpr unsigned kMaxHeadroom = 3;
constexpr uint64_t kBlock = 32;           // elements per UE8M0 scale
constexpr uint64_t kBlockBytes = 16;      // packed bytes per 32-block
constexpr uint64_t kRowsPerGroup = 8;     // rows per mxfp4 tile / shift2 group
constexpr uint64_t kTileBytes = 128;      // 8 rows x 16 bytes
constexpr uint64_t kBlocksPerShiftByte = 4;
constexpr int kMaxMagX2 = 12;
// Every delta >= kDeltaCap behaves as kDeltaCap for every accepted headroom: the folded
// target is at most 12·2^(3−8) = 0.375 < 0.5, so all codes become magnitude 0.
constexpr uint64_t kDeltaCap = 8;
constexpr int kRoundings = 2;

constexpr int magnitude_x2(uint8_t code) { return kE2m1LutX2[code & 7]; }

// ---- Per-(rounding, headroom, delta) tables -----------------------------------------------

// What one source code becomes in a block with a given delta, and its error in units of the
// block's own scale 2^(b−128) (so w = lut_x2[c] units exactly).
struct CodeOutcome {
  uint8_t nibble = 0;
  bool exact = true;
  double rel_err = 0;    // |w'−w|/|w| (0 when w == 0)
  double abs_units = 0;  // |w'−w| in block units
};

struct Tables {
  // [rounding][headroom][min(delta, kDeltaCap)]
  std::array<uint8_t, 256> bytes[kRoundings][kMaxHeadroom + 1][kDeltaCap + 1];
  CodeOutcome codes[kRoundings][kMaxHeadroom + 1][kDeltaCap + 1][16];
  // Per packed byte: nonzero-magnitude nibbles in the high half, Σ lut_x2² in the low half.
  std::array<uint32_t, 256> byte_nz_sq;
  // Per scale byte b: the block unit 2^(b−128) (w = lut_x2[c]·unit) and its square.
  std::array<double, 256> unit, unit_sq;
  // The same values as vpshufb tables for the AVX2 loops (int8_shift_avx2.h): the output
  // nibble of each code, [rounding][headroom][min(delta, kDeltaCap)][code]; the shift2 field
  // of each delta, [headroom][min(delta, 15)]; per code, lut_x2 != 0 and lut_x2².
  alignas(16) uint8_t nibbles[kRoundings][kMaxHeadroom + 1][kDeltaCap + 1][16];
  alignas(16) uint8_t shift_of[kMaxHeadroom + 1][16];
  alignas(16) uint8_t code_nonzero[16], code_square[16];
};

CodeOutcome code_outcome(uint8_t code, uint64_t delta, unsigned headroom, RemapRounding r) {
  CodeOutcome o;
  o.nibble = remap_code_nibble(code, delta, headroom, r);
  const int q = magnitude_x2(code);
  if (q == 0) return o;
  // Decoded magnitude in units of channel_scale is mag << shift2; one channel_scale unit is
  // 2^(delta − headroom) block units (both exact powers of two in a double).
  const double decoded_units =
      std::ldexp(double(magnitude_x2(o.nibble) << remap_shift2_for(headroom, delta)),
                 static_cast<int>(delta) - static_cast<int>(headroom));
  o.abs_units = std::fabs(decoded_units - q);
  o.exact = o.abs_units == 0;
  o.rel_err = o.abs_units / q;
  return o;
}

Tables build_tables() {
  Tables t{};
  for (int r = 0; r < kRoundings; ++r) {
    for (unsigned h = 0; h <= kMaxHeadroom; ++h) {
      for (uint64_t d = 0; d <= kDeltaCap; ++d) {
        const auto rounding = static_cast<RemapRounding>(r);
        for (int c = 0; c < 16; ++c) t.codes[r][h][d][c] = code_outcome(uint8_t(c), d, h, rounding);
        for (int b = 0; b < 256; ++b)
          t.bytes[r][h][d][b] = uint8_t(t.codes[r][h][d][b & 15].nibble | t.codes[r][h][d][b >> 4].nibble << 4);
        for (int c = 0; c < 16; ++c) t.nibbles[r][h][d][c] = t.codes[r][h][d][c].nibble;
      }
    }
  }
  for (unsigned h = 0; h <= kMaxHeadroom; ++h)
    for (uint64_t d = 0; d < 16; ++d) t.shift_of[h][d] = uint8_t(remap_shift2_for(h, d));
  for (int c = 0; c < 16; ++c) {
    const int q = magnitude_x2(uint8_t(c));
    t.code_nonzero[c] = q != 0;
    t.code_square[c] = uint8_t(q * q);
  }
  for (int b = 0; b < 256; ++b) {
    const int lo = magnitude_x2(uint8_t(b & 15)), hi = magnitude_x2(uint8_t(b >> 4));
    t.byte_nz_sq[b] = uint32_t((lo != 0) + (hi != 0)) << 16 | uint32_t(lo * lo + hi * hi);
    t.unit[b] = std::ldexp(1.0, b - 128);
    t.unit_sq[b] = t.unit[b] * t.unit[b];
  }
  return t;
}

const Tables& tables() {
  static const Tables t = build_tables();  // thread-safe one-time init
  return t;
}

// ---- Argument checks ------------------------------------------------------------------------

uint64_t blocks_per_row(const RemapParams& p) { return p.k / kBlock; }
uint64_t row_groups(const RemapParams& p) { return ceil_div(p.rows, kRowsPerGroup); }

RemapFault bad_arguments() { return RemapFault{RemapFault::bad_arguments, 0, 0}; }

// Shapes valid and small enough that every slab size below is free of overflow.
bool params_ok(const RemapParams& p) {
  if (p.k == 0 || p.k % kBlock != 0 || p.rows == 0 || p.headroom > kMaxHeadroom) return false;
  // (rows + 8)·k bounds every slab size and every part's span size.
  return p.rows < UINT64_MAX - kRowsPerGroup && checked_mul(p.rows + kRowsPerGroup, p.k).has_value();
}

// Parts stack to exactly p.rows rows with spans of exactly their size (weights only when
// `need_weights`).
bool parts_ok(const std::vector<RemapPart>& parts, const RemapParams& p, bool need_weights) {
  uint64_t rows = 0;
  for (const RemapPart& part : parts) {
    if (part.rows > p.rows - rows) return false;
    rows += part.rows;
    if (part.scale.size() != part.rows * blocks_per_row(p)) return false;
    if (need_weights && part.weight.size() != part.rows * (p.k / 2)) return false;
  }
  return rows == p.rows;
}

// The first 0xFF scale in row-major order over the stacked parts.
std::optional<RemapFault> find_nan_scale(const std::vector<RemapPart>& parts, const RemapParams& p) {
  uint64_t row0 = 0;
  for (const RemapPart& part : parts) {
    const void* hit = part.scale.empty() ? nullptr : std::memchr(part.scale.data(), 0xFF, part.scale.size());
    if (hit) {
      const uint64_t at = uint64_t(static_cast<const uint8_t*>(hit) - part.scale.data());
      return RemapFault{RemapFault::e8m0_nan, row0 + at / blocks_per_row(p), at % blocks_per_row(p)};
    }
    row0 += part.rows;
  }
  return std::nullopt;
}

// A target is mag_x2·2^(headroom − delta) <= 12·2^headroom, which fits int8 for every accepted
// headroom, so this never fires today. It exists so that widening the headroom range cannot
// silently wrap: it then names the first block holding a code whose target leaves int8.
std::optional<RemapFault> find_overflow(const std::vector<RemapPart>& parts, const RemapParams& p) {
  if ((kMaxMagX2 << p.headroom) <= 127) return std::nullopt;
  const uint64_t kb_count = blocks_per_row(p);
  uint64_t row = 0;
  for (const RemapPart& part : parts) {
    for (uint64_t r = 0; r < part.rows; ++r, ++row) {
      auto scales = part.scale.subspan(r * kb_count, kb_count);
      const uint8_t bmax = *std::max_element(scales.begin(), scales.end());
      for (uint64_t kb = 0; kb < kb_count; ++kb) {
        const uint64_t delta = bmax - scales[kb];
        if (delta >= p.headroom) continue;
        for (uint64_t j = 0; j < kBlockBytes; ++j) {
          const uint8_t byte = part.weight[r * (p.k / 2) + kb * kBlockBytes + j];
          const int top = std::max(magnitude_x2(byte & 15), magnitude_x2(byte >> 4));
          if ((top << (p.headroom - delta)) > 127) return RemapFault{RemapFault::overflow, row, kb};
        }
      }
    }
  }
  return std::nullopt;
}

// Everything that can fail, checked before a byte of `out` is written.
std::optional<RemapFault> check_inputs(const std::vector<RemapPart>& parts, const RemapParams& p,
                                       bool need_weights, uint64_t out_size, uint64_t expected) {
  if (!params_ok(p) || !parts_ok(parts, p, need_weights) || out_size != expected) return bad_arguments();
  if (auto f = find_nan_scale(parts, p)) return f;
  if (need_weights) return find_overflow(parts, p);
  return std::nullopt;
}

// Calls fn(global_row, weight_row, scale_row) for each row of the stacked parts.
template <class Fn>
void for_each_row(const std::vector<RemapPart>& parts, const RemapParams& p, bool with_weights, Fn&& fn) {
  const uint64_t kb_count = blocks_per_row(p), row_bytes = p.k / 2;
  uint64_t row = 0;
  for (const RemapPart& part : parts) {
    for (uint64_t r = 0; r < part.rows; ++r, ++row) {
      auto weight_row = with_weights ? part.weight.subspan(r * row_bytes, row_bytes) : std::span<const uint8_t>{};
      fn(row, weight_row, part.scale.subspan(r * kb_count, kb_count));
    }
  }
}

// Whether the AVX2 loops run for `isa` (only where the CPU has them).
bool use_avx2(DequantIsa isa) { return ggml_isa_runs_avx2(isa); }

uint8_t max_scale(std::span<const uint8_t> scales, bool avx2) {
  if (avx2) return int8_shift_avx2::max_byte(scales.data(), scales.size());
  return *std::max_element(scales.begin(), scales.end());
}

// ---- mxfp4 -----------------------------------------------------------------------------------

// Writes row `row`'s 16-byte chunk of every 32-block's tile.
// `bmax` is the row's largest scale.
void remap_row_codes(std::span<const uint8_t> weight_row, std::span<const uint8_t> scale_row, uint8_t bmax,
                     uint64_t row, const RemapParams& p, uint8_t* out) {
  const uint64_t tile_stride = row_groups(p) * kTileBytes;
  uint8_t* dst = out + (row / kRowsPerGroup) * kTileBytes + (row % kRowsPerGroup) * kBlockBytes;
  const uint8_t* src = weight_row.data();
  const auto& byte_tables = tables().bytes[static_cast<int>(p.rounding)][p.headroom];
  for (uint64_t kb = 0; kb < scale_row.size(); ++kb, dst += tile_stride, src += kBlockBytes) {
    const auto& lut = byte_tables[std::min<uint64_t>(bmax - scale_row[kb], kDeltaCap)];
    for (uint64_t i = 0; i < kBlockBytes; ++i) dst[i] = lut[src[kTileSourceByte[i]]];
  }
}

// Rows rows..8·G−1 of the last group are zero in every tile.
void zero_padding_rows(const RemapParams& p, std::span<uint8_t> out) {
  const uint64_t last_group = row_groups(p) - 1, tile_stride = row_groups(p) * kTileBytes;
  const uint64_t first_pad = p.rows % kRowsPerGroup;
  if (first_pad == 0) return;
  for (uint64_t kb = 0; kb < blocks_per_row(p); ++kb) {
    uint8_t* tile = out.data() + kb * tile_stride + last_group * kTileBytes;
    std::memset(tile + first_pad * kBlockBytes, 0, (kRowsPerGroup - first_pad) * kBlockBytes);
  }
}

// A row's smallest and largest scale.
std::pair<uint8_t, uint8_t> minmax_scale(std::span<const uint8_t> scales, bool avx2) {
  if (avx2) {
    uint8_t lo, hi;
    int8_shift_avx2::minmax_byte(scales.data(), scales.size(), &lo, &hi);
    return {lo, hi};
  }
  const auto [lo, hi] = std::minmax_element(scales.begin(), scales.end());
  return {*lo, *hi};
}

void add_row_span(uint8_t lo, uint8_t hi, RemapStats& s) {
  const int span = hi - lo;
  ++s.row_span_hist[std::min(span, 16)];
  s.row_span_max = std::max(s.row_span_max, span);
}

// A block's nonzero-magnitude codes << 16 | Σ lut_x2² over its codes.
uint32_t block_nz_sq(const uint8_t* src, const Tables& t) {
  uint32_t nz_sq = 0;
  for (uint64_t j = 0; j < kBlockBytes; ++j) nz_sq += t.byte_nz_sq[src[j]];
  return nz_sq;
}

// A block with delta <= headroom is lossless: only the counts and Σw² change. `nz_sq` is
// block_nz_sq of its codes.
void add_lossless_block(uint32_t nz_sq, uint8_t scale, const Tables& t, RemapStats& s) {
  const uint64_t nonzero = nz_sq >> 16;
  s.nonzero += nonzero;
  s.exact_all += kBlock;
  s.exact_nonzero += nonzero;
  s.sum_sq_weight += double(nz_sq & 0xFFFF) * t.unit_sq[scale];
}

using CodeCounts = std::array<uint32_t, 16>;

void count_codes(const uint8_t* src, CodeCounts& count) {
  for (uint64_t j = 0; j < kBlockBytes; ++j) {
    ++count[src[j] & 15];
    ++count[src[j] >> 4];
  }
}

// Folded weights: every code's outcome from the table, weighted by its count. `unit` is the
// blocks' own 2^(b−128), shared by all counted blocks (same row, same delta).
void add_folded_counts(const CodeCounts& count, double unit, const CodeOutcome (&outcome)[16], RemapStats& s) {
  for (int c = 0; c < 16; ++c) {
    if (count[c] == 0) continue;
    const CodeOutcome& o = outcome[c];
    const int q = magnitude_x2(uint8_t(c));
    const double abs_err = o.abs_units * unit;
    s.exact_all += o.exact ? count[c] : 0;
    s.sum_abs_err += count[c] * abs_err;
    s.sum_sq_err += count[c] * abs_err * abs_err;
    s.max_abs_err = std::max(s.max_abs_err, abs_err);
    s.sum_sq_weight += double(count[c]) * q * q * unit * unit;
    if (q == 0) continue;
    s.nonzero += count[c];
    s.exact_nonzero += o.exact ? count[c] : 0;
    s.vanished_nonzero += (o.nibble & 7) == 0 ? count[c] : 0;
    s.sum_rel_err_nonzero += count[c] * o.rel_err;
    s.max_rel_err_nonzero = std::max(s.max_rel_err_nonzero, o.rel_err);
  }
}

// `nz_sq` is scratch of one uint32 a block, used by the AVX2 path.
void add_row_stats(std::span<const uint8_t> weight_row, std::span<const uint8_t> scale_row, uint8_t bmin, uint8_t bmax,
                   const RemapParams& p, bool avx2, std::vector<uint32_t>& nz_sq, RemapStats& s) {
  const Tables& t = tables();
  const auto& outcomes = t.codes[static_cast<int>(p.rounding)][p.headroom];
  add_row_span(bmin, bmax, s);
  if (avx2) int8_shift_avx2::block_nz_sq(weight_row.data(), scale_row.size(), t.code_nonzero, t.code_square, nz_sq.data());
  s.num_weights += p.k;
  s.blocks += scale_row.size();
  // Folded blocks of one delta share their unit within a row: count their codes together and
  // apply the outcome table once per delta at the end (deltas past the cap: block by block).
  std::array<CodeCounts, kDeltaCap> folded{};
  for (uint64_t kb = 0; kb < scale_row.size(); ++kb) {
    const uint8_t scale = scale_row[kb];
    const uint64_t delta = bmax - scale;
    const uint8_t* src = weight_row.data() + kb * kBlockBytes;
    if (delta <= p.headroom) {
      add_lossless_block(avx2 ? nz_sq[kb] : block_nz_sq(src, t), scale, t, s);
      continue;
    }
    ++s.blocks_folded;
    if (delta < kDeltaCap) {
      count_codes(src, folded[delta]);
    } else {
      CodeCounts far{};
      count_codes(src, far);
      add_folded_counts(far, t.unit[scale], outcomes[kDeltaCap], s);
    }
  }
  for (uint64_t delta = p.headroom + 1; delta < kDeltaCap && delta <= bmax; ++delta)
    add_folded_counts(folded[delta], t.unit[bmax - delta], outcomes[delta], s);
}

// The AVX2 codes: the stats row by row (the scalar order of every sum), then the codes group
// by group, each tile written whole (its 8 rows' chunks, 128 bytes) before the next. Row by
// row, the 16-byte stores of one row go to k/32 tiles G·128 bytes apart, which fall into the
// same cache sets when G·128 is a multiple of 4 KiB: the 8 rows of a group then evict each
// other's partly written lines.
void remap_codes_avx2(const std::vector<RemapPart>& parts, const RemapParams& p, uint8_t* out, RemapStats* stats) {
  const uint64_t kb_count = blocks_per_row(p), tile_stride = row_groups(p) * kTileBytes;
  std::vector<const uint8_t*> weight_rows, scale_rows;
  std::vector<uint8_t> row_max;
  weight_rows.reserve(p.rows);
  scale_rows.reserve(p.rows);
  row_max.reserve(p.rows);
  std::vector<uint32_t> nz_sq(stats ? kb_count : 0);
  for_each_row(parts, p, true, [&](uint64_t, std::span<const uint8_t> w, std::span<const uint8_t> s) {
    const auto [bmin, bmax] = stats ? minmax_scale(s, true) : std::pair<uint8_t, uint8_t>{0, max_scale(s, true)};
    weight_rows.push_back(w.data());
    scale_rows.push_back(s.data());
    row_max.push_back(bmax);
    if (stats) add_row_stats(w, s, bmin, bmax, p, true, nz_sq, *stats);
  });
  const auto& nibbles = tables().nibbles[static_cast<int>(p.rounding)][p.headroom];
  for (uint64_t g = 0; g < row_groups(p); ++g) {
    const uint64_t r0 = g * kRowsPerGroup, n = std::min(kRowsPerGroup, p.rows - r0);
    int8_shift_avx2::remap_group(weight_rows.data() + r0, scale_rows.data() + r0, row_max.data() + r0, n, kb_count,
                                 nibbles, kDeltaCap, out + g * kTileBytes, tile_stride);
  }
}

// ---- shift2 / channel_scale ------------------------------------------------------------------

// shift2 byte kb/4 of one row: four 2-bit fields, fields past the last block zero.
uint8_t shift2_byte(std::span<const uint8_t> scale_row, uint8_t bmax, uint64_t first_kb, unsigned headroom) {
  uint8_t byte = 0;
  const uint64_t end = std::min<uint64_t>(first_kb + kBlocksPerShiftByte, scale_row.size());
  for (uint64_t kb = first_kb; kb < end; ++kb)
    byte |= uint8_t(remap_shift2_for(headroom, bmax - scale_row[kb]) << (2 * (kb - first_kb)));
  return byte;
}

// 2^(max_exp − headroom)·0.5 with max_exp = bmax − 127; exact (subnormal below 2^−126).
float channel_scale_value(uint8_t bmax, unsigned headroom) {
  return std::ldexp(1.0f, int(bmax) - 128 - int(headroom));
}

void store_f32_le(float v, uint8_t* dst) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  for (int i = 0; i < 4; ++i) dst[i] = uint8_t(bits >> (8 * i));
}

}  // namespace

const char* remap_rounding_name(RemapRounding r) {
  return r == RemapRounding::half_even ? "half-even" : "half-away";
}

const char* remap_fault_name(RemapFault::Kind k) {
  switch (k) {
    case RemapFault::e8m0_nan: return "e8m0_nan";
    case RemapFault::overflow: return "overflow";
    case RemapFault::bad_arguments: break;
  }
  return "bad_arguments";
}

void RemapStats::merge(const RemapStats& o) {
  num_weights += o.num_weights;
  nonzero += o.nonzero;
  exact_all += o.exact_all;
  exact_nonzero += o.exact_nonzero;
  overflow += o.overflow;
  blocks += o.blocks;
  blocks_folded += o.blocks_folded;
  vanished_nonzero += o.vanished_nonzero;
  max_rel_err_nonzero = std::max(max_rel_err_nonzero, o.max_rel_err_nonzero);
  sum_rel_err_nonzero += o.sum_rel_err_nonzero;
  sum_abs_err += o.sum_abs_err;
  sum_sq_err += o.sum_sq_err;
  max_abs_err = std::max(max_abs_err, o.max_abs_err);
  sum_sq_weight += o.sum_sq_weight;
  for (size_t i = 0; i < row_span_hist.size(); ++i) row_span_hist[i] += o.row_span_hist[i];
  row_span_max = std::max(row_span_max, o.row_span_max);
}

uint64_t remap_mxfp4_bytes(const RemapParams& p) { return blocks_per_row(p) * row_groups(p) * kTileBytes; }
uint64_t remap_shift2_bytes(const RemapParams& p) {
  return ceil_div(blocks_per_row(p), kBlocksPerShiftByte) * row_groups(p) * kRowsPerGroup;
}
uint64_t remap_channel_scale_bytes(const RemapParams& p) { return p.rows * 4; }

int e2m1_nearest_magnitude_index(double v) {
  // Midpoints between the magnitudes 0, 1, 2, 3, 4, 6, 8, 12 (x2 units); a value on a
  // midpoint takes the smaller magnitude (torch argmin's first minimum, Triton's <=).
  static constexpr double kUpperEdge[7] = {0.5, 1.5, 2.5, 3.5, 5, 7, 10};
  const double a = std::fabs(v);
  int index = 0;
  while (index < 7 && a > kUpperEdge[index]) ++index;
  return index;
}

double remap_round_target(double target, RemapRounding r) {
  return r == RemapRounding::half_away ? std::floor(target + 0.5) : std::nearbyint(target);
}

uint8_t remap_code_nibble(uint8_t code, uint64_t delta, unsigned headroom, RemapRounding r) {
  const int q = magnitude_x2(code);
  if (q == 0) return 0;  // −0 loses its sign
  const unsigned shift2 = remap_shift2_for(headroom, delta);
  // target = q·2^(headroom − delta), exact; deltas past the cap all round to 0.
  const int exponent = int(headroom) - int(std::min(delta, kDeltaCap + kMaxHeadroom));
  const double t = remap_round_target(std::ldexp(double(q), exponent), r);
  const double code_value = std::ldexp(t, -int(shift2));
  return uint8_t(e2m1_nearest_magnitude_index(code_value) | (code & 8));  // sign kept, even for 0
}

std::optional<RemapFault> remap_expert_mxfp4(const std::vector<RemapPart>& parts, const RemapParams& p,
                                             std::span<uint8_t> out, RemapStats* stats) {
  return remap_expert_mxfp4_isa(ggml_dequant_isa(), parts, p, out, stats);
}

std::optional<RemapFault> remap_expert_mxfp4_isa(DequantIsa isa, const std::vector<RemapPart>& parts,
                                                 const RemapParams& p, std::span<uint8_t> out, RemapStats* stats) {
  const uint64_t expected = params_ok(p) ? remap_mxfp4_bytes(p) : 0;
  if (auto f = check_inputs(parts, p, true, out.size(), expected)) return f;
  const bool avx2 = use_avx2(isa);
  zero_padding_rows(p, out);
  RemapStats local;
  if (avx2) {
    remap_codes_avx2(parts, p, out.data(), stats ? &local : nullptr);
  } else {
    std::vector<uint32_t> unused;
    for_each_row(parts, p, true, [&](uint64_t row, std::span<const uint8_t> w, std::span<const uint8_t> s) {
      const auto [bmin, bmax] = stats ? minmax_scale(s, false) : std::pair<uint8_t, uint8_t>{0, max_scale(s, false)};
      remap_row_codes(w, s, bmax, row, p, out.data());
      if (stats) add_row_stats(w, s, bmin, bmax, p, false, unused, local);
    });
  }
  if (stats) stats->merge(local);
  return std::nullopt;
}

std::optional<RemapFault> remap_expert_shift2(const std::vector<RemapPart>& parts, const RemapParams& p,
                                              std::span<uint8_t> out) {
  return remap_expert_shift2_isa(ggml_dequant_isa(), parts, p, out);
}

std::optional<RemapFault> remap_expert_shift2_isa(DequantIsa isa, const std::vector<RemapPart>& parts,
                                                  const RemapParams& p, std::span<uint8_t> out) {
  const uint64_t expected = params_ok(p) ? remap_shift2_bytes(p) : 0;
  if (auto f = check_inputs(parts, p, false, out.size(), expected)) return f;
  const bool avx2 = use_avx2(isa);
  // Padding rows of the last group are never visited below.
  std::fill(out.begin(), out.end(), uint8_t{0});
  const uint64_t kb_count = blocks_per_row(p), group_stride = row_groups(p) * kRowsPerGroup;
  if (avx2) {
    // Each row's shift bytes in a row-major scratch, then stored to (sb, n) at sb * G*8 + n.
    const uint64_t sbytes = ceil_div(kb_count, kBlocksPerShiftByte);
    std::vector<uint8_t> rows(p.rows * sbytes);
    for_each_row(parts, p, false, [&](uint64_t row, std::span<const uint8_t>, std::span<const uint8_t> s) {
      int8_shift_avx2::shift2_row(s.data(), kb_count, max_scale(s, true), tables().shift_of[p.headroom],
                                  rows.data() + row * sbytes);
    });
    for (uint64_t sb = 0; sb < sbytes; ++sb)
      for (uint64_t row = 0; row < p.rows; ++row) out[sb * group_stride + row] = rows[row * sbytes + sb];
    return std::nullopt;
  }
  // Byte (sb, n) sits at sb * G*8 + n: walking shift bytes outside and rows inside writes
  // the slab sequentially (row by row it would stride G*8 bytes per write).
  std::vector<const uint8_t*> scale_rows;
  std::vector<uint8_t> row_max;
  scale_rows.reserve(p.rows);
  row_max.reserve(p.rows);
  for_each_row(parts, p, false, [&](uint64_t, std::span<const uint8_t>, std::span<const uint8_t> s) {
    scale_rows.push_back(s.data());
    row_max.push_back(max_scale(s, false));
  });
  for (uint64_t kb = 0, base = 0; kb < kb_count; kb += kBlocksPerShiftByte, base += group_stride)
    for (uint64_t row = 0; row < scale_rows.size(); ++row)
      out[base + row] =
          shift2_byte(std::span<const uint8_t>(scale_rows[row], kb_count), row_max[row], kb, p.headroom);
  return std::nullopt;
}

std::optional<RemapFault> remap_expert_channel_scale(const std::vector<RemapPart>& parts, const RemapParams& p,
                                                     std::span<uint8_t> out) {
  return remap_expert_channel_scale_isa(ggml_dequant_isa(), parts, p, out);
}

std::optional<RemapFault> remap_expert_channel_scale_isa(DequantIsa isa, const std::vector<RemapPart>& parts,
                                                         const RemapParams& p, std::span<uint8_t> out) {
  const uint64_t expected = params_ok(p) ? remap_channel_scale_bytes(p) : 0;
  if (auto f = check_inputs(parts, p, false, out.size(), expected)) return f;
  const bool avx2 = use_avx2(isa);
  for_each_row(parts, p, false, [&](uint64_t row, std::span<const uint8_t>, std::span<const uint8_t> s) {
    store_f32_le(channel_scale_value(max_scale(s, avx2), p.headroom), out.data() + row * 4);
  });
  return std::nullopt;
}

}  // namespace ckpt
