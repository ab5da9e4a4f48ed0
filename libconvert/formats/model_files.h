// The files of a model directory, for the checks that must cover all of them (hash
// manifests, Hub hash lists), not only the shards: config.json, the index, tokenizer and
// generation files, anything else a checkpoint carries.
//
// Rules (one place for them):
//   - entries whose name starts with '.' are no part of the model and are skipped with
//     their subtree: .ckptkit/ (ckptkit's own records), .git/, .cache/ (Hub download
//     metadata with timestamps);
//   - a symlink is followed when its target stays inside the directory, or is a Hub
//     cache blob (snapshots/<rev>/F -> ../../blobs/<etag>); any other link is an error
//     and is never opened; a link to a directory is not followed (a warning names it);
//   - anything that is not a regular file (FIFO, socket, device) is an error and is never
//     opened (so nothing blocks on it);
//   - names are '/'-separated paths relative to the directory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/findings.h"

namespace ckpt {

inline constexpr uint64_t kMaxModelFiles = uint64_t{1} << 20;
inline constexpr int kMaxModelDirDepth = 16;

struct ModelFile {
  std::string name;  // relative, '/'-separated
  std::string path;  // path to open
  uint64_t size = 0;
};

// Every regular file under `dir` by the rules above, sorted by name (bytewise). Findings:
// LINK_ESCAPE, IO_NOT_REGULAR, IO_OPEN (a dangling link), IO_READDIR, MODEL_DIR_LIMIT
// (errors), LINK_DIR_NOT_FOLLOWED (warning). Returns false when any error was found.
bool list_model_files(const std::string& dir, std::vector<ModelFile>& out, Findings& findings);

// True when `file` (inside `dir`) is a symlink, or lies below one, whose target leaves
// `dir` and is not a Hub cache blob of it.
bool link_escapes_directory(const std::filesystem::path& dir, const std::filesystem::path& file);

// True for a relative path made of plain file names ("tokenizer.json", "original/a.pth"):
// no leading '/', no empty, "." or ".." component, no '\' or control character, at most
// 4096 bytes. Such a name cannot point outside its directory by itself (links can:
// link_escapes_directory).
bool is_plain_relative_path(const std::string& name);

}  // namespace ckpt
