#include "formats/safetensors_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <unordered_set>

#include <fcntl.h>
#include <unistd.h>

#include "core/checked_math.h"
#include "formats/json.h"
#include "io/atomic_file.h"

namespace ckpt {
namespace {

constexpr uint64_t kMaxHeader = 100'000'000;  // the reference reader's MAX_HEADER_SIZE

std::string errno_text(int err) { return std::strerror(err); }

bool tensor_nbytes(const WriterTensor& t, uint64_t& nbytes, std::string& error) {
  auto numel = checked_product(t.shape);
  auto nbits = numel ? checked_mul(*numel, dtype_bits(t.dtype)) : std::nullopt;
  if (!nbits) {
    error = "tensor " + t.name + ": size of shape " + shape_to_string(t.shape) + " overflows";
    return false;
  }
  if (*nbits % 8 != 0) {
    error = "tensor " + t.name + ": " + std::to_string(*nbits) + " bits of " + dtype_name(t.dtype) +
            " do not fill whole bytes";
    return false;
  }
  nbytes = *nbits / 8;
  return true;
}

void append_entry(std::string& h, const WriterTensor& t) {
  h += json_quote(t.name);
  h += ":{\"dtype\":\"";
  h += dtype_name(t.dtype);
  h += "\",\"shape\":[";
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i) h += ',';
    h += std::to_string(t.shape[i]);
  }
  h += "],\"data_offsets\":[" + std::to_string(t.begin) + "," + std::to_string(t.begin + t.nbytes) + "]}";
}

bool check_names(const std::vector<WriterTensor>& tensors, std::string& error) {
  std::unordered_set<std::string_view> seen;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__") {
      error = "a tensor may not be named __metadata__ (readers cannot parse it back)";
      return false;
    }
    if (!seen.insert(t.name).second) {
      error = "duplicate tensor name " + t.name;
      return false;
    }
  }
  return true;
}

bool write_payload(AtomicOutput& out, const std::vector<WriterTensor>& tensors, const TensorFill& fill, size_t chunk_bytes,
                   std::string& error) {
  size_t chunk = std::max<size_t>(8, (chunk_bytes + 7) / 8 * 8);
  std::vector<uint8_t> buf;
  for (const auto& t : tensors) {
    for (uint64_t off = 0; off < t.nbytes; off += chunk) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, t.nbytes - off));
      buf.assign(n, 0);
      std::string fill_error;
      if (!fill(t, off, std::span<uint8_t>(buf.data(), n), fill_error)) {
        error = "tensor " + t.name + ": " + fill_error;
        return false;
      }
      if (!out.write(buf.data(), n, error)) return false;
    }
  }
  return true;
}

}  // namespace

bool plan_safetensors(std::vector<WriterTensor>& tensors,
                      const std::vector<std::pair<std::string, std::string>>& metadata, std::string& header,
                      uint64_t& payload_bytes, std::string& error) {
  if (!check_names(tensors, error)) return false;
  std::sort(tensors.begin(), tensors.end(), [](const WriterTensor& a, const WriterTensor& b) {
    if (a.dtype != b.dtype) return a.dtype > b.dtype;  // wide types first keeps every tensor aligned
    return a.name < b.name;
  });
  uint64_t offset = 0;
  for (auto& t : tensors) {
    if (!tensor_nbytes(t, t.nbytes, error)) return false;
    t.begin = offset;
    auto end = checked_add(offset, t.nbytes);
    if (!end) {
      error = "total payload size overflows at tensor " + t.name;
      return false;
    }
    offset = *end;
  }
  payload_bytes = offset;
  header.assign(1, '{');  // not `header = "{"`: GCC 12 -Wrestrict false positive at -O3 (bug 105651)
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      if (i) header += ",";  // not `(i ? "," : "") + ...`: GCC 12 -Wrestrict false positive (bug 105329)
      header += json_quote(metadata[i].first) + ":" + json_quote(metadata[i].second);
    }
    header += "}";
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (i || !metadata.empty()) header += ',';
    append_entry(header, tensors[i]);
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');
  if (header.size() > kMaxHeader) {
    error = "header of " + std::to_string(header.size()) + " bytes exceeds the 100,000,000-byte limit";
    return false;
  }
  return true;
}

bool write_safetensors(const std::string& path, std::vector<WriterTensor> tensors, const TensorFill& fill,
                       const SafetensorsWriteOptions& options, std::string& error) {
  std::string header;
  uint64_t payload = 0;
  if (!plan_safetensors(tensors, options.metadata, header, payload, error)) {
    error = path + ": " + error;
    return false;
  }
  if (!options.sparse && !fill) {
    error = "no fill callback for a dense write";
    return false;
  }
  auto total = checked_add(8 + header.size(), payload);
  if (!total || *total > static_cast<uint64_t>(INT64_MAX)) {
    error = "file size overflows";
    return false;
  }
  // A sparse file is its header and a hole (ftruncate): nothing for O_DIRECT to do.
  AtomicOutput out(path, kOutputFileMode, options.sparse ? OutputUse::small : OutputUse::bulk);
  if (!out.open(error)) return false;
  uint8_t prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  if (!out.write(prefix, 8, error) ||
      !out.write(reinterpret_cast<const uint8_t*>(header.data()), header.size(), error)) {
    error = path + ": " + error;
    return false;
  }
  if (options.sparse) {
    if (::ftruncate(out.fd(), static_cast<off_t>(*total)) != 0) {
      error = "cannot extend " + path + " to " + std::to_string(*total) + " bytes: " + errno_text(errno);
      return false;
    }
  } else if (!write_payload(out, tensors, fill, options.chunk_bytes, error)) {
    error = path + ": " + error;
    return false;
  }
  return out.commit(error);
}

}  // namespace ckpt
