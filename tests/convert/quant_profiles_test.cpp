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

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "convert/convert.h"
#include "formats/checkpoint.h"
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
  // An empty quant_config: no quantization_config (a side file such as hf_quant_config.json says it).
  test::write_text(dir + "/config.json",
                   R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16")" +
                       (c.quant_config.empty() ? std::string() : R"(, "quantization_config": )" + c.quant_config) + "}\n");
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

// OUT of converting `in` (write_case) with --experts bf16: the weight equals the element-wise
// reference, the scales are gone, config.json has no quantization_config, and
// validate --reference --deep of OUT against IN passes.
void expect_exact_bf16_output(const Case& c, const Built& b, const std::string& in, const std::string& out,
                              const std::string& shard = "", const std::string& config = "config.json") {
  auto m = test::load_model_checked(out);
  if (!shard.empty()) {
    ASSERT_EQ(m->view.files.size(), 1u);
    EXPECT_EQ(m->view.files[0], shard);
  }
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
  ASSERT_TRUE(cfg.parse(test::read_text(out + "/" + config), error));
  if (config == "config.json") {
    EXPECT_FALSE(json_get(cfg.root(), "quantization_config").has_value());
    EXPECT_EQ(json_string(cfg.root(), "torch_dtype"), "bfloat16");
  } else {
    EXPECT_FALSE(json_get(cfg.root(), "quantization").has_value());
    EXPECT_FALSE(std::filesystem::exists(out + "/config.json")) << "the native layout stays native";
  }
  EXPECT_TRUE(json_get(cfg.root(), "ckptkit_conversion").has_value()) << "the conversion is recorded";
  ValidateOptions deep;
  deep.deep = true;
  deep.reference = in;
  ValidationReport ref = validate_path(out, deep);
  EXPECT_FALSE(ref.findings.has_errors()) << describe(ref.findings);
}

TEST(QuantProfiles, EveryEmbeddedProfileParsesAndIsNamed) {
  const auto names = quant_profile_names();
  for (const char* want : {"compressed-tensors-fp8", "deepseek-v4", "fp8-block", "fp8-tensor", "mistral-native-fp8", "modelopt-fp8",
                           "mxfp4", "mxfp8"})
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
    expect_exact_bf16_output(c, b, in, out);
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

// ---- NVIDIA ModelOpt hf_quant_config.json (no quantization_config in config.json) ----------

std::string hf_quant_config(const std::string& algo, const std::string& exclude = R"(["lm_head"])",
                            const std::string& producer = "modelopt") {
  return R"({"producer": {"name": ")" + producer + R"(", "version": "0.29.0"}, "quantization": {"quant_algo": ")" +
         algo + R"(", "kv_cache_quant_algo": null, "exclude_modules": )" + exclude + "}}\n";
}

struct HfRow {
  Case c;
  std::string algo;
};

std::vector<HfRow> hf_rows() {
  return {
      {{"hf_modelopt_scalar", "", ".weight_scale", "F32", Grid::scalar, 16, 32, 16, 32, ".input_scale", "modelopt-fp8"}, "FP8"},
      {{"hf_modelopt_channel", "", ".weight_scale", "F32", Grid::channel_1d, 12, 32, 1, 32, ".input_scale", "modelopt-fp8"},
       "FP8_PER_CHANNEL_PER_TOKEN"},
      {{"hf_modelopt_pb_wo_4d", "", ".weight_scale", "F32", Grid::block4d, 200, 300, 128, 128, ".input_scale", "modelopt-fp8"},
       "FP8_PB_WO"},
  };
}

