// `validate --hub-sha256 LIST` must not pass vacuously: an empty list and a name listed
// twice are errors naming the list and the line, every listed file that exists is checked
// (config, index, tokenizer files too, not only shards), and hostile names never open
// anything outside the checkpoint.
#include "validate/hub_list.h"

#include <sys/stat.h>

#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "io/hash.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
const auto q = test::shell_quote;

std::string sha256_of_file(const std::string& path) {
  auto bytes = test::read_file(path);
  return sha256_hex(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

// What `cd DIR && sha256sum *` prints.
std::string sha256sum_of_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) out += sha256_of_file(dir + "/" + n) + "  " + n + "\n";
  return out;
}

std::map<std::string, std::string> statuses(const ValidationReport& r) {
  std::map<std::string, std::string> s;
  for (const auto& f : r.files) s[f.name] = f.hub_status;
  return s;
}

class HubSha256 : public ::testing::Test {
 protected:
  void SetUp() override { test::copy_tree(test::fixture("oracle/dsv4-tiny"), model_); }
  ValidationReport validate_with(const std::string& list_text) {
    test::write_text(list_, list_text);
    ValidateOptions o;
    o.hub_sha256_file = list_;
    return validate_path(model_, o);
  }
  test::TempDir tmp_;
  const std::string model_ = tmp_.str("model"), list_ = tmp_.str("hashes.txt");
};

