// GgufWriter: a file rewritten from the fixture's KVs and tensors reads back clean with
// the loader's offset rule, KV bytes and tensor bytes unchanged; misuse is refused.
#include "formats/gguf_writer.h"

#include <cstring>

#include <gtest/gtest.h>

#include "core/checked_math.h"
#include "core/ggml_types.h"
#include "test_util.h"

namespace ckpt {
namespace {

const std::string kFixture = test::fixture("ggml/qwen3next-tiny.gguf");

struct Source {
  MappedFile file;
  GgufFile gguf;
};

Source open_source(const std::string& path) {
  Source s;
  IoError err;
  EXPECT_TRUE(s.file.open(path, err)) << err.message;
  Findings f;
  auto g = read_gguf(s.file, path, f);
  EXPECT_TRUE(g.has_value());
  EXPECT_FALSE(f.has_errors());
  if (g) s.gguf = std::move(*g);
  return s;
}

std::vector<uint8_t> kv_bytes(const MappedFile& f, const GgufKV& kv) {
  uint64_t b = 0, e = 0;
  EXPECT_TRUE(gguf_kv_byte_range(f, kv, b, e)) << kv.key;
  return f.read_bytes(b, e - b);
}

bool same(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

// Copies every KV and tensor of `src` into `out_path`, plus one extra string KV.
void rewrite(const Source& src, const std::string& out_path) {
  GgufWriter w(src.gguf.alignment);
  std::string error;
  for (const auto& kv : src.gguf.kvs) ASSERT_TRUE(w.copy_kv(src.file, kv, error)) << error;
  ASSERT_TRUE(w.add_string_kv("ckptkit.test.note", "hello", error)) << error;
  ASSERT_TRUE(w.add_u32_kv("ckptkit.test.count", 7, error)) << error;
  for (const auto& t : src.gguf.tensors) ASSERT_TRUE(w.add_tensor(t.name, t.n_dims, t.ne, t.type, error)) << error;
  AtomicOutput out(out_path);
  ASSERT_TRUE(out.open(error)) << error;
  ASSERT_TRUE(w.begin(out, error)) << error;
  for (const auto& t : src.gguf.tensors) {
    const auto bytes = src.file.read_bytes(src.gguf.data_start + t.offset, t.nbytes);
    const std::span<const uint8_t> data(bytes);
    // Two pieces: streaming in parts is the point of write_data().
    ASSERT_TRUE(w.write_data(out, data.first(data.size() / 2), error)) << error;
    ASSERT_TRUE(w.write_data(out, data.subspan(data.size() / 2), error)) << error;
    ASSERT_TRUE(w.end_tensor(out, error)) << error;
  }
  ASSERT_TRUE(w.finish(error)) << error;
  ASSERT_TRUE(out.commit(error)) << error;
  EXPECT_EQ(std::filesystem::file_size(out_path), w.file_size());
}

TEST(GgufWriter, RewriteOfFixtureReadsBackIdentical) {
  test::TempDir tmp;
  const auto src = open_source(kFixture);
  const std::string out_path = tmp.str("copy.gguf");
  rewrite(src, out_path);
  const auto out = open_source(out_path);
  EXPECT_EQ(out.gguf.version, 3u);
  EXPECT_EQ(out.gguf.alignment, src.gguf.alignment);
  ASSERT_EQ(out.gguf.kvs.size(), src.gguf.kvs.size() + 2);
  for (size_t i = 0; i < src.gguf.kvs.size(); ++i) {
    EXPECT_EQ(out.gguf.kvs[i].key, src.gguf.kvs[i].key);
    EXPECT_TRUE(same(kv_bytes(out.file, out.gguf.kvs[i]), kv_bytes(src.file, src.gguf.kvs[i]))) << src.gguf.kvs[i].key;
  }
  EXPECT_EQ(out.gguf.get_string("ckptkit.test.note"), "hello");
  EXPECT_EQ(out.gguf.get_int("ckptkit.test.count"), 7);
  ASSERT_EQ(out.gguf.tensors.size(), src.gguf.tensors.size());
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < src.gguf.tensors.size(); ++i) {
    const auto& a = src.gguf.tensors[i];
    const auto& b = out.gguf.tensors[i];
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.offset, expected_offset) << b.name;  // Σ_{j<i} PAD(nbytes_j)
    expected_offset += *checked_pad(a.nbytes, out.gguf.alignment);
    EXPECT_TRUE(same(out.file.read_bytes(out.gguf.data_start + b.offset, b.nbytes),
                     src.file.read_bytes(src.gguf.data_start + a.offset, a.nbytes)))
        << b.name;
  }
  EXPECT_EQ(out.gguf.file_size, out.gguf.data_start + expected_offset);  // the last tensor is padded too
  // The fixture was written by ggml's own writer with the same rules: same size.
  EXPECT_EQ(out.gguf.file_size, src.gguf.file_size + (out.gguf.data_start - src.gguf.data_start));
}

TEST(GgufWriter, ZeroTensorFileIsValid) {
  test::TempDir tmp;
  GgufWriter w(32);
  std::string error;
  ASSERT_TRUE(w.add_string_kv("general.architecture", "none", error));
  AtomicOutput out(tmp.str("empty.gguf"));
  ASSERT_TRUE(out.open(error));
  ASSERT_TRUE(w.begin(out, error));
  ASSERT_TRUE(w.finish(error));
  ASSERT_TRUE(out.commit(error));
  const auto back = open_source(tmp.str("empty.gguf"));
  EXPECT_EQ(back.gguf.tensors.size(), 0u);
  EXPECT_EQ(back.gguf.get_string("general.architecture"), "none");
}

TEST(GgufWriter, RefusesMisuse) {
  test::TempDir tmp;
  GgufWriter w(32);
  std::string error;
  const uint64_t ne[4] = {64, 2, 1, 1};
  ASSERT_TRUE(w.add_string_kv("a.b", "x", error));
  EXPECT_FALSE(w.add_u32_kv("a.b", 1, error));  // duplicate key
  EXPECT_NE(error.find("twice"), std::string::npos);
  ASSERT_TRUE(w.add_tensor("t", 2, ne, kGgmlQ8_0, error)) << error;
  EXPECT_FALSE(w.add_tensor("t", 2, ne, kGgmlQ8_0, error));                 // duplicate name
  EXPECT_FALSE(w.add_tensor(std::string(64, 'n'), 2, ne, kGgmlF32, error));  // name too long
  const uint64_t odd[4] = {100, 1, 1, 1};
  EXPECT_FALSE(w.add_tensor("q4k", 1, odd, kGgmlQ4_K, error));  // ne0 % 256 != 0
  EXPECT_FALSE(w.add_tensor("bad_type", 1, ne, 4, error));      // removed type id
  EXPECT_FALSE(w.add_tensor("bad_dims", 5, ne, kGgmlF32, error));
  AtomicOutput out(tmp.str("x.gguf"));
  ASSERT_TRUE(out.open(error));
  ASSERT_TRUE(w.begin(out, error));
  EXPECT_FALSE(w.add_string_kv("late.key", "x", error));  // after the header
  std::vector<uint8_t> too_much(2 * 68 + 1, 0);           // Q8_0: 2 blocks of 34 B per row, 2 rows
  EXPECT_FALSE(w.write_data(out, too_much, error));
  std::vector<uint8_t> part(100, 0);
  ASSERT_TRUE(w.write_data(out, part, error)) << error;
  EXPECT_FALSE(w.end_tensor(out, error));  // 100 of 136 bytes
  EXPECT_FALSE(w.finish(error));
}

TEST(GgufWriter, KvByteRangeStopsAtTheFileEnd) {
  test::TempDir tmp;
  const auto src = open_source(kFixture);
  // A copy cut inside the last KV: its range must be refused, not read past the end.
  const auto& last = src.gguf.kvs.back();
  uint64_t b = 0, e = 0;
  ASSERT_TRUE(gguf_kv_byte_range(src.file, last, b, e));
  auto bytes = test::read_file(kFixture);
  bytes.resize(static_cast<size_t>(e - 1));
  test::write_file(tmp.str("cut.gguf"), bytes);
  MappedFile cut;
  IoError err;
  ASSERT_TRUE(cut.open(tmp.str("cut.gguf"), err));
  EXPECT_FALSE(gguf_kv_byte_range(cut, last, b, e));
}

}  // namespace
}  // namespace ckpt
