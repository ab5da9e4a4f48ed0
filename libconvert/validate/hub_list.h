// `validate --hub-sha256 LIST`: a list of SHA-256 digests (the Hub's LFS oids, or
// `sha256sum *` of the whole directory) checked against the checkpoint. It must not pass
// vacuously: an empty list, a name listed twice or a malformed line makes the list
// unusable (an error naming the list and the line), and every listed file that exists in
// the checkpoint is checked (shards, config.json, the index, tokenizer files, anything),
// not only the shards.
//
// Line forms (blank lines and lines starting with '#' are skipped, a final '\r' dropped):
//   SHA256  NAME   or  SHA256 *NAME     (sha256sum; NAME is the rest of the line)
//   SHA256 (NAME) = SHA256              (sha256sum --tag)
//   NAME SHA256                         (a Hub tree listing; NAME may hold spaces)
// A leading "./" is dropped. NAME must be a plain relative path (formats/model_files.h):
// no "..", no leading '/', no '\' or control character; sha256sum's escaped lines
// (starting with '\') are refused for that reason. A listed file is never opened outside
// the checkpoint: a link leading out of it is refused (HUB_PATH_ESCAPE), so is anything
// that is not a regular file (IO_NOT_REGULAR).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/findings.h"
#include "validate/validate.h"

namespace ckpt {

inline constexpr uint64_t kMaxHubListBytes = uint64_t{64} << 20;
inline constexpr size_t kMaxHubListLineBytes = 8192;
inline constexpr size_t kMaxHubListEntries = size_t{1} << 20;
inline constexpr size_t kMaxHubListBadLines = 20;  // then reading stops, with a note

struct HubListEntry {
  std::string name;    // relative path, "./" dropped
  std::string sha256;  // lowercase hex
  uint64_t line = 0;   // 1-based
};

// Parses a hash list's text (pure: no I/O). `label` names the list in findings; each
// HUB_LIST_* finding names the line (message) and its byte offset. Returns false when the
// list is unusable (any finding): malformed line, bad name, duplicate, empty, too large.
bool parse_hub_list(std::string_view text, const std::string& label, std::vector<HubListEntry>& out,
                    Findings& findings);

// Reads LIST (a regular file of at most kMaxHubListBytes, never a FIFO or device) and
// parses it: the one reader of a hash list, validate's and convert's. False with findings
// (IO_OPEN, IO_NOT_REGULAR, HUB_LIST_TOO_LARGE, IO_READ, HUB_LIST_*) when it is unusable.
bool read_hub_list(const std::string& list, std::vector<HubListEntry>& entries, Findings& findings);

// Reads LIST (a regular file of at most kMaxHubListBytes) and checks the checkpoint at
// `model_path` (whose shards, with their SHA-256, are report.files) against it: each
// shard listed is ok or mismatch, a shard not listed is "extra" (a warning), every other
// listed name is hashed from the checkpoint directory (ok / mismatch) or is "missing".
void check_hub_list(const std::string& list, const std::string& model_path, bool every_shard, ValidationReport& report);

// The same check with the list already read and parsed (`entries` from parse_hub_list;
// `list` names it in findings): convert parses its list before the conversion and checks
// the input against those entries at the end, without reading the list again.
void check_hub_entries(const std::vector<HubListEntry>& entries, const std::string& list, const std::string& model_path,
                       bool every_shard, ValidationReport& report);

}  // namespace ckpt