// Scalar, per-channel [out] and 4-D [out_blk, 1, in_blk, 1] F32 scales selected by
// hf_quant_config.json alone: validate names the profile and the file, convert equals the
// element-wise reference and leaves hf_quant_config.json out; without the file the same
// tensors are refused (the file is what selects the profile).
TEST(QuantProfiles, ModelOptHfQuantConfigJsonSelectsTheProfileForEveryScaleLayout) {
  std::mt19937 rng(11);
  for (const HfRow& row : hf_rows()) {
    const Case& c = row.c;
    SCOPED_TRACE(c.name);
    test::TempDir tmp;
    const std::string in = tmp.str("in"), out = tmp.str("out");
    const Built b = write_case(in, c, rng);
    test::write_text(in + "/hf_quant_config.json", hf_quant_config(row.algo));
    ValidationReport v = validate_path(in, ValidateOptions{});
    EXPECT_FALSE(v.findings.has_errors()) << describe(v.findings);
    EXPECT_EQ(v.quant_profile, "modelopt-fp8");
    EXPECT_EQ(v.quant_config_file, "hf_quant_config.json");
    ConvertOptions o;
    o.input = in;
    o.output = out;
    o.experts = ExpertMode::bf16;
    ConvertReport r = convert_checkpoint(o);
    ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
    EXPECT_EQ(r.plan.quant_profile, "modelopt-fp8");
    EXPECT_EQ(r.plan.dropped_side_files, std::vector<std::string>{"hf_quant_config.json"});
    EXPECT_EQ(std::count(r.plan.side_files.begin(), r.plan.side_files.end(), "hf_quant_config.json"), 0);
    EXPECT_FALSE(std::filesystem::exists(out + "/hf_quant_config.json")) << "its quantization is gone";
    expect_exact_bf16_output(c, b, in, out);
    ValidationReport vo = validate_path(out, ValidateOptions{});
    EXPECT_FALSE(vo.findings.has_errors()) << describe(vo.findings);
    EXPECT_EQ(vo.quant_profile, "") << "the output is a plain BF16 checkpoint";
    // validate --reference catches an output that carries hf_quant_config.json after all.
    std::filesystem::copy_file(in + "/hf_quant_config.json", out + "/hf_quant_config.json");
    ValidateOptions ref;
    ref.reference = in;
    ValidationReport stale = validate_path(out, ref);
    EXPECT_NE(describe(stale.findings).find("hf_quant_config.json is in the output although its quantization is gone"),
              std::string::npos)
        << describe(stale.findings);

    std::filesystem::remove(in + "/hf_quant_config.json");
    ConvertOptions again = o;
    again.output = tmp.str("out2");
    ConvertReport without = convert_checkpoint(again);
    EXPECT_NE(without.status, ConvertStatus::ok) << "without hf_quant_config.json weight_scale pairs with nothing";
  }
}

// config.json's quantization_config and hf_quant_config.json both present and agreeing: the
// profile is read from both; the side file still does not reach the output.
TEST(QuantProfiles, ModelOptConfigAndHfQuantConfigThatAgreeConvert) {
  std::mt19937 rng(12);
  Case c = hf_rows()[2].c;
  c.quant_config = modelopt("FP8_PB_WO");
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  const Built b = write_case(in, c, rng);
  test::write_text(in + "/hf_quant_config.json", hf_quant_config("FP8_PB_WO"));
  ValidationReport v = validate_path(in, ValidateOptions{});
  EXPECT_FALSE(v.findings.has_errors()) << describe(v.findings);
  EXPECT_EQ(v.quant_config_file, "config.json and hf_quant_config.json");
  ConvertOptions o;
  o.input = in;
  o.output = out;
  o.experts = ExpertMode::bf16;
  ConvertReport r = convert_checkpoint(o);
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  EXPECT_FALSE(std::filesystem::exists(out + "/hf_quant_config.json"));
  expect_exact_bf16_output(c, b, in, out);
}

