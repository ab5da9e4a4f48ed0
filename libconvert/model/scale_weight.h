// The FP8 weight a block scale belongs to, by name alone: for the checks that start from a
// scale of the output (validate --reference, verify) and need its weight's shape and codes.
// Pairing proper (model/pairing.h) goes the other way, weight to scale, by the profile's rules.
#pragma once

#include <string>

#include "formats/model_view.h"

namespace ckpt {

// P.weight_scale_inv, P.weight_scale or P.scale -> P.weight, else the bare P (DeepSeek-V4's
// FP8 tensors without ".weight"); nullptr when `scale` has none of those suffixes or `view`
// holds neither tensor.
const ModelTensor* fp8_weight_of_scale(const ModelView& view, const std::string& scale);

}  // namespace ckpt
