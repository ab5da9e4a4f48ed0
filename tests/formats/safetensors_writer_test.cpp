#include "formats/safetensors_writer.h"
#include "io/atomic_file.h"

#include <cstring>
#include <map>
#include <filesystem>

#include <gtest/gtest.h>
#include <simdjson.h>
#include <sys/stat.h>

#include "test_util.h"

namespace ckpt {
namespace {

using test::fixture;

uint64_t le64(const std::vector<uint8_t>& b) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{b.at(i)} << (8 * i);
  return n;
}

std::string header_of(const std::vector<uint8_t>& file) {
  uint64_t n = le64(file);
  return std::string(file.begin() + 8, file.begin() + 8 + static_cast<long>(n));
}

// Fills each tensor from a source file's bytes at the tensor's offset there.
struct SourceFill {
  const std::vector<uint8_t>& src;
  std::map<std::string, uint64_t> start;  // name -> absolute offset in src
  bool operator()(const WriterTensor& t, uint64_t off, std::span<uint8_t> out, std::string&) const {
    std::memcpy(out.data(), src.data() + start.at(t.name) + off, out.size());
    return true;
  }
};

// Re-creates a fixture shard written by safetensors.torch.save_file from its own
// header and bytes: our writer must reproduce it exactly.
void expect_rewrite_identical(const std::string& shard, const std::vector<std::pair<std::string, std::string>>& meta,
                              size_t chunk) {
  auto src = test::read_file(shard);
  uint64_t n = le64(src);
  simdjson::dom::parser parser;
  std::vector<WriterTensor> tensors;
  SourceFill fill{src, {}};
  simdjson::dom::object obj = parser.parse(header_of(src)).get_object().value();
  for (auto [key, val] : obj) {
    if (key == "__metadata__") continue;
    WriterTensor t;
    t.name = std::string(key);
    t.dtype = *dtype_from_name(val["dtype"].get_string().value());
    simdjson::dom::array dims = val["shape"].get_array().value();
    for (auto d : dims) t.shape.push_back(d.get_uint64().value());
    fill.start[t.name] = 8 + n + val["data_offsets"].get_array().value().at(0).get_uint64().value();
    tensors.push_back(std::move(t));
  }
  test::TempDir dir;
  SafetensorsWriteOptions opt;
  opt.metadata = meta;
  opt.chunk_bytes = chunk;
  std::string err;
  ASSERT_TRUE(write_safetensors(dir.str("out.safetensors"), tensors, std::cref(fill), opt, err)) << err;
  EXPECT_EQ(test::read_file(dir.str("out.safetensors")), src) << shard;
}

TEST(SafetensorsWriter, HeaderForOneBf16Tensor) {
  std::vector<WriterTensor> ts{{"embed.weight", Dtype::BF16, {512, 256}, 0, 0}};
  std::string header, err;
  uint64_t payload = 0;
  ASSERT_TRUE(plan_safetensors(ts, {}, header, payload, err)) << err;
  EXPECT_EQ(header, std::string("{\"embed.weight\":{\"dtype\":\"BF16\",\"shape\":[512,256],\"data_offsets\":[0,262144]}}") +
                        "   ");
  EXPECT_EQ(header.size(), 80u);
  EXPECT_EQ(payload, 262144u);
}

TEST(SafetensorsWriter, MatchesDsv4TinyShard1ByteForByte) {
  expect_rewrite_identical(fixture("oracle/dsv4-tiny/model-00001-of-00007.safetensors"), {}, size_t{1} << 20);
}

TEST(SafetensorsWriter, MatchesMultiDtypeShardsWithMetadata) {
  // Shards 2 and 7 mix I64, F32, BF16, F8_E8M0, F8_E4M3 and I8: the dtype-descending order.
  for (const char* s : {"model-00002-of-00007.safetensors", "model-00007-of-00007.safetensors"})
    expect_rewrite_identical(fixture(std::string("oracle/dsv4-tiny/") + s), {{"format", "pt"}}, 40);
}

TEST(SafetensorsWriter, OrdersByDtypeDescendingThenName) {
  std::vector<WriterTensor> ts{{"b", Dtype::F8_E4M3, {3}, 0, 0}, {"a", Dtype::F8_E4M3, {1}, 0, 0},
                               {"z", Dtype::I64, {1}, 0, 0},    {"c", Dtype::BF16, {1}, 0, 0}};
  std::string header, err;
  uint64_t payload = 0;
  ASSERT_TRUE(plan_safetensors(ts, {}, header, payload, err)) << err;
  EXPECT_EQ(ts[0].name, "z");
  EXPECT_EQ(ts[1].name, "c");
  EXPECT_EQ(ts[2].name, "a");
  EXPECT_EQ(ts[3].name, "b");
  EXPECT_EQ(ts[3].begin, 8u + 2u + 1u);
  EXPECT_EQ(payload, 14u);
}

TEST(SafetensorsWriter, SparseModeWritesHeaderAndHole) {
  test::TempDir dir;
  std::vector<WriterTensor> ts{{"big", Dtype::I8, {64, 1 << 20}, 0, 0}};
  SafetensorsWriteOptions opt;
  opt.sparse = true;
  std::string err;
  std::string path = dir.str("s.safetensors");
  ASSERT_TRUE(write_safetensors(path, ts, nullptr, opt, err)) << err;
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 8u + 72u + (uint64_t{64} << 20));
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, uint64_t{1} << 20);  // no payload blocks
  auto bytes = test::read_file(path);
  EXPECT_EQ(bytes.back(), 0);
}

