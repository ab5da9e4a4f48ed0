// libFuzzer target: an expert pack's manifest.json checked by check_pack_manifest_text,
// the code validate_expert_pack runs on the file (limit 1 GiB; every number bounded by the
// manifest schema's limits): typed members, file names, alignment, and the blob and part
// geometry against an experts.bin of the size the manifest claims and of 1 MiB.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "repack/pack_validate.h"

using namespace ckpt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  Findings claimed, fixed;
  check_pack_manifest_text(text, "manifest.json", std::nullopt, claimed);
  check_pack_manifest_text(text, "manifest.json", uint64_t{1} << 20, fixed);
  return 0;
}
