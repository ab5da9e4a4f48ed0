// Conversion attestations (docs/ckpt-convert.md "Signed conversions"): a conversion's output
// OUT signed with an ordinary OMS bundle (OUT/model.sig) and a signed in-toto Statement v1
// with the SLSA provenance v1 predicate (OUT/model.provenance, a Sigstore bundle v0.3 whose
// DSSE envelope is signed by the same key) that binds IN's resources and root digest (and
// the digest of IN's own OMS bundle when one was verified) to OUT's, with the tool version
// and every option that determines OUT. The one place every converting command
// (`convert`, `repack-experts`, `relayout`) attests through, and the one reader of it.
//
// Statement layout (deterministic for one conversion, keys in a fixed order):
//   subject[0]             {name: OUT's basename, digest.sha256: OUT's OMS root digest}
//   subject[1..]           {name: "<OUT basename>/<resource>", digest.sha256} per OUT file
//   predicate.buildDefinition.buildType  kConversionBuildType
//   predicate.buildDefinition.externalParameters
//       {command, options: {name: value...} (sorted), input: IN's basename, exclusions}
//   predicate.buildDefinition.resolvedDependencies
//       [0]  {name: IN's basename, digest.sha256: IN's root digest, annotations.role "input-root"}
//       ...  {name: "<IN basename>/<resource>", digest.sha256} per IN file
//       last {name: the bundle's basename, digest.sha256 of its bytes,
//             annotations.role "input-signature"} (only when --expect-signature verified one)
//   predicate.runDetails.builder {id: kBuilderId, version.ckptkit: the tool's version}
// Resources of IN and OUT are those of the OMS walk (sign/oms_files.h) with the default
// exclusions plus attestation_exclusions(): .ckptkit/, model.sig, model.provenance.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/findings.h"
#include "sign/oms_bundle.h"
#include "sign/oms_files.h"
#include "sign/oms_verify.h"

namespace ckpt::oms {

inline constexpr std::string_view kOutputBundleName = "model.sig";
inline constexpr std::string_view kProvenanceName = "model.provenance";
inline constexpr std::string_view kSlsaPredicateType = "https://slsa.dev/provenance/v1";
inline constexpr std::string_view kConversionBuildType = "https://ckptkit.dev/provenance/conversion/v1";
inline constexpr std::string_view kBuilderId = "https://ckptkit.dev/ckpt";

// What neither side's resources hold: ckptkit's bookkeeping (.ckptkit/), the output's own
// bundle and provenance. OUT's bundle records them among its ignore paths, so any OMS
// verifier skips them too.
const std::vector<std::string>& attestation_exclusions();

// One option that determines the output, as its command line names it ("experts", "int8-shift").
using ConversionOption = std::pair<std::string, std::string>;

// What a converting command hands over, under OUT's lock, once OUT's files are final.
struct ConversionAttestation {
  std::string command;  // "convert", "repack-experts", "relayout"
  std::string input;    // IN: a directory or a single file
  std::string output;   // OUT: a directory
  std::vector<ConversionOption> options;  // every option that determines OUT (order free; recorded sorted)
  std::string input_bundle;               // IN's OMS bundle that --expect-signature verified, or ""
  std::string private_key;                // PEM EC private key (P-256, P-384, P-521)
  mode_t mode = 0644;                     // of the two files written (OUT's files' mode)
  // SHA-256 of IN's files that the conversion hashed in its own pass over them, by resource
  // name (ConvertReport::input_sha256, io/lockstep_hasher.h): recorded without a second
  // read, and they are the bytes converted. IN's other files are hashed here.
  std::map<std::string, std::string> input_sha256 = {};
  // Bytes hashed (OUT, then IN) against their sum; may be empty. Called from hashing threads.
  std::function<void(uint64_t done, uint64_t total)> progress = nullptr;
};

struct AttestationResult {
  Findings findings;
  bool usage = false;  // a key that cannot be used
  Statement output;    // OUT's resources and root digest (as signed in OUT/model.sig)
  Statement input;     // IN's
  std::string bundle_path, provenance_path;  // written, when no error
};

// Signs OUT (OUT/model.sig) and writes OUT/model.provenance, each atomically (temporary,
// fsync, rename, fsync of OUT). Call it under OUT's lock after OUT's last file is written:
// a failure leaves OUT without them (findings say why). Hashes IN and OUT on all cores.
AttestationResult attest_conversion(const ConversionAttestation& a);
// Whether the private key at `path` can sign (read, parsed, an EC key the signer takes):
// checked before a conversion starts, so a bad --sign-key costs nothing (findings: IO_* or
// KEY_UNUSABLE with `usage`).
bool signing_key_usable(const std::string& path, Findings& findings, bool& usage);

// A provenance statement's content (the verified payload of OUT/model.provenance).
struct Provenance {
  std::string command;
  std::vector<ConversionOption> options;  // sorted by name
  std::string tool_version;
  std::string input_name, output_name;  // basenames as recorded
  Statement input, output;              // resources by relative name, and root digests
  std::string input_bundle_name, input_bundle_digest;  // "" when none was recorded
};

// Parses a verified payload: statement and predicate types, the build type, every field
// above with its type; digests lowercase SHA-256 hex; resources plain relative names, each
// once; each root digest equal to the one computed over its resources. False with `error`.
bool parse_provenance(std::string_view payload, Provenance& out, std::string& error);

// The statement's JSON text (the DSSE payload) for `p`.
std::string provenance_json(const Provenance& p);

// IN's or OUT's resources as attestations see them: the OMS walk with the default and
// attestation exclusions, every file hashed on all cores (sorted by name), and the root
// digest. False with findings (IO_*, OMS_*) when the model cannot be read.
bool attested_resources(const std::string& model, Statement& out, Findings& findings, const BytesDone& on_bytes = {},
                        const std::map<std::string, std::string>* known_sha256 = nullptr);

// What `ckpt verify-signature --provenance P --reference IN OUT` checks (not --recompute:
// the caller converts and compares with compare_resources).
struct ProvenanceCheck {
  VerifyOptions trust;      // public_key or cert_chain; model = OUT; bundle = OUT's bundle
  std::string provenance;   // OUT/model.provenance
  std::string reference;    // IN
};

struct ProvenanceResult {
  Findings findings;
  bool usage = false;
  bool verified = false;   // every check passed
  bool read = false;       // the provenance's signature verified and its statement parsed
  Provenance recorded;     // the verified statement (valid when `read`)
  VerifyResult output;     // OUT against its bundle
};

// OUT against its OMS bundle, the provenance's signature with the same trust, OUT's root
// digest equal to the recorded subject, IN rehashed and equal to every recorded input
// resource and its root digest. Each failure a finding naming the file and the rule.
ProvenanceResult verify_provenance(const ProvenanceCheck& check);

// Adds a finding (`code`) for every difference between `recorded` and `actual` resources
// (`what`: "the input" / "the recomputed output"): a file missing, one not recorded, a
// digest that differs; and the root digests. True when they are equal.
bool compare_resources(const Statement& recorded, const Statement& actual, const std::string& what,
                       const std::string& code, const std::string& file_prefix, Findings& findings);

}  // namespace ckpt::oms
