// AVX2 loops of the MXFP4 → INT8-shift remap (int8_shift_avx2.h). Compiled for the baseline
// ISA with the AVX2 functions marked by a target attribute, as ggml_dequant_avx2.cpp is, and
// run only after the CPU check (ggml_dequant_best_isa()). Integer byte work only (shuffles,
// table lookups by vpshufb, sums of absolute differences): the same bytes and counts as the
// scalar loops of int8_shift.cpp by construction, proven by tests/numerics/int8_shift_isa_test.cpp.
#include "numerics/int8_shift_avx2.h"

#include <algorithm>
#include <cstring>

#include "numerics/int8_shift.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define CKPT_AVX2 __attribute__((target("avx2")))

namespace ckpt::int8_shift_avx2 {
namespace {

CKPT_AVX2 inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
CKPT_AVX2 inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

CKPT_AVX2 inline uint8_t hmax_u8(__m128i v) {
  v = _mm_max_epu8(v, _mm_srli_si128(v, 8));
  v = _mm_max_epu8(v, _mm_srli_si128(v, 4));
  v = _mm_max_epu8(v, _mm_srli_si128(v, 2));
  v = _mm_max_epu8(v, _mm_srli_si128(v, 1));
  return static_cast<uint8_t>(_mm_cvtsi128_si32(v));
}
CKPT_AVX2 inline uint8_t hmin_u8(__m128i v) {
  v = _mm_min_epu8(v, _mm_srli_si128(v, 8));
  v = _mm_min_epu8(v, _mm_srli_si128(v, 4));
  v = _mm_min_epu8(v, _mm_srli_si128(v, 2));
  v = _mm_min_epu8(v, _mm_srli_si128(v, 1));
  return static_cast<uint8_t>(_mm_cvtsi128_si32(v));
}

CKPT_AVX2 inline __m128i tile_order() { return load16(kTileSourceByte.data()); }

// The nibble table of block kb of a row (its delta below the row's maximum, capped).
CKPT_AVX2 inline __m128i block_table(const uint8_t (*nibbles)[16], const uint8_t* scales, uint64_t kb, uint8_t bmax,
                                     uint64_t delta_cap) {
  return load16(nibbles[std::min<uint64_t>(bmax - scales[kb], delta_cap)]);
}

// Eight shift2 bytes (fields of 32 blocks) from 32 scale bytes: the shift of each delta by
// table (deltas past 15 as 15), masked by `keep`; field pairs by vpmaddubsw (a + 4b), pairs of
// pairs by vpmaddwd (p + 16q), then the dword of each byte (<= 255) packed down.
CKPT_AVX2 inline void shift2_bytes8(__m256i s, __m256i top, __m256i lut, __m256i keep, uint8_t* dst) {
  const __m256i delta = _mm256_min_epu8(_mm256_sub_epi8(top, s), _mm256_set1_epi8(15));
  const __m256i shift = _mm256_and_si256(_mm256_shuffle_epi8(lut, delta), keep);
  const __m256i fields = _mm256_madd_epi16(_mm256_maddubs_epi16(shift, _mm256_set1_epi16(0x0401)),
                                           _mm256_set1_epi32(0x00100001));
  const __m256i words = _mm256_packus_epi32(fields, fields);
  const __m256i b = _mm256_packus_epi16(words, words);  // per lane: its four bytes, repeated
  const uint32_t lo = static_cast<uint32_t>(_mm256_extract_epi32(b, 0));
  const uint32_t hi = static_cast<uint32_t>(_mm256_extract_epi32(b, 4));
  std::memcpy(dst, &lo, 4);
  std::memcpy(dst + 4, &hi, 4);
}

}  // namespace

CKPT_AVX2 uint8_t max_byte(const uint8_t* p, uint64_t n) {
  uint64_t i = 0;
  uint8_t best = p[0];
  if (n >= 32) {
    __m256i m = load32(p);
    for (i = 32; i + 32 <= n; i += 32) m = _mm256_max_epu8(m, load32(p + i));
    best = hmax_u8(_mm_max_epu8(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1)));
  }
  for (; i < n; ++i) best = std::max(best, p[i]);
  return best;
}

CKPT_AVX2 void minmax_byte(const uint8_t* p, uint64_t n, uint8_t* lo, uint8_t* hi) {
  uint64_t i = 0;
  uint8_t mn = p[0], mx = p[0];
  if (n >= 32) {
    __m256i a = load32(p), b = a;
    for (i = 32; i + 32 <= n; i += 32) {
      const __m256i v = load32(p + i);
      a = _mm256_min_epu8(a, v);
      b = _mm256_max_epu8(b, v);
    }
    mn = hmin_u8(_mm_min_epu8(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)));
    mx = hmax_u8(_mm_max_epu8(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)));
  }
  for (; i < n; ++i) {
    mn = std::min(mn, p[i]);
    mx = std::max(mx, p[i]);
  }
  *lo = mn;
  *hi = mx;
}

