// `ckpt diff A B`: tensor by tensor, what changed between two models (safetensors
// checkpoints or files, GGUF files, expert packs): tensors only in A or only in B, type
// or shape changes, and for tensors whose bytes differ the first differing byte and
// element, both decoded values there (hashman/decode.h: element-wise by the tensor's own
// type), the number of differing elements, and the max absolute and relative difference.
//
// Definitions. An element differs when its stored bytes differ (element types) or, for
// ggml block types, when its decoded f32 bits differ. For differing elements with both
// values finite: abs = |a - b| (in double), rel = abs / max(|a|, |b|) (so rel <= 2; -0 vs
// +0 gives 0). A differing element where either value is NaN or infinite counts in
// nonfinite_mismatches and not in the maxima. Types without an f32 form are compared per
// unit of bytes and report no values. Both tensors stream through bounded buffers.
//
// Two GGUF files (or the dense.gguf of two expert packs) are also compared key-value by
// key-value: a key only in A or only in B, or whose type or value bytes differ, is a
// MetadataDiff naming the key, and makes the models DIFFERENT.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/findings.h"
#include "core/outcome.h"

namespace ckpt {

struct TensorDiff {
  std::string name;
  std::string kind;  // "only_in_a", "only_in_b", "type", "shape", "values"
  std::string type_a, type_b;
  std::vector<uint64_t> shape_a, shape_b;
  // kind == values:
  uint64_t first_byte = 0;     // offset inside the tensor's payload
  uint64_t first_element = 0;  // row-major element index (ggml: in ne order, ne[0] fastest)
  std::optional<float> value_a, value_b;  // decoded at first_element (when the type has an f32 form)
  uint64_t elements = 0, differing_elements = 0, nonfinite_mismatches = 0;
  double max_abs_diff = 0, max_rel_diff = 0;
  std::string file_a, file_b;  // files holding the tensor
  std::string note;            // e.g. why there are no values
};

struct MetadataDiff {
  std::string key;
  std::string kind;              // "only_in_a", "only_in_b", "value"
  std::string value_a, value_b;  // short display (GgufKV::display), "" on the side without the key
};

struct DiffOptions {
  uint64_t max_reported = 50;  // --max N: tensors listed in the report (counts cover all)
};

enum class DiffStatus { same, different, io_error, bad_input };
// What a status means for the exit code (core/outcome.h): a difference and a bad input are 1.
inline Outcome outcome_of(DiffStatus s) {
  static constexpr Outcome kOutcome[] = {Outcome::ok, Outcome::findings, Outcome::io, Outcome::findings};
  return kOutcome[static_cast<int>(s)];
}

struct DiffReport {
  DiffStatus status = DiffStatus::same;
  std::string a, b;
  uint64_t tensors_a = 0, tensors_b = 0, compared = 0, identical = 0;
  uint64_t differing = 0, only_in_a = 0, only_in_b = 0, changed_type_or_shape = 0;
  std::vector<TensorDiff> diffs;  // sorted by name, at most max_reported
  uint64_t metadata_compared = 0;  // GGUF keys present on both sides
  uint64_t metadata_differing = 0;  // keys only on one side or with another value
  std::vector<MetadataDiff> metadata;  // sorted by key, at most max_reported
  bool truncated = false;
  Findings findings;
};

DiffReport diff_models(const std::string& a, const std::string& b, const DiffOptions& options);

std::string diff_report_text(const DiffReport& r);
std::string diff_report_json(const DiffReport& r);  // schemas/diff-report.schema.json

}  // namespace ckpt
