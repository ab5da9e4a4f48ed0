// Every quantization-config member that changes the arithmetic is implemented or refused by
// name (schemas/quant/*.json "requires"), tensors of an unimplemented scheme (a zero point)
// are never copied as plain tensors, and exclusion lists are matched with the semantics of the
// tool that wrote them (model/module_pattern.h) or refused.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "formats/json.h"
#include "model/module_pattern.h"
#include "model/quant_scheme.h"
#include "test_util.h"
#include "tiny_checkpoint.h"

namespace ckpt {
namespace {

const auto q = test::shell_quote;

std::string ct_config(const std::string& weights_extra, const std::string& ignore = R"(["lm_head"])",
                      const std::string& extra_group = "") {
  return R"({"model_type": "llama", "quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"strategy": "channel")" +
         weights_extra + R"(}, "input_activations": null})" + extra_group + R"(}, "ignore": )" + ignore + "}}";
}

std::vector<test::TinyTensor> ct_tensors(const std::string& module, bool zero_point) {
  std::vector<test::TinyTensor> t = {
      {module + ".weight", "F8_E4M3", {4, 32}, std::vector<uint8_t>(128, 0x38)},
      {module + ".weight_scale", "F32", {4, 1}, test::f32_bytes({0.5f, 0.5f, 0.5f, 0.5f})},
      {"model.norm.weight", "BF16", {4}, std::vector<uint8_t>(8, 0x3F)}};
  if (zero_point) t.push_back({module + ".weight_zero_point", "F8_E4M3", {4, 1}, {0x38, 0x38, 0x38, 0x38}});
  return t;
}

struct Outcome {
  int validate_exit = -1, convert_exit = -1;
  std::string text;
  bool output_written = false;
};

Outcome run_both(const std::string& config, const std::vector<test::TinyTensor>& tensors) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  test::write_tiny_checkpoint(in, config, {tensors});
  Outcome o;
  auto v = test::run_ckpt("validate --deep " + q(in));
  auto c = test::run_ckpt("convert -q " + q(in) + " " + q(out));
  o.validate_exit = v.exit_code;
  o.convert_exit = c.exit_code;
  o.text = v.out + v.err + c.out + c.err;
  o.output_written = std::filesystem::exists(out + "/model.safetensors");
  test::dump_fuzz_seed("config_dsv4", "quant config " + config.substr(0, 40), std::vector<uint8_t>(config.begin(), config.end()));
  return o;
}

// compressed-tensors computes (x - zp) * s for symmetric: false; the base converted x * s and
// copied weight_zero_point into the "plain BF16" output, exit 0.
TEST(QuantSchemeRefusals, AnAsymmetricCompressedTensorsSchemeIsRefusedNamingSymmetric) {
  const Outcome o = run_both(ct_config(R"(, "symmetric": false)"), ct_tensors("model.layers.0.mlp.up_proj", true));
  EXPECT_EQ(o.validate_exit, 1) << o.text;
  EXPECT_EQ(o.convert_exit, 1) << o.text;
  EXPECT_FALSE(o.output_written);
  EXPECT_NE(o.text.find("QUANT_PROFILE_UNKNOWN"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("quantization_config.config_groups.*.weights.symmetric is false"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("(x - weight_zero_point) * scale"), std::string::npos) << o.text;
}

// A symmetric config with a zero-point tensor anyway: the tensor is not copied as plain data.
TEST(QuantSchemeRefusals, AZeroPointTensorTheProfileDoesNotDescribeIsRefused) {
  const Outcome o = run_both(ct_config(R"(, "symmetric": true)"), ct_tensors("model.layers.0.mlp.up_proj", true));
  EXPECT_EQ(o.validate_exit, 1) << o.text;
  EXPECT_EQ(o.convert_exit, 1) << o.text;
  EXPECT_NE(o.text.find("QUANT_LAYOUT_UNKNOWN"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("up_proj.weight_zero_point"), std::string::npos) << o.text;
}

// Members the base read and ignored: each now names itself.
TEST(QuantSchemeRefusals, EveryArithmeticMemberOutsideTheImplementedValuesIsRefusedByName) {
  struct Row {
    std::string config, member;
  };
  const Row rows[] = {
      {ct_config(R"(, "num_bits": 4)"), "weights.num_bits is 4"},
      {ct_config(R"(, "type": "int")"), "weights.type is \"int\""},
      {ct_config(R"(, "dynamic": true)"), "weights.dynamic is true"},
      {ct_config(R"(, "actorder": "group")"), "weights.actorder is \"group\""},
      {ct_config(R"(, "group_size": 128)"), "weights.group_size is 128"},
      {ct_config("", R"(["lm_head"])", R"(, "group_1": {"targets": ["re:.*experts.*"], "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"}})"),
       "config_groups is an object of 2 members"},
      {R"({"model_type": "llama", "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8", "has_zero_point": true}})",
       "quantization_config.has_zero_point is true"},
      {R"({"model_type": "llama", "quantization_config": {"quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [128, 128]}})",
       "quantization_config.fmt is \"e5m2\""},
      {R"({"model_type": "llama", "quantization_config": {"quant_method": "fp8", "scale_fmt": "e4m3", "weight_block_size": [128, 128]}})",
       "quantization_config.scale_fmt is \"e4m3\""},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.member);
    JsonDoc doc;
    std::string err;
    ASSERT_TRUE(doc.parse(r.config, err)) << err;
    QuantScheme s;
    EXPECT_FALSE(detect_quant_scheme(&doc, s, err));
    EXPECT_NE(err.find(r.member), std::string::npos) << err;
    EXPECT_NE(err.find("refusing to convert arithmetic it does not implement"), std::string::npos) << err;
  }
  JsonDoc doc;
  std::string err;
  ASSERT_TRUE(doc.parse(ct_config(R"(, "num_bits": 8, "type": "float", "symmetric": true, "dynamic": false, "actorder": null, "group_size": null)"), err));
  QuantScheme s;
  EXPECT_TRUE(detect_quant_scheme(&doc, s, err)) << err;  // the implemented values pass
}

