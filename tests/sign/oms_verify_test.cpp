// Hostile bundles and models against the OMS verifier and signer (libconvert/sign/): each
// statement rule reached with a statement the trusted key really signed (so the rule, not
// the signature, refuses it), paths that leave the model, links, FIFOs, duplicate keys,
// bad Base64, nesting, sizes; and the CLI's exit codes.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "io/hash.h"
#include "sign/oms_bundle.h"
#include "sign/oms_crypto.h"
#include "sign/oms_files.h"
#include "sign/oms_sign.h"
#include "sign/oms_verify.h"
#include "test_util.h"

namespace ckpt::oms {
namespace {

namespace fs = std::filesystem;

std::string keys(const std::string& rel) { return test::fixture("oms/conformance/test/assets/keys/" + rel); }
std::string q(const std::string& s) { return test::shell_quote(s); }

// A model of two files: a = "alpha\n", sub/b = "beta\n".
struct Model {
  test::TempDir tmp;
  std::string dir = tmp.str("model");
  Model() {
    fs::create_directories(dir + "/sub");
    test::write_text(dir + "/a", "alpha\n");
    test::write_text(dir + "/sub/b", "beta\n");
  }
  std::string bundle() const { return tmp.str("model.sig"); }
};

// A statement listing `listed` (sorted by name here, as the root digest requires).
std::string statement_for(std::vector<Resource> resources, const std::string& extra_serialization = "") {
  std::stable_sort(resources.begin(), resources.end(), [](const Resource& a, const Resource& b) { return a.name < b.name; });
  std::string r;
  for (const auto& x : resources)
    r += std::string(r.empty() ? "" : ",") + R"({"name":")" + x.name + R"(","digest":")" + x.digest +
         R"(","algorithm":"sha256"})";
  return R"({"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"model","digest":{"sha256":")" +
         root_digest(resources) + R"("}}],"predicateType":"https://model_signing/signature/v1.0","predicate":{"resources":[)" +
         r + R"(],"serialization":{"method":"files","hash_type":"sha256","allow_symlinks":false)" + extra_serialization +
         "}}}";
}

std::vector<Resource> model_resources() {
  return {{"a", sha256_hex("alpha\n")}, {"sub/b", sha256_hex("beta\n")}};
}

// A bundle of `payload` really signed by the suite's P-384 key.
std::string signed_bundle(const std::string& payload, const std::string& payload_type = std::string(kInTotoPayloadType)) {
  EcKey key;
  std::string error, sig;
  EXPECT_TRUE(key.load_private_pem(test::read_text(keys("certificate/signing-key.pem")), error)) << error;
  EXPECT_TRUE(key.sign(dsse_pae(payload_type, payload), sig, error)) << error;
  Bundle b;
  b.key_hint = key.hint();
  b.payload_type = payload_type;
  b.payload = payload;
  b.signatures = {sig};
  return bundle_json(b);
}

VerifyResult verify(const Model& m, const std::string& bundle_text, bool ignore_unsigned = false,
                    std::vector<std::string> ignore = {}) {
  test::write_text(m.bundle(), bundle_text);
  VerifyOptions o;
  o.model = m.dir;
  o.bundle = m.bundle();
  o.public_key = keys("certificate/signing-key-pub.pem");
  o.ignore_unsigned_files = ignore_unsigned;
  o.ignore_paths = std::move(ignore);
  return verify_signature(o);
}

bool has(const VerifyResult& r, const std::string& code) { return r.findings.has_code(code); }

TEST(OmsCrypto, Base64DecodingIsStrict) {
  std::string out, error;
  EXPECT_TRUE(base64_decode("aGVsbG8=", out, error));
  EXPECT_EQ(out, "hello");
  EXPECT_TRUE(base64_decode("aGVsbG8", out, error));  // padding optional
  EXPECT_EQ(out, "hello");
  EXPECT_EQ(base64_encode("hello"), "aGVsbG8=");
  for (const char* bad : {"aGVsbG8==", "aGVs bG8=", "aGVsbG9=", "a", "aGVs\nbG8=", "aGV*bG8=", "=aGV"})
    EXPECT_FALSE(base64_decode(bad, out, error)) << bad;
}

