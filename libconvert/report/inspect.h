// `ckpt inspect`: what a checkpoint or GGUF file holds, from headers only.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/findings.h"
#include "formats/loader.h"

namespace ckpt {

inline constexpr const char* kInspectSchemaId = "ckptkit/inspect/v1";

struct TypeStats {
  uint64_t tensors = 0, bytes = 0;
};

struct InspectSummary {
  std::string path, format, architecture;
  std::string quant_profile;  // schemas/quant profile detected from config.json or a side file ("" = none)
  std::string quant_config_file;  // where it was read (QuantScheme::config_file)
  uint64_t files = 0, tensors = 0, payload_bytes = 0;
  std::map<std::string, TypeStats> types;                    // dtype / ggml type -> stats
  std::vector<std::pair<std::string, std::string>> values;   // key config / GGUF KV values (JSON text)
  std::string structure_sha256;
  std::vector<std::string> side_files;
};

InspectSummary inspect_model(const LoadedModel& model);
std::string inspect_json(const InspectSummary& s, const Findings& findings);
void print_inspect_human(const InspectSummary& s, const Findings& findings, std::ostream& out);

}  // namespace ckpt
