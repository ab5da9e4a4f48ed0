// OMS verification, spec §8 in order (sign/oms_verify.h).
#include "sign/oms_verify.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "io/input_file.h"
#include "sign/oms_crypto.h"
#include "sign/oms_files.h"

namespace ckpt::oms {
namespace {

constexpr uint64_t kMaxPemBytes = uint64_t{1} << 20;

class Verifier {
 public:
  Verifier(const VerifyOptions& o, VerifyResult& r) : o_(o), r_(r), f_(r.findings) {}

  // `files`: the model's files checked against the statement (false: the bundle alone).
  void run(bool files = true) {
    Bundle bundle;
    Statement st;
    if (!load_trust() || !read_bundle(bundle) || !check_signature(bundle) || !read_statement(bundle, st)) return;
    r_.root_digest = st.root_digest;
    r_.statement = st;
    if (!supported(st)) return;
    if (files) check_manifest(st);
    r_.verified = !f_.has_errors();
  }

  // The model's files against a statement whose signature was verified earlier.
  void files(const Statement& st) {
    check_manifest(st);
    r_.verified = !f_.has_errors();
  }

  // The envelope alone (trust, bundle, method, payload type, the DSSE signature): for a
  // bundle whose payload is not the OMS predicate (a conversion's provenance).
  bool envelope(std::string& payload) {
    Bundle bundle;
    if (!load_trust() || !read_bundle(bundle) || !check_signature(bundle)) return false;
    payload = std::move(bundle.payload);
    return true;
  }

 private:
  void fail(const std::string& code, const std::string& file, const std::string& message) {
    f_.error(code, file, "", std::nullopt, message);
  }

  bool load_trust() {
    if (o_.public_key.empty() == o_.cert_chain.empty()) {
      r_.usage = true;
      fail("USAGE", "", "give the trust: --public-key PUB.pem (key method) or --cert-chain CA.pem... (certificate method)");
      return false;
    }
    std::string text, why;
    if (!o_.public_key.empty()) {
      if (!read_small_file(o_.public_key, kMaxPemBytes, text, f_)) return false;
      if (!key_.load_public_pem(text, why)) return refuse(o_.public_key, "the public key cannot be used: " + why);
      return true;
    }
    for (const auto& path : o_.cert_chain) {
      std::vector<Certificate> certs;
      if (!read_small_file(path, kMaxPemBytes, text, f_)) return false;
      if (!load_certificates_pem(text, certs, why)) return refuse(path, "the CA certificates cannot be read: " + why);
      anchors_.insert(anchors_.end(), certs.begin(), certs.end());
    }
    return true;
  }

  bool refuse(const std::string& file, const std::string& message) {
    r_.usage = true;
    fail("KEY_UNUSABLE", file, message);
    return false;
  }

  bool read_bundle(Bundle& bundle) {
    std::string text, why;
    if (!read_small_file(o_.bundle, kMaxBundleBytes, text, f_)) return false;
    if (!parse_bundle(text, bundle, why)) {
      fail(why.rfind("the bundle's mediaType", 0) == 0 ? "OMS_MEDIA_TYPE" : "OMS_BUNDLE", o_.bundle, why);
      return false;
    }
    r_.method = method_name(bundle.material);
    const Material wanted = o_.public_key.empty() ? Material::certificate_chain : Material::public_key;
    if (bundle.material == Material::sigstore_certificate) {
      fail("OMS_SIGSTORE_UNSUPPORTED", o_.bundle,
           "the bundle is signed by the sigstore method (a Fulcio certificate, Rekor log entries): verifying it needs "
           "Sigstore's trust root and transparency log, which ckptkit does not fetch; it verifies key and "
           "certificate bundles only");
      return false;
    }
    if (bundle.material != wanted) {
      fail("OMS_METHOD_MISMATCH", o_.bundle,
           std::string("the bundle's verification material is for the ") + method_name(bundle.material) +
               " method, but " + (wanted == Material::public_key ? "--public-key" : "--cert-chain") + " asks for the " +
               method_name(wanted) + " method (spec §4.1)");
      return false;
    }
    if (bundle.payload_type != kInTotoPayloadType) {
      fail("OMS_PAYLOAD_TYPE", o_.bundle,
           "dsseEnvelope.payloadType is \"" + bundle.payload_type.substr(0, 200) + "\", not " +
               std::string(kInTotoPayloadType));
      return false;
    }
    if (bundle.signatures.size() != 1) {
      fail("OMS_BUNDLE", o_.bundle,
           "the envelope holds " + std::to_string(bundle.signatures.size()) + " signatures; an OMS bundle holds one");
      return false;
    }
    return true;
  }

