// Renders a ValidationReport: JSON (schemas/validation-report.schema.json) and
// the human summary that ends with a one-line verdict.
#pragma once

#include <ostream>
#include <string>

#include "validate/validate.h"

namespace ckpt {

inline constexpr const char* kValidationSchemaId = "ckptkit/validation-report/v1";

std::string validation_report_json(const ValidationReport& report);
// max_findings caps the printed list (0 = all); the JSON report always has every finding.
void print_validation_human(const ValidationReport& report, std::ostream& out, size_t max_findings);
std::string verdict_line(const ValidationReport& report);

// 1234567 -> "1,234,567"
std::string with_commas(uint64_t v);

}  // namespace ckpt
