// Validation of an expert pack written by `ckpt repack-experts` (expert_pack.h):
// the manifest against schemas/expert-pack-manifest.schema.json (every number bounded,
// every name a plain file name), the geometry of experts.bin (alignment, blob and part
// ranges, padding), the xxh3 of every blob part (streamed: the manifest exists so a
// reader can trust each blob), dense.gguf through the GGUF reader, and with the source
// file as reference: its identity (the manifest's SHA-256 tree on all cores, or for a
// manifest without one its SHA-256 in one stream) and every part byte-equal to its source
// slice, in the same pass that hashes the part (with deep also every dense tensor and KV).
// Findings use PACK_* codes (IO_* for I/O).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/findings.h"

namespace ckpt {

// A directory holding manifest.json next to experts.bin or dense.gguf.
bool is_expert_pack(const std::string& dir);

// reference_gguf: the file the pack was made from, or "" for none.
void validate_expert_pack(const std::string& dir, const std::string& reference_gguf, bool deep, Findings& f);

// The checks that need only the manifest's text (validate_expert_pack runs the same code on
// manifest.json): parsing (at most 1 GiB), every typed member, file names, alignment, and the
// blob and part geometry against an experts file of `experts_file_size` bytes (nullopt: the
// size the manifest gives). Used by the fuzz target tests/fuzz/fuzz_expert_pack_manifest.cpp.
void check_pack_manifest_text(std::string_view text, const std::string& display,
                              std::optional<uint64_t> experts_file_size, Findings& f);

}  // namespace ckpt