// The exclusion list (modules left unquantized) holds against the tensors: an FP8 weight in a
// listed module is an error naming the tensor and where the list was read, whether the list is
// hf_quant_config.json's quantization.exclude_modules or config.json's exclude_modules.
TEST(QuantProfiles, ModelOptExcludeModulesAreHonouredFromEitherFile) {
  struct X {
    std::string exclude;
    bool excluded;
  };
  const X lists[] = {
      {R"(["lm_head", "model.layers.0.mlp.up_proj"])", true},
      {R"(["model.layers.*.mlp.up_proj"])", true},
      {R"(["*up_proj*"])", true},
      {R"(["mlp.up_proj"])", true},
      {R"(["model.layers.0.mlp.up"])", false},  // a prefix of a component is not that module
      {R"(["model.layers.1.mlp.up_proj", "lm_head"])", false},
  };
  std::mt19937 rng(13);
  for (const bool in_hf_file : {true, false})
    for (const X& x : lists) {
      SCOPED_TRACE(x.exclude + (in_hf_file ? " in hf_quant_config.json" : " in config.json"));
      test::TempDir tmp;
      Case c = hf_rows()[0].c;
      if (!in_hf_file)
        c.quant_config = R"({"quant_method": "modelopt", "quant_algo": "FP8", "exclude_modules": )" + x.exclude + "}";
      write_case(tmp.str("in"), c, rng);
      if (in_hf_file) test::write_text(tmp.str("in/hf_quant_config.json"), hf_quant_config("FP8", x.exclude));
      ValidationReport v = validate_path(tmp.str("in"), ValidateOptions{});
      const Finding* f = nullptr;
      for (const auto& item : v.findings.items())
        if (item.code == "QUANT_EXCLUDED_MODULE") f = &item;
      if (!x.excluded) {
        EXPECT_FALSE(v.findings.has_errors()) << describe(v.findings);
        continue;
      }
      ASSERT_NE(f, nullptr) << describe(v.findings);
      EXPECT_EQ(f->severity, Severity::error);
      EXPECT_EQ(f->tensor, "model.layers.0.mlp.up_proj.weight");
      EXPECT_NE(f->message.find(in_hf_file ? "hf_quant_config.json quantization.exclude_modules"
                                           : "quantization_config.exclude_modules"),
                std::string::npos)
          << f->message;
      ConvertOptions o;
      o.input = tmp.str("in");
      o.output = tmp.str("out");
      o.experts = ExpertMode::bf16;
      EXPECT_NE(convert_checkpoint(o).status, ConvertStatus::ok);
      EXPECT_FALSE(std::filesystem::exists(tmp.str("out/model.safetensors")));
    }
}

// Every refusal of hf_quant_config.json: disagreement with config.json (named to both files),
// an unknown quant_algo or producer (named to the file and the value), and hostile files (not
// JSON, too deep, too large, not an object, a FIFO, a link leading outside). Convert writes
// nothing and validate fails.
TEST(QuantProfiles, HfQuantConfigJsonRefusals) {
  struct R {
    std::string name, config_qc, hf;  // hf: the file's text; "FIFO", "LINK", "SPARSE" = hostile kinds
    std::string code, file, needle;
  };
  std::string deep;
  for (int i = 0; i < 300; ++i) deep += "[";
  for (int i = 0; i < 300; ++i) deep += "]";
  const R refusals[] = {
      {"algo disagrees", modelopt("FP8"), hf_quant_config("FP8_PB_WO"), "QUANT_CONFIG_CONFLICT",
       "config.json and hf_quant_config.json",
       R"(config.json quantization_config.quant_algo is "FP8" but hf_quant_config.json quantization.quant_algo is "FP8_PB_WO")"},
      {"exclusions disagree", modelopt("FP8"), hf_quant_config("FP8", R"(["lm_head", "model.embed_tokens"])"),
       "QUANT_CONFIG_CONFLICT", "config.json and hf_quant_config.json", "exclude_modules"},
      {"another profile in config.json", kBlock, hf_quant_config("FP8"), "QUANT_CONFIG_CONFLICT",
       "config.json and hf_quant_config.json", "selects profile fp8-block but hf_quant_config.json selects modelopt-fp8"},
      {"NVFP4", "", hf_quant_config("NVFP4"), "QUANT_PROFILE_UNKNOWN", "hf_quant_config.json",
       R"(hf_quant_config.json quantization.quant_algo is "NVFP4")"},
      {"W4A8_AWQ", "", hf_quant_config("W4A8_AWQ"), "QUANT_PROFILE_UNKNOWN", "hf_quant_config.json",
       R"(hf_quant_config.json quantization.quant_algo is "W4A8_AWQ")"},
      {"unknown producer", "", hf_quant_config("FP8", R"([])", "someone-else"), "QUANT_PROFILE_UNKNOWN",
       "hf_quant_config.json", R"(producer.name is "someone-else")"},
      {"not JSON", "", "{\"producer\": ", "SIDE_FILE_JSON", "hf_quant_config.json", "not valid JSON"},
      {"too deep", "", deep, "SIDE_FILE_JSON", "hf_quant_config.json", "too deep"},
      {"not an object", "", "[1, 2]", "SIDE_FILE_JSON", "hf_quant_config.json", "not a JSON object"},
      {"too large", "", "SPARSE", "FILE_TOO_LARGE", "hf_quant_config.json", ""},
      {"FIFO", "", "FIFO", "IO_NOT_REGULAR", "hf_quant_config.json", ""},
      {"link outside", "", "LINK", "LINK_ESCAPE", "hf_quant_config.json", ""},
  };
  std::mt19937 rng(14);
  for (const R& x : refusals) {
    SCOPED_TRACE(x.name);
    test::TempDir tmp;
    Case c = hf_rows()[0].c;
    c.quant_config = x.config_qc;
    const std::string in = tmp.str("in"), file = in + "/hf_quant_config.json";
    write_case(in, c, rng);
    if (x.hf == "FIFO") {
      ASSERT_EQ(mkfifo(file.c_str(), 0600), 0);
    } else if (x.hf == "LINK") {
      test::write_text(tmp.str("secret.json"), hf_quant_config("FP8"));
      std::filesystem::create_symlink(tmp.str("secret.json"), file);
    } else if (x.hf == "SPARSE") {
      test::write_text(file, "{}");
      std::filesystem::resize_file(file, kMaxSideJsonBytes + 1);  // sparse: no disk used
    } else {
      test::write_text(file, x.hf);
    }
    ValidationReport v = validate_path(in, ValidateOptions{});
    EXPECT_TRUE(v.findings.has_errors());
    bool found = false;
    for (const auto& f : v.findings.items())
      if (f.code == x.code && f.severity == Severity::error && f.file == x.file &&
          f.message.find(x.needle) != std::string::npos)
        found = true;
    EXPECT_TRUE(found) << describe(v.findings);
    ConvertOptions o;
    o.input = in;
    o.output = tmp.str("out");
    o.experts = ExpertMode::bf16;
    ConvertReport r = convert_checkpoint(o);
    EXPECT_NE(r.status, ConvertStatus::ok) << describe(r.findings);
    EXPECT_FALSE(std::filesystem::exists(tmp.str("out/model.safetensors")));
  }
}

