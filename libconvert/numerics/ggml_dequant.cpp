#include "numerics/ggml_dequant.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <string_view>

#include "core/ggml_types.h"
#include "numerics/f32_digest.h"
#include "numerics/ggml_dequant_avx2.h"
#include "numerics/ggml_dequant_avx512.h"
#include "numerics/ggml_block_fields.h"
#include "numerics/ggml_tables.h"

// Why plain float arithmetic is bit-exact here (gguf.md §5): every product d·sc·q has at
// most 23 significant bits, so it is exact in binary32 whatever the evaluation order, and
// the one rounding left is the final add/subtract of a minimum (Q4_1, Q5_1, Q2_K, Q4_K,
// Q5_K), which IEEE rounds once. A fused multiply-add would round the same exact product
// once too, so contraction cannot change a result either. Q8_K (f32 d) rounds its one
// product, exactly as ggml does.

namespace ckpt {
namespace {

using ggml_fields::f16_at;
using ggml_fields::ld16;
using ggml_fields::ld32;

int grid_byte(uint64_t word, int j) { return static_cast<int>((word >> (8 * j)) & 0xFF); }
// ggml writes `db · g · (bit ? −1 : 1)`; compilers turn that into a negation of db · g, so
// the sign is applied as one here, explicitly: equal for every number, and a NaN product
// (a NaN scale) gets its sign bit flipped as in ggml's compiled code.
float signed_by(float v, uint8_t signs, int bit) { return (signs >> bit) & 1 ? -v : v; }

// --- 32-element legacy quants -------------------------------------------------------

void dq_q4_0(const uint8_t* b, float* y) {  // {f16 d; u8 qs[16]}
  const float d = f16_at(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b[2 + j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
  }
}

void dq_q4_1(const uint8_t* b, float* y) {  // {f16 d; f16 m; u8 qs[16]}
  const float d = f16_at(b), m = f16_at(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = ggml_add_minimum(static_cast<float>(b[4 + j] & 0xF) * d, m);
    y[j + 16] = ggml_add_minimum(static_cast<float>(b[4 + j] >> 4) * d, m);
  }
}

// Q5: the 5th bit of element j is bit j of qh (first half) or bit j + 16 (second half).
void dq_q5_0(const uint8_t* b, float* y) {  // {f16 d; u8 qh[4]; u8 qs[16]}
  const float d = f16_at(b);
  const uint32_t qh = ld32(b + 2);
  for (int j = 0; j < 16; ++j) {
    const int hi0 = static_cast<int>(((qh >> j) << 4) & 0x10), hi1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>(((b[6 + j] & 0xF) | hi0) - 16) * d;
    y[j + 16] = static_cast<float>(((b[6 + j] >> 4) | hi1) - 16) * d;
  }
}

void dq_q5_1(const uint8_t* b, float* y) {  // {f16 d; f16 m; u8 qh[4]; u8 qs[16]}
  const float d = f16_at(b), m = f16_at(b + 2);
  const uint32_t qh = ld32(b + 4);
  for (int j = 0; j < 16; ++j) {
    const int hi0 = static_cast<int>(((qh >> j) << 4) & 0x10), hi1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    y[j] = ggml_add_minimum(static_cast<float>((b[8 + j] & 0xF) | hi0) * d, m);
    y[j + 16] = ggml_add_minimum(static_cast<float>((b[8 + j] >> 4) | hi1) * d, m);
  }
}

void dq_q8_0(const uint8_t* b, float* y) {  // {f16 d; i8 qs[32]}
  const float d = f16_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void dq_q8_1(const uint8_t* b, float* y) {  // {f16 d; f16 s; i8 qs[32]}: s is d·Σq, unused here
  const float d = f16_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[4 + j])) * d;
}

void dq_iq4_nl(const uint8_t* b, float* y) {  // {f16 d; u8 qs[16]}
  const float d = f16_at(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kvalues_iq4nl[b[2 + j] & 0xF]);
    y[j + 16] = d * static_cast<float>(kvalues_iq4nl[b[2 + j] >> 4]);
  }
}

void dq_mxfp4(const uint8_t* b, float* y) {  // {u8 e; u8 qs[16]}; first half = low nibbles
  const float d = ggml_e8m0_to_f32_half(b[0]);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kvalues_fp4[b[1 + j] & 0xF]);
    y[j + 16] = d * static_cast<float>(kvalues_fp4[b[1 + j] >> 4]);
  }
}

