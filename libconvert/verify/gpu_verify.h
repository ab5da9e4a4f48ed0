// `ckpt-gpu verify`: decodes a checkpoint, a converted checkpoint or an expert pack with a
// DecodeBackend (the GPU kernels) and proves every result against libconvert's CPU
// reference, bit for bit, so a layout or rounding slip is caught before launch.
//
//   converted checkpoint + reference IN: every FP8 tensor of IN dequantized on the device
//     equals OUT's BF16 bytes; copied tensors (kept experts) equal IN's bytes; every
//     INT8-shift expert equals the CPU remap of IN, decodes on the device exactly as on the
//     CPU, and its device INT8 GEMM on random activations equals the CPU reference exactly
//     (int32 accumulators and BF16 outputs) and stays within max_rel_l2 of the product with
//     the original MXFP4 weights;
//   checkpoint alone: FP8 pairs and INT8-shift experts, device against CPU;
//   GGUF file: every tensor's ggml dequantization, device against CPU;
//   expert pack (repack-experts): every blob part dequantized on the device equals the CPU
//     dequantization of its source slice (the reference GGUF, else the part itself).
//
// Never vacuous: a run with no check at all (a BF16 checkpoint without --reference, a
// GGUF or pack without tensors) is a VERIFY_NOTHING error, not a PASS; FP8 weights of a
// checkpoint alone that cannot be paired with their scales are an error, not skipped. A
// zero-element tensor is a check that passes trivially (0 elements).
//
// Memory: tensors stream through in chunks of at most backend.max_chunk_bytes() input; an
// expert's matrices are held one expert at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/findings.h"
#include "verify/backend.h"

namespace ckpt {

struct VerifyOptions {
  std::string reference;      // IN of a conversion, or the source GGUF of a pack; "" for none
  uint64_t tokens = 64;       // rows of random activations per INT8 GEMM check
  uint64_t gemm_experts = 4;  // experts per fused matrix that get the GEMM check; 0 = all
  uint64_t seed = 0x5eed;
  double max_rel_l2 = 0.04;   // mxfp4-int8-shift.md §7: upstream dense acceptance
  std::function<void(uint64_t done, uint64_t total)> progress;  // work items; may be empty
};

struct VerifyCheck {
  std::string check;   // fp8_dequant, copy, int8_shift_bytes, int8_shift_decode, activation_quant,
                       // int8_gemm, mxfp4_dequant, ggml_dequant
  std::string tensor;  // the output tensor (or pack part)
  std::string part;    // "expert 3", "blob layer 0 expert 5", "" for a whole tensor
  uint64_t elements = 0;
  bool ok = true;
  std::optional<double> rel_l2;  // int8_gemm: against the original weights
};

struct VerifyReport {
  std::string path, reference, backend;
  std::string kind;  // converted, checkpoint, gguf, expert-pack
  std::vector<VerifyCheck> checks;
  Findings findings;
  uint64_t input_bytes_decoded = 0;
  double max_rel_l2 = 0;
  double seconds = 0;
  uint64_t failed() const;
  int exit_code() const;  // 0 pass, 1 a mismatch or error finding (VERIFY_NOTHING too), 3 an I/O error
};

VerifyReport verify_path(const std::string& path, DecodeBackend& backend, const VerifyOptions& options);

}  // namespace ckpt
