#include "io/read_ahead.h"

#include <algorithm>
#include <cstring>

namespace ckpt {

ReadAhead::ReadAhead(const MappedFile& file, ReadAheadOptions options) : file_(file), o_(std::move(options)) {
  o_.block_bytes = std::max<size_t>(o_.block_bytes, 1);
  o_.buffers = std::max(o_.buffers, 2u);
  size_ = file_.size();
  blocks_ = (size_ + o_.block_bytes - 1) / o_.block_bytes;
  if (!o_.tap) tap_done_ = UINT64_MAX;
  if (blocks_ == 0) return;
  const size_t slots = static_cast<size_t>(std::min<uint64_t>(o_.buffers, blocks_));
  const size_t bytes = static_cast<size_t>(std::min<uint64_t>(o_.block_bytes, size_));
  buffers_.resize(slots);
  for (auto& b : buffers_) b.resize(bytes);
  o_.buffers = static_cast<unsigned>(slots);
  reader_ = std::thread([this] { reader_loop(); });
  if (o_.tap) tapper_ = std::thread([this] { tap_loop(); });
}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (reader_.joinable()) reader_.join();
  if (tapper_.joinable()) tapper_.join();
}

uint64_t ReadAhead::block_len(uint64_t b) const {
  return std::min<uint64_t>(o_.block_bytes, size_ - block_begin(b));
}

void ReadAhead::reader_loop() {
  for (uint64_t b = 0; b < blocks_; ++b) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Block b reuses the slot of block b - buffers: both consumers must be past it.
      cv_.wait(lock, [&] {
        const uint64_t free = std::min(main_done_, tap_done_);
        return stop_ || b < free || b - free < o_.buffers;
      });
      if (stop_) return;
    }
    IoError err;
    const bool ok = file_.read_at(block_begin(b), std::span<uint8_t>(slot(b), block_len(b)), err);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ok) {
        read_done_ = b + 1;
      } else {
        failed_at_ = b;
        error_ = err.message.empty() ? "read failed" : err.message;
      }
    }
    cv_.notify_all();
    if (!ok) return;
  }
}

void ReadAhead::tap_loop() {
  for (uint64_t b = 0; b < blocks_; ++b) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || read_done_ > b || failed_at_ <= b; });
      if (stop_ || read_done_ <= b) return;
    }
    o_.tap(std::span<const uint8_t>(slot(b), block_len(b)));
    {
      std::lock_guard<std::mutex> lock(mu_);
      tap_done_ = b + 1;
    }
    cv_.notify_all();
  }
}

bool ReadAhead::wait_ready(std::unique_lock<std::mutex>& lock, uint64_t b, std::string& error) {
  cv_.wait(lock, [&] { return read_done_ > b || failed_at_ <= b; });
  if (read_done_ > b) return true;
  error = error_;
  return false;
}

void ReadAhead::release_below(uint64_t b) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (b <= main_done_) return;
    main_done_ = b;
  }
  cv_.notify_all();
}

bool ReadAhead::read(uint64_t pos, uint64_t n, std::span<const uint8_t>& out, std::string& error) {
  if (n == 0) {
    out = {};
    return true;
  }
  if (pos > size_ || n > size_ - pos || n > o_.block_bytes) {
    error = "read of [" + std::to_string(pos) + ", +" + std::to_string(n) + ") outside the file's " +
            std::to_string(size_) + " bytes";
    return false;
  }
  const uint64_t b = pos / o_.block_bytes;
  release_below(b);
  std::unique_lock<std::mutex> lock(mu_);
  if (!wait_ready(lock, b, error)) return false;
  const uint64_t at = pos - block_begin(b), first = std::min<uint64_t>(n, block_len(b) - at);
  if (first == n) {
    out = std::span<const uint8_t>(slot(b) + at, n);
    return true;
  }
  // Straddles blocks b and b + 1 (n <= block_bytes): both are held (the caller has not
  // released b, and b + 1 lives in another slot), copied together.
  if (!wait_ready(lock, b + 1, error)) return false;
  lock.unlock();
  carry_.resize(o_.block_bytes);
  std::memcpy(carry_.data(), slot(b) + at, first);
  std::memcpy(carry_.data() + first, slot(b + 1), n - first);
  out = std::span<const uint8_t>(carry_.data(), n);
  return true;
}

bool ReadAhead::finish(std::string& error) {
  std::unique_lock<std::mutex> lock(mu_);
  main_done_ = UINT64_MAX;
  cv_.notify_all();
  if (!o_.tap || blocks_ == 0) {
    stop_ = true;  // the rest of the file is nobody's
    cv_.notify_all();
    return true;
  }
  cv_.wait(lock, [&] { return tap_done_ >= blocks_ || failed_at_ != UINT64_MAX; });
  if (tap_done_ >= blocks_) return true;
  error = error_;
  return false;
}

}  // namespace ckpt
