// Conversion attestations (sign/provenance.h): `convert --sign-key` and `repack-experts
// --sign-key` write OUT/model.sig (an ordinary OMS bundle) and OUT/model.provenance (a
// signed SLSA provenance); `verify-signature --provenance --reference [--recompute]`.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>

#include "io/hash.h"
#include "sign/provenance.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

std::string q(const std::string& s) { return test::shell_quote(s); }
std::string keys(const std::string& rel) { return test::fixture("oms/conformance/test/assets/keys/" + rel); }
const std::string kSignKey = " --sign-key " + q(keys("p384/signing-key.pem")) + " ";
const std::string kTrust = " --public-key " + q(keys("p384/signing-key-pub.pem")) + " ";

void flip_byte(const std::string& path, size_t at) {
  std::vector<uint8_t> bytes = test::read_file(path);
  ASSERT_LT(at, bytes.size());
  bytes[at] ^= 1;
  test::write_file(path, bytes);
}

// IN (dsv4-tiny) converted with --sign-key into OUT.
struct SignedConversion {
  test::TempDir tmp;
  std::string in = tmp.str("in"), out = tmp.str("out");
  SignedConversion(const std::string& extra = "") {
    test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
    const test::RunResult r = test::run_ckpt("convert -q" + kSignKey + extra + q(in) + " " + q(out));
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  test::RunResult verify(const std::string& extra = "", const std::string& reference = "") const {
    return test::run_ckpt("verify-signature -q" + kTrust + "--provenance " + q(out + "/model.provenance") +
                          " --reference " + q(reference.empty() ? in : reference) + " " + extra + q(out));
  }
};

TEST(OmsProvenance, ASignedConversionWritesABundleAnyOmsVerifierAcceptsAndAProvenanceThatVerifies) {
  SignedConversion c;
  ASSERT_TRUE(fs::exists(c.out + "/model.sig"));
  ASSERT_TRUE(fs::exists(c.out + "/model.provenance"));
  // The bundle alone, as ckpt verify-signature checks any OMS bundle.
  test::RunResult r = test::run_ckpt("verify-signature -q" + kTrust + "--bundle " + q(c.out + "/model.sig") + " " + q(c.out));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = c.verify();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Both files are listed in OUT's manifest as ckptkit's.
  const std::string manifest = test::read_text(c.out + "/.ckptkit/manifest.json");
  EXPECT_NE(manifest.find("model.provenance"), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("model.sig"), std::string::npos) << manifest;
}

TEST(OmsProvenance, TheProvenanceFailsAfterOneByteOfTheInputChanges) {
  SignedConversion c;
  flip_byte(c.in + "/model-00003-of-00007.safetensors", 5000);
  const test::RunResult r = c.verify();
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("PROVENANCE_INPUT_MISMATCH model-00003-of-00007.safetensors"), std::string::npos) << r.err;
}

TEST(OmsProvenance, TheProvenanceFailsAfterOneByteOfTheOutputChanges) {
  SignedConversion c;
  flip_byte(c.out + "/model-00002-of-00007.safetensors", 4000);
  const test::RunResult r = c.verify();
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("OMS_DIGEST_MISMATCH model-00002-of-00007.safetensors"), std::string::npos) << r.err;
}

// The key owner changes OUT and signs it again: OUT verifies against its bundle, but it is
// no longer what the provenance says the conversion produced.
TEST(OmsProvenance, AnOutputChangedAndSignedAgainIsNotTheProvenanceSubject) {
  SignedConversion c;
  flip_byte(c.out + "/tokenizer.json", 0);
  test::RunResult r = test::run_ckpt("sign -q" + std::string(" --private-key ") + q(keys("p384/signing-key.pem")) +
                                     " --ignore-paths .ckptkit --ignore-paths model.provenance -o " +
                                     q(c.out + "/model.sig") + " " + q(c.out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = c.verify();
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("PROVENANCE_SUBJECT tokenizer.json"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("OMS_DIGEST_MISMATCH"), std::string::npos) << r.err;
}

TEST(OmsProvenance, AProvenanceSignedByAnotherKeyIsRefused) {
  SignedConversion c;
  const test::RunResult r = test::run_ckpt("verify-signature -q --public-key " + q(keys("p521/signing-key-pub.pem")) +
                                           " --provenance " + q(c.out + "/model.provenance") + " --reference " +
                                           q(c.in) + " " + q(c.out));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("OMS_SIGNATURE"), std::string::npos) << r.err;
}

TEST(OmsProvenance, RecomputeReproducesTheOutputAndRemovesItsTemporary) {
  SignedConversion c("--experts int8-shift --rounding half-even ");
  const test::RunResult r = c.verify("--recompute ");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const auto& e : fs::directory_iterator(c.tmp.path()))
    EXPECT_EQ(e.path().filename().string().find(".out.recompute-"), std::string::npos) << e.path();
}

