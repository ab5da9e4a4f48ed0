// The one way an input is opened and read (every shard, config.json, tokenizer and side
// file, .gguf, index, expert pack, hash list): read-only, never written, never mapped.
//
// open_input_fd opens O_RDONLY|O_CLOEXEC|O_NONBLOCK (O_NOFOLLOW too when a link is not
// allowed), fstat()s the descriptor and refuses anything that is not a regular file (a
// FIFO, socket or device would block or never end) before a single byte is read, then
// clears O_NONBLOCK. Reads go through pread(): a file truncated under us is an error
// naming the file and the offset (IO_READ), never a SIGBUS as with a mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ckpt {

struct IoError {
  std::string path;
  int err = 0;          // errno, 0 when not from a system call
  std::string message;  // "cannot open: No such file or directory"
};

enum class InputLinks { follow, refuse };

// What the kernel says of an open file: a change between two of these is a change of
// the file (its bytes, its size, or the file a path names). A write sets mtime and ctime,
// and no unprivileged process can set a ctime back.
struct FileIdentity {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};
bool identity_of_fd(int fd, FileIdentity& out);
bool identity_of_path(const std::string& path, FileIdentity& out);
// Why `now` is not the file `then` describes ("its size changed from A to B bytes", "it was
// written (mtime/ctime changed)", "its path now names another file (replaced)"), or "".
std::string file_change(const FileIdentity& then, const FileIdentity& now);

// What a file of mode `m` is, for messages ("a FIFO", "a symlink", ...; "not a regular
// file" for anything else that is not one): the one wording of every non-regular-file refusal.
const char* file_kind_name(mode_t m);

// An open descriptor for `path` by the rules above, or -1 with `error` filled. `mode`
// (when not null) receives st_mode, `size` st_size.
int open_input_fd(const std::string& path, IoError& error, InputLinks links = InputLinks::follow,
                  mode_t* mode = nullptr, uint64_t* size = nullptr);

// Reads a whole small input (config.json, index, manifest, list) of at most `limit` bytes
// through open_input_fd. False with `error` set when it cannot be opened, is not a regular
// file, is larger than `limit` (error.err == EFBIG) or a read fails.
bool read_input_file(const std::string& path, uint64_t limit, std::string& text, IoError& error,
                     InputLinks links = InputLinks::follow);

class InputFile {
 public:
  InputFile() = default;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  InputFile(InputFile&& o) noexcept;
  InputFile& operator=(InputFile&& o) noexcept;
  ~InputFile();

  // Opens `path` through open_input_fd. False with `error` filled on failure.
  bool open(const std::string& path, IoError& error, InputLinks links = InputLinks::follow);

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }  // st_size at open
  int fd() const { return fd_; }
  mode_t mode() const { return mode_; }  // st_mode at open (permission bits for copies)
  // The file as it was when opened, before any byte was read (io/lockstep_hasher.h
  // compares it with the file at the end of a conversion).
  const FileIdentity& identity_at_open() const { return opened_; }
  // Why the file is not the one opened any more (written, resized, its path replaced or
  // gone: file_change), or "" when it still is.
  std::string change_since_open() const;
  // Reads exactly buf.size() bytes at `offset` with pread (retrying short reads and EINTR).
  // A read past the end (the file shrank) is an error naming the file and the offset.
  bool read_at(uint64_t offset, std::span<uint8_t> buf, IoError& error) const;
  // Bytes [offset, offset + len) into `out` (resized); false with `error` on failure.
  bool read_range(uint64_t offset, uint64_t len, std::vector<uint8_t>& out, IoError& error) const;
  // The same, returning the bytes (empty when the read failed): for tests and small reads
  // whose failure the caller detects by size.
  std::vector<uint8_t> read_bytes(uint64_t offset, uint64_t len) const;
  // Hint sequential access (POSIX_FADV_SEQUENTIAL). Best effort.
  void advise_sequential() const;
  // Done with the file's bytes: its clean pages may leave the page cache
  // (POSIX_FADV_DONTNEED; nothing is written). Best effort.
  void advise_done() const;

 private:
  void close();
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  mode_t mode_ = 0;
  FileIdentity opened_;
};

// Reads one input's bytes in bounded chunks for random small reads: a small cache of
// the last chunk read, so header walks and padding checks cost one pread per chunk.
class InputWindow {
 public:
  explicit InputWindow(const InputFile& file, size_t chunk = size_t{1} << 20) : file_(file), chunk_(chunk) {}
  // Bytes [offset, offset + len) (len may exceed the chunk: the window grows to fit).
  // The span is valid until the next call. False with `error` on a failed read.
  bool get(uint64_t offset, uint64_t len, std::span<const uint8_t>& out, IoError& error);

 private:
  const InputFile& file_;
  size_t chunk_;
  std::vector<uint8_t> buf_;
  uint64_t start_ = 0;
};

}  // namespace ckpt