TEST(QuantSchemeRefusals, GlobClassesInExclusionListsMatchAsFnmatchDoes) {
  EXPECT_TRUE(module_pattern_matches("model.layers.[0-9].mlp.up_proj", "model.layers.3.mlp.up_proj"));
  EXPECT_FALSE(module_pattern_matches("model.layers.[0-9].mlp.up_proj", "model.layers.12.mlp.up_proj"));
  EXPECT_TRUE(module_pattern_matches("model.layers.[!0-2].mlp", "model.layers.7.mlp"));
  EXPECT_FALSE(module_pattern_matches("model.layers.[!0-2].mlp", "model.layers.1.mlp"));
  EXPECT_TRUE(module_pattern_matches("model.layers.?.mlp", "model.layers.1.mlp"));
  EXPECT_TRUE(module_pattern_matches("model.layers.*.self_attn", "model.layers.10.self_attn"));
  EXPECT_TRUE(module_pattern_matches("a[b", "a[b"));  // an unclosed '[' is a literal, as in fnmatch
  EXPECT_TRUE(module_pattern_matches("lm_head", "model.lm_head"));
  EXPECT_FALSE(module_pattern_matches("mlp.gate", "model.layers.0.mlp.gate_proj"));
}

TEST(QuantSchemeRefusals, RegexEntriesMatchAsReMatchDoesOrAreRefusedByName) {
  EXPECT_TRUE(module_pattern_matches("re:.*mlp\\.up_proj$", "model.layers.0.mlp.up_proj"));
  EXPECT_FALSE(module_pattern_matches("re:.*mlp\\.up_proj$", "model.layers.0.mlp.up_proj_x"));
  EXPECT_TRUE(module_pattern_matches("re:model\\.layers\\.\\d+\\.mlp", "model.layers.12.mlp.down_proj"));  // prefix match
  EXPECT_FALSE(module_pattern_matches("re:layers", "model.layers.0"));  // anchored at the start
  EXPECT_TRUE(module_pattern_matches("re:.*gate$|.*lm_head", "model.lm_head"));
  EXPECT_TRUE(module_pattern_matches("re:.*[^a-z]gate$", "model.layers.0.mlp.gate"));
  EXPECT_FALSE(module_pattern_matches("re:a+b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaac"));
  EXPECT_EQ(module_pattern_problem("re:.*mlp\\.up_proj$"), std::nullopt);
  EXPECT_NE(module_pattern_problem("re:.*self_attn.(q|k)_proj"), std::nullopt);
  EXPECT_NE(module_pattern_problem("re:x{2}"), std::nullopt);
  EXPECT_EQ(module_pattern_problem("model.layers.[0-9].mlp"), std::nullopt);
  EXPECT_NE(module_pattern_problem(std::string(5000, '[')), std::nullopt);  // bounded work per entry

  JsonDoc doc;
  std::string err;
  ASSERT_TRUE(doc.parse(ct_config("", R"(["lm_head", "re:.*self_attn.(q|k)_proj"])"), err));
  QuantScheme s;
  EXPECT_FALSE(detect_quant_scheme(&doc, s, err));
  EXPECT_NE(err.find("quantization_config.ignore entry \"re:.*self_attn.(q|k)_proj\""), std::string::npos) << err;
}

// At the CLI: a module the list excludes with a glob class holds an FP8 weight, so config and
// tensors disagree; the base never matched the class and converted it.
TEST(QuantSchemeRefusals, AGlobClassExclusionIsAppliedByValidateAndConvert) {
  const Outcome o = run_both(ct_config("", R"(["lm_head", "model.layers.[0-9].mlp.up_proj"])"),
                             ct_tensors("model.layers.0.mlp.up_proj", false));
  EXPECT_EQ(o.validate_exit, 1) << o.text;
  EXPECT_EQ(o.convert_exit, 1) << o.text;
  EXPECT_NE(o.text.find("QUANT_EXCLUDED_MODULE"), std::string::npos) << o.text;
  const Outcome ok = run_both(ct_config("", R"(["lm_head", "model.layers.[1-9].mlp.up_proj"])"),
                              ct_tensors("model.layers.0.mlp.up_proj", false));
  EXPECT_EQ(ok.convert_exit, 0) << ok.text;
}

}  // namespace
}  // namespace ckpt
