// golden/: the fixtures' conversions (golden/cases.tsv) must hash exactly as the checked-in
// manifests say (make golden-update regenerates them), and one flipped byte in a converted
// output is named by every tool: the golden check, `ckpt diff` and `ckpt hash --check`.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "test_util.h"

namespace ckpt {
namespace {

const auto q = test::shell_quote;

std::string golden(const std::string& rel) { return std::string(CKPT_SOURCE_DIR) + "/golden/" + rel; }

struct GoldenCase {
  std::string name, command, fixture;
};

std::vector<GoldenCase> golden_cases() {
  std::ifstream in(golden("cases.tsv"));
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    GoldenCase c;
    std::getline(fields, c.name, '\t');
    std::getline(fields, c.command, '\t');
    std::getline(fields, c.fixture, '\t');
    cases.push_back(c);
  }
  return cases;
}

TEST(Golden, ConversionsOfTheFixturesMatchTheirManifests) {
  const auto cases = golden_cases();
  ASSERT_EQ(cases.size(), 5u);
  test::TempDir tmp;
  for (const auto& c : cases) {
    const std::string out = tmp.str(c.name);
    // From the fixtures directory, as golden/update.sh runs it: a pack's manifest.json
    // (hashed like every file of the output) records the source path as given.
    auto conv = test::run_ckpt_env("", c.command + " " + q(c.fixture) + " " + q(out), "cd " + q(test::fixture("")) + " && ");
    ASSERT_EQ(conv.exit_code, 0) << c.name << ": " << conv.err;
    auto check = test::run_ckpt("hash -q --check " + q(golden(c.name + ".json")) + " " + q(out));
    EXPECT_EQ(check.exit_code, 0) << c.name << ":\n" << check.out << check.err;
    EXPECT_TRUE(check.out.empty()) << check.out;
  }
}

std::string num(float v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

float bf16_value(uint8_t lo, uint8_t hi) {
  const uint32_t bits = (uint32_t{hi} << 24) | (uint32_t{lo} << 16);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST(Golden, OneFlippedByteIsNamedByTheGoldenCheckDiffAndHashCheck) {
  test::TempDir tmp;
  const std::string out = tmp.str("out");
  ASSERT_EQ(test::run_ckpt("convert -q --experts keep " + q(test::fixture("oracle/dsv4-tiny")) + " " + q(out)).exit_code, 0);
  const std::string tensor = "layers.0.attn.wq_a.weight";  // BF16 [128, 256], converted from FP8
  const uint64_t element = 1000;
  std::string shard;
  float before = 0, after = 0;
  {
    auto m = test::load_model_checked(out);
    const ModelTensor* t = m->view.find(tensor);
    ASSERT_TRUE(t);
    shard = m->view.file_of(*t);
    const std::string path = out + "/" + shard;
    auto bytes = test::read_file(path);
    const uint64_t at = t->offset + 2 * element + 1;  // the high byte of element 1000
    before = bf16_value(bytes[at - 1], bytes[at]);
    bytes[at] ^= 0x01;
    after = bf16_value(bytes[at - 1], bytes[at]);
    test::write_file(path, bytes);
  }
  ASSERT_NE(before, after);

  // 1. The golden check fails.
  auto check = test::run_ckpt("hash --check " + q(golden("dsv4-tiny.keep.json")) + " " + q(out));
  EXPECT_EQ(check.exit_code, 1) << check.out << check.err;

  // 2. hash --check: FAILED for the tensor, its shard and the whole model; OK for every other line.
  std::istringstream lines(check.out);
  std::string line;
  size_t ok = 0, failed = 0;
  while (std::getline(lines, line)) {
    const std::string name = line.substr(0, line.rfind(": "));
    if (name == tensor || name == shard || name == "(model)") {
      EXPECT_EQ(line, name + ": FAILED");
      ++failed;
    } else {
      EXPECT_EQ(line, name + ": OK");
      ++ok;
    }
  }
  EXPECT_EQ(failed, 3u);
  // 12 files (7 shards, config, generation config, index, 2 tokenizer files), 374 tensors.
  EXPECT_EQ(ok, (12u - 1u) + (374u - 1u));
  EXPECT_NE(check.err.find("3 of 387 computed checksums did NOT match"), std::string::npos) << check.err;

  // 3. ckpt diff against the peer converter's output (right on every tensor): that tensor,
  // that element, both values.
  auto diff = test::run_ckpt("diff " + q(test::fixture("oracle/dsv4-tiny.qw-bf16")) + " " + q(out));
  EXPECT_EQ(diff.exit_code, 1) << diff.out << diff.err;
  EXPECT_NE(diff.out.find(tensor + ": values differ (BF16 [128,256], " + shard + "): 1 of 32768 elements; first at byte " +
                          std::to_string(2 * element + 1) + ", element " + std::to_string(element) + ": A " +
                          num(before) + ", B " + num(after)),
            std::string::npos)
      << diff.out;
  EXPECT_NE(diff.out.find("DIFFERENT: 374 tensors compared, 373 identical, 1 with different values"), std::string::npos)
      << diff.out;
}

}  // namespace
}  // namespace ckpt
