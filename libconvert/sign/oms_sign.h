// Signing a model into an OMS v1.0 bundle (spec §6; docs/ckpt-sign.md): the model walked
// by the OMS rules (sign/oms_files.h: default and given exclusions, the bundle itself
// excluded, links refused, an empty model refused), every file hashed with SHA-256 on all
// cores, resources sorted by name, the root digest over them, an in-toto Statement v1 with
// the OMS predicate (`files` serialization, allow_symlinks false, the exclusions recorded
// sorted), signed as a DSSE envelope over the PAE with an EC key (P-256, P-384, P-521),
// in a Sigstore bundle v0.3 whose verification material is the key's hint (`key`) or the
// signing certificate followed by its chain (`certificate`). One model gives one payload:
// only the ECDSA signature differs between runs (OpenSSL 3.0 signs with a random nonce).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/findings.h"
#include "sign/oms_bundle.h"

namespace ckpt::oms {

struct SignOptions {
  std::string model;
  std::string output;                   // the bundle's path (excluded from the model)
  std::string private_key;              // PEM file
  std::string signing_cert;             // PEM file: the `certificate` method ("" = `key`)
  std::vector<std::string> cert_chain;  // PEM files: intermediates (leaf to root order)
  std::vector<std::string> ignore_paths;
  std::function<void(uint64_t done, uint64_t total)> progress;  // bytes hashed; may be empty
};

struct SignResult {
  Findings findings;
  bool usage = false;
  std::string bundle_text;               // the bundle to write, when no error
  Statement statement;
  std::vector<std::string> files_read;   // every model file hashed (for the output check)
  uint64_t bytes_hashed = 0;
};

SignResult sign_model(const SignOptions& options);

// Where `ckpt sign` writes by default: model.sig in the directory holding MODEL.
std::string default_bundle_path(const std::string& model);

}  // namespace ckpt::oms
