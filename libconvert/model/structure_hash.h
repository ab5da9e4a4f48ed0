// Header-only identity hash of a checkpoint's tensor structure (deepseek-v4.md §5).
//
// Records are sorted by name (bytewise), serialised as compact JSON with sorted keys
// ({"dtype":…,"name":…,"shape":[…],"size_bytes":…}) joined into "[" … "]\n", and hashed
// with SHA-256. This reproduces Python's json.dumps(records, sort_keys=True,
// separators=(",", ":")) + "\n", so the value matches published hashes (0731:
// 18285fe6…ca83e0e). It needs no payload reads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt {

struct StructureRecord {
  std::string name, dtype;
  std::vector<uint64_t> shape;
  uint64_t size_bytes = 0;
};

// The exact text that is hashed (useful for diffing against another implementation).
std::string structure_json(std::vector<StructureRecord> records);
// Lowercase hex SHA-256 of structure_json(records).
std::string structure_sha256(std::vector<StructureRecord> records);
// A JSON string literal as Python's json.dumps(ensure_ascii=True) writes it: non-ASCII
// as \uXXXX (surrogate pairs above U+FFFF), invalid UTF-8 bytes as \ufffd.
std::string json_quote_ascii(std::string_view s);

}  // namespace ckpt
