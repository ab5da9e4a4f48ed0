// The GPU kernels' arithmetic (decode.h) run on the host, unit by unit in the same order
// the kernels' threads do it. CI has no GPU: these loops are how the kernel text is tested
// there against libconvert's independent reference, and `ckpt-gpu verify --backend emulate`
// runs the whole verifier without a device.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include "decode.h"
#include "numerics/ggml_dequant.h"
#include "numerics/ggml_tables.h"
#include "verify/backend.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define CKPT_AVX2 __attribute__((target("avx2")))
#endif

namespace ckpt {
namespace {

using namespace kern;

// The threads of a launch are independent (each writes its own outputs), so the host runs
// them on all cores in ranges of `grain`; the order within a range is the kernels'.
template <class Body>
void for_units(uint64_t n, uint64_t grain, Body body) {
  tbb::parallel_for(tbb::blocked_range<uint64_t>(0, n, std::max<uint64_t>(1, grain)),
                    [&](const tbb::blocked_range<uint64_t>& r) {
                      for (uint64_t i = r.begin(); i < r.end(); ++i) body(i);
                    });
}

// decode_int8_shift_word by table: byte i of decode_nibbles4(x, shift) depends on nibble i
// of x alone, so two nibbles (one input byte) give two output bytes, taken from
// decode_nibbles4 itself for every byte and shift (the same bits, four lookups a word).
struct NibbleTable {
  uint16_t t[4][256];
  NibbleTable() {
    for (unsigned shift = 0; shift < 4; ++shift)
      for (unsigned b = 0; b < 256; ++b) t[shift][b] = static_cast<uint16_t>(decode_nibbles4(b, shift) & 0xFFFFu);
  }
};
const NibbleTable& nibble_table() {
  static const NibbleTable table;
  return table;
}
inline Int8x8 decode_word_fast(const NibbleTable& table, uint32_t word, unsigned shift) {
  const uint16_t* t = table.t[shift & 3];
  return Int8x8{t[word & 0xFF] | (uint32_t{t[(word >> 8) & 0xFF]} << 16),
                t[(word >> 16) & 0xFF] | (uint32_t{t[word >> 24]} << 16)};
}

// The same per nibble, for vpshufb: nib[shift][c] is decode_nibbles4's byte for nibble c
// (byte 0 of the table entry of byte c). `ok` when every two-nibble entry is the pair of its
// nibbles' bytes (each output byte its own nibble's, whatever its place: the AVX2 decode's
// premise, checked here on the kernel function's own table; else the word loop runs).
struct NibbleBytes {
  alignas(16) uint8_t nib[4][16];
  bool ok = true;
  explicit NibbleBytes(const NibbleTable& t) {
    for (unsigned shift = 0; shift < 4; ++shift) {
      for (unsigned c = 0; c < 16; ++c) nib[shift][c] = static_cast<uint8_t>(t.t[shift][c] & 0xFF);
      for (unsigned b = 0; b < 256; ++b)
        ok = ok && t.t[shift][b] == (nib[shift][b & 15] | nib[shift][b >> 4] << 8);
    }
  }
};
const NibbleBytes& nibble_bytes() {
  static const NibbleBytes bytes(nibble_table());
  return bytes;
}

// One strip of the INT8-shift decode: 32-blocks [kb0, kb_end) of row group ng, every row
// of the group, tile by tile (the order of the units below).
struct Int8Strip {
  const uint8_t* tiles;
  const uint8_t* shift2;
  uint64_t groups, rows, k, ng, kb0, kb_end;
  int8_t* q;
};

#if defined(__x86_64__)
// One row's 32 elements of one tile (its four words, 16 bytes at `chunk`), as the word loop
// writes them: word tid's nibbles 0..3 are elements 4·tid .. 4·tid+3, nibbles 4..7 elements
// 16 + 4·tid ..; so elements 2m, 2m+1 (low, high nibble) of the first half are byte
// {0, 1, 4, 5, 8, 9, 12, 13}[m] of the chunk, of the second half byte {2, 3, 6, 7, ...}[m].
// A whole strip in one AVX2 function, so that the per-chunk step inlines (a call per 32
// bytes from the unit loop, which is not compiled for AVX2, was half the decode's time).
CKPT_AVX2 void decode_strip_avx2(const Int8Strip& st, const uint8_t (*nib)[16]) {
  const __m128i order = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const uint64_t n_end = std::min(st.rows, st.ng * 8 + 8);
  for (uint64_t kb = st.kb0; kb < st.kb_end; ++kb) {
    const uint8_t* tile = st.tiles + (kb * st.groups + st.ng) * 128;
    for (uint64_t n = st.ng * 8; n < n_end; ++n) {  // lanes 4(n % 8) .. +3: row n
      const unsigned shift = int8_shift_of(st.shift2, st.groups, n, kb);
      const __m128i lut = _mm_load_si128(reinterpret_cast<const __m128i*>(nib[shift & 3]));
      const __m128i v =
          _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 16 * (n % 8))), order);
      const __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(v, low4));
      const __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(v, 4), low4));
      int8_t* row = st.q + n * st.k + kb * 32;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(row), _mm_unpacklo_epi8(lo, hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(row + 16), _mm_unpackhi_epi8(lo, hi));
    }
  }
}
#endif

