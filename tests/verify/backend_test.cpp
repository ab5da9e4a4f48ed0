// Every decode transform of the GPU runner against libconvert's independent CPU reference,
// bit for bit. Run twice: on the host emulation of the kernels (always, so CI tests the
// kernel arithmetic without a GPU) and on the real GPU backend (skipped, with the reason,
// where the binary has no GPU backend or the machine has no device).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "core/ggml_types.h"
#include "numerics/f32_digest.h"
#include "numerics/fp8.h"
#include "numerics/ggml_dequant.h"
#include "numerics/int8_gemm_ref.h"
#include "numerics/int8_shift.h"
#include "verify/backend.h"
#include "test_require.h"

namespace ckpt {
namespace {

class Backend : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "emulate") {
      be_ = make_emulated_backend();
      return;
    }
    std::string error;
    be_ = make_gpu_backend(0, error);
    if (!be_) return test::skip_or_fail_without(test::Need::gpu, "GPU backend unavailable: " + error);
  }
  std::unique_ptr<DecodeBackend> be_;
  std::mt19937_64 rng_{42};
};

std::string hex16(uint16_t v) {
  char b[8];
  std::snprintf(b, sizeof b, "%04x", v);
  return b;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Every E4M3 code against every E8M0 scale: one row per scale byte, 256 columns, blocks of 1 row.
TEST_P(Backend, Fp8E8m0EveryCodeTimesEveryScale) {
  const Fp8Grid g{256, 256, 1, 256};
  std::vector<uint8_t> w(256 * 256), scale(256);
  for (uint64_t r = 0; r < 256; ++r) {
    scale[r] = static_cast<uint8_t>(r);
    for (uint64_t c = 0; c < 256; ++c) w[r * 256 + c] = static_cast<uint8_t>(c);
  }
  std::vector<uint16_t> got(w.size());
  std::string error;
  ASSERT_TRUE(be_->fp8_to_bf16(w, 0, g, Fp8ScaleKind::e8m0, scale, got, error)) << error;
  for (uint64_t i = 0; i < w.size(); ++i) {
    ASSERT_EQ(got[i], fp8_e8m0_product_bf16(w[i], scale[i / 256]))
        << "code " << int(w[i]) << " scale " << i / 256 << " got " << hex16(got[i]);
  }
}

TEST_P(Backend, Fp8F32EveryCodeTimesRandomScales) {
  const Fp8Grid g{64, 256, 1, 256};
  std::vector<uint8_t> w(64 * 256);
  std::vector<float> scale(64);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-30, 30);
  for (uint64_t r = 0; r < 64; ++r) {
    scale[r] = std::ldexp(mant(rng_), ex(rng_));
    for (uint64_t c = 0; c < 256; ++c) w[r * 256 + c] = static_cast<uint8_t>(c);
  }
  std::vector<uint8_t> scale_bytes(scale.size() * 4);
  std::memcpy(scale_bytes.data(), scale.data(), scale_bytes.size());
  std::vector<uint16_t> got(w.size());
  std::string error;
  ASSERT_TRUE(be_->fp8_to_bf16(w, 0, g, Fp8ScaleKind::f32, scale_bytes, got, error)) << error;
  for (uint64_t i = 0; i < w.size(); ++i) {
    const uint16_t want = fp8_f32_product_bf16(w[i], scale[i / 256]);
    if ((w[i] & 0x7F) == 0x7F) {
      ASSERT_EQ(got[i] & 0x7FC0, 0x7FC0) << "NaN code must stay NaN";
    } else {
      ASSERT_EQ(got[i], want) << "code " << int(w[i]) << " scale " << scale[i / 256];
    }
  }
}

