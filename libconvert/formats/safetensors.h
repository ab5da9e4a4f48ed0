// safetensors reader: the reference read path (safetensors.md §2-§3) plus the
// strict additions of §8. Only the header is parsed; the payload stays in the
// file and is reached through (data_start + begin, end - begin).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/findings.h"
#include "core/dtype.h"
#include "io/mapped_file.h"

namespace ckpt {

// strict follows the README (whitespace before '{' and non-space padding are errors);
// compat accepts exactly what the reference accepts and warns where the README disagrees.
enum class StMode { strict, compat };

struct StReadOptions {
  StMode mode = StMode::strict;
  uint64_t max_header_bytes = 100'000'000;  // MAX_HEADER_SIZE, decimal
  size_t max_tensors = 1'000'000;           // a 100 MB header could list millions: a DoS shape
  size_t max_name_bytes = 4096;
};

struct StTensor {
  std::string name;
  Dtype dtype = Dtype::U8;
  std::vector<uint64_t> shape;
  uint64_t begin = 0;   // data_offsets[0], relative to the data section
  uint64_t end = 0;     // data_offsets[1]
  uint64_t nbytes = 0;  // numel * bits / 8 (0 when the shape overflowed)
  bool sizes_ok = false;  // shape product, bit count and span all consistent
};

struct StHeader {
  uint64_t header_len = 0;   // N
  uint64_t data_start = 0;   // 8 + N
  uint64_t file_size = 0;
  std::vector<StTensor> tensors;  // in header (JSON) order of first appearance; of duplicates strict
                                  // keeps the first, compat the last (the reference's choice)
  bool has_metadata = false;
  std::vector<std::pair<std::string, std::string>> metadata;
  // True when every tensor's bytes lie inside the file and the data section is covered
  // exactly: payload reads are then safe for every tensor with sizes_ok.
  bool layout_ok = false;
  uint64_t payload_bytes() const;
};

// Parses and checks the header of `file`. `display` names the file in findings.
// Returns nullopt when the header cannot be parsed at all; otherwise every tensor
// that could be read, with a finding for each rule it breaks.
std::optional<StHeader> read_safetensors_header(const MappedFile& file, const std::string& display,
                                                const StReadOptions& options, Findings& findings);
// The same on the whole file's bytes in memory (the file path above calls this; the
// fuzz target tests/fuzz/fuzz_safetensors_header.cpp drives it directly).
std::optional<StHeader> read_safetensors_header(std::span<const uint8_t> file_bytes, const std::string& display,
                                                const StReadOptions& options, Findings& findings);

}  // namespace ckpt