// The same strip by decode_int8_shift_word's table, word by word (one GPU thread each).
void decode_strip_words(const Int8Strip& st, const NibbleTable& table) {
  for (uint64_t kb = st.kb0; kb < st.kb_end; ++kb) {
    const uint64_t tile = kb * st.groups + st.ng;
    for (uint64_t n = st.ng * 8; n < std::min(st.rows, st.ng * 8 + 8); ++n) {  // lanes 4(n % 8) .. +3: row n
      const unsigned shift = int8_shift_of(st.shift2, st.groups, n, kb);
      int8_t* row = st.q + n * st.k + kb * 32;
      for (uint64_t tid = 0; tid < 4; ++tid) {
        const uint64_t w = tile * 32 + (n % 8) * 4 + tid;
        const Int8x8 v = decode_word_fast(table, ld32(st.tiles + 4 * w), shift);
        std::memcpy(row + 4 * tid, &v.lo, 4);  // little-endian: byte i of the word is element i
        std::memcpy(row + 16 + 4 * tid, &v.hi, 4);
      }
    }
  }
}

// kern::mxfp4_to_f32 by table: its value for every (scale byte, code), taken from the
// kernel function itself (the same bits, 4096 calls once).
struct Mxfp4Table {
  float v[256][16];
  Mxfp4Table() {
    for (unsigned s = 0; s < 256; ++s)
      for (unsigned c = 0; c < 16; ++c) v[s][c] = kern::mxfp4_to_f32(c, static_cast<uint8_t>(s));
  }
};
const Mxfp4Table& mxfp4_table() {
  static const Mxfp4Table table;
  return table;
}

// Four outputs of the INT8 GEMM: one row of a against four rows of q (q + j·k), both
// widened to int16 (exact). dp4a (dot4_i8) adds four exact products to a wrapping int32
// accumulator, so each output is its products' sum mod 2^32 in any order: kPart at a time
// in uint32 (a loop the compiler vectorizes, pmaddwd, the row of a loaded once for the
// four), the same bits as the kernel's chain of dp4a.
template <uint64_t kPart>
inline __attribute__((always_inline)) void dot4_body(const int16_t* a, const int16_t* q, uint64_t k, uint32_t* total) {
  const int16_t *q0 = q, *q1 = q + k, *q2 = q + 2 * k, *q3 = q + 3 * k;
  uint32_t t0 = 0, t1 = 0, t2 = 0, t3 = 0;
  for (uint64_t i = 0; i < k; i += kPart) {
    uint32_t p0 = 0, p1 = 0, p2 = 0, p3 = 0;
    for (uint64_t j = 0; j < kPart; ++j) {
      const int32_t av = a[i + j];
      p0 += static_cast<uint32_t>(av * q0[i + j]);
      p1 += static_cast<uint32_t>(av * q1[i + j]);
      p2 += static_cast<uint32_t>(av * q2[i + j]);
      p3 += static_cast<uint32_t>(av * q3[i + j]);
    }
    t0 += p0;
    t1 += p1;
    t2 += p2;
    t3 += p3;
  }
  total[0] = t0;
  total[1] = t1;
  total[2] = t2;
  total[3] = t3;
}