// Scales at the edges of binary32: zeros, denormals (the product rounds in the denormal
// range), huge (the product overflows to inf), infinities and NaN (the group takes the
// element path). Every code in each row.
TEST_P(Backend, Fp8F32EveryCodeTimesExtremeScales) {
  const std::vector<float> scale = {0.0f, -0.0f, 0x1p-149f, -0x1p-140f, 0x1.8p-130f, 0x1p-126f, 0x1.fffffep-127f,
                                    1.0f, -3.0f, 0x1p100f, 0x1.fffffep127f, -0x1p120f, INFINITY, -INFINITY, NAN,
                                    0x1p-100f};
  const Fp8Grid g{scale.size(), 256, 1, 256};
  std::vector<uint8_t> w(g.rows * 256);
  for (uint64_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>(i);
  std::vector<uint8_t> scale_bytes(scale.size() * 4);
  std::memcpy(scale_bytes.data(), scale.data(), scale_bytes.size());
  std::vector<uint16_t> got(w.size());
  std::string error;
  ASSERT_TRUE(be_->fp8_to_bf16(w, 0, g, Fp8ScaleKind::f32, scale_bytes, got, error)) << error;
  for (uint64_t i = 0; i < w.size(); ++i) {
    const uint16_t want = fp8_f32_product_bf16(w[i], scale[i / 256]);
    if ((want & 0x7FFF) > 0x7F80) {
      ASSERT_GT(got[i] & 0x7FFF, 0x7F80) << "NaN expected: code " << int(w[i]) << " scale " << scale[i / 256];
    } else {
      ASSERT_EQ(got[i], want) << "code " << int(w[i]) << " scale " << scale[i / 256] << " got " << hex16(got[i]);
    }
  }
}

// Many rows of a V4-like width that is not a multiple of the kernel's warp tile (7176 =
// 8 x 897 columns, partial 128-blocks), random codes with a few NaN codes and NaN scales:
// on the device several grid-stride rounds. E8M0 results are integer-exact everywhere, so
// the device must equal the emulation bit for bit, NaN included; F32 equals the reference.
TEST_P(Backend, Fp8ManyRowsMatchTheEmulationEverywhere) {
  const uint64_t rows = GetParam() == "gpu" ? 3000 : 40, cols = 7176;
  const Fp8Grid g{rows, cols, 128, 128};
  const uint64_t nscale = fp8_scale_rows(g) * fp8_scale_cols(g);
  std::vector<uint8_t> w(rows * cols), e8m0(nscale);
  std::vector<float> f32(nscale);
  std::uniform_int_distribution<int> byte(0, 255), sc(100, 140);
  for (auto& x : w) x = static_cast<uint8_t>(byte(rng_));
  for (uint64_t i = 0; i < nscale; ++i) {
    e8m0[i] = static_cast<uint8_t>(i % 97 == 5 ? 0xFF : sc(rng_));
    f32[i] = std::ldexp(1.0f + static_cast<float>(byte(rng_)) / 256.0f, sc(rng_) - 120);
  }
  std::vector<uint8_t> f32_bytes(nscale * 4);
  std::memcpy(f32_bytes.data(), f32.data(), f32_bytes.size());
  const uint64_t row0 = 5;  // a chunk that starts inside a block row
  std::span<const uint8_t> part(w.data() + row0 * cols, (rows - row0) * cols);
  auto emu = make_emulated_backend();
  std::vector<uint16_t> got(part.size()), want(part.size());
  std::string error;
  ASSERT_TRUE(be_->fp8_to_bf16(part, row0, g, Fp8ScaleKind::e8m0, e8m0, got, error)) << error;
  ASSERT_TRUE(emu->fp8_to_bf16(part, row0, g, Fp8ScaleKind::e8m0, e8m0, want, error)) << error;
  for (uint64_t i = 0; i < part.size(); ++i) ASSERT_EQ(got[i], want[i]) << "e8m0 element " << i;
  ASSERT_TRUE(be_->fp8_to_bf16(part, row0, g, Fp8ScaleKind::f32, f32_bytes, got, error)) << error;
  for (uint64_t i = 0; i < part.size(); ++i) {
    const uint64_t r = row0 + i / cols, c = i % cols;
    const uint16_t ref = fp8_f32_product_bf16(part[i], f32[(r / 128) * fp8_scale_cols(g) + c / 128]);
    if ((part[i] & 0x7F) == 0x7F) {
      ASSERT_GT(got[i] & 0x7FFF, 0x7F80) << "f32 element " << i;
    } else {
      ASSERT_EQ(got[i], ref) << "f32 element " << i;
    }
  }
}

// Ragged grids (partial last blocks) and a row offset, on both kernel paths (cols % 4).
TEST_P(Backend, Fp8RowChunksOfRaggedGridsMatchTheCpuDequant) {
  for (uint64_t cols : {300u, 384u, 264u}) {  // scalar, 16-wide and 8-wide kernel paths
    const Fp8Grid g{200, cols, 128, 128};
    std::vector<uint8_t> scale(fp8_scale_rows(g) * fp8_scale_cols(g)), w(g.rows * g.cols);
    std::uniform_int_distribution<int> byte(0, 255), sc(100, 140);
    for (auto& s : scale) s = static_cast<uint8_t>(sc(rng_));
    for (auto& x : w) {
      x = static_cast<uint8_t>(byte(rng_));
      if ((x & 0x7F) == 0x7F) x = 0x11;
    }
    const uint64_t row0 = 70, rows = 130;  // crosses the 128-row block boundary
    std::span<const uint8_t> part(w.data() + row0 * cols, rows * cols);
    std::vector<uint8_t> want(2 * part.size());
    ASSERT_FALSE(dequant_fp8_rows_e8m0(part, row0, g, scale, want));
    std::vector<uint16_t> got(part.size());
    std::string error;
    ASSERT_TRUE(be_->fp8_to_bf16(part, row0, g, Fp8ScaleKind::e8m0, scale, got, error)) << error;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0) << "cols " << cols;
  }
}

