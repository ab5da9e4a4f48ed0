#include "profiles/deepseek_v4.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>

#include <gtest/gtest.h>

#include "formats/json.h"
#include "synth/synth_dsv4.h"
#include "test_util.h"
#include "model/structure_hash.h"

namespace ckpt {
namespace {

using test::fixture;

struct Loaded {
  JsonDoc config;
  ModelView view;
};

std::unique_ptr<LoadedModel> load_checkpoint(const std::string& dir) { return test::load_model_checked(dir); }

// A ModelView holding exactly the catalogue (no files), for fast in-memory checks.
std::unique_ptr<Loaded> view_of_catalogue(const std::string& config_text) {
  auto m = std::make_unique<Loaded>();
  std::string err;
  EXPECT_TRUE(m->config.parse(config_text, err)) << err;
  m->view.config = &m->config;
  m->view.files = {"model-00001-of-00001.safetensors"};
  Findings f;
  std::vector<ExpectedTensor> cat;
  EXPECT_TRUE(dsv4_expected_catalogue(m->config.root(), "config.json", f, cat));
  m->view.tensors.reserve(cat.size());
  for (auto& e : cat) {
    ModelTensor t;
    t.name = e.name;
    t.type = e.dtype;
    t.dtype = dtype_from_name(e.dtype);
    t.shape = e.shape;
    m->view.add(std::move(t));
  }
  return m;
}

std::vector<ExpectedTensor> catalogue_of(const std::string& config_text, Findings& f, bool* ok = nullptr) {
  JsonDoc doc;
  std::string err;
  EXPECT_TRUE(doc.parse(config_text, err)) << err;
  std::vector<ExpectedTensor> cat;
  bool r = dsv4_expected_catalogue(doc.root(), "config.json", f, cat);
  if (ok) *ok = r;
  return cat;
}

uint64_t nbytes_of(const ExpectedTensor& e) {
  uint64_t n = dtype_bits(*dtype_from_name(e.dtype)) / 8;
  for (auto d : e.shape) n *= d;
  return n;
}

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

std::string errors_of(const Findings& f) {
  std::string s;
  for (const auto& x : f.items())
    if (x.severity == Severity::error) s += x.code + " " + x.tensor + ": " + x.message + "\n";
  return s;
}

// ---------------------------------------------------------------- catalogue

TEST(DeepseekV4, CatalogueEqualsDsv4TinyHeadersExactly) {
  auto m = load_checkpoint(fixture("oracle/dsv4-tiny"));
  ASSERT_NE(m->view.config, nullptr);
  Findings f;
  std::vector<ExpectedTensor> cat;
  ASSERT_TRUE(dsv4_expected_catalogue(m->view.config->root(), "config.json", f, cat)) << errors_of(f);
  EXPECT_EQ(f.items().size(), 0u) << errors_of(f);
  std::map<std::string, std::pair<std::string, std::vector<uint64_t>>> want, got;
  for (auto& e : cat) want[e.name] = {e.dtype, e.shape};
  for (auto& t : m->view.tensors) got[t.name] = {t.type, t.shape};
  EXPECT_EQ(cat.size(), want.size()) << "catalogue has duplicate names";
  EXPECT_EQ(got.size(), want.size());
  for (auto& [name, v] : want) {
    auto it = got.find(name);
    if (it == got.end()) {
      ADD_FAILURE() << "catalogue has " << name << ", the fixture does not";
      continue;
    }
    EXPECT_EQ(it->second.first, v.first) << name;
    EXPECT_EQ(it->second.second, v.second) << name;
  }
  for (auto& [name, v] : got) EXPECT_TRUE(want.count(name)) << "fixture has " << name << ", catalogue does not";
}

TEST(DeepseekV4, Catalogue0731CountsBytesAndStructureHash) {
  Findings f;
  auto cat = catalogue_of(dsv4_0731_config_json(), f);
  EXPECT_FALSE(f.has_errors()) << errors_of(f);
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_dtype;
  uint64_t total = 0, mtp = 0;
  std::vector<StructureRecord> records;
  for (auto& e : cat) {
    uint64_t n = nbytes_of(e);
    total += n;
    by_dtype[e.dtype].first += 1;
    by_dtype[e.dtype].second += n;
    mtp += e.name.rfind("mtp.", 0) == 0;
    records.push_back({e.name, e.dtype, e.shape, n});
  }
  EXPECT_EQ(cat.size(), 72317u);
  EXPECT_EQ(total, 166878536440u);
  EXPECT_EQ(mtp, 4705u);
  // deepseek-v4.md §4 dtype table.
  EXPECT_EQ(by_dtype["I8"], std::make_pair(uint64_t{35328}, uint64_t{148176371712}));
  EXPECT_EQ(by_dtype["F8_E8M0"], std::make_pair(uint64_t{35718}, uint64_t{9261408000}));
  EXPECT_EQ(by_dtype["F8_E4M3"], std::make_pair(uint64_t{390}, uint64_t{6304038912}));
  EXPECT_EQ(by_dtype["BF16"], std::make_pair(uint64_t{445}, uint64_t{2967134976}));
  EXPECT_EQ(by_dtype["F32"], std::make_pair(uint64_t{433}, uint64_t{150966520}));
  EXPECT_EQ(by_dtype["I64"], std::make_pair(uint64_t{3}, uint64_t{18616320}));
  EXPECT_EQ(structure_sha256(records), "18285fe60ca3655be488bbabb88b59489b8ee03cff7fc4f4729424051ca83e0e");
}

// Preview V4-Flash (§1): no dspark_* keys, 44 ratios, legacy mtp.0 with e_proj/h_proj.
std::string preview_config() {
  std::string c = dsv4_0731_config_json();
  c = replace_once(c, "4, 0, 0, 0]", "4, 0]");
  for (const char* key : {"  \"dspark_block_size\": 5,\n", "  \"dspark_noise_token_id\": 128799,\n",
                          "  \"dspark_target_layer_ids\": [40, 41, 42],\n", "  \"dspark_markov_rank\": 256,\n"})
    c = replace_once(c, key, "");
  return c;
}

TEST(DeepseekV4, CataloguePreviewCounts) {
  Findings f;
  auto cat = catalogue_of(preview_config(), f);
  EXPECT_FALSE(f.has_errors()) << errors_of(f);
  uint64_t total = 0, mtp = 0;
  for (auto& e : cat) {
    total += nbytes_of(e);
    mtp += e.name.rfind("mtp.", 0) == 0;
  }
  EXPECT_EQ(cat.size(), 69187u);
  EXPECT_EQ(total, 159609485896u);
  EXPECT_EQ(mtp, 1575u);
  auto has = [&](const std::string& n) {
    return std::any_of(cat.begin(), cat.end(), [&](auto& e) { return e.name == n; });
  };
  EXPECT_TRUE(has("mtp.0.e_proj.weight"));
  EXPECT_TRUE(has("mtp.0.h_proj.scale"));
  EXPECT_TRUE(has("mtp.0.enorm.weight"));
  EXPECT_TRUE(has("mtp.0.hc_head_fn"));
  EXPECT_FALSE(has("mtp.0.main_proj.weight"));
}

TEST(DeepseekV4, ScaleGridFollowsWeightBlockSize) {
  std::string c = replace_once(dsv4_0731_config_json(), "\"weight_block_size\": [128, 128]",
                               "\"weight_block_size\": [32, 32]");
  Findings f;
  auto cat = catalogue_of(c, f);
  auto it = std::find_if(cat.begin(), cat.end(), [](auto& e) { return e.name == "layers.0.attn.wq_a.scale"; });
  ASSERT_NE(it, cat.end());
  EXPECT_EQ(it->shape, (std::vector<uint64_t>{32, 128}));  // [1024/32, 4096/32]
}

// ---------------------------------------------------------------- config rules

struct ConfigCase {
  const char* what;
  const char* from;
  const char* to;
  const char* code;
  bool catalogue_still_built;
};

TEST(DeepseekV4, ConfigRuleViolationsEachGiveTheirCode) {
  const ConfigCase cases[] = {
      {"model_type", "\"model_type\": \"deepseek_v4\"", "\"model_type\": \"deepseek_v3\"", "DSV4_MODEL_TYPE", true},
      {"missing hidden_size", "\"hidden_size\": 256,", "", "DSV4_CONFIG_MISSING_KEY", false},
      {"missing compress_ratios", "\"compress_ratios\"", "\"no_ratios\"", "DSV4_CONFIG_MISSING_KEY", false},
      {"missing quantization_config", "\"quantization_config\"", "\"no_quant\"", "DSV4_CONFIG_MISSING_KEY", false},
      {"ratios shorter than layers", "[0, 4, 128, 4, 128, 0, 0, 0]", "[0, 4, 128]", "DSV4_COMPRESS_RATIOS", false},
      {"ratio 64", "[0, 4, 128, 4, 128, 0, 0, 0]", "[0, 4, 64, 4, 128, 0, 0, 0]", "DSV4_COMPRESS_RATIOS", false},
      {"stage ratio 4", "[0, 4, 128, 4, 128, 0, 0, 0]", "[0, 4, 128, 4, 128, 0, 4, 0]", "DSV4_COMPRESS_RATIOS",
       false},
      {"quant_method", "\"quant_method\": \"fp8\"", "\"quant_method\": \"mxfp4\"", "DSV4_QUANT_CONFIG", true},
      {"fmt", "\"fmt\": \"e4m3\"", "\"fmt\": \"e5m2\"", "DSV4_QUANT_CONFIG", true},
      {"scale_fmt", "\"scale_fmt\": \"ue8m0\"", "\"scale_fmt\": \"fp32\"", "DSV4_QUANT_CONFIG", true},
      {"weight_block_size", "\"weight_block_size\": [128, 128]", "\"weight_block_size\": [128]",
       "DSV4_QUANT_CONFIG", false},
      {"weight_block_size zero", "\"weight_block_size\": [128, 128]", "\"weight_block_size\": [0, 128]",
       "DSV4_QUANT_CONFIG", false},
      {"expert_dtype", "\"expert_dtype\": \"fp4\"", "\"expert_dtype\": \"fp8\"", "DSV4_EXPERT_DTYPE", true},
      {"partial dspark keys", "\"dspark_markov_rank\": 64,", "", "DSV4_DSPARK_KEYS", false},
      {"target out of range", "\"dspark_target_layer_ids\": [2, 3, 4]", "\"dspark_target_layer_ids\": [2, 3, 5]",
       "DSV4_DSPARK_TARGETS", true},
      {"targets != stages", "\"dspark_target_layer_ids\": [2, 3, 4]", "\"dspark_target_layer_ids\": [3, 4]",
       "DSV4_DSPARK_TARGETS", true},
      {"noise id", "\"dspark_noise_token_id\": 511", "\"dspark_noise_token_id\": 512", "DSV4_DSPARK_NOISE_ID", true},
      {"zero dimension", "\"hidden_size\": 256", "\"hidden_size\": 0", "DSV4_CONFIG_VALUE", false},
      {"negative dimension", "\"o_groups\": 2", "\"o_groups\": -2", "DSV4_CONFIG_VALUE", false},
      {"o_groups 0 divides", "\"o_groups\": 2", "\"o_groups\": 0", "DSV4_CONFIG_VALUE", false},
      {"MXFP4 width", "\"moe_intermediate_size\": 128", "\"moe_intermediate_size\": 100", "DSV4_CONFIG_VALUE",
       false},
      {"too many experts", "\"n_routed_experts\": 8", "\"n_routed_experts\": 1000000000", "DSV4_CONFIG_VALUE",
       false},
  };
  for (const auto& c : cases) {
    Findings f;
    bool ok = false;
    auto cat = catalogue_of(replace_once(dsv4_tiny_config_json(), c.from, c.to), f, &ok);
    EXPECT_TRUE(f.has_code(c.code)) << c.what << "\n" << errors_of(f);
    EXPECT_EQ(ok, c.catalogue_still_built) << c.what << "\n" << errors_of(f);
    if (!ok) {
      EXPECT_TRUE(cat.empty()) << c.what;
    }
  }
}

// Fuzz regression (tests/fuzz/corpus/config_dsv4/regress-timeout-huge-expert-count.json):
// n_routed_experts = 64,294,967,296 used to build 400,000 catalogue entries before giving
// up (over 1 s in the fuzz build). The catalogue is now counted first and limited to
// 200,000 entries: the largest accepted config builds exactly that, one more is refused
// with a single finding and nothing built.
TEST(DeepseekV4, CatalogueLimitIsCheckedBeforeBuilding) {
  auto size_with = [](uint64_t experts, Findings& f, bool& ok) {
    return catalogue_of(replace_once(dsv4_tiny_config_json(), "\"n_routed_experts\": 8",
                                     "\"n_routed_experts\": " + std::to_string(experts)),
                        f, &ok)
        .size();
  };
  Findings f8, f9;
  bool ok = false;
  const size_t at8 = size_with(8, f8, ok), at9 = size_with(9, f9, ok);
  ASSERT_GT(at9, at8);
  const uint64_t per_expert = at9 - at8, fixed = at8 - 8 * per_expert;
  const uint64_t largest = (200'000 - fixed) / per_expert;

  Findings fit;
  EXPECT_EQ(size_with(largest, fit, ok), fixed + largest * per_expert);
  EXPECT_TRUE(ok) << errors_of(fit);
  EXPECT_FALSE(fit.has_errors()) << errors_of(fit);

  for (uint64_t experts : {largest + 1, uint64_t{64294967296}}) {
    Findings over;
    EXPECT_EQ(size_with(experts, over, ok), 0u);
    EXPECT_FALSE(ok);
    EXPECT_EQ(over.count_code("DSV4_CONFIG_VALUE"), 1u) << errors_of(over);
  }
}

TEST(DeepseekV4, TinySynthConfigIsClean) {
  Findings f;
  bool ok = false;
  auto cat = catalogue_of(dsv4_tiny_config_json(), f, &ok);
  EXPECT_TRUE(ok);
  EXPECT_TRUE(f.items().empty()) << errors_of(f);
  EXPECT_FALSE(cat.empty());
}

// ---------------------------------------------------------------- checkpoint comparison

TEST(DeepseekV4, Dsv4TinyFixturePasses) {
  auto m = load_checkpoint(fixture("oracle/dsv4-tiny"));
  Findings f;
  check_deepseek_v4(m->view, f);
  EXPECT_EQ(f.items().size(), 0u) << errors_of(f);
}

TEST(DeepseekV4, ConvertedFormFromQwPasses) {
  auto m = load_checkpoint(fixture("oracle/dsv4-tiny.qw-bf16"));
  Findings f;
  check_deepseek_v4(m->view, f);
  EXPECT_EQ(f.count(Severity::error), 0u) << errors_of(f);
  EXPECT_EQ(f.count_code("DSV4_IGNORED_LAYERS"), 1u);
  for (const auto& x : f.items())
    if (x.code == "DSV4_IGNORED_LAYERS") {
      EXPECT_NE(x.message.find("main_proj"), std::string::npos) << x.message;
    }
}

TEST(DeepseekV4, NoConfigIsAnError) {
  ModelView v;
  Findings f;
  check_deepseek_v4(v, f);
  EXPECT_TRUE(f.has_code("DSV4_CONFIG_MISSING"));
}

ModelTensor* find_mut(ModelView& v, const std::string& name) {
  auto it = v.by_name.find(name);
  return it == v.by_name.end() ? nullptr : &v.tensors[it->second];
}

void remove_tensor(ModelView& v, const std::string& name) {
  std::vector<ModelTensor> keep;
  for (auto& t : v.tensors)
    if (t.name != name) keep.push_back(std::move(t));
  v.tensors.clear();
  v.by_name.clear();
  for (auto& t : keep) v.add(std::move(t));
}

TEST(DeepseekV4, DetectsEachContractViolation) {
  auto m = view_of_catalogue(dsv4_tiny_config_json());
  ModelView& v = m->view;
  remove_tensor(v, "layers.2.attn.compressor.ape");
  find_mut(v, "layers.0.ffn.gate.tid2eid")->type = "I32";
  find_mut(v, "mtp.0.main_proj.weight")->shape = {256, 256};
  ModelTensor extra;
  extra.name = "layers.0.ffn.gate.bias";  // a hash layer has tid2eid, never a bias
  extra.type = "F32";
  extra.shape = {8};
  v.add(extra);
  ModelTensor f16;
  f16.name = "odd.weight";
  f16.type = "F16";
  f16.shape = {4};
  v.add(f16);
  Findings f;
  check_deepseek_v4(v, f);
  EXPECT_EQ(f.count_code("CAT_MISSING_TENSOR"), 1u) << errors_of(f);
  EXPECT_EQ(f.count_code("CAT_DTYPE_MISMATCH"), 1u) << errors_of(f);
  EXPECT_EQ(f.count_code("DTYPE_NOT_ALLOWED"), 2u) << errors_of(f);  // I32 and F16
  EXPECT_EQ(f.count_code("CAT_UNEXPECTED_TENSOR"), 2u) << errors_of(f);
  EXPECT_GE(f.count_code("CAT_SHAPE_MISMATCH"), 1u) << errors_of(f);
  EXPECT_TRUE(f.has_code("SCALE_GRID_MISMATCH")) << errors_of(f);  // main_proj scale no longer fits
  for (const auto& x : f.items())
    if (x.code == "CAT_SHAPE_MISMATCH") {
      EXPECT_NE(x.message.find("[256, 768]"), std::string::npos) << x.message;
    }
}

TEST(DeepseekV4, ConvertedWeightKeepingItsScaleIsStray) {
  auto m = view_of_catalogue(dsv4_tiny_config_json());
  find_mut(m->view, "layers.0.attn.wq_a.weight")->type = "BF16";
  Findings f;
  check_deepseek_v4(m->view, f);
  EXPECT_EQ(f.count(Severity::error), 1u) << errors_of(f);
  EXPECT_TRUE(f.has_code("SCALE_STRAY")) << errors_of(f);
}

TEST(DeepseekV4, FindingsAreCappedPerCode) {
  auto m = view_of_catalogue(dsv4_tiny_config_json());
  std::vector<ModelTensor> keep;
  for (auto& t : m->view.tensors)
    if (t.name.rfind("layers.1.", 0) != 0) keep.push_back(t);
  m->view.tensors.clear();
  m->view.by_name.clear();
  for (auto& t : keep) m->view.add(t);
  Findings f;
  check_deepseek_v4(m->view, f);
  EXPECT_EQ(f.count_code("CAT_MISSING_TENSOR"), 51u);  // 50 listed + one summary
  EXPECT_LE(f.items().size(), 60u);
}

// Speed is measured by `make bench` (structural validation of the sparse 0731 checkpoint,
// goal < 1 s), not asserted here: a timed test fails on a loaded machine.
TEST(DeepseekV4, Checks0731SizedViewWithoutFindings) {
  auto m = view_of_catalogue(dsv4_0731_config_json());
  ASSERT_EQ(m->view.tensors.size(), 72317u);
  Findings f;
  check_deepseek_v4(m->view, f);
  EXPECT_EQ(f.items().size(), 0u) << errors_of(f);
}

}  // namespace
}  // namespace ckpt