CKPT_AVX2 void remap_group(const uint8_t* const* src_rows, const uint8_t* const* scale_rows, const uint8_t* row_max,
                           uint64_t rows, uint64_t blocks, const uint8_t (*nibbles)[16], uint64_t delta_cap,
                           uint8_t* tile, uint64_t tile_stride) {
  const __m256i order = _mm256_broadcastsi128_si256(tile_order());
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m128i order1 = tile_order(), low4_1 = _mm_set1_epi8(0x0F);
  for (uint64_t kb = 0; kb < blocks; ++kb, tile += tile_stride) {
    uint64_t r = 0;
    // Two rows a step, one in each 128-bit lane: their 32 bytes of the tile, adjacent.
    for (; r + 2 <= rows; r += 2) {
      const __m256i lut =
          _mm256_inserti128_si256(_mm256_castsi128_si256(block_table(nibbles, scale_rows[r], kb, row_max[r], delta_cap)),
                                  block_table(nibbles, scale_rows[r + 1], kb, row_max[r + 1], delta_cap), 1);
      const __m256i src = _mm256_inserti128_si256(_mm256_castsi128_si256(load16(src_rows[r] + 16 * kb)),
                                                  load16(src_rows[r + 1] + 16 * kb), 1);
      const __m256i v = _mm256_shuffle_epi8(src, order);
      const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, low4));
      const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(tile + 16 * r), _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)));
    }
    if (r < rows) {
      const __m128i lut = block_table(nibbles, scale_rows[r], kb, row_max[r], delta_cap);
      const __m128i v = _mm_shuffle_epi8(load16(src_rows[r] + 16 * kb), order1);
      const __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(v, low4_1));
      const __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(v, 4), low4_1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(tile + 16 * r), _mm_or_si128(lo, _mm_slli_epi16(hi, 4)));
    }
  }
}

CKPT_AVX2 void block_nz_sq(const uint8_t* src, uint64_t blocks, const uint8_t* nonzero, const uint8_t* square,
                           uint32_t* nz_sq) {
  const __m256i nz_lut = _mm256_broadcastsi128_si256(load16(nonzero));
  const __m256i sq_lut = _mm256_broadcastsi128_si256(load16(square));
  const __m256i low4 = _mm256_set1_epi8(0x0F), zero = _mm256_setzero_si256();
  uint64_t kb = 0;
  for (; kb + 2 <= blocks; kb += 2) {  // block kb in the low lane, kb + 1 in the high lane
    const __m256i v = load32(src + 16 * kb);
    const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    // Per 8 bytes: Σ nonzero (<= 16) and Σ square (<= 16·255), in u64 lanes.
    const __m256i nz =
        _mm256_sad_epu8(_mm256_add_epi8(_mm256_shuffle_epi8(nz_lut, lo), _mm256_shuffle_epi8(nz_lut, hi)), zero);
    const __m256i sq = _mm256_add_epi64(_mm256_sad_epu8(_mm256_shuffle_epi8(sq_lut, lo), zero),
                                        _mm256_sad_epu8(_mm256_shuffle_epi8(sq_lut, hi), zero));
    const __m256i packed = _mm256_or_si256(_mm256_slli_epi64(nz, 16), sq);
    const __m256i total = _mm256_add_epi64(packed, _mm256_shuffle_epi32(packed, 0x4E));
    nz_sq[kb] = static_cast<uint32_t>(_mm256_extract_epi64(total, 0));
    nz_sq[kb + 1] = static_cast<uint32_t>(_mm256_extract_epi64(total, 2));
  }
  if (kb < blocks) {
    const __m128i v = load16(src + 16 * kb), m4 = _mm_set1_epi8(0x0F), z = _mm_setzero_si128();
    const __m128i nzl = _mm256_castsi256_si128(nz_lut), sql = _mm256_castsi256_si128(sq_lut);
    const __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
    const __m128i nz = _mm_sad_epu8(_mm_add_epi8(_mm_shuffle_epi8(nzl, lo), _mm_shuffle_epi8(nzl, hi)), z);
    const __m128i sq = _mm_add_epi64(_mm_sad_epu8(_mm_shuffle_epi8(sql, lo), z), _mm_sad_epu8(_mm_shuffle_epi8(sql, hi), z));
    const __m128i packed = _mm_or_si128(_mm_slli_epi64(nz, 16), sq);
    nz_sq[kb] = static_cast<uint32_t>(_mm_cvtsi128_si64(_mm_add_epi64(packed, _mm_unpackhi_epi64(packed, packed))));
  }
}

CKPT_AVX2 void shift2_row(const uint8_t* scales, uint64_t blocks, uint8_t bmax, const uint8_t* shift_of,
                          uint8_t* out) {
  const __m256i lut = _mm256_broadcastsi128_si256(load16(shift_of));
  const __m256i top = _mm256_set1_epi8(static_cast<char>(bmax));
  uint64_t kb = 0;
  for (; kb + 32 <= blocks; kb += 32) shift2_bytes8(load32(scales + kb), top, lut, _mm256_set1_epi8(-1), out + kb / 4);
  if (kb < blocks) {  // the last blocks, padded with bmax; their fields and the unused ones masked to 0
    const uint64_t rest = blocks - kb;
    uint8_t s[32], bytes[8];
    std::memset(s, bmax, sizeof s);
    std::memcpy(s, scales + kb, rest);
    const __m256i iota = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                          22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
    const __m256i keep = _mm256_cmpgt_epi8(_mm256_set1_epi8(static_cast<char>(rest)), iota);
    shift2_bytes8(load32(s), top, lut, keep, bytes);
    std::memcpy(out + kb / 4, bytes, (rest + 3) / 4);
  }
}

}  // namespace ckpt::int8_shift_avx2

#else  // not x86: never called (the dispatch runs the scalar loops)

namespace ckpt::int8_shift_avx2 {
uint8_t max_byte(const uint8_t* p, uint64_t) { return p[0]; }
void minmax_byte(const uint8_t*, uint64_t, uint8_t*, uint8_t*) {}
void remap_group(const uint8_t* const*, const uint8_t* const*, const uint8_t*, uint64_t, uint64_t, const uint8_t (*)[16],
                 uint64_t, uint8_t*, uint64_t) {}
void block_nz_sq(const uint8_t*, uint64_t, const uint8_t*, const uint8_t*, uint32_t*) {}
void shift2_row(const uint8_t*, uint64_t, uint8_t, const uint8_t*, uint8_t*) {}
}  // namespace ckpt::int8_shift_avx2

#endif
