// Advisory locks on output directories: flock(2) on a lock file, taken without waiting
// and held until the object dies (or the process does: the kernel drops it, so a killed
// run never leaves a stale lock). The holder writes "pid <pid> <what>" into the file, so
// a refused run can name it. flock works across hosts on NFS (Linux emulates it with
// byte-range locks there), which is what partitioned runs on a cluster share.
//
// Every command that writes a directory (convert, repack-experts, synth) holds that
// directory's lock, DIR/.ckptkit/lock (lock_output_dir), from before it looks at what DIR
// holds ("is it empty?", "did ckptkit write it?") until its last rename: a check made
// without the lock could be stale by the time the run writes.
#pragma once

#include <string>
#include <sys/types.h>

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

  // Creates `path` if missing (never through a symlink; an existing lock file must be a
  // regular file: a FIFO there is an error, never a hang) and locks it. busy: another
  // process holds a conflicting lock; `message` then names its pid and what it runs
  // ("pid 4242 ckpt convert"), as far as the file tells. `what` is written for others.
  Result acquire(const std::string& path, Mode mode, const std::string& what, std::string& message);
  void release();
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// DIR/.ckptkit/lock.
std::string output_dir_lock_path(const std::string& dir);

// Creates DIR and DIR/.ckptkit when missing (durably; DIR with `dir_mode`), then takes the
// directory's lock without waiting. A DIR/.ckptkit that is a symlink or not a directory is
// an error, before anything is created in or through it. busy: `message` says who holds it ("pid 4242 ckpt synth");
// error: `message` says why it could not be taken.
FileLock::Result lock_output_dir(const std::string& dir, FileLock::Mode mode, const std::string& what, FileLock& lock,
                                 std::string& message, mode_t dir_mode = 0755);

// True when DIR has no entry but .ckptkit (a lock file taken by a run that wrote nothing yet
// leaves DIR "empty"). A missing DIR is empty too.
bool output_dir_is_empty(const std::string& dir);

// The message of a refused run: "DIR is being written by another run (HOLDER; lock
// DIR/.ckptkit/lock); wait for it to finish, or choose another output directory".
std::string output_dir_busy_message(const std::string& dir, const std::string& holder);

}  // namespace ckpt
