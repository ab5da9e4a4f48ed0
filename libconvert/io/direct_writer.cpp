#include "io/direct_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

namespace ckpt {
namespace {

std::atomic<OutputIo> g_io{OutputIo::direct};
std::atomic<OutputIoNotice> g_notice{nullptr};
std::atomic<bool> g_notice_said{false};
std::atomic<uint64_t> g_direct_requests{0}, g_buffered_requests{0}, g_reserved{0};

uint64_t env_u64(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::strtoull(v, nullptr, 10) : 0;
}
// CKPT_TEST_WRITE_FAIL_AT=N: the write request covering byte N fails (the CLI tests' seam).
std::atomic<uint64_t> g_fail_at{env_u64("CKPT_TEST_WRITE_FAIL_AT")};
// CKPT_TEST_NO_DIRECT=1: act as on a filesystem that refuses O_DIRECT (the fallback's tests).
std::atomic<bool> g_refuse_direct{env_u64("CKPT_TEST_NO_DIRECT") != 0};

void say_fallback(const std::string& name, int err) {
  if (g_notice_said.exchange(true)) return;
  if (OutputIoNotice notice = g_notice.load())
    notice(std::filesystem::path(name).parent_path().string(), std::string("its filesystem refuses O_DIRECT (") + std::strerror(err) +
                     "): outputs are written through the page cache, dropped behind the writer");
}

struct Buffer {
  uint8_t* mem = nullptr;
  size_t len = 0;       // bytes filled
  uint64_t offset = 0;  // where they go in the file
};

}  // namespace

void set_output_io(OutputIo io) { g_io.store(io); }
OutputIo output_io() { return g_io.load(); }
void set_output_io_notice(OutputIoNotice notice) { g_notice.store(notice); }
void set_direct_write_failure_for_testing(uint64_t offset) { g_fail_at.store(offset); }
void set_refuse_direct_for_testing(bool refuse) { g_refuse_direct.store(refuse); }
void reset_output_io_notice_for_testing() { g_notice_said.store(false); }
uint64_t direct_write_requests() { return g_direct_requests.load(); }
uint64_t buffered_write_requests() { return g_buffered_requests.load(); }
uint64_t reserved_outputs() { return g_reserved.load(); }

struct DirectWriter::State {
  int fd = -1;
  std::string name;
  std::atomic<bool> direct{false};
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Buffer> buffers;  // allocated on demand, at most kDirectBuffers
  std::vector<size_t> free_list, pending;
  unsigned in_flight = 0;
  bool stop = false;
  std::string error;  // the first failed write
  std::vector<std::thread> threads;
  int filling = -1;
  uint64_t next_offset = 0;
  std::mutex fallback_mu;

  ~State() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    for (auto& t : threads) t.join();
    for (auto& b : buffers) std::free(b.mem);
  }

  // The filesystem refused an O_DIRECT request: the rest goes through the page cache.
  void fall_back(int err) {
    std::lock_guard lock(fallback_mu);
    if (!direct) return;
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_DIRECT);
    direct = false;
    say_fallback(name, err);
  }

  // Writes [offset, offset + len) from `mem`; every byte or an error.
  bool write_range(const uint8_t* mem, size_t len, uint64_t offset, std::string& why) {
    const uint64_t fail_at = g_fail_at.load();
    if (fail_at != 0 && fail_at >= offset && fail_at < offset + len) {
      why = "cannot write " + name + ": " + std::strerror(EIO) + " (injected at byte " + std::to_string(fail_at) + ")";
      return false;
    }
    const bool was_direct = direct;
    size_t done = 0;
    while (done < len) {
      const ssize_t n = ::pwrite(fd, mem + done, len - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL && direct && done == 0) {
        fall_back(EINVAL);
        continue;
      }
      if (n <= 0) {
        why = "cannot write " + name + ": " + std::strerror(n < 0 ? errno : EIO);
        return false;
      }
      done += static_cast<size_t>(n);
    }
    (was_direct && direct ? g_direct_requests : g_buffered_requests)++;
    if (!direct) {
      // Behind the writer: this range is written back, then dropped from the page cache,
      // before its buffer is reused (best effort: not every filesystem has these).
      ::sync_file_range(fd, static_cast<off_t>(offset), static_cast<off_t>(len),
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
      ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(len), POSIX_FADV_DONTNEED);
    }
    return true;
  }

  void work() {
    for (;;) {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return stop || !pending.empty(); });
      if (stop) return;
      const size_t i = pending.front();
      pending.erase(pending.begin());
      const Buffer b = buffers[i];
      const bool failed_before = !error.empty();
      lock.unlock();
      std::string why;
      const bool ok = !failed_before && write_range(b.mem, b.len, b.offset, why);
      lock.lock();
      if (!ok && error.empty()) error = why.empty() ? "cannot write " + name + ": an earlier write failed" : why;
      free_list.push_back(i);
      --in_flight;
      cv.notify_all();
    }
  }

  // A buffer to fill: a free one, a new one while fewer than kDirectBuffers exist, else
  // the first one written. -1 after a failed write.
  int take(std::string& why) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return !error.empty() || !free_list.empty() || buffers.size() < kDirectBuffers; });
    if (!error.empty()) {
      why = error;
      return -1;
    }
    size_t i = 0;
    if (!free_list.empty()) {
      i = free_list.back();
      free_list.pop_back();
    } else {
      void* mem = std::aligned_alloc(kDirectAlign, kDirectBufferBytes);
      if (!mem) {
        why = "cannot write " + name + ": out of memory for a write buffer";
        return -1;
      }
      buffers.push_back(Buffer{static_cast<uint8_t*>(mem), 0, 0});
      i = buffers.size() - 1;
    }
    buffers[i].len = 0;
    buffers[i].offset = next_offset;
    return static_cast<int>(i);
  }

  void submit(size_t i) {
    {
      std::lock_guard lock(mu);
      next_offset += buffers[i].len;
      pending.push_back(i);
      ++in_flight;
      if (threads.empty())
        for (unsigned t = 0; t + 1 < kDirectBuffers; ++t) threads.emplace_back([this] { work(); });
    }
    cv.notify_all();
  }

  bool wait_all(std::string& why) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return in_flight == 0; });
    why = error;
    return error.empty();
  }
};

