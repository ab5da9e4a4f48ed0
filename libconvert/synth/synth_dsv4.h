// Synthetic DeepSeek-V4-Flash-0731 checkpoints, generated from the same profile
// catalogue the validator checks against (profiles/deepseek_v4.h), so the two cannot
// drift apart.
//
// sparse: the real 0731 structure (deepseek-v4.md §2-§6): config.json with the 0731
//   values, 48 shards in the official layout, the index, tokenizer/generation stand-ins.
//   Shards are full-size sparse files whose payload is zeros: 166,878,536,440 bytes of
//   tensors, no disk blocks. For header-level tests of the real layout.
// tiny: the same names, dtypes and block types at a small size (hidden 256, 8 experts,
//   5 layers: hash/ratio 0, ratio 4 with hash, ratio 128, ratio 4, ratio 128; 3 DSpark
//   stages), filled with valid deterministic random data (finite floats, E4M3 without
//   NaN codes, E8M0 exponents 115..130, tid2eid in [0, E)). A few MB.
#pragma once

#include <cstdint>
#include <string>

#include "core/outcome.h"

namespace ckpt {

enum class SynthSize { sparse, tiny };

// config.json text used for each size.
std::string dsv4_0731_config_json();
std::string dsv4_tiny_config_json();

// Why `out_dir` may not receive a synthetic checkpoint: it exists and is not an empty
// directory (OUT/.ckptkit, the lock, aside; unless `overwrite`: then files of the same names
// are replaced). "" when it may.
std::string synth_target_problem(const std::string& out_dir, bool overwrite);

// Writes the checkpoint into `out_dir` (created if missing; refused when it is not empty,
// unless `overwrite`). The directory's lock (io/output_lock.h) is held from before the
// check that decides until the last file is renamed, so two runs never mix their files.
// Returns false with `error` set on any failure; `outcome` (when given) then says which:
// usage (refused: not empty, or another run holds the lock) or io.
bool synth_deepseek_v4_flash_0731(const std::string& out_dir, SynthSize size, uint64_t seed, std::string& error,
                                  bool overwrite = false, Outcome* outcome = nullptr);

}  // namespace ckpt
