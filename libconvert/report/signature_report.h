// The JSON report of `ckpt sign --json` and `ckpt verify-signature --json`
// (schemas/signature-report.schema.json): what was signed or verified, the signing method,
// the root digest, the files and bytes hashed, with --provenance what the conversion's
// provenance records and what was checked, and every finding.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/findings.h"
#include "core/outcome.h"
#include "sign/provenance.h"

namespace ckpt {

struct ProvenanceSummary {
  std::string path, reference;
  bool read = false;        // the provenance's signature verified and its statement parsed
  oms::Provenance recorded;  // valid when `read`
  bool recompute = false;   // --recompute was asked
  bool reproduced = false;  // the conversion again gave OUT's digests
};

struct SignatureReport {
  std::string command;  // "sign" or "verify-signature"
  std::string model, bundle;
  Outcome status = Outcome::ok;
  bool verified = false;  // sign: the bundle was written; verify-signature: every rule passed
  std::string method;     // "key", "certificate" ("" when unknown)
  std::string root_digest;
  uint64_t files = 0, bytes = 0;
  std::optional<ProvenanceSummary> provenance;
  Findings findings;
};

std::string signature_report_json(const SignatureReport& r);

}  // namespace ckpt
