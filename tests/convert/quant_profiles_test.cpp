// Every row of the quantization-profile table (schemas/quant/*.json) on synthetic
// checkpoints: scale dtypes F32 / BF16 / F16 / U8-E8M0 / F8_E8M0, block (ragged) / 4-D /
// per-channel / per-tensor grids, each converted and compared element by element with an
// independent computation of bf16_rne(fp32(e4m3) * fp32(scale)); and every refusal.
#include <algorithm>
#include <bit>
#include <filesystem>
#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "convert/convert.h"
#include "formats/json.h"
#include "model/quant_scheme.h"
#include "test_util.h"
#include "validate/validate.h"

namespace ckpt {
namespace {

using test::describe;

float ref_e4m3(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(8 + m), e - 10);
  return (c & 0x80) ? -mag : mag;
}
float ref_f16(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -24) : std::ldexp(static_cast<float>(1024 + m), e - 25);
  return (h & 0x8000) ? -mag : mag;
}
float ref_bf16_value(uint16_t h) {
  uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t ref_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lower = u & 0xFFFF, upper = u >> 16;
  return static_cast<uint16_t>(lower > 0x8000 || (lower == 0x8000 && (upper & 1)) ? upper + 1 : upper);
}

enum class Grid { block, channel_2d, channel_1d, scalar, scalar_1, block4d };

struct Case {
  std::string name;
  std::string quant_config;  // the quantization_config object
  std::string scale_suffix;  // ".weight_scale_inv" / ".weight_scale"
  std::string scale_dtype;   // "F32", "BF16", "F16", "U8", "F8_E8M0"
  Grid grid;
  uint64_t rows, cols, bm, bn;
  std::string extra_suffix;  // an activation scale to drop ("" = none)
  std::string want_profile;
};

std::string shape_json(const std::vector<uint64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
  return t + "]";
}

struct Built {
  std::vector<uint8_t> codes, scale;
  std::vector<uint64_t> scale_shape;
};

// Writes DIR/config.json + DIR/model.safetensors: a BF16 norm, the FP8 weight, its scale (and
// activation scale); returns the weight codes and scale bytes.
Built write_case(const std::string& dir, const Case& c, std::mt19937& rng) {
  std::filesystem::create_directories(dir);
  test::write_text(dir + "/config.json",
                   R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16", )"
                   R"("quantization_config": )" + c.quant_config + "}\n");
  Built b;
  const uint64_t sr = (c.rows + c.bm - 1) / c.bm, sc = (c.cols + c.bn - 1) / c.bn;
  switch (c.grid) {
    case Grid::block: b.scale_shape = {sr, sc}; break;
    case Grid::block4d: b.scale_shape = {sr, 1, sc, 1}; break;
    case Grid::channel_2d: b.scale_shape = {c.rows, 1}; break;
    case Grid::channel_1d: b.scale_shape = {c.rows}; break;
    case Grid::scalar: b.scale_shape = {}; break;
    case Grid::scalar_1: b.scale_shape = {1}; break;
  }
  uint64_t n = 1;
  for (uint64_t d : b.scale_shape) n *= d;
  for (uint64_t i = 0; i < c.rows * c.cols; ++i) {
    uint8_t code = static_cast<uint8_t>(rng());
    if ((code & 0x7F) == 0x7F) code ^= 1;  // no NaN codes
    b.codes.push_back(code);
  }
  for (uint64_t i = 0; i < n; ++i) {
    const float v = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, -static_cast<int>(rng() % 12) - 2);
    if (c.scale_dtype == "F32") {
      uint32_t u = std::bit_cast<uint32_t>(v) ^ (rng() & 0x3FF);  // low mantissa bits: the multiply rounds
      for (int k = 0; k < 4; ++k) b.scale.push_back(static_cast<uint8_t>(u >> (8 * k)));
    } else if (c.scale_dtype == "BF16") {
      const uint16_t h = static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
      b.scale.push_back(static_cast<uint8_t>(h & 0xFF));
      b.scale.push_back(static_cast<uint8_t>(h >> 8));
    } else if (c.scale_dtype == "F16") {
      const uint16_t h = static_cast<uint16_t>(0x1C00 + (rng() % 0x1800));  // 2^-8 .. 2^-2, any mantissa
      b.scale.push_back(static_cast<uint8_t>(h & 0xFF));
      b.scale.push_back(static_cast<uint8_t>(h >> 8));
    } else {  // U8 / F8_E8M0 exponent bytes
      b.scale.push_back(static_cast<uint8_t>(112 + rng() % 20));
    }
  }
  std::string header = "{\"model.norm.weight\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}";
  std::vector<uint8_t> payload(8, 0x3F);
  auto add = [&](const std::string& name, const std::string& dtype, const std::vector<uint64_t>& shape,
                 const std::vector<uint8_t>& bytes) {
    header += ",\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape_json(shape) +
              ",\"data_offsets\":[" + std::to_string(payload.size()) + "," + std::to_string(payload.size() + bytes.size()) +
              "]}";
    payload.insert(payload.end(), bytes.begin(), bytes.end());
  };
  add("model.layers.0.mlp.up_proj.weight", "F8_E4M3", {c.rows, c.cols}, b.codes);
  add("model.layers.0.mlp.up_proj" + c.scale_suffix, c.scale_dtype, b.scale_shape, b.scale);
  if (!c.extra_suffix.empty()) add("model.layers.0.mlp.up_proj" + c.extra_suffix, "F32", {}, {0, 0, 0x80, 0x3F});
  header += "}";
  test::write_file(dir + "/model.safetensors", test::make_safetensors(header, payload));
  return b;
}

