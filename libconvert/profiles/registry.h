// Model profiles: which one applies to a model (each profile's "detect" rule in
// schemas/profiles/*.json) and running its checks.
#pragma once

#include <string>
#include <vector>

#include "core/findings.h"
#include "formats/loader.h"

namespace ckpt {

std::vector<std::string> profile_names();  // "generic" plus every embedded profile
bool is_known_profile(const std::string& name);
// The profile whose detect rule matches the model's config.json or GGUF metadata; "generic" otherwise.
std::string detect_profile(const LoadedModel& model);
// Runs the profile's checks on a model whose headers were read.
void run_profile(const std::string& name, const LoadedModel& model, Findings& findings);

}  // namespace ckpt
