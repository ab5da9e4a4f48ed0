// ckpt preflight of the Qwen3.5 / Qwen3-Next hybrids from config.json alone
// (libconvert/deploy/config_tensors.h, preflight.h): layer types, the GatedDeltaNet
// projections, the shared and routed experts, and the sglang#19045 case.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "deploy/config_tensors.h"
#include "deploy/preflight.h"
#include "report/preflight_report.h"
#include "formats/json.h"
#include "model/quant_scheme.h"
#include "deploy/config_checkpoint.h"
#include "test_util.h"

namespace ckpt {
namespace {

using test::describe;

PreflightReport run_at(const std::string& path, uint32_t tp, uint32_t ep = 1) {
  PreflightOptions o;
  o.deployment = {tp, ep, 1};
  return preflight(path, o);
}

std::string messages(const PreflightReport& r, const std::string& code) {
  std::string out;
  for (const auto& f : r.findings.items())
    if (f.code == code) out += f.message + "\n";
  return out;
}

std::string published_qwen3_5() { return test::fixture("preflight/qwen3.5-397b-a17b-fp8"); }

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const PreflightModule* module_named(const PreflightReport& r, const std::string& names) {
  for (const auto& m : r.modules)
    if (m.names == names) return &m;
  return nullptr;
}

TEST(PreflightHybrid, Qwen3_5MoeTensorsComeFromTheNestedTextConfigWithItsLayerTypes) {
  JsonDoc doc;
  std::string error;
  ASSERT_TRUE(doc.parse(read_all(published_qwen3_5() + "/config.json"), error)) << error;
  QuantScheme scheme;
  std::string qerror;
  ASSERT_TRUE(detect_quant_scheme(&doc, scheme, qerror)) << qerror;
  Findings f;
  std::vector<DeployTensor> t;
  ASSERT_TRUE(tensors_from_config(doc.root(), scheme, f, t)) << describe(f);
  std::map<std::string, const DeployTensor*> by;
  for (const auto& x : t) by[x.name] = &x;
  auto shape = [&](const std::string& n) { return by.count(n) ? by[n]->shape : std::vector<uint64_t>{}; };
  auto dtype = [&](const std::string& n) { return by.count(n) ? by[n]->dtype : std::string("absent"); };
  const std::string l0 = "model.language_model.layers.0.", l3 = "model.language_model.layers.3.";
  // GatedDeltaNet (layer 0): q, k of 16 heads x 128 and v of 64 x 128; z; b and a, one row a value head.
  EXPECT_EQ(shape(l0 + "linear_attn.in_proj_qkv.weight"), (std::vector<uint64_t>{2 * 16 * 128 + 64 * 128, 4096}));
  EXPECT_EQ(shape(l0 + "linear_attn.in_proj_z.weight"), (std::vector<uint64_t>{64 * 128, 4096}));
  EXPECT_EQ(shape(l0 + "linear_attn.in_proj_b.weight"), (std::vector<uint64_t>{64, 4096}));
  EXPECT_EQ(shape(l0 + "linear_attn.in_proj_a.weight"), (std::vector<uint64_t>{64, 4096}));
  EXPECT_EQ(shape(l0 + "linear_attn.out_proj.weight"), (std::vector<uint64_t>{4096, 64 * 128}));
  EXPECT_EQ(dtype(l0 + "linear_attn.in_proj_qkv.weight"), "F8_E4M3");
  EXPECT_EQ(dtype(l0 + "linear_attn.in_proj_b.weight"), "BF16");  // modules_to_not_convert
  EXPECT_EQ(dtype(l0 + "linear_attn.in_proj_b.weight_scale_inv"), "absent");
  // Layer 3 is full attention (layer_types): gated q of 32 heads x 256, 2 KV heads.
  EXPECT_EQ(shape(l3 + "self_attn.q_proj.weight"), (std::vector<uint64_t>{2 * 32 * 256, 4096}));
  EXPECT_EQ(shape(l3 + "self_attn.k_proj.weight"), (std::vector<uint64_t>{2 * 256, 4096}));
  EXPECT_EQ(dtype(l3 + "linear_attn.in_proj_qkv.weight"), "absent");
  // Routed experts (512 of 1024) and the gated shared expert of 1024, in every layer.
  EXPECT_EQ(shape("model.language_model.layers.59.mlp.experts.511.gate_proj.weight"), (std::vector<uint64_t>{1024, 4096}));
  EXPECT_EQ(shape(l3 + "mlp.shared_expert.down_proj.weight"), (std::vector<uint64_t>{4096, 1024}));
  EXPECT_EQ(shape(l3 + "mlp.shared_expert_gate.weight"), (std::vector<uint64_t>{1, 4096}));
  EXPECT_EQ(dtype(l3 + "mlp.gate.weight"), "BF16");
  EXPECT_EQ(shape("model.language_model.embed_tokens.weight"), (std::vector<uint64_t>{248320, 4096}));
  EXPECT_EQ(shape("lm_head.weight"), (std::vector<uint64_t>{248320, 4096}));
}

TEST(PreflightHybrid, LayerTypesOverrideTheIntervalWhenTheyListEveryLayer) {
  test::TempDir tmp;
  // full_attention_interval says every 4th; layer_types says layer 0 and 2 (of 4).
  test::write_text(tmp.str("config.json"), R"({"model_type": "qwen3_next", "hidden_size": 256,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "moe_intermediate_size": 128, "num_experts": 4, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 64, "linear_value_head_dim": 64, "full_attention_interval": 4, "vocab_size": 1024,
    "layer_types": ["full_attention", "linear_attention", "full_attention", "linear_attention"]})");
  auto r = run_at(tmp.str(), 1);
  ASSERT_TRUE(r.config_only) << describe(r.findings);
  const PreflightModule* qkv = module_named(r, "q_proj");
  const PreflightModule* gdn = module_named(r, "in_proj_qkvz");
  ASSERT_NE(qkv, nullptr);
  ASSERT_NE(gdn, nullptr);
  EXPECT_EQ(layer_ranges(qkv->layers), "0, 2");
  EXPECT_EQ(layer_ranges(gdn->layers), "1, 3");
}

TEST(PreflightHybrid, TheAttentionOutputGateDoublesQProjUnlessTheConfigTurnsItOff) {
  for (const char* gate : {"", R"("attn_output_gate": false,)"}) {
    test::TempDir tmp;
    test::write_text(tmp.str("config.json"), std::string(R"({"model_type": "qwen3_next", )") + gate +
                                                 R"( "hidden_size": 256, "num_hidden_layers": 4,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "moe_intermediate_size": 128,
      "num_experts": 4, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 64,
      "linear_value_head_dim": 64, "vocab_size": 1024})");
    auto r = run_at(tmp.str(), 1);
    const PreflightModule* q = module_named(r, "q_proj");
    ASSERT_NE(q, nullptr) << describe(r.findings);
    EXPECT_EQ(q->rows, (*gate ? 1u : 2u) * 4 * 64) << gate;
  }
}