// Every E2M1 code with every E8M0 byte: lut_x2[c] * 2^(b - 128), computed in double, with
// code 8 as -0.
TEST_P(Backend, Mxfp4EveryCodeTimesEveryScale) {
  const uint64_t rows = 256, k = 32;
  std::vector<uint8_t> w(rows * k / 2), scale(rows);
  for (uint64_t r = 0; r < rows; ++r) {
    scale[r] = static_cast<uint8_t>(r);
    for (uint64_t j = 0; j < 16; ++j) w[r * 16 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  }
  std::vector<float> got(rows * k);
  std::string error;
  ASSERT_TRUE(be_->mxfp4_to_f32(w, scale, rows, k, got, error)) << error;
  for (uint64_t i = 0; i < got.size(); ++i) {
    const uint8_t byte = w[i / 2], code = (i % 2) ? byte >> 4 : byte & 15;
    const double mag = std::ldexp(std::abs(double(kE2m1LutX2[code])), int(scale[i / 32]) - 128);
    const float want = static_cast<float>((code & 8) ? -mag : mag);  // E2M1 code 8 is -0
    ASSERT_EQ(bits(got[i]), bits(want)) << "code " << int(code) << " scale " << int(scale[i / 32]);
  }
}

// Random INT8-shift slabs of a shape with a partial group of 8 rows.
struct RandomSlabs {
  RemapParams p;
  std::vector<uint8_t> tiles, shift2;
  std::vector<float> cs;
};

RandomSlabs random_slabs(std::mt19937_64& rng, uint64_t rows, uint64_t k) {
  RandomSlabs s;
  s.p.rows = rows;
  s.p.k = k;
  s.tiles.resize(remap_mxfp4_bytes(s.p));
  s.shift2.resize(remap_shift2_bytes(s.p));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : s.tiles) b = static_cast<uint8_t>(byte(rng));
  for (auto& b : s.shift2) b = static_cast<uint8_t>(byte(rng));
  std::uniform_int_distribution<int> ex(-12, -2);
  for (uint64_t r = 0; r < rows; ++r) s.cs.push_back(std::ldexp(1.0f, ex(rng)));
  return s;
}

TEST_P(Backend, Int8ShiftDecodeEqualsTheCpuDecode) {
  // Shapes around the GPU kernel's 8-row x 16-block (512-column) staging tile: partial
  // groups, 17 blocks (one past a tile), whole tiles, several tiles of rows.
  for (auto [rows, k] : {std::pair<uint64_t, uint64_t>{20, 96}, {64, 256}, {3, 32}, {9, 544}, {16, 512}, {130, 1056}}) {
    RandomSlabs s = random_slabs(rng_, rows, k);
    std::vector<int8_t> want(rows * k), got(rows * k);
    ASSERT_TRUE(decode_int8_shift(s.tiles, s.shift2, s.p, want));
    std::string error;
    ASSERT_TRUE(be_->decode_int8_shift(s.tiles, s.shift2, s.p, got, error)) << error;
    EXPECT_EQ(got, want) << rows << "x" << k;
  }
}

// The device's digest of its INT8-shift decode equals the CPU's int8_shift_digest of the same
// slabs (the words of its q), on the same shapes, and a changed slab byte changes both.
TEST_P(Backend, Int8ShiftDigestEqualsTheCpuDigestOfItsDecode) {
  const DigestWeights dw(0x1D16E57);
  for (auto [rows, k] : {std::pair<uint64_t, uint64_t>{20, 96}, {64, 256}, {3, 32}, {9, 544}, {130, 1056}, {512, 4096}}) {
    RandomSlabs s = random_slabs(rng_, rows, k);
    F32Digest want, got;
    ASSERT_TRUE(int8_shift_digest(s.tiles, s.shift2, s.p, dw, want));
    std::string error;
    ASSERT_TRUE(be_->int8_shift_digest(s.tiles, s.shift2, s.p, dw, got, error)) << error;
    EXPECT_EQ(got, want) << rows << "x" << k;
    s.tiles[5] ^= 0x10;  // a code of row 0: c -> c ^ 1, two codes that never decode alike
    ASSERT_TRUE(be_->int8_shift_digest(s.tiles, s.shift2, s.p, dw, got, error)) << error;
    EXPECT_NE(got, want) << rows << "x" << k;
  }
  RandomSlabs s = random_slabs(rng_, 8, 32);
  F32Digest got;
  std::string error;
  s.shift2.pop_back();
  EXPECT_FALSE(be_->int8_shift_digest(s.tiles, s.shift2, s.p, dw, got, error));
}

