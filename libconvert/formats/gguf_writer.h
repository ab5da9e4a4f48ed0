// A small GGUF v3 writer (gguf.md §1-§2) for tools that rewrite an existing file:
// KV pairs are re-serialised by copying their exact byte ranges from the mapped
// source (arrays are never held in memory, a 150k-entry vocab is one memcpy), new
// string/u32 KVs can be appended, tensor infos get offsets recomputed with the
// loader's rule offset_i = Σ_{j<i} PAD(nbytes_j, alignment), and tensor data is
// streamed through an AtomicOutput in info order, each tensor zero-padded.
//
// Usage: add KVs and tensors, then begin(out), then for each tensor in order
// write_data(...) as often as needed and end_tensor(), then finish().
// Every method returns false with `error` set instead of throwing.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "formats/gguf.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"

namespace ckpt {

struct GgufWriterTensor {
  std::string name;
  uint32_t n_dims = 0;
  uint64_t ne[4] = {1, 1, 1, 1};
  int32_t type = 0;
  uint64_t nbytes = 0;
  uint64_t offset = 0;  // relative to the data section
};

// The byte range [begin, end) of one KV pair in the file (key, type, value), found by
// walking the value (string arrays element by element). False when it leaves the file.
bool gguf_kv_byte_range(const MappedFile& file, const GgufKV& kv, uint64_t& begin, uint64_t& end);

class GgufWriter {
 public:
  // alignment: power of two; it is also what general.alignment must say (the caller
  // copies that KV, or omits it for the default 32).
  explicit GgufWriter(uint64_t alignment) : alignment_(alignment) {}

  bool copy_kv(const MappedFile& source, const GgufKV& kv, std::string& error);
  bool add_string_kv(std::string_view key, std::string_view value, std::string& error);
  bool add_u32_kv(std::string_view key, uint32_t value, std::string& error);
  bool add_tensor(const std::string& name, uint32_t n_dims, const uint64_t ne[4], int32_t type, std::string& error);

  const std::vector<GgufWriterTensor>& tensors() const { return tensors_; }
  uint64_t alignment() const { return alignment_; }
  // Header (magic ... tensor infos) plus padding: where tensor data starts.
  uint64_t data_start() const;
  // data_start() + Σ PAD(nbytes): the size of the finished file.
  uint64_t file_size() const { return data_start() + data_bytes_; }

  // Streaming. begin() writes the header; write_data() appends bytes of the current
  // tensor (never more than its nbytes); end_tensor() checks it is complete and pads.
  bool begin(AtomicOutput& out, std::string& error);
  bool write_data(AtomicOutput& out, std::span<const uint8_t> bytes, std::string& error);
  bool end_tensor(AtomicOutput& out, std::string& error);
  bool finish(std::string& error) const;

 private:
  bool add_key(std::string_view key, std::string& error);
  std::vector<uint8_t> serialise_header() const;

  uint64_t alignment_;
  std::vector<uint8_t> kv_bytes_;  // serialised KV pairs, in order
  uint64_t kv_count_ = 0;
  std::unordered_set<std::string> keys_;
  std::vector<GgufWriterTensor> tensors_;
  std::unordered_set<std::string> tensor_names_;
  uint64_t data_bytes_ = 0;  // Σ PAD(nbytes) so far
  // Streaming state.
  bool begun_ = false;
  size_t current_ = 0;           // tensor being written
  uint64_t current_written_ = 0; // its bytes so far
};

}  // namespace ckpt