  // The certificate method: the chain first (the leaf valid now, chaining to an anchor),
  // then the leaf's key is the one the signature is checked with.
  bool leaf_key(const Bundle& bundle) {
    std::vector<Certificate> chain;
    for (size_t i = 0; i < bundle.certificates.size(); ++i) {
      Certificate c;
      std::string why;
      if (!c.load_der(bundle.certificates[i], why)) {
        fail("OMS_CERTIFICATE", o_.bundle, "x509CertificateChain.certificates[" + std::to_string(i) + "]: " + why);
        return false;
      }
      chain.push_back(std::move(c));
    }
    std::string why;
    const std::vector<Certificate> intermediates(chain.begin() + 1, chain.end());
    if (!verify_certificate_chain(chain.front(), intermediates, anchors_, why)) {
      fail("OMS_CERT_CHAIN", o_.bundle, "the signing certificate " + chain.front().subject() +
                                            " does not chain to the given CA certificates: " + why);
      return false;
    }
    if (!chain.front().may_sign()) {
      fail("OMS_CERTIFICATE", o_.bundle, "the signing certificate " + chain.front().subject() +
                                             " is not for signing (key usage without digitalSignature, no codeSigning "
                                             "extended key usage)");
      return false;
    }
    if (!key_.load_from_certificate(*chain.front().handle(), why)) {
      fail("OMS_CERTIFICATE", o_.bundle, "the signing certificate's key cannot be used: " + why);
      return false;
    }
    return true;
  }

  bool check_signature(const Bundle& bundle) {
    if (bundle.material == Material::certificate_chain && !leaf_key(bundle)) return false;
    if (!key_.verify(dsse_pae(bundle.payload_type, bundle.payload), bundle.signatures.front())) {
      fail("OMS_SIGNATURE", o_.bundle,
           std::string("the DSSE signature does not verify over the PAE with the ") +
               (bundle.material == Material::public_key ? "public key " + o_.public_key
                                                        : std::string("signing certificate's key")) +
               " (" + key_.curve() + ")");
      return false;
    }
    return true;
  }

  bool read_statement(const Bundle& bundle, Statement& st) {
    std::string why;
    if (!parse_statement(bundle.payload, st, why)) {
      fail("OMS_STATEMENT", o_.bundle, why);
      return false;
    }
    if (!st.legacy && root_digest(st.resources) != st.root_digest) {
      fail("OMS_ROOT_DIGEST", o_.bundle,
           "subject[0].digest.sha256 " + st.root_digest + " is not the SHA-256 of the resources' digests (" +
               root_digest(st.resources) + ", spec §6.5.1)");
      return false;
    }
    return true;
  }

  bool supported(const Statement& st) {
    if (st.serialization.hash_type != "sha256") {
      fail("OMS_UNSUPPORTED", o_.bundle,
           "serialization.hash_type is " + st.serialization.hash_type + "; ckptkit verifies sha256 only (refused)");
      return false;
    }
    return true;
  }

  // The ignore paths: the defaults, the bundle's own (those that are relative paths; any
  // other form can name nothing in the model), the command line's.
  bool scope_for(const Statement& st, const std::map<std::string, std::vector<const Resource*>>& by_path,
                 ModelScope& scope) {
    scope.ignore_paths = default_ignore_paths();
    for (const auto& p : st.serialization.ignore_paths)
      if (is_canonical_relative(p)) scope.ignore_paths.push_back(p);
    for (const auto& given : o_.ignore_paths) {
      std::string rel, why;
      if (!ignore_path_in_model(o_.model, given, rel, why)) {
        r_.usage = true;
        fail("USAGE", given, why);
        return false;
      }
      scope.ignore_paths.push_back(rel);
    }
    scope.bundle_path = o_.bundle;
    scope.allow_symlinks = st.serialization.allow_symlinks;
    for (const auto& [path, rs] : by_path) scope.listed.push_back(path);
    return true;
  }