// The emulation's INT8-shift decode has a word loop (the kernel's threads) and, under the
// process's ISA choice, a vpshufb loop over the same nibble table: both give the same bytes,
// for every byte value at every place of a row's chunk under every shift (tile byte i is
// (i + i / 256) mod 256, every shift2 field value on every row), and on random slabs.
TEST(EmulatedBackend, Int8ShiftDecodeIsTheSameOnBothIsas) {
  if (ggml_dequant_best_isa() < DequantIsa::avx2) GTEST_SKIP() << "this CPU has no AVX2: only the word loop runs here";
  auto emu = make_emulated_backend();
  std::mt19937_64 rng(17);
  std::vector<RandomSlabs> cases;
  RandomSlabs every = random_slabs(rng, 67, 32 * 260);
  for (size_t i = 0; i < every.tiles.size(); ++i) every.tiles[i] = static_cast<uint8_t>(i + i / 256);
  for (size_t i = 0; i < every.shift2.size(); ++i) every.shift2[i] = static_cast<uint8_t>(0x1B * (i % 4 + 1) + i / 8);
  cases.push_back(every);
  for (auto [rows, k] : {std::pair<uint64_t, uint64_t>{1, 32}, {7, 96}, {9, 544}, {130, 1056}})
    cases.push_back(random_slabs(rng, rows, k));
  for (const RandomSlabs& s : cases) {
    std::vector<int8_t> words(s.p.rows * s.p.k, 55), avx2(s.p.rows * s.p.k, 66);
    std::string error;
    const DequantIsa before = ggml_dequant_force_isa(DequantIsa::scalar);
    const bool scalar_ok = emu->decode_int8_shift(s.tiles, s.shift2, s.p, words, error);
    ggml_dequant_force_isa(DequantIsa::avx2);
    const bool avx2_ok = emu->decode_int8_shift(s.tiles, s.shift2, s.p, avx2, error);
    ggml_dequant_force_isa(before);
    ASSERT_TRUE(scalar_ok && avx2_ok) << error;
    EXPECT_EQ(words, avx2) << s.p.rows << "x" << s.p.k;
    std::vector<int8_t> want(s.p.rows * s.p.k);
    ASSERT_TRUE(decode_int8_shift_isa(DequantIsa::scalar, s.tiles, s.shift2, s.p, want));
    EXPECT_EQ(avx2, want) << s.p.rows << "x" << s.p.k;
  }
}

// The emulation's INT8 GEMM products loop, compiled for the baseline and for AVX2 (the
// process's ISA choice picks one): the same accumulators and BF16 outputs, k % 128 and not.
TEST(EmulatedBackend, Int8GemmIsTheSameOnBothIsas) {
  if (ggml_dequant_best_isa() < DequantIsa::avx2) GTEST_SKIP() << "this CPU has no AVX2: only the baseline loop runs here";
  auto emu = make_emulated_backend();
  std::mt19937_64 rng(23);
  for (auto [m, rows, k] : {std::tuple<uint64_t, uint64_t, uint64_t>{3, 21, 160}, {2, 8, 256}, {5, 37, 1024}}) {
    RandomSlabs s = random_slabs(rng, rows, k);
    std::vector<int8_t> a(m * k);
    for (auto& v : a) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    std::vector<float> as(m);
    for (auto& v : as) v = std::ldexp(1.0f, -static_cast<int>(rng() % 8));
    std::vector<int32_t> acc_base(m * rows), acc_avx2(m * rows);
    std::vector<uint16_t> out_base(m * rows), out_avx2(m * rows);
    std::string error;
    const DequantIsa before = ggml_dequant_force_isa(DequantIsa::scalar);
    const bool base_ok = emu->int8_gemm(a, as, s.tiles, s.shift2, s.cs, m, s.p, acc_base, out_base, error);
    ggml_dequant_force_isa(DequantIsa::avx2);
    const bool avx2_ok = emu->int8_gemm(a, as, s.tiles, s.shift2, s.cs, m, s.p, acc_avx2, out_avx2, error);
    ggml_dequant_force_isa(before);
    ASSERT_TRUE(base_ok && avx2_ok) << error;
    EXPECT_EQ(acc_base, acc_avx2) << m << "x" << rows << "x" << k;
    EXPECT_EQ(out_base, out_avx2) << m << "x" << rows << "x" << k;
  }
}

TEST_P(Backend, ActivationQuantizationEqualsTheCpuReference) {
  const uint64_t m = 6, k = 300;
  std::vector<float> x(m * k);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (auto& v : x) v = nd(rng_);
  for (uint64_t c = 0; c < k; ++c) x[1 * k + c] = 0.0f;  // a zero row: scale 1
  x[2 * k + 5] = NAN;                                     // skipped by the max, quantizes to 0
  x[3 * k + 7] = 1e30f;                                   // dominates its row
  x[4 * k + 9] = -0.0f;
  x[5 * k + 1] = 127.0f * 0.5f;  // ties at .5 after division (scale 0.5 when it is the max)
  std::vector<int8_t> want(m * k), got(m * k);
  std::vector<float> ws(m), gs(m);
  ASSERT_TRUE(quantize_activations(x, m, k, want, ws));
  std::string error;
  ASSERT_TRUE(be_->quantize_activations(x, m, k, got, gs, error)) << error;
  EXPECT_EQ(got, want);
  for (uint64_t r = 0; r < m; ++r) EXPECT_EQ(bits(gs[r]), bits(ws[r])) << "row " << r;
}

