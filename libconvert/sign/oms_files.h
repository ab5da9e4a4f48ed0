// The files of a model as OMS enumerates them (spec §6.1, §6.2) and their SHA-256 on all
// cores: the one walk `ckpt sign` and `ckpt verify-signature` share.
//
// A model is one file (its resource name is its basename) or a directory walked without
// following links. Names are '/'-separated paths from the model root, valid UTF-8.
// Excluded: the default entries .git, .gitignore, .gitattributes, .github at the top of
// the root, each ignore path (an exact relative path, with its subtree), and the bundle
// file itself. A symbolic link is refused unless the policy allows links; then a link to a
// regular file is hashed as its target (a target outside the root is a warning), a link
// to a directory is refused (not followed: no cycles, no escape). Anything that is not a
// regular file (FIFO, socket, device) is never opened. The walk is bounded in depth and
// in the number of entries.
#pragma once

#include <atomic>
#include <functional>
#include <cstdint>
#include <string>
#include <vector>

#include "core/findings.h"

namespace ckpt::oms {

inline constexpr size_t kMaxModelEntries = size_t{1} << 20;
inline constexpr int kMaxModelDepth = 64;

// The exclusions every OMS signer and verifier applies (spec §6.2).
const std::vector<std::string>& default_ignore_paths();

enum class EntryKind { regular, link_to_file, link, not_regular };

struct ModelEntry {
  std::string name;  // relative to the root; the basename for a one-file model
  std::string path;  // what to open (a followed link: its target)
  EntryKind kind = EntryKind::regular;
  bool ignored = false;  // under an ignore path (kept only when `listed` names it)
};

struct ModelScope {
  std::vector<std::string> ignore_paths;  // canonical relative paths (with the defaults)
  std::string bundle_path;                // excluded wherever it is ("" none)
  bool allow_symlinks = false;
  // Names a bundle lists (sorted): an ignored directory holding one of them is still walked,
  // so that a listed file is checked even where an ignore path covers it.
  std::vector<std::string> listed;
};

// Every entry of `model` (sorted by name) by the rules above. Findings (errors):
// OMS_SYMLINK (a link the policy refuses), OMS_NOT_REGULAR, OMS_NAME_NOT_UTF8,
// OMS_MODEL_LIMIT, IO_READDIR, IO_OPEN (a model that cannot be read); warning
// OMS_LINK_OUTSIDE. Links and non-regular entries are still returned (kind says which),
// ignored ones marked, so a verifier can tell a signed file from one it may skip.
bool list_model(const std::string& model, const ModelScope& scope, std::vector<ModelEntry>& out, Findings& findings);

// True when `model` is a single file (not a directory).
bool is_single_file_model(const std::string& model);

// `given` (an --ignore-paths value: relative to the model root, or an absolute path inside
// it) as a canonical relative path; false with `error` when it names no path inside the
// model or holds '..'.
bool ignore_path_in_model(const std::string& model, const std::string& given, std::string& rel, std::string& error);

// SHA-256 (lowercase hex) of each entry's file, files hashed in parallel on all cores
// (oneTBB), each by the project's read-ahead hashing (io/hash.h). A file that cannot be
// read: an IO_READ finding naming it, its digest "". `bytes` adds up what was hashed.
// `on_bytes` (may be empty) is called, from the hashing threads, with each count of bytes done.
using BytesDone = std::function<void(uint64_t)>;
void hash_entries(const std::vector<const ModelEntry*>& entries, std::vector<std::string>& digests, Findings& findings,
                  std::atomic<uint64_t>& bytes, const BytesDone& on_bytes = {});

// A byte range [start, end) of an entry's file (shard serialization, spec §6.3.2).
struct FileRange {
  const ModelEntry* entry = nullptr;
  uint64_t start = 0, end = 0;
};

// SHA-256 of each range, ranges hashed in parallel on all cores, each read with pread in
// blocks of at most 1 MiB. A range that cannot be read (the file shrank): an IO_READ
// finding naming the file and offset, its digest "".
void hash_ranges(const std::vector<FileRange>& ranges, std::vector<std::string>& digests, Findings& findings,
                 std::atomic<uint64_t>& bytes, const BytesDone& on_bytes = {});

}  // namespace ckpt::oms
