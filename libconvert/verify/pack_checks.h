// The verifier's expert-pack checks (verify/pack_checks.cpp): the pack validator, then
// every blob part and every tensor of dense.gguf decoded on the device against the CPU's
// dequantization of its source (the reference GGUF), or of its own bytes without one.
#pragma once

#include <string>

#include "verify/gpu_verify.h"

namespace ckpt {

void verify_pack(const std::string& path, DecodeBackend& be, const VerifyOptions& o, VerifyReport& r);

}  // namespace ckpt