// validate and inspect name `profile` as read from `file`, and so does convert --dry-run,
// which lists a converted weight; returns the dry run's output.
std::string expect_profile_named(const std::string& in, const std::string& out, const std::string& profile,
                                 const std::string& file) {
  auto v = test::run_ckpt("validate " + test::shell_quote(in));
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("quantization profile " + profile + " (from " + file + ")"), std::string::npos) << v.out;
  auto i = test::run_ckpt("inspect " + test::shell_quote(in));
  EXPECT_NE(i.out.find("quantization  " + profile + " (from " + file + ")"), std::string::npos) << i.out;
  auto d = test::run_ckpt("convert --dry-run --experts bf16 " + test::shell_quote(in) + " " + test::shell_quote(out));
  EXPECT_EQ(d.exit_code, 0) << d.out << d.err;
  EXPECT_NE(d.out.find("quantization profile " + profile + " (schemas/quant/" + profile + ".json, read from " + file + ")"),
            std::string::npos)
      << d.out;
  EXPECT_NE(d.out.find("model.layers.0.mlp.up_proj.weight"), std::string::npos) << d.out;
  return d.out;
}

// The command line: validate and inspect name the profile and the file, --dry-run names the
// profile, the file and that hf_quant_config.json is not copied.
TEST(QuantProfiles, ModelOptHfQuantConfigIsShownByValidateInspectAndDryRun) {
  std::mt19937 rng(15);
  test::TempDir tmp;
  const std::string in = tmp.str("in");
  write_case(in, hf_rows()[1].c, rng);
  test::write_text(in + "/hf_quant_config.json", hf_quant_config("FP8_PER_CHANNEL_PER_TOKEN"));
  const std::string dry = expect_profile_named(in, tmp.str("out"), "modelopt-fp8", "hf_quant_config.json");
  EXPECT_NE(dry.find("hf_quant_config.json not copied"), std::string::npos) << dry;
  auto j = test::run_ckpt("convert --dry-run --experts bf16 --json - " + test::shell_quote(in) + " " +
                          test::shell_quote(tmp.str("out")));
  EXPECT_NE(j.out.find(R"("dropped_side_files":["hf_quant_config.json"])"), std::string::npos) << j.out;
}

