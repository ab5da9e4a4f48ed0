// A conversion's input files hashed in the same pass over the disk as the conversion
// (`convert --expect-signature` / `--hub-sha256`, issue 32: "the bytes are read once,
// hashed and converted").
//
// SHA-256 needs a file's bytes in file order; a conversion reads them in the output's
// order (a weight's rows, then its scale elsewhere in the file; tensors as the output lays
// them out: on dsv4-tiny 179 of 416 reads go backward), so one read() cannot serve both
// without holding a whole shard. Instead the files are hashed on threads of their own, in
// the order the conversion takes them, and never more than `lead` files ahead of it: the
// two readers of a file run side by side, whichever touches a page first reads it from the
// disk and the other finds it in the page cache. The conversion in turn waits for the
// hash to finish a file before it starts the next, so each side is at most a file ahead
// of the other, and the disk is read once as long as the page cache can hold lead + 1 files (measured by bench/convert_integrity.sh: the bytes
// the process read from the disk, against the input's size).
//
// That the bytes converted are the bytes hashed is checked, not assumed: the files are
// hashed through the conversion's own descriptors (the same inode, even if a path is
// replaced), and each file must be unchanged from the moment the conversion opened it
// (InputFile::identity_at_open, before its header was read) to the end of the conversion
// (finish): same size, mtime and ctime on the descriptor (a write changes the ctime, which
// no unprivileged process can set back), and its path still naming that inode. (A write
// within the file system's timestamp granularity of the open, a few milliseconds, can
// leave the times as they were; the size check still sees an append or a truncation.)
//
// Memory: `threads` read-ahead rings (io/read_ahead.h: 3 blocks of 4 MiB each).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "io/input_file.h"

namespace ckpt {

struct HashedFile {
  std::string name;    // as the caller named it (the shard's name in the checkpoint)
  uint64_t size = 0;
  std::string sha256;  // lowercase hex; "" when `error` says why not
  std::string error;   // "" when hashed and unchanged
};

class LockstepHasher {
 public:
  // `files[k]` (named `names[k]`) is the k-th file the conversion takes; the files must
  // stay open until the hasher is destroyed.
  LockstepHasher(std::vector<const InputFile*> files, std::vector<std::string> names, size_t lead = 1,
                 unsigned threads = 2);
  ~LockstepHasher();  // stops: files not yet started are left unhashed
  LockstepHasher(const LockstepHasher&) = delete;
  LockstepHasher& operator=(const LockstepHasher&) = delete;

  // The conversion starts file k: files up to k + lead may be started, and this waits
  // until every file before k is hashed, so that neither reader runs more than a file
  // ahead of the other (a hash slower than the conversion would otherwise fall behind by
  // more than the page cache holds, and read the disk again; measured).
  void reached(size_t k);
  // The conversion has read everything it will read: the rest may be hashed at once.
  void release();
  // release(), every file hashed, then each checked unchanged since before its hash.
  std::vector<HashedFile> finish();
  // Files started so far (a file is never started before the conversion is within `lead`).
  size_t started() const;
  // Files 0.. that are all hashed (or failed).
  size_t hashed_prefix() const;

 private:
  void work();
  void hash_one(size_t k);

  std::vector<const InputFile*> files_;
  std::vector<HashedFile> results_;
  size_t lead_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<bool> finished_;  // file k hashed (or failed)
  size_t next_ = 0, done_ = 0, reached_ = 0, done_prefix_ = 0;  // done_prefix_: files 0.. all finished
  bool released_ = false, stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ckpt
