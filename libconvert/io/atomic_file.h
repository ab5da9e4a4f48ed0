// Writing outputs safely: a hidden sibling temporary name, fsync, rename, fsync of
// the directory. An interrupted run never leaves a partial file at the final name,
// and a failed write removes its temporary file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ckpt {

// Owns ".<name>.tmp.<pid>" beside the destination until commit(); removes it otherwise.
class AtomicOutput {
 public:
  explicit AtomicOutput(const std::string& dest);
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  bool open(std::string& error);
  int fd() const { return fd_; }
  bool write(const uint8_t* data, size_t len, std::string& error);
  // fsync, close, rename over the destination, fsync the directory.
  bool commit(std::string& error);
  const std::string& temp_path() const { return tmp_; }

 private:
  std::string dest_, tmp_;
  int fd_ = -1;
  bool opened_ = false;
  bool committed_ = false;
};

// A small text file (report, index, config) written with the discipline above.
bool write_file_atomic(const std::string& path, std::string_view content, std::string& error);

}  // namespace ckpt