TEST(OmsCrypto, PaeIsTheDsseEncoding) {
  // The example of the DSSE protocol specification.
  EXPECT_EQ(dsse_pae("http://example.com/HelloWorld", "hello world"),
            "DSSEv1 29 http://example.com/HelloWorld 11 hello world");
}

TEST(OmsCrypto, KeysOtherThanEcP256P384P521AreRefused) {
  EcKey key;
  std::string error;
  // ca-priv.pem is an RSA key.
  EXPECT_FALSE(key.load_private_pem(test::read_text(keys("certificate/ca-priv.pem")), error));
  EXPECT_NE(error.find("not an EC key"), std::string::npos) << error;
  EXPECT_TRUE(key.load_private_pem(test::read_text(keys("p521/signing-key.pem")), error)) << error;
  EXPECT_EQ(key.curve(), "P-521");
}

TEST(OmsCrypto, TheKeyHintIsTheReferenceClientsOne) {
  // The Python client's key-simple bundle names its key by this hint: SHA-256 of the PEM.
  EcKey pub, priv;
  std::string error;
  ASSERT_TRUE(pub.load_public_pem(test::read_text(keys("certificate/signing-key-pub.pem")), error)) << error;
  ASSERT_TRUE(priv.load_private_pem(test::read_text(keys("certificate/signing-key.pem")), error)) << error;
  EXPECT_EQ(pub.hint(), "e8450dec4eb99dae995da9af1bc2cc9f76ed669ee2e744f57abba763df3e3f8e");
  EXPECT_EQ(priv.hint(), pub.hint());
  EXPECT_EQ(pub.curve(), "P-384");
}

TEST(OmsVerify, AStatementSignedByTheKeyVerifies) {
  Model m;
  const VerifyResult r = verify(m, signed_bundle(statement_for(model_resources())));
  EXPECT_TRUE(r.verified) << test::describe(r.findings);
  EXPECT_EQ(r.files_checked, 2u);
}

TEST(OmsVerify, ResourceNamesThatLeaveTheModelAreRefusedUnread) {
  Model m;
  for (const std::string name : {"../outside", "/etc/passwd", "a//b", "sub/", "./a", "sub/../a", "."}) {
    auto res = model_resources();
    res.push_back({name, sha256_hex("x")});
    const VerifyResult r = verify(m, signed_bundle(statement_for(res)));
    EXPECT_FALSE(r.verified) << name;
    EXPECT_TRUE(has(r, "OMS_STATEMENT")) << name << ": " << test::describe(r.findings);
  }
}

TEST(OmsVerify, EachStatementRuleRefusesAStatementTheKeySigned) {
  Model m;
  const std::string good = statement_for(model_resources());
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"wrong _type", replaced("https://in-toto.io/Statement/v1", "https://in-toto.io/Statement/v0.1")},
      {"wrong predicateType", replaced("model_signing/signature/v1.0", "model_signing/signature/v9")},
      {"no subject", replaced(R"("subject":[{"name":"model","digest":{"sha256":")" + root_digest(model_resources()) + R"("}}],)", "")},
      {"two subjects", replaced(R"("subject":[)", R"("subject":[{"name":"x","digest":{"sha256":"00"}},)")},
      {"empty resources", statement_for({})},
      {"a resource listed twice", statement_for({{"a", sha256_hex("alpha\n")}, {"a", sha256_hex("alpha\n")}})},
      {"a digest in upper case", replaced(sha256_hex("alpha\n"), [&] { std::string u = sha256_hex("alpha\n"); for (auto& c : u) c = char(toupper(c)); return u; }())},
      {"algorithm not hash_type", replaced(R"("algorithm":"sha256")", R"("algorithm":"blake2b")")},
      {"shard_size with files", replaced(R"("allow_symlinks":false)", R"("allow_symlinks":false,"shard_size":10)")},
      {"allow_symlinks not boolean", replaced(R"("allow_symlinks":false)", R"("allow_symlinks":"no")")},
      {"a duplicate key", replaced(R"("predicateType":)", R"("predicateType":"x","predicateType":)")},
      {"not JSON", good.substr(0, good.size() - 1)},
  };
  for (const auto& [what, payload] : cases) {
    const VerifyResult r = verify(m, signed_bundle(payload));
    EXPECT_FALSE(r.verified) << what;
    EXPECT_TRUE(has(r, "OMS_STATEMENT")) << what << ": " << test::describe(r.findings);
  }
}