// ---- Mistral native layout: params.json + consolidated.safetensors -------------------------

const std::string kParamsFp8 =
    R"({"dim": 32, "n_layers": 1, "head_dim": 8, "hidden_dim": 64, "n_heads": 4, "n_kv_heads": 2, "norm_eps": 1e-05, )"
    R"("vocab_size": 128, "rope_theta": 1000000.0, "quantization": {"qformat_weight": "fp8_e4m3", "qscheme_act": "TENSOR"}})";

// A native checkpoint from write_case: params.json instead of config.json, the shard renamed.
Built write_native(const std::string& dir, const Case& c, std::mt19937& rng, const std::string& params,
                   const std::string& shard = "consolidated.safetensors") {
  Built b = write_case(dir, c, rng);
  std::filesystem::remove(dir + "/config.json");
  std::filesystem::rename(dir + "/model.safetensors", dir + "/" + shard);
  test::write_text(dir + "/params.json", params + "\n");
  return b;
}

std::vector<Case> native_cases() {
  return {
      {"native_f32_scalar", "", ".qscale_weight", "F32", Grid::scalar, 24, 40, 24, 40, ".qscale_act", "mistral-native-fp8"},
      {"native_bf16_scalar", "", ".qscale_weight", "BF16", Grid::scalar, 16, 64, 16, 64, ".qscale_act", "mistral-native-fp8"},
      {"native_f32_one", "", ".qscale_weight", "F32", Grid::scalar_1, 8, 32, 8, 32, ".qscale_act", "mistral-native-fp8"},
  };
}

// params.json's quantization section selects the profile; X.qscale_weight is X.weight's
// per-tensor multiplier, X.qscale_act is dropped; the output keeps the native names and
// layout, its params.json has no quantization section and records the conversion.
TEST(QuantProfiles, MistralNativeParamsJsonConvertsToBf16InTheNativeLayout) {
  std::mt19937 rng(21);
  for (const Case& c : native_cases()) {
    SCOPED_TRACE(c.name);
    test::TempDir tmp;
    const std::string in = tmp.str("in"), out = tmp.str("out");
    const Built b = write_native(in, c, rng, kParamsFp8);
    ValidationReport v = validate_path(in, ValidateOptions{});
    EXPECT_FALSE(v.findings.has_errors()) << describe(v.findings);
    EXPECT_EQ(v.findings.count(Severity::warning), 0u) << describe(v.findings);  // no CFG_MISSING
    EXPECT_EQ(v.quant_profile, "mistral-native-fp8");
    EXPECT_EQ(v.quant_config_file, "params.json");
    ConvertOptions o;
    o.input = in;
    o.output = out;
    o.experts = ExpertMode::bf16;
    ConvertReport r = convert_checkpoint(o);
    ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
    EXPECT_EQ(r.plan.quant_profile, "mistral-native-fp8");
    EXPECT_TRUE(r.plan.rewrites_params_json);
    expect_exact_bf16_output(c, b, in, out, "consolidated.safetensors", "params.json");
    JsonDoc params;
    std::string error;
    ASSERT_TRUE(params.parse(test::read_text(out + "/params.json"), error));
    EXPECT_EQ(json_int(params.root(), "dim"), 32) << "every other key kept";
    EXPECT_TRUE(json_get(params.root(), "rope_theta").has_value());
    ValidationReport vo = validate_path(out, ValidateOptions{});
    EXPECT_FALSE(vo.findings.has_errors()) << describe(vo.findings);
    EXPECT_EQ(vo.quant_profile, "") << "the output is plain BF16";
    // validate --reference catches a params.json that kept its quantization section.
    std::filesystem::copy_file(in + "/params.json", out + "/params.json", std::filesystem::copy_options::overwrite_existing);
    ValidateOptions ref;
    ref.reference = in;
    ValidationReport stale = validate_path(out, ref);
    EXPECT_NE(describe(stale.findings).find("params.json still has its quantization section"), std::string::npos)
        << describe(stale.findings);
  }
}

