// ckpt preflight (libconvert/deploy/preflight.h) from config.json alone with the public
// dimensions (tests/fixtures/preflight/), against the headers (tests/fixtures/families,
// oracle/dsv4-tiny), and the silent shared-scale-row case.
#include <filesystem>

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "deploy/config_tensors.h"
#include "deploy/preflight.h"
#include "formats/json.h"
#include "model/quant_scheme.h"
#include "deploy/config_checkpoint.h"
#include "test_util.h"

namespace ckpt {
namespace {

using test::describe;

PreflightReport run(const std::string& path, uint32_t tp, uint32_t ep = 1, uint64_t memory = 0,
                    std::vector<std::string> engines = {}, const std::string& gpu = "") {
  PreflightOptions o;
  o.deployment = {tp, ep, 1};
  o.gpu_memory = memory;
  o.engines = std::move(engines);
  o.gpu = gpu;
  return preflight(path, o);
}

std::string messages(const PreflightReport& r, const std::string& code) {
  std::string out;
  for (const auto& f : r.findings.items())
    if (f.code == code) out += f.message + "\n";
  return out;
}

std::string pub(const std::string& name) { return test::fixture("preflight/" + name); }

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(Preflight, Qwen3_235B_Fp8FromConfigFailsAtTp8Naming192And128) {
  auto r = run(pub("qwen3-235b-a22b-fp8"), 8);
  EXPECT_TRUE(r.config_only);
  EXPECT_FALSE(r.loads());
  EXPECT_EQ(preflight_outcome(r), Outcome::findings);
  const std::string m = messages(r, "PREFLIGHT_BLOCK_DIVISIBILITY");
  EXPECT_NE(m.find("moe_intermediate_size 1536 / tp 8 = 192, not a multiple of block_n 128"), std::string::npos) << m;
  EXPECT_NE(m.find("layers 0-93"), std::string::npos) << m;  // every affected layer
  EXPECT_NE(m.find("FusedMoE w13"), std::string::npos) << m;  // the module class
  EXPECT_NE(m.find("The output_size of gate's and up's weight = 192 is not divisible by weight quantization block_n = 128"),
            std::string::npos) << m;
  EXPECT_NE(m.find("vllm"), std::string::npos);
  EXPECT_NE(m.find("sglang"), std::string::npos);
  // down_proj's input columns: block_k.
  EXPECT_NE(m.find("/ tp 8 = 192, not a multiple of block_k 128"), std::string::npos) << m;
  // The fix: degrees that work, relayout with its cost, convert.
  EXPECT_NE(m.find("--tp 4"), std::string::npos) << m;
  EXPECT_NE(m.find("--tp 8 --ep 8"), std::string::npos) << m;
  EXPECT_NE(m.find("ckpt relayout --tp 8"), std::string::npos) << m;
  // down_proj's 192 columns a rank need block_k 64 too (and the plan says so).
  EXPECT_NE(m.find("re-block to 64x64"), std::string::npos) << m;
  EXPECT_NE(m.find("block_k changes"), std::string::npos) << m;
  EXPECT_NE(m.find("ckpt convert"), std::string::npos) << m;
  // Attention is fine at TP 8 (4 KV heads: one of 128 rows a rank).
  EXPECT_EQ(m.find("k_proj"), std::string::npos) << m;
}

TEST(Preflight, Qwen3_235B_Fp8FromConfigLoadsAtTp4AndAtTp8Ep8) {
  auto r4 = run(pub("qwen3-235b-a22b-fp8"), 4);
  EXPECT_TRUE(r4.loads()) << describe(r4.findings);
  auto r8 = run(pub("qwen3-235b-a22b-fp8"), 8, 8);
  EXPECT_TRUE(r8.loads()) << describe(r8.findings);
  EXPECT_EQ(preflight_outcome(r8), Outcome::ok);
  // Under EP 8 each rank holds 16 whole experts of 1536 rows; attention stays split by TP 8.
  bool seen = false;
  for (const auto& m : r8.modules)
    if (m.names == "gate_proj") {
      seen = true;
      EXPECT_EQ(m.experts, 128u);
      EXPECT_EQ(m.experts_per_rank, 16u);
      EXPECT_EQ(m.rank_rows, 1536u);
      EXPECT_EQ(m.layers.size(), 94u);
      EXPECT_EQ(m.tensors, 94u * 128u);
    } else if (m.names == "q_proj") {
      EXPECT_EQ(m.rank_rows, 1024u);
    }
  EXPECT_TRUE(seen);
}

TEST(Preflight, Qwen3_30B_Fp8FromConfigFailsAtTp4Naming192AndLoadsAtTp2) {
  auto r4 = run(pub("qwen3-30b-a3b-fp8"), 4);
  EXPECT_FALSE(r4.loads());
  EXPECT_NE(messages(r4, "PREFLIGHT_BLOCK_DIVISIBILITY").find("moe_intermediate_size 768 / tp 4 = 192, not a multiple of block_n 128"),
            std::string::npos) << describe(r4.findings);
  auto r2 = run(pub("qwen3-30b-a3b-fp8"), 2);
  EXPECT_TRUE(r2.loads()) << describe(r2.findings);
}

TEST(Preflight, DeepSeekR1Fp8FromConfigFailsAtTp32Naming576AndLoadsAtTp16) {
  auto r32 = run(pub("deepseek-r1-fp8"), 32);
  EXPECT_FALSE(r32.loads());
  const std::string all = describe(r32.findings);
  EXPECT_NE(all.find("intermediate_size 18432 / tp 32 = 576, not a multiple of block_n 128"), std::string::npos) << all;
  EXPECT_NE(all.find("layers 0-2"), std::string::npos) << all;  // the three dense layers
  // vLLM refuses down_proj's 576 columns; SGLang also the merged gate/up rows.
  EXPECT_NE(messages(r32, "PREFLIGHT_BLOCK_DIVISIBILITY").find("input_size_per_partition = 576"), std::string::npos) << all;
  auto r16 = run(pub("deepseek-r1-fp8"), 16);
  EXPECT_TRUE(r16.loads()) << describe(r16.findings);
}

TEST(Preflight, DeepSeekR1Bf16FromConfigLoadsAtTp32) {
  auto r = run(pub("deepseek-r1-bf16"), 32);
  EXPECT_TRUE(r.loads()) << describe(r.findings);
  EXPECT_EQ(r.block_n, 0u);
}

TEST(Preflight, Qwen3_235BWeightsDoNotFitAtTp2In80GAndFitAtTp4In141G) {
  auto r2 = run(pub("qwen3-235b-a22b-fp8"), 2, 1, 80 * kGiB);
  EXPECT_FALSE(r2.loads());
  const std::string m = messages(r2, "PREFLIGHT_MEMORY");
  EXPECT_NE(m.find("does not fit"), std::string::npos) << describe(r2.findings);
  EXPECT_NE(m.find("Fix: --tp 4 ("), std::string::npos) << m;  // the next degree that loads and fits
  // 94 layers of 128 experts x 3 x 1536 x 4096 FP8 bytes alone are 227,066,462,208 bytes:
  // half of them, plus attention and the vocab shards, on each of 2 ranks.
  EXPECT_GT(r2.rank_bytes, 227066462208ull / 2);
  EXPECT_LT(r2.rank_bytes, 125ull * 1000 * 1000 * 1000);
  auto r4 = run(pub("qwen3-235b-a22b-fp8"), 4, 1, 141 * kGiB);
  EXPECT_TRUE(r4.loads()) << describe(r4.findings);
  EXPECT_TRUE(r4.findings.has_code("PREFLIGHT_MEMORY_FITS"));
  EXPECT_GT(r4.rank_bytes, 227066462208ull / 4);
  EXPECT_LT(r4.rank_bytes, 62ull * 1000 * 1000 * 1000);
  // The total is every tensor's bytes: the published checkpoint is about 236 GB.
  EXPECT_GT(r4.total_bytes, 234ull * 1000 * 1000 * 1000);
  EXPECT_LT(r4.total_bytes, 240ull * 1000 * 1000 * 1000);
}

TEST(Preflight, UnknownGpuOrEpNotDividingTpIsAUsageError) {
  EXPECT_EQ(preflight_outcome(run(pub("qwen3-30b-a3b-fp8"), 4, 3)), Outcome::usage);
  EXPECT_EQ(preflight_outcome(run(pub("qwen3-30b-a3b-fp8"), 2, 1, 0, {}, "sm42")), Outcome::usage);
  EXPECT_EQ(preflight_outcome(run(pub("qwen3-30b-a3b-fp8"), 2, 1, 0, {"tensorrt"})), Outcome::usage);
}

TEST(Preflight, AMissingCheckpointIsAnIoError) {
  EXPECT_EQ(preflight_outcome(run("/nonexistent/ckpt", 2)), Outcome::io);
}

// A directory with the checkpoint's config and one shard holding every tensor the config
// implies (zero bytes): the headers path, with a model the test chooses.
void write_checkpoint(const std::string& dir, const std::string& config) {
  test::write_zero_checkpoint(dir, config, test::tensors_of_config(config));
}

// A Qwen3 dense model whose K and V (one KV head of 32 rows) are narrower than the 128-row
// block: the engine's merged QKV scale grid puts K's and V's scales in one row.
const char* kNarrowKvConfig = R"({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
  "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 1,
  "head_dim": 32, "num_hidden_layers": 2, "vocab_size": 64, "tie_word_embeddings": false,
  "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                          "weight_block_size": [128, 128]}})";

TEST(Preflight, AMergedQkvWhoseKvPartsAreNarrowerThanABlockIsReportedSilentlyWrong) {
  test::TempDir tmp;
  write_checkpoint(tmp.str("ckpt"), kNarrowKvConfig);
  for (bool config_only : {false, true}) {
    std::string path = tmp.str("ckpt");
    if (config_only) {
      std::filesystem::create_directories(tmp.str("cfg"));
      test::write_text(tmp.str("cfg/config.json"), kNarrowKvConfig);
      path = tmp.str("cfg");
    }
    auto r = run(path, 1, 1, 0, {"vllm"});
    EXPECT_EQ(r.config_only, config_only);
    const std::string m = messages(r, "PREFLIGHT_SCALE_ROW_SHARED");
    EXPECT_NE(m.find("SILENTLY WRONG"), std::string::npos) << describe(r.findings);
    EXPECT_NE(m.find("k_proj"), std::string::npos) << m;
    EXPECT_NE(m.find("32, not a multiple of block_n 128"), std::string::npos) << m;
    EXPECT_NE(m.find("vllm"), std::string::npos) << m;
    EXPECT_FALSE(r.loads());
    // SGLang checks every part and refuses it at start-up instead (the loud finding).
    auto s = run(path, 1, 1, 0, {"sglang"});
    EXPECT_FALSE(s.findings.has_code("PREFLIGHT_SCALE_ROW_SHARED"));
    EXPECT_TRUE(s.findings.has_code("PREFLIGHT_BLOCK_DIVISIBILITY")) << describe(s.findings);
    // transformers keeps q, k, v apart, each with its own scale: nothing shared.
    EXPECT_TRUE(run(path, 1, 1, 0, {"transformers"}).loads());
    // Asked of all three, each engine's answer is its own.
    auto all = run(path, 1, 1, 0, {"vllm", "sglang", "transformers"});
    ASSERT_EQ(all.per_engine.size(), 3u);
    EXPECT_FALSE(all.per_engine[0].loads);
    EXPECT_EQ(all.per_engine[0].why, "PREFLIGHT_SCALE_ROW_SHARED");
    EXPECT_FALSE(all.per_engine[1].loads);
    EXPECT_EQ(all.per_engine[1].why, "PREFLIGHT_BLOCK_DIVISIBILITY");
    EXPECT_TRUE(all.per_engine[2].loads);
  }
}

TEST(Preflight, AFusedQkvTensorWhoseKvSegmentsAreNarrowerThanABlockIsReportedSilentlyWrong) {
  std::string config = kNarrowKvConfig;
  config.replace(config.find("\"qwen3\""), 7, "\"phi3\"");
  test::TempDir tmp;
  write_checkpoint(tmp.str("ckpt"), config);
  auto r = run(tmp.str("ckpt"), 1, 1, 0, {"vllm"});
  const std::string m = messages(r, "PREFLIGHT_SCALE_ROW_SHARED");
  EXPECT_NE(m.find("qkv_proj"), std::string::npos) << describe(r.findings);
  EXPECT_NE(m.find("k part: num_key_value_heads 1 x head_dim 32 = 32, not a multiple of block_n 128"), std::string::npos) << m;
}

TEST(Preflight, AConfigThatDisagreesWithTheHeadersIsAFinding) {
  test::TempDir tmp;
  write_checkpoint(tmp.str("ckpt"), kNarrowKvConfig);
  EXPECT_FALSE(run(tmp.str("ckpt"), 1, 1, 0, {"transformers"}).findings.has_code("PREFLIGHT_CONFIG_MISMATCH"));
  std::string wrong = kNarrowKvConfig;
  wrong.replace(wrong.find("\"intermediate_size\": 256"), 24, "\"intermediate_size\": 384");
  test::write_text(tmp.str("ckpt/config.json"), wrong);
  auto r = run(tmp.str("ckpt"), 1, 1, 0, {"transformers"});
  const std::string m = messages(r, "PREFLIGHT_CONFIG_MISMATCH");
  EXPECT_NE(m.find("model.layers.0.mlp.gate_proj.weight is [256, 128] in the headers, [384, 128] from config.json"),
            std::string::npos) << describe(r.findings);
  EXPECT_FALSE(r.loads());
}

// The config alone and the full checkpoint give the same answer on every fixture family.
TEST(Preflight, ConfigOnlyAndFullCheckpointAgreeOnEveryFixtureFamily) {
  for (const char* fam : {"families/dsv3-fp8/in", "families/qwen3moe-fp8/in", "families/gptoss-mxfp4/in", "oracle/dsv4-tiny"}) {
    SCOPED_TRACE(fam);
    test::TempDir tmp;
    std::filesystem::copy_file(test::fixture(std::string(fam) + "/config.json"), tmp.str("config.json"));
    std::filesystem::copy_file(test::fixture(std::string(fam) + "/model.safetensors.index.json"),
                               tmp.str("model.safetensors.index.json"));
    for (uint32_t tp : {1u, 2u, 4u})
      for (const char* gpu : {"", "sm80", "sm90"}) {
        SCOPED_TRACE("tp " + std::to_string(tp) + " gpu " + gpu);
        auto full = run(test::fixture(fam), tp, 1, 0, {}, gpu);
        auto cfg = run(tmp.str(), tp, 1, 0, {}, gpu);
        EXPECT_FALSE(full.config_only);
        EXPECT_TRUE(cfg.config_only);
        EXPECT_FALSE(full.findings.has_code("PREFLIGHT_CONFIG_MISMATCH")) << describe(full.findings);
        EXPECT_EQ(full.loads(), cfg.loads()) << describe(full.findings) << "\n" << describe(cfg.findings);
        ASSERT_EQ(full.findings.items().size(), cfg.findings.items().size())
            << describe(full.findings) << "\n" << describe(cfg.findings);
        for (size_t i = 0; i < full.findings.items().size(); ++i)
          EXPECT_EQ(full.findings.items()[i].code, cfg.findings.items()[i].code);
        ASSERT_EQ(full.modules.size(), cfg.modules.size());
        for (size_t i = 0; i < full.modules.size(); ++i) {
          EXPECT_EQ(full.modules[i].cls, cfg.modules[i].cls);
          EXPECT_EQ(full.modules[i].format, cfg.modules[i].format);
          EXPECT_EQ(full.modules[i].tensors, cfg.modules[i].tensors);
          EXPECT_EQ(full.modules[i].rank_rows, cfg.modules[i].rank_rows);
          EXPECT_EQ(full.modules[i].rank_cols, cfg.modules[i].rank_cols);
        }
        EXPECT_EQ(full.kernels.size(), cfg.kernels.size());
        // Only small non-linear tensors' dtypes can differ (a router bias saved in BF16 by
        // transformers, F32 in the release): the bytes per rank agree within 0.5%.
        EXPECT_NEAR(static_cast<double>(full.rank_bytes), static_cast<double>(cfg.rank_bytes), full.rank_bytes * 0.005);
      }
  }
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

// A hostile config cannot make preflight allocate a model no GPU could hold.
// A directory holding only a config.json that cannot be read (a duplicate key, nesting past
// the limit) is still config-only mode: the config's own error is the answer, not "no shards".
// A K/V projection whose rows happen to equal moe_intermediate_size is not said to be that
// size: a division names the config key only for the modules made from it.
TEST(Preflight, ADivisionNamesAConfigKeyOnlyForTheModulesMadeFromIt) {
  test::TempDir tmp;
  test::write_text(tmp.str("config.json"), test::read_text(test::fixture("families/qwen3moe-fp8/in/config.json")));
  PreflightOptions o;
  o.deployment = {2, 1, 1};
  auto r = preflight(tmp.str(), o);
  bool saw_kv = false;
  for (const auto& f : r.findings.items()) {
    if (f.code != "PREFLIGHT_BLOCK_DIVISIBILITY" || f.message.find("k_proj") == std::string::npos) continue;
    saw_kv = true;
    EXPECT_EQ(f.message.find("intermediate_size"), std::string::npos) << f.message;
    EXPECT_NE(f.message.find("output rows "), std::string::npos) << f.message;
  }
  EXPECT_TRUE(saw_kv) << describe(r.findings);
}

// A shard that is there but cannot be read (a FIFO) is an error, never taken for a
// config-only download.
TEST(Preflight, AShardThatIsAFifoIsAnErrorNotAConfigOnlyDirectory) {
  test::TempDir tmp;
  test::write_text(tmp.str("config.json"), test::read_text(test::fixture("families/qwen3moe-fp8/in/config.json")));
  ASSERT_EQ(::mkfifo(tmp.str("model.safetensors").c_str(), 0600), 0);
  auto r = preflight(tmp.str(), PreflightOptions{});
  EXPECT_TRUE(r.findings.has_code("IO_NOT_REGULAR")) << describe(r.findings);
  EXPECT_EQ(preflight_outcome(r), Outcome::io);
}

TEST(Preflight, AnUnreadableConfigAloneIsItsOwnErrorNotAMissingShard) {
  for (const std::string& text : {std::string(R"({"model_type": "qwen3_moe", "model_type": "llama"})"),
                                 std::string(300, '[') + std::string(300, ']')}) {
    test::TempDir tmp;
    test::write_text(tmp.str("config.json"), text);
    auto r = preflight(tmp.str(), PreflightOptions{});
    EXPECT_TRUE(r.config_only);
    EXPECT_TRUE(r.findings.has_code("CFG_PARSE")) << describe(r.findings);
    EXPECT_FALSE(r.findings.has_code("CKPT_NO_SHARDS")) << describe(r.findings);
    EXPECT_EQ(preflight_outcome(r), Outcome::findings);
  }
}

TEST(Preflight, AConfigDescribingAnImpossiblyLargeModelIsRefusedNotAllocated) {
  struct Case {
    const char *layers, *experts, *hidden;
  };
  for (const Case c : {Case{"2000000000", "128", "4096"}, Case{"16000000", "16000000", "4096"},
                       Case{"94", "128", "9007199254740993"}}) {
    SCOPED_TRACE(std::string(c.layers) + " " + c.experts + " " + c.hidden);
    test::TempDir tmp;
    const std::string config = std::string(R"({"model_type": "qwen3_moe", "hidden_size": )") + c.hidden +
                               R"(, "num_hidden_layers": )" + c.layers + R"(, "num_experts": )" + c.experts +
                               R"(, "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
      "moe_intermediate_size": 1536, "vocab_size": 151936})";
    test::write_text(tmp.str("config.json"), config);
    auto r = preflight(tmp.str(), PreflightOptions{});
    EXPECT_TRUE(r.findings.has_code("PREFLIGHT_CONFIG_KEY")) << describe(r.findings);
    EXPECT_EQ(preflight_outcome(r), Outcome::findings);
    EXPECT_LE(r.tensors, kMaxDerivedTensors);
  }
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

// Qwen3-Next's hybrid layers: a GatedDeltaNet in_proj_ba of 2 x 32 value heads = 64 rows is
// 8 rows a rank at TP 8 (the shape of sgl-project/sglang#19045's Qwen3.5 failure).
TEST(Preflight, Qwen3NextGatedDeltaNetProjectionOfEightRowsARankIsRefused) {
  test::TempDir tmp;
  test::write_text(tmp.str("config.json"), R"({"model_type": "qwen3_next", "hidden_size": 2048,
    "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
    "intermediate_size": 5120, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    "num_experts": 512, "num_experts_per_tok": 10, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4, "vocab_size": 151936, "tie_word_embeddings": false,
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                            "weight_block_size": [128, 128]}})");
  auto r = run(tmp.str(), 8, 8);
  EXPECT_TRUE(r.config_only);
  const std::string m = messages(r, "PREFLIGHT_BLOCK_DIVISIBILITY");
  EXPECT_NE(m.find("ColumnParallelLinear in_proj_ba (GatedDeltaNet) in_proj_ba in layers 0-2, 4-6"), std::string::npos) << m;
  EXPECT_NE(m.find("output rows 64 / tp 8 = 8, not a multiple of block_n 128"), std::string::npos) << m;
  // The full-attention layers (every 4th) have no GatedDeltaNet.
  EXPECT_EQ(m.find("layers 0-3"), std::string::npos) << m;
  // 36 GatedDeltaNet layers, 12 attention layers; 512 experts x 3 in each of 48.
  size_t ba = 0, experts = 0;
  for (const auto& mod : r.modules) {
    if (mod.names == "in_proj_ba") ba = mod.tensors;
    if (mod.names == "gate_proj" && mod.split == Split::expert_column) experts = mod.tensors;
  }
  EXPECT_EQ(ba, 36u);
  EXPECT_EQ(experts, 48u * 512u);
}

TEST(Preflight, AGgufFileIsRefusedNotGuessed) {
  auto r = run(test::fixture("ggml/qwen3next-tiny.gguf"), 2);
  EXPECT_TRUE(r.findings.has_code("PREFLIGHT_GGUF")) << describe(r.findings);
  EXPECT_EQ(preflight_outcome(r), Outcome::usage);
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

TEST(Preflight, HeadsThatDoNotDivideByTpAreASplitFinding) {
  auto r = run(pub("qwen3-30b-a3b-fp8"), 64);
  const std::string m = messages(r, "PREFLIGHT_TP_SPLIT");
  EXPECT_NE(m.find("num_attention_heads 32 / tp 64 is not whole"), std::string::npos) << describe(r.findings);
  EXPECT_FALSE(r.loads());
}

}  // namespace
}  // namespace ckpt
