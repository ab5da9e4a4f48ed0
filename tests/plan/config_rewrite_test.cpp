#include "plan/config_rewrite.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "formats/json.h"
#include "test_util.h"

namespace ckpt {
namespace {

std::string read_text(const std::string& rel) {
  auto bytes = test::read_file(test::fixture(rel));
  return std::string(bytes.begin(), bytes.end());
}

// Semantic equality (object key order ignored, as json.loads compares). Paths in `skip`
// ("/a/b") are left out on both sides; every difference is recorded in `diffs`.
void diff_json(simdjson::dom::element a, simdjson::dom::element b, const std::string& path,
               const std::set<std::string>& skip, std::vector<std::string>& diffs) {
  using T = simdjson::dom::element_type;
  if (a.type() != b.type()) {
    diffs.push_back(path + ": type differs");
    return;
  }
  if (a.type() == T::OBJECT) {
    simdjson::dom::object oa, ob;
    if (a.get_object().get(oa) || b.get_object().get(ob)) return;
    for (auto m : oa) {
      std::string p = path + "/" + std::string(m.key);
      if (skip.count(p)) continue;
      simdjson::dom::element other;
      if (ob[m.key].get(other))
        diffs.push_back(p + ": only on the left");
      else
        diff_json(m.value, other, p, skip, diffs);
    }
    for (auto m : ob) {
      std::string p = path + "/" + std::string(m.key);
      simdjson::dom::element other;
      if (!skip.count(p) && oa[m.key].get(other)) diffs.push_back(p + ": only on the right");
    }
  } else if (a.type() == T::ARRAY) {
    simdjson::dom::array xa, xb;
    if (a.get_array().get(xa) || b.get_array().get(xb)) return;
    if (xa.size() != xb.size()) {
      diffs.push_back(path + ": array length differs");
      return;
    }
    for (size_t i = 0; i < xa.size(); ++i)
      diff_json(xa.at(i).value_unsafe(), xb.at(i).value_unsafe(), path + "/" + std::to_string(i), skip, diffs);
  } else if (simdjson::minify(a) != simdjson::minify(b)) {  // scalars: same text, same value
    diffs.push_back(path + ": " + simdjson::minify(a) + " vs " + simdjson::minify(b));
  }
}

std::vector<std::string> strings_at(simdjson::dom::element root, std::string_view pointer) {
  std::vector<std::string> out;
  simdjson::dom::array arr;
  if (root.at_pointer(pointer).get_array().get(arr)) return out;
  for (auto e : arr) out.emplace_back(e.get_string().value_unsafe());
  return out;
}

std::vector<std::string> keys_of(simdjson::dom::element obj_el) {
  std::vector<std::string> out;
  simdjson::dom::object obj;
  if (obj_el.get_object().get(obj)) return out;
  for (auto m : obj) out.emplace_back(m.key);
  return out;
}

ConfigRewriteInput v4_keep_input() {
  ConfigRewriteInput in;
  in.experts_mode = "keep";
  in.converted_tensors = 42;
  in.dropped_scales = 42;
  in.output_has_mxfp4_experts = true;
  in.extra_bf16_modules = {"main_proj"};
  in.tool_version = "0.1.0";
  in.source_structure_sha256 = std::string(64, 'a');
  return in;
}

std::string rewrite_ok(std::string_view text, const ConfigRewriteInput& in) {
  std::string out, err;
  EXPECT_TRUE(rewrite_config(text, in, out, err)) << err;
  return out;
}

// The spec'd differences from QW's rewrite: "main_proj" appended to both lists,
// ckptkit_conversion instead of sglang_conversion, input key order. Nothing else.
TEST(ConfigRewrite, MatchesPeerExceptDocumentedDifferences) {
  for (std::string model : {"dsv4-tiny", "dsv4-edge"}) {
    SCOPED_TRACE(model);
    std::string out = rewrite_ok(read_text("oracle/" + model + "/config.json"), v4_keep_input());
    JsonDoc ours, peer;
    std::string err;
    ASSERT_TRUE(ours.parse(out, err)) << err;
    ASSERT_TRUE(peer.parse(read_text("oracle/" + model + ".qw-bf16/config.json"), err)) << err;

    std::vector<std::string> diffs;
    diff_json(ours.root(), peer.root(), "",
              {"/ckptkit_conversion", "/sglang_conversion", "/quantization_config/ignored_layers",
               "/quantization_config/modules_to_not_convert"},
              diffs);
    EXPECT_TRUE(diffs.empty()) << ::testing::PrintToString(diffs);

    EXPECT_TRUE(json_get(ours.root(), "ckptkit_conversion").has_value());
    EXPECT_FALSE(json_get(ours.root(), "sglang_conversion").has_value());
    for (const char* list : {"/quantization_config/ignored_layers", "/quantization_config/modules_to_not_convert"}) {
      auto want = strings_at(peer.root(), list);
      ASSERT_EQ(want.size(), 17u) << list;
      want.push_back("main_proj");
      EXPECT_EQ(strings_at(ours.root(), list), want) << list;
    }
  }
}

TEST(ConfigRewrite, KeepsInputKeyOrderAndUntouchedBytes) {
  std::string text = read_text("oracle/dsv4-tiny/config.json");
  std::string out = rewrite_ok(text, v4_keep_input());
  JsonDoc in_doc, out_doc;
  std::string err;
  ASSERT_TRUE(in_doc.parse(text, err));
  ASSERT_TRUE(out_doc.parse(out, err));

  auto want = keys_of(in_doc.root());
  want.push_back("ckptkit_conversion");
  EXPECT_EQ(keys_of(out_doc.root()), want);
  auto want_qc = keys_of(*json_get(in_doc.root(), "quantization_config"));
  want_qc.push_back("ignored_layers");
  want_qc.push_back("modules_to_not_convert");
  EXPECT_EQ(keys_of(*json_get(out_doc.root(), "quantization_config")), want_qc);

  // Everything before quantization_config is unchanged text (same layout as Python).
  size_t qc = text.find("  \"quantization_config\"");
  ASSERT_NE(qc, std::string::npos);
  EXPECT_EQ(out.substr(0, qc), text.substr(0, qc));
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
}

TEST(ConfigRewrite, ConversionRecord) {
  auto in = v4_keep_input();
  in.extra_bf16_modules = {"e_proj", "h_proj", "e_proj"};
  std::string out = rewrite_ok(read_text("oracle/dsv4-tiny/config.json"), in);
  JsonDoc doc;
  std::string err;
  ASSERT_TRUE(doc.parse(out, err));
  auto rec = *json_get(doc.root(), "ckptkit_conversion");
  EXPECT_EQ(keys_of(rec), (std::vector<std::string>{"tool", "version", "experts", "dense_fp8_to", "converted_tensors",
                                                     "dropped_scales", "bf16_modules", "source_structure_sha256"}));
  EXPECT_EQ(json_string(rec, "tool"), "ckptkit");
  EXPECT_EQ(json_string(rec, "version"), "0.1.0");
  EXPECT_EQ(json_string(rec, "experts"), "keep");
  EXPECT_EQ(json_string(rec, "dense_fp8_to"), "bfloat16");
  EXPECT_EQ(json_int(rec, "converted_tensors"), 42);
  EXPECT_EQ(json_int(rec, "dropped_scales"), 42);
  EXPECT_EQ(strings_at(rec, "/bf16_modules"), (std::vector<std::string>{"e_proj", "h_proj"}));
  EXPECT_EQ(json_string(rec, "source_structure_sha256"), std::string(64, 'a'));
  auto ignored = strings_at(doc.root(), "/quantization_config/ignored_layers");
  ASSERT_EQ(ignored.size(), 19u);
  EXPECT_EQ(ignored[17], "e_proj");
  EXPECT_EQ(ignored[18], "h_proj");
}

TEST(ConfigRewrite, FullyConvertedV3DropsQuantizationConfig) {
  ConfigRewriteInput in;
  in.experts_mode = "bf16";
  in.converted_tensors = 10;
  in.dropped_scales = 10;
  std::string text = read_text("oracle/dsv3-tiny/config.json");
  std::string out = rewrite_ok(text, in);
  JsonDoc in_doc, doc;
  std::string err;
  ASSERT_TRUE(in_doc.parse(text, err));
  ASSERT_TRUE(doc.parse(out, err)) << err;
  EXPECT_FALSE(json_get(doc.root(), "quantization_config").has_value());
  EXPECT_EQ(json_string(doc.root(), "torch_dtype"), "bfloat16");
  EXPECT_EQ(keys_of(doc.root()),
            (std::vector<std::string>{"architectures", "model_type", "torch_dtype", "ckptkit_conversion"}));
  std::vector<std::string> diffs;
  diff_json(doc.root(), in_doc.root(), "", {"/ckptkit_conversion", "/quantization_config"}, diffs);
  EXPECT_TRUE(diffs.empty()) << ::testing::PrintToString(diffs);
}

// --experts bf16 on V4: quantization_config gone, expert_dtype "bf16" in place (key order
// kept), every other member unchanged; a config without expert_dtype gets it appended.
TEST(ConfigRewrite, Bf16ExpertsSetExpertDtypeAndDropQuantizationConfig) {
  ConfigRewriteInput in;
  in.experts_mode = "bf16";
  in.expert_dtype = "bf16";
  in.converted_tensors = 162;
  in.dropped_scales = 162;
  in.extra_bf16_modules = {"main_proj"};
  std::string text = read_text("oracle/dsv4-tiny/config.json");
  std::string out = rewrite_ok(text, in);
  JsonDoc in_doc, doc;
  std::string err;
  ASSERT_TRUE(in_doc.parse(text, err));
  ASSERT_TRUE(doc.parse(out, err)) << err;
  EXPECT_FALSE(json_get(doc.root(), "quantization_config").has_value());
  EXPECT_EQ(json_string(doc.root(), "expert_dtype"), "bf16");
  EXPECT_EQ(json_string(doc.root(), "torch_dtype"), "bfloat16");
  auto keys = keys_of(doc.root());
  auto in_keys = keys_of(in_doc.root());
  in_keys.erase(std::find(in_keys.begin(), in_keys.end(), "quantization_config"));
  in_keys.push_back("ckptkit_conversion");
  EXPECT_EQ(keys, in_keys);  // expert_dtype rewritten where it was
  EXPECT_EQ(json_string(*json_get(doc.root(), "ckptkit_conversion"), "experts"), "bf16");
  std::vector<std::string> diffs;
  diff_json(doc.root(), in_doc.root(), "", {"/ckptkit_conversion", "/quantization_config", "/expert_dtype"}, diffs);
  EXPECT_TRUE(diffs.empty()) << ::testing::PrintToString(diffs);
  EXPECT_EQ(rewrite_ok(out, in), out);  // idempotent

  std::string v3 = rewrite_ok(read_text("oracle/dsv3-tiny/config.json"), in);
  ASSERT_TRUE(doc.parse(v3, err)) << err;
  EXPECT_EQ(json_string(doc.root(), "expert_dtype"), "bf16");  // appended when absent
}

TEST(ConfigRewrite, Fp8LeftKeepsQuantizationConfig) {
  ConfigRewriteInput in;
  in.output_has_fp8 = true;  // no experts kept, but some FP8 weight left: loader still needed
  std::string out = rewrite_ok(read_text("oracle/dsv3-tiny/config.json"), in);
  JsonDoc doc;
  std::string err;
  ASSERT_TRUE(doc.parse(out, err));
  auto qc = *json_get(doc.root(), "quantization_config");
  EXPECT_EQ(json_string(qc, "quant_method"), "fp8");
  EXPECT_FALSE(json_get(qc, "scale_fmt").has_value());  // not QW's default: dsv3's scales are F32
  EXPECT_EQ(strings_at(qc, "/ignored_layers"), qw_bf16_modules());
}

// QW defaults activation_scheme, fmt, scale_fmt and weight_block_size when absent; ckptkit
// appends only the two module lists and refuses to write a quantization_config the input lacks.
TEST(ConfigRewrite, AppendsOnlyTheModuleListsAndNeverInventsAQuantizationConfig) {
  auto in = v4_keep_input();
  std::string out, err;
  EXPECT_FALSE(rewrite_config(R"({"model_type":"deepseek_v4","torch_dtype":"float32"})", in, out, err));
  EXPECT_NE(err.find("refusing to invent one"), std::string::npos) << err;
  out = rewrite_ok(R"({"model_type":"deepseek_v4","torch_dtype":"float32","quantization_config":{"quant_method":"fp8"}})", in);
  JsonDoc doc;
  ASSERT_TRUE(doc.parse(out, err));
  EXPECT_EQ(keys_of(doc.root()),
            (std::vector<std::string>{"model_type", "torch_dtype", "quantization_config", "ckptkit_conversion"}));
  EXPECT_EQ(json_string(doc.root(), "torch_dtype"), "bfloat16");
  auto qc = *json_get(doc.root(), "quantization_config");
  EXPECT_EQ(keys_of(qc), (std::vector<std::string>{"quant_method", "ignored_layers", "modules_to_not_convert"}));

  // A missing torch_dtype is appended before the conversion record.
  out = rewrite_ok(R"({"model_type":"x","quantization_config":{"quant_method":"fp8"}})", in);
  ASSERT_TRUE(doc.parse(out, err));
  EXPECT_EQ(keys_of(doc.root()),
            (std::vector<std::string>{"model_type", "quantization_config", "torch_dtype", "ckptkit_conversion"}));
}

TEST(ConfigRewrite, KeepsInputModulesAndWeightBlockSize) {
  auto in = v4_keep_input();
  in.extra_bf16_modules = {"main_proj", "main_proj"};
  std::string text = R"({"quantization_config":{"quant_method":"other","weight_block_size":[32,32],
    "ignored_layers":["custom","lm_head","main_proj"],"modules_to_not_convert":[],"extra":1}})";
  std::string out = rewrite_ok(text, in);
  JsonDoc doc;
  std::string err;
  ASSERT_TRUE(doc.parse(out, err));
  auto qc = *json_get(doc.root(), "quantization_config");
  EXPECT_EQ(keys_of(qc), (std::vector<std::string>{"quant_method", "weight_block_size", "ignored_layers",
                                                    "modules_to_not_convert", "extra"}));
  EXPECT_EQ(json_string(qc, "quant_method"), "fp8");
  EXPECT_EQ(json_int_array(qc, "weight_block_size"), (std::vector<int64_t>{32, 32}));  // read, never assumed
  auto want = qw_bf16_modules();
  want.push_back("main_proj");
  EXPECT_EQ(strings_at(qc, "/modules_to_not_convert"), want);
  want.push_back("custom");
  EXPECT_EQ(strings_at(qc, "/ignored_layers"), want);
  EXPECT_EQ(json_int(qc, "extra"), 1);
}