template <uint64_t kPart>
void dot4_mod32(const int16_t* a, const int16_t* q, uint64_t k, uint32_t* total) {
  dot4_body<kPart>(a, q, k, total);
}
#if defined(__x86_64__)
// The same loop compiled for AVX2 (16 products per vpmaddwd instead of 8), run under the
// process's ISA choice as the other AVX2 loops here: integer sums, so the same bits.
template <uint64_t kPart>
CKPT_AVX2 void dot4_mod32_avx2(const int16_t* a, const int16_t* q, uint64_t k, uint32_t* total) {
  dot4_body<kPart>(a, q, k, total);
}
#endif

// dot4_mod32 on the process's ISA.
template <uint64_t kPart>
void dot4(bool avx2, const int16_t* a, const int16_t* q, uint64_t k, uint32_t* total) {
#if defined(__x86_64__)
  if (avx2) return dot4_mod32_avx2<kPart>(a, q, k, total);
#else
  (void)avx2;
#endif
  dot4_mod32<kPart>(a, q, k, total);
}

bool fail(std::string& error, const std::string& why) {
  error = why;
  return false;
}

GgmlTables host_tables() {
  return GgmlTables{ksigns_iq2xs.data(), iq3xxs_grid.data(), iq3s_grid.data(),
                    iq2s_grid.data(),    kvalues_iq4nl.data(), kvalues_fp4.data()};
}

class EmulatedBackend final : public DecodeBackend {
 public:
  std::string name() const override { return "emulate (kernel arithmetic on the host)"; }
  bool concurrent() const override { return true; }  // no state: every call is on its own

  bool fp8_to_bf16(std::span<const uint8_t> w, uint64_t row_begin, const Fp8Grid& g, Fp8ScaleKind kind,
                   std::span<const uint8_t> scale, std::span<uint16_t> out, std::string& error) override {
    if (!backend_args::fp8_ok(w.size(), row_begin, g, kind, scale.size(), out.size()))
      return fail(error, "fp8_to_bf16: bad arguments");
    const uint64_t scols = fp8_scale_cols(g);
    auto scale_index = [&](uint64_t i) {
      return ((row_begin + i / g.cols) / g.block_rows) * scols + (i % g.cols) / g.block_cols;
    };
    if (g.cols % 8 == 0 && g.block_cols % 8 == 0) {  // the kernels' 8-code groups
      // By rows, each row's groups in order: a group lies in one scale block (block_cols % 8
      // == 0), whose index is the row's scale row plus its column / block_cols (no divisions
      // per group: they were a third of this loop's time).
      const uint64_t rows = w.size() / g.cols;
      for_units(rows, std::max<uint64_t>(1, 65536 / g.cols), [&](uint64_t r) {
        const uint64_t s_row = ((row_begin + r) / g.block_rows) * scols;
        const uint8_t* wr = w.data() + r * g.cols;
        uint16_t* outr = out.data() + r * g.cols;
        for (uint64_t c0 = 0; c0 < g.cols; c0 += g.block_cols) {
          const uint64_t s = s_row + c0 / g.block_cols, c_end = std::min(g.cols, c0 + g.block_cols);
          const float f32_scale = kind == Fp8ScaleKind::e8m0 ? 0.0f : bits_to_float(ld32(scale.data() + 4 * s));
          for (uint64_t c = c0; c < c_end; c += 8) {
            const Bf16x8 bf = kind == Fp8ScaleKind::e8m0 ? fp8_group8_to_bf16(ld32(&wr[c]), ld32(&wr[c + 4]), scale[s])
                                                         : fp8_group8_to_bf16(ld32(&wr[c]), ld32(&wr[c + 4]), f32_scale);
            std::memcpy(outr + c, bf.w, 16);  // little-endian: element 2j in the low half of word j
          }
        }
      });
      return true;
    }
    for (uint64_t i = 0; i < w.size(); ++i) {
      const uint64_t s = scale_index(i);
      if (kind == Fp8ScaleKind::e8m0) {
        out[i] = fp8_e8m0_to_bf16(w[i], scale[s]);
      } else {
        out[i] = fp8_f32_to_bf16(w[i], bits_to_float(ld32(scale.data() + 4 * s)));
      }
    }
    return true;
  }