// --- k-quants (256 elements) --------------------------------------------------------

void dq_q2_k(const uint8_t* b, float* y) {  // {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}
  const uint8_t* sc = b;
  const float d = f16_at(b + 80), dmin = f16_at(b + 82);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = b + 16 + 32 * half;
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part, ++sc) {
        const float dl = d * static_cast<float>(*sc & 0xF), ml = dmin * static_cast<float>(*sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
      }
    }
  }
}

// Q3_K's 16 six-bit scales: low 4 bits in bytes 0..7, high 2 bits in bytes 8..11.
void q3_k_scales(const uint8_t* s, int out[16]) {
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? s[i] & 0xF : s[i - 8] >> 4;
    const int high = (s[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
    out[i] = (low | (high << 4)) - 32;
  }
}

void dq_q3_k(const uint8_t* b, float* y) {  // {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}
  const uint8_t* hm = b;
  const float d = f16_at(b + 108);
  int scales[16];
  q3_k_scales(b + 96, scales);
  int is = 0;
  uint8_t mask = 1;
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = b + 32 + 32 * half;
    for (int shift = 0; shift < 8; shift += 2, mask = static_cast<uint8_t>(mask << 1)) {
      for (int part = 0; part < 2; ++part) {
        const float dl = d * static_cast<float>(scales[is++]);
        for (int l = 16 * part; l < 16 * part + 16; ++l) {
          const int v = ((q[l] >> shift) & 3) - ((hm[l] & mask) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
    }
  }
}

void dq_q4_k(const uint8_t* b, float* y) {  // {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}
  const float d = f16_at(b), dmin = f16_at(b + 2);
  for (int c = 0; c < 4; ++c) {
    const uint8_t* q = b + 16 + 32 * c;
    const auto [d1, min1, d2, min2] = ggml_fields::k_chunk_scales(b, d, dmin, c);
    for (int l = 0; l < 32; ++l) {
      y[64 * c + l] = d1 * static_cast<float>(q[l] & 0xF) - min1;
      y[64 * c + 32 + l] = d2 * static_cast<float>(q[l] >> 4) - min2;
    }
  }
}

void dq_q5_k(const uint8_t* b, float* y) {  // {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const uint8_t* qh = b + 16;
  for (int c = 0; c < 4; ++c) {
    const uint8_t* ql = b + 48 + 32 * c;
    const auto [d1, min1, d2, min2] = ggml_fields::k_chunk_scales(b, d, dmin, c);
    for (int l = 0; l < 32; ++l) {
      const int lo = (ql[l] & 0xF) + (((qh[l] >> (2 * c)) & 1) << 4);
      const int hi = (ql[l] >> 4) + (((qh[l] >> (2 * c + 1)) & 1) << 4);
      y[64 * c + l] = d1 * static_cast<float>(lo) - min1;
      y[64 * c + 32 + l] = d2 * static_cast<float>(hi) - min2;
    }
  }
}

void dq_q6_k(const uint8_t* b, float* y) {  // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}
  const float d = f16_at(b + 208);
  for (int half = 0; half < 2; ++half, y += 128) {
    const uint8_t* ql = b + 64 * half;
    const uint8_t* qh = b + 128 + 32 * half;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * half);
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

void dq_q8_k(const uint8_t* b, float* y) {  // {f32 d; i8 qs[256]; i16 bsums[16]}
  const float d = std::bit_cast<float>(ld32(b));
  for (int j = 0; j < 256; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[4 + j]));
}

// --- i-quants (256 elements) --------------------------------------------------------

// Eight grid magnitudes times db, negated where the sign byte has a 1.
void put8(float* y, float db, uint64_t grid, uint8_t signs) {
  for (int j = 0; j < 8; ++j) y[j] = signed_by(db * static_cast<float>(grid_byte(grid, j)), signs, j);
}

void dq_iq2_xxs(const uint8_t* b, float* y) {  // {f16 d; u16 qs[32]}
  const float d = f16_at(b);
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t* idx = b + 2 + 8 * ib;  // four grid indices, then a scale-and-signs word
    const uint32_t aux = ld32(idx + 4);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
    for (int l = 0; l < 4; ++l, y += 8) put8(y, db, iq2xxs_grid[idx[l]], ksigns_iq2xs[(aux >> (7 * l)) & 127]);
  }
}

void dq_iq2_xs(const uint8_t* b, float* y) {  // {f16 d; u16 qs[32]; u8 scales[8]}
  const float d = f16_at(b);
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t s = b[66 + ib];
    const float db[2] = {d * (0.5f + static_cast<float>(s & 0xF)) * 0.25f,
                         d * (0.5f + static_cast<float>(s >> 4)) * 0.25f};
    for (int l = 0; l < 4; ++l, y += 8) {
      const uint16_t q = ld16(b + 2 + 2 * (4 * ib + l));  // 9-bit grid index, 7-bit sign index
      put8(y, db[l / 2], iq2xs_grid[q & 511], ksigns_iq2xs[q >> 9]);
    }
  }
}

void dq_iq2_s(const uint8_t* b, float* y) {  // {f16 d; u8 qs[64]; u8 qh[8]; u8 scales[8]}
  const float d = f16_at(b);
  const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *scales = b + 74;
  for (int ib = 0; ib < 8; ++ib) {
    const float db[2] = {d * (0.5f + static_cast<float>(scales[ib] & 0xF)) * 0.25f,
                         d * (0.5f + static_cast<float>(scales[ib] >> 4)) * 0.25f};
    for (int l = 0; l < 4; ++l, y += 8) {
      const int idx = qs[4 * ib + l] | ((qh[ib] << (8 - 2 * l)) & 0x300);
      put8(y, db[l / 2], iq2s_grid[idx], signs[4 * ib + l]);
    }
  }
}

// Two 4-value grid words with one sign byte (bits 0-3 for g1, 4-7 for g2).
void put4x2(float* y, float db, uint32_t g1, uint32_t g2, uint8_t signs) {
  for (int j = 0; j < 4; ++j) {
    y[j] = signed_by(db * static_cast<float>(grid_byte(g1, j)), signs, j);
    y[j + 4] = signed_by(db * static_cast<float>(grid_byte(g2, j)), signs, j + 4);
  }
}

void dq_iq3_xxs(const uint8_t* b, float* y) {  // {f16 d; u8 qs[64]; u32 scales_and_signs[8]}
  const float d = f16_at(b);
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t* q = b + 2 + 8 * ib;
    const uint32_t aux = ld32(b + 66 + 4 * ib);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
    for (int l = 0; l < 4; ++l, y += 8)
      put4x2(y, db, iq3xxs_grid[q[2 * l]], iq3xxs_grid[q[2 * l + 1]], ksigns_iq2xs[(aux >> (7 * l)) & 127]);
  }
}

