// Renders a ConvertReport: JSON (schemas/convert-report.schema.json) and the human
// plan / summary.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "convert/convert.h"

namespace ckpt {

inline constexpr const char* kConvertSchemaId = "ckptkit/convert-report/v1";

std::string convert_report_json(const ConvertReport& r, const ConvertOptions& o);
// The plan summary alone (tensors, experts, partitions, disk needed), printed before writing.
void print_convert_plan(const ConvertReport& r, const ConvertOptions& o, std::ostream& out);
// Findings, then (unless plan_shown) the plan summary, then the result.
void print_convert_human(const ConvertReport& r, const ConvertOptions& o, std::ostream& out, bool plan_shown = false);
const char* convert_status_name(ConvertStatus s);
// Every planned shard's output file bytes (the weights partitions are balanced by).
std::vector<uint64_t> shard_file_bytes(const ConversionPlan& plan);

}  // namespace ckpt