  // The resources by the model path they name: the whole name ("files"; "." is a one-file
  // model's file), or the part before ":start:end" ("shards").
  static std::map<std::string, std::vector<const Resource*>> by_path(const Statement& st, const std::string& single) {
    std::map<std::string, std::vector<const Resource*>> out;
    const bool shards = st.serialization.method == "shards";
    for (const auto& r : st.resources) {
      std::string_view path = r.name;
      uint64_t a = 0, b = 0;
      if (shards) split_shard_name(r.name, path, a, b);
      out[!single.empty() && r.name == "." ? single : std::string(path)].push_back(&r);
    }
    return out;
  }

  // A file's shards must be the bundle's: [i*K, min((i+1)*K, size)) for every i, in order.
  bool plan_shards(const ModelEntry& e, std::vector<const Resource*> rs, uint64_t shard_size,
                   std::vector<FileRange>& ranges, std::vector<const Resource*>& expected) {
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(e.path, ec);
    if (ec) {
      fail("IO_OPEN", e.name, "cannot stat " + e.name + ": " + ec.message());
      return false;
    }
    struct Shard {
      uint64_t start, end;
      const Resource* r;
    };
    std::vector<Shard> shards;
    for (const Resource* r : rs) {
      std::string_view path;
      Shard s{0, 0, r};
      split_shard_name(r->name, path, s.start, s.end);
      shards.push_back(s);
    }
    std::sort(shards.begin(), shards.end(), [](const Shard& a, const Shard& b) { return a.start < b.start; });
    uint64_t at = 0;
    for (const Shard& s : shards) {
      const uint64_t end = size - at > shard_size ? at + shard_size : size;
      if (at >= size || s.start != at || s.end != end) {
        fail("OMS_SHARD_MISMATCH", e.name,
             e.name + " has " + std::to_string(size) + " bytes: the bundle's shard " + s.r->name +
                 " is not its next piece of shard_size " + std::to_string(shard_size) + " (expected " +
                 std::to_string(at) + ":" + std::to_string(end) + ")");
        return false;
      }
      at = end;
    }
    if (at != size) {
      fail("OMS_SHARD_MISMATCH", e.name,
           e.name + " has " + std::to_string(size) + " bytes; the bundle's shards end at byte " + std::to_string(at));
      return false;
    }
    for (const Shard& s : shards) {
      ranges.push_back(FileRange{&e, s.start, s.end});
      expected.push_back(s.r);
    }
    return true;
  }

  void check_manifest(const Statement& st) {
    const bool shards = st.serialization.method == "shards";
    ModelScope scope;
    if (!scope_for(st, by_path(st, ""), scope)) return;
    std::vector<ModelEntry> entries;
    Findings walk;
    list_model(o_.model, scope, entries, walk);
    const bool single = is_single_file_model(o_.model) && !entries.empty();
    const auto listed = by_path(st, single ? entries.front().name : "");
    std::map<std::string, const ModelEntry*> on_disk;
    for (const auto& e : entries) on_disk.emplace(e.name, &e);
    // Walk findings stay, except those about entries the bundle does not list when unsigned
    // files are allowed (a link or odd entry is then no failure).
    for (const auto& x : walk.items()) {
      const bool about_unlisted = !x.file.empty() && !listed.count(x.file) && on_disk.count(x.file);
      if (!(about_unlisted && o_.ignore_unsigned_files)) f_.add(x);
    }
    std::vector<FileRange> ranges;
    std::vector<const Resource*> expected;
    for (const auto& [path, rs] : listed) {
      auto it = on_disk.find(path);
      if (it == on_disk.end()) {
        fail("OMS_FILE_MISSING", path, path + " is signed in the bundle but not in the model (spec §8.4)");
        continue;
      }
      const ModelEntry& e = *it->second;
      on_disk.erase(it);
      if (e.kind != EntryKind::regular && e.kind != EntryKind::link_to_file) continue;  // a finding says why
      if (shards) {
        plan_shards(e, rs, *st.serialization.shard_size, ranges, expected);
      } else {
        ranges.push_back(FileRange{&e, 0, UINT64_MAX});
        expected.push_back(rs.front());
      }
    }
    for (const auto& [name, e] : on_disk) {
      if (e->ignored || o_.ignore_unsigned_files) continue;
      if (e->kind != EntryKind::regular && e->kind != EntryKind::link_to_file) continue;
      std::error_code ec;
      if (shards && std::filesystem::file_size(e->path, ec) == 0 && !ec) continue;  // no shards: omitted (§6.3.2)
      fail("OMS_FILE_UNSIGNED", name,
           name + " is in the model but not signed in the bundle (spec §8.5; --ignore-unsigned-files allows it)");
    }
    compare(ranges, expected);
  }