// A provenance that records other options than those OUT was made with (signed by the key
// owner, so every digest check passes): only converting again shows it.
TEST(OmsProvenance, RecomputeFindsAnOutputTheRecordedOptionsDoNotProduce) {
  SignedConversion c;
  oms::ConversionAttestation a{"convert", c.in, c.out, {{"experts", "bf16"}, {"headroom-bits", "3"}, {"rounding", "half-away"}},
                               "", keys("p384/signing-key.pem")};
  ASSERT_FALSE(oms::attest_conversion(a).findings.has_errors());
  EXPECT_EQ(c.verify().exit_code, 0);
  const test::RunResult r = c.verify("--recompute ");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("PROVENANCE_RECOMPUTE_MISMATCH"), std::string::npos) << r.err;
}

TEST(OmsProvenance, RecomputeRefusesARecordedOptionItDoesNotKnow) {
  SignedConversion c;
  oms::ConversionAttestation a{"convert", c.in, c.out,
                               {{"experts", "keep"}, {"headroom-bits", "3"}, {"rounding", "half-away"}, {"dither", "on"}},
                               "", keys("p384/signing-key.pem")};
  ASSERT_FALSE(oms::attest_conversion(a).findings.has_errors());
  const test::RunResult r = c.verify("--recompute ");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("'dither'"), std::string::npos) << r.err;
}

TEST(OmsProvenance, TheProvenanceRecordsTheDigestOfTheInputBundleThatWasVerified) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), bundle = tmp.str("in.sig"), out = tmp.str("out");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  ASSERT_EQ(test::run_ckpt("sign -q --private-key " + q(keys("p384/signing-key.pem")) + " -o " + q(bundle) + " " + q(in)).exit_code, 0);
  test::RunResult r = test::run_ckpt("convert -q" + kSignKey + "--expect-signature " + q(bundle) + kTrust + q(in) + " " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_ckpt("verify-signature -q --json -" + kTrust + "--provenance " + q(out + "/model.provenance") +
                     " --reference " + q(in) + " " + q(out));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"input_bundle_digest\":\"" + sha256_hex(test::read_text(bundle)) + "\""), std::string::npos) << r.out;
}

TEST(OmsProvenance, SignKeyIsRefusedForADryRunAndAPartition) {
  test::TempDir tmp;
  EXPECT_EQ(test::run_ckpt("convert --dry-run" + kSignKey + q(test::fixture("oracle/dsv4-tiny")) + " " + q(tmp.str("o"))).exit_code, 2);
  EXPECT_EQ(test::run_ckpt("convert --partition 0/2" + kSignKey + q(test::fixture("oracle/dsv4-tiny")) + " " + q(tmp.str("o"))).exit_code, 2);
}