TEST(OmsVerify, ARootDigestNotOverTheResourcesIsRefused) {
  Model m;
  std::string s = statement_for(model_resources());
  const std::string root = root_digest(model_resources());
  s.replace(s.find(root), 64, std::string(64, '0'));
  const VerifyResult r = verify(m, signed_bundle(s));
  EXPECT_TRUE(has(r, "OMS_ROOT_DIGEST")) << test::describe(r.findings);
}

TEST(OmsVerify, UnsupportedHashTypesAreRefusedNotIgnored) {
  Model m;
  std::string blake = statement_for(model_resources());
  for (std::string from : {R"("hash_type":"sha256")", R"("algorithm":"sha256")"})
    for (size_t at; (at = blake.find(from)) != std::string::npos;)
      blake.replace(at, from.size(), from.substr(0, from.find(':') + 1) + "\"blake2b\"");
  const VerifyResult r = verify(m, signed_bundle(blake));
  EXPECT_TRUE(has(r, "OMS_UNSUPPORTED")) << test::describe(r.findings);
}

// Shard serialization (spec §6.3.2): shard_size 4 cuts a (6 bytes) into a:0:4, a:4:6 and
// sub/b (5 bytes) into sub/b:0:4, sub/b:4:5; an empty file has no shard and needs none.
std::string shard_statement(std::vector<Resource> res, const std::string& size = "4") {
  std::string s = statement_for(std::move(res));
  s.replace(s.find(R"("method":"files")"), 16, R"("method":"shards","shard_size":)" + size);
  return s;
}

std::vector<Resource> model_shards() {
  return {{"a:0:4", sha256_hex("alph")}, {"a:4:6", sha256_hex("a\n")}, {"sub/b:0:4", sha256_hex("beta")},
          {"sub/b:4:5", sha256_hex("\n")}};
}

TEST(OmsVerify, ShardSerializationIsVerifiedPieceByPiece) {
  Model m;
  test::write_text(m.dir + "/empty", "");
  const std::string bundle = signed_bundle(shard_statement(model_shards()));
  VerifyResult r = verify(m, bundle);
  EXPECT_TRUE(r.verified) << test::describe(r.findings);
  EXPECT_EQ(r.files_checked, 2u);
  EXPECT_EQ(r.bytes_hashed, 11u);
  // One byte of a's second piece changed: that shard is named.
  test::write_text(m.dir + "/a", "alphA\n");
  r = verify(m, bundle);
  EXPECT_TRUE(has(r, "OMS_DIGEST_MISMATCH"));
  EXPECT_NE(test::describe(r.findings).find("a:4:6 has SHA-256"), std::string::npos) << test::describe(r.findings);
  // a grew by one byte: its pieces no longer cut it.
  test::write_text(m.dir + "/a", "alpha\n!");
  EXPECT_TRUE(has(verify(m, bundle), "OMS_SHARD_MISMATCH"));
  test::write_text(m.dir + "/a", "alpha\n");
  // A bundle that leaves a piece out, or cuts by another size, or names no range.
  auto missing = model_shards();
  missing.erase(missing.begin() + 1);
  EXPECT_TRUE(has(verify(m, signed_bundle(shard_statement(missing))), "OMS_SHARD_MISMATCH"));
  EXPECT_TRUE(has(verify(m, signed_bundle(shard_statement(model_shards(), "3"))), "OMS_SHARD_MISMATCH"));
  auto no_range = model_shards();
  no_range[0].name = "a:0";
  EXPECT_TRUE(has(verify(m, signed_bundle(shard_statement(no_range))), "OMS_STATEMENT"));
  no_range[0].name = "a:4:0";
  EXPECT_TRUE(has(verify(m, signed_bundle(shard_statement(no_range))), "OMS_STATEMENT"));
  no_range[0].name = "../a:0:4";
  EXPECT_TRUE(has(verify(m, signed_bundle(shard_statement(no_range))), "OMS_STATEMENT"));
  // shard_size is required with shards, and must be positive.
  EXPECT_TRUE(has(verify(m, signed_bundle(shard_statement(model_shards(), "0"))), "OMS_STATEMENT"));
  // A non-empty unlisted file is still unsigned.
  test::write_text(m.dir + "/extra", "x");
  EXPECT_TRUE(has(verify(m, bundle), "OMS_FILE_UNSIGNED"));
}

