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
  // Writes all of `data`. Every 64 MiB it asks the kernel to start writing back what
  // came before (sync_file_range), so the disk works while we compute and the final
  // fsync has little left: a big output costs about the disk's time, not compute + disk.
  bool write(const uint8_t* data, size_t len, std::string& error);
  // fsync, close, rename over the destination, fsync the directory.
  bool commit(std::string& error);
  const std::string& temp_path() const { return tmp_; }

 private:
  std::string dest_, tmp_;
  int fd_ = -1;
  uint64_t written_ = 0;       // bytes written so far
  uint64_t flush_started_ = 0; // writeback requested up to here
  bool opened_ = false;
  bool committed_ = false;
};

// A small text file (report, index, config) written with the discipline above.
// An existing device or FIFO target (/dev/null) is written in place instead.
bool write_file_atomic(const std::string& path, std::string_view content, std::string& error);

// A report destination as the CLIs take it: "-" is standard output (flushed), anything else a
// file written with write_file_atomic.
bool write_report(const std::string& target, std::string_view content, std::string& error);

}  // namespace ckpt
