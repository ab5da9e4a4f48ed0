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
//   GGUF file: every tensor's ggml dequantization, device against CPU (of the same bytes,
//     or with --reference B.gguf of B's tensor of the same name, type and shape);
//   expert pack (repack-experts): every blob part dequantized on the device equals the CPU
//     dequantization of its source slice (the reference GGUF, else the part itself), and
//     every dense.gguf tensor that of the reference's tensor of the same name, type and
//     shape (one without is VERIFY_UNMATCHED; else, without a reference, its own bytes).
//
// Never vacuous: a run with no check at all (a BF16 checkpoint without --reference, a
// GGUF or pack without tensors, or whose tensors all have zero elements) is a
// VERIFY_NOTHING error, not a PASS; FP8 weights of a checkpoint alone that cannot be
// paired with their scales are an error, not skipped. A check that compared no element
// is not counted; every check names what it was compared with (verified_against), and
// every failed check has a finding.
//
// Pipeline and memory: the work is cut into jobs (a tensor, an expert of a fused matrix, a
// GGUF tensor or pack part), run by a oneTBB pipeline on all cores: each job preads its
// input in large steps, runs the CPU reference and the device decode, and compares; the
// results are merged in job order, so checks and findings (the first differing element of
// each tensor, both values) are the same as one job at a time. The GPU backend is
// concurrent() (lanes: a stream, pinned staging and device buffers each), so the jobs'
// transfers and kernels overlap; a backend that is not takes one call at a time while
// other jobs read and compute their references. Each job holds a few step buffers (at most
// 4M elements per step, ~30-60 MiB; a GGUF or pack digest step only its input, at most 16M
// elements in the backend's chunk) or one expert's matrices (an INT8-shift expert: about 8
// bytes per weight with the GEMM check, 3 without), both reused from job to job through a
// pool whose sets hold one kind at a time (no allocation or page fault per job). Jobs in flight = clamp((memory_budget - backend.host_memory()) / largest job,
// 1, 2 x cores), so the payload buffers and the backend's pinned staging stay within
// memory_budget unless one job alone is larger, which then runs alone. An expert pack's
// validation runs on its own thread beside the jobs (verify_pack).
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
  // Host memory for the buffers of the jobs in flight (--memory-budget): as many jobs run
  // at once as fit (at least one, at most twice the cores; see verify_path).
  uint64_t memory_budget = uint64_t{1} << 30;
  // GGUF and pack steps: every f32 brought back and compared (--full-compare) instead of the
  // device's digest against the CPU's (a differing digest is still compared in full).
  bool full_compare = false;
  // INT8-shift experts without the GEMM check: the CPU's and the device's decodes are made
  // and compared in column pieces of about this many bytes each (whole shift bytes: at least
  // 128 columns), so that the comparison reads them from cache. Any size gives the same
  // findings; tests make it small to cut an expert into several pieces.
  uint64_t decode_piece_bytes = uint64_t{256} << 10;
  std::function<void(uint64_t done, uint64_t total)> progress;  // work items; may be empty
};

struct VerifyCheck {
  std::string check;   // fp8_dequant, copy, int8_shift_bytes, int8_shift_decode, activation_quant,
                       // int8_gemm, mxfp4_dequant, ggml_dequant
  std::string tensor;  // the output tensor (or pack part)
  std::string part;    // "expert 3", "blob layer 0 expert 5", "" for a whole tensor
  // What the device's result (or OUT's bytes) was compared with: "CPU decode of FILE tensor
  // T", "bytes of reference FILE tensor T", ...; "; by keyed digest" where a step passed on
  // equal digests. A check that compared no element is not counted (run_jobs).
  std::string verified_against;
  uint64_t elements = 0;
  bool ok = true;
  std::optional<double> rel_l2;  // int8_gemm: against the original weights
};

// Where a verification's time went (--stats; measured like seconds, different every run).
// Each figure is the sum over jobs of the wall time a job spent in that stage, so with
// several jobs in flight the sums exceed the run's seconds; a stage that runs on all cores
// inside one job (the CPU reference GEMM) counts its wall time once. `device_*` are the
// backend's calls (wall time of the calling thread: upload, kernel, download, and any
// wait for a busy lane or for the serializing lock), summed over calls.
struct VerifyStages {
  double jobs = 0;           // every job, start to end
  double read = 0;           // preads of IN and OUT (every job)
  double buffers = 0;        // INT8-shift experts: sizing the expert's buffers (pooled)
  double cpu_reference = 0;  // INT8-shift experts: the remap of IN and the CPU decode; GGUF/pack: the CPU digests
  double compare = 0;        // INT8-shift experts: slabs, decode, GEMM results, original weights
  double gemm_cpu = 0;       // activations, CPU quantization, CPU INT8 GEMM, double product, rel_l2
  double device = 0;         // backend calls other than the GEMM's two (the sum of the four below)
  double device_fp8 = 0, device_mxfp4 = 0, device_int8_decode = 0, device_ggml = 0;
  double gemm_device = 0;    // backend quantize_activations + int8_gemm
  double ahead = 0;          // GGUF/pack: wall time of the CPU digests computed while the device opened
  VerifyStages& operator+=(const VerifyStages& o);
};

struct VerifyReport {
  std::string path, reference, backend;
  std::string kind;  // converted, checkpoint, gguf, expert-pack
  std::vector<VerifyCheck> checks;
  Findings findings;
  uint64_t input_bytes_decoded = 0;
  double max_rel_l2 = 0;
  double seconds = 0;
  uint64_t peak_rss_bytes = 0;  // the process's, when the report was made (measured, like seconds)
  uint64_t jobs = 0;            // units of work (tensors, experts, parts)
  uint64_t jobs_in_flight = 0;  // the most that ran at once
  VerifyStages stages;
  uint64_t failed() const;
};

VerifyReport verify_path(const std::string& path, DecodeBackend& backend, const VerifyOptions& options);

}  // namespace ckpt
