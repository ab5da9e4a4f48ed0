// ConvertOptions::hash_inputs: every input shard hashed in the conversion's own pass over
// the disk (io/lockstep_hasher.h), and OUT left incomplete when an input changed while it
// was converted (`convert --expect-signature` / `--hub-sha256` rely on it).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "convert/convert.h"
#include "io/hash.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

TEST(ConvertInputIntegrity, EveryInputShardsSha256ComesWithTheConversion) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  ConvertOptions o;
  o.input = in;
  o.output = out;
  o.hash_inputs = true;
  size_t seen_before_finalize = 0;
  o.before_finalize = [&](ConvertReport& r) {
    seen_before_finalize = r.input_sha256.size();
    return true;
  };
  const ConvertReport r = convert_checkpoint(o);
  ASSERT_EQ(r.status, ConvertStatus::ok) << test::describe(r.findings);
  EXPECT_EQ(seen_before_finalize, 7u);
  ASSERT_EQ(r.input_sha256.size(), 7u);
  for (const auto& h : r.input_sha256) {
    EXPECT_EQ(h.error, "") << h.name;
    EXPECT_EQ(h.sha256, sha256_hex(test::read_text(in + "/" + h.name))) << h.name;
  }
  EXPECT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
}

// A shard written in place (same size) while the conversion runs: its hash and its
// conversion may have seen different bytes (and without a hash, its shards may mix old and
// new bytes), so OUT never claims to be complete, with or without hash_inputs.
class ConvertInputChanged : public ::testing::TestWithParam<bool> {};

TEST_P(ConvertInputChanged, AShardWrittenDuringTheConversionLeavesOutIncomplete) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  const std::string victim = in + "/model-00001-of-00007.safetensors";
  ConvertOptions o;
  o.input = in;
  o.output = out;
  o.hash_inputs = GetParam();
  bool written = false;
  o.progress = [&](uint64_t, uint64_t) {
    if (written) return;
    written = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the timestamp granularity
    std::vector<uint8_t> bytes = test::read_file(victim);
    bytes[bytes.size() - 1] ^= 1;
    test::write_file(victim, bytes);
  };
  bool finalize_asked = false;
  o.before_finalize = [&](ConvertReport&) { return finalize_asked = true; };
  const ConvertReport r = convert_checkpoint(o);
  EXPECT_TRUE(written);
  EXPECT_EQ(r.status, ConvertStatus::input_error) << test::describe(r.findings);
  EXPECT_NE(test::describe(r.findings).find("CONVERT_INPUT_CHANGED model-00001-of-00007.safetensors"),
            std::string::npos) << test::describe(r.findings);
  EXPECT_FALSE(finalize_asked);
  EXPECT_FALSE(fs::exists(out + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(out + "/config.json"));
}

INSTANTIATE_TEST_SUITE_P(HashInputs, ConvertInputChanged, ::testing::Bool());

}  // namespace
}  // namespace ckpt
