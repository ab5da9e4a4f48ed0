#include "profiles/qwen3next.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "formats/json.h"
#include "profiles/embedded.h"
#include "test_util.h"

namespace ckpt {
namespace {

const char* kFixture = "ggml/qwen3next-tiny.gguf";

struct Checked {
  Findings reader, profile;
  std::optional<GgufFile> g;
};

// Reads `bytes` as a GGUF file and runs the profile on it.
Checked check_bytes(const std::vector<uint8_t>& bytes) {
  test::TempDir dir;
  const std::string path = dir.str("q.gguf");
  test::write_file(path, bytes);
  MappedFile file;
  IoError err;
  Checked c;
  if (!file.open(path, err)) {
    ADD_FAILURE() << err.message;
    return c;
  }
  c.g = read_gguf(file, "q.gguf", c.reader);
  if (c.g) check_qwen3next(*c.g, file, "q.gguf", c.profile);
  return c;
}

std::string dump(const Findings& f) {
  std::string out;
  for (const Finding& x : f.items()) out += x.code + " " + x.tensor + ": " + x.message + "\n";
  return out;
}

struct Fixture {
  std::vector<uint8_t> bytes = test::read_file(test::fixture(kFixture));
  GgufFile g;
  Fixture() {
    Checked c = check_bytes(bytes);
    g = *c.g;
  }
  uint64_t data_of(const std::string& name) const { return g.data_start + g.find_tensor(name)->offset; }
  uint64_t kv_value_at(const std::string& key) const {
    const GgufKV* kv = g.find_kv(key);
    return kv->offset + 8 + kv->key.size() + 4;
  }
  void set_f32(uint64_t at, float v) { std::memcpy(bytes.data() + at, &v, 4); }
  void set_u32(uint64_t at, uint32_t v) { std::memcpy(bytes.data() + at, &v, 4); }
  // Looks `from` up in the unmodified header, so two renames can swap names.
  void rename_tensor(const std::string& from, const std::string& to) {
    ASSERT_EQ(from.size(), to.size());
    ASSERT_NE(g.find_tensor(from), nullptr) << from;
    std::memcpy(bytes.data() + g.find_tensor(from)->info_offset + 8, to.data(), to.size());
  }
};

TEST(Qwen3nextProfile, EmbeddedJsonHasNameAndDetect) {
  bool found = false;
  for (const EmbeddedProfile& e : embedded_profiles()) {
    if (e.name != "qwen3next") continue;
    found = true;
    JsonDoc doc;
    std::string err;
    ASSERT_TRUE(doc.parse(e.json, err)) << err;
    EXPECT_EQ(json_string(doc.root(), "name"), "qwen3next");
    EXPECT_EQ(json_string(doc.root(), "format"), "gguf");
    auto detect = json_get(doc.root(), "detect");
    ASSERT_TRUE(detect.has_value());
    EXPECT_EQ(json_string(*detect, "key"), "general.architecture");
    EXPECT_EQ(json_string(*detect, "equals"), "qwen3next");
  }
  EXPECT_TRUE(found);
}

TEST(Qwen3nextProfile, FixturePasses) {
  Fixture fx;
  EXPECT_TRUE(is_qwen3next(fx.g));
  Checked c = check_bytes(fx.bytes);
  EXPECT_TRUE(c.reader.items().empty()) << dump(c.reader);
  EXPECT_TRUE(c.profile.items().empty()) << dump(c.profile);
}

TEST(Qwen3nextProfile, OtherArchitectureIsNotDetected) {
  MappedFile file;
  IoError err;
  ASSERT_TRUE(file.open(test::fixture("external/gguf/llama-2-tiny-random.gguf"), err));
  Findings f;
  auto g = read_gguf(file, "llama", f);
  ASSERT_TRUE(g.has_value());
  EXPECT_FALSE(is_qwen3next(*g));
}

TEST(Qwen3nextProfile, SsmAMustBeFiniteAndStrictlyNegative) {
  const float bad_values[] = {0.5f, 0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN(),
                              -std::numeric_limits<float>::infinity()};
  for (float v : bad_values) {
    SCOPED_TRACE(v);
    Fixture fx;
    const uint64_t at = fx.data_of("blk.1.ssm_a") + 3 * 4;
    fx.set_f32(at, v);
    Checked c = check_bytes(fx.bytes);
    EXPECT_FALSE(c.reader.has_errors()) << dump(c.reader);
    ASSERT_EQ(c.profile.count_code("Q3N_SSM_A_NOT_NEGATIVE"), 1u) << dump(c.profile);
    const Finding& x = c.profile.items().front();
    EXPECT_EQ(x.tensor, "blk.1.ssm_a");
    EXPECT_EQ(x.offset, at);
    EXPECT_EQ(x.file, "q.gguf");
    EXPECT_NE(x.message.find("element 3"), std::string::npos) << x.message;
  }
}

TEST(Qwen3nextProfile, SsmAMissing) {
  Fixture fx;
  fx.rename_tensor("blk.2.ssm_a", "blk.2.ssm_x");
  Checked c = check_bytes(fx.bytes);
  ASSERT_EQ(c.profile.count_code("Q3N_SSM_A_MISSING"), 1u) << dump(c.profile);
  EXPECT_EQ(c.profile.items().front().tensor, "blk.2.ssm_a");
}

TEST(Qwen3nextProfile, SsmAWrongType) {
  Fixture fx;
  const GgufTensorInfo* t = fx.g.find_tensor("blk.0.ssm_a");
  const uint64_t type_at = t->info_offset + 8 + t->name.size() + 4 + 8 * t->n_dims;
  fx.set_u32(type_at, 1);  // F16: the reader also flags the offsets that no longer pack
  Checked c = check_bytes(fx.bytes);
  EXPECT_EQ(c.profile.count_code("Q3N_SSM_A_TYPE"), 1u) << dump(c.profile);
}

TEST(Qwen3nextProfile, ExpertCountMismatch) {
  Fixture fx;
  fx.set_u32(fx.kv_value_at("qwen3next.expert_count"), 7);
  Checked c = check_bytes(fx.bytes);
  EXPECT_EQ(c.profile.count_code("Q3N_EXPERT_COUNT"), 12u) << dump(c.profile);  // 4 blocks x gate/up/down
  EXPECT_FALSE(c.profile.has_code("Q3N_EXPERT_SHAPE"));
}

TEST(Qwen3nextProfile, GateUpDownShapes) {
  Fixture fx;
  // Same-length names: gate now holds the {512, 256, 8} tensor, down the {256, 512, 8} one.
  fx.rename_tensor("blk.0.ffn_gate_exps.weight", "blk.0.ffn_down_exps.weight");
  fx.rename_tensor("blk.0.ffn_down_exps.weight", "blk.0.ffn_gate_exps.weight");
  Checked c = check_bytes(fx.bytes);
  EXPECT_FALSE(c.reader.has_errors()) << dump(c.reader);
  EXPECT_TRUE(c.profile.has_code("Q3N_EXPERT_SHAPE")) << dump(c.profile);
}

TEST(Qwen3nextProfile, MissingAndInvalidKvs) {
  {
    Fixture fx;
    const GgufKV* kv = fx.g.find_kv("qwen3next.full_attention_interval");
    fx.bytes[kv->offset + 8 + kv->key.size() - 1] = 'x';
    Checked c = check_bytes(fx.bytes);
    EXPECT_TRUE(c.profile.has_code("Q3N_KV_MISSING")) << dump(c.profile);
    EXPECT_FALSE(c.profile.has_code("Q3N_SSM_A_MISSING"));
  }
  {
    Fixture fx;
    fx.set_u32(fx.kv_value_at("qwen3next.full_attention_interval"), 0);  // would divide by zero
    Checked c = check_bytes(fx.bytes);
    EXPECT_TRUE(c.profile.has_code("Q3N_KV_INVALID")) << dump(c.profile);
  }
  {
    Fixture fx;
    fx.set_u32(fx.kv_value_at("qwen3next.block_count"), 0xFFFFFFFFu);  // must not loop 2^32 times
    Checked c = check_bytes(fx.bytes);
    EXPECT_TRUE(c.profile.has_code("Q3N_KV_INVALID")) << dump(c.profile);
  }
  {
    Fixture fx;
    fx.set_u32(fx.kv_value_at("qwen3next.full_attention_interval"), 1);  // every layer full attention
    Checked c = check_bytes(fx.bytes);
    EXPECT_TRUE(c.profile.items().empty()) << dump(c.profile);
  }
}

}  // namespace
}  // namespace ckpt