float scale_at(const Case& c, const Built& b, uint64_t i, uint64_t j) {
  const uint64_t sc = (c.cols + c.bn - 1) / c.bn;
  uint64_t k = 0;
  switch (c.grid) {
    case Grid::block:
    case Grid::block4d: k = (i / c.bm) * sc + j / c.bn; break;
    case Grid::channel_2d:
    case Grid::channel_1d: k = i; break;
    default: k = 0; break;
  }
  if (c.scale_dtype == "F32") {
    float f;
    std::memcpy(&f, &b.scale[4 * k], 4);
    return f;
  }
  if (c.scale_dtype == "BF16") return ref_bf16_value(static_cast<uint16_t>(b.scale[2 * k] | b.scale[2 * k + 1] << 8));
  if (c.scale_dtype == "F16") return ref_f16(static_cast<uint16_t>(b.scale[2 * k] | b.scale[2 * k + 1] << 8));
  return std::ldexp(1.0f, static_cast<int>(b.scale[k]) - 127);
}

const std::string kBlock = R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]})";
const std::string kBlockQwen = R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]})";
const std::string kUe8m0 = R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "scale_fmt": "ue8m0", "weight_block_size": [128, 128]})";
const std::string kMxfp8 = R"({"quant_method": "mxfp8", "weight_block_size": [1, 32], "scale_fmt": "ue8m0"})";
std::string ct(const std::string& strategy, const std::string& block = "") {
  return R"({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": ")" +
         strategy + "\"" + (block.empty() ? "" : ", \"block_structure\": " + block) + R"(}, "input_activations": null}}, "ignore": ["lm_head"]})";
}
std::string modelopt(const std::string& algo) {
  return R"({"quant_method": "modelopt", "quant_algo": ")" + algo + R"(", "exclude_modules": ["lm_head"]})";
}
const std::string kMistral = R"({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": null})";

std::vector<Case> cases() {
  return {
      {"dsv3_f32_ragged", kBlock, ".weight_scale_inv", "F32", Grid::block, 192, 256, 128, 128, "", "fp8-block"},
      {"qwen_bf16_ragged", kBlockQwen, ".weight_scale_inv", "BF16", Grid::block, 200, 130, 128, 128, "", "fp8-block"},
      {"qwen_f16", kBlockQwen, ".weight_scale_inv", "F16", Grid::block, 256, 384, 128, 128, "", "fp8-block"},
      {"v31_ue8m0_u8", kUe8m0, ".weight_scale_inv", "U8", Grid::block, 130, 260, 128, 128, "", "fp8-block"},
      {"v32_ue8m0_e8m0", kUe8m0, ".weight_scale_inv", "F8_E8M0", Grid::block, 129, 128, 128, 128, "", "fp8-block"},
      {"minimax_mxfp8_u8", kMxfp8, ".weight_scale_inv", "U8", Grid::block, 4, 96, 1, 32, "", "mxfp8"},
      {"ct_block_bf16", ct("block", "[128, 128]"), ".weight_scale", "BF16", Grid::block, 300, 140, 128, 128, ".input_scale", "compressed-tensors-fp8"},
      {"ct_channel_f32", ct("channel"), ".weight_scale", "F32", Grid::channel_2d, 24, 40, 1, 40, ".input_scale", "compressed-tensors-fp8"},
      {"ct_tensor_f16", ct("tensor"), ".weight_scale", "F16", Grid::scalar, 8, 16, 8, 16, ".input_scale", "compressed-tensors-fp8"},
      {"modelopt_scalar", modelopt("FP8"), ".weight_scale", "F32", Grid::scalar, 16, 32, 16, 32, ".input_scale", "modelopt-fp8"},
      {"modelopt_channel", modelopt("FP8_PER_CHANNEL_PER_TOKEN"), ".weight_scale", "F32", Grid::channel_1d, 12, 32, 1, 32, ".input_scale", "modelopt-fp8"},
      {"modelopt_pb_wo_4d", modelopt("FP8_PB_WO"), ".weight_scale", "F32", Grid::block4d, 200, 300, 128, 128, ".input_scale", "modelopt-fp8"},
      {"mistral_per_tensor", kMistral, ".weight_scale_inv", "BF16", Grid::scalar, 10, 20, 10, 20, ".activation_scale", "fp8-tensor"},
      {"mistral_per_tensor_1", kMistral, ".weight_scale_inv", "F32", Grid::scalar_1, 10, 20, 10, 20, ".activation_scale", "fp8-tensor"},
  };
}

