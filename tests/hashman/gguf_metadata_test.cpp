// GGUF key-values are part of the model for `hash` and `diff` (issue 29): without file
// hashes a manifest still covers each tensor file's header (the KVs), so a changed
// tokenizer.chat_template fails `hash --check`; `diff` compares two GGUFs key by key and
// names the differing key.
#include <string>

#include <gtest/gtest.h>

#include "core/ggml_types.h"
#include "diff/diff.h"
#include "formats/gguf_writer.h"
#include "hashman/check.h"
#include "io/atomic_file.h"
#include "test_util.h"

namespace ckpt {
namespace {

const auto q = test::shell_quote;

// One F32 tensor [4] and the key-values given, in order.
void write_gguf(const std::string& path, const std::vector<std::pair<std::string, std::string>>& kvs) {
  GgufWriter w(32);
  std::string error;
  const uint64_t ne[4] = {4, 1, 1, 1};
  for (const auto& [key, value] : kvs) ASSERT_TRUE(w.add_string_kv(key, value, error)) << error;
  ASSERT_TRUE(w.add_tensor("w", 1, ne, kGgmlF32, error)) << error;
  const float values[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  AtomicOutput out(path);
  ASSERT_TRUE(out.open(error) && w.begin(out, error) &&
              w.write_data(out, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values), sizeof values), error) &&
              w.end_tensor(out, error) && w.finish(error) && out.commit(error))
      << error;
}

TEST(GgufMetadata, WithoutFileHashesAChangedChatTemplateFailsHashCheck) {
  test::TempDir tmp;
  const std::string model = tmp.str("m.gguf"), manifest = tmp.str("m.json");
  write_gguf(model, {{"general.architecture", "llama"}, {"tokenizer.chat_template", "{{ user }}"}});
  auto made = test::run_ckpt("hash -q --no-file-hashes -o " + q(manifest) + " " + q(model));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_NE(test::read_text(manifest).find("\"header_bytes\":"), std::string::npos) << test::read_text(manifest);
  EXPECT_EQ(test::run_ckpt("hash -q --check " + q(manifest) + " " + q(model)).exit_code, 0);
  write_gguf(model, {{"general.architecture", "llama"}, {"tokenizer.chat_template", "{{ evil }}"}});  // same size
  auto r = test::run_ckpt("hash -q --check " + q(manifest) + " " + q(model));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out, "m.gguf: FAILED (header: metadata or tensor index)\n");
}

TEST(GgufMetadata, DiffOfTwoGgufsWithDifferentKeyValuesIsDifferentAndNamesTheKeys) {
  test::TempDir tmp;
  write_gguf(tmp.str("a.gguf"), {{"general.architecture", "llama"}, {"tokenizer.chat_template", "{{ user }}"},
                                 {"general.name", "a"}});
  write_gguf(tmp.str("b.gguf"), {{"general.architecture", "llama"}, {"tokenizer.chat_template", "{{ evil }}"},
                                 {"general.license", "mit"}});
  DiffReport r = diff_models(tmp.str("a.gguf"), tmp.str("b.gguf"), {});
  EXPECT_EQ(r.status, DiffStatus::different);
  EXPECT_EQ(r.identical, 1u);  // the tensor
  const std::string text = diff_report_text(r);
  EXPECT_NE(text.find("key tokenizer.chat_template: value differs: A \"{{ user }}\", B \"{{ evil }}\""), std::string::npos)
      << text;
  EXPECT_NE(text.find("key general.name: only in A"), std::string::npos) << text;
  EXPECT_NE(text.find("key general.license: only in B"), std::string::npos) << text;
  EXPECT_NE(text.find("DIFFERENT:"), std::string::npos) << text;
  auto cli = test::run_ckpt("diff " + q(tmp.str("a.gguf")) + " " + q(tmp.str("b.gguf")));
  EXPECT_EQ(cli.exit_code, 1) << cli.out << cli.err;
  // The same file against itself is still SAME.
  EXPECT_EQ(diff_models(tmp.str("a.gguf"), tmp.str("a.gguf"), {}).status, DiffStatus::same);
}

}  // namespace
}  // namespace ckpt