TEST(ConfigRewrite, Idempotent) {
  ConfigRewriteInput full;
  full.experts_mode = "bf16";
  for (auto [rel, in] : {std::pair{"oracle/dsv4-tiny/config.json", v4_keep_input()},
                         std::pair{"oracle/dsv4-tiny.qw-bf16/config.json", v4_keep_input()},
                         std::pair{"oracle/dsv3-tiny/config.json", full}}) {
    SCOPED_TRACE(rel);
    std::string once = rewrite_ok(read_text(rel), in);
    EXPECT_EQ(rewrite_ok(once, in), once);
  }
}

TEST(ConfigRewrite, RejectsBadInput) {
  const char* bad[] = {
      "",
      "[1, 2]",
      "42",
      "\"config\"",
      "null",
      "{\"a\": ",
      "{\"a\": 1,}",
      "{\"a\": 1} {\"b\": 2}",
      R"({"quantization_config": 5})",
      R"({"quantization_config": {"ignored_layers": "lm_head"}})",
      R"({"quantization_config": {"modules_to_not_convert": [1]}})",
  };
  for (const char* text : bad) {
    std::string out = "untouched", err;
    EXPECT_FALSE(rewrite_config(text, v4_keep_input(), out, err)) << text;
    EXPECT_FALSE(err.empty()) << text;
    EXPECT_EQ(out, "untouched") << text;
  }
}

}  // namespace
}  // namespace ckpt
