// Read-only access to one input file: a private read-only mmap for random
// access to headers, and pread() for streaming the payload in bounded chunks.
// Inputs are opened O_RDONLY and never written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace ckpt {

struct IoError {
  std::string path;
  int err = 0;          // errno, 0 when not from a system call
  std::string message;  // "cannot open: No such file or directory"
};

class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  ~MappedFile();

  // Opens and maps `path`. Returns false and fills `error` on failure (missing file,
  // not a regular file, permission, mmap failure).
  bool open(const std::string& path, IoError& error);

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }
  // The whole file as bytes (empty span for a zero-length file). Pages are read lazily.
  std::span<const uint8_t> bytes() const { return {data_, static_cast<size_t>(size_)}; }
  // Bytes [offset, offset + len); the caller has range-checked against size().
  std::span<const uint8_t> slice(uint64_t offset, uint64_t len) const {
    return {data_ + offset, static_cast<size_t>(len)};
  }
  // Reads exactly buf.size() bytes at `offset` with pread (retrying short reads and EINTR).
  bool read_at(uint64_t offset, std::span<uint8_t> buf, IoError& error) const;
  // Hint sequential access (MADV_SEQUENTIAL / POSIX_FADV_SEQUENTIAL). Best effort.
  void advise_sequential() const;

 private:
  void close();
  std::string path_;
  int fd_ = -1;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace ckpt