// sglang#19045: Qwen3.5-397B-A17B-FP8 at TP 8, "Weight output_partition_size = 8 is not
// divisible by weight quantization block_n = 128" from the GatedDeltaNet's in_proj_b: 64 value
// heads / 8 = 8 rows a rank. The release leaves in_proj_b / in_proj_a in BF16 by name, so an
// engine that honours the names loads it; preflight says which projection breaks if not.
TEST(PreflightHybrid, Qwen3_5_397B_Fp8AtTp8NamesTheGatedDeltaNetProjectionOf8RowsARank) {
  auto r = run_at(published_qwen3_5(), 8);
  EXPECT_TRUE(r.config_only);
  EXPECT_EQ(r.family, "qwen3_5_moe");
  EXPECT_TRUE(r.loads()) << describe(r.findings);
  const std::string w = messages(r, "PREFLIGHT_EXCLUDED_BELOW_BLOCK");
  EXPECT_NE(w.find("in_proj_a/in_proj_b in layers 0-2, 4-6"), std::string::npos) << w;
  EXPECT_NE(w.find("linear_num_value_heads 64 / tp 8 = 8, not a multiple of block_n 128"), std::string::npos) << w;
  EXPECT_NE(w.find("sglang#19045"), std::string::npos) << w;
  EXPECT_FALSE(run_at(published_qwen3_5(), 1).findings.has_code("PREFLIGHT_EXCLUDED_BELOW_BLOCK"));  // not split
  // Every other projection divides: q/k 2048, v / z 8192, out_proj 8192 / 8, experts 1024 / 8 = 128.
  EXPECT_FALSE(r.findings.has_code("PREFLIGHT_BLOCK_DIVISIBILITY")) << describe(r.findings);

  // The same release with in_proj_b / in_proj_a quantized (not excluded): refused at start-up.
  test::TempDir tmp;
  const std::string text =
      std::regex_replace(read_all(published_qwen3_5() + "/config.json"), std::regex(R"(\s*"[^"]*in_proj_[ab]",?)"), "");
  test::write_text(tmp.str("config.json"), text);
  auto q = run_at(tmp.str(), 8);
  EXPECT_FALSE(q.loads());
  const std::string m = messages(q, "PREFLIGHT_BLOCK_DIVISIBILITY");
  EXPECT_NE(m.find("MergedColumnParallelLinear in_proj_ba (GatedDeltaNet b, a) in_proj_a/in_proj_b"), std::string::npos) << m;
  EXPECT_NE(m.find("linear_num_value_heads 64 / tp 8 = 8, not a multiple of block_n 128"), std::string::npos) << m;
  EXPECT_NE(m.find("sglang"), std::string::npos) << m;
  EXPECT_TRUE(q.findings.has_code("PREFLIGHT_SCALE_ROW_SHARED"));  // vLLM merges b and a unchecked
  // At TP 1 too b (64 rows) shares a's scale block inside vLLM's merged in_proj_ba.
  EXPECT_NE(messages(run_at(tmp.str(), 1), "PREFLIGHT_SCALE_ROW_SHARED").find("in_proj_b"), std::string::npos);
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

// Qwen1.5-MoE-A2.7B's published dimensions (qwen2_moe): 60 routed experts a layer.
constexpr const char* kSixtyExperts = R"({"model_type": "qwen2_moe", "hidden_size": 2048,
  "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 5632,
  "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_experts": 60,
  "num_experts_per_tok": 4, "decoder_sparse_step": 1, "vocab_size": 151936, "tie_word_embeddings": false})";

TEST(PreflightExperts, RoutedExpertsThatEpDoesNotDivideAreRefusedWithTheEpDegreesThatWork) {
  test::TempDir tmp;
  test::write_text(tmp.str("config.json"), kSixtyExperts);
  auto r = run_at(tmp.str(), 8, 8);
  EXPECT_FALSE(r.loads());
  const std::string m = messages(r, "PREFLIGHT_EP_SPLIT");
  EXPECT_NE(m.find("routed experts 60 / ep 8 = 7 remainder 4"), std::string::npos) << m;
  EXPECT_NE(m.find("sglang (python/sglang/srt/layers/moe/fused_moe_triton/layer.py:219"), std::string::npos) << m;
  EXPECT_NE(m.find("loaded unevenly by vllm"), std::string::npos) << m;
  EXPECT_NE(m.find("--ep 2, --ep 4 (with --tp a multiple of it)"), std::string::npos) << m;
  for (const auto& e : r.per_engine)
    EXPECT_EQ(e.loads, e.engine == "vllm") << e.engine << " " << e.why;
  for (const auto& g : r.working) EXPECT_FALSE(g.ep == 8 || g.ep == 16) << g.tp << " " << g.ep;
  EXPECT_TRUE(run_at(tmp.str(), 8, 4).loads());
  // vLLM alone loads it, the largest rank holding 8 experts.
  PreflightOptions o;
  o.deployment = {8, 8, 1};
  o.engines = {"vllm"};
  auto v = preflight(tmp.str(), o);
  EXPECT_TRUE(v.loads()) << describe(v.findings);
  EXPECT_NE(messages(v, "PREFLIGHT_EP_UNEVEN").find("the largest rank holding 8"), std::string::npos);
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

// gpt-oss-120b's published config: 128 MXFP4 experts of intermediate 2880 (90 groups of 32).
constexpr const char* kGptOss120b = R"({"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
  "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36, "num_attention_heads": 64,
  "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": 128, "experts_per_token": 4,
  "vocab_size": 201088, "tie_word_embeddings": false, "swiglu_limit": 7.0, "sliding_window": 128,
  "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
    "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}})";

TEST(PreflightMxfp4, ARankSliceThatBreaksA32ColumnGroupIsBlockingWithTheDegreesThatKeepWholeGroups) {
  // DeepSeek-V4's MXFP4 experts (the seed's tiny layout: moe_intermediate_size 128) are split
  // evenly: at tp 8 a rank holds 16 columns, half a group.
  auto r = run_at(test::fixture("oracle/dsv4-tiny"), 8);
  const std::string m = messages(r, "PREFLIGHT_MX_GROUP");
  EXPECT_NE(m.find("FusedMoE w2 (routed experts) (w2): input columns 128 / tp 8 = 16, not a multiple of the MXFP4 group 32"),
            std::string::npos) << describe(r.findings);
  EXPECT_NE(m.find("--tp 1, --tp 2, --tp 4"), std::string::npos) << m;
  EXPECT_NE(m.find("ckpt convert --experts bf16"), std::string::npos) << m;
  for (const auto& g : run_at(test::fixture("oracle/dsv4-tiny"), 1).working) EXPECT_LE(g.tp, 4u) << g.tp;
  EXPECT_FALSE(run_at(test::fixture("oracle/dsv4-tiny"), 4).findings.has_code("PREFLIGHT_MX_GROUP"));
}

TEST(PreflightMxfp4, GptOssAtTp8IsSplitByWholeGroupsAndEachEnginesPaddingIsInformationWithItsSource) {
  test::TempDir tmp;
  test::write_text(tmp.str("config.json"), kGptOss120b);
  auto r = run_at(tmp.str(), 8);
  EXPECT_TRUE(r.loads()) << describe(r.findings);
  EXPECT_FALSE(r.findings.has_code("PREFLIGHT_MX_GROUP"));
  std::string vllm, sglang;
  for (const auto& f : r.findings.items())
    if (f.code == "PREFLIGHT_MXFP4_PADDING") {
      EXPECT_EQ(f.severity, Severity::info);
      (f.message.find("; vllm pads") != std::string::npos ? vllm : sglang) += f.message;
    }
  // 2880 / 8 = 360 columns is 11.25 groups: both engines give a rank 12 whole groups.
  for (const std::string* m : {&vllm, &sglang})
    EXPECT_NE(m->find("input columns 2880 / tp 8 is not whole 32-column groups, and the engines split by whole "
                      "groups: 12 groups = 384 columns a rank"),
              std::string::npos) << *m;
  EXPECT_NE(vllm.find("Triton (default) 384, Marlin 384, FlashInfer CUTLASS 384, DeepGEMM 384, TRT-LLM 512, ROCm 512"),
            std::string::npos) << vllm;
  EXPECT_NE(vllm.find("fused_moe/oracle/mxfp4.py:655-687"), std::string::npos) << vllm;
  EXPECT_NE(sglang.find("triton_kernels 384, SM100 Triton 384, SM100 FlashInfer 512"), std::string::npos) << sglang;
  EXPECT_NE(sglang.find("python/sglang/srt/layers/quantization/mxfp4.py:321-357"), std::string::npos) << sglang;
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

constexpr uint64_t kGiB141 = uint64_t{141} << 30;

PreflightReport with_memory(const std::string& path, uint32_t tp, const std::string& kv_dtype = "auto",
                            uint64_t max_len = 0, uint32_t ep = 1) {
  PreflightOptions o;
  o.deployment = {tp, ep, 1};
  o.gpu_memory = kGiB141;
  o.kv_cache_dtype = kv_dtype;
  o.max_model_len = max_len;
  return preflight(path, o);
}

TEST(PreflightKvCache, WhatTheWeightsLeaveIsReportedAsTokensOfKvCacheFromTheConfig) {
  // Qwen3-235B: 94 layers, 4 KV heads of 128. At tp 4 one head a rank; at tp 8 still one (replicated).
  for (uint32_t tp : {4u, 8u}) {
    auto r = with_memory(test::fixture("preflight/qwen3-235b-a22b-fp8"), tp);
    ASSERT_TRUE(r.kv.modelled);
    EXPECT_EQ(r.kv.bytes_per_token, 94u * 1 * 128 * 2 * 2) << tp;
    if (r.rank_bytes < kGiB141) {
      EXPECT_EQ(r.kv.tokens, (kGiB141 - r.rank_bytes) / r.kv.bytes_per_token);
      EXPECT_NE(messages(r, "PREFLIGHT_MEMORY_FITS").find(std::to_string(r.kv.tokens) + " tokens of KV cache at 48128 bytes"),
                std::string::npos) << describe(r.findings);
    }
  }
  // At tp 2 the two KV heads a rank double it; an FP8 cache halves it.
  EXPECT_EQ(with_memory(test::fixture("preflight/qwen3-235b-a22b-fp8"), 2).kv.bytes_per_token, 94u * 2 * 128 * 2 * 2);
  EXPECT_EQ(with_memory(test::fixture("preflight/qwen3-235b-a22b-fp8"), 4, "fp8").kv.bytes_per_token, 94u * 128 * 2);
  // The JSON report carries it.
  const std::string json = preflight_json(with_memory(test::fixture("preflight/qwen3-235b-a22b-fp8"), 4));
  EXPECT_NE(json.find("\"bytes_per_token\":48128"), std::string::npos) << json.substr(json.find("kv_cache"), 300);
}

// Weights that fit but leave less KV cache than one sequence of --max-model-len: engines
// refuse to start (vLLM's KV-cache memory check), so it blocks; a length that fits loads.
TEST(PreflightKvCache, LessKvCacheThanOneSequenceOfMaxModelLenIsBlocking) {
  const std::string path = test::fixture("preflight/qwen3-235b-a22b-fp8");
  auto fits = with_memory(path, 4, "auto", 32768);
  EXPECT_TRUE(fits.loads()) << describe(fits.findings);
  EXPECT_GT(fits.kv.sequences, 0u);
  auto too_long = with_memory(path, 4, "auto", fits.kv.tokens + 1);
  EXPECT_FALSE(too_long.loads());
  EXPECT_NE(messages(too_long, "PREFLIGHT_MEMORY").find("less than one sequence of --max-model-len"), std::string::npos)
      << describe(too_long.findings);
  auto absurd = with_memory(path, 4, "auto", UINT64_MAX);
  EXPECT_FALSE(absurd.loads());
}

TEST(PreflightKvCache, MlaCachesTheLatentAndRopeDimensionsUnsplitByTp) {
  for (uint32_t tp : {16u, 32u}) {
    auto r = with_memory(test::fixture("preflight/deepseek-r1-bf16"), tp);
    EXPECT_EQ(r.kv.bytes_per_token, 61u * (512 + 64) * 2) << tp;
    EXPECT_NE(r.kv.how.find("not split by tp"), std::string::npos) << r.kv.how;
  }
}

TEST(PreflightKvCache, AHybridsLinearAttentionLayersHoldAFixedStateInsteadOfKv) {
  auto r = with_memory(test::fixture("preflight/qwen3.5-397b-a17b-fp8"), 8, "auto", 32768, 8);
  ASSERT_TRUE(r.kv.modelled);
  EXPECT_EQ(r.kv.attention_layers, 15u);  // every 4th of 60
  EXPECT_EQ(r.kv.bytes_per_token, 15u * 1 * 256 * 2 * 2);
  EXPECT_EQ(r.kv.state_layers, 45u);
  // conv window (q, k of 16 x 128, v of 64 x 128) / 8 x 3, recurrent 64 / 8 x 128 x 128, BF16.
  EXPECT_EQ(r.kv.state_bytes_per_sequence, 45u * ((2 * 16 * 128 + 64 * 128) / 8 * 3 + 64 / 8 * 128 * 128) * 2);
  ASSERT_LT(r.rank_bytes, kGiB141);
  EXPECT_EQ(r.kv.sequences, (kGiB141 - r.rank_bytes) / (32768 * r.kv.bytes_per_token + r.kv.state_bytes_per_sequence));
  EXPECT_NE(r.kv.how.find("fixed state"), std::string::npos);
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

// A tiny Qwen3.5-MoE release in BF16, as its checkpoints are laid out: the language model
// under model.language_model.*, fused routed experts, a vision tower and an MTP layer beside it.
constexpr const char* kTinyQwen3_5 = R"({"architectures": ["Qwen3_5MoeForConditionalGeneration"],
  "model_type": "qwen3_5_moe", "tie_word_embeddings": false, "vision_config": {"depth": 1},
  "text_config": {"model_type": "qwen3_5_moe_text", "hidden_size": 256, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 128, "num_experts": 8, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_key_head_dim": 64, "linear_value_head_dim": 64,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "vocab_size": 1024, "tie_word_embeddings": false}})";

TEST(PreflightHybrid, AQwen3_5CheckpointWithItsVisionTowerAgreesWithItsConfigAlone) {
  test::TempDir tmp;
  const std::string full = tmp.str("full"), cfg = tmp.str("cfg");
  std::filesystem::create_directories(full);
  std::filesystem::create_directories(cfg);
  test::write_text(cfg + "/config.json", kTinyQwen3_5);
  std::vector<DeployTensor> tensors = test::tensors_of_config(kTinyQwen3_5);
  ASSERT_FALSE(tensors.empty());
  tensors.push_back({"model.visual.blocks.0.attn.qkv.weight", "BF16", {48, 16}, 48 * 16 * 2});
  tensors.push_back({"mtp.fc.weight", "BF16", {256, 512}, 256 * 512 * 2});
  test::write_zero_checkpoint(full, kTinyQwen3_5, tensors);
  {
    // A hostile layer count in config.json beside these headers: a finding, and nothing is
    // allocated per layer for the KV cache.
    test::TempDir bad;
    std::filesystem::copy_file(full + "/model.safetensors", bad.str("model.safetensors"));
    std::string text = kTinyQwen3_5;
    text.replace(text.find("\"num_hidden_layers\": 4"), 22, "\"num_hidden_layers\": 1099511627776");
    test::write_text(bad.str("config.json"), text);
    PreflightOptions o;
    o.gpu_memory = uint64_t{80} << 30;
    auto r = preflight(bad.str(), o);
    EXPECT_TRUE(r.findings.has_code("PREFLIGHT_CONFIG_MISMATCH")) << describe(r.findings);
    EXPECT_FALSE(r.kv.modelled);
  }
  for (uint32_t tp : {1u, 2u}) {
    auto h = run_at(full, tp), c = run_at(cfg, tp);
    EXPECT_FALSE(h.config_only);
    EXPECT_TRUE(c.config_only);
    EXPECT_FALSE(h.findings.has_code("PREFLIGHT_CONFIG_MISMATCH")) << describe(h.findings);
    EXPECT_TRUE(h.loads()) << describe(h.findings);
    EXPECT_EQ(h.loads(), c.loads());
    ASSERT_EQ(h.modules.size(), c.modules.size());
    for (size_t i = 0; i < h.modules.size(); ++i) {
      EXPECT_EQ(h.modules[i].names, c.modules[i].names);
      EXPECT_EQ(h.modules[i].rank_rows, c.modules[i].rank_rows) << h.modules[i].names;
      EXPECT_EQ(h.modules[i].rank_cols, c.modules[i].rank_cols) << h.modules[i].names;
    }
    // The fused BF16 experts: [8, 2 x 128, 256] gate_up, [8, 256, 128] down, split by tp.
    const PreflightModule* down = module_named(c, "down_proj");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->rank_cols, 128u / tp);
    EXPECT_EQ(down->experts, 8u);
  }
}

}  // namespace
}  // namespace ckpt

