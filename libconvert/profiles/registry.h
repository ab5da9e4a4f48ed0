// Model profiles: which one applies to a model (each profile's "detect" rule in
// schemas/profiles/*.json) and running its checks.
#pragma once

#include <string>
#include <vector>

#include "core/findings.h"
#include "formats/loader.h"
#include "model/pairing.h"

namespace ckpt {

std::vector<std::string> profile_names();  // "generic" plus every embedded profile
bool is_known_profile(const std::string& name);
// The profile whose detect rule matches the model's config.json or GGUF metadata; "generic" otherwise.
std::string detect_profile(const LoadedModel& model);
// FP8 pairing rules for a model: block size from config.json's
// quantization_config.weight_block_size (128 x 128 with an info finding when FP8 tensors
// exist and the config does not say), bare FP8 names paired under the DeepSeek-V4 profile.
PairingOptions pairing_options_for(const LoadedModel& model, const std::string& profile, Findings& findings);

// Runs the profile's checks on a model whose headers were read.
void run_profile(const std::string& name, const LoadedModel& model, Findings& findings);

}  // namespace ckpt
