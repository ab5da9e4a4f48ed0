// The report of `ckpt-gpu verify`: JSON (schemas/verify-report.schema.json) and the human
// summary (a line per failed check, counts per check kind, a verdict line).
#pragma once

#include <string>

#include "core/outcome.h"
#include "verify/gpu_verify.h"

namespace ckpt {

inline constexpr const char* kVerifySchemaId = "ckptkit/verify-report/v1";

// ok only when no error finding and no failed check (VERIFY_NOTHING is an error finding).
Outcome outcome_of(const VerifyReport& r);
// With `stages`, summary.stages holds r.stages (ckpt-gpu verify --stats).
std::string verify_report_json(const VerifyReport& r, bool stages = false);
// The --stats line's stage part: "read 0.123 s, ...".
std::string verify_stages_text(const VerifyStages& s);
std::string verify_report_text(const VerifyReport& r, size_t max_findings);

}  // namespace ckpt