TEST(OmsProvenance, AnUnsignedOverwriteRemovesTheEarlierSignatureAndProvenance) {
  SignedConversion c;
  const test::RunResult r = test::run_ckpt("convert -q --overwrite --experts bf16 " + q(c.in) + " " + q(c.out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(c.out + "/model.sig"));
  EXPECT_FALSE(fs::exists(c.out + "/model.provenance"));
}

TEST(OmsProvenance, ASignedRepackVerifiesAndRecomputes) {
  test::TempDir tmp;
  const std::string in = test::fixture("ggml/qwen3next-tiny.gguf"), out = tmp.str("pack");
  test::RunResult r = test::run_ckpt("repack-experts -q --align 512" + kSignKey + q(in) + " " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_ckpt("verify-signature -q" + kTrust + "--provenance " + q(out + "/model.provenance") + " --reference " +
                     q(in) + " --recompute " + q(out));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  flip_byte(out + "/experts.bin", 100);
  r = test::run_ckpt("verify-signature -q" + kTrust + "--provenance " + q(out + "/model.provenance") + " --reference " +
                     q(in) + " " + q(out));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("OMS_DIGEST_MISMATCH experts.bin"), std::string::npos) << r.err;
}

// The value of option `name` in OUT's provenance (its payload read without verifying: the
// test reads what was written), "(not recorded)" when absent.
std::string recorded_option(const std::string& out, const std::string& name) {
  oms::Bundle b;
  oms::Provenance p;
  std::string error;
  EXPECT_TRUE(oms::parse_bundle(test::read_text(out + "/model.provenance"), b, error)) << error;
  EXPECT_TRUE(oms::parse_provenance(b.payload, p, error)) << error;
  for (const auto& [n, v] : p.options)
    if (n == name) return v;
  return "(not recorded)";
}

// A default repack (the tree alone) records source-sha256 "no", applied back by
// --recompute: the manifest made again has no whole-file digest either, so the pack
// recomputes equal. --source-sha256 records nothing, as every provenance written while the
// whole-file digest was the default did, and --recompute of it writes the digest again.
TEST(OmsProvenance, ARepackRecordsWhetherItWroteTheWholeFileDigestAndRecomputes) {
  test::TempDir tmp;
  const std::string in = test::fixture("ggml/qwen3next-tiny.gguf"), out = tmp.str("pack");
  test::RunResult r = test::run_ckpt("repack-experts -q" + kSignKey + q(in) + " " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(recorded_option(out, "source-sha256"), "no");
  EXPECT_EQ(recorded_option(out, "tree-chunk"), "67108864");
  r = test::run_ckpt("verify-signature -q" + kTrust + "--provenance " + q(out + "/model.provenance") + " --reference " +
                     q(in) + " --recompute " + q(out));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string whole = tmp.str("whole");
  ASSERT_EQ(test::run_ckpt("repack-experts -q --source-sha256" + kSignKey + q(in) + " " + q(whole)).exit_code, 0);
  EXPECT_EQ(recorded_option(whole, "source-sha256"), "(not recorded)");
  r = test::run_ckpt("verify-signature -q" + kTrust + "--provenance " + q(whole + "/model.provenance") + " --reference " +
                     q(in) + " --recompute " + q(whole));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// A recorded source-sha256 other than yes/no, signed by the key owner, is not guessed at:
// --recompute refuses the options (PROVENANCE_OPTIONS) instead of repacking with a default.
TEST(OmsProvenance, ARecordedSourceSha256OtherThanYesOrNoIsRefused) {
  test::TempDir tmp;
  const std::string in = test::fixture("ggml/qwen3next-tiny.gguf"), out = tmp.str("pack");
  ASSERT_EQ(test::run_ckpt("repack-experts -q" + kSignKey + q(in) + " " + q(out)).exit_code, 0);
  oms::ConversionAttestation a{"repack-experts", in, out,
                               {{"a-log", "fix"}, {"align", "4096"}, {"tree-chunk", "67108864"}, {"source-sha256", "maybe"}},
                               "", keys("p384/signing-key.pem")};
  ASSERT_FALSE(oms::attest_conversion(a).findings.has_errors());
  const test::RunResult r = test::run_ckpt("verify-signature -q" + kTrust + "--provenance " + q(out + "/model.provenance") +
                                           " --reference " + q(in) + " --recompute " + q(out));
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("PROVENANCE_OPTIONS"), std::string::npos) << r.err;
  EXPECT_EQ(recorded_option(out, "source-sha256"), "maybe");  // the provenance the check read
}

// relayout joins the same attestation: its options recorded through the mapping its front end
// applies, and --recompute runs the relayout again.
TEST(OmsProvenance, ASignedRelayoutVerifiesRecomputesAndFindsOtherRecordedOptions) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  test::copy_tree(test::fixture("families/qwen3moe-fp8/in"), in);
  test::RunResult r = test::run_ckpt("relayout -q --tp 2" + kSignKey + q(in) + " " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string verify = "verify-signature -q" + kTrust + "--provenance " + q(out + "/model.provenance") +
                             " --reference " + q(in) + " --recompute " + q(out);
  r = test::run_ckpt(verify);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Signed by the key owner with another target: every digest matches, converting again does not.
  oms::ConversionAttestation a{"relayout", in, out,
                               {{"tp", "4"}, {"ep", "1"}, {"engine", ""}, {"min-block", ""}, {"block", ""}, {"bf16", ""}},
                               "", keys("p384/signing-key.pem")};
  ASSERT_FALSE(oms::attest_conversion(a).findings.has_errors());
  r = test::run_ckpt(verify);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("PROVENANCE_RECOMPUTE_MISMATCH"), std::string::npos) << r.err;  // 32x32 scales, not 64x64
  flip_byte(in + "/model-00001-of-00003.safetensors", 1000);
  r = test::run_ckpt(verify);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("PROVENANCE_INPUT_MISMATCH model-00001-of-00003.safetensors"), std::string::npos) << r.err;
}

