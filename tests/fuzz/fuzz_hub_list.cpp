// libFuzzer target: the hash list `ckpt validate --hub-sha256 LIST` reads, through
// parse_hub_list, the function validate calls (limits in validate/hub_list.h). Invariants:
// an accepted list holds at least one entry, every name a plain relative path (never
// outside the checkpoint), every digest 64 lowercase hex digits, no name twice; a rejected
// list yields no entry and says why; the findings stay bounded whatever the input.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "formats/model_files.h"
#include "fuzz_util.h"
#include "io/hash.h"
#include "validate/hub_list.h"

using namespace ckpt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<HubListEntry> entries;
  Findings f;
  const bool ok = parse_hub_list(text, "hashes.txt", entries, f);
  fuzz::fuzz_check(f.items().size() <= kMaxHubListBadLines + 2, "unbounded findings");
  if (!ok) {
    fuzz::fuzz_check(f.has_errors() && entries.empty(), "rejected list without an error, or with entries");
    return 0;
  }
  fuzz::fuzz_check(!f.has_errors() && !entries.empty(), "accepted list that is empty or has errors");
  std::set<std::string> names;
  for (const auto& e : entries) {
    fuzz::fuzz_check(is_plain_relative_path(e.name), "accepted a name that is not a plain relative path");
    fuzz::fuzz_check(is_hex_digest(e.sha256, 64), "accepted a digest that is not 64 hex digits");
    for (char c : e.sha256) fuzz::fuzz_check(!(c >= 'A' && c <= 'F'), "digest not lowercase");
    fuzz::fuzz_check(names.insert(e.name).second, "accepted a name twice");
  }
  return 0;
}
