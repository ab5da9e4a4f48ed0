// safetensors writer with the reference layout (safetensors.md §6).
//
// Tensors are sorted by dtype descending (the enum order of formats/dtype.h, wide
// types first), then by name, and laid out contiguously from offset 0. The header is
// compact JSON: optional "__metadata__" first, then {"dtype","shape","data_offsets"}
// per tensor in offset order, padded with spaces to a multiple of 8. The output of
// safetensors.torch.save_file for the same tensors is byte-identical.
//
// Payload bytes come from a fill callback in bounded chunks, so a shard is never held
// in memory. The sparse mode writes only the header and extends the file with
// ftruncate(): the payload reads as zeros and takes no disk blocks (synth uses it for
// full-size structure-only checkpoints). The file is written under a temporary name
// in the same directory, fsync'd and renamed; on failure nothing is left behind.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace ckpt {

struct WriterTensor {
  std::string name;
  Dtype dtype = Dtype::U8;
  std::vector<uint64_t> shape;
  // Filled in by plan_safetensors: payload-relative byte range.
  uint64_t begin = 0;
  uint64_t nbytes = 0;
};

// Writes `out.size()` bytes of tensor `t` starting at byte `offset` of that tensor.
// Chunks start at multiples of the chunk size (itself a multiple of 8), so an element
// never straddles two calls. Return false and set `error` to abort the write.
using TensorFill =
    std::function<bool(const WriterTensor& t, uint64_t offset, std::span<uint8_t> out, std::string& error)>;

struct SafetensorsWriteOptions {
  std::vector<std::pair<std::string, std::string>> metadata;  // written as __metadata__ when not empty
  bool sparse = false;                                        // header only; payload is a hole of zeros
  size_t chunk_bytes = size_t{8} << 20;                       // fill granularity (rounded up to 8)
};

// Sorts `tensors` into the reference order, sets begin/nbytes, and builds the padded
// header text. Fails on duplicate or reserved names, sub-byte sizes that do not fill
// whole bytes, size overflow, or a header over 100,000,000 bytes.
bool plan_safetensors(std::vector<WriterTensor>& tensors,
                      const std::vector<std::pair<std::string, std::string>>& metadata, std::string& header,
                      uint64_t& payload_bytes, std::string& error);

// Plans and writes `path`. `fill` may be empty only in sparse mode.
bool write_safetensors(const std::string& path, std::vector<WriterTensor> tensors, const TensorFill& fill,
                       const SafetensorsWriteOptions& options, std::string& error);

// Writes a small text file (index, config) with the same temp-fsync-rename discipline.
bool write_file_atomic(const std::string& path, std::string_view text, std::string& error);

}  // namespace ckpt
