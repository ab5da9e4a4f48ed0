// libFuzzer target: config.json text checked against the DeepSeek-V4 profile. Parsed as
// load_config does (JsonDoc, root must be an object), then dsv4_expected_catalogue: the
// config rules of deepseek-v4.md §6 and the tensor catalogue expanded from the embedded
// profile (bounded by the profile's documented catalogue limit), weight_block_size_from_config,
// and the quantization profile detection (detect_quant_scheme) with its exclusion patterns.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/json.h"
#include "fuzz_util.h"
#include "profiles/deepseek_v4.h"
#include "model/module_pattern.h"
#include "model/quant_config.h"
#include "model/quant_scheme.h"

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
  // The quantization profile's detection and requirements, and every exclusion entry it
  // accepted matched against names (the regex subset must stay linear: no timeout).
  QuantScheme scheme;
  std::string quant_error;
  if (detect_quant_scheme(&doc, scheme, quant_error)) {
    for (const auto& e : scheme.excluded) {
      fuzz::fuzz_check(!module_pattern_problem(e), "an accepted exclusion entry the matcher refuses");
      (void)module_pattern_matches(e, "model.layers.12.mlp.experts.3.up_proj");
      (void)module_pattern_matches(e, std::string(200, 'a') + "b");
    }
  } else {
    fuzz::fuzz_check(!quant_error.empty(), "a refused quantization config without a reason");
  }
  return 0;
}
