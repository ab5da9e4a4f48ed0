// `ckpt convert --expect-signature BUNDLE --public-key PUB`: the input verified against its
// OMS bundle during the conversion; OUT finalized (index, config.json) only when it verifies.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

std::string q(const std::string& s) { return test::shell_quote(s); }
std::string keys(const std::string& rel) { return test::fixture("oms/conformance/test/assets/keys/" + rel); }

TEST(OmsConvert, ConvertWithExpectSignatureFinalizesOnlyAVerifiedInput) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), bundle = tmp.str("in.sig");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  ASSERT_EQ(test::run_ckpt("sign -q --private-key " + q(keys("p384/signing-key.pem")) + " -o " + q(bundle) + " " + q(in)).exit_code, 0);
  const std::string expect = " --expect-signature " + q(bundle) + " --public-key " + q(keys("p384/signing-key-pub.pem")) + " ";
  test::RunResult r = test::run_ckpt("convert -q" + expect + q(in) + " " + q(tmp.str("out")));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The seven shards' digests are the conversion's own read (io/lockstep_hasher.h); the five
  // small files are read by the check.
  r = test::run_ckpt("convert --overwrite" + expect + q(in) + " " + q(tmp.str("out")));
  EXPECT_NE(r.out.find("12 signed files match (7 hashed in the conversion's own pass over the input"),
            std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(tmp.str("out/model.safetensors.index.json")));
  EXPECT_TRUE(fs::exists(tmp.str("out/config.json")));
  // One byte more in a side file of IN: the conversion itself succeeds, the input does not verify.
  test::write_text(in + "/tokenizer_config.json", test::read_text(in + "/tokenizer_config.json") + " ");
  r = test::run_ckpt("convert -q" + expect + q(in) + " " + q(tmp.str("out2")));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("OMS_DIGEST_MISMATCH tokenizer_config.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("CONVERT_SIGNATURE"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp.str("out2/model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(tmp.str("out2/config.json")));
  // Refused combinations.
  EXPECT_EQ(test::run_ckpt("convert --dry-run" + expect + q(in) + " " + q(tmp.str("out3"))).exit_code, 2);
  EXPECT_EQ(test::run_ckpt("convert --expect-signature " + q(bundle) + " " + q(in) + " " + q(tmp.str("out4"))).exit_code, 2);
}

// A bundle that cannot verify (another key's) is refused before anything is written:
// nothing is converted for a signature that was never going to pass.
TEST(OmsConvert, ABundleThatDoesNotVerifyIsRefusedBeforeAnythingIsWritten) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), bundle = tmp.str("in.sig");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  ASSERT_EQ(test::run_ckpt("sign -q --private-key " + q(keys("p384/signing-key.pem")) + " -o " + q(bundle) + " " + q(in)).exit_code, 0);
  const test::RunResult r = test::run_ckpt("convert -q --expect-signature " + q(bundle) + " --public-key " +
                                           q(keys("p521/signing-key-pub.pem")) + " " + q(in) + " " + q(tmp.str("out")));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("nothing was written"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp.str("out")));
}

}  // namespace
}  // namespace ckpt
