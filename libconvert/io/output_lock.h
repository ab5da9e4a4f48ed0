// Advisory locks on output directories: flock(2) on a lock file, taken without waiting
// and held until the object dies (or the process does: the kernel drops it, so a killed
// run never leaves a stale lock). The holder writes "pid <pid> <what>" into the file, so
// a refused run can name it. flock works across hosts on NFS (Linux emulates it with
// byte-range locks there), which is what partitioned runs on a cluster share.
#pragma once

#include <string>

namespace ckpt {

class FileLock {
 public:
  enum class Mode { exclusive, shared };
  enum class Result { acquired, busy, error };

  FileLock() = default;
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  FileLock(FileLock&& o) noexcept;
  FileLock& operator=(FileLock&& o) noexcept;

  // Creates `path` if missing (never through a symlink) and locks it. busy: another
  // process holds a conflicting lock; `message` then names its pid and what it runs
  // ("pid 4242 ckpt convert"), as far as the file tells. `what` is written for others.
  Result acquire(const std::string& path, Mode mode, const std::string& what, std::string& message);
  void release();
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace ckpt