// IQ3_S with the post-#5829 grid (levels 1..15) and odd multipliers 1 + 2·s (gguf.md §6).
void dq_iq3_s(const uint8_t* b, float* y) {  // {f16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4]}
  const float d = f16_at(b);
  const uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *scales = b + 106;
  for (int ib = 0; ib < 8; ++ib) {
    const int s = (scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
    const float db = d * static_cast<float>(1 + 2 * s);
    for (int l = 0; l < 4; ++l, y += 8) {
      const int i1 = qs[8 * ib + 2 * l] | ((qh[ib] << (8 - 2 * l)) & 256);
      const int i2 = qs[8 * ib + 2 * l + 1] | ((qh[ib] << (7 - 2 * l)) & 256);
      put4x2(y, db, iq3s_grid[i1], iq3s_grid[i2], signs[4 * ib + l]);
    }
  }
}

void dq_iq4_xs(const uint8_t* b, float* y) {  // {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}
  const float d = f16_at(b);
  const uint16_t scales_h = ld16(b + 2);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    const uint8_t* qs = b + 8 + 16 * ib;
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(kvalues_iq4nl[qs[j] & 0xF]);
      y[j + 16] = dl * static_cast<float>(kvalues_iq4nl[qs[j] >> 4]);
    }
  }
}