DirectWriter::DirectWriter(int fd, std::string name) : s_(std::make_unique<State>()) {
  s_->fd = fd;
  s_->name = std::move(name);
  s_->buffers.reserve(kDirectBuffers);  // never moved while the pool threads read them
  if (output_io() == OutputIo::buffered) return;
  const int flags = ::fcntl(fd, F_GETFL);
  const bool refused = g_refuse_direct.load();
  if (refused || flags < 0 || ::fcntl(fd, F_SETFL, flags | O_DIRECT) != 0) {
    say_fallback(s_->name, refused ? EINVAL : errno);
    return;
  }
  s_->direct = true;
}

DirectWriter::~DirectWriter() = default;

bool DirectWriter::direct() const { return s_->direct; }

bool DirectWriter::reserve(uint64_t bytes, std::string& error) {
  if (appended_ != 0 || reserved_ != 0 || bytes == 0) return true;  // only before the first write, once
  const uint64_t aligned = (bytes + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
  if (::fallocate(s_->fd, 0, 0, static_cast<off_t>(aligned)) != 0) {
    if (errno != ENOSPC && errno != EFBIG && errno != EDQUOT) return true;  // no fallocate here: plain writes
    error = "cannot reserve " + std::to_string(aligned) + " bytes for " + s_->name + ": " + std::strerror(errno);
    return false;
  }
  reserved_ = aligned;
  ++g_reserved;
  return true;
}

bool DirectWriter::write(const void* data, size_t len, std::string& error) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (len > 0) {
    if (s_->filling < 0 && (s_->filling = s_->take(error)) < 0) return false;
    Buffer& b = s_->buffers[static_cast<size_t>(s_->filling)];
    const size_t n = std::min(len, kDirectBufferBytes - b.len);
    std::memcpy(b.mem + b.len, p, n);
    b.len += n;
    p += n;
    len -= n;
    appended_ += n;
    if (b.len == kDirectBufferBytes) {
      s_->submit(static_cast<size_t>(s_->filling));
      s_->filling = -1;
    }
  }
  return true;
}

bool DirectWriter::finish(std::string& error) {
  if (!s_->wait_all(error) || !write_tail(error)) return false;
  // The file is longer than the bytes given after a padded O_DIRECT tail or a reserve():
  // cut it back to its true size.
  struct stat st {};
  if (::fstat(s_->fd, &st) != 0) {
    error = "cannot stat " + s_->name + ": " + std::strerror(errno);
    return false;
  }
  if (static_cast<uint64_t>(st.st_size) != appended_ && ::ftruncate(s_->fd, static_cast<off_t>(appended_)) != 0) {
    error = "cannot truncate " + s_->name + " to " + std::to_string(appended_) + " bytes: " + std::strerror(errno);
    return false;
  }
  return true;
}

bool DirectWriter::write_tail(std::string& error) {
  if (s_->filling < 0) return true;
  Buffer& b = s_->buffers[static_cast<size_t>(s_->filling)];
  s_->filling = -1;
  if (b.len == 0) return true;
  if (!s_->direct) return s_->write_range(b.mem, b.len, b.offset, error);
  // O_DIRECT writes whole blocks: the tail is padded with zeros (finish() cuts them off).
  const size_t padded = (b.len + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
  std::memset(b.mem + b.len, 0, padded - b.len);
  return s_->write_range(b.mem, padded, b.offset, error);
}

}  // namespace ckpt
