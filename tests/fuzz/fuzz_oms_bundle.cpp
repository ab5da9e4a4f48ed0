// libFuzzer target: an OMS signature bundle as `ckpt verify-signature` reads it, through
// parse_bundle then parse_statement on its payload (the signature check sits between them
// in the verifier; here every payload is parsed, so the statement reader sees hostile
// input too). Invariants: an accepted bundle has one to 16 signatures, none empty, and a
// non-empty payload; an accepted statement lists 1 to kMaxResources resources, sorted,
// each name once, each a canonical relative path (or "." alone: a single-file model), each
// digest lowercase hex (64 digits for sha256); a rejection always says why. The same
// payload goes through parse_provenance (a conversion's SLSA provenance, sign/provenance.h):
// an accepted one has each side's files named once, sorted, plain relative names, and a
// root digest that is the one over its files.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "sign/oms_bundle.h"
#include "sign/provenance.h"

using namespace ckpt;

namespace {

void check_statement(const oms::Statement& st) {
  fuzz::fuzz_check(!st.resources.empty() && st.resources.size() <= oms::kMaxResources, "resource count out of bounds");
  for (size_t i = 0; i < st.resources.size(); ++i) {
    const auto& r = st.resources[i];
    if (i > 0) fuzz::fuzz_check(st.resources[i - 1].name < r.name, "resources not sorted or listed twice");
    const bool single = r.name == "." && st.resources.size() == 1;
    if (st.serialization.method == "files")
      fuzz::fuzz_check(single || oms::is_canonical_relative(r.name), "accepted a name that leaves the model");
    fuzz::fuzz_check(!r.digest.empty(), "empty digest");
    for (char c : r.digest) fuzz::fuzz_check((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'), "digest not lowercase hex");
    if (st.serialization.hash_type == "sha256") fuzz::fuzz_check(r.digest.size() == 64, "sha256 digest not 64 digits");
  }
  if (!st.legacy) fuzz::fuzz_check(st.root_digest.size() == 64 && !st.subject_name.empty(), "bad subject accepted");
}

void check_provenance_side(const oms::Statement& side) {
  fuzz::fuzz_check(!side.resources.empty(), "provenance side without files accepted");
  for (size_t i = 0; i < side.resources.size(); ++i) {
    if (i > 0) fuzz::fuzz_check(side.resources[i - 1].name < side.resources[i].name, "provenance files not sorted");
    fuzz::fuzz_check(oms::is_canonical_relative(side.resources[i].name), "provenance file name leaves the model");
  }
  fuzz::fuzz_check(oms::root_digest(side.resources) == side.root_digest, "provenance root digest not recomputed");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  oms::Bundle b;
  std::string error;
  if (oms::parse_bundle(text, b, error)) {
    fuzz::fuzz_check(!b.signatures.empty() && b.signatures.size() <= 16, "signature count out of bounds");
    for (const auto& s : b.signatures) fuzz::fuzz_check(!s.empty(), "empty signature accepted");
    fuzz::fuzz_check(!b.payload.empty(), "empty payload accepted");
  } else {
    fuzz::fuzz_check(!error.empty(), "bundle rejected without a reason");
  }
  // The statement reader on the payload, or on the input itself (a bare statement).
  oms::Statement st;
  error.clear();
  if (oms::parse_statement(b.payload.empty() ? text : std::string_view(b.payload), st, error))
    check_statement(st);
  else
    fuzz::fuzz_check(!error.empty(), "statement rejected without a reason");
  oms::Provenance prov;
  error.clear();
  if (oms::parse_provenance(b.payload.empty() ? text : std::string_view(b.payload), prov, error)) {
    check_provenance_side(prov.input);
    check_provenance_side(prov.output);
  } else {
    fuzz::fuzz_check(!error.empty(), "provenance rejected without a reason");
  }
  return 0;
}
