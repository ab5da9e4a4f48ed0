// Verifying a model against an OMS bundle (spec §8; docs/ckpt-verify-signature.md): the
// bundle parsed as hostile input, the signing method of its verification material matched
// against the trust given (a public key: `key`; CA certificates: `certificate`), the DSSE
// signature checked over the PAE, the statement and predicate checked, the root digest
// recomputed, then the model walked by the bundle's own rules (its ignore paths and symlink
// policy) and every listed file hashed on all cores: each must be present with its digest,
// and no unlisted file may be present unless unsigned files are allowed. Every failure is
// a finding naming the rule and, where there is one, the file. The `sigstore` method
// (Fulcio certificates, Rekor entries) needs a network trust root: refused.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/findings.h"
#include "sign/oms_bundle.h"

namespace ckpt::oms {

struct VerifyOptions {
  std::string model;
  std::string bundle;                   // the bundle file
  std::string public_key;               // PEM file: the `key` method
  std::vector<std::string> cert_chain;  // PEM files of trusted CA certificates: `certificate`
  std::vector<std::string> ignore_paths;  // --ignore-paths (relative to the model, or absolute inside it)
  bool ignore_unsigned_files = false;
  std::function<void(uint64_t done, uint64_t total)> progress;  // bytes hashed; may be empty
  // SHA-256 (lowercase hex) of whole model files the caller has already read, by resource
  // name: `convert --expect-signature` hashes its input shards in the same pass over the
  // disk as the conversion (io/lockstep_hasher.h). A file signed whole whose name is here
  // takes this digest instead of being read again; every other file is read and hashed.
  std::map<std::string, std::string> known_sha256;
};

struct VerifyResult {
  Findings findings;
  bool usage = false;           // a refused request (no trust given, a key that cannot be used)
  std::string method;           // "key" / "certificate" as found in the bundle
  std::string root_digest;      // the statement's subject digest, once verified
  uint64_t files_checked = 0;   // listed files hashed and matched
  uint64_t bytes_hashed = 0;     // read and hashed here
  uint64_t files_known = 0;      // matched through VerifyOptions::known_sha256 (not read here)
  bool verified = false;        // every rule passed
  Statement statement;          // the bundle's statement, once its signature verified
};

VerifyResult verify_signature(const VerifyOptions& options);

// Every rule of verify_signature that does not read the model: the trust, the bundle,
// the DSSE signature, the statement, the predicate and the root digest over the listed
// resources. `convert --expect-signature` runs it before writing anything, so a bundle
// that cannot verify is refused at once. r.verified says whether it passed.
bool verify_bundle(const VerifyOptions& options, VerifyResult& r);

// What a verified bundle established, all verify_files needs of it: the statement whose
// signature verified, by which method, and its root digest. Made only from a result that
// verified (verified_bundle), so verify_files cannot be handed an unverified statement.
struct VerifiedBundle {
  Statement statement;
  std::string method;       // "key" / "certificate"
  std::string root_digest;
};
// The verified part of `r`; nullopt when r.verified is false.
std::optional<VerifiedBundle> verified_bundle(const VerifyResult& r);

// The second half of verify_signature, for a caller that ran verify_bundle earlier:
// options.model's files checked against `bundle`'s verified statement (its ignore paths,
// symlink policy, every listed file's digest, no unlisted file), the bundle not read or
// its signature checked again. `convert --expect-signature` verifies the bundle before
// writing anything and the input's files once every shard is written.
VerifyResult verify_files(const VerifyOptions& options, const VerifiedBundle& bundle);

// The envelope of `options.bundle` alone, with the trust of `options` (the same rules as
// verify_signature up to the DSSE signature; the payload is not interpreted and no model
// file is read): a conversion's provenance (sign/provenance.h). True with the verified
// payload; false with findings in `r` (r.usage for a refused request).
bool verify_envelope(const VerifyOptions& options, std::string& payload, VerifyResult& r);

// Reads a whole small file the CLI names (a key, a certificate, the bundle) through the
// project's one input open; false with an IO_READ finding naming it.
bool read_small_file(const std::string& path, uint64_t limit, std::string& text, Findings& findings);

}  // namespace ckpt::oms
