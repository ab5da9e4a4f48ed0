// Other model families (tests/fixtures/families/, written by transformers 5.17): validate
// passes, `convert --experts bf16` writes exactly the names and shapes of the family's BF16
// release (report.json bf16_saved_keys), every tensor equals what transformers itself builds
// with dequantize=True (ref-transformers/state_dict.safetensors; fused experts against the
// per-expert tensors concatenated), and every dequantized tensor equals an independent
// element-by-element computation of the exact arithmetic. Where transformers misplaces a
// ragged grid (dsv3-fp8 q_a_proj [192, 256], scale [2, 2]) only the exact arithmetic holds.
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "convert/convert.h"
#include "formats/json.h"
#include "model/tensor_values.h"
#include "test_util.h"
#include "validate/validate.h"

namespace ckpt {
namespace {

using test::describe;
using test::tensor_bytes;

// --- an independent reference: no library decoder ----------------------------------------
float ref_e4m3(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(8 + m), e - 10);
  return (c & 0x80) ? -mag : mag;
}
float ref_e2m1(uint8_t c) {
  static const float mag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  return (c & 8) ? -mag[c & 7] : mag[c & 7];
}
uint16_t ref_bf16(float f) {  // round to nearest, ties to even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lower = u & 0xFFFF, upper = u >> 16;
  if (lower > 0x8000 || (lower == 0x8000 && (upper & 1))) return static_cast<uint16_t>(upper + 1);
  return static_cast<uint16_t>(upper);
}
float ref_scale(const std::string& dtype, const std::vector<uint8_t>& b, uint64_t i) {
  if (dtype == "F32") {
    float f;
    std::memcpy(&f, &b[4 * i], 4);
    return f;
  }
  const uint32_t h = b[2 * i] | b[2 * i + 1] << 8;
  if (dtype == "BF16") {
    const uint32_t u = h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  ADD_FAILURE() << "scale dtype " << dtype;
  return 0;
}
uint16_t u16(const std::vector<uint8_t>& b, uint64_t i) { return static_cast<uint16_t>(b[2 * i] | b[2 * i + 1] << 8); }

// bf16_rne(fp32(e4m3) * fp32(scale)) for every element, block 128 x 128 on the ceil grid.
std::vector<uint16_t> exact_fp8(const LoadedModel& in, const ModelTensor& w, const ModelTensor& s) {
  const auto wb = tensor_bytes(in, w), sb = tensor_bytes(in, s);
  const uint64_t rows = w.shape[0], cols = w.shape[1], scols = (cols + 127) / 128;
  std::vector<uint16_t> out(rows * cols);
  for (uint64_t i = 0; i < rows; ++i)
    for (uint64_t j = 0; j < cols; ++j) {
      const float scale = ref_scale(s.type, sb, (i / 128) * scols + j / 128);
      const float product = ref_e4m3(wb[i * cols + j]) * scale;
      out[i * cols + j] = ref_bf16(product);
    }
  return out;
}

// gpt-oss: X_blocks [E, R, G, 16] x X_scales [E, R, G] -> [E, K = 32 G, R], element by element.
std::vector<uint16_t> exact_blocks(const LoadedModel& in, const ModelTensor& b, const ModelTensor& s) {
  const auto bb = tensor_bytes(in, b), sb = tensor_bytes(in, s);
  const uint64_t E = b.shape[0], R = b.shape[1], G = b.shape[2], K = 32 * G;
  std::vector<uint16_t> out(E * K * R);
  for (uint64_t e = 0; e < E; ++e)
    for (uint64_t r = 0; r < R; ++r)
      for (uint64_t c = 0; c < K; ++c) {
        const uint8_t byte = bb[((e * R + r) * G + c / 32) * 16 + (c % 32) / 2];
        const uint8_t code = c % 2 == 0 ? byte & 15 : byte >> 4;  // low nibble = even column
        const float v = std::ldexp(ref_e2m1(code), static_cast<int>(sb[(e * R + r) * G + c / 32]) - 127);
        out[(e * K + c) * R + r] = ref_bf16(v);
      }
  return out;
}

std::vector<uint16_t> as_u16(const std::vector<uint8_t>& b) {
  std::vector<uint16_t> v(b.size() / 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = u16(b, i);
  return v;
}

struct Converted {
  test::TempDir tmp;
  std::string in, out;
  ConvertReport report;
};

std::unique_ptr<Converted> convert_family(const std::string& family) {
  auto c = std::make_unique<Converted>();
  c->in = test::fixture("families/" + family + "/in");
  c->out = c->tmp.str("out");
  ConvertOptions o;
  o.input = c->in;
  o.output = c->out;
  o.experts = ExpertMode::bf16;
  c->report = convert_checkpoint(o);
  return c;
}

// The output's names, dtypes and shapes are those save_pretrained writes for the BF16 model.
void expect_bf16_release_layout(const std::string& family, const LoadedModel& out) {
  JsonDoc doc;
  std::string error;
  ASSERT_TRUE(doc.parse(test::read_text(test::fixture("families/" + family + "/report.json")), error)) << error;
  std::map<std::string, std::vector<uint64_t>> want, got;
  simdjson::dom::object keys;
  ASSERT_FALSE(json_get(doc.root(), "bf16_saved_keys")->get_object().get(keys));
  for (auto kv : keys) {
    std::vector<uint64_t> shape;
    simdjson::dom::array entry = kv.value.get_array().value_unsafe();
    simdjson::dom::array dims = entry.at(1).get_array().value_unsafe();
    for (auto d : dims) shape.push_back(static_cast<uint64_t>(d.get_int64().value_unsafe()));
    want[std::string(kv.key)] = shape;
  }
  for (const auto& t : out.view.tensors) {
    EXPECT_EQ(t.type, "BF16") << t.name;
    got[t.name] = t.shape;
  }
  EXPECT_EQ(got, want);
}

void expect_plain_bf16_config(const std::string& out) {
  JsonDoc cfg;
  std::string error;
  ASSERT_TRUE(cfg.parse(test::read_text(out + "/config.json"), error)) << error;
  EXPECT_FALSE(json_get(cfg.root(), "quantization_config").has_value());
  EXPECT_EQ(json_string(cfg.root(), "torch_dtype"), "bfloat16");
  EXPECT_TRUE(json_get(cfg.root(), "ckptkit_conversion").has_value());
}

void expect_validates(const std::string& path) {
  ValidateOptions vo;
  ValidationReport v = validate_path(path, vo);
  EXPECT_FALSE(v.findings.has_errors()) << path << ": " << describe(v.findings);
}

// OUT's bytes of reference parameter `r`: fused experts (gate_up_proj [E, 2I, H], down_proj
// [E, H, I]) are the per-expert tensors concatenated; a parameter transformers keeps in F32
// (e_score_correction_bias) is our BF16 tensor widened (exact).
std::vector<uint8_t> ours_for(const LoadedModel& out, const ModelTensor& r) {
  if (r.name.ends_with(".mlp.experts.gate_up_proj") || r.name.ends_with(".mlp.experts.down_proj")) {
    if (out.view.find(r.name)) return tensor_bytes(out, r.name);  // gpt-oss: fused in the release too
    const std::string prefix = r.name.substr(0, r.name.rfind('.') + 1);
    std::vector<uint8_t> got;
    for (uint64_t e = 0; e < r.shape[0]; ++e)
      for (const char* part : r.name.ends_with("gate_up_proj") ? std::vector<const char*>{"gate_proj", "up_proj"}
                                                               : std::vector<const char*>{"down_proj"}) {
        const auto b = tensor_bytes(out, prefix + std::to_string(e) + "." + part + ".weight");
        got.insert(got.end(), b.begin(), b.end());
      }
    return got;
  }
  const ModelTensor* mine = out.view.find(r.name);
  if (!mine) {
    ADD_FAILURE() << r.name << " not in the output";
    return {};
  }
  EXPECT_EQ(mine->shape, r.shape) << r.name;
  auto b = tensor_bytes(out, *mine);
  if (r.type == "F32" && mine->type == "BF16") {
    std::vector<uint8_t> wide;
    for (size_t i = 0; i + 1 < b.size(); i += 2)
      for (uint8_t x : {uint8_t{0}, uint8_t{0}, b[i], b[i + 1]}) wide.push_back(x);
    return wide;
  }
  return b;
}

TEST(Families, Qwen3MoeFp8ConvertsToTheBf16ReleaseAndEqualsTransformers) {
  expect_validates(test::fixture("families/qwen3moe-fp8/in"));
  auto c = convert_family("qwen3moe-fp8");
  ASSERT_EQ(c->report.status, ConvertStatus::ok) << describe(c->report.findings);
  EXPECT_EQ(c->report.plan.quant_profile, "fp8-block");
  auto in = test::load_model_checked(c->in);
  auto out = test::load_model_checked(c->out);
  auto ref = test::load_model_checked(test::fixture("families/qwen3moe-fp8/ref-transformers/state_dict.safetensors"));
  expect_bf16_release_layout("qwen3moe-fp8", *out);
  expect_plain_bf16_config(c->out);
  expect_validates(c->out);
  // Every FP8 weight: exact arithmetic with its BF16 multiplier, element by element.
  uint64_t fp8 = 0;
  for (const auto& t : in->view.tensors) {
    if (t.type != "F8_E4M3") continue;
    const ModelTensor* s = in->view.find(t.name + "_scale_inv");
    ASSERT_NE(s, nullptr) << t.name;
    EXPECT_EQ(s->type, "BF16") << s->name;
    EXPECT_EQ(as_u16(tensor_bytes(*out, t.name)), exact_fp8(*in, t, *s)) << t.name;
    ++fp8;
  }
  EXPECT_GT(fp8, 20u);
  // Against transformers, tensor for tensor; fused experts = per-expert tensors concatenated.
  for (const auto& r : ref->view.tensors) EXPECT_TRUE(ours_for(*out, r) == tensor_bytes(*ref, r)) << r.name;
}

TEST(Families, Dsv3Fp8EqualsTransformersExceptTheRaggedGridItMisplaces) {
  expect_validates(test::fixture("families/dsv3-fp8/in"));
  auto c = convert_family("dsv3-fp8");
  ASSERT_EQ(c->report.status, ConvertStatus::ok) << describe(c->report.findings);
  EXPECT_EQ(c->report.plan.quant_profile, "fp8-block");
  auto in = test::load_model_checked(c->in);
  auto out = test::load_model_checked(c->out);
  auto ref = test::load_model_checked(test::fixture("families/dsv3-fp8/ref-transformers/state_dict.safetensors"));
  expect_bf16_release_layout("dsv3-fp8", *out);
  expect_plain_bf16_config(c->out);
  expect_validates(c->out);
  std::set<std::string> ragged;
  for (const auto& t : in->view.tensors) {
    if (t.type != "F8_E4M3") continue;
    const ModelTensor* s = in->view.find(t.name + "_scale_inv");
    ASSERT_NE(s, nullptr) << t.name;
    EXPECT_EQ(s->type, "F32") << s->name;
    EXPECT_EQ(as_u16(tensor_bytes(*out, t.name)), exact_fp8(*in, t, *s)) << t.name;
    if (t.shape[0] % 128 != 0 && t.shape[0] / s->shape[0] != 128) ragged.insert(t.name);
  }
  EXPECT_TRUE(ragged.count("model.layers.1.self_attn.q_a_proj.weight")) << "the fixture's ragged grid";
  uint64_t differ = 0;
  for (const auto& r : ref->view.tensors) {
    const bool same = ours_for(*out, r) == tensor_bytes(*ref, r);
    if (ragged.count(r.name)) {
      differ += same ? 0 : 1;  // transformers 5.17 uses block rows / scale_rows = 96 there
      continue;
    }
    EXPECT_TRUE(same) << r.name;
  }
  EXPECT_GE(differ, 1u) << "transformers' ragged-grid misplacement is expected on q_a_proj";
}

TEST(Families, GptOssMxfp4ExpertsBecomeTransposedBf16AndEqualTransformers) {
  expect_validates(test::fixture("families/gptoss-mxfp4/in"));
  auto c = convert_family("gptoss-mxfp4");
  ASSERT_EQ(c->report.status, ConvertStatus::ok) << describe(c->report.findings);
  EXPECT_EQ(c->report.plan.quant_profile, "mxfp4");
  auto in = test::load_model_checked(c->in);
  auto out = test::load_model_checked(c->out);
  auto ref = test::load_model_checked(test::fixture("families/gptoss-mxfp4/ref-transformers/state_dict.safetensors"));
  expect_bf16_release_layout("gptoss-mxfp4", *out);
  expect_plain_bf16_config(c->out);
  expect_validates(c->out);
  uint64_t blocks = 0;
  for (const auto& t : in->view.tensors) {
    if (!t.name.ends_with("_blocks")) continue;
    const std::string base = t.name.substr(0, t.name.size() - 7);
    const ModelTensor* s = in->view.find(base + "_scales");
    ASSERT_NE(s, nullptr) << t.name;
    EXPECT_EQ(as_u16(tensor_bytes(*out, base)), exact_blocks(*in, t, *s)) << base;
    ++blocks;
  }
  EXPECT_EQ(blocks, 4u);
  for (const auto& r : ref->view.tensors) EXPECT_TRUE(ours_for(*out, r) == tensor_bytes(*ref, r)) << r.name;
}

TEST(Families, GptOssKeepLeavesBlocksAndTheirConfigAndInt8ShiftIsRefused) {
  test::TempDir tmp;
  ConvertOptions o;
  o.input = test::fixture("families/gptoss-mxfp4/in");
  o.output = tmp.str("keep");
  o.experts = ExpertMode::keep;
  ConvertReport r = convert_checkpoint(o);
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  auto out = test::load_model_checked(o.output);
  EXPECT_NE(out->view.find("model.layers.0.mlp.experts.gate_up_proj_blocks"), nullptr);
  JsonDoc cfg;
  std::string error;
  ASSERT_TRUE(cfg.parse(test::read_text(o.output + "/config.json"), error)) << error;
  auto qc = json_get(cfg.root(), "quantization_config");
  ASSERT_TRUE(qc.has_value());
  EXPECT_EQ(json_string(*qc, "quant_method"), "mxfp4");

  o.output = tmp.str("int8");
  o.experts = ExpertMode::int8_shift;
  r = convert_checkpoint(o);
  EXPECT_NE(r.status, ConvertStatus::ok);
  EXPECT_NE(describe(r.findings).find("REMAP_EXPERTS"), std::string::npos) << describe(r.findings);
}

TEST(Families, DryRunNamesTheProfileAndTheTensorsItDequantizes) {
  for (const char* family : {"qwen3moe-fp8", "dsv3-fp8", "gptoss-mxfp4"}) {
    test::TempDir tmp;
    auto r = test::run_ckpt("convert --dry-run --experts bf16 " + test::shell_quote(test::fixture(std::string("families/") + family + "/in")) +
                            " " + test::shell_quote(tmp.str("out")));
    EXPECT_EQ(r.exit_code, 0) << family << r.err;
    EXPECT_NE(r.out.find("quantization profile"), std::string::npos) << family << r.out;
    EXPECT_NE(r.out.find(std::string(family) == "gptoss-mxfp4" ? "mlp.experts.gate_up_proj_blocks" : "proj.weight"),
              std::string::npos) << family << r.out;
  }
}

// dump decodes through the same pairing and numerics as convert: for a BF16-scaled Qwen FP8
// weight and an F32-scaled DeepSeek-V3 one, bf16_rne(dump --as f32) is the converted tensor.
TEST(Families, DumpOfAnFp8WeightRoundsToTheConvertedBf16) {
  for (const auto& [family, name] : {std::pair<std::string, std::string>{"qwen3moe-fp8", "model.layers.0.mlp.experts.1.gate_proj.weight"},
                                     {"dsv3-fp8", "model.layers.1.self_attn.q_a_proj.weight"}}) {
    auto c = convert_family(family);
    ASSERT_EQ(c->report.status, ConvertStatus::ok) << describe(c->report.findings);
    auto in = test::load_model_checked(c->in);
    auto out = test::load_model_checked(c->out);
    std::vector<uint8_t> f32;
    std::string error;
    auto sink = [&](std::span<const uint8_t> b) {
      f32.insert(f32.end(), b.begin(), b.end());
      return true;
    };
    ASSERT_TRUE(dump_tensor(*in, name, DumpAs::f32, sink, error)) << error;
    const auto want = as_u16(tensor_bytes(*out, name));
    ASSERT_EQ(f32.size(), 2 * want.size() * 2);
    for (size_t i = 0; i < want.size(); ++i) {
      float v;
      std::memcpy(&v, &f32[4 * i], 4);
      ASSERT_EQ(ref_bf16(v), want[i]) << family << " " << name << " element " << i;
    }
  }
}

// --resume: every shard of a finished family conversion is proven by its record (its inputs,
// scales and gpt-oss blocks included through tensor_inputs), and a changed scale is redone.
TEST(Families, ResumeSkipsFinishedShardsAndTheBlocksInputsAreTheirIdentity) {
  for (const char* family : {"qwen3moe-fp8", "gptoss-mxfp4"}) {
    auto c = convert_family(family);
    ASSERT_EQ(c->report.status, ConvertStatus::ok) << describe(c->report.findings);
    for (const auto& shard : c->report.plan.shards)
      for (const auto& t : shard.tensors)
        if (t.action == TensorAction::dequant_mxfp4_blocks) {
          const auto inputs = tensor_inputs(c->report.plan, t);
          EXPECT_EQ(inputs, (std::vector<size_t>{t.input, t.scale})) << family;
        }
    ConvertOptions o;
    o.input = c->in;
    o.output = c->out;
    o.experts = ExpertMode::bf16;
    o.resume = true;
    ConvertReport again = convert_checkpoint(o);
    ASSERT_EQ(again.status, ConvertStatus::ok) << describe(again.findings);
    EXPECT_EQ(again.shards_written, 0u) << family;
    EXPECT_EQ(again.shards_resumed, c->report.plan.shards.size()) << family;
  }
}

}  // namespace
}  // namespace ckpt