  bool mxfp4_to_f32(std::span<const uint8_t> w, std::span<const uint8_t> scale, uint64_t rows, uint64_t k,
                    std::span<float> out, std::string& error) override {
    if (!backend_args::mxfp4_ok(w.size(), scale.size(), rows, k, out.size()))
      return fail(error, "mxfp4_to_f32: bad arguments");
    // One unit = one 32-block (16 bytes, one scale); byte i = elements 2i (low), 2i+1 (high).
    const Mxfp4Table& table = mxfp4_table();
    for_units(w.size() / 16, 4096, [&](uint64_t blk) {
      const float* v = table.v[scale[blk]];
      for (uint64_t i = 16 * blk; i < 16 * blk + 16; ++i) {
        out[2 * i] = v[w[i] & 0xF];
        out[2 * i + 1] = v[w[i] >> 4];
      }
    });
    return true;
  }

  bool decode_int8_shift(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         std::span<int8_t> q, std::string& error) override {
    if (!backend_args::int8_shift_ok(tiles.size(), shift2.size(), p, q.size()))
      return fail(error, "decode_int8_shift: bad arguments");
    const uint64_t groups = (p.rows + 7) / 8, blocks = p.k / 32;
    const NibbleTable& table = nibble_table();
    // The word loop below, or (the process's ISA choice, ggml_dequant_isa(): CKPT_DEQUANT_ISA=scalar
    // keeps the word loop) its four words of a row at once by vpshufb, the same bytes
    // (Kernels/Backend.EmulatedInt8ShiftDecodeIsTheSameOnBothIsas).
    const NibbleBytes& nb = nibble_bytes();
    const bool avx2 = nb.ok && ggml_isa_runs_avx2(ggml_dequant_isa());
    // A tile's 32 words: one GPU thread each. Any order gives these bytes; this one keeps the
    // host's caches streaming: units are strips of kStrip tiles (32-blocks kb0..kb0+kStrip of
    // one row group), the row groups of a strip one after the other, so the reads are kStrip
    // sequential streams and each row gets kStrip·32 contiguous bytes.
    constexpr uint64_t kStrip = 8;
    const uint64_t strips = (blocks + kStrip - 1) / kStrip;
    for_units(strips * groups, 64, [&](uint64_t unit) {
      const uint64_t ng = unit % groups, kb0 = (unit / groups) * kStrip;
      const Int8Strip st{tiles.data(), shift2.data(), groups, p.rows, p.k, ng, kb0, std::min(blocks, kb0 + kStrip), q.data()};
#if defined(__x86_64__)
      if (avx2) return decode_strip_avx2(st, nb.nib);
#endif
      decode_strip_words(st, table);
    });
    return true;
  }

  bool quantize_activations(std::span<const float> x, uint64_t m, uint64_t k, std::span<int8_t> a,
                            std::span<float> a_scale, std::string& error) override {
    if (!backend_args::quantize_ok(x.size(), m, k, a.size(), a_scale.size())) return fail(error, "quantize: bad arguments");
    for (uint64_t r = 0; r < m; ++r) {
      float amax = 0;
      for (uint64_t c = 0; c < k; ++c) amax = std::fmax(amax, std::fabs(x[r * k + c]));  // fmaxf skips NaN
      const float s = amax == 0 ? 1.0f : div_rn(amax, 127.0f);
      a_scale[r] = s;
      for (uint64_t c = 0; c < k; ++c) {
        const float v = std::nearbyint(div_rn(x[r * k + c], s));
        a[r * k + c] = std::isnan(v) ? 0 : static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
      }
    }
    return true;
  }

