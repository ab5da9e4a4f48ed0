// `ckpt preflight`: will this checkpoint load, and load right, at this TP / EP / PP on this
// GPU with this engine? Answered from the headers, or from config.json alone before any
// shard is downloaded (config_tensors.h). The checks, each a finding that ends with its fix:
//   PREFLIGHT_BLOCK_DIVISIBILITY  a block-FP8 weight's per-rank slice is not a multiple of
//                                 the block (block_n for split rows, block_k for split
//                                 columns) and an engine refuses it at start-up;
//   PREFLIGHT_SCALE_ROW_SHARED    the same, where an engine loads it anyway: a scale row is
//                                 shared across a part or rank boundary (silently wrong);
//   PREFLIGHT_TP_SPLIT            rows, columns or heads that do not divide by the degree;
//   PREFLIGHT_EP_SPLIT            routed experts that EP does not divide, where an engine
//                                 refuses it (PREFLIGHT_EP_UNEVEN, info, where all load it);
//   PREFLIGHT_EXCLUDED_BELOW_BLOCK (warning) a module left unquantized by name whose rows per
//                                 rank would not divide the block (sglang#19045);
//   PREFLIGHT_KERNEL              a quantized format without a kernel on --gpu for an engine;
//   PREFLIGHT_MEMORY              the largest rank's weights exceed --gpu-memory;
//   PREFLIGHT_CONFIG_MISMATCH     the headers disagree with the model config.json describes.
// The partition model is deploy/partition_model.h; the engines' rules are data
// (schemas/deploy/engines.json).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/findings.h"
#include "core/outcome.h"
#include "deploy/partition_model.h"

namespace ckpt {

struct PreflightOptions {
  Deployment deployment;
  std::string gpu;                   // "sm80", ... ("" = no kernel check)
  uint64_t gpu_memory = 0;           // bytes (0 = no memory check)
  std::vector<std::string> engines;  // empty: vllm and sglang
  std::string kv_cache_dtype = "auto";  // auto (the model's BF16), bf16, fp16, fp8
  uint64_t max_model_len = 0;        // tokens of one sequence (0: not asked)
};

// What is left for the KV cache on the largest rank, from config.json: tokens of cache per
// rank (each full-attention layer: KV heads a rank (at least 1) x head_dim x 2 (K, V) x the
// cache dtype's bytes; DeepSeek's MLA caches kv_lora_rank + qk_rope_head_dim a layer,
// unsplit by TP), and the fixed state a sequence of a hybrid's linear-attention layers holds.
struct PreflightKvCache {
  bool modelled = false;
  uint64_t attention_layers = 0;   // of the largest pipeline stage
  uint64_t bytes_per_token = 0;    // a rank's cache bytes for one token
  uint64_t state_layers = 0;       // linear-attention layers (hybrids)
  uint64_t state_bytes_per_sequence = 0;
  uint64_t dtype_bytes = 2;
  uint64_t tokens = 0;             // with --gpu-memory: what fits beside the weights
  uint64_t sequences = 0;          // with --max-model-len too
  std::string how;                 // the arithmetic, in words
};

// One module class of the model under the deployment (every layer's tensors of it).
struct PreflightModule {
  std::string cls;      // the engine's module class, from the partition rules
  std::string names;    // the checkpoint's module names, e.g. "gate_proj, up_proj"
  Split split = Split::none;
  std::string merged;   // "qkv", "gate_up", ...
  std::string format;   // "fp8_block", "fp8_tensor", "mxfp4", "int8_shift", "unquantized"
  std::vector<int64_t> layers;
  uint64_t tensors = 0;
  uint64_t rows = 0, cols = 0, rank_rows = 0, rank_cols = 0;  // one expert's / tensor's, per rank
  uint32_t degree = 1;
  uint64_t replicas = 1;
  uint64_t experts = 0, experts_per_rank = 0;  // routed experts of a layer, and a rank's share (0: not experts)
  bool divides = true;  // every block-quantized split dimension is a multiple of its block
};

struct PreflightKernel {
  std::string format, engine, arch, support, via, source;
};

// One engine's answer: where engines differ (vLLM loads a merged part silently wrong where
// SGLang refuses it; a kernel one engine lacks), each is reported.
struct PreflightEngine {
  std::string engine;
  bool loads = true;
  std::string why;  // the finding codes that stop it ("" when it loads)
};

// One block-FP8 weight as the deployment cuts it: what ckpt relayout plans from
// (deploy/relayout_plan.h), filled by the same analysis as the findings.
struct PreflightBlockWeight {
  std::string tensor, scale, module;  // names in the checkpoint (scale "" when none was found)
  std::string cls;                    // the engine's module class
  std::string unit;                   // what an engine quantizes alike: the class, or "FusedMoE (routed experts)": w13 and w2 alike
  std::vector<uint64_t> shape;
  uint64_t weight_bytes = 0, scale_bytes = 0;
  int64_t layer = -1;
  // Per-rank (or per-part) sizes the block must divide for an engine asked about to load the
  // weight right: block_n must divide every `rows`, block_k every `cols`. Empty when it loads.
  std::vector<uint64_t> rows, cols;
  bool fails() const { return !rows.empty() || !cols.empty(); }
};

struct PreflightDegree {
  uint32_t tp = 1, ep = 1;
  uint64_t rank_bytes = 0;
};

struct PreflightReport {
  std::string path;
  bool config_only = false;
  std::string family, model_type, quant_profile;
  uint64_t block_n = 0, block_k = 0;  // 0 when no block-FP8
  PreflightOptions options;
  std::vector<std::string> engines;   // those considered
  std::vector<PreflightModule> modules;
  std::vector<PreflightKernel> kernels;
  uint64_t tensors = 0, total_bytes = 0, rank_bytes = 0;
  std::vector<PreflightDegree> working;  // TP / EP degrees whose block rules pass
  std::vector<PreflightEngine> per_engine;  // each considered engine's verdict
  std::vector<PreflightBlockWeight> block_weights;  // every block-FP8 linear weight
  PreflightKvCache kv;
  Findings findings;
  bool loads() const { return !findings.has_errors(); }
};

// Runs every check. A usage problem (unknown GPU or engine, EP not dividing TP) is a finding
// PREFLIGHT_USAGE; preflight_outcome maps it to Outcome::usage.
PreflightReport preflight(const std::string& path, const PreflightOptions& options);
Outcome preflight_outcome(const PreflightReport& r);

// "0-93", "0, 3-5": a sorted list of layer numbers, compressed into ranges.
std::string layer_ranges(std::vector<int64_t> layers);

}  // namespace ckpt
