// OMS signing (sign/oms_sign.h).
#include "sign/oms_sign.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <set>

#include "sign/oms_crypto.h"
#include "sign/oms_files.h"
#include "sign/oms_verify.h"

namespace ckpt::oms {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxPemBytes = uint64_t{1} << 20;

class Signer {
 public:
  Signer(const SignOptions& o, SignResult& r) : o_(o), r_(r), f_(r.findings) {}

  void run() {
    ModelScope scope;
    std::vector<const ModelEntry*> files;
    std::vector<ModelEntry> entries;
    if (!load_key() || !load_certificates() || !output_replaceable() || !make_scope(scope)) return;
    if (!list_model(o_.model, scope, entries, f_)) return;
    for (const auto& e : entries)
      if (!e.ignored) files.push_back(&e);
    if (files.empty()) {
      f_.error("OMS_EMPTY_MODEL", o_.model, "", std::nullopt,
               o_.model + " holds no file to sign after the exclusions (spec §6.1: an empty model is refused)");
      return;
    }
    std::vector<std::string> digests;
    std::atomic<uint64_t> bytes{0};
    uint64_t total = 0;
    for (const auto* e : files) {
      std::error_code ec;
      const uint64_t n = fs::file_size(e->path, ec);
      total += ec ? 0 : n;
    }
    BytesDone meter;
    if (o_.progress) meter = [this, total](uint64_t n) { o_.progress(done_ += n, total); };
    hash_entries(files, digests, f_, bytes, meter);
    r_.bytes_hashed = bytes.load();
    if (f_.has_errors()) return;
    Statement& st = r_.statement;
    for (size_t i = 0; i < files.size(); ++i) {
      st.resources.push_back(Resource{files[i]->name, digests[i]});
      r_.files_read.push_back(files[i]->path);
    }
    st.subject_name = subject_name();
    st.root_digest = root_digest(st.resources);
    st.serialization.ignore_paths = scope.ignore_paths;
    if (const std::string inside = bundle_inside_model(); !inside.empty()) st.serialization.ignore_paths.push_back(inside);
    std::sort(st.serialization.ignore_paths.begin(), st.serialization.ignore_paths.end());
    auto& ip = st.serialization.ignore_paths;
    ip.erase(std::unique(ip.begin(), ip.end()), ip.end());
    assemble();
  }

 private:
  bool refuse(const std::string& file, const std::string& message) {
    r_.usage = true;
    f_.error("KEY_UNUSABLE", file, "", std::nullopt, message);
    return false;
  }

  bool load_key() {
    std::string text, why;
    if (!read_small_file(o_.private_key, kMaxPemBytes, text, f_)) return false;
    if (!key_.load_private_pem(text, why)) return refuse(o_.private_key, "the private key cannot be used: " + why);
    return true;
  }

  bool load_certificates() {
    if (o_.signing_cert.empty()) {
      if (!o_.cert_chain.empty()) return refuse("", "--cert-chain needs --signing-cert (the certificate method)");
      return true;
    }
    std::string text, why;
    std::vector<Certificate> leaf;
    if (!read_small_file(o_.signing_cert, kMaxPemBytes, text, f_)) return false;
    if (!load_certificates_pem(text, leaf, why)) return refuse(o_.signing_cert, "the signing certificate: " + why);
    if (!leaf.front().matches(key_))
      return refuse(o_.signing_cert, "the signing certificate " + leaf.front().subject() +
                                         " does not hold the public half of the private key " + o_.private_key);
    certificates_.push_back(leaf.front().der());
    for (const auto& path : o_.cert_chain) {
      std::vector<Certificate> chain;
      if (!read_small_file(path, kMaxPemBytes, text, f_)) return false;
      if (!load_certificates_pem(text, chain, why)) return refuse(path, "the certificate chain: " + why);
      for (const auto& c : chain)
        if (std::find(certificates_.begin(), certificates_.end(), c.der()) == certificates_.end())
          certificates_.push_back(c.der());
    }
    return true;
  }

  // The bundle is excluded from what is signed, so -o naming a model file would sign the
  // model without it, then replace it: an existing output must itself be an OMS bundle.
  bool output_replaceable() {
    std::error_code ec;
    if (o_.output == "-" || !fs::exists(fs::symlink_status(o_.output, ec)) || !fs::is_regular_file(o_.output, ec))
      return true;
    std::string text, why;
    Bundle old;
    Findings ignored;
    if (read_small_file(o_.output, kMaxBundleBytes, text, ignored) && parse_bundle(text, old, why)) return true;
    r_.usage = true;
    f_.error("OUTPUT_NOT_BUNDLE", o_.output, "", std::nullopt,
             o_.output + " exists and is not an OMS bundle: not replaced (the bundle is left out of what is signed)");
    return false;
  }

  bool make_scope(ModelScope& scope) {
    scope.ignore_paths = default_ignore_paths();
    for (const auto& given : o_.ignore_paths) {
      std::string rel, why;
      if (!ignore_path_in_model(o_.model, given, rel, why)) {
        r_.usage = true;
        f_.error("USAGE", given, "", std::nullopt, why);
        return false;
      }
      scope.ignore_paths.push_back(rel);
    }
    scope.bundle_path = o_.output;
    return true;
  }

  std::string subject_name() const {
    std::string name = fs::path(o_.model).lexically_normal().filename().string();
    if (name.empty() || name == "." || name == "..") {
      std::error_code ec;
      name = fs::canonical(o_.model, ec).filename().string();
    }
    return name.empty() ? std::string("model") : name;
  }

  // The bundle's path relative to the model root when it lies inside it (recorded among
  // the exclusions, so that any verifier skips it).
  std::string bundle_inside_model() const {
    std::error_code ec;
    if (!fs::is_directory(o_.model, ec)) return {};
    const fs::path root = fs::canonical(o_.model, ec);
    if (ec) return {};
    const fs::path out = fs::weakly_canonical(fs::absolute(o_.output, ec), ec);
    const std::string rel = out.lexically_relative(root).generic_string();
    return is_canonical_relative(rel) && rel.rfind("../", 0) != 0 ? rel : std::string();
  }

  void assemble() {
    Bundle b;
    b.material = certificates_.empty() ? Material::public_key : Material::certificate_chain;
    b.key_hint = key_.hint();
    b.certificates = certificates_;
    b.payload_type = std::string(kInTotoPayloadType);
    b.payload = statement_json(r_.statement);
    std::string sig, why;
    if (!key_.sign(dsse_pae(b.payload_type, b.payload), sig, why)) {
      f_.error("OMS_SIGN", o_.private_key, "", std::nullopt, why);
      return;
    }
    b.signatures.push_back(std::move(sig));
    r_.bundle_text = bundle_json(b);
  }

  const SignOptions& o_;
  SignResult& r_;
  Findings& f_;
  EcKey key_;
  std::vector<std::string> certificates_;  // DER, leaf first
  std::atomic<uint64_t> done_{0};          // bytes hashed, for the progress meter
};

}  // namespace

std::string default_bundle_path(const std::string& model) {
  fs::path p = fs::path(model).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return (p.parent_path() / "model.sig").string();
}

SignResult sign_model(const SignOptions& options) {
  SignResult r;
  Signer(options, r).run();
  return r;
}

}  // namespace ckpt::oms