TEST(OmsVerify, TheEnvelopeRulesAreChecked) {
  Model m;
  const std::string bundle = signed_bundle(statement_for(model_resources()));
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string s = bundle;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  EXPECT_TRUE(has(verify(m, signed_bundle(statement_for(model_resources()), "application/json")), "OMS_PAYLOAD_TYPE"));
  EXPECT_TRUE(has(verify(m, edited(R"("mediaType":)", R"("mediaType":"x","mediaType":)")), "OMS_BUNDLE"));
  EXPECT_TRUE(has(verify(m, edited(R"("sig":")", R"("sig":"!)")), "OMS_BUNDLE"));
  EXPECT_TRUE(has(verify(m, edited(R"("sig":")", R"("keyid":7,"sig":")")), "OMS_BUNDLE"));
  EXPECT_TRUE(verify(m, edited(R"("sig":")", R"("keyid":null,"sig":")")).verified);
  EXPECT_TRUE(verify(m, edited(R"("sig":")", R"("keyid":"","sig":")")).verified);
  const size_t at = bundle.find(R"("signatures":[)") + 14;
  const size_t end = bundle.find(']', at);
  EXPECT_TRUE(has(verify(m, edited(bundle.substr(at, end - at), bundle.substr(at, end - at) + "," + bundle.substr(at, end - at))), "OMS_BUNDLE"));
  // Nesting deeper than the JSON limit is refused, not recursed into.
  EXPECT_TRUE(has(verify(m, edited(R"("mediaType":)", R"("x":)" + std::string(300, '[') + std::string(300, ']') + R"(,"mediaType":)")), "OMS_BUNDLE"));
  // A signature over other bytes (one payload byte changed) fails the PAE check.
  std::string flipped = statement_for(model_resources());
  EcKey key;
  std::string error, sig;
  ASSERT_TRUE(key.load_private_pem(test::read_text(keys("certificate/signing-key.pem")), error));
  ASSERT_TRUE(key.sign(dsse_pae(kInTotoPayloadType, flipped), sig, error));
  flipped[flipped.size() - 3] = ' ';
  Bundle b{std::string(kBundleMediaTypeV03), Material::public_key, key.hint(), {}, std::string(kInTotoPayloadType), flipped, {sig}};
  EXPECT_TRUE(has(verify(m, bundle_json(b)), "OMS_SIGNATURE"));
}

