// Machine output survives hostile names (issue 29): a tensor name holding byte 0xFF (not
// UTF-8) or U+202E gives valid UTF-8 JSON from every --json writer, through the one JSON
// string escape (core/display.h json_string_literal), and `hash -o` writes a manifest that
// `hash --check` reads back to the exact bytes.
#include <string>

#include <gtest/gtest.h>

#include "core/ggml_types.h"
#include "formats/gguf_writer.h"
#include "formats/json.h"
#include "io/atomic_file.h"
#include "test_util.h"

namespace ckpt {
namespace {

const auto q = test::shell_quote;

// A GGUF with one F32 tensor [4] named `name` and a chat template KV.
void write_gguf(const std::string& path, const std::string& name, const std::string& chat_template,
                float first_value = 1.0f) {
  GgufWriter w(32);
  std::string error;
  const uint64_t ne[4] = {4, 1, 1, 1};
  ASSERT_TRUE(w.add_string_kv("general.architecture", "llama", error)) << error;
  ASSERT_TRUE(w.add_string_kv("tokenizer.chat_template", chat_template, error)) << error;
  ASSERT_TRUE(w.add_tensor(name, 1, ne, kGgmlF32, error)) << error;
  const float values[4] = {first_value, 2.0f, 3.0f, 4.0f};
  AtomicOutput out(path);
  ASSERT_TRUE(out.open(error) && w.begin(out, error) &&
              w.write_data(out, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values), sizeof values), error) &&
              w.end_tensor(out, error) && w.finish(error) && out.commit(error))
      << error;
}

::testing::AssertionResult valid_json(const std::string& what, const std::string& text) {
  JsonDoc doc;
  std::string error;
  if (doc.parse(text, error)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " is not valid UTF-8 JSON: " << error << "\n" << text;
}

const std::string kFfName = "blk.0.\xff.weight";

TEST(MachineOutput, ATensorNameWithByte0xFFGivesValidJsonFromEveryWriter) {
  test::TempDir tmp;
  write_gguf(tmp.str("a.gguf"), kFfName, "A");
  write_gguf(tmp.str("b.gguf"), kFfName, "B", 5.0f);
  const std::string a = q(tmp.str("a.gguf")), b = q(tmp.str("b.gguf"));
  for (const std::string& args : {"inspect --json - " + a, "validate --json - " + a, "diff --json - " + a + " " + b}) {
    auto r = test::run_ckpt(args);
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << args << "\n" << r.err;
    EXPECT_TRUE(valid_json(args, r.out));
  }
  auto v = test::run_tool("ckpt-gpu", "", "verify --backend emulate --json - " + a);
  EXPECT_TRUE(valid_json("ckpt-gpu verify --json -", v.out)) << v.err;
  // The name is written as the text \xff (JSON "\\xff"), the same as human output shows it.
  EXPECT_NE(test::run_ckpt("diff --json - " + a + " " + b).out.find("blk.0.\\\\xff.weight"), std::string::npos);
}

TEST(MachineOutput, HashOOfANameWithByte0xFFIsAManifestHashCheckReadsBack) {
  test::TempDir tmp;
  const std::string model = tmp.str("m.gguf"), manifest = tmp.str("m.json");
  write_gguf(model, kFfName, "A");
  for (const char* flags : {"", "--no-file-hashes --algo both"}) {
    auto made = test::run_ckpt(std::string("hash -q ") + flags + " -o " + q(manifest) + " " + q(model));
    ASSERT_EQ(made.exit_code, 0) << made.err;
    EXPECT_TRUE(valid_json("hash -o", test::read_text(manifest)));
    auto check = test::run_ckpt("hash --check " + q(manifest) + " " + q(model));
    EXPECT_EQ(check.exit_code, 0) << flags << "\n" << check.out << check.err;
    EXPECT_NE(check.out.find("blk.0.\\xff.weight: OK"), std::string::npos) << check.out;
  }
  // Another name of the same length is not the one the manifest holds: the escape is
  // reversible, not a lossy U+FFFD that would let 0xFE pass for 0xFF.
  write_gguf(model, "blk.0.\xfe.weight", "A");
  auto renamed = test::run_ckpt("hash --check " + q(manifest) + " " + q(model));
  EXPECT_EQ(renamed.exit_code, 1) << renamed.out << renamed.err;
  EXPECT_NE(renamed.out.find("blk.0.\\xff.weight: FAILED (missing)"), std::string::npos) << renamed.out;
}

TEST(MachineOutput, ABidiOverrideInANameIsEscapedInHumanAndJsonOutput) {
  test::TempDir tmp;
  const std::string name = "blk.0.\xe2\x80\xae" "thgiew";  // U+202E RIGHT-TO-LEFT OVERRIDE
  write_gguf(tmp.str("a.gguf"), name, "A");
  write_gguf(tmp.str("b.gguf"), name, "A", 5.0f);
  const std::string a = q(tmp.str("a.gguf")), b = q(tmp.str("b.gguf"));
  auto human = test::run_ckpt("diff " + a + " " + b);
  EXPECT_EQ(human.out.find("\xe2\x80\xae"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("blk.0.\\u202ethgiew: values differ"), std::string::npos) << human.out;
  auto json = test::run_ckpt("diff --json - " + a + " " + b);
  EXPECT_EQ(json.out.find("\xe2\x80\xae"), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("blk.0.\\u202ethgiew"), std::string::npos) << json.out;  // the same string once parsed
  EXPECT_TRUE(valid_json("diff --json", json.out));
}

}  // namespace
}  // namespace ckpt
