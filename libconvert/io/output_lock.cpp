#include "io/output_lock.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "io/atomic_file.h"

namespace ckpt {
namespace {

// The holder line is written at offset 0 in one fixed-width pwrite, so concurrent shared
// holders replace each other's line whole instead of interleaving bytes.
constexpr size_t kHolderBytes = 128;

std::string holder_of(int fd) {
  char buf[kHolderBytes] = {};
  ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  std::string text(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\n' || text.back() == '\0')) text.pop_back();
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7F) c = '?';
  return text.empty() ? "another process (it wrote no pid yet)" : text;
}

void write_holder(int fd, const std::string& what) {
  std::string line = "pid " + std::to_string(::getpid()) + " " + what;
  line.resize(kHolderBytes - 1, ' ');
  line += '\n';
  (void)!::pwrite(fd, line.data(), line.size(), 0);  // informational only
}

}  // namespace

FileLock::~FileLock() { release(); }

FileLock::FileLock(FileLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }

FileLock& FileLock::operator=(FileLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void FileLock::release() {
  if (fd_ >= 0) ::close(fd_);  // closing the only descriptor drops the flock
  fd_ = -1;
}

FileLock::Result FileLock::acquire(const std::string& path, Mode mode, const std::string& what, std::string& message) {
  release();
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    message = "cannot open lock file " + path + ": " + std::strerror(errno);
    return Result::error;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    message = "cannot use lock file " + path + ": it is not a regular file (ckptkit only ever creates one there)";
    ::close(fd);
    return Result::error;
  }
  int op = (mode == Mode::exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB;
  int rc;
  while ((rc = ::flock(fd, op)) != 0 && errno == EINTR) {
  }
  if (rc != 0) {
    int err = errno;
    if (err == EWOULDBLOCK) {
      message = holder_of(fd);
      ::close(fd);
      return Result::busy;
    }
    message = "cannot lock " + path + ": " + std::strerror(err);
    ::close(fd);
    return Result::error;
  }
  write_holder(fd, what);
  fd_ = fd;
  return Result::acquired;
}

std::string output_dir_lock_path(const std::string& dir) {
  return (std::filesystem::path(dir) / ".ckptkit" / "lock").string();
}

FileLock::Result lock_output_dir(const std::string& dir, FileLock::Mode mode, const std::string& what, FileLock& lock,
                                 std::string& message, mode_t dir_mode) {
  if (!create_directories_durable(dir, message, dir_mode)) return FileLock::Result::error;
  // DIR/.ckptkit is created, or used when it is a real directory; never followed: a link
  // there would put the lock and the run's records wherever it points.
  const std::string state = (std::filesystem::path(dir) / ".ckptkit").string();
  struct stat st {};
  if (::lstat(state.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    message = state + (S_ISLNK(st.st_mode) ? " is a symlink" : " is not a directory") +
              "; ckptkit keeps its lock and records in a directory of that name and does not follow or replace "
              "it (remove it, or choose another output directory)";
    return FileLock::Result::error;
  }
  if (!create_directories_durable(state, message)) return FileLock::Result::error;
  return lock.acquire(output_dir_lock_path(dir), mode, what, message);
}

bool output_dir_is_empty(const std::string& dir) {
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    if (it->path().filename() != ".ckptkit") return false;
  return true;
}

std::string output_dir_busy_message(const std::string& dir, const std::string& holder) {
  return dir + " is being written by another run (" + holder + "; lock " + output_dir_lock_path(dir) +
         "); wait for it to finish, or choose another output directory";
}

}  // namespace ckpt
