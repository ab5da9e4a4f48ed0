// libFuzzer target: config.json text as ckpt preflight reads it from a directory holding only
// the config. detect_quant_scheme, then tensors_from_config (every tensor of the family's
// model, bounded: a dimension over 2^24, more than 2^18 tensors (estimated from its layer and expert counts before any is made) or 2^64 bytes is refused),
// then the partition model on every linear weight at a few deployments.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "deploy/config_tensors.h"
#include "deploy/partition_model.h"
#include "formats/json.h"
#include "fuzz_util.h"
#include "model/quant_scheme.h"

using namespace ckpt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  JsonDoc doc;
  std::string error;
  if (!doc.parse(text, error) || !doc.root().is_object()) return 0;
  QuantScheme scheme;
  if (!detect_quant_scheme(&doc, scheme, error)) return 0;
  // Inputs whose model is large (up to the library's 2^18-tensor bound) are left to the unit
  // tests: deriving 2^18 names takes seconds under ASan, past libFuzzer's 1 s per input. The
  // bound itself is the estimate, checked here for every input.
  const uint64_t estimate = derived_tensor_estimate(doc.root());
  if (estimate > (uint64_t{1} << 14) && estimate <= kMaxDerivedTensors) return 0;
  Findings findings;
  std::vector<DeployTensor> tensors;
  const bool ok = tensors_from_config(doc.root(), scheme, findings, tensors);
  if (!ok) fuzz::fuzz_check(findings.has_errors(), "no tensors and no error finding");
  fuzz::fuzz_check(tensors.size() <= kMaxDerivedTensors, "more tensors than the documented bound");
  const ArchitectureRules* arch = architecture_for(json_string(doc.root(), "model_type").value_or(""));
  if (!ok || !arch) return 0;
  const HeadGeometry heads{64, 8, 128};
  for (const auto& t : tensors) {
    const ModuleRule* rule = classify_module(*arch, module_of(t.name));
    if (!rule || t.shape.size() < 2) continue;
    for (Deployment d : {Deployment{1, 1, 1}, Deployment{8, 1, 1}, Deployment{8, 8, 1}}) {
      const TensorPartition p = partition_tensor(rule->split, t.shape, d, heads);
      fuzz::fuzz_check(p.rank_rows <= p.rows || !p.problem.empty() || p.rows == 0, "a rank holds more rows than the tensor");
    }
  }
  return 0;
}
