// The engines' rules as data (libconvert/deploy/engine_rules.h, schemas/deploy/*.json): each
// rule cites the engine code it mirrors, file and line, at a named revision.
#include <gtest/gtest.h>

#include <regex>

#include "deploy/engine_rules.h"
#include "deploy/partition_model.h"

namespace ckpt {
namespace {

// A citation of code: a repository, a 40-hex revision, a path and a line (or a range); or,
// for a rule about code that does not exist, the place searched and what is absent.
void expect_cited(const Citation& c, const std::string& what) {
  static const std::regex kRevision("[0-9a-f]{40}");
  EXPECT_FALSE(c.repo.empty()) << what;
  EXPECT_TRUE(std::regex_match(c.revision, kRevision)) << what << ": revision '" << c.revision << "'";
  EXPECT_FALSE(c.path.empty()) << what;
  if (c.absent.empty()) {
    EXPECT_TRUE(c.has_line()) << what << ": lines '" << c.lines << "'";
    EXPECT_FALSE(c.function.empty()) << what;
  }
}

TEST(EngineRules, EveryBlockAndKernelRuleCitesTheEngineFileAndLineForEachEngine) {
  const EngineRules& r = engine_rules();
  ASSERT_EQ(r.engines.size(), 3u);
  ASSERT_GE(r.block_rules.size(), 5u);
  ASSERT_GE(r.formats.size(), 6u);
  for (const auto& b : r.block_rules)
    for (const auto& e : r.engines) {
      auto it = b.citations.find(e);
      ASSERT_NE(it, b.citations.end()) << b.id << " " << e;
      expect_cited(it->second, b.id + " " + e);
      EXPECT_NE(b.sources.at(e).find(it->second.path), std::string::npos);
    }
  for (const auto& f : r.formats)
    for (const auto& e : r.engines) {
      auto it = f.citations.find(e);
      ASSERT_NE(it, f.citations.end()) << f.format << " " << e;
      expect_cited(it->second, f.format + " " + e);
    }
  // The refusing rules cite code, not an absence: the line a user can open.
  const Citation& w13 = r.block_rule("expert_column")->citations.at("vllm");
  EXPECT_EQ(w13.path, "vllm/model_executor/layers/quantization/fp8.py");
  EXPECT_TRUE(w13.absent.empty());
  EXPECT_NE(w13.text().find("fp8.py:634-640 Fp8MoEMethod.create_weights"), std::string::npos) << w13.text();
}

// transformers' MXFP4 test (quantizer_mxfp4.py, validate_environment) is the device's
// compute capability >= 7.5 alone; a ROCm build answers with the gfx version (9.0, 9.4,
// 11.0), so AMD takes the triton-kernels path as CUDA does (the data once said dequantize).
TEST(EngineRules, TransformersMxfp4OnAmdIsWhatItsCitedCodeSays) {
  const FormatKernels* mxfp4 = engine_rules().kernels("mxfp4");
  ASSERT_NE(mxfp4, nullptr);
  const auto& transformers = mxfp4->engines.at("transformers");
  for (const char* arch : {"sm80", "sm90", "gfx90a", "gfx942", "gfx1100"})
    EXPECT_EQ(transformers.at(arch).support, KernelSupport::native) << arch;
  EXPECT_EQ(mxfp4->citations.at("transformers").lines, "89-109");
}

TEST(EngineRules, EveryPartitionFamilyCitesTheEngineModelFileAndLine) {
  for (const auto& f : architecture_families()) {
    ASSERT_FALSE(f.citations.empty()) << f.family;
    for (const auto& c : f.citations) {
      expect_cited(c, f.family + " " + c.path);
      EXPECT_TRUE(c.absent.empty()) << f.family;
    }
  }
}

// block_sizes (relayout's --min-block default and its fallback notes) cite code like the
// rules: the line that sets each engine's Triton tile from the block, and the kernel choice.
TEST(EngineRules, EveryBlockSizeEntryCitesTheEngineFileAndLine) {
  const EngineRules& r = engine_rules();
  for (const auto& e : r.engines) {
    auto it = r.block_sizes.find(e);
    ASSERT_NE(it, r.block_sizes.end()) << e;
    const BlockSizes& b = it->second;
    expect_cited(b.citation, "block_sizes " + e);
    EXPECT_TRUE(b.citation.absent.empty()) << e;
    EXPECT_NE(b.source.find(b.citation.path + ":" + b.citation.lines), std::string::npos) << b.source;
    EXPECT_FALSE(b.also.empty()) << e << ": the kernel choice is cited too";
    for (const auto& c : b.also) expect_cited(c, "block_sizes " + e + " " + c.path);
  }
}

// Every engine's block-FP8 Triton kernels take their tiles from the block and tl.dot needs
// tiles of 16 or more: transformers' FP8Linear is no exception (it was recorded as 1x1).
TEST(EngineRules, EveryEngineNeedsABlockOfAtLeast16x16ForItsTritonTiles) {
  const EngineRules& r = engine_rules();
  for (const auto& e : r.engines) {
    const BlockSizes& b = r.block_sizes.at(e);
    EXPECT_EQ(b.min_n, 16u) << e;
    EXPECT_EQ(b.min_k, 16u) << e;
  }
  // transformers runs the one Triton kernel for every block: no faster block to name.
  EXPECT_EQ(r.block_sizes.at("transformers").full_n, 0u);
  EXPECT_EQ(r.block_sizes.at("vllm").full_n, 128u);
}

TEST(EngineRules, ALineRangeMustBeOrderedAndPositive) {
  Citation c;
  for (const char* ok : {"1", "634-640", "57-57"}) {
    c.lines = ok;
    EXPECT_TRUE(c.has_line()) << ok;
  }
  for (const char* bad : {"", "0", "640-634", "12-", "-3", "a-b", "12:14"}) {
    c.lines = bad;
    EXPECT_FALSE(c.has_line()) << bad;
  }
}

}  // namespace
}  // namespace ckpt
