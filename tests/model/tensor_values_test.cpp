// dump_tensor against ggml's own to_float output (every tensor of the qwen3next fixture),
// the peers' BF16 references for FP8 weights, and hand-computed MXFP4 experts.
#include "model/tensor_values.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "core/ggml_types.h"
#include "formats/json.h"
#include "io/hash.h"
#include "numerics/fp8.h"
#include "test_util.h"

namespace ckpt {
namespace {

using test::fixture;

const std::string kGguf = "ggml/qwen3next-tiny.gguf";

std::vector<uint8_t> dump_bytes(const LoadedModel& m, const std::string& name, DumpAs as, std::string& error,
                                DumpError* why = nullptr, size_t* max_chunk = nullptr) {
  std::vector<uint8_t> out;
  auto sink = [&](std::span<const uint8_t> b) {
    if (max_chunk) *max_chunk = std::max(*max_chunk, b.size());
    out.insert(out.end(), b.begin(), b.end());
    return true;
  };
  EXPECT_TRUE(dump_tensor(m, name, as, sink, error, why) || !error.empty());
  return out;
}

std::vector<float> as_floats(const std::vector<uint8_t>& b) {
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}

std::string sha256_of(const std::vector<uint8_t>& b) {
  Sha256 h;
  h.update(b);
  return h.hex_digest();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(TensorDump, EveryQwen3NextTensorMatchesGgmlToFloat) {
  auto m = test::load_model_checked(fixture(kGguf));
  JsonDoc ref;
  std::string error;
  ASSERT_TRUE(ref.parse(slurp(fixture("ggml/qwen3next-tiny.ref.json")), error)) << error;
  int checked = 0;
  for (auto [name, entry] : ref.root().get_object()) {
    if (std::string_view(name).find('#') != std::string_view::npos) continue;  // derived (A_log), not a tensor
    const std::string tensor(name);
    size_t max_chunk = 0;
    auto bytes = dump_bytes(*m, tensor, DumpAs::f32, error, nullptr, &max_chunk);
    ASSERT_TRUE(error.empty()) << tensor << ": " << error;
    EXPECT_LE(max_chunk, kDumpChunkValues * 4) << tensor;
    EXPECT_EQ(static_cast<int64_t>(bytes.size() / 4), *json_int(entry, "elements")) << tensor;
    EXPECT_EQ(sha256_of(bytes), *json_string(entry, "sha256_f32le")) << tensor << " " << m->view.find(tensor)->type;
    auto values = as_floats(bytes);
    size_t i = 0;
    for (auto v : entry["first16"].get_array()) {
      ASSERT_LT(i, values.size());
      EXPECT_EQ(values[i], static_cast<float>(double(v))) << tensor << "[" << i << "]";
      ++i;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 51);
  EXPECT_EQ(m->view.tensors.size(), 51u);
}

TEST(TensorDump, RawEqualsTheFileBytes) {
  auto m = test::load_model_checked(fixture(kGguf));
  auto file = test::read_file(fixture(kGguf));
  for (const auto& t : m->view.tensors) {
    std::string error;
    auto bytes = dump_bytes(*m, t.name, DumpAs::raw, error);
    ASSERT_TRUE(error.empty()) << error;
    ASSERT_EQ(bytes.size(), t.nbytes);
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), file.begin() + static_cast<ptrdiff_t>(t.offset))) << t.name;
  }
}

TEST(TensorDump, UnknownTensorIsNotFound) {
  auto m = test::load_model_checked(fixture(kGguf));
  std::string error;
  DumpError why{};
  dump_bytes(*m, "blk.9.nope", DumpAs::f32, error, &why);
  EXPECT_EQ(why, DumpError::not_found);
  EXPECT_NE(error.find("blk.9.nope"), std::string::npos) << error;
}

// --- a hand-built GGUF for the types the fixture lacks --------------------------------

struct GgufTensorSpec {
  std::string name;
  int32_t type;
  uint64_t ne0;
  std::vector<uint8_t> data;
};

void put_u32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_str(std::vector<uint8_t>& b, const std::string& s) {
  put_u64(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}
void pad32(std::vector<uint8_t>& b) {
  while (b.size() % 32) b.push_back(0);
}

// GGUF v3, one KV (general.architecture = "llama"), 1-D tensors, alignment 32.
std::vector<uint8_t> make_gguf(const std::vector<GgufTensorSpec>& tensors) {
  std::vector<uint8_t> b = {'G', 'G', 'U', 'F'};
  put_u32(b, 3);
  put_u64(b, tensors.size());
  put_u64(b, 1);
  put_str(b, "general.architecture");
  put_u32(b, 8);  // STRING
  put_str(b, "llama");
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    put_str(b, t.name);
    put_u32(b, 1);
    put_u64(b, t.ne0);
    put_u32(b, static_cast<uint32_t>(t.type));
    put_u64(b, offset);
    offset += (t.data.size() + 31) / 32 * 32;
  }
  pad32(b);
  for (const auto& t : tensors) {
    b.insert(b.end(), t.data.begin(), t.data.end());
    pad32(b);
  }
  return b;
}

TEST(TensorDump, GgufF16Bf16AndUnsupportedTypes) {
  test::TempDir dir;
  const std::vector<uint8_t> f16 = {0x01, 0x00, 0x00, 0x80, 0x00, 0x3C, 0xFF, 0xFB};  // 2^-24, -0, 1, -65504
  const std::vector<uint8_t> bf16 = {0x80, 0x3F, 0x40, 0xC0};                          // 1, -3
  const std::string path = dir.str("t.gguf");
  test::write_file(path, make_gguf({{"a.f16", kGgmlF16, 4, f16},
                                    {"b.bf16", kGgmlBF16, 2, bf16},
                                    {"c.iq1m", kGgmlIQ1_M, 256, std::vector<uint8_t>(56, 0)}}));
  auto m = test::load_model_checked(path);
  std::string error;
  auto a = as_floats(dump_bytes(*m, "a.f16", DumpAs::f32, error));
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0], 0x1p-24f);
  EXPECT_TRUE(a[1] == 0.0f && std::signbit(a[1]));
  EXPECT_EQ(a[2], 1.0f);
  EXPECT_EQ(a[3], -65504.0f);
  auto b = as_floats(dump_bytes(*m, "b.bf16", DumpAs::f32, error));
  ASSERT_EQ(b, (std::vector<float>{1.0f, -3.0f}));
  DumpError why{};
  auto c = dump_bytes(*m, "c.iq1m", DumpAs::f32, error, &why);
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(why, DumpError::unsupported);
  EXPECT_NE(error.find("c.iq1m"), std::string::npos) << error;
  EXPECT_NE(error.find("unsupported type IQ1_M (id 29)"), std::string::npos) << error;
  error.clear();
  EXPECT_EQ(dump_bytes(*m, "c.iq1m", DumpAs::raw, error).size(), 56u) << error;  // raw works for any type
}