  // Reports bytes hashed against the bytes planned (the files' sizes now, the ranges').
  BytesDone progress_meter(const std::vector<const ModelEntry*>& whole, const std::vector<FileRange>& parts) const {
    if (!o_.progress) return {};
    uint64_t total = 0;
    for (const auto* e : whole) {
      std::error_code ec;
      const uint64_t n = std::filesystem::file_size(e->path, ec);
      total += ec ? 0 : n;
    }
    for (const auto& r : parts) total += r.end - r.start;
    auto done = std::make_shared<std::atomic<uint64_t>>(0);
    return [this, total, done](uint64_t n) { o_.progress(*done += n, total); };
  }

  // Hashes the planned pieces (whole files, UINT64_MAX as end, or shards) and compares.
  void compare(const std::vector<FileRange>& ranges, const std::vector<const Resource*>& expected) {
    std::vector<const ModelEntry*> whole;
    std::vector<FileRange> parts;
    for (const auto& r : ranges) {
      if (r.end != UINT64_MAX)
        parts.push_back(r);
      else if (!o_.known_sha256.count(r.entry->name))
        whole.push_back(r.entry);
    }
    std::vector<std::string> whole_digests, part_digests;
    std::atomic<uint64_t> bytes{0};
    const BytesDone meter = progress_meter(whole, parts);
    hash_entries(whole, whole_digests, f_, bytes, meter);
    hash_ranges(parts, part_digests, f_, bytes, meter);
    r_.bytes_hashed = bytes.load();
    std::set<std::string> bad, seen;
    for (size_t i = 0, w = 0, p = 0; i < ranges.size(); ++i) {
      const auto known = ranges[i].end == UINT64_MAX ? o_.known_sha256.find(ranges[i].entry->name)
                                                     : o_.known_sha256.end();
      r_.files_known += known != o_.known_sha256.end();
      const std::string& got = known != o_.known_sha256.end() ? known->second
                               : ranges[i].end == UINT64_MAX ? whole_digests[w++]
                                                             : part_digests[p++];
      const std::string& name = ranges[i].entry->name;
      seen.insert(name);
      if (got.empty()) {
        bad.insert(name);  // an I/O finding says why
      } else if (got != expected[i]->digest) {
        bad.insert(name);
        fail("OMS_DIGEST_MISMATCH", name,
             expected[i]->name + " has SHA-256 " + got + " but the bundle signs " + expected[i]->digest);
      }
    }
    r_.files_checked = seen.size() - bad.size();
  }

  const VerifyOptions& o_;
  VerifyResult& r_;
  Findings& f_;
  EcKey key_;
  std::vector<Certificate> anchors_;
};

}  // namespace

bool read_small_file(const std::string& path, uint64_t limit, std::string& text, Findings& findings) {
  IoError err;
  if (read_input_file(path, limit, text, err)) return true;
  findings.error(err.err == EFBIG ? "OMS_TOO_LARGE" : "IO_READ", path, "", std::nullopt,
                 "cannot read " + path + ": " + err.message);
  return false;
}

VerifyResult verify_signature(const VerifyOptions& options) {
  VerifyResult r;
  Verifier(options, r).run();
  return r;
}

bool verify_bundle(const VerifyOptions& options, VerifyResult& r) {
  Verifier(options, r).run(false);
  return r.verified;
}

std::optional<VerifiedBundle> verified_bundle(const VerifyResult& r) {
  if (!r.verified) return std::nullopt;
  return VerifiedBundle{r.statement, r.method, r.root_digest};
}

VerifyResult verify_files(const VerifyOptions& options, const VerifiedBundle& bundle) {
  VerifyResult r;
  r.method = bundle.method;
  r.root_digest = bundle.root_digest;
  r.statement = bundle.statement;
  Verifier(options, r).files(bundle.statement);
  return r;
}

bool verify_envelope(const VerifyOptions& options, std::string& payload, VerifyResult& r) {
  return Verifier(options, r).envelope(payload);
}

}  // namespace ckpt::oms