TEST(OmsVerify, ModelFilesAreCheckedByTheBundlesRules) {
  Model m;
  const std::string bundle = signed_bundle(statement_for(model_resources()));
  EXPECT_TRUE(verify(m, bundle).verified);
  test::write_text(m.dir + "/extra", "x");
  EXPECT_TRUE(has(verify(m, bundle), "OMS_FILE_UNSIGNED"));
  EXPECT_TRUE(verify(m, bundle, true).verified);
  EXPECT_TRUE(verify(m, bundle, false, {"extra"}).verified);
  EXPECT_TRUE(verify(m, bundle, false, {m.dir + "/extra"}).verified);  // absolute, inside the model
  // The default exclusions: a .git directory is never part of the model.
  fs::remove(m.dir + "/extra");
  fs::create_directories(m.dir + "/.git/objects");
  test::write_text(m.dir + "/.git/objects/x", "x");
  test::write_text(m.dir + "/.gitignore", "");
  EXPECT_TRUE(verify(m, bundle).verified);
  // ...but a subdir/.git is (only top-level components are default exclusions).
  fs::create_directories(m.dir + "/sub/.git");
  test::write_text(m.dir + "/sub/.git/x", "x");
  EXPECT_TRUE(has(verify(m, bundle), "OMS_FILE_UNSIGNED"));
  fs::remove_all(m.dir + "/sub/.git");
  // One changed byte, a missing file.
  test::write_text(m.dir + "/a", "alphA\n");
  EXPECT_TRUE(has(verify(m, bundle, true), "OMS_DIGEST_MISMATCH"));
  fs::remove(m.dir + "/a");
  EXPECT_TRUE(has(verify(m, bundle, true), "OMS_FILE_MISSING"));
}

// convert --expect-signature verifies the bundle before writing anything and the model's
// files at the end against the statement it verified then (verify_files): the bundle is
// not read again (here it is gone by then), the files are still checked, and a result that
// did not verify yields no VerifiedBundle to check them against.
TEST(OmsVerify, FilesAreCheckedAgainstTheStatementVerifiedEarlier) {
  Model m;
  test::write_text(m.bundle(), signed_bundle(statement_for(model_resources())));
  VerifyOptions o;
  o.model = m.dir;
  o.bundle = m.bundle();
  o.public_key = keys("certificate/signing-key-pub.pem");
  VerifyResult bundle;
  ASSERT_TRUE(verify_bundle(o, bundle)) << test::describe(bundle.findings);
  EXPECT_EQ(bundle.files_checked, 0u);  // the bundle alone: no model file read
  const std::optional<VerifiedBundle> verified = verified_bundle(bundle);
  ASSERT_TRUE(verified);
  fs::remove(m.bundle());
  const VerifyResult files = verify_files(o, *verified);
  EXPECT_TRUE(files.verified) << test::describe(files.findings);
  EXPECT_EQ(files.files_checked, 2u);
  EXPECT_EQ(files.root_digest, bundle.root_digest);
  test::write_text(m.dir + "/a", "alphA\n");
  const VerifyResult changed = verify_files(o, *verified);
  EXPECT_FALSE(changed.verified);
  EXPECT_TRUE(has(changed, "OMS_DIGEST_MISMATCH")) << test::describe(changed.findings);
  VerifyResult unverified = bundle;
  unverified.verified = false;
  EXPECT_FALSE(verified_bundle(unverified));
}

TEST(OmsVerify, AListedFileUnderAnIgnorePathIsStillChecked) {
  Model m;
  const std::string bundle = signed_bundle(statement_for(model_resources(), R"(,"ignore_paths":["sub"])"));
  EXPECT_TRUE(verify(m, bundle).verified);
  test::write_text(m.dir + "/sub/b", "BETA\n");
  EXPECT_TRUE(has(verify(m, bundle), "OMS_DIGEST_MISMATCH"));
}

TEST(OmsVerify, BundleIgnorePathsThatAreNotRelativePathsMatchNothing) {
  Model m;
  test::write_text(m.dir + "/extra", "x");
  for (const std::string p : {"/", ".", "..", "../model", "/extra"}) {
    const std::string bundle = signed_bundle(statement_for(model_resources(), R"(,"ignore_paths":[")" + p + R"("])"));
    EXPECT_TRUE(has(verify(m, bundle), "OMS_FILE_UNSIGNED")) << p;
  }
}