// Shapes that cross the 128x128 tile of the tensor-core kernel in both directions, and
// (the emulation's two loop widths) k a multiple of 128 with a row count not one of 4 or 16.
TEST_P(Backend, Int8GemmEqualsTheCpuReferenceExactly) {
  for (auto [m, rows, k] :
       {std::tuple<uint64_t, uint64_t, uint64_t>{130, 136, 96}, {1, 8, 32}, {7, 300, 160}, {5, 21, 256}}) {
    RandomSlabs s = random_slabs(rng_, rows, k);
    std::vector<float> x(m * k);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : x) v = nd(rng_);
    std::vector<int8_t> a(m * k), q(rows * k);
    std::vector<float> as(m);
    ASSERT_TRUE(quantize_activations(x, m, k, a, as));
    ASSERT_TRUE(decode_int8_shift(s.tiles, s.shift2, s.p, q));
    std::vector<int32_t> want_acc(m * rows), got_acc(m * rows);
    std::vector<uint16_t> want(m * rows), got(m * rows);
    ASSERT_TRUE(int8_gemm_bf16(a, as, q, s.cs, m, rows, k, want_acc, want));
    std::string error;
    ASSERT_TRUE(be_->int8_gemm(a, as, s.tiles, s.shift2, s.cs, m, s.p, got_acc, got, error)) << error;
    EXPECT_EQ(got_acc, want_acc) << m << "x" << rows << "x" << k;
    EXPECT_EQ(got, want) << m << "x" << rows << "x" << k;
  }
}