// --- dispatch -----------------------------------------------------------------------

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(int32_t type) {
  switch (type) {
    case kGgmlQ4_0: return dq_q4_0;
    case kGgmlQ4_1: return dq_q4_1;
    case kGgmlQ5_0: return dq_q5_0;
    case kGgmlQ5_1: return dq_q5_1;
    case kGgmlQ8_0: return dq_q8_0;
    case kGgmlQ8_1: return dq_q8_1;
    case kGgmlQ2_K: return dq_q2_k;
    case kGgmlQ3_K: return dq_q3_k;
    case kGgmlQ4_K: return dq_q4_k;
    case kGgmlQ5_K: return dq_q5_k;
    case kGgmlQ6_K: return dq_q6_k;
    case kGgmlQ8_K: return dq_q8_k;
    case kGgmlIQ2_XXS: return dq_iq2_xxs;
    case kGgmlIQ2_XS: return dq_iq2_xs;
    case kGgmlIQ2_S: return dq_iq2_s;
    case kGgmlIQ3_XXS: return dq_iq3_xxs;
    case kGgmlIQ3_S: return dq_iq3_s;
    case kGgmlIQ4_NL: return dq_iq4_nl;
    case kGgmlIQ4_XS: return dq_iq4_xs;
    case kGgmlMXFP4: return dq_mxfp4;
    default: return nullptr;
  }
}

bool is_float_type(int32_t type) { return type == kGgmlF32 || type == kGgmlF16 || type == kGgmlBF16; }

void convert_floats(int32_t type, const uint8_t* in, std::span<float> out) {
  if (type == kGgmlF32) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = std::bit_cast<float>(ld32(in + 4 * i));
  } else if (type == kGgmlF16) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = ggml_fp16_to_f32(ld16(in + 2 * i));
  } else {
    for (size_t i = 0; i < out.size(); ++i) out[i] = ggml_bf16_to_f32(ld16(in + 2 * i));
  }
}

// The grids are verified once per process; a corrupted build fails loudly, not quietly wrong.
bool tables_ok(std::string& error) {
  static const std::string failure = [] {
    std::string e;
    return ggml_tables_verified(e) ? std::string() : e;
  }();
  if (failure.empty()) return true;
  error = failure;
  return false;
}

}  // namespace

bool ggml_dequant_supported(int32_t type) { return is_float_type(type) || block_fn(type) != nullptr; }

std::string ggml_unsupported_message(int32_t type) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  if (!info) return "unsupported type id " + std::to_string(type) + " (not a ggml type)";
  return std::string("unsupported type ") + info->name + " (id " + std::to_string(type) +
         (info->removed ? ", removed)" : ")");
}

DequantIsa ggml_dequant_best_isa() {
  if (!dequant_avx2::cpu_supported()) return DequantIsa::scalar;
  return dequant_avx512::cpu_supported() ? DequantIsa::avx512 : DequantIsa::avx2;
}