TEST(OmsVerify, LinksAreRefusedUnlessTheBundleAllowsThem) {
  Model m;
  fs::create_symlink("a", m.dir + "/link");
  auto res = model_resources();
  res.push_back({"link", sha256_hex("alpha\n")});
  EXPECT_TRUE(has(verify(m, signed_bundle(statement_for(res))), "OMS_SYMLINK"));
  std::string allowed = statement_for(res);
  allowed.replace(allowed.find(R"("allow_symlinks":false)"), 22, R"("allow_symlinks":true)");
  EXPECT_TRUE(verify(m, signed_bundle(allowed)).verified);
  // Unlisted, a link is still refused (never silently followed out of the model).
  fs::remove(m.dir + "/link");
  fs::create_symlink("/etc", m.dir + "/escape");
  EXPECT_TRUE(has(verify(m, signed_bundle(statement_for(model_resources()))), "OMS_SYMLINK"));
  EXPECT_TRUE(has(verify(m, signed_bundle(allowed)), "OMS_SYMLINK"));  // a link to a directory
}

TEST(OmsVerify, AFifoInTheModelIsNeverOpened) {
  Model m;
  ASSERT_EQ(mkfifo((m.dir + "/fifo").c_str(), 0600), 0);
  auto res = model_resources();
  res.push_back({"fifo", sha256_hex("")});
  // Opening the FIFO would block forever: the test finishing is part of the check.
  EXPECT_TRUE(has(verify(m, signed_bundle(statement_for(res))), "OMS_NOT_REGULAR"));
  EXPECT_TRUE(has(verify(m, signed_bundle(statement_for(model_resources()))), "OMS_NOT_REGULAR"));
  const test::RunResult s = test::run_ckpt("sign --private-key " + q(keys("certificate/signing-key.pem")) + " -o " +
                                           q(m.tmp.str("s.sig")) + " " + q(m.dir));
  EXPECT_EQ(s.exit_code, 1) << s.err;
  EXPECT_NE(s.err.find("OMS_NOT_REGULAR"), std::string::npos) << s.err;
}

TEST(OmsVerify, ASingleFileModelIsNamedByItsBasenameOrDot) {
  Model m;
  VerifyOptions o;
  o.model = m.dir + "/a";
  o.bundle = m.bundle();
  o.public_key = keys("certificate/signing-key-pub.pem");
  for (const std::string name : {"a", "."}) {
    test::write_text(m.bundle(), signed_bundle(statement_for({{name, sha256_hex("alpha\n")}})));
    EXPECT_TRUE(verify_signature(o).verified) << name;
  }
  // "." names a single-file model only.
  const VerifyResult r = verify(m, signed_bundle(statement_for({{".", sha256_hex("alpha\n")}})));
  EXPECT_FALSE(r.verified);
}

TEST(OmsSign, AnExistingOutputThatIsNoBundleIsNotReplaced) {
  Model m;
  const test::RunResult r = test::run_ckpt("sign --private-key " + q(keys("certificate/signing-key.pem")) + " -o " +
                                           q(m.dir + "/a") + " " + q(m.dir));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("OUTPUT_NOT_BUNDLE"), std::string::npos) << r.err;
  EXPECT_EQ(test::read_text(m.dir + "/a"), "alpha\n");
}

TEST(OmsSign, TheBundleInsideTheModelIsLeftOutAndRecorded) {
  Model m;
  const std::string out = m.dir + "/model.sig";
  const std::string sign = "sign -q --private-key " + q(keys("certificate/signing-key.pem")) + " -o " + q(out) + " " + q(m.dir);
  ASSERT_EQ(test::run_ckpt(sign).exit_code, 0);
  ASSERT_EQ(test::run_ckpt(sign).exit_code, 0);  // re-signing replaces the old bundle
  Bundle b;
  Statement st;
  std::string error;
  ASSERT_TRUE(parse_bundle(test::read_text(out), b, error)) << error;
  ASSERT_TRUE(parse_statement(b.payload, st, error)) << error;
  ASSERT_EQ(st.resources.size(), 2u);
  EXPECT_EQ(st.subject_name, "model");
  EXPECT_EQ(st.serialization.ignore_paths,
            (std::vector<std::string>{".git", ".gitattributes", ".github", ".gitignore", "model.sig"}));
  const test::RunResult v = test::run_ckpt("verify-signature --public-key " + q(keys("certificate/signing-key-pub.pem")) +
                                           " --bundle " + q(out) + " " + q(m.dir));
  EXPECT_EQ(v.exit_code, 0) << v.err;
}

