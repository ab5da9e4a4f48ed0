#include "io/mapped_file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ckpt {

MappedFile::MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    close();
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    data_ = o.data_;
    size_ = o.size_;
    o.fd_ = -1;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() { close(); }

void MappedFile::close() {
  if (data_ != nullptr) munmap(data_, static_cast<size_t>(size_));
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  fd_ = -1;
  size_ = 0;
}

static bool fail(IoError& error, const std::string& path, const char* what, int err) {
  error = IoError{path, err, std::string(what) + ": " + std::strerror(err)};
  return false;
}

bool MappedFile::open(const std::string& path, IoError& error) {
  close();
  path_ = path;
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) return fail(error, path, "cannot open", errno);
  struct stat st {};
  if (fstat(fd_, &st) != 0) return fail(error, path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode)) {
    error = IoError{path, 0, "not a regular file"};
    return false;
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ == 0) return true;
  if (size_ > SIZE_MAX) {
    error = IoError{path, 0, "file too large to map on this host"};
    return false;
  }
  void* p = mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_PRIVATE, fd_, 0);
  if (p == MAP_FAILED) return fail(error, path, "cannot mmap", errno);
  data_ = static_cast<uint8_t*>(p);
  return true;
}

bool MappedFile::read_at(uint64_t offset, std::span<uint8_t> buf, IoError& error) const {
  size_t done = 0;
  while (done < buf.size()) {
    ssize_t n = pread(fd_, buf.data() + done, buf.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(error, path_, "read failed", errno);
    }
    if (n == 0) {
      error = IoError{path_, 0, "unexpected end of file at byte " + std::to_string(offset + done)};
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

void MappedFile::advise_sequential() const {
  if (data_ != nullptr) madvise(data_, static_cast<size_t>(size_), MADV_SEQUENTIAL);
  if (fd_ >= 0) posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
}

}  // namespace ckpt
