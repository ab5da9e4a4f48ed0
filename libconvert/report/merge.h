// `ckpt validate --merge part-*.json`: N partial deep-validation reports (one per
// `--partition I/N`) merged into the report a single process would have written.
// "Equal" is exact: the merged JSON is byte-identical to the single-process JSON once
// summary.seconds (wall time; the merge keeps the slowest partition's) is set aside;
// same findings in the same order, same totals, verdict and exit code.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/outcome.h"
#include "validate/validate.h"

namespace ckpt {

// SHA-256 of what every partition must agree on: format, profile, options, the file
// inventory (name, size) and the tensor inventory (file, name, type, shape, offset,
// nbytes). Written into each partial report and recomputed by the merge.
std::string inventory_sha256(const ValidationReport& report);

// Reads a --json validation report back (the partition block included).
bool parse_validation_report(std::string_view json, ValidationReport& report, std::string& error);

enum class MergeStatus { ok, usage_error, io_error };
// What a status means for the exit code (core/outcome.h).
inline Outcome outcome_of(MergeStatus s) {
  static constexpr Outcome kOutcome[] = {Outcome::ok, Outcome::usage, Outcome::io};
  return kOutcome[static_cast<int>(s)];
}

struct MergeResult {
  MergeStatus status = MergeStatus::ok;
  std::string error;  // names the part file and what is inconsistent
  ValidationReport report;
};

// Rejects: an unreadable part (io_error), a report without a partition block, parts
// with different counts, a missing or duplicated index, a different inventory (another
// checkpoint or other options), file lists that are not the partition's assignment.
MergeResult merge_validation_reports(const std::vector<std::string>& part_paths);

}  // namespace ckpt
