// Reading and writing OMS bundles and their in-toto statements (sign/oms_bundle.h).
#include "sign/oms_bundle.h"

#include <algorithm>
#include <set>

#include "formats/json.h"
#include "formats/json_writer.h"
#include "io/hash.h"
#include "sign/oms_crypto.h"
#include "sign/oms_json.h"

namespace ckpt::oms {
namespace {

namespace dom = simdjson::dom;

constexpr size_t kMaxCertificates = 16;
constexpr size_t kMaxSignatures = 16;
constexpr size_t kMaxIgnorePaths = 4096;

// Every object of the document has each key once: simdjson keeps duplicates and a lookup
// sees the first, where another reader could see the last (a signed field shadowed).
bool keys_unique(dom::element e, std::string& where) {
  if (e.is_object()) {
    std::set<std::string_view> seen;
    const dom::object obj = e.get_object().value_unsafe();
    for (auto field : obj) {
      if (!seen.insert(field.key).second) {
        where = std::string(field.key);
        return false;
      }
      if (!keys_unique(field.value, where)) return false;
    }
  } else if (e.is_array()) {
    const dom::array arr = e.get_array().value_unsafe();
    for (auto item : arr)
      if (!keys_unique(item, where)) return false;
  }
  return true;
}

bool parse_document(std::string_view text, const char* what, JsonDoc& doc, std::string& error) {
  std::string why;
  if (!doc.parse(text, why)) {
    error = std::string(what) + " is not valid JSON: " + why;
    return false;
  }
  if (!keys_unique(doc.root(), why)) {
    error = std::string(what) + " has an object with the key \"" + why + "\" twice";
    return false;
  }
  if (!doc.root().is_object()) {
    error = std::string(what) + " is not a JSON object";
    return false;
  }
  return true;
}

// Field lookups that say what was wrong (sign/oms_json.h).
constexpr JsonFields kFields{" has no "};

bool has_field(dom::element obj, std::string_view key) {
  dom::element v;
  const dom::object o = obj.get_object().value_unsafe();
  return o[key].get(v) == simdjson::SUCCESS;
}

bool get_base64(dom::element obj, std::string_view key, const std::string& where, std::string& out,
                std::string& error) {
  std::string text;
  if (!kFields.text(obj, key, where, text, error)) return false;
  std::string why;
  if (!base64_decode(text, out, why)) {
    error = where + "." + std::string(key) + " is not Base64: " + why;
    return false;
  }
  return true;
}

bool accepted_media_type(std::string_view t) {
  return t == kBundleMediaTypeV03 || t == "application/vnd.dev.sigstore.bundle+json;version=0.3" ||
         t == "application/vnd.dev.sigstore.bundle+json;version=0.2" ||
         t == "application/vnd.dev.sigstore.bundle+json;version=0.1";
}

bool parse_material(dom::element vm, Bundle& out, std::string& error) {
  const std::string where = "verificationMaterial";
  const int kinds = int(has_field(vm, "publicKey")) + int(has_field(vm, "x509CertificateChain")) +
                    int(has_field(vm, "certificate"));
  if (kinds != 1) {
    error = where + " must hold exactly one of publicKey, x509CertificateChain, certificate; it holds " +
            std::to_string(kinds);
    return false;
  }
  dom::element v;
  if (has_field(vm, "publicKey")) {
    out.material = Material::public_key;
    if (!kFields.object(vm, "publicKey", where, v, error)) return false;
    const bool hint = has_field(v, "hint"), raw = has_field(v, "rawBytes");
    if (!hint && !raw) {
      error = where + ".publicKey has neither hint nor rawBytes";
      return false;
    }
    std::string ignored;
    if (hint && !kFields.text(v, "hint", where + ".publicKey", out.key_hint, error)) return false;
    return !raw || get_base64(v, "rawBytes", where + ".publicKey", ignored, error);
  }
  if (has_field(vm, "certificate")) {
    out.material = Material::sigstore_certificate;
    return kFields.object(vm, "certificate", where, v, error);
  }
  out.material = Material::certificate_chain;
  dom::array certs;
  if (!kFields.object(vm, "x509CertificateChain", where, v, error) ||
      !kFields.array(v, "certificates", where + ".x509CertificateChain", certs, error))
    return false;
  if (certs.size() == 0 || certs.size() > kMaxCertificates) {
    error = where + ".x509CertificateChain.certificates holds " + std::to_string(certs.size()) +
            " certificates (1 to " + std::to_string(kMaxCertificates) + " accepted)";
    return false;
  }
  size_t i = 0;
  for (dom::element c : certs) {
    const std::string at = where + ".x509CertificateChain.certificates[" + std::to_string(i++) + "]";
    if (!c.is_object()) {
      error = at + " is not an object";
      return false;
    }
    std::string der;
    if (!get_base64(c, "rawBytes", at, der, error)) return false;
    out.certificates.push_back(std::move(der));
  }
  return true;
}

bool parse_envelope(dom::element env, Bundle& out, std::string& error) {
  const std::string where = "dsseEnvelope";
  if (!get_base64(env, "payload", where, out.payload, error) ||
      !kFields.text(env, "payloadType", where, out.payload_type, error))
    return false;
  if (out.payload.empty()) {
    error = where + ".payload is empty";
    return false;
  }
  dom::array sigs;
  if (!kFields.array(env, "signatures", where, sigs, error)) return false;
  if (sigs.size() == 0) {
    error = where + ".signatures is empty: the envelope carries no signature";
    return false;
  }
  if (sigs.size() > kMaxSignatures) {
    error = where + ".signatures holds " + std::to_string(sigs.size()) + " entries (at most " +
            std::to_string(kMaxSignatures) + ")";
    return false;
  }
  size_t i = 0;
  for (dom::element s : sigs) {
    const std::string at = where + ".signatures[" + std::to_string(i++) + "]";
    if (!s.is_object()) {
      error = at + " is not an object";
      return false;
    }
    std::string sig;
    if (!get_base64(s, "sig", at, sig, error)) return false;
    if (sig.empty()) {
      error = at + ".sig is empty";
      return false;
    }
    // keyid: absent, "", null or a string (spec §4.1); anything else is malformed.
    dom::element keyid;
    if (has_field(s, "keyid") && kFields.field(s, "keyid", at, keyid, error) && !keyid.is_null() && !keyid.is_string()) {
      error = at + ".keyid is neither a string nor null";
      return false;
    }
    out.signatures.push_back(std::move(sig));
  }
  return true;
}

bool is_lower_hex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

size_t digest_hex_length(std::string_view algorithm) { return algorithm == "sha256" ? 64 : 0; }

bool parse_serialization(dom::element pred, Serialization& ser, std::string& error) {
  const std::string where = "predicate.serialization";
  dom::element s, v;
  if (!kFields.object(pred, "serialization", "predicate", s, error) ||
      !kFields.text(s, "method", where, ser.method, error) || !kFields.text(s, "hash_type", where, ser.hash_type, error) ||
      !kFields.field(s, "allow_symlinks", where, v, error))
    return false;
  if (v.get_bool().get(ser.allow_symlinks) != simdjson::SUCCESS) {
    error = where + ".allow_symlinks is not a boolean";
    return false;
  }
  if (ser.method != "files" && ser.method != "shards") {
    error = where + ".method is \"" + ser.method + "\"; OMS defines \"files\" and \"shards\"";
    return false;
  }
  if (has_field(s, "shard_size")) {
    uint64_t n = 0;
    if (ser.method != "shards") {
      error = where + ".shard_size is present with method \"files\" (it must be absent)";
      return false;
    }
    dom::element size;
    if (!kFields.field(s, "shard_size", where, size, error) || size.get_uint64().get(n) != simdjson::SUCCESS || n == 0) {
      error = where + ".shard_size is not a positive integer";
      return false;
    }
    ser.shard_size = n;
  } else if (ser.method == "shards") {
    error = where + " has method \"shards\" but no shard_size";
    return false;
  }
  if (has_field(s, "ignore_paths")) {
    dom::array paths;
    if (!kFields.array(s, "ignore_paths", where, paths, error)) return false;
    if (paths.size() > kMaxIgnorePaths) {
      error = where + ".ignore_paths holds " + std::to_string(paths.size()) + " entries (at most " +
              std::to_string(kMaxIgnorePaths) + ")";
      return false;
    }
    for (dom::element p : paths) {
      std::string_view text;
      if (p.get_string().get(text) != simdjson::SUCCESS) {
        error = where + ".ignore_paths holds a value that is not a string";
        return false;
      }
      ser.ignore_paths.emplace_back(text);
    }
  }
  return true;
}

bool parse_resource(dom::element r, size_t i, const Serialization& ser, Resource& out, std::string& error) {
  const std::string at = "predicate.resources[" + std::to_string(i) + "]";
  if (!r.is_object()) {
    error = at + " is not an object";
    return false;
  }
  std::string algorithm;
  if (!kFields.text(r, "name", at, out.name, error) || !kFields.text(r, "digest", at, out.digest, error) ||
      !kFields.text(r, "algorithm", at, algorithm, error))
    return false;
  if (algorithm != ser.hash_type) {
    error = at + " (" + out.name + ") has algorithm \"" + algorithm + "\" but serialization.hash_type is \"" +
            ser.hash_type + "\"";
    return false;
  }
  const size_t len = digest_hex_length(algorithm);
  if (!is_lower_hex(out.digest) || (len != 0 && out.digest.size() != len)) {
    error = at + " (" + out.name + ") has digest \"" + out.digest.substr(0, 80) + "\": not " +
            (len ? std::to_string(len) + " " : std::string()) + "lowercase hex digits";
    return false;
  }
  std::string_view path = out.name;
  uint64_t start = 0, end = 0;
  if (ser.method == "shards" && !split_shard_name(out.name, path, start, end)) {
    error = at + " has the name \"" + out.name.substr(0, 200) + "\": not \"path:start:end\" with start < end (shards)";
    return false;
  }
  if (!is_canonical_relative(path) && !(out.name == "." && ser.method == "files")) {
    error = at + " has the name \"" + out.name.substr(0, 200) +
            "\": not a canonical relative path (no leading or trailing '/', no empty, '.' or '..' component)";
    return false;
  }
  return true;
}

bool parse_subject(dom::element root, Statement& out, std::string& error) {
  dom::array subjects;
  if (!kFields.array(root, "subject", "the statement", subjects, error)) return false;
  if (subjects.size() != 1) {
    error = "the statement's subject holds " + std::to_string(subjects.size()) + " entries; OMS requires exactly one";
    return false;
  }
  dom::element s = subjects.at(0).value_unsafe(), digest;
  if (!s.is_object()) {
    error = "subject[0] is not an object";
    return false;
  }
  if (!kFields.text(s, "name", "subject[0]", out.subject_name, error) ||
      !kFields.object(s, "digest", "subject[0]", digest, error) ||
      !kFields.text(digest, "sha256", "subject[0].digest", out.root_digest, error))
    return false;
  if (out.subject_name.empty()) {
    error = "subject[0].name is empty";
    return false;
  }
  if (out.root_digest.size() != 64 || !is_lower_hex(out.root_digest)) {
    error = "subject[0].digest.sha256 is not 64 lowercase hex digits";
    return false;
  }
  return true;
}

// The v0.2.0 layout: each subject entry is a file {name, digest: {sha256}}.
bool parse_legacy(dom::element root, Statement& out, std::string& error) {
  out.legacy = true;
  dom::array subjects;
  if (!kFields.array(root, "subject", "the statement", subjects, error)) return false;
  if (subjects.size() == 0 || subjects.size() > kMaxResources) {
    error = "the v0.2.0 statement's subject holds " + std::to_string(subjects.size()) + " files";
    return false;
  }
  size_t i = 0;
  for (dom::element s : subjects) {
    const std::string at = "subject[" + std::to_string(i++) + "]";
    Resource r;
    dom::element digest;
    if (!s.is_object() || !kFields.text(s, "name", at, r.name, error) || !kFields.object(s, "digest", at, digest, error) ||
        !kFields.text(digest, "sha256", at + ".digest", r.digest, error)) {
      if (error.empty()) error = at + " is not an object";
      return false;
    }
    if (r.digest.size() != 64 || !is_lower_hex(r.digest) || !is_canonical_relative(r.name)) {
      error = at + " (" + r.name.substr(0, 200) + ") has a bad name or SHA-256";
      return false;
    }
    out.resources.push_back(std::move(r));
  }
  return true;
}

// Sorts by name (bytewise: Unicode code point order for UTF-8); a name listed twice is refused.
bool sorted_once(std::vector<Resource>& resources, const std::string& where, std::string& error) {
  std::sort(resources.begin(), resources.end(), [](const Resource& a, const Resource& b) { return a.name < b.name; });
  for (size_t k = 1; k < resources.size(); ++k)
    if (resources[k].name == resources[k - 1].name) {
      error = where + " lists " + resources[k].name.substr(0, 200) + " twice";
      return false;
    }
  return true;
}

int hex_value(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

}  // namespace

const char* method_name(Material m) {
  switch (m) {
    case Material::public_key: return "key";
    case Material::certificate_chain: return "certificate";
    case Material::sigstore_certificate: return "sigstore";
  }
  return "?";
}

bool is_canonical_relative(std::string_view name) {
  if (name.empty() || name.size() > 4096 || name.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  while (true) {
    const size_t slash = name.find('/', start);
    const std::string_view part = name.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

bool split_shard_name(std::string_view name, std::string_view& path, uint64_t& start, uint64_t& end) {
  auto number = [](std::string_view digits, uint64_t& v) {
    if (digits.empty() || digits.size() > 19) return false;
    v = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + uint64_t(c - '0');
    }
    return true;
  };
  const size_t b = name.rfind(':');
  if (b == std::string_view::npos || b == 0) return false;
  const size_t a = name.rfind(':', b - 1);
  if (a == std::string_view::npos) return false;
  path = name.substr(0, a);
  return number(name.substr(a + 1, b - a - 1), start) && number(name.substr(b + 1), end) && start < end;
}

bool parse_bundle(std::string_view text, Bundle& out, std::string& error) {
  out = Bundle{};
  if (text.size() > kMaxBundleBytes) {
    error = "the bundle has " + std::to_string(text.size()) + " bytes (at most " + std::to_string(kMaxBundleBytes) + ")";
    return false;
  }
  JsonDoc doc;
  if (!parse_document(text, "the bundle", doc, error)) return false;
  const dom::element root = doc.root();
  dom::element vm, env;
  if (!kFields.text(root, "mediaType", "the bundle", out.media_type, error)) return false;
  if (!accepted_media_type(out.media_type)) {
    error = "the bundle's mediaType is \"" + out.media_type.substr(0, 200) + "\", not a Sigstore bundle media type (" +
            std::string(kBundleMediaTypeV03) + " or application/vnd.dev.sigstore.bundle+json;version=0.1..0.3)";
    return false;
  }
  if (!kFields.object(root, "verificationMaterial", "the bundle", vm, error) || !parse_material(vm, out, error)) return false;
  if (has_field(vm, "tlogEntries")) {
    dom::element t;
    if (!kFields.field(vm, "tlogEntries", "verificationMaterial", t, error)) return false;
    if (!t.is_array()) {
      error = "verificationMaterial.tlogEntries is not an array";
      return false;
    }
  }
  if (!has_field(root, "dsseEnvelope")) {
    error = "the bundle has no dsseEnvelope (OMS signs a DSSE envelope; a messageSignature bundle is not OMS)";
    return false;
  }
  return kFields.object(root, "dsseEnvelope", "the bundle", env, error) && parse_envelope(env, out, error);
}

bool parse_statement(std::string_view payload, Statement& out, std::string& error) {
  out = Statement{};
  JsonDoc doc;
  if (!parse_document(payload, "the DSSE payload", doc, error)) return false;
  const dom::element root = doc.root();
  std::string type, predicate_type;
  if (!kFields.text(root, "_type", "the statement", type, error)) return false;
  if (type != kStatementType) {
    error = "the statement's _type is \"" + type.substr(0, 200) + "\", not " + std::string(kStatementType);
    return false;
  }
  if (!kFields.text(root, "predicateType", "the statement", predicate_type, error)) return false;
  if (predicate_type == kLegacyPredicateType) {
    if (!parse_legacy(root, out, error)) return false;
    return sorted_once(out.resources, "the v0.2.0 subject", error);
  }
  if (predicate_type != kPredicateType) {
    error = "the statement's predicateType is \"" + predicate_type.substr(0, 200) + "\", not " +
            std::string(kPredicateType);
    return false;
  }
  dom::element pred;
  dom::array resources;
  if (!parse_subject(root, out, error) || !kFields.object(root, "predicate", "the statement", pred, error) ||
      !parse_serialization(pred, out.serialization, error) ||
      !kFields.array(pred, "resources", "predicate", resources, error))
    return false;
  if (resources.size() == 0 || resources.size() > kMaxResources) {
    error = "predicate.resources holds " + std::to_string(resources.size()) + " entries (1 to " +
            std::to_string(kMaxResources) + " accepted)";
    return false;
  }
  size_t i = 0;
  for (dom::element r : resources) {
    Resource res;
    if (!parse_resource(r, i++, out.serialization, res, error)) return false;
    out.resources.push_back(std::move(res));
  }
  if (!sorted_once(out.resources, "predicate.resources", error)) return false;
  if (out.resources.size() > 1 && out.resources.front().name == ".") {
    error = "predicate.resources names \".\" (a single-file model) beside other files";
    return false;
  }
  return true;
}

std::string root_digest(const std::vector<Resource>& resources) {
  Sha256 h;
  for (const auto& r : resources) {
    std::string raw;
    for (size_t i = 0; i + 1 < r.digest.size(); i += 2)
      raw += static_cast<char>(hex_value(r.digest[i]) * 16 + hex_value(r.digest[i + 1]));
    h.update(raw);
  }
  return h.hex_digest();
}

std::string statement_json(const Statement& s) {
  JsonWriter w;
  w.begin_object().key("_type").value(kStatementType);
  w.key("subject").begin_array().begin_object().key("name").value(s.subject_name);
  w.key("digest").begin_object().key("sha256").value(s.root_digest).end_object().end_object().end_array();
  w.key("predicateType").value(kPredicateType);
  w.key("predicate").begin_object().key("resources").begin_array();
  for (const auto& r : s.resources)
    w.begin_object().key("name").value(r.name).key("digest").value(r.digest).key("algorithm").value(s.serialization.hash_type).end_object();
  w.end_array().key("serialization").begin_object();
  w.key("method").value(s.serialization.method).key("hash_type").value(s.serialization.hash_type);
  if (s.serialization.shard_size) w.key("shard_size").value(*s.serialization.shard_size);
  w.key("allow_symlinks").value(s.serialization.allow_symlinks);
  w.key("ignore_paths").begin_array();
  for (const auto& p : s.serialization.ignore_paths) w.value(p);
  w.end_array().end_object().end_object().end_object();
  return w.str();
}

std::string bundle_json(const Bundle& b) {
  JsonWriter w;
  w.begin_object().key("mediaType").value(kBundleMediaTypeV03);
  w.key("verificationMaterial").begin_object();
  if (b.material == Material::certificate_chain) {
    w.key("x509CertificateChain").begin_object().key("certificates").begin_array();
    for (const auto& c : b.certificates) w.begin_object().key("rawBytes").value(base64_encode(c)).end_object();
    w.end_array().end_object();
  } else {
    w.key("publicKey").begin_object().key("hint").value(b.key_hint).end_object();
  }
  w.end_object();
  w.key("dsseEnvelope").begin_object().key("payload").value(base64_encode(b.payload));
  w.key("payloadType").value(b.payload_type).key("signatures").begin_array();
  for (const auto& s : b.signatures) w.begin_object().key("sig").value(base64_encode(s)).end_object();
  w.end_array().end_object().end_object();
  return w.str() + "\n";
}

}  // namespace ckpt::oms
