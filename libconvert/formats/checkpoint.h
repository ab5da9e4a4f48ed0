// A Hugging Face safetensors checkpoint: a directory with shards, the index
// (model.safetensors.index.json), config.json and tokenizer/generation files;
// or a single .safetensors file. Opening reads headers only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/findings.h"
#include "formats/json.h"
#include "formats/model_view.h"
#include "formats/safetensors.h"
#include "io/mapped_file.h"

namespace ckpt {

inline constexpr const char* kIndexName = "model.safetensors.index.json";
inline constexpr uint64_t kMaxIndexBytes = 512ull << 20;   // 0731's index is 5.6 MB
inline constexpr uint64_t kMaxSideJsonBytes = 256ull << 20; // config, tokenizer, ...

// Side files that may describe the checkpoint's quantization instead of (or beside)
// config.json's quantization_config: NVIDIA ModelOpt's hf_quant_config.json and Mistral's
// native params.json. Opened like config.json (the listing's rules, kMaxSideJsonBytes, the
// JSON depth limit) and kept parsed for model/quant_scheme.h.
inline constexpr const char* kQuantSideConfigs[] = {"hf_quant_config.json", "params.json"};

struct Shard {
  std::string name;  // file name inside the checkpoint directory (display name)
  std::string path;  // path to open
  MappedFile file;
  std::optional<StHeader> header;  // nullopt when the file could not be opened or parsed
};

struct CheckpointIndex {
  bool present = false;
  bool parsed = false;
  bool metadata_present = false;
  std::optional<uint64_t> total_size;
  std::vector<std::pair<std::string, std::string>> weight_map;  // tensor -> shard, file order
};

struct Checkpoint {
  std::string root;           // the path the user gave
  bool is_directory = false;
  std::vector<Shard> shards;  // sorted by name
  CheckpointIndex index;
  std::unique_ptr<JsonDoc> config;      // config.json, when present and valid
  std::vector<std::string> side_files;  // other files found (tokenizer, generation config, ...)
  // The kQuantSideConfigs files the directory lists, in that order: the parsed document, or
  // nullptr when it could not be read or parsed (reported as a finding).
  std::vector<std::pair<std::string, std::unique_ptr<JsonDoc>>> side_configs;
  // The bytes config.json and each kQuantSideConfigs file were parsed from, by name (only
  // those parsed): convert rewrites these very bytes, never a second read of the file.
  std::vector<std::pair<std::string, std::string>> config_texts;
};

// Opens a checkpoint directory or a single .safetensors file and reads every
// shard header (in parallel). Findings cover the directory, index and headers.
// Returns false only when nothing could be read at all (bad path).
bool open_checkpoint(const std::string& path, const StReadOptions& options, Checkpoint& out, Findings& findings);

// Parses the text of model.safetensors.index.json (at most kMaxIndexBytes), both the
// {"total_size": T} and the empty ("metadata": {}) forms, detecting duplicate weight_map
// keys in order. open_checkpoint reads the file and calls this; so does the fuzz target.
void parse_index_text(std::string_view text, CheckpointIndex& index, Findings& findings);

// The format-neutral tensor list of an opened checkpoint.
ModelView checkpoint_view(const Checkpoint& ckpt);

// True for a plain file name that stays inside its directory (no '/', '\', "..", control chars).
bool is_plain_file_name(const std::string& name);

}  // namespace ckpt