  bool int8_gemm(std::span<const int8_t> a, std::span<const float> a_scale, std::span<const uint8_t> tiles,
                 std::span<const uint8_t> shift2, std::span<const float> cs, uint64_t m, const RemapParams& p,
                 std::span<int32_t> acc, std::span<uint16_t> out, std::string& error) override {
    const uint64_t n = p.rows, k = p.k;
    if (!backend_args::gemm_ok(a.size(), a_scale.size(), tiles.size(), shift2.size(), cs.size(), m, p, acc.size(),
                               out.size()))
      return fail(error, "int8_gemm: bad arguments");
    // The kernel decodes its B fragments from the tiles (decode_int8_shift above, the same
    // words); here once for the matrix, widened to int16 with the activations (exact), so
    // the products' loop (dot4_mod32) is the compiler's pmaddwd.
    std::vector<int8_t> q(n * k);
    if (!decode_int8_shift(tiles, shift2, p, q, error)) return false;
    const std::vector<int16_t> a16(a.begin(), a.end());
    const bool avx2 = ggml_isa_runs_avx2(ggml_dequant_isa());  // the CPU runs it (ggml_dequant.h)
    constexpr uint64_t kCols = 16;
    for_units((n + kCols - 1) / kCols, 1, [&](uint64_t block) {  // kCols columns x m rows of outputs
      const uint64_t c0 = block * kCols, cols = std::min(kCols, n - c0);
      std::vector<int16_t> q16((cols + 3) / 4 * 4 * k, 0);  // whole quads of columns (zero padding)
      std::copy(q.begin() + c0 * k, q.begin() + (c0 + cols) * k, q16.begin());
      for (uint64_t r = 0; r < m; ++r) {
        for (uint64_t c4 = 0; c4 < cols; c4 += 4) {  // one output per thread, four threads at a time
          uint32_t total[4];
          if (k % 128 == 0) {
            dot4<128>(avx2, a16.data() + r * k, q16.data() + c4 * k, k, total);
          } else {
            dot4<32>(avx2, a16.data() + r * k, q16.data() + c4 * k, k, total);  // k % 32 == 0 (gemm_ok)
          }
          for (uint64_t j = 0; j < std::min<uint64_t>(4, cols - c4); ++j) {
            const uint64_t c = c0 + c4 + j;
            const int32_t sum = static_cast<int32_t>(total[j]);
            if (!acc.empty()) acc[r * n + c] = sum;
            out[r * n + c] = f32_to_bf16_rne(mul_rn(mul_rn(static_cast<float>(sum), a_scale[r]), cs[c]));
          }
        }
      }
    });
    return true;
  }