namespace {

// The ISAs are ordered, each a superset of the one before: what runs is the lesser of the
// one asked for and the CPU's best.
DequantIsa runnable(DequantIsa isa) { return std::min(isa, ggml_dequant_best_isa()); }

// Read once; a refused value runs the reference (the CLIs refused it before any work).
DequantIsa environment_isa() {
  static const DequantIsa isa = [] {
    DequantIsa asked = DequantIsa::scalar;
    std::string error;
    return ggml_dequant_isa_from_environment(asked, error) ? asked : DequantIsa::scalar;
  }();
  return isa;
}

// The block loop `isa` runs for `type`: 2 = AVX-512, 1 = AVX2, 0 = the scalar reference.
int loop_level(DequantIsa isa, int32_t type) {
  const DequantIsa r = runnable(isa);
  if (r == DequantIsa::avx512 && dequant_avx512::has_loop(type)) return 2;
  return r >= DequantIsa::avx2 && dequant_avx2::has_loop(type) ? 1 : 0;
}

// -1: not forced (the environment's choice); else a DequantIsa.
std::atomic<int> forced_isa{-1};

}  // namespace

bool parse_dequant_isa(std::string_view value, DequantIsa& isa, std::string& error) {
  if (value.empty() || value == "auto") isa = ggml_dequant_best_isa();
  else if (value == "scalar") isa = DequantIsa::scalar;
  else if (value == "avx2") isa = runnable(DequantIsa::avx2);
  else if (value == "avx512") isa = runnable(DequantIsa::avx512);
  else {
    error = "CKPT_DEQUANT_ISA='" + std::string(value) + "' is not an instruction set (accepted: auto, scalar, avx2, avx512)";
    return false;
  }
  return true;
}

bool ggml_dequant_isa_from_environment(DequantIsa& isa, std::string& error) {
  const char* v = std::getenv("CKPT_DEQUANT_ISA");
  return parse_dequant_isa(v ? v : "", isa, error);
}

DequantIsa ggml_dequant_isa() {
  const int forced = forced_isa.load(std::memory_order_relaxed);
  return forced < 0 ? environment_isa() : static_cast<DequantIsa>(forced);
}

DequantIsa ggml_dequant_force_isa(DequantIsa isa) {
  const DequantIsa previous = ggml_dequant_isa();
  forced_isa.store(static_cast<int>(runnable(isa)), std::memory_order_relaxed);
  return previous;
}

bool ggml_dequant_has_fast_path(DequantIsa isa, int32_t type) {
  return isa >= DequantIsa::avx2 && dequant_avx2::has_loop(type);
}

bool ggml_dequant_has_avx512_loop(int32_t type) { return dequant_avx512::has_loop(type); }

bool ggml_isa_runs_avx2(DequantIsa isa) { return runnable(isa) >= DequantIsa::avx2; }
bool ggml_isa_runs_avx512(DequantIsa isa) { return runnable(isa) >= DequantIsa::avx512; }

bool ggml_dequantize(int32_t type, std::span<const uint8_t> whole_blocks, std::span<float> out, std::string& error) {
  return ggml_dequantize_isa(ggml_dequant_isa(), type, whole_blocks, out, error);
}

bool ggml_dequantize_isa(DequantIsa isa, int32_t type, std::span<const uint8_t> whole_blocks, std::span<float> out,
                         std::string& error) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  if (!info || !ggml_dequant_supported(type)) {
    error = ggml_unsupported_message(type);
    return false;
  }
  const size_t blocks = whole_blocks.size() / info->type_size;
  if (whole_blocks.size() % info->type_size != 0 || out.size() / info->block_size != blocks ||
      out.size() % info->block_size != 0) {
    error = std::string("ggml_dequantize: ") + info->name + " input of " + std::to_string(whole_blocks.size()) +
            " bytes is not a whole number of " + std::to_string(info->type_size) + "-byte blocks matching " +
            std::to_string(out.size()) + " output values";
    return false;
  }
  if (!is_float_type(type) && !tables_ok(error)) return false;
  if (const int level = loop_level(isa, type); level > 0) {
    (level == 2 ? dequant_avx512::dequantize : dequant_avx2::dequantize)(type, whole_blocks.data(), blocks, out.data());
    return true;
  }
  if (is_float_type(type)) {
    convert_floats(type, whole_blocks.data(), out);
    return true;
  }
  const BlockFn fn = block_fn(type);
  for (size_t i = 0; i < blocks; ++i) fn(whole_blocks.data() + i * info->type_size, out.data() + i * info->block_size);
  return true;
}

