// `ckpt validate --signature BUNDLE --public-key PUB`: the OMS check inside pre-launch
// validation (apps/ckpt/cmd_sign.cpp: check_signature_into), on a real checkpoint.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"

namespace ckpt {
namespace {

std::string q(const std::string& s) { return test::shell_quote(s); }
std::string keys(const std::string& rel) { return test::fixture("oms/conformance/test/assets/keys/" + rel); }

TEST(OmsValidate, ValidateWithSignatureReportsTheVerifiedBundleAndFailsOnAChangedByte) {
  test::TempDir tmp;
  const std::string model = tmp.str("dsv4-tiny"), bundle = tmp.str("model.sig");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), model);
  ASSERT_EQ(test::run_ckpt("sign -q --private-key " + q(keys("p384/signing-key.pem")) + " " + q(model)).exit_code, 0);
  ASSERT_TRUE(std::filesystem::exists(bundle));  // the default: model.sig beside the model
  const std::string validate = "validate --signature " + q(bundle) + " --public-key " + q(keys("p384/signing-key-pub.pem")) +
                               " --json - " + q(model);
  test::RunResult r = test::run_ckpt(validate);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"OMS_VERIFIED\""), std::string::npos) << r.out;
  // One byte of a shard changed: the checkpoint is still well formed, the signature is not.
  const std::string shard = model + "/model-00005-of-00007.safetensors";
  auto bytes = test::read_file(shard);
  bytes[bytes.size() - 1] ^= 1;
  test::write_file(shard, bytes);
  r = test::run_ckpt(validate);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.out.find("\"OMS_DIGEST_MISMATCH\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model-00005-of-00007.safetensors"), std::string::npos);
  // Without the trust, or with the wrong key.
  EXPECT_EQ(test::run_ckpt("validate --signature " + q(bundle) + " " + q(model)).exit_code, 2);
  r = test::run_ckpt("validate --signature " + q(bundle) + " --public-key " + q(keys("wrong/wrong-key-pub.pem")) + " " + q(model));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("OMS_SIGNATURE"), std::string::npos) << r.out << r.err;
}

// --deep --signature: the deep pass hashes each shard as it reads it, and the signature
// check takes those digests (one read of the model); a changed byte is still found.
TEST(OmsValidate, DeepValidationWithSignatureHashesTheShardsInItsOwnPass) {
  test::TempDir tmp;
  const std::string model = tmp.str("dsv4-tiny"), bundle = tmp.str("model.sig");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), model);
  ASSERT_EQ(test::run_ckpt("sign -q --private-key " + q(keys("p384/signing-key.pem")) + " " + q(model)).exit_code, 0);
  const std::string validate = "validate --deep --signature " + q(bundle) + " --public-key " +
                               q(keys("p384/signing-key-pub.pem")) + " " + q(model);
  test::RunResult r = test::run_ckpt(validate);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("12 signed files match (7 hashed in the --deep pass)"), std::string::npos) << r.out;
  const std::string shard = model + "/model-00003-of-00007.safetensors";
  auto bytes = test::read_file(shard);
  bytes[bytes.size() - 1] ^= 1;
  test::write_file(shard, bytes);
  r = test::run_ckpt(validate);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.out.find("OMS_DIGEST_MISMATCH model-00003-of-00007.safetensors"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ckpt
