// libFuzzer target: config.json text checked against the DeepSeek-V4 profile. Parsed as
// load_config does (JsonDoc, root must be an object), then dsv4_expected_catalogue: the
// config rules of deepseek-v4.md §6 and the tensor catalogue expanded from the embedded
// profile (bounded by the profile's documented catalogue limit), and weight_block_size_from_config.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/json.h"
#include "fuzz_util.h"
#include "profiles/deepseek_v4.h"
#include "model/quant_config.h"

using namespace ckpt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  JsonDoc doc;
  std::string error;
  if (!doc.parse(text, error) || !doc.root().is_object()) return 0;
  Findings findings;
  std::vector<ExpectedTensor> catalogue;
  const bool ok = dsv4_expected_catalogue(doc.root(), "config.json", findings, catalogue);
  if (!ok) fuzz::fuzz_check(findings.has_errors(), "no catalogue and no error finding");
  for (const auto& t : catalogue) fuzz::fuzz_check(!t.name.empty() && !t.dtype.empty(), "catalogue entry without a name or dtype");
  uint64_t rows = 0, cols = 0;
  if (weight_block_size_from_config(doc.root(), rows, cols)) fuzz::fuzz_check(rows > 0 && cols > 0, "zero weight block size");
  return 0;
}
