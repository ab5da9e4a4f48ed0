// Conversion attestations (sign/provenance.h).
#include "sign/provenance.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "core/build_info.h"
#include "formats/json.h"
#include "formats/json_writer.h"
#include "io/atomic_file.h"
#include "io/hash.h"
#include "sign/oms_crypto.h"
#include "sign/oms_files.h"
#include "sign/oms_json.h"
#include "sign/oms_sign.h"

namespace ckpt::oms {
namespace {

namespace fs = std::filesystem;
namespace dom = simdjson::dom;

constexpr uint64_t kMaxPemBytes = uint64_t{1} << 20;
constexpr std::string_view kRoleRoot = "input-root";
constexpr std::string_view kRoleSignature = "input-signature";

std::string basename_of(const std::string& path) {
  std::string name = fs::path(path).lexically_normal().filename().string();
  if (name.empty() || name == "." || name == "..") {
    std::error_code ec;
    name = fs::weakly_canonical(fs::absolute(path, ec), ec).filename().string();
  }
  return name.empty() ? std::string("model") : name;
}

// ---- writing ----

void digest_object(JsonWriter& w, const std::string& sha256) {
  w.key("digest").begin_object().key("sha256").value(sha256).end_object();
}

void descriptor(JsonWriter& w, const std::string& name, const std::string& sha256, std::string_view role = {}) {
  w.begin_object().key("name").value(name);
  digest_object(w, sha256);
  if (!role.empty()) w.key("annotations").begin_object().key("role").value(role).end_object();
  w.end_object();
}

bool write_out(const std::string& path, const std::string& text, mode_t mode, std::string& error) {
  AtomicOutput out(path, mode);
  return out.open(error) && out.write(reinterpret_cast<const uint8_t*>(text.data()), text.size(), error) &&
         out.commit(error);
}

// ---- reading ----

// Field lookups that say what was wrong (sign/oms_json.h).
constexpr JsonFields kFields{" has no member "};

bool is_sha256_hex(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// One resource descriptor: name, digest.sha256 (lowercase hex), annotations.role if any.
bool parse_descriptor(dom::element e, const std::string& where, std::string& name, std::string& digest,
                      std::string& role, std::string& error) {
  dom::element d;
  if (!e.is_object()) {
    error = where + " is not an object";
    return false;
  }
  if (!kFields.text(e, "name", where, name, error) || !kFields.object(e, "digest", where, d, error) ||
      !kFields.text(d, "sha256", where + ".digest", digest, error))
    return false;
  if (!is_sha256_hex(digest)) {
    error = where + ".digest.sha256 is not 64 lowercase hex digits";
    return false;
  }
  role.clear();
  if (auto a = json_get(e, "annotations")) {
    if (!a->is_object()) {
      error = where + ".annotations is not an object";
      return false;
    }
    if (json_get(*a, "role") && !kFields.text(*a, "role", where + ".annotations", role, error)) return false;
  }
  return true;
}

// "<prefix>/<resource>" -> the resource, which must be a plain relative name listed once.
bool add_resource(const std::string& name, const std::string& prefix, const std::string& digest,
                  const std::string& where, Statement& st, std::string& error) {
  if (name.size() <= prefix.size() + 1 || name.compare(0, prefix.size(), prefix) != 0 || name[prefix.size()] != '/') {
    error = where + ".name \"" + name.substr(0, 200) + "\" is not under \"" + prefix + "/\"";
    return false;
  }
  const std::string rel = name.substr(prefix.size() + 1);
  if (!is_canonical_relative(rel)) {
    error = where + ".name \"" + name.substr(0, 200) + "\" is not a plain relative path";
    return false;
  }
  st.resources.push_back(Resource{rel, digest});
  return true;
}

bool sorted_unique(Statement& st, const std::string& where, std::string& error) {
  std::sort(st.resources.begin(), st.resources.end(), [](const Resource& a, const Resource& b) { return a.name < b.name; });
  for (size_t i = 1; i < st.resources.size(); ++i)
    if (st.resources[i].name == st.resources[i - 1].name) {
      error = where + " names " + st.resources[i].name + " twice";
      return false;
    }
  if (st.resources.empty()) {
    error = where + " lists no file";
    return false;
  }
  if (root_digest(st.resources) != st.root_digest) {
    error = where + ": the recorded root digest " + st.root_digest +
            " is not the SHA-256 of the recorded files' digests (" + root_digest(st.resources) + ")";
    return false;
  }
  return true;
}

bool parse_subject(dom::element root, Provenance& p, std::string& error) {
  dom::array subjects;
  if (!kFields.array(root, "subject", "the statement", subjects, error)) return false;
  if (subjects.size() < 2 || subjects.size() > kMaxResources + 1) {
    error = "the statement's subject holds " + std::to_string(subjects.size()) + " entries (the root and 1 to " +
            std::to_string(kMaxResources) + " files accepted)";
    return false;
  }
  size_t i = 0;
  for (dom::element s : subjects) {
    const std::string where = "subject[" + std::to_string(i) + "]";
    std::string name, digest, role;
    if (!parse_descriptor(s, where, name, digest, role, error)) return false;
    if (i++ == 0) {
      p.output_name = name;
      p.output.subject_name = name;
      p.output.root_digest = digest;
    } else if (!add_resource(name, p.output_name, digest, where, p.output, error)) {
      return false;
    }
  }
  return sorted_unique(p.output, "the statement's subject", error);
}

bool parse_options(dom::element params, Provenance& p, std::string& error) {
  const std::string where = "externalParameters";
  dom::element options;
  if (!kFields.text(params, "command", where, p.command, error) ||
      !kFields.object(params, "options", where, options, error) ||
      !kFields.text(params, "input", where, p.input_name, error))
    return false;
  dom::object fields;
  if (options.get_object().get(fields) != simdjson::SUCCESS) {
    error = where + ".options is not an object";
    return false;
  }
  for (auto [key, value] : fields) {
    std::string_view v;
    if (value.get_string().get(v) != simdjson::SUCCESS) {
      error = where + ".options." + std::string(key) + " is not a string";
      return false;
    }
    p.options.emplace_back(std::string(key), std::string(v));
  }
  std::sort(p.options.begin(), p.options.end());
  return true;
}

bool parse_dependencies(dom::element def, Provenance& p, std::string& error) {
  dom::array deps;
  if (!kFields.array(def, "resolvedDependencies", "buildDefinition", deps, error)) return false;
  if (deps.size() < 2 || deps.size() > kMaxResources + 2) {
    error = "buildDefinition.resolvedDependencies holds " + std::to_string(deps.size()) + " entries";
    return false;
  }
  size_t i = 0;
  for (dom::element d : deps) {
    const std::string where = "resolvedDependencies[" + std::to_string(i) + "]";
    std::string name, digest, role;
    if (!parse_descriptor(d, where, name, digest, role, error)) return false;
    if (i++ == 0) {
      if (role != kRoleRoot || name != p.input_name) {
        error = where + " is not the input's root (annotations.role \"" + std::string(kRoleRoot) + "\", name \"" +
                p.input_name.substr(0, 200) + "\")";
        return false;
      }
      p.input.subject_name = name;
      p.input.root_digest = digest;
    } else if (role == kRoleSignature) {
      if (!p.input_bundle_name.empty()) {
        error = where + ": a second input signature";
        return false;
      }
      p.input_bundle_name = name;
      p.input_bundle_digest = digest;
    } else if (!role.empty()) {
      error = where + ".annotations.role \"" + role.substr(0, 200) + "\" is not one ckptkit writes";
      return false;
    } else if (!add_resource(name, p.input_name, digest, where, p.input, error)) {
      return false;
    }
  }
  return sorted_unique(p.input, "buildDefinition.resolvedDependencies", error);
}

}  // namespace

const std::vector<std::string>& attestation_exclusions() {
  static const std::vector<std::string> kExclusions{".ckptkit", std::string(kOutputBundleName),
                                                    std::string(kProvenanceName)};
  return kExclusions;
}

std::string provenance_json(const Provenance& p) {
  JsonWriter w;
  w.begin_object().key("_type").value(kStatementType);
  w.key("subject").begin_array();
  descriptor(w, p.output_name, p.output.root_digest);
  for (const auto& r : p.output.resources) descriptor(w, p.output_name + "/" + r.name, r.digest);
  w.end_array();
  w.key("predicateType").value(kSlsaPredicateType);
  w.key("predicate").begin_object().key("buildDefinition").begin_object();
  w.key("buildType").value(kConversionBuildType);
  w.key("externalParameters").begin_object().key("command").value(p.command);
  w.key("options").begin_object();
  for (const auto& [name, value] : p.options) w.key(name).value(value);
  w.end_object().key("input").value(p.input_name).key("exclusions").begin_array();
  for (const auto& e : attestation_exclusions()) w.value(e);
  w.end_array().end_object();
  w.key("resolvedDependencies").begin_array();
  descriptor(w, p.input_name, p.input.root_digest, kRoleRoot);
  for (const auto& r : p.input.resources) descriptor(w, p.input_name + "/" + r.name, r.digest);
  if (!p.input_bundle_digest.empty()) descriptor(w, p.input_bundle_name, p.input_bundle_digest, kRoleSignature);
  w.end_array().end_object();
  w.key("runDetails").begin_object().key("builder").begin_object().key("id").value(kBuilderId);
  w.key("version").begin_object().key("ckptkit").value(p.tool_version).end_object().end_object();
  w.end_object().end_object().end_object();
  return w.str();
}

bool parse_provenance(std::string_view payload, Provenance& out, std::string& error) {
  out = Provenance{};
  JsonDoc doc;
  if (payload.size() > kMaxBundleBytes || !doc.parse(payload, error)) {
    error = "the provenance payload is not JSON: " + error;
    return false;
  }
  const dom::element root = doc.root();
  std::string type, predicate_type, build_type;
  if (!root.is_object()) {
    error = "the provenance payload is not a JSON object";
    return false;
  }
  if (!kFields.text(root, "_type", "the statement", type, error) ||
      !kFields.text(root, "predicateType", "the statement", predicate_type, error))
    return false;
  if (type != kStatementType || predicate_type != kSlsaPredicateType) {
    error = "the statement is \"" + type.substr(0, 200) + "\" with predicate \"" + predicate_type.substr(0, 200) +
            "\", not an in-toto Statement v1 with " + std::string(kSlsaPredicateType);
    return false;
  }
  dom::element pred, def, params, run, builder, version;
  if (!kFields.object(root, "predicate", "the statement", pred, error) ||
      !kFields.object(pred, "buildDefinition", "predicate", def, error) ||
      !kFields.text(def, "buildType", "buildDefinition", build_type, error))
    return false;
  if (build_type != kConversionBuildType) {
    error = "buildDefinition.buildType is \"" + build_type.substr(0, 200) + "\", not " +
            std::string(kConversionBuildType) + " (not a ckptkit conversion)";
    return false;
  }
  if (!kFields.object(def, "externalParameters", "buildDefinition", params, error) || !parse_options(params, out, error) ||
      !parse_subject(root, out, error) || !parse_dependencies(def, out, error) ||
      !kFields.object(pred, "runDetails", "predicate", run, error) ||
      !kFields.object(run, "builder", "runDetails", builder, error) ||
      !kFields.object(builder, "version", "runDetails.builder", version, error) ||
      !kFields.text(version, "ckptkit", "runDetails.builder.version", out.tool_version, error))
    return false;
  return true;
}

bool attested_resources(const std::string& model, Statement& out, Findings& findings, const BytesDone& on_bytes,
                        const std::map<std::string, std::string>* known_sha256) {
  out = Statement{};
  ModelScope scope;
  scope.ignore_paths = default_ignore_paths();
  for (const auto& e : attestation_exclusions()) scope.ignore_paths.push_back(e);
  // A link to a file is hashed as its target, as convert reads it (a Hugging Face cache
  // snapshot is links into blobs/); a link to a directory is still refused.
  scope.allow_symlinks = true;
  std::vector<ModelEntry> entries;
  if (!list_model(model, scope, entries, findings) || findings.has_errors()) return false;
  std::vector<const ModelEntry*> files, to_hash;
  for (const auto& e : entries)
    if (!e.ignored && (e.kind == EntryKind::regular || e.kind == EntryKind::link_to_file)) files.push_back(&e);
  if (files.empty()) {
    findings.error("OMS_EMPTY_MODEL", model, "", std::nullopt, model + " holds no file to attest");
    return false;
  }
  auto known_digest = [&](const ModelEntry* e) -> const std::string* {
    if (!known_sha256) return nullptr;
    const auto it = known_sha256->find(e->name);
    return it == known_sha256->end() ? nullptr : &it->second;
  };
  for (const auto* e : files)
    if (!known_digest(e)) to_hash.push_back(e);
  std::vector<std::string> digests;
  std::atomic<uint64_t> bytes{0};
  hash_entries(to_hash, digests, findings, bytes, on_bytes);
  if (findings.has_errors()) return false;
  for (size_t i = 0, h = 0; i < files.size(); ++i) {
    const std::string* known = known_digest(files[i]);
    out.resources.push_back(Resource{files[i]->name, known ? *known : digests[h++]});
  }
  out.subject_name = basename_of(model);
  out.root_digest = root_digest(out.resources);
  return true;
}

namespace {

// OUT signed as any OMS signer would, the provenance and ckptkit's bookkeeping left out.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

// The bytes of every regular file under `path` (or of the file): the meter's total.
uint64_t tree_bytes(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    const uint64_t n = fs::file_size(path, ec);
    return ec ? 0 : n;
  }
  uint64_t n = 0;
  for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) n += it->file_size(ec);
  return n;
}

bool sign_output(const ConversionAttestation& a, const ProgressFn& meter, AttestationResult& r,
                 std::string& bundle_text) {
  SignOptions so;
  so.progress = meter;
  so.model = a.output;
  so.output = (fs::path(a.output) / kOutputBundleName).string();
  so.private_key = a.private_key;
  so.ignore_paths = {".ckptkit", std::string(kProvenanceName)};
  SignResult signed_out = sign_model(so);
  r.findings.append(signed_out.findings);
  r.usage = signed_out.usage;
  if (r.findings.has_errors()) return false;
  r.output = std::move(signed_out.statement);
  bundle_text = std::move(signed_out.bundle_text);
  return true;
}

// The signing key at `path`, loaded (IO_* or KEY_UNUSABLE, with `usage`, when it cannot be).
bool load_signing_key(const std::string& path, EcKey& key, Findings& f, bool& usage) {
  std::string pem, why;
  if (!read_small_file(path, kMaxPemBytes, pem, f)) return false;
  if (key.load_private_pem(pem, why)) return true;
  usage = true;
  f.error("KEY_UNUSABLE", path, "", std::nullopt, "the private key cannot be used: " + why);
  return false;
}

// The provenance's envelope: the statement signed over the PAE, in a Sigstore bundle.
bool sign_provenance(const ConversionAttestation& a, const Provenance& p, AttestationResult& r, std::string& text) {
  std::string why, sig;
  EcKey key;
  if (!load_signing_key(a.private_key, key, r.findings, r.usage)) return false;
  Bundle b;
  b.material = Material::public_key;
  b.key_hint = key.hint();
  b.payload_type = std::string(kInTotoPayloadType);
  b.payload = provenance_json(p);
  if (!key.sign(dsse_pae(b.payload_type, b.payload), sig, why)) {
    r.findings.error("OMS_SIGN", a.private_key, "", std::nullopt, why);
    return false;
  }
  b.signatures.push_back(std::move(sig));
  text = bundle_json(b);
  return true;
}

// Both files, each atomically; the bundle is taken back when the provenance cannot follow.
bool write_both(const ConversionAttestation& a, const std::string& bundle_text, const std::string& provenance_text,
                AttestationResult& r) {
  const std::string bundle = (fs::path(a.output) / kOutputBundleName).string();
  const std::string provenance = (fs::path(a.output) / kProvenanceName).string();
  std::string why;
  if (!write_out(bundle, bundle_text, a.mode, why)) {
    r.findings.error("IO_WRITE", bundle, "", std::nullopt, "cannot write " + bundle + ": " + why);
    return false;
  }
  if (!write_out(provenance, provenance_text, a.mode, why)) {
    r.findings.error("IO_WRITE", provenance, "", std::nullopt, "cannot write " + provenance + ": " + why);
    std::error_code ec;
    fs::remove(bundle, ec);
    return false;
  }
  r.bundle_path = bundle;
  r.provenance_path = provenance;
  return true;
}

}  // namespace

