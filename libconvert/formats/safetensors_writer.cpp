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

bool write_all(int fd, const uint8_t* data, size_t len, std::string& error) {
  while (len > 0) {
    ssize_t n = ::write(fd, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = "write failed: " + errno_text(n < 0 ? errno : EIO);
      return false;
    }
    data += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// fsync of the directory makes the rename itself durable. Best effort.
void sync_directory(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Owns a temporary sibling of the destination until commit(); removes it otherwise.
class TempOutput {
 public:
  explicit TempOutput(const std::string& dest) : dest_(dest) {
    std::filesystem::path p(dest);
    tmp_ = (p.parent_path() / ("." + p.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  }
  ~TempOutput() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_ && opened_) ::unlink(tmp_.c_str());
  }
  TempOutput(const TempOutput&) = delete;
  TempOutput& operator=(const TempOutput&) = delete;

  bool open(std::string& error) {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      error = "cannot create " + tmp_ + ": " + errno_text(errno);
      return false;
    }
    opened_ = true;
    return true;
  }
  int fd() const { return fd_; }

  bool commit(std::string& error) {
    if (::fsync(fd_) != 0) {
      error = "fsync " + tmp_ + " failed: " + errno_text(errno);
      return false;
    }
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) {
      error = "close " + tmp_ + " failed: " + errno_text(errno);
      return false;
    }
    if (::rename(tmp_.c_str(), dest_.c_str()) != 0) {
      error = "cannot rename " + tmp_ + " to " + dest_ + ": " + errno_text(errno);
      return false;
    }
    committed_ = true;
    sync_directory(dest_);
    return true;
  }

 private:
  std::string dest_, tmp_;
  int fd_ = -1;
  bool opened_ = false;
  bool committed_ = false;
};

bool write_payload(int fd, const std::vector<WriterTensor>& tensors, const TensorFill& fill, size_t chunk_bytes,
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
      if (!write_all(fd, buf.data(), n, error)) return false;
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
  header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i)
      header += (i ? "," : "") + json_quote(metadata[i].first) + ":" + json_quote(metadata[i].second);
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
  TempOutput out(path);
  if (!out.open(error)) return false;
  uint8_t prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  if (!write_all(out.fd(), prefix, 8, error) ||
      !write_all(out.fd(), reinterpret_cast<const uint8_t*>(header.data()), header.size(), error)) {
    error = path + ": " + error;
    return false;
  }
  if (options.sparse) {
    if (::ftruncate(out.fd(), static_cast<off_t>(*total)) != 0) {
      error = "cannot extend " + path + " to " + std::to_string(*total) + " bytes: " + errno_text(errno);
      return false;
    }
  } else if (!write_payload(out.fd(), tensors, fill, options.chunk_bytes, error)) {
    error = path + ": " + error;
    return false;
  }
  return out.commit(error);
}

bool write_file_atomic(const std::string& path, std::string_view text, std::string& error) {
  TempOutput out(path);
  if (!out.open(error)) return false;
  if (!write_all(out.fd(), reinterpret_cast<const uint8_t*>(text.data()), text.size(), error)) {
    error = path + ": " + error;
    return false;
  }
  return out.commit(error);
}

}  // namespace ckpt