// consolidated-0000i-of-0000N shards are the native set's names: no SHARD_NAME_PATTERN
// warning, and a missing one is named in that pattern.
TEST(QuantProfiles, MistralNativeConsolidatedShardNamesAreASet) {
  std::mt19937 rng(22);
  test::TempDir tmp;
  const std::string in = tmp.str("in");
  write_native(in, native_cases()[0], rng, kParamsFp8, "consolidated-00001-of-00002.safetensors");
  test::write_file(in + "/consolidated-00002-of-00002.safetensors",
                   test::make_safetensors(R"({"output.weight":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})",
                                          std::vector<uint8_t>(4, 0x3F)));
  ValidationReport v = validate_path(in, ValidateOptions{});
  EXPECT_FALSE(v.findings.has_errors()) << describe(v.findings);
  for (const auto& f : v.findings.items()) EXPECT_NE(f.code, "SHARD_NAME_PATTERN") << f.message;
  ConvertOptions o;
  o.input = in;
  o.output = tmp.str("out");
  o.experts = ExpertMode::bf16;
  ConvertReport r = convert_checkpoint(o);
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  EXPECT_TRUE(std::filesystem::exists(tmp.str("out/consolidated-00001-of-00002.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(tmp.str("out/consolidated-00002-of-00002.safetensors")));
  std::filesystem::remove(in + "/consolidated-00002-of-00002.safetensors");
  std::filesystem::rename(in + "/consolidated-00001-of-00002.safetensors", in + "/consolidated-00001-of-00003.safetensors");
  test::write_file(in + "/consolidated-00002-of-00003.safetensors",
                   test::make_safetensors(R"({"output.weight":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})",
                                          std::vector<uint8_t>(4, 0x3F)));
  v = validate_path(in, ValidateOptions{});
  EXPECT_NE(describe(v.findings).find("consolidated-00003-of-00003.safetensors"), std::string::npos) << describe(v.findings);
}

// An unknown quantization section is refused naming params.json and the value; a params.json
// without one leaves FP8 weights with qscale_weight unpaired (never guessed).
TEST(QuantProfiles, MistralNativeRefusals) {
  struct R {
    std::string name, params, code, file, needle;
  };
  const R refusals[] = {
      {"unknown qformat", R"({"dim": 32, "quantization": {"qformat_weight": "int4_awq"}})", "QUANT_PROFILE_UNKNOWN",
       "params.json", R"(quantization is {"qformat_weight":"int4_awq"})"},
      {"no quantization section", R"({"dim": 32})", "FP8_UNPAIRED", "consolidated.safetensors",
       "model.layers.0.mlp.up_proj.weight"},
      {"params.json not JSON", R"({"dim": )", "SIDE_FILE_JSON", "params.json", "not valid JSON"},
  };
  std::mt19937 rng(23);
  for (const R& x : refusals) {
    SCOPED_TRACE(x.name);
    test::TempDir tmp;
    const std::string in = tmp.str("in");
    write_native(in, native_cases()[0], rng, x.params);
    ValidationReport v = validate_path(in, ValidateOptions{});
    bool found = false;
    for (const auto& f : v.findings.items())
      if (f.code == x.code && f.severity == Severity::error && f.file == x.file &&
          (f.message.find(x.needle) != std::string::npos || f.tensor == x.needle))
        found = true;
    EXPECT_TRUE(found) << describe(v.findings);
    ConvertOptions o;
    o.input = in;
    o.output = tmp.str("out");
    o.experts = ExpertMode::bf16;
    EXPECT_NE(convert_checkpoint(o).status, ConvertStatus::ok);
    EXPECT_FALSE(std::filesystem::exists(tmp.str("out/consolidated.safetensors")));
  }
}

TEST(QuantProfiles, MistralNativeIsShownByValidateInspectAndDryRun) {
  std::mt19937 rng(24);
  test::TempDir tmp;
  const std::string in = tmp.str("in");
  write_native(in, native_cases()[1], rng, kParamsFp8);
  expect_profile_named(in, tmp.str("out"), "mistral-native-fp8", "params.json");
}

}  // namespace
}  // namespace ckpt
