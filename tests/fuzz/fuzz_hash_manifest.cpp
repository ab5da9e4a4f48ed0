// libFuzzer target: the hash manifest `ckpt hash --check MANIFEST PATH` reads, through
// parse_hash_manifest, the function the CLI calls (limits in hashman/manifest.h). Invariants:
// a parse without error findings yields a manifest whose serialization parses back to the
// same JSON (what --check compares is exactly what was read), and a failed parse names why.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "hashman/manifest.h"

using namespace ckpt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  HashManifest m;
  Findings f;
  const bool ok = parse_hash_manifest(text, "manifest.json", m, f);
  if (!ok) {
    fuzz::fuzz_check(f.has_errors(), "rejected manifest without an error finding");
    return 0;
  }
  if (f.has_errors()) return 0;
  // Round trip: what was accepted serializes to a manifest that parses to the same text.
  const std::string again = hash_manifest_json(m);
  HashManifest m2;
  Findings f2;
  fuzz::fuzz_check(parse_hash_manifest(again, "roundtrip", m2, f2) && !f2.has_errors(),
                   "an accepted manifest does not parse back after serialization");
  fuzz::fuzz_check(hash_manifest_json(m2) == again, "serialization is not a fixed point");
  return 0;
}