TEST(OmsSign, UnusableKeysAndCertificatesAreUsageErrors) {
  Model m;
  const std::string base = "sign -o " + q(m.bundle()) + " ";
  const std::string key = " --private-key " + q(keys("certificate/signing-key.pem"));
  EXPECT_EQ(test::run_ckpt(base + "--private-key " + q(keys("certificate/ca-priv.pem")) + " " + q(m.dir)).exit_code, 2);
  EXPECT_EQ(test::run_ckpt(base + "--private-key " + q(keys("certificate/signing-key-pub.pem")) + " " + q(m.dir)).exit_code, 2);
  // A certificate that does not hold the key's public half.
  EXPECT_EQ(test::run_ckpt(base + "--private-key " + q(keys("p384/signing-key.pem")) + " --signing-cert " +
                           q(keys("certificate/signing-key-cert.pem")) + " " + q(m.dir)).exit_code, 2);
  EXPECT_EQ(test::run_ckpt(base + key + " --cert-chain " + q(keys("certificate/ca-cert.pem")) + " " + q(m.dir)).exit_code, 2);
  EXPECT_EQ(test::run_ckpt(base + key + " --ignore-paths ../x " + q(m.dir)).exit_code, 2);
  EXPECT_EQ(test::run_ckpt(base + "--private-key /no/such/key.pem " + q(m.dir)).exit_code, 3);
  EXPECT_FALSE(fs::exists(m.bundle()));
}

TEST(OmsVerifySignatureCli, ExitCodesSayWhatHappened) {
  Model m;
  test::write_text(m.bundle(), signed_bundle(statement_for(model_resources())));
  const std::string pub = " --public-key " + q(keys("certificate/signing-key-pub.pem"));
  const std::string bundle = " --bundle " + q(m.bundle());
  EXPECT_EQ(test::run_ckpt("verify-signature" + pub + bundle + " " + q(m.dir)).exit_code, 0);
  EXPECT_EQ(test::run_ckpt("verify-signature" + bundle + " " + q(m.dir)).exit_code, 2);  // no trust given
  EXPECT_EQ(test::run_ckpt("verify-signature" + pub + " --cert-chain " + q(keys("certificate/ca-cert.pem")) + bundle + " " + q(m.dir)).exit_code, 2);
  EXPECT_EQ(test::run_ckpt("verify-signature --public-key " + q(keys("certificate/ca-cert.pem")) + bundle + " " + q(m.dir)).exit_code, 2);
  EXPECT_EQ(test::run_ckpt("verify-signature" + pub + " --bundle /no/such.sig " + q(m.dir)).exit_code, 3);
  EXPECT_EQ(test::run_ckpt("verify-signature" + pub + bundle + " --ignore-paths ../x " + q(m.dir)).exit_code, 2);
  // A bundle over the size limit is refused unread.
  {
    std::ofstream big(m.tmp.str("big.sig"));
  }
  fs::resize_file(m.tmp.str("big.sig"), kMaxBundleBytes + 1);
  const test::RunResult r = test::run_ckpt("verify-signature" + pub + " --bundle " + q(m.tmp.str("big.sig")) + " " + q(m.dir));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("OMS_TOO_LARGE"), std::string::npos) << r.err;
  // The default bundle: model.sig beside the model.
  EXPECT_EQ(test::run_ckpt("verify-signature" + pub + " " + q(m.dir)).exit_code, 0);
}

}  // namespace
}  // namespace ckpt::oms