bool signing_key_usable(const std::string& path, Findings& findings, bool& usage) {
  EcKey key;
  usage = false;
  return load_signing_key(path, key, findings, usage);
}

AttestationResult attest_conversion(const ConversionAttestation& a) {
  AttestationResult r;
  std::string bundle_text, provenance_text;
  // One meter over both hashes: OUT's bytes (reported by the signer) then IN's.
  const uint64_t in_bytes = a.progress ? tree_bytes(a.input) : 0;
  uint64_t out_bytes = 0;
  auto in_done = std::make_shared<std::atomic<uint64_t>>(0);
  ProgressFn out_meter;
  if (a.progress)
    out_meter = [&a, &out_bytes, in_bytes](uint64_t done, uint64_t total) {
      out_bytes = total;
      a.progress(done, total + in_bytes);
    };
  BytesDone in_meter;
  if (a.progress)
    in_meter = [&a, &out_bytes, in_bytes, in_done](uint64_t n) {
      a.progress(out_bytes + (*in_done += n), out_bytes + in_bytes);
    };
  if (!sign_output(a, out_meter, r, bundle_text) || !attested_resources(a.input, r.input, r.findings, in_meter, &a.input_sha256)) return r;
  Provenance p;
  p.command = a.command;
  p.options = a.options;
  std::sort(p.options.begin(), p.options.end());
  p.tool_version = version_text();
  p.input_name = r.input.subject_name;
  p.output_name = basename_of(a.output);
  p.input = r.input;
  p.output = r.output;
  if (!a.input_bundle.empty()) {
    std::string text;
    if (!read_small_file(a.input_bundle, kMaxBundleBytes, text, r.findings)) return r;
    p.input_bundle_name = basename_of(a.input_bundle);
    p.input_bundle_digest = sha256_hex(text);
  }
  if (sign_provenance(a, p, r, provenance_text)) write_both(a, bundle_text, provenance_text, r);
  return r;
}