TEST(QuantProfiles, EveryEmbeddedProfileParsesAndIsNamed) {
  const auto names = quant_profile_names();
  for (const char* want : {"compressed-tensors-fp8", "deepseek-v4", "fp8-block", "fp8-tensor", "modelopt-fp8", "mxfp4", "mxfp8"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  for (const auto& p : embedded_quant_profiles()) {
    JsonDoc doc;
    std::string error;
    EXPECT_TRUE(doc.parse(p.json, error)) << p.name << ": " << error;
    EXPECT_EQ(json_string(doc.root(), "name"), p.name);
  }
}

TEST(QuantProfiles, EveryTableRowConvertsToTheExactProductElementByElement) {
  std::mt19937 rng(7);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    test::TempDir tmp;
    const std::string in = tmp.str("in"), out = tmp.str("out");
    const Built b = write_case(in, c, rng);
    ValidationReport v = validate_path(in, ValidateOptions{});
    EXPECT_FALSE(v.findings.has_errors()) << describe(v.findings);
    EXPECT_EQ(v.quant_profile, c.want_profile);
    ConvertOptions o;
    o.input = in;
    o.output = out;
    o.experts = ExpertMode::bf16;
    ConvertReport r = convert_checkpoint(o);
    ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
    EXPECT_EQ(r.plan.quant_profile, c.want_profile);
    auto m = test::load_model_checked(out);
    EXPECT_EQ(m->view.tensors.size(), 2u) << "scale and activation scale dropped";
    EXPECT_EQ(m->view.find("model.layers.0.mlp.up_proj" + c.scale_suffix), nullptr);
    const auto got = test::tensor_bytes(*m, "model.layers.0.mlp.up_proj.weight");
    ASSERT_EQ(got.size(), 2 * c.rows * c.cols);
    uint64_t bad = 0;
    for (uint64_t i = 0; i < c.rows; ++i)
      for (uint64_t j = 0; j < c.cols; ++j) {
        const uint64_t k = i * c.cols + j;
        const float product = ref_e4m3(b.codes[k]) * scale_at(c, b, i, j);  // one binary32 multiply
        const uint16_t want = ref_bf16(product);
        const uint16_t have = static_cast<uint16_t>(got[2 * k] | got[2 * k + 1] << 8);
        if (want != have && bad++ < 3) ADD_FAILURE() << "element (" << i << ", " << j << "): " << have << " != " << want;
      }
    EXPECT_EQ(bad, 0u);
    JsonDoc cfg;
    std::string error;
    ASSERT_TRUE(cfg.parse(test::read_text(out + "/config.json"), error));
    EXPECT_FALSE(json_get(cfg.root(), "quantization_config").has_value());
    ValidateOptions deep;
    deep.deep = true;
    deep.reference = in;
    ValidationReport ref = validate_path(out, deep);
    EXPECT_FALSE(ref.findings.has_errors()) << describe(ref.findings);
  }
}

struct Refusal {
  std::string name, quant_config, weight_dtype, scale_name, scale_dtype;
  std::vector<uint64_t> scale_shape;
  std::string code;
  bool with_weight = true;
};

TEST(QuantProfiles, EveryRefusalIsAnErrorNamingTheTensor) {
  const Refusal refusals[] = {
      {"weight without scale", kBlock, "F8_E4M3", "", "", {}, "FP8_UNPAIRED"},
      {"scale without weight", kBlock, "BF16", "model.layers.0.mlp.gate_proj.weight_scale_inv", "F32", {1, 1}, "SCALE_STRAY"},
      {"ct scale without weight", ct("tensor"), "F8_E4M3", "model.layers.0.mlp.gate_proj.weight_scale", "F32", {}, "SCALE_STRAY"},
      {"U8 scale without E8M0 config", kBlock, "F8_E4M3", "model.layers.0.mlp.up_proj.weight_scale_inv", "U8", {1, 1}, "SCALE_DTYPE"},
      {"unknown quant_method", R"({"quant_method": "awq", "bits": 4})", "F8_E4M3", "model.layers.0.mlp.up_proj.weight_scale_inv", "F32", {1, 1}, "QUANT_PROFILE_UNKNOWN"},
      {"unknown compressed-tensors format", R"({"quant_method": "compressed-tensors", "format": "pack-quantized"})", "F8_E4M3", "model.layers.0.mlp.up_proj.weight_scale", "F32", {}, "QUANT_PROFILE_UNKNOWN"},
      {"unknown modelopt algo", modelopt("NVFP4"), "F8_E4M3", "model.layers.0.mlp.up_proj.weight_scale", "F32", {}, "QUANT_PROFILE_UNKNOWN"},
      {"int8 weight with scale", kBlock, "I8", "model.layers.0.mlp.up_proj.weight_scale_inv", "F32", {1, 1}, "QUANT_WEIGHT_DTYPE"},
      {"uint8 weight with scale", kBlock, "U8", "model.layers.0.mlp.up_proj.weight_scale_inv", "F32", {1, 1}, "QUANT_WEIGHT_DTYPE"},
      {"bool weight with scale", kBlock, "BOOL", "model.layers.0.mlp.up_proj.weight_scale_inv", "F32", {1, 1}, "QUANT_WEIGHT_DTYPE"},
      {"grid not matching", kBlock, "F8_E4M3", "model.layers.0.mlp.up_proj.weight_scale_inv", "F32", {1, 2}, "SCALE_GRID_MISMATCH"},
      {"4-D grid as 2-D", modelopt("FP8_PB_WO"), "F8_E4M3", "model.layers.0.mlp.up_proj.weight_scale", "F32", {1, 1}, "SCALE_GRID_MISMATCH"},
      {"channel scale of the wrong length", ct("channel"), "F8_E4M3", "model.layers.0.mlp.up_proj.weight_scale", "F32", {3, 1}, "SCALE_GRID_MISMATCH"},
      {"F32 scale where mxfp8 needs E8M0", kMxfp8, "F8_E4M3", "model.layers.0.mlp.up_proj.weight_scale_inv", "F32", {4, 1}, "SCALE_DTYPE"},
  };
  for (const Refusal& x : refusals) {
    SCOPED_TRACE(x.name);
    test::TempDir tmp;
    const std::string in = tmp.str("in");
    std::filesystem::create_directories(in);
    test::write_text(in + "/config.json", R"({"model_type": "llama", "quantization_config": )" + x.quant_config + "}\n");
    std::string header = "{\"model.layers.0.mlp.up_proj.weight\":{\"dtype\":\"" + x.weight_dtype +
                         "\",\"shape\":[4,32],\"data_offsets\":[0," + std::to_string(x.weight_dtype == "BF16" ? 256 : 128) + "]}";
    std::vector<uint8_t> payload(x.weight_dtype == "BF16" ? 256 : 128, 0x01);
    if (!x.scale_name.empty()) {
      uint64_t n = 1;
      for (uint64_t d : x.scale_shape) n *= d;
      const uint64_t esz = x.scale_dtype == "F32" ? 4 : 1;
      header += ",\"" + x.scale_name + "\":{\"dtype\":\"" + x.scale_dtype + "\",\"shape\":" + shape_json(x.scale_shape) +
                ",\"data_offsets\":[" + std::to_string(payload.size()) + "," + std::to_string(payload.size() + n * esz) + "]}";
      for (uint64_t i = 0; i < n * esz; ++i) payload.push_back(esz == 4 ? (i % 4 == 3 ? 0x3F : 0x00) : 127);
    }
    header += "}";
    test::write_file(in + "/model.safetensors", test::make_safetensors(header, payload));
    ConvertOptions o;
    o.input = in;
    o.output = tmp.str("out");
    o.experts = ExpertMode::bf16;
    ConvertReport r = convert_checkpoint(o);
    EXPECT_NE(r.status, ConvertStatus::ok);
    bool found = false;
    for (const auto& f : r.findings.items())
      if (f.code == x.code && f.severity == Severity::error) {
        found = true;
        if (x.code != "QUANT_PROFILE_UNKNOWN") {
          EXPECT_FALSE(f.tensor.empty()) << f.message;
        }
      }
    EXPECT_TRUE(found) << describe(r.findings);
    EXPECT_FALSE(std::filesystem::exists(tmp.str("out") + "/model.safetensors"));
    ValidationReport v = validate_path(in, ValidateOptions{});
    EXPECT_TRUE(v.findings.has_errors()) << "validate refuses it too";
  }
}

}  // namespace
}  // namespace ckpt
