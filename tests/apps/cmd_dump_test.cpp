// `ckpt dump` end to end: output bytes, -o FILE, exit codes and messages.
#include <sys/stat.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "io/hash.h"
#include "test_util.h"

namespace ckpt {
namespace {

using test::fixture;
using test::run_ckpt;

const std::string kGguf = fixture("ggml/qwen3next-tiny.gguf");

std::string sha(const std::string& s) { return sha256_hex(s); }

TEST(DumpCli, F32ToStdoutMatchesGgml) {
  auto r = run_ckpt("dump " + kGguf + " blk.1.ffn_down_exps.weight");  // Q4_K
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.size(), 1048576u * 4);
  EXPECT_EQ(sha(r.out), "435ff04233fa3aa53ebbe812ab1cc927aff543dd5833c39b96baea20e71b3085");
  EXPECT_EQ(r.err, "");
}

TEST(DumpCli, OutputFileIsWrittenAtomically) {
  test::TempDir dir;
  const std::string out = dir.str("gate.f32");
  auto r = run_ckpt("dump " + kGguf + " blk.0.ffn_gate_exps.weight --as f32 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  auto raw = run_ckpt("dump " + kGguf + " blk.0.ffn_gate_exps.weight");
  auto bytes = test::read_file(out);
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), raw.out);
  // Only the output remains: no temporary beside it.
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
}

// dump -o of a private input is private: a 0600 GGUF gives a 0600 file (before: 0644).
TEST(DumpCli, OutputFileIsNoMoreReadableThanTheInput) {
  test::TempDir dir;
  const std::string in = dir.str("private.gguf"), out = dir.str("gate.f32");
  std::filesystem::copy_file(kGguf, in);
  std::filesystem::permissions(in, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto r = run_ckpt("dump " + in + " blk.0.ffn_gate_exps.weight -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  struct stat st {};
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u) << std::oct << (st.st_mode & 07777);
}

TEST(DumpCli, RawIsTheStoredBytes) {
  auto r = run_ckpt("dump " + kGguf + " blk.3.ffn_down_exps.weight --as raw");  // MXFP4
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.size(), 557056u);
}

TEST(DumpCli, DevNullIsWrittenInPlace) {
  auto r = run_ckpt("dump " + kGguf + " token_embd.weight -o /dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
}

TEST(DumpCli, ExitCodes) {
  auto unknown = run_ckpt("dump " + kGguf + " no.such.tensor");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("no tensor named 'no.such.tensor'"), std::string::npos) << unknown.err;
  EXPECT_EQ(unknown.out, "");

  auto i64 = run_ckpt("dump " + fixture("oracle/dsv4-tiny") + " layers.0.ffn.gate.tid2eid");
  EXPECT_EQ(i64.exit_code, 1) << i64.err;
  EXPECT_NE(i64.err.find("unsupported dtype I64"), std::string::npos) << i64.err;

  EXPECT_EQ(run_ckpt("dump " + kGguf).exit_code, 2);  // missing TENSOR
  EXPECT_EQ(run_ckpt("dump " + kGguf + " token_embd.weight --as f64").exit_code, 2);
  EXPECT_EQ(run_ckpt("dump " + kGguf + " token_embd.weight -o " + kGguf).exit_code, 2);  // never the input

  auto missing = run_ckpt("dump /nonexistent/model.gguf token_embd.weight");
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
  test::TempDir dir;
  auto unwritable = run_ckpt("dump " + kGguf + " token_embd.weight -o " + dir.str("no/such/dir/x.f32"));
  EXPECT_EQ(unwritable.exit_code, 3) << unwritable.err;
}

TEST(DumpCli, NanCodeFailsWithoutLeavingAFile) {
  test::TempDir dir;
  const std::string model = dir.str("m.safetensors");
  test::write_file(model, test::make_safetensors(
                              R"({"X.weight":{"dtype":"F8_E4M3","shape":[1,2],"data_offsets":[0,2]},)"
                              R"("X.scale":{"dtype":"F8_E8M0","shape":[1,1],"data_offsets":[2,3]}})",
                              {0x38, 0xFF, 127}));
  const std::string out = dir.str("x.f32");
  auto r = run_ckpt("dump " + model + " X.weight -o " + out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tensor X.weight: element 1 (row 0, col 1) is the E4M3 NaN code 0xFF"), std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace ckpt
