#include "io/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "io/atomic_file.h"

namespace ckpt {
namespace fs = std::filesystem;
namespace {

bool is_special(const struct stat& st) { return !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode); }

bool write_fd_all(int fd, const void* data, size_t len) {
  const auto* p = static_cast<const char*>(data);
  while (len > 0) {
    const ssize_t n = ::write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

std::string shown(const std::string& target) { return target == "-" ? std::string("standard output") : target; }

}  // namespace

void InputSet::add_file(const std::string& path) { add(path, false); }

// A file lets group / others read it by its read bits; a directory by its search bits
// (who cannot enter it cannot read what it holds, whatever the files' bits say).
void InputSet::narrow_readers(mode_t st_mode) {
  mode_t grants = 0;
  if (S_ISDIR(st_mode)) {
    if (st_mode & S_IXGRP) grants |= S_IRGRP;
    if (st_mode & S_IXOTH) grants |= S_IROTH;
  } else {
    grants = st_mode & (S_IRGRP | S_IROTH);
  }
  readers_ &= grants;
}

mode_t InputSet::output_mode() const { return (kOutputFileMode & ~mode_t{0044}) | (kOutputFileMode & readers_); }

mode_t output_directory_mode(mode_t file_mode) {
  mode_t mode = 0700;
  if (file_mode & S_IRGRP) mode |= 0050;
  if (file_mode & S_IROTH) mode |= 0005;
  return mode;
}

void InputSet::add(const std::string& path, bool expand_dir) {
  if (path.empty() || path == "-") return;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  narrow_readers(st.st_mode);
  const bool dir = S_ISDIR(st.st_mode);
  ids_.push_back(Id{st.st_dev, st.st_ino, dir, path});
  if (!dir || !expand_dir) return;
  // The files a directory lists, links followed: a shard may be a link into a blob store
  // (the Hugging Face cache), which an output elsewhere must not overwrite either.
  std::error_code ec;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    struct stat est {};
    const std::string p = it->path().string();
    if (::stat(p.c_str(), &est) == 0 && S_ISREG(est.st_mode)) {
      ids_.push_back(Id{est.st_dev, est.st_ino, false, p});
      narrow_readers(est.st_mode);
    }
  }
}

void InputSet::add_checkpoint(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    add(path, true);
    return;
  }
  add_file(path);
  const fs::path p(path);
  if (p.extension() == ".safetensors") {
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    if (fs::exists(dir / "model.safetensors.index.json", ec)) add(dir.string(), true);
  }
}

std::string InputSet::conflict(const std::string& output) const {
  if (ids_.empty() || output.empty()) return "";
  struct stat st {};
  const bool exists = output == "-" ? ::fstat(STDOUT_FILENO, &st) == 0 : ::stat(output.c_str(), &st) == 0;
  if (exists && (output != "-" || S_ISREG(st.st_mode)))
    for (const auto& id : ids_)
      if (id.dev == st.st_dev && id.ino == st.st_ino)
        return "refusing to write " + shown(output) + ": it is the input " + (id.dir ? "directory " : "") + id.path;
  if (output == "-") return "";
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(output, ec), ec);
  if (ec) return "";
  for (fs::path q = p.parent_path(); !q.empty(); q = q.parent_path()) {
    struct stat qs {};
    if (::stat(q.c_str(), &qs) == 0)
      for (const auto& id : ids_)
        if (id.dir && id.dev == qs.st_dev && id.ino == qs.st_ino)
          return "refusing to write " + output + ": it lies inside the input directory " + id.path;
    if (q == q.root_path()) break;
  }
  return "";
}

Outcome write_output(const std::string& target, std::string_view content, const InputSet& inputs,
                     std::string& error) {
  OutputFile out(target, inputs);
  Outcome o = out.open(error);
  if (o != Outcome::ok) return o;
  if (!out.write(content.data(), content.size(), error)) return Outcome::io;
  return out.commit(error);
}

OutputFile::OutputFile(std::string target, const InputSet& inputs, OutputUse use)
    : target_(std::move(target)), inputs_(inputs), use_(use) {}

OutputFile::~OutputFile() {
  if (own_fd_ && fd_ >= 0) ::close(fd_);
}

Outcome OutputFile::open(std::string& error) {
  error = inputs_.conflict(target_);
  if (!error.empty()) return Outcome::usage;
  if (target_ == "-") {
    std::fflush(stdout);  // what stdio holds goes first
    fd_ = STDOUT_FILENO;
    return Outcome::ok;
  }
  struct stat st {};
  if (::stat(target_.c_str(), &st) == 0 && is_special(st)) {
    // A device or FIFO is written in place: a rename would replace the node itself.
    fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) {
      error = "cannot open " + target_ + ": " + std::strerror(errno);
      return Outcome::io;
    }
    own_fd_ = true;
    return Outcome::ok;
  }
  atomic_ = std::make_unique<AtomicOutput>(target_, inputs_.output_mode(), use_);
  if (!atomic_->open(error)) return Outcome::io;
  fd_ = atomic_->fd();
  return Outcome::ok;
}

bool OutputFile::write(const void* data, size_t len, std::string& error) {
  if (atomic_) return atomic_->write(static_cast<const uint8_t*>(data), len, error);
  if (write_fd_all(fd_, data, len)) return true;
  error = "cannot write " + shown(target_) + ": " + std::strerror(errno);
  return false;
}

Outcome OutputFile::commit(std::string& error) {
  if (atomic_) return atomic_->commit(error) ? Outcome::ok : Outcome::io;
  if (own_fd_) {
    const int fd = fd_;
    fd_ = -1;
    own_fd_ = false;
    if (::close(fd) != 0) {
      error = "cannot close " + target_ + ": " + std::strerror(errno);
      return Outcome::io;
    }
  }
  return Outcome::ok;
}

}  // namespace ckpt
