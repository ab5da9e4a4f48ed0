// Model profiles shipped inside the binary (schemas/profiles/*.json, embedded at build time).
#pragma once

#include <string>
#include <vector>

namespace ckpt {

struct EmbeddedProfile {
  std::string name;  // file stem, e.g. "deepseek-v4-flash"
  std::string json;  // the file's text
};

const std::vector<EmbeddedProfile>& embedded_profiles();

}  // namespace ckpt