TEST_F(HubSha256, AnEmptyListIsAnError) {
  for (const std::string text : {"", "\n\n", "# only a comment\n   \n"}) {
    auto r = validate_with(text);
    EXPECT_TRUE(r.findings.has_code("HUB_LIST_EMPTY")) << test::describe(r.findings);
    EXPECT_TRUE(r.findings.has_errors());
    for (const auto& f : r.files) EXPECT_EQ(f.hub_status, "") << f.name;  // nothing was compared
  }
  auto cli = test::run_ckpt("validate --hub-sha256 " + q(list_) + " " + q(model_));
  EXPECT_EQ(cli.exit_code, 1) << cli.out << cli.err;
  EXPECT_NE(cli.out.find("HUB_LIST_EMPTY"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("VERDICT: FAIL"), std::string::npos) << cli.out;
}

TEST_F(HubSha256, ANameListedTwiceIsAnErrorNamingBothLines) {
  const std::string good = sha256_of_file(model_ + "/config.json");
  auto r = validate_with(std::string(64, 'a') + "  config.json\n" + "# comment\n" + good + "  config.json\n");
  ASSERT_TRUE(r.findings.has_code("HUB_LIST_DUPLICATE")) << test::describe(r.findings);
  for (const auto& f : r.findings.items())
    if (f.code == "HUB_LIST_DUPLICATE") {
      EXPECT_EQ(f.file, list_);
      EXPECT_EQ(f.offset, std::optional<uint64_t>(64 + 14 + 10));  // the start of line 3
      EXPECT_NE(f.message.find("line 3 lists 'config.json' again (first on line 1)"), std::string::npos) << f.message;
    }
  EXPECT_NE(statuses(r)["config.json"], "ok");  // the last line does not silently win
}

TEST_F(HubSha256, AWholeDirectoryListChecksEveryFileInsteadOfCallingSideFilesMissing) {
  auto r = validate_with(sha256sum_of_dir(model_));
  EXPECT_FALSE(r.findings.has_errors()) << test::describe(r.findings);
  EXPECT_FALSE(r.findings.has_code("HUB_FILE_MISSING"));
  auto s = statuses(r);
  for (const char* side : {"config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer.json",
                           "tokenizer_config.json", "model-00003-of-00007.safetensors"})
    EXPECT_EQ(s[side], "ok") << side;
  EXPECT_EQ(r.files.size(), 12u);
}

TEST_F(HubSha256, AChangedSideFileIsAMismatch) {
  const std::string list = sha256sum_of_dir(model_);
  test::write_text(model_ + "/tokenizer.json", "{}");
  auto r = validate_with(list);
  EXPECT_EQ(statuses(r)["tokenizer.json"], "mismatch");
  EXPECT_EQ(r.findings.count_code("HUB_SHA256_MISMATCH"), 1u) << test::describe(r.findings);
}

TEST_F(HubSha256, EveryLineFormIsRead) {
  const std::string cfg = sha256_of_file(model_ + "/config.json");
  const std::string tok = sha256_of_file(model_ + "/tokenizer.json");
  const std::string gen = sha256_of_file(model_ + "/generation_config.json");
  fs::create_directories(model_ + "/original");
  test::write_text(model_ + "/original/my params.json", "{}");
  const std::string params = sha256_of_file(model_ + "/original/my params.json");
  std::string upper = tok;
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto r = validate_with(cfg + " *config.json\r\n" +                      // sha256sum -b, CRLF
                         "SHA256 (./generation_config.json) = " + gen + "\n" +  // --tag, "./"
                         "tokenizer.json\t" + upper + "\n" +                // Hub listing, uppercase hex
                         "original/my params.json   " + params + "  \n");   // a name with a space
  EXPECT_FALSE(r.findings.has_errors()) << test::describe(r.findings);
  auto s = statuses(r);
  for (const char* name : {"config.json", "generation_config.json", "tokenizer.json", "original/my params.json"})
    EXPECT_EQ(s[name], "ok") << name;
}

TEST_F(HubSha256, HostileNamesAreRefusedAndNothingOutsideIsOpened) {
  const std::string h(64, 'c');
  std::vector<HubListEntry> entries;
  for (const std::string name : {"../secret", "/etc/passwd", "a/../../b", "a\x1b]0;x\x07", "\\escaped", "a//b"}) {
    Findings g;
    EXPECT_FALSE(parse_hub_list(h + "  " + name + "\n", "l.txt", entries, g)) << name;
    EXPECT_TRUE(g.has_code("HUB_LIST_NAME")) << name << ": " << test::describe(g);
    EXPECT_EQ(test::describe(g).find('\x1b'), std::string::npos);  // never repeated raw
  }
  // Inside the checkpoint by name, outside by link: refused, never read.
  test::write_text(tmp_.str("secret"), "key");
  fs::create_symlink(tmp_.str("secret"), model_ + "/notes.txt");
  fs::create_directories(tmp_.str("elsewhere"));
  test::write_text(tmp_.str("elsewhere/x.json"), "{}");
  fs::create_directory_symlink(tmp_.str("elsewhere"), model_ + "/sub");
  ASSERT_EQ(mkfifo((model_ + "/pipe.json").c_str(), 0600), 0);
  auto r = validate_with(sha256_of_file(tmp_.str("secret")) + "  notes.txt\n" + sha256_of_file(tmp_.str("elsewhere/x.json")) +
                         "  sub/x.json\n" + h + "  pipe.json\n");
  auto s = statuses(r);
  EXPECT_EQ(s["notes.txt"], "refused");
  EXPECT_EQ(s["sub/x.json"], "refused");
  EXPECT_EQ(s["pipe.json"], "refused");
  EXPECT_EQ(r.findings.count_code("HUB_PATH_ESCAPE"), 2u) << test::describe(r.findings);
  EXPECT_TRUE(r.findings.has_code("IO_NOT_REGULAR")) << test::describe(r.findings);
  for (const auto& file : r.files)
    if (file.hub_status == "refused") {
      EXPECT_TRUE(file.sha256.empty()) << file.name << " was read";
    }
}

TEST_F(HubSha256, AListThatIsAFifoIsRefusedNotAHang) {
  ASSERT_EQ(mkfifo(list_.c_str(), 0600), 0);
  ValidateOptions o;
  o.hub_sha256_file = list_;
  auto r = validate_path(model_, o);
  EXPECT_TRUE(r.findings.has_code("IO_NOT_REGULAR")) << test::describe(r.findings);
}

// convert parses its list once, before the conversion, and checks the input against those
// entries at the end: the check reads the model's side files, never the list again (here
// the list is gone by then and every listed file is still checked).
TEST_F(HubSha256, ParsedEntriesAreCheckedWithoutReadingTheListAgain) {
  test::write_text(list_, sha256sum_of_dir(model_));
  Findings parsed;
  std::vector<HubListEntry> entries;
  ASSERT_TRUE(parse_hub_list(test::read_text(list_), list_, entries, parsed)) << test::describe(parsed);
  fs::remove(list_);
  ValidationReport r;
  check_hub_entries(entries, list_, model_, /*every_shard=*/true, r);
  EXPECT_FALSE(r.findings.has_errors()) << test::describe(r.findings);
  EXPECT_EQ(r.files.size(), entries.size());
  for (const auto& [name, status] : statuses(r)) EXPECT_EQ(status, "ok") << name;
  entries[0].sha256 = std::string(64, 'e');
  ValidationReport changed;
  check_hub_entries(entries, list_, model_, true, changed);
  EXPECT_TRUE(changed.findings.has_code("HUB_SHA256_MISMATCH")) << test::describe(changed.findings);
}

TEST(HubListParse, MalformedLinesAreErrorsWithTheirLineNumberAndAreCapped) {
  std::vector<HubListEntry> entries;
  Findings f;
  EXPECT_FALSE(parse_hub_list("config.json\n" + std::string(64, 'a') + "\n", "l.txt", entries, f));
  EXPECT_NE(test::describe(f).find("line 1 is not"), std::string::npos) << test::describe(f);
  EXPECT_NE(test::describe(f).find("line 2 is not"), std::string::npos) << test::describe(f);
  EXPECT_TRUE(entries.empty());  // an unusable list yields nothing to compare

  std::string many;
  for (int i = 0; i < 100000; ++i) many += "not a hash line\n";
  Findings g;
  EXPECT_FALSE(parse_hub_list(many, "l.txt", entries, g));
  EXPECT_EQ(g.items().size(), kMaxHubListBadLines + 1) << "bounded findings";
  EXPECT_NE(g.items().back().message.find("stopped reading after"), std::string::npos);

  Findings h;
  EXPECT_FALSE(parse_hub_list(std::string(64, 'b') + "  " + std::string(kMaxHubListLineBytes, 'x') + "\n", "l.txt",
                              entries, h));
  EXPECT_NE(test::describe(h).find("line 1 is longer than"), std::string::npos) << test::describe(h);
}

TEST(HubSha256Pack, AnExpertPackIsCheckedNotIgnored) {
  test::TempDir tmp;
  const std::string pack = tmp.str("pack");
  ASSERT_EQ(test::run_ckpt("repack-experts -q " + q(test::fixture("ggml/qwen3next-tiny.gguf")) + " " + q(pack)).exit_code,
            0);
  const std::string list = tmp.str("l.txt");
  test::write_text(list, sha256sum_of_dir(pack));
  ValidateOptions o;
  o.hub_sha256_file = list;
  auto good = validate_path(pack, o);
  EXPECT_FALSE(good.findings.has_errors()) << test::describe(good.findings);
  EXPECT_EQ(statuses(good)["experts.bin"], "ok");
  EXPECT_EQ(statuses(good)["manifest.json"], "ok");
  test::write_text(list, std::string(64, 'd') + "  experts.bin\n");
  auto bad = validate_path(pack, o);
  EXPECT_EQ(statuses(bad)["experts.bin"], "mismatch");
  EXPECT_TRUE(bad.findings.has_code("HUB_SHA256_MISMATCH")) << test::describe(bad.findings);
}

}  // namespace
}  // namespace ckpt