  bool ggml_to_f32(int32_t type, std::span<const uint8_t> blocks, std::span<float> out, std::string& error) override {
    const GgmlBlockShape shape = ggml_gpu_block(type);
    if (shape.elems == 0) return fail(error, "unsupported type id " + std::to_string(type) + " for the GPU kernels");
    if (blocks.size() % shape.bytes || out.size() != blocks.size() / shape.bytes * shape.elems)
      return fail(error, "ggml_to_f32: bad arguments");
    const GgmlTables t = host_tables();
    const uint32_t unit = ggml_gpu_unit(type), units = shape.elems / unit;
    for_units(blocks.size() / shape.bytes, 1024, [&](uint64_t b) {
      for (uint32_t u = 0; u < units; ++u)
        ggml_decode_unit(type, blocks.data() + b * shape.bytes, u, out.data() + b * shape.elems + u * unit, t);
    });
    return true;
  }
  // The device's digest: the decode above, then decode.h's per-element terms summed
  // (mod 2^64, any order), independent of the CPU's block-wise sums in numerics/.
  bool has_ggml_digest() const override { return true; }
  bool ggml_digest(int32_t type, std::span<const uint8_t> blocks, const DigestWeights& w, F32Digest& out,
                   std::string& error) override {
    const GgmlBlockShape shape = ggml_gpu_block(type);
    if (shape.elems == 0) return fail(error, "unsupported type id " + std::to_string(type) + " for the GPU kernels");
    const uint64_t elems = blocks.size() / shape.bytes * shape.elems;
    if (blocks.size() % shape.bytes || elems > kDigestMaxElems) return fail(error, "ggml_digest: bad arguments");
    std::vector<float> y(elems);
    if (!ggml_to_f32(type, blocks, y, error)) return false;
    out = digest_of(elems, w, [&](uint64_t i) { return float_to_bits(y[i]); });
    return true;
  }
  bool has_bf16_digest() const override { return true; }
  bool fp8_bf16_digest(std::span<const uint8_t> wr, uint64_t row_begin, const Fp8Grid& g, Fp8ScaleKind kind,
                       std::span<const uint8_t> scale, const DigestWeights& w, F32Digest& out, std::string& error) override {
    if (wr.size() > kDigestMaxElems) return fail(error, "fp8_bf16_digest: bad arguments");
    std::vector<uint16_t> y(wr.size());
    if (!fp8_to_bf16(wr, row_begin, g, kind, scale, y, error)) return false;
    out = digest_of(y.size(), w, [&](uint64_t i) { return uint32_t{y[i]}; });
    return true;
  }
  bool mxfp4_bf16_digest(std::span<const uint8_t> wt, std::span<const uint8_t> scale, uint64_t rows, uint64_t k,
                         const DigestWeights& w, F32Digest& out, std::string& error) override {
    if (rows * k > kDigestMaxElems) return fail(error, "mxfp4_bf16_digest: bad arguments");
    std::vector<float> y(rows * k);
    if (!mxfp4_to_f32(wt, scale, rows, k, y, error)) return false;
    out = digest_of(y.size(), w, [&](uint64_t i) { return uint32_t{f32_to_bf16_rne(y[i])}; });
    return true;
  }
  // The device's INT8-shift digest: the decode above, its words' terms summed. Implemented
  // (the tests compare it with the CPU's), but not offered to the verifier: on the host a
  // digest saves no transfer and costs more than comparing the two decodes byte for byte.
  bool has_int8_digest() const override { return false; }
  bool int8_shift_digest(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         const DigestWeights& w, F32Digest& out, std::string& error) override {
    if (!backend_args::int8_shift_ok(tiles.size(), shift2.size(), p, p.rows * p.k) || p.rows * p.k / 4 > kDigestMaxElems)
      return fail(error, "int8_shift_digest: bad arguments");
    std::vector<int8_t> q(p.rows * p.k);
    if (!decode_int8_shift(tiles, shift2, p, q, error)) return false;
    out = digest_of(q.size() / 4, w, [&](uint64_t i) {
      uint32_t word;
      std::memcpy(&word, q.data() + 4 * i, 4);  // little-endian: q[4i] in the low byte
      return word;
    });
    return true;
  }

 private:
  // The kernels' digest (k_digest): kern::digest_terms of every element's bits, summed.
  template <class Bits>
  static F32Digest digest_of(uint64_t elems, const DigestWeights& w, Bits bits) {
    const DigestTables t{w.inner_a.data(), w.inner_b.data(), w.outer_a.data(), w.outer_b.data()};
    const DigestTerms sum = tbb::parallel_reduce(
        tbb::blocked_range<uint64_t>(0, elems, 65536), DigestTerms{0, 0},
        [&](const tbb::blocked_range<uint64_t>& r, DigestTerms acc) {
          for (uint64_t i = r.begin(); i < r.end(); ++i) {
            const DigestTerms d = digest_terms(bits(i), i, t);
            acc.a += d.a;
            acc.b += d.b;
          }
          return acc;
        },
        [](DigestTerms x, DigestTerms z) { return DigestTerms{x.a + z.a, x.b + z.b}; });
    return F32Digest{sum.a, sum.b};
  }
};

}  // namespace

std::unique_ptr<DecodeBackend> make_emulated_backend() { return std::make_unique<EmulatedBackend>(); }

}  // namespace ckpt
