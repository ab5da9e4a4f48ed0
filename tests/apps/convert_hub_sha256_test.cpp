// `ckpt convert --hub-sha256 LIST`: IN checked against a published SHA-256 list while it is
// converted; OUT is finalized (index, config.json) only when every shard is listed and
// every listed file is present with its digest (apps/ckpt/hub_check.cpp).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "io/hash.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

std::string q(const std::string& s) { return test::shell_quote(s); }

// IN (dsv4-tiny) and LIST: `sha256sum *.safetensors` of it, plus the lines given.
struct HubCase {
  test::TempDir tmp;
  std::string in = tmp.str("in"), list = tmp.str("SHA256SUMS");
  explicit HubCase(const std::string& more = "", size_t skip_shard = 0) {
    test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
    std::string text;
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(in))
      if (e.path().extension() == ".safetensors" && ++n != skip_shard)
        text += sha256_hex(test::read_text(e.path().string())) + "  " + e.path().filename().string() + "\n";
    test::write_text(list, text + more);
  }
  test::RunResult convert(const std::string& out) const {
    return test::run_ckpt("convert -q --hub-sha256 " + q(list) + " " + q(in) + " " + q(tmp.str(out)));
  }
  bool complete(const std::string& out) const {
    return fs::exists(tmp.str(out + "/model.safetensors.index.json")) || fs::exists(tmp.str(out + "/config.json"));
  }
};

TEST(ConvertHubSha256, AnInputMatchingItsListIsConvertedAndFinalized) {
  HubCase c("# the Hub also lists small files when it can\n" +
            sha256_hex(test::read_text(test::fixture("oracle/dsv4-tiny/config.json"))) + "  config.json\n");
  const test::RunResult r = c.convert("out");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(c.complete("out"));
}

TEST(ConvertHubSha256, OneChangedByteOfAShardLeavesOutIncomplete) {
  HubCase c;
  std::vector<uint8_t> bytes = test::read_file(c.in + "/model-00002-of-00007.safetensors");
  bytes[bytes.size() - 100] ^= 1;  // tensor data, not the header: the conversion itself succeeds
  test::write_file(c.in + "/model-00002-of-00007.safetensors", bytes);
  const test::RunResult r = c.convert("out");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("HUB_SHA256_MISMATCH model-00002-of-00007.safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("CONVERT_HUB_SHA256"), std::string::npos) << r.err;
  EXPECT_FALSE(c.complete("out"));
}

TEST(ConvertHubSha256, AListedFileMissingFromTheInputIsANamedError) {
  HubCase c(std::string(64, 'a') + "  tokenizer.model\n");
  const test::RunResult r = c.convert("out");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("HUB_FILE_MISSING tokenizer.model"), std::string::npos) << r.err;
  EXPECT_FALSE(c.complete("out"));
}

TEST(ConvertHubSha256, AShardTheListDoesNotCoverIsANamedError) {
  HubCase c("", 3);
  const test::RunResult r = c.convert("out");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("HUB_FILE_NOT_LISTED"), std::string::npos) << r.err;
  EXPECT_FALSE(c.complete("out"));
}

TEST(ConvertHubSha256, AnUnusableListIsRefusedBeforeAnythingIsWritten) {
  HubCase c;
  test::write_text(c.list, "not a hash line\n");
  const test::RunResult r = c.convert("out");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("HUB_LIST_PARSE"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(c.tmp.str("out")));
  EXPECT_EQ(test::run_ckpt("convert --dry-run --hub-sha256 " + q(c.list) + " " + q(c.in) + " " + q(c.tmp.str("o"))).exit_code, 2);
}

// convert reads its list with validate's one reader (validate/hub_list.h read_hub_list):
// the same refusals, by the same codes, as `validate --hub-sha256`.
TEST(ConvertHubSha256, AListThatIsAFifoOrMissingIsRefusedAsValidateRefusesIt) {
  HubCase c;
  fs::remove(c.list);
  test::RunResult r = c.convert("out");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("IO_OPEN"), std::string::npos) << r.err;
  ASSERT_EQ(mkfifo(c.list.c_str(), 0600), 0);
  r = c.convert("out");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("IO_NOT_REGULAR"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(c.tmp.str("out")));
}

// Both checks at once, with a signed conversion: a tampered input is refused by both, and
// OUT is neither complete-looking nor signed.
TEST(ConvertHubSha256, ATamperedInputUnderBothChecksIsRefusedWithoutACompleteOrSignedOut) {
  HubCase c;
  const std::string keys = test::fixture("oms/conformance/test/assets/keys/p384/");
  const std::string bundle = c.tmp.str("in.sig");
  ASSERT_EQ(test::run_ckpt("sign -q --private-key " + q(keys + "signing-key.pem") + " -o " + q(bundle) + " " + q(c.in)).exit_code, 0);
  std::vector<uint8_t> bytes = test::read_file(c.in + "/model-00005-of-00007.safetensors");
  bytes[bytes.size() - 1] ^= 1;
  test::write_file(c.in + "/model-00005-of-00007.safetensors", bytes);
  const test::RunResult r = test::run_ckpt(
      "convert -q --hub-sha256 " + q(c.list) + " --expect-signature " + q(bundle) + " --public-key " +
      q(keys + "signing-key-pub.pem") + " --sign-key " + q(keys + "signing-key.pem") + " " + q(c.in) + " " + q(c.tmp.str("out")));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("HUB_SHA256_MISMATCH model-00005-of-00007.safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("OMS_DIGEST_MISMATCH model-00005-of-00007.safetensors"), std::string::npos) << r.err;
  EXPECT_FALSE(c.complete("out"));
  EXPECT_FALSE(fs::exists(c.tmp.str("out/model.sig")));
  EXPECT_FALSE(fs::exists(c.tmp.str("out/model.provenance")));
}

}  // namespace
}  // namespace ckpt