TEST(SafetensorsWriter, FailureLeavesNothingBehind) {
  test::TempDir dir;
  std::vector<WriterTensor> ts{{"x", Dtype::F32, {1024}, 0, 0}};
  SafetensorsWriteOptions opt;
  opt.chunk_bytes = 64;
  int calls = 0;
  TensorFill fail_third = [&](const WriterTensor&, uint64_t, std::span<uint8_t>, std::string& e) {
    if (++calls == 3) {
      e = "source read failed";
      return false;
    }
    return true;
  };
  std::string err;
  EXPECT_FALSE(write_safetensors(dir.str("f.safetensors"), ts, fail_third, opt, err));
  EXPECT_NE(err.find("source read failed"), std::string::npos) << err;
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(SafetensorsWriter, ChunksAreAlignedAndBounded) {
  test::TempDir dir;
  std::vector<WriterTensor> ts{{"x", Dtype::F32, {1000}, 0, 0}, {"y", Dtype::I64, {3}, 0, 0}};
  SafetensorsWriteOptions opt;
  opt.chunk_bytes = 100;  // rounded up to 104
  TensorFill fill = [](const WriterTensor& t, uint64_t off, std::span<uint8_t> out, std::string& e) {
    if (off % 104 != 0 || out.size() > 104) {
      e = "chunk at " + std::to_string(off) + " of " + std::to_string(out.size());
      return false;
    }
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>((off + i) ^ t.name[0]);
    return true;
  };
  std::string err;
  ASSERT_TRUE(write_safetensors(dir.str("c.safetensors"), ts, fill, opt, err)) << err;
  auto bytes = test::read_file(dir.str("c.safetensors"));
  uint64_t base = 8 + le64(bytes) + 24;  // y (I64, 24 bytes) comes first
  EXPECT_EQ(bytes.size(), base + 4000);
  for (uint64_t i = 0; i < 4000; i += 397) EXPECT_EQ(bytes[base + i], static_cast<uint8_t>(i ^ 'x'));
}

TEST(SafetensorsWriter, RejectsInvalidInput) {
  struct Bad {
    const char* what;
    std::vector<WriterTensor> ts;
  };
  const Bad cases[] = {
      {"duplicate", {{"a", Dtype::BF16, {1}, 0, 0}, {"a", Dtype::F32, {1}, 0, 0}}},
      {"reserved name", {{"__metadata__", Dtype::BF16, {1}, 0, 0}}},
      {"sub-byte remainder", {{"f4", Dtype::F4, {3}, 0, 0}}},
      {"size overflow", {{"huge", Dtype::F32, {uint64_t{1} << 62, 8}, 0, 0}}},
  };
  for (const auto& c : cases) {
    auto ts = c.ts;
    std::string header, err;
    uint64_t payload = 0;
    EXPECT_FALSE(plan_safetensors(ts, {}, header, payload, err)) << c.what;
    EXPECT_FALSE(err.empty()) << c.what;
  }
  std::string err;
  SafetensorsWriteOptions opt;
  opt.sparse = true;
  EXPECT_FALSE(write_safetensors("/nonexistent-dir/x.safetensors", {{"a", Dtype::U8, {1}, 0, 0}}, nullptr, opt, err));
  EXPECT_NE(err.find("/nonexistent-dir"), std::string::npos) << err;
}

TEST(SafetensorsWriter, AtomicTextFile) {
  test::TempDir dir;
  std::string err;
  ASSERT_TRUE(write_file_atomic(dir.str("a.json"), "{}\n", err)) << err;
  ASSERT_TRUE(write_file_atomic(dir.str("a.json"), "{\"x\": 1}\n", err)) << err;
  auto b = test::read_file(dir.str("a.json"));
  EXPECT_EQ(std::string(b.begin(), b.end()), "{\"x\": 1}\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

}  // namespace
}  // namespace ckpt