bool compare_resources(const Statement& recorded, const Statement& actual, const std::string& what,
                       const std::string& code, const std::string& file_prefix, Findings& findings) {
  std::map<std::string, std::string> now;
  for (const auto& r : actual.resources) now[r.name] = r.digest;
  bool same = true;
  for (const auto& r : recorded.resources) {
    const auto it = now.find(r.name);
    const std::string file = file_prefix + r.name;
    if (it == now.end()) {
      findings.error(code, file, "", std::nullopt, what + ": " + r.name + " is recorded but missing");
      same = false;
    } else if (it->second != r.digest) {
      findings.error(code, file, "", std::nullopt,
                     what + ": " + r.name + " has SHA-256 " + it->second + ", the provenance records " + r.digest);
      same = false;
    }
    if (it != now.end()) now.erase(it);
  }
  for (const auto& [name, digest] : now) {
    findings.error(code, file_prefix + name, "", std::nullopt, what + ": " + name + " is not recorded in the provenance");
    same = false;
  }
  if (recorded.root_digest != actual.root_digest) {
    findings.error(code, file_prefix.empty() ? std::string(".") : file_prefix, "", std::nullopt,
                   what + ": root digest " + actual.root_digest + ", the provenance records " + recorded.root_digest);
    same = false;
  }
  return same;
}

