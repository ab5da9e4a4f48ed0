// The engines' load-time rules as data (schemas/deploy/engines.json): what each engine does
// with a block-quantized weight whose per-rank slice is not a multiple of the block, and
// which kernels each GPU architecture has for each quantized format.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "deploy/citation.h"

namespace ckpt {

enum class BlockBehaviour { ok, refuse, silent };

struct BlockRule {
  std::string id;         // "moe_w13_block_n"
  std::string applies;    // "expert_column", "expert_row", "column", "merged", "row"
  std::string dimension;  // "block_n" or "block_k"
  std::string message;    // the engine's message, {per_rank} and {block} to fill in
  std::map<std::string, BlockBehaviour> behaviour;  // engine -> what it does
  std::map<std::string, std::string> sources;       // engine -> citation text (Citation::text)
  std::map<std::string, Citation> citations;        // engine -> the engine code it mirrors
};

enum class KernelSupport { native, fallback, refused, unknown };

struct KernelEntry {
  KernelSupport support = KernelSupport::unknown;
  std::string via;  // the fallback's kernel
};

struct FormatKernels {
  std::string format, title, instead;
  std::map<std::string, std::map<std::string, KernelEntry>> engines;  // engine -> arch -> entry
  std::map<std::string, std::string> sources;                          // engine -> citation text
  std::map<std::string, Citation> citations;                           // engine -> the engine code
};

// How an engine pads each rank's MXFP4 expert intermediate size, per kernel backend.
struct MxPadding {
  std::vector<std::pair<std::string, uint64_t>> multiples;  // backend -> multiple, in the file's order
  Citation source;
};

// The block-FP8 block sizes one engine's kernels take (ckpt relayout's --min-block default
// and the kernels a smaller block falls back to).
struct BlockSizes {
  uint64_t min_n = 1, min_k = 1;    // the smallest block its generic kernels accept
  uint64_t full_n = 0, full_k = 0;  // the block its fastest kernels require (0: one kernel for every block)
  std::string fallback;
  Citation citation;         // the engine line that sets its Triton tile from the block (min_n, min_k)
  std::vector<Citation> also;  // the engine code choosing its kernels (full_n, full_k, fallback)
  std::string source;        // citation.text(), for messages
  // The engine needs block_n == block_k (vLLM: activation groups of block_n, GEMM groups of block_k).
  bool square = false;
  std::string square_why;
  Citation square_citation;
};

struct EngineRules {
  std::vector<std::string> engines;        // "vllm", "sglang", "transformers"
  std::vector<BlockRule> block_rules;
  std::vector<std::string> architectures;  // "sm80", ...
  std::vector<FormatKernels> formats;
  std::map<std::string, BlockSizes> block_sizes;  // engine -> its kernels' blocks
  uint64_t mx_group = 32;                     // MXFP4 elements sharing one E8M0 scale
  std::map<std::string, MxPadding> mx_padding;  // engine -> its padding

  const BlockRule* block_rule(const std::string& applies) const;
  const FormatKernels* kernels(const std::string& format) const;
  bool knows_engine(const std::string& e) const;
  bool knows_architecture(const std::string& a) const;
};

// The embedded rules, parsed once.
const EngineRules& engine_rules();

const char* kernel_support_name(KernelSupport s);

}  // namespace ckpt
