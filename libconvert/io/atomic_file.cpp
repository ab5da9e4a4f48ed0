#include "io/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <filesystem>
#include <unistd.h>

namespace ckpt {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// fsync of the directory makes the rename itself durable. Best effort.
void sync_directory(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

AtomicOutput::AtomicOutput(const std::string& dest) : dest_(dest) {
  std::filesystem::path p(dest);
  tmp_ = (p.parent_path() / ("." + p.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
}

AtomicOutput::~AtomicOutput() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && opened_) ::unlink(tmp_.c_str());
}

bool AtomicOutput::open(std::string& error) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    error = "cannot create " + tmp_ + ": " + errno_text(errno);
    return false;
  }
  opened_ = true;
  return true;
}

constexpr uint64_t kWritebackWindow = 64ull << 20;

bool AtomicOutput::write(const uint8_t* data, size_t len, std::string& error) {
  written_ += len;
  while (len > 0) {
    ssize_t n = ::write(fd_, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = "cannot write " + tmp_ + ": " + errno_text(n < 0 ? errno : EIO);
      return false;
    }
    data += n;
    len -= static_cast<size_t>(n);
  }
  if (written_ - flush_started_ >= kWritebackWindow) {
    // Best effort (not every filesystem supports it); fsync in commit() is what counts.
    ::sync_file_range(fd_, static_cast<off_t>(flush_started_), static_cast<off_t>(written_ - flush_started_),
                      SYNC_FILE_RANGE_WRITE);
    flush_started_ = written_;
  }
  return true;
}

bool AtomicOutput::commit(std::string& error) {
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

// An existing non-regular target (/dev/null, a FIFO, a terminal) is written in place:
// renaming a temporary over it would replace the device node with a regular file.
bool write_in_place(const std::string& path, std::string_view content, std::string& error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    error = "cannot open " + path + ": " + errno_text(errno);
    return false;
  }
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = "cannot write " + path + ": " + errno_text(errno);
      ::close(fd);
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return ::close(fd) == 0 || (error = "cannot close " + path + ": " + errno_text(errno), false);
}

bool write_file_atomic(const std::string& path, std::string_view content, std::string& error) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return write_in_place(path, content, error);
  AtomicOutput out(path);
  if (!out.open(error)) return false;
  if (!out.write(reinterpret_cast<const uint8_t*>(content.data()), content.size(), error)) return false;
  return out.commit(error);
}

bool write_report(const std::string& target, std::string_view content, std::string& error) {
  if (target != "-") return write_file_atomic(target, content, error);
  if (std::fwrite(content.data(), 1, content.size(), stdout) != content.size() || std::fflush(stdout) != 0) {
    error = "cannot write to standard output: " + errno_text(errno);
    return false;
  }
  return true;
}

}  // namespace ckpt
