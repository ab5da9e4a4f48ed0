// ckpt relayout's report: the plan (every choice with its bytes, the notes), the rewrite's
// totals, the findings; JSON per schemas/relayout-report.schema.json.
#pragma once

#include <ostream>
#include <string>

#include "relayout/relayout.h"

namespace ckpt {

inline constexpr const char* kRelayoutSchemaId = "ckptkit/relayout-report/v1";

std::string relayout_json(const RelayoutReport& r, const RelayoutOptions& o);
// The plan in words (what --dry-run prints, and a run before it writes).
void print_relayout_plan(const RelayoutReport& r, std::ostream& out);
// The last line: the verdict.
void print_relayout_verdict(const RelayoutReport& r, const RelayoutOptions& o, std::ostream& out);

}  // namespace ckpt
