// An OMS bundle (OpenSSF Model Signing v1.0, docs/ckpt-verify-signature.md): a Sigstore
// bundle holding a DSSE envelope whose payload is an in-toto Statement v1 with the OMS
// predicate. Reading is for hostile input: the bundle is bounded in size and nesting
// (formats/json.h), an object with a key twice is refused, every field the checks use
// must have its type, Base64 must be exact, resource names must be plain relative paths
// (no '/' at the start or end, no "", "." or ".." component), listed once. Writing gives
// one deterministic text for one model (the JSON writer, keys in a fixed order).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::oms {

inline constexpr uint64_t kMaxBundleBytes = uint64_t{64} << 20;
inline constexpr size_t kMaxResources = size_t{1} << 20;

inline constexpr std::string_view kBundleMediaTypeV03 = "application/vnd.dev.sigstore.bundle.v0.3+json";
inline constexpr std::string_view kInTotoPayloadType = "application/vnd.in-toto+json";
inline constexpr std::string_view kStatementType = "https://in-toto.io/Statement/v1";
inline constexpr std::string_view kPredicateType = "https://model_signing/signature/v1.0";
// The v0.2.0 layout (spec §5.1, §11): file digests in `subject`, no serialization.
inline constexpr std::string_view kLegacyPredicateType = "https://model_signing/Digests/v0.1";

// What verificationMaterial carries: it names the signing method (spec §4.1).
enum class Material { public_key, certificate_chain, sigstore_certificate };
const char* method_name(Material m);  // "key", "certificate", "sigstore"

struct Bundle {
  std::string media_type;
  Material material = Material::public_key;
  std::string key_hint;                  // publicKey.hint (informational)
  std::vector<std::string> certificates;  // DER, leaf first (certificate method)
  std::string payload_type;
  std::string payload;                  // decoded
  std::vector<std::string> signatures;  // decoded DER
};

// Parses a bundle's text. False with `error` (one sentence naming the field) when it is
// not JSON, not a Sigstore bundle media type, lacks or mistypes a field, or holds bad
// Base64. The payload is not interpreted here (parse_statement, after the signature).
bool parse_bundle(std::string_view text, Bundle& out, std::string& error);

struct Resource {
  std::string name;    // relative '/'-separated path (a shard: "path:start:end")
  std::string digest;  // lowercase hex
};

struct Serialization {
  std::string method = "files";  // "files" or "shards"
  std::string hash_type = "sha256";
  std::optional<uint64_t> shard_size;
  bool allow_symlinks = false;
  std::vector<std::string> ignore_paths;  // as recorded (relative to the model root)
};

struct Statement {
  std::string subject_name;
  std::string root_digest;  // subject[0].digest.sha256 ("" in the v0.2.0 layout)
  bool legacy = false;      // the v0.2.0 layout
  std::vector<Resource> resources;  // sorted by name
  Serialization serialization;
};

// Parses and checks the decoded payload (spec §8.3, §5.2): _type, predicateType (the
// v1.0 one, or the v0.2.0 one read for compatibility), exactly one subject with a name
// and a SHA-256 root digest, at least one resource, each with a plain relative name listed
// once, a lowercase hex digest of its algorithm's length, its algorithm equal to
// serialization.hash_type. False with `error` naming the rule broken.
bool parse_statement(std::string_view payload, Statement& out, std::string& error);

// SHA-256 over the resources' raw digests in name order (spec §6.5.1), lowercase hex.
std::string root_digest(const std::vector<Resource>& resources);

// The statement's JSON text (the DSSE payload) for `s` (resources sorted by the caller).
std::string statement_json(const Statement& s);

// A bundle's JSON text: mediaType v0.3, the verification material of `b.material`
// (publicKey.hint, or x509CertificateChain of b.certificates), the envelope.
std::string bundle_json(const Bundle& b);

// A shard resource's name "path:start:end" (spec §6.3.2: the last two ':'-separated fields,
// decimal, start < end) split; false when the name is not of that form.
bool split_shard_name(std::string_view name, std::string_view& path, uint64_t& start, uint64_t& end);

// True for a name made of plain components: no leading or trailing '/', no "", "." or
// ".." component, no NUL, at most 4096 bytes.
bool is_canonical_relative(std::string_view name);

}  // namespace ckpt::oms