bool ggml_dequant_digest(int32_t type, std::span<const uint8_t> whole_blocks, uint64_t first_index,
                         const DigestWeights& w, F32Digest& out, std::string& error) {
  return ggml_dequant_digest_isa(ggml_dequant_isa(), type, whole_blocks, first_index, w, out, error);
}

bool ggml_dequant_digest_isa(DequantIsa isa, int32_t type, std::span<const uint8_t> whole_blocks, uint64_t first_index,
                             const DigestWeights& w, F32Digest& out, std::string& error) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  if (!info || !ggml_dequant_supported(type)) {
    error = ggml_unsupported_message(type);
    return false;
  }
  const uint64_t ts = info->type_size, bs = info->block_size, blocks = whole_blocks.size() / ts;
  if (whole_blocks.size() % ts != 0) {
    error = std::string("ggml_dequant_digest: ") + info->name + " input of " + std::to_string(whole_blocks.size()) +
            " bytes is not a whole number of " + std::to_string(ts) + "-byte blocks";
    return false;
  }
  if (first_index > kDigestMaxElems || blocks > (kDigestMaxElems - first_index) / bs) {
    error = std::string("ggml_dequant_digest: ") + std::to_string(blocks * bs) + " elements from index " +
            std::to_string(first_index) + " pass the digest's " + std::to_string(kDigestMaxElems) + "-element limit";
    return false;
  }
  // A piece on the stack: 4096 elements, a multiple of every block size (<= 256).
  constexpr uint64_t kPiece = 4096;
  static_assert(kPiece % 256 == 0 && kPiece <= kDigestSpan);
  if (bs > 256) {  // unreachable: no ggml type has larger blocks
    error = std::string("ggml_dequant_digest: ") + info->name + " blocks are larger than 256 elements";
    return false;
  }
  if (!is_float_type(type) && !tables_ok(error)) return false;
  out = {};
  const uint8_t* in = whole_blocks.data();
  float piece[kPiece];
  const int level = loop_level(isa, type);
  if (level == 0) {
    const uint64_t piece_blocks = kPiece / bs;
    for (uint64_t done = 0, i = first_index; done < blocks;) {
      const uint64_t k = std::min(piece_blocks, blocks - done);
      const std::span<float> y(piece, k * bs);
      if (!ggml_dequantize_isa(isa, type, whole_blocks.subspan(done * ts, k * ts), y, error)) return false;
      out += f32_digest_isa(isa, y, i, w);
      done += k;
      i += k * bs;
    }
    return true;
  }
  // Fused: the whole blocks inside one span at a time, their inner sums times its outer weight.
  const auto dequantize = level == 2 ? dequant_avx512::dequantize : dequant_avx2::dequantize;
  const auto digest_inner = level == 2 ? dequant_avx512::digest_inner : dequant_avx2::digest_inner;
  for (uint64_t done = 0, i = first_index; done < blocks;) {
    const uint64_t span = i / kDigestSpan, j = i % kDigestSpan;
    uint64_t k = std::min((kDigestSpan - j) / bs, blocks - done);
    if (k == 0) {  // the block crosses into the next span
      k = 1;
      dequantize(type, in + done * ts, 1, piece);
      out += f32_digest_isa(DequantIsa::avx2, std::span<const float>(piece, bs), i, w);
    } else {
      uint64_t a, b;
      digest_inner(type, in + done * ts, k, w.inner_a.data() + j, w.inner_b.data() + j, a, b);
      out.a += a * w.outer_a[span];
      out.b += b * w.outer_b[span];
    }
    done += k;
    i += k * bs;
  }
  return true;
}

}  // namespace ckpt