ProvenanceResult verify_provenance(const ProvenanceCheck& c) {
  ProvenanceResult r;
  Findings& f = r.findings;
  // OUT against its own bundle first: the ordinary OMS check.
  r.output = verify_signature(c.trust);
  f.append(r.output.findings);
  if (r.output.usage) {
    r.usage = true;
    return r;
  }
  VerifyOptions prov = c.trust;
  prov.bundle = c.provenance;
  std::string payload, why;
  VerifyResult envelope;
  if (!verify_envelope(prov, payload, envelope)) {
    f.append(envelope.findings);
    r.usage = envelope.usage;
    return r;
  }
  if (!parse_provenance(payload, r.recorded, why)) {
    f.error("PROVENANCE_STATEMENT", c.provenance, "", std::nullopt, why);
    return r;
  }
  r.read = true;
  // The subject is OUT as its own signature lists it: every file by name and digest (the
  // root digest alone does not bind the names), and the root digest.
  if (r.output.verified)
    compare_resources(r.recorded.output, r.output.statement, "OUT's signature against the provenance's subject",
                      "PROVENANCE_SUBJECT", "", f);
  // IN as it is now, against what the provenance records.
  Statement now;
  Findings read;
  if (!attested_resources(c.reference, now, read)) {
    f.append(read);
    return r;
  }
  compare_resources(r.recorded.input, now, "the reference input", "PROVENANCE_INPUT_MISMATCH", "", f);
  r.verified = r.output.verified && !f.has_errors();
  return r;
}

}  // namespace ckpt::oms