// Random blocks of every type the kernels decode, with every f16 scale field finite (NaN
// payloads are not portable between CPU and GPU arithmetic).
TEST_P(Backend, GgmlEveryKernelTypeEqualsTheCpuDequant) {
  const std::vector<std::pair<int32_t, std::vector<int>>> types = {
      {0, {}},        {1, {0}},  {30, {}},   {2, {0}},  {8, {0}},  {20, {0}},
      {39, {}},       {12, {0, 2}}, {14, {208}}, {18, {0}}, {21, {0}}, {22, {0}}};
  std::uniform_int_distribution<int> byte(0, 255);
  for (const auto& [type, f16_fields] : types) {
    const GgmlTypeInfo* info = ggml_type_info(type);
    ASSERT_NE(info, nullptr);
    const uint64_t blocks = info->block_size == 1 ? 4096 : 64;
    std::vector<uint8_t> data(blocks * info->type_size);
    for (auto& b : data) b = static_cast<uint8_t>(byte(rng_));
    for (uint64_t b = 0; b < blocks; ++b) {
      for (int off : f16_fields) data[b * info->type_size + off + 1] &= 0xBB;  // exponent < 31: finite
    }
    if (type == 0)
      for (uint64_t i = 0; i < blocks; ++i) data[4 * i + 3] &= 0xBF;  // finite f32
    if (type == 1)
      for (uint64_t i = 0; i < blocks; ++i) data[2 * i + 1] &= 0xBB;
    if (type == 30)
      for (uint64_t i = 0; i < blocks; ++i) data[2 * i + 1] &= 0xBF;
    std::vector<float> want(blocks * info->block_size), got(want.size());
    std::string error;
    ASSERT_TRUE(ggml_dequantize(type, data, want, error)) << error;
    ASSERT_TRUE(be_->ggml_to_f32(type, data, got, error)) << info->name << ": " << error;
    for (uint64_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(bits(got[i]), bits(want[i])) << info->name << " element " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

// The device's digest of its decode (ggml_digest: the kernel, then k_digest's sums) equals
// the CPU's digest of ggml_dequantize, for every kernel type, NaN and infinite scales
// included (blocks fully random), and one step of several grid-stride rounds.
TEST_P(Backend, GgmlDigestOfEveryKernelTypeEqualsTheCpuDigest) {
  ASSERT_TRUE(be_->has_ggml_digest());
  const DigestWeights w(digest_fresh_key());
  std::uniform_int_distribution<int> byte(0, 255);
  for (int32_t type : {0, 1, 30, 2, 8, 20, 39, 12, 14, 18, 21, 22}) {
    const GgmlTypeInfo* info = ggml_type_info(type);
    ASSERT_NE(info, nullptr);
    const uint64_t blocks = (type == 14 ? uint64_t{1} << 20 : uint64_t{1} << 19) / info->block_size * 3 + 7;
    std::vector<uint8_t> data(blocks * info->type_size);
    for (auto& b : data) b = static_cast<uint8_t>(byte(rng_));
    std::vector<float> want(blocks * info->block_size);
    std::string error;
    ASSERT_TRUE(ggml_dequantize(type, data, want, error)) << error;
    F32Digest got;
    ASSERT_TRUE(be_->ggml_digest(type, data, w, got, error)) << info->name << ": " << error;
    EXPECT_EQ(got, f32_digest(want, 0, w)) << info->name << ", " << want.size() << " elements";
  }
  F32Digest none;
  std::string error;
  EXPECT_FALSE(be_->ggml_digest(8, std::vector<uint8_t>(kDigestMaxElems / 32 * 34 + 34), w, none, error));
}

// The device's digests of the BF16 a --experts bf16 conversion holds (fp8_bf16_digest,
// mxfp4_bf16_digest) equal the CPU's bf16_digest of the same backend's BF16 (fp8_to_bf16;
// mxfp4_to_f32 rounded to nearest even), which the tests above hold to the CPU reference:
// random codes (NaN codes included), both FP8 scale kinds, 4M elements (several grid-stride
// rounds on the device), and a call past one digest refused.
TEST_P(Backend, Bf16DigestsOfFp8AndMxfp4DecodesEqualTheCpuDigestOfTheirBf16) {
  ASSERT_TRUE(be_->has_bf16_digest());
  const DigestWeights dw(digest_fresh_key());
  std::uniform_int_distribution<int> byte(0, 255), e8m0(100, 140);
  auto le_bytes = [](const std::vector<uint16_t>& v) {
    std::vector<uint8_t> b(2 * v.size());
    for (size_t i = 0; i < v.size(); ++i) b[2 * i] = static_cast<uint8_t>(v[i]), b[2 * i + 1] = static_cast<uint8_t>(v[i] >> 8);
    return b;
  };
  const Fp8Grid g{4096, 1024, 128, 128};
  std::vector<uint8_t> w(g.rows * g.cols);
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng_));
  std::vector<uint8_t> scale_e8m0(fp8_scale_rows(g) * fp8_scale_cols(g)), scale_f32(4 * scale_e8m0.size());
  for (auto& b : scale_e8m0) b = static_cast<uint8_t>(e8m0(rng_));
  for (size_t i = 0; i < scale_e8m0.size(); ++i) {
    const float f = std::ldexp(1.0f + static_cast<float>(byte(rng_)) / 256.0f, e8m0(rng_) - 127);
    std::memcpy(&scale_f32[4 * i], &f, 4);
  }
  std::string error;
  for (Fp8ScaleKind kind : {Fp8ScaleKind::e8m0, Fp8ScaleKind::f32}) {
    const std::vector<uint8_t>& scale = kind == Fp8ScaleKind::e8m0 ? scale_e8m0 : scale_f32;
    // Rows 1024.. of the grid: row_begin picks the scale rows.
    std::span<const uint8_t> rows(w.data() + 1024 * g.cols, 2048 * g.cols);
    std::vector<uint16_t> bf(rows.size());
    ASSERT_TRUE(be_->fp8_to_bf16(rows, 1024, g, kind, scale, bf, error)) << error;
    F32Digest got;
    ASSERT_TRUE(be_->fp8_bf16_digest(rows, 1024, g, kind, scale, dw, got, error)) << error;
    EXPECT_EQ(got, bf16_digest(le_bytes(bf), 0, dw)) << (kind == Fp8ScaleKind::e8m0 ? "e8m0" : "f32");
  }
  const uint64_t mrows = 4096, k = 1024;
  std::vector<uint8_t> mw(mrows * k / 2), ms(mrows * k / 32);
  for (auto& b : mw) b = static_cast<uint8_t>(byte(rng_));
  for (auto& b : ms) b = static_cast<uint8_t>(e8m0(rng_));
  std::vector<float> f(mrows * k);
  ASSERT_TRUE(be_->mxfp4_to_f32(mw, ms, mrows, k, f, error)) << error;
  std::vector<uint16_t> rounded(f.size());
  for (size_t i = 0; i < f.size(); ++i) rounded[i] = bf16_from_float_rne(f[i]);
  F32Digest got;
  ASSERT_TRUE(be_->mxfp4_bf16_digest(mw, ms, mrows, k, dw, got, error)) << error;
  EXPECT_EQ(got, bf16_digest(le_bytes(rounded), 0, dw));
  // One element different: the digest differs (both sums).
  rounded[123457] ^= 1;
  const F32Digest off = bf16_digest(le_bytes(rounded), 0, dw);
  EXPECT_NE(got.a, off.a);
  EXPECT_NE(got.b, off.b);
  // Past one digest (kDigestMaxElems elements): refused, not truncated.
  const uint64_t big_rows = kDigestMaxElems / 32 + 1;
  std::vector<uint8_t> bw(big_rows * 16), bs(big_rows);
  EXPECT_FALSE(be_->mxfp4_bf16_digest(bw, bs, big_rows, 32, dw, got, error));
}

// Block counts around the kernels' tiles (8 or 64 blocks per 256 threads, 32 per Q6_K tile),
// and on the device enough blocks for several grid-stride rounds.
TEST_P(Backend, GgmlBlockCountsAroundTheTilesEqualTheCpuDequant) {
  std::uniform_int_distribution<int> byte(0, 255);
  for (int32_t type : {2, 8, 20, 39, 12, 14, 18, 21, 22}) {
    const GgmlTypeInfo* info = ggml_type_info(type);
    std::vector<uint64_t> counts = {1, 7, 31, 33, 65, 1013};
    if (GetParam() == "gpu") counts.push_back(type == 14 ? 300007 : 100003);
    for (uint64_t blocks : counts) {
      std::vector<uint8_t> data(blocks * info->type_size);
      for (auto& b : data) b = static_cast<uint8_t>(byte(rng_));
      for (uint64_t b = 0; b < blocks; ++b) {  // finite f16 scales (NaN payloads are not portable)
        uint8_t* p = data.data() + b * info->type_size;
        if (type == 14) p[209] &= 0xBB;
        else if (type == 12) p[1] &= 0xBB, p[3] &= 0xBB;
        else if (type != 39) p[1] &= 0xBB;
      }
      std::vector<float> want(blocks * info->block_size), got(want.size(), -1.0f);
      std::string error;
      ASSERT_TRUE(ggml_dequantize(type, data, want, error)) << error;
      ASSERT_TRUE(be_->ggml_to_f32(type, data, got, error)) << info->name << ": " << error;
      for (uint64_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(bits(got[i]), bits(want[i])) << info->name << " x" << blocks << " element " << i;
    }
  }
}

// Blocks whose f16 scale fields are NaN (quiet and signalling, both signs, several
// payloads), infinite or special finite values, with random codes (zero codes included, so
// inf x 0 occurs): the device must give the CPU reference's bits, NaN payloads and signs
// included (the reference is x86 arithmetic: a NaN operand quieted, 0xFFC00000 for
// inf x 0 and inf - inf, the i-quant sign as a sign-bit flip; a GPU's own NaN results are
// its canonical 0x7FFFFFFF, so the kernels spell the reference's out, decode.h X86Arith).
// Also F32 / F16 / BF16 NaN bit patterns, which must pass through unchanged.
TEST_P(Backend, GgmlNanAndInfiniteScalesGiveTheCpuReferenceBits) {
  const std::vector<uint16_t> specials = {0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0x7D55, 0xFC3F, 0x7FFF,
                                          0xFFFF, 0x0000, 0x8000, 0x0001, 0x7BFF, 0x3C00};
  const uint64_t n = specials.size();
  const std::vector<std::pair<int32_t, std::vector<int>>> types = {
      {2, {0}},  {8, {0}},  {20, {0}},  {39, {}},  {12, {0, 2}},
      {14, {208}}, {18, {0}}, {21, {0}}, {22, {0}}};
  std::uniform_int_distribution<int> byte(0, 255);
  for (const auto& [type, fields] : types) {
    const GgmlTypeInfo* info = ggml_type_info(type);
    ASSERT_NE(info, nullptr);
    // Every special in every field, and with two fields every pair; 4 random-code blocks each.
    const uint64_t combos = fields.size() == 2 ? n * n : n, blocks = 4 * combos;
    std::vector<uint8_t> data(blocks * info->type_size);
    for (uint64_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(byte(rng_) & (i % 3 ? 0xFF : 0x0F));
    for (uint64_t b = 0; b < blocks; ++b) {
      const uint64_t c = b % combos;
      for (size_t f = 0; f < fields.size(); ++f) {
        const uint16_t v = specials[f == 0 ? c % n : c / n];
        data[b * info->type_size + fields[f]] = static_cast<uint8_t>(v);
        data[b * info->type_size + fields[f] + 1] = static_cast<uint8_t>(v >> 8);
      }
    }
    std::vector<float> want(blocks * info->block_size), scalar(want.size()), got(want.size());
    std::string error;
    ASSERT_TRUE(ggml_dequantize(type, data, want, error)) << error;
    ASSERT_TRUE(ggml_dequantize_isa(DequantIsa::scalar, type, data, scalar, error)) << error;
    ASSERT_TRUE(be_->ggml_to_f32(type, data, got, error)) << info->name << ": " << error;
    for (uint64_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(bits(want[i]), bits(scalar[i])) << info->name << " element " << i << ": the CPU ISAs differ";
      const uint64_t b = i / info->block_size;
      ASSERT_EQ(bits(got[i]), bits(want[i]))
          << info->name << " element " << i << " (block " << b << ", scale field(s) "
          << hex16(static_cast<uint16_t>(data[b * info->type_size + (fields.empty() ? 0 : fields[0])] |
                                         data[b * info->type_size + (fields.empty() ? 0 : fields[0]) + 1] << 8))
          << "): device " << std::hex << bits(got[i]) << " vs CPU " << bits(want[i]);
    }
  }
  // The plain types: NaN and infinity bit patterns of every kind pass through.
  std::vector<uint8_t> f32;
  for (uint32_t w : {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7FA5A5A5u, 0xFFFFFFFFu,
                     0x7FFFFFFFu, 0x00000001u, 0x80000000u}) {
    for (int k = 0; k < 4; ++k) f32.push_back(static_cast<uint8_t>(w >> (8 * k)));
  }
  std::vector<uint8_t> h16;
  for (uint16_t h : specials) h16.push_back(static_cast<uint8_t>(h)), h16.push_back(static_cast<uint8_t>(h >> 8));
  for (uint16_t h : {0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF, 0x7FA5})
    h16.push_back(static_cast<uint8_t>(h)), h16.push_back(static_cast<uint8_t>(h >> 8));
  for (const auto& [type, bytes] : {std::pair<int32_t, std::vector<uint8_t>>{0, f32}, {1, h16}, {30, h16}}) {
    const uint64_t elems = bytes.size() / (type == 0 ? 4 : 2);
    std::vector<float> want(elems), got(elems);
    std::string error;
    ASSERT_TRUE(ggml_dequantize(type, bytes, want, error)) << error;
    ASSERT_TRUE(be_->ggml_to_f32(type, bytes, got, error)) << error;
    for (uint64_t i = 0; i < elems; ++i)
      ASSERT_EQ(bits(got[i]), bits(want[i])) << "type " << type << " element " << i << std::hex << ": device "
                                             << bits(got[i]) << " vs CPU " << bits(want[i]);
  }
}

// Calls from many threads at once (the verifier's jobs): the GPU backend runs them on its
// lanes (more threads than lanes: some wait), small calls through the pinned staging and
// calls whose output exceeds it (4.5M f32 > 16 MiB) through pageable copies; every
// result must equal the CPU reference, as one call at a time does.
TEST_P(Backend, CallsFromManyThreadsAtOnceEqualTheCpuDequant) {
  ASSERT_TRUE(be_->concurrent());
  struct Case {
    int32_t type;
    uint64_t blocks;
  };
  const std::vector<Case> cases = {{8, 1}, {21, 1000}, {14, 333}, {8, 140000}, {21, 17600}, {14, 7}, {1, 12345}};
  std::vector<std::string> failures(8);
  std::vector<std::thread> threads;
  for (int th = 0; th < 8; ++th) {
    threads.emplace_back([&, th] {
      std::mt19937_64 rng(1000 + th);
      std::uniform_int_distribution<int> byte(0, 255);
      for (size_t i = 0; i < cases.size() && failures[th].empty(); ++i) {
        const Case& c = cases[(i + th) % cases.size()];
        const GgmlTypeInfo* info = ggml_type_info(c.type);
        std::vector<uint8_t> data(c.blocks * info->type_size);
        for (auto& b : data) b = static_cast<uint8_t>(byte(rng));
        std::vector<float> want(c.blocks * info->block_size), got(want.size());
        std::string error;
        if (!ggml_dequantize(c.type, data, want, error) || !be_->ggml_to_f32(c.type, data, got, error)) {
          failures[th] = error;
          break;
        }
        if (std::memcmp(want.data(), got.data(), 4 * want.size()) != 0)
          failures[th] = std::string(info->name) + " x" + std::to_string(c.blocks) + " differs";
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int th = 0; th < 8; ++th) EXPECT_EQ(failures[th], "") << "thread " << th;
}

TEST_P(Backend, UnsupportedTypesAreAnErrorNotGarbage) {
  std::vector<uint8_t> data(176);
  std::vector<float> out(256);
  std::string error;
  EXPECT_FALSE(be_->ggml_to_f32(/*Q5_K*/ 13, data, out, error));
  EXPECT_NE(error.find("unsupported"), std::string::npos) << error;
  EXPECT_FALSE(be_->ggml_to_f32(99, data, out, error));
}

TEST_P(Backend, WrongSizesAreRejected) {
  std::string error;
  std::vector<uint8_t> w(100), s(3);
  std::vector<uint16_t> out(99);
  EXPECT_FALSE(be_->fp8_to_bf16(w, 0, Fp8Grid{10, 10, 128, 128}, Fp8ScaleKind::e8m0, s, out, error));
  std::vector<float> f(10);
  EXPECT_FALSE(be_->mxfp4_to_f32(w, s, 1, 33, f, error));
}

INSTANTIATE_TEST_SUITE_P(Kernels, Backend, ::testing::Values("emulate", "gpu"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ckpt
