// The byte-reading pass of `validate --deep` / `--sha256`: every byte is read once,
// with pread, in steps of at most kScanStepBytes into a per-thread buffer that stays in
// the core's cache while it is hashed and checked. --deep alone spreads tensors over
// all cores (each tensor hashed in order); --sha256 walks each file in order (files in
// parallel) and checks the tensors it meets on the way, a reader thread reading ahead
// and the file's SHA-256 on a thread of its own (io/read_ahead.h). Payload memory is
// threads x kScanStepBytes for --deep, plus 4 x 4 MiB per file being hashed for --sha256,
// whatever the shard size.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/findings.h"
#include "formats/model_view.h"
#include "model/pairing.h"
#include "numerics/scale_rule.h"

namespace ckpt {

inline constexpr uint64_t kScanStepBytes = 1u << 20;

// A value range some tensors must keep, checked on the same pass (deepseek-v4.md §10.6).
struct ValueRule {
  enum Kind : uint8_t {
    none,
    scale,      // a scale of a quantized weight, read as `encoding`: numerics/scale_rule.h, the
                // rule convert applies before it multiplies (FP8 E8M0 exponents outside 3..246
                // are FP8_SCALE_RANGE, other refused values SCALE_INVALID)
    expert_id,  // an integer routing table (tid2eid): every value in [0, limit)
  };
  Kind kind = none;
  int64_t limit = 0;
  ScaleEncoding encoding = ScaleEncoding::fp8_e8m0;
};

// The scale rules of a safetensors checkpoint's quantized weights as pairing found them (FP8
// pairs, gpt-oss MXFP4 blocks) plus the E8M0 scale of every DeepSeek-V4 MXFP4 expert weight
// (I8 *.ffn.experts.N.wK.weight), set in `rules` (one per view tensor).
void add_scale_rules(const ModelView& view, const std::vector<Fp8Pair>& pairs,
                     const std::vector<Mxfp4BlocksPair>& blocks, std::vector<ValueRule>& rules);

struct TensorScanResult {
  bool scanned = false;
  uint64_t xxh3 = 0;
  uint64_t nan = 0, inf = 0;      // NaN/Inf values or NaN codes (E4M3 0x7F/0xFF, E8M0 0xFF)
  uint64_t bad_block_scales = 0;  // GGUF: NaN/Inf fp16 block scales
  uint64_t bad_e8m0 = 0;          // GGUF MXFP4 block exponent 0xFF
  std::optional<uint64_t> first_bad;  // absolute file offset
  uint64_t out_of_range = 0;          // values outside the tensor's ValueRule
  std::optional<uint64_t> first_out_of_range;  // element index in the tensor
  int64_t first_out_of_range_value = 0;
  int64_t range_limit = 0;                     // the rule's limit (expert_id)
  ScaleCheck scales;                           // a scale rule's tally
  ScaleEncoding scale_encoding = ScaleEncoding::fp8_e8m0;
  std::string io_error;               // set when reading the tensor failed
};

struct FileScanResult {
  uint64_t bytes_read = 0;
  std::string sha256;  // when requested
  std::string io_error;
};

struct ScanRequest {
  bool values = false;  // per-tensor xxh3 + NaN/Inf/code checks
  bool sha256 = false;  // whole-file SHA-256
  std::function<void(uint64_t bytes)> on_progress;  // called with bytes just consumed (any thread)
  std::vector<bool> only_files;  // non-empty: read only the files j with only_files[j] (--partition)
  std::vector<ValueRule> rules;  // per view tensor (empty: none); needs `values`
  bool wants(size_t file) const { return only_files.empty() || (file < only_files.size() && only_files[file]); }
};

// Scans every file of the view. results[i] belongs to view.tensors[i]; files[j] to view.files[j].
void scan_model(const ModelView& view, const ScanRequest& request, std::vector<TensorScanResult>& results,
                std::vector<FileScanResult>& files, Findings& findings);

// Turns scan counts into findings (DATA_NAN, DATA_INF, FP8_NAN_CODE, E8M0_RESERVED,
// FP8_SCALE_RANGE, SCALE_INVALID, EXPERT_ID_RANGE, ...).
void report_value_findings(const ModelView& view, const std::vector<TensorScanResult>& results, Findings& f);

// IO_READ findings for files or tensors whose bytes could not be read.
void report_io_findings(const ModelView& view, const std::vector<TensorScanResult>& results,
                        const std::vector<FileScanResult>& files, Findings& f);

// Bytes the scan will read (payload only, or whole files with sha256).
uint64_t scan_total_bytes(const ModelView& view, const ScanRequest& request);

}  // namespace ckpt
