#include "io/input_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ckpt {

namespace {

bool fail(IoError& error, const std::string& path, const std::string& what, int err) {
  error = IoError{path, err, what + ": " + std::strerror(err)};
  return false;
}

}  // namespace

const char* file_kind_name(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISLNK(m)) return "a symlink";
  return "not a regular file";
}

int open_input_fd(const std::string& path, IoError& error, InputLinks links, mode_t* mode, uint64_t* size) {
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  if (links == InputLinks::refuse) flags |= O_NOFOLLOW;
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    const int e = errno;
    if (e == ELOOP && links == InputLinks::refuse)
      error = IoError{path, e, "cannot open: it is a symlink, which is not allowed here"};
    else
      fail(error, path, "cannot open", e);
    return -1;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    fail(error, path, "cannot stat", errno);
    ::close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    error = IoError{path, 0, std::string("not a regular file (") + file_kind_name(st.st_mode) + "); it is not read"};
    ::close(fd);
    return -1;
  }
  const int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    fail(error, path, "cannot clear O_NONBLOCK", errno);
    ::close(fd);
    return -1;
  }
  if (mode) *mode = st.st_mode;
  if (size) *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

bool read_input_file(const std::string& path, uint64_t limit, std::string& text, IoError& error, InputLinks links) {
  InputFile f;
  if (!f.open(path, error, links)) return false;
  if (f.size() > limit) {
    error = IoError{path, EFBIG,
                    "is " + std::to_string(f.size()) + " bytes, more than the limit of " + std::to_string(limit)};
    return false;
  }
  text.assign(static_cast<size_t>(f.size()), '\0');
  return f.read_at(0, {reinterpret_cast<uint8_t*>(text.data()), text.size()}, error);
}

InputFile::InputFile(InputFile&& o) noexcept { *this = std::move(o); }

InputFile& InputFile::operator=(InputFile&& o) noexcept {
  if (this != &o) {
    close();
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    size_ = o.size_;
    mode_ = o.mode_;
    opened_ = o.opened_;
    o.fd_ = -1;
    o.size_ = 0;
  }
  return *this;
}

InputFile::~InputFile() { close(); }

void InputFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  size_ = 0;
}

namespace {
FileIdentity identity_of(const struct stat& st) {
  FileIdentity id;
  id.dev = static_cast<uint64_t>(st.st_dev);
  id.ino = static_cast<uint64_t>(st.st_ino);
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  id.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return id;
}
}  // namespace

bool identity_of_fd(int fd, FileIdentity& out) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  out = identity_of(st);
  return true;
}

bool identity_of_path(const std::string& path, FileIdentity& out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  out = identity_of(st);
  return true;
}

std::string file_change(const FileIdentity& then, const FileIdentity& now) {
  if (now.dev != then.dev || now.ino != then.ino) return "its path now names another file (replaced)";
  if (now.size != then.size)
    return "its size changed from " + std::to_string(then.size) + " to " + std::to_string(now.size) + " bytes";
  if (now.mtime_ns != then.mtime_ns || now.ctime_ns != then.ctime_ns) return "it was written (mtime/ctime changed)";
  return "";
}

std::string InputFile::change_since_open() const {
  FileIdentity now, path_now;
  if (fd_ < 0 || !identity_of_fd(fd_, now) || !identity_of_path(path_, path_now))
    return "it cannot be found or stat()ed any more";
  // The path first: a rename over it also changes the replaced file's ctime.
  if (path_now.dev != now.dev || path_now.ino != now.ino) return file_change(opened_, path_now);
  return file_change(opened_, now);
}

bool InputFile::open(const std::string& path, IoError& error, InputLinks links) {
  close();
  path_ = path;
  fd_ = open_input_fd(path, error, links, &mode_, &size_);
  if (fd_ >= 0) identity_of_fd(fd_, opened_);
  return fd_ >= 0;
}

bool InputFile::read_at(uint64_t offset, std::span<uint8_t> buf, IoError& error) const {
  if (fd_ < 0) {
    error = IoError{path_, EBADF, "read failed: the file is not open"};
    return false;
  }
  size_t done = 0;
  while (done < buf.size()) {
    ssize_t n = pread(fd_, buf.data() + done, buf.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(error, path_, "read failed at byte " + std::to_string(offset + done), errno);
    }
    if (n == 0) {
      error = IoError{path_, 0,
                      "unexpected end of file at byte " + std::to_string(offset + done) + " (the file was " +
                          std::to_string(size_) + " bytes when opened: truncated while being read?)"};
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

bool InputFile::read_range(uint64_t offset, uint64_t len, std::vector<uint8_t>& out, IoError& error) const {
  if (len > size_ || offset > size_ - len) {
    error = IoError{path_, 0,
                    "bytes [" + std::to_string(offset) + ", +" + std::to_string(len) + ") lie past the end of the " +
                        std::to_string(size_) + "-byte file"};
    return false;
  }
  out.resize(static_cast<size_t>(len));
  return read_at(offset, out, error);
}

std::vector<uint8_t> InputFile::read_bytes(uint64_t offset, uint64_t len) const {
  std::vector<uint8_t> out;
  IoError error;
  if (!read_range(offset, len, out, error)) out.clear();
  return out;
}

void InputFile::advise_sequential() const {
  if (fd_ >= 0) posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
}

void InputFile::advise_done() const {
  if (fd_ >= 0) posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
}

bool InputWindow::get(uint64_t offset, uint64_t len, std::span<const uint8_t>& out, IoError& error) {
  if (offset >= start_ && len <= buf_.size() && offset - start_ <= buf_.size() - len) {
    out = std::span<const uint8_t>(buf_).subspan(static_cast<size_t>(offset - start_), static_cast<size_t>(len));
    return true;
  }
  const uint64_t size = file_.size();
  if (len > size || offset > size - len) {
    error = IoError{file_.path(), 0,
                    "bytes [" + std::to_string(offset) + ", +" + std::to_string(len) + ") lie past the end of the " +
                        std::to_string(size) + "-byte file"};
    return false;
  }
  const uint64_t want = std::min<uint64_t>(std::max<uint64_t>(len, chunk_), size - offset);
  buf_.resize(static_cast<size_t>(want));
  start_ = offset;
  if (!file_.read_at(offset, buf_, error)) {
    buf_.clear();
    return false;
  }
  out = std::span<const uint8_t>(buf_).subspan(0, static_cast<size_t>(len));
  return true;
}

}  // namespace ckpt
