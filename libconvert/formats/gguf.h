// GGUF v2/v3 reader (gguf.md §1-§3). Parses the header (KV pairs and tensor infos)
// of a mapped file, checks every rule ggml's gguf.cpp enforces plus the ones it
// misses (data bounds, PAD overflow, divide-before-multiply sizes, key syntax,
// UTF-8, bool values, padding and trailing bytes, vocab element types, endianness),
// and reports each break as a finding. Array elements are never stored: a KV records
// the element type, count and file offset, so a 2^30-entry vocab costs nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/findings.h"
#include "io/mapped_file.h"

namespace ckpt {

// KV value types (gguf.h GGUF_TYPE_*).
enum GgufValueType : int32_t {
  kGgufUint8 = 0, kGgufInt8 = 1, kGgufUint16 = 2, kGgufInt16 = 3, kGgufUint32 = 4, kGgufInt32 = 5,
  kGgufFloat32 = 6, kGgufBool = 7, kGgufString = 8, kGgufArray = 9, kGgufUint64 = 10,
  kGgufInt64 = 11, kGgufFloat64 = 12,
};
inline constexpr int32_t kGgufTypeCount = 13;
inline constexpr uint64_t kGgufDefaultAlignment = 32;
inline constexpr uint64_t kGgufMaxStringLength = uint64_t{1} << 30;   // GGUF_MAX_STRING_LENGTH
inline constexpr uint64_t kGgufMaxArrayElements = uint64_t{1} << 30;  // GGUF_MAX_ARRAY_ELEMENTS
inline constexpr uint64_t kGgufMaxAlignment = uint64_t{1} << 20;      // ckptkit's bound (PR #24997)
inline constexpr uint64_t kGgufMaxNameLength = 63;                   // gguf.cpp: length < 64

// "UINT32", "ARRAY", or "type 13" for an invalid id.
std::string gguf_value_type_name(int32_t type);
// Bytes of one value of a fixed-size KV type; 0 for STRING, ARRAY and invalid ids.
uint64_t gguf_value_type_size(int32_t type);

struct GgufKV {
  std::string key;
  int32_t type = -1;
  // Unsigned integers as uint64_t, signed as int64_t, FLOAT32/64 as double, BOOL, STRING;
  // monostate for arrays.
  std::variant<std::monostate, uint64_t, int64_t, double, bool, std::string> scalar;
  int32_t array_type = -1;
  uint64_t array_count = 0;
  uint64_t array_offset = 0;  // file offset of the first element
  uint64_t offset = 0;        // file offset of the key
  // Short human-readable value: 42, "qwen3next", [STRING × 32000]; at most max_chars characters.
  std::string display(size_t max_chars = 80) const;
};

struct GgufTensorInfo {
  std::string name;
  uint32_t n_dims = 0;
  uint64_t ne[4] = {1, 1, 1, 1};
  int32_t type = 0;
  uint64_t offset = 0;       // relative to data start
  uint64_t nbytes = 0;       // 0 when the shape or type is invalid (an error was reported)
  uint64_t info_offset = 0;  // file offset of this info record
};

struct GgufFile {
  uint32_t version = 0;
  uint64_t n_tensors = 0, n_kv = 0;
  std::vector<GgufKV> kvs;
  std::vector<GgufTensorInfo> tensors;
  uint64_t alignment = kGgufDefaultAlignment;
  // GGML_PAD(end of tensor infos, alignment). With 0 tensors the file need not reach it.
  uint64_t data_start = 0;
  uint64_t file_size = 0;

  const GgufKV* find_kv(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;  // any integer scalar type
  const GgufTensorInfo* find_tensor(std::string_view name) const;
};

// Checks every rule of gguf.md §1-§3. Returns nullopt when the header cannot be read on
// (the findings say why), else the header, possibly with error findings (e.g. a tensor
// out of the file): callers must check findings.has_errors() before trusting offsets.
std::optional<GgufFile> read_gguf(const MappedFile& file, const std::string& display, Findings& findings);
// The same on the whole file's bytes in memory (the file path above calls this; the fuzz
// target tests/fuzz/fuzz_gguf_header.cpp drives it directly).
std::optional<GgufFile> read_gguf(std::span<const uint8_t> file_bytes, const std::string& display, Findings& findings);

}  // namespace ckpt