// A key that cannot sign (a public key, a FIFO) is found before anything is read or written:
// it was found after the whole conversion ("OUT is complete but not signed").
TEST(OmsProvenance, ASignKeyThatCannotSignIsRefusedBeforeTheConversionStarts) {
  test::TempDir tmp;
  const std::string fifo = tmp.str("key.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  struct Case {
    std::string command, key;
    int exit_code;
    std::string code;
  };
  const std::string dsv4 = q(test::fixture("oracle/dsv4-tiny")), qwen = q(test::fixture("families/qwen3moe-fp8/in"));
  for (const Case& c : {Case{"convert -q " + dsv4, keys("p384/signing-key-pub.pem"), 2, "KEY_UNUSABLE"},
                        Case{"relayout -q --tp 2 " + qwen, keys("p384/signing-key-pub.pem"), 2, "KEY_UNUSABLE"},
                        Case{"relayout -q --tp 2 " + qwen, fifo, 3, "IO_READ"},
                        Case{"repack-experts -q " + q(test::fixture("ggml/qwen3next-tiny.gguf")), tmp.str("none.pem"), 3, "IO_"}}) {
    const std::string out = tmp.str("out");
    const test::RunResult r = test::run_ckpt(c.command + " --sign-key " + q(c.key) + " " + q(out));
    EXPECT_EQ(r.exit_code, c.exit_code) << c.command << ": " << r.err;
    EXPECT_NE(r.err.find(c.code), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("OUT is complete but not signed"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out)) << c.command << ": OUT was written before the key was checked";
  }
}

TEST(OmsProvenance, SignAndVerifySignatureWriteAJsonReport) {
  SignedConversion c;
  test::RunResult r = test::run_ckpt("sign -q --json - --private-key " + q(keys("p384/signing-key.pem")) + " -o " +
                                     q(c.tmp.str("in.sig")) + " " + q(c.in));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"schema\":\"ckptkit/signature-report/v1\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"command\":\"sign\""), std::string::npos) << r.out;
  r = c.verify("--json - ");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"verified\":true"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"command\":\"convert\""), std::string::npos) << r.out;
  // A failed verification still writes its report, naming why.
  flip_byte(c.in + "/tokenizer.json", 0);
  r = c.verify("--json - ");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.out.find("\"status\":\"input_error\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PROVENANCE_INPUT_MISMATCH"), std::string::npos) << r.out;
}

TEST(OmsProvenance, ASignedConversionValidatesAgainstItsReference) {
  SignedConversion c;
  const test::RunResult r = test::run_ckpt("validate -q --deep --reference " + q(c.in) + " " + q(c.out));
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
}

// IN's own bundle signs IN's bytes: a conversion never copies it into OUT (where it would
// claim to sign the output); a signed conversion of a signed IN validates and verifies.
TEST(OmsProvenance, TheInputsOwnBundleIsNotCopiedIntoTheOutput) {
  test::TempDir tmp;
  const std::string in = tmp.str("in");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  ASSERT_EQ(test::run_ckpt("sign -q --private-key " + q(keys("p384/signing-key.pem")) + " -o " + q(in + "/model.sig") + " " + q(in)).exit_code, 0);
  test::RunResult r = test::run_ckpt("convert -q " + q(in) + " " + q(tmp.str("plain")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(tmp.str("plain/model.sig")));
  r = test::run_ckpt("convert -q" + kSignKey + q(in) + " " + q(tmp.str("signed")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_ckpt("validate -q --reference " + q(in) + " " + q(tmp.str("signed")));
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  r = test::run_ckpt("verify-signature -q" + kTrust + "--provenance " + q(tmp.str("signed/model.provenance")) +
                     " --reference " + q(in) + " --recompute " + q(tmp.str("signed")));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// A file of IN that is a link to a file inside IN (a Hugging Face cache snapshot's layout)
// is read by convert through the link, and attested as its target.
TEST(OmsProvenance, AnInputFileThatIsALinkIsAttestedAsItsTarget) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  fs::create_directory(in + "/blobs");
  fs::rename(in + "/tokenizer.json", in + "/blobs/tok");
  fs::create_symlink("blobs/tok", in + "/tokenizer.json");
  test::RunResult r = test::run_ckpt("convert -q" + kSignKey + q(in) + " " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_ckpt("verify-signature -q" + kTrust + "--provenance " + q(out + "/model.provenance") + " --reference " +
                     q(in) + " " + q(out));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(OmsProvenance, FinalizeSignsTheAssembledPartitions) {
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny"), out = tmp.str("out");
  ASSERT_EQ(test::run_ckpt("convert -q --partition 0/2 " + q(in) + " " + q(out)).exit_code, 0);
  ASSERT_EQ(test::run_ckpt("convert -q --partition 1/2 " + q(in) + " " + q(out)).exit_code, 0);
  test::RunResult r = test::run_ckpt("convert -q --finalize --partitions 2" + kSignKey + q(in) + " " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_ckpt("verify-signature -q" + kTrust + "--provenance " + q(out + "/model.provenance") + " --reference " +
                     q(in) + " --recompute " + q(out));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
}  // namespace ckpt