// --- safetensors --------------------------------------------------------------------

float bf16_widen(const uint8_t* p) {
  uint32_t u = static_cast<uint32_t>(p[0] | p[1] << 8) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Dense FP8 × E8M0: the exact products are exact in BF16 on dsv4-tiny, so the deployment
// converter's BF16 output widened to f32 is the expected result, bit for bit.
TEST(TensorDump, Fp8E8m0WeightsEqualTheBf16Reference) {
  auto m = test::load_model_checked(fixture("oracle/dsv4-tiny"));
  auto ref = test::load_model_checked(fixture("oracle/dsv4-tiny.qw-bf16"));
  int checked = 0;
  for (const auto& t : m->view.tensors) {
    if (t.dtype != Dtype::F8_E4M3) continue;
    std::string error;
    auto got = as_floats(dump_bytes(*m, t.name, DumpAs::f32, error));
    ASSERT_TRUE(error.empty()) << t.name << ": " << error;
    auto want_bf16 = dump_bytes(*ref, t.name, DumpAs::raw, error);
    ASSERT_EQ(ref->view.find(t.name)->type, "BF16");
    ASSERT_EQ(got.size() * 2, want_bf16.size()) << t.name;
    size_t diffs = 0;
    for (size_t i = 0; i < got.size(); ++i) diffs += std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(bf16_widen(&want_bf16[2 * i]));
    EXPECT_EQ(diffs, 0u) << t.name;
    ++checked;
  }
  EXPECT_EQ(checked, 42);
}

// V3 style F32 weight_scale_inv: one fp32 multiply; DeepSeek's BF16 is that value rounded once.
TEST(TensorDump, Fp8F32ScaleMatchesDeepSeekV3AfterBf16Rounding) {
  auto m = test::load_model_checked(fixture("oracle/dsv3-tiny"));
  auto ref = test::load_model_checked(fixture("oracle/dsv3-tiny.v3-bf16"));
  int checked = 0;
  for (const auto& t : m->view.tensors) {
    if (t.dtype != Dtype::F8_E4M3) continue;
    std::string error;
    auto got = as_floats(dump_bytes(*m, t.name, DumpAs::f32, error));
    ASSERT_TRUE(error.empty()) << t.name << ": " << error;
    auto want = dump_bytes(*ref, t.name, DumpAs::raw, error);
    ASSERT_EQ(got.size() * 2, want.size());
    size_t diffs = 0;
    for (size_t i = 0; i < got.size(); ++i)
      diffs += bf16_from_float_rne(got[i]) != static_cast<uint16_t>(want[2 * i] | want[2 * i + 1] << 8);
    EXPECT_EQ(diffs, 0u) << t.name;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(TensorDump, Bf16SafetensorsWidens) {
  auto m = test::load_model_checked(fixture("oracle/dsv4-tiny.qw-bf16"));
  const std::string name = "layers.0.attn.wkv.weight";
  std::string error;
  auto got = as_floats(dump_bytes(*m, name, DumpAs::f32, error));
  auto raw = dump_bytes(*m, name, DumpAs::raw, error);
  ASSERT_EQ(got.size() * 2, raw.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], bf16_widen(&raw[2 * i])) << i;
}

constexpr float kLut[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0f, -0.5, -1, -1.5, -2, -3, -4, -6};

// lut[nibble] × 2^(e − 127), low nibble first, one scale per 32 values of a row.
std::vector<float> mxfp4_expected(const std::vector<uint8_t>& w, const std::vector<uint8_t>& s, uint64_t cols) {
  std::vector<float> out;
  for (size_t k = 0; k < w.size() * 2; ++k) {
    const uint8_t code = k % 2 ? w[k / 2] >> 4 : w[k / 2] & 0xF;
    const uint64_t row = k / cols, col = k % cols;
    out.push_back(std::ldexp(kLut[code], static_cast<int>(s[row * (cols / 32) + col / 32]) - 127));
  }
  return out;
}

TEST(TensorDump, Mxfp4ExpertEqualsLutTimesScale) {
  auto m = test::load_model_checked(fixture("oracle/dsv4-tiny"));
  const std::string name = "layers.1.ffn.experts.3.w2.weight";
  const ModelTensor* t = m->view.find(name);
  ASSERT_NE(t, nullptr);
  std::string error;
  auto got = as_floats(dump_bytes(*m, name, DumpAs::f32, error));
  ASSERT_TRUE(error.empty()) << error;
  auto w = dump_bytes(*m, name, DumpAs::raw, error);
  auto s = dump_bytes(*m, "layers.1.ffn.experts.3.w2.scale", DumpAs::raw, error);
  auto want = mxfp4_expected(w, s, 2 * t->shape[1]);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << i;
}

// A checkpoint file with an FP8 weight and an MXFP4 expert, written by hand.
std::string tiny_st(const test::TempDir& dir, uint8_t fp8_code, uint8_t fp8_scale, uint8_t expert_scale1) {
  std::vector<uint8_t> payload = {0x38, 0x40, 0xB8, fp8_code};  // X.weight [2, 2]: 1, 2, -1, code
  payload.push_back(fp8_scale);                                    // X.scale [1, 1]
  for (int i = 0; i < 32; ++i) payload.push_back(static_cast<uint8_t>(i * 37 + 11));  // expert [2, 16]
  payload.push_back(0);                                            // expert scale [2, 1]: 2^-127, ...
  payload.push_back(expert_scale1);
  const std::string header =
      R"({"X.weight":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[0,4]},)"
      R"("X.scale":{"dtype":"F8_E8M0","shape":[1,1],"data_offsets":[4,5]},)"
      R"("l.ffn.experts.0.w1.weight":{"dtype":"I8","shape":[2,16],"data_offsets":[5,37]},)"
      R"("l.ffn.experts.0.w1.scale":{"dtype":"F8_E8M0","shape":[2,1],"data_offsets":[37,39]}})";
  const std::string path = dir.str("m.safetensors");
  test::write_file(path, test::make_safetensors(header, payload));
  return path;
}

TEST(TensorDump, HandBuiltFp8AndMxfp4) {
  test::TempDir dir;
  auto m = test::load_model_checked(tiny_st(dir, 0x01, 130, 252));
  std::string error;
  auto x = as_floats(dump_bytes(*m, "X.weight", DumpAs::f32, error));
  ASSERT_TRUE(error.empty()) << error;
  EXPECT_EQ(x, (std::vector<float>{8.0f, 16.0f, -8.0f, 0x1p-9f * 8.0f}));  // × 2^3; 0x01 is the subnormal 2^-9
  auto e = as_floats(dump_bytes(*m, "l.ffn.experts.0.w1.weight", DumpAs::f32, error));
  ASSERT_TRUE(error.empty()) << error;
  std::vector<uint8_t> w;
  for (int i = 0; i < 32; ++i) w.push_back(static_cast<uint8_t>(i * 37 + 11));
  auto want = mxfp4_expected(w, {0, 252}, 32);
  ASSERT_EQ(e.size(), 64u);
  for (size_t i = 0; i < e.size(); ++i) EXPECT_EQ(std::bit_cast<uint32_t>(e[i]), std::bit_cast<uint32_t>(want[i])) << i;
  EXPECT_EQ(e[1], std::ldexp(kLut[(11 >> 4)], -127));  // high nibble second; 2^-127 scale is an fp32 denormal
}

TEST(TensorDump, NanCodesAreErrorsNamingTheElement) {
  struct Case {
    uint8_t code, scale, expert_scale;
    std::string tensor, needle;
  };
  const Case cases[] = {
      {0x7F, 127, 127, "X.weight", "element 3 (row 1, col 1) is the E4M3 NaN code 0x7F"},
      {0xFF, 127, 127, "X.weight", "element 3 (row 1, col 1) is the E4M3 NaN code 0xFF"},
      {0x01, 0xFF, 127, "X.weight", "element 0 (row 0, col 0): its scale in X.scale is the E8M0 NaN code 0xFF"},
      {0x01, 127, 0xFF, "l.ffn.experts.0.w1.weight", "element 32 (row 1, col 0): its scale in l.ffn.experts.0.w1.scale"},
      // Overflow is refused as convert refuses it: E2M1 values >= 2 times 2^127
      // and E4M3 2.0 (0x40) times 2^127 are beyond f32.
      {0x01, 127, 254, "l.ffn.experts.0.w1.weight", "is beyond f32's largest finite value; refusing to write inf"},
      {0x01, 254, 127, "X.weight", "element 1 (row 0, col 1) times its scale in X.scale is beyond f32's"},
  };
  for (const auto& c : cases) {
    test::TempDir dir;
    auto m = test::load_model_checked(tiny_st(dir, c.code, c.scale, c.expert_scale));
    std::string error;
    DumpError why{};
    auto sink = [](std::span<const uint8_t>) { return true; };
    EXPECT_FALSE(dump_tensor(*m, c.tensor, DumpAs::f32, sink, error, &why));
    EXPECT_EQ(why, DumpError::bad_value);
    EXPECT_NE(error.find(c.tensor), std::string::npos) << error;
    EXPECT_NE(error.find(c.needle), std::string::npos) << error;
  }
}

TEST(TensorDump, UnsupportedSafetensorsDtypeAndMissingScale) {
  auto m = test::load_model_checked(fixture("oracle/dsv4-tiny"));
  std::string error;
  DumpError why{};
  const ModelTensor* i64 = nullptr;
  for (const auto& t : m->view.tensors)
    if (t.dtype == Dtype::I64) i64 = &t;
  ASSERT_NE(i64, nullptr);
  auto sink = [](std::span<const uint8_t>) { return true; };
  EXPECT_FALSE(dump_tensor(*m, i64->name, DumpAs::f32, sink, error, &why));
  EXPECT_EQ(why, DumpError::unsupported);
  EXPECT_NE(error.find("unsupported dtype I64"), std::string::npos) << error;

  test::TempDir dir;
  const std::string path = dir.str("lone.safetensors");
  test::write_file(path, test::make_safetensors(R"({"Y.weight":{"dtype":"F8_E4M3","shape":[1,2],"data_offsets":[0,2]}})",
                                                {0x38, 0x38}));
  auto lone = test::load_model_checked(path);
  EXPECT_FALSE(dump_tensor(*lone, "Y.weight", DumpAs::f32, sink, error, &why));
  EXPECT_EQ(why, DumpError::unsupported);
  EXPECT_NE(error.find("without a scale"), std::string::npos) << error;
}

TEST(TensorDump, SinkFailureStops) {
  auto m = test::load_model_checked(fixture(kGguf));
  std::string error;
  DumpError why{};
  int calls = 0;
  auto sink = [&](std::span<const uint8_t>) { return ++calls < 2; };
  EXPECT_FALSE(dump_tensor(*m, "blk.0.ffn_gate_exps.weight", DumpAs::f32, sink, error, &why));
  EXPECT_EQ(why, DumpError::sink);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace ckpt
