// Reading one input file in order while it is being hashed: a reader thread preads the
// file in large blocks into a small ring of buffers, ahead of the consumers, so the disk
// (or the page-cache copy) and the hash overlap instead of taking turns.
//
//   ReadAhead ra(file, {});                // starts reading [0, size)
//   ra.read(pos, n, bytes, error);         // pos never goes back; n <= block_bytes
//   ra.finish(error);                      // the tap has seen every byte; first I/O error
//
// The optional `tap` sees EVERY byte of the file, block by block in order, on a thread of
// its own (the whole-file SHA-256 of `validate --sha256` / `hash`); the caller's read()
// sees only the ranges it asks for (the tensors), so two hashes of one byte stream run on
// two cores. Memory: buffers x block_bytes (+ one block for reads that straddle two
// blocks), whatever the file size. Inputs are opened by the caller (read-only).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "io/mapped_file.h"

namespace ckpt {

struct ReadAheadOptions {
  size_t block_bytes = size_t{4} << 20;  // one pread
  unsigned buffers = 3;                  // blocks in flight (at least 2)
  std::function<void(std::span<const uint8_t>)> tap;  // every byte, in order; may be empty
};

class ReadAhead {
 public:
  ReadAhead(const MappedFile& file, ReadAheadOptions options);
  ~ReadAhead();  // stops the threads (a consumer may stop early)
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  size_t block_bytes() const { return o_.block_bytes; }
  // Bytes [pos, pos + n) of the file, n <= block_bytes(), pos >= the end of the previous
  // read. The span stays valid until the next call. False with `error` on an I/O error
  // (a read failed, the file is shorter than it was when opened).
  bool read(uint64_t pos, uint64_t n, std::span<const uint8_t>& out, std::string& error);
  // Done reading: waits until the tap has consumed the whole file. False with the first
  // I/O error (also one past the caller's last read, where only the tap saw it).
  bool finish(std::string& error);

 private:
  void reader_loop();
  void tap_loop();
  uint8_t* slot(uint64_t block) { return buffers_[block % o_.buffers].data(); }
  uint64_t block_begin(uint64_t b) const { return b * o_.block_bytes; }
  uint64_t block_len(uint64_t b) const;
  // Waits until block b is read (or failed); false on error at or before b.
  bool wait_ready(std::unique_lock<std::mutex>& lock, uint64_t b, std::string& error);
  void release_below(uint64_t b);

  const MappedFile& file_;
  ReadAheadOptions o_;
  uint64_t size_ = 0, blocks_ = 0;
  std::vector<std::vector<uint8_t>> buffers_;
  std::vector<uint8_t> carry_;  // a read that straddles blocks, copied together

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t read_done_ = 0;   // blocks [0, read_done_) are in their slots
  uint64_t main_done_ = 0;   // blocks the caller released
  uint64_t tap_done_ = 0;    // blocks the tap consumed
  uint64_t failed_at_ = UINT64_MAX;  // first block that could not be read
  std::string error_;
  bool stop_ = false;
  std::thread reader_, tapper_;
};

}  // namespace ckpt
