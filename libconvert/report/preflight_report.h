// The report of `ckpt preflight`: JSON (schemas/preflight-report.schema.json) and the human
// text. The checks themselves are deploy/preflight.h.
#pragma once

#include <ostream>
#include <string>

#include "deploy/preflight.h"

namespace ckpt {

inline constexpr const char* kPreflightSchemaId = "ckptkit/preflight-report/v1";

std::string preflight_json(const PreflightReport& r);
// The module table, the kernel matrix, memory and every finding (-q prints only the verdict).
void print_preflight_human(const PreflightReport& r, std::ostream& out);
// "preflight: LOADS at tp 8 ep 8 (vllm, sglang)" / "preflight: BLOCKED (3 blocking findings)".
std::string preflight_verdict_line(const PreflightReport& r);

}  // namespace ckpt
