// Writing outputs safely: a short hidden temporary beside the destination, created
// exclusively (O_EXCL | O_NOFOLLOW), fsync, rename, fsync of the directory (a failure
// of that last fsync is reported, not ignored). An interrupted run never leaves a
// partial file at the final name, a failed write removes its temporary, and a SIGINT,
// SIGTERM or SIGHUP removes every live temporary of the process before it dies of the
// signal (install_signal_cleanup).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace ckpt {

// The permission bits an output file is created with unless its command asks for fewer
// (io/output_file.h InputSet::output_mode: never more readable than its inputs); the
// umask applies on top, as for any open(2).
inline constexpr mode_t kOutputFileMode = 0644;

// Temporaries are named ".ckpt-tmp-<16 hex>-<8 hex>": the first part is the xxh3 of the
// destination's file name (so a run can tell its own stale temporaries from those of a
// concurrent partition), the second is random. 35 bytes whatever the destination's name,
// so a destination name of up to NAME_MAX (255) bytes still has a temporary.
inline constexpr std::string_view kTempPrefix = ".ckpt-tmp-";

class DirectWriter;

// What an output is: a small file (report, index, record: plain writes) or bulk data (a
// shard, an expert pack, a dump: io/direct_writer.h, O_DIRECT with writes in flight).
enum class OutputUse { small, bulk };

// Owns a temporary beside the destination until commit(); removes it otherwise.
class AtomicOutput {
 public:
  // The temporary (and so the file renamed into place) is created with `mode`.
  explicit AtomicOutput(const std::string& dest, mode_t mode = kOutputFileMode, OutputUse use = OutputUse::small);
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  bool open(std::string& error);
  int fd() const { return fd_; }
  // Bulk, after open() and before the first write: the output's planned size, its blocks
  // allocated now (DirectWriter::reserve: in-flight writes need not extend the file; a full
  // disk is said before anything is written). Small: nothing.
  bool reserve(uint64_t bytes, std::string& error);
  // Writes all of `data`. A small output: every 64 MiB it asks the kernel to start writing
  // back what came before (sync_file_range), so the final fsync has little left. A bulk
  // output: through its DirectWriter (data copied, written in the background; an error
  // may surface at a later write or at commit).
  bool write(const uint8_t* data, size_t len, std::string& error);
  // (bulk: the last writes, the file cut to its true size) fsync, close, rename over the
  // destination, fsync the directory. A failed directory fsync returns false (the file is
  // renamed, but the rename may not survive a crash).
  bool commit(std::string& error);
  // Bulk: the last writes now (the file at its true size, the write buffers freed), for an
  // output finished long before its commit; nothing may be written after. Small: nothing.
  bool end_writes(std::string& error);
  const std::string& temp_path() const { return tmp_; }
  // Bulk output written with O_DIRECT now (false: small, --buffered, or the fallback).
  bool direct() const;

 private:
  void forget();  // drops the temporary from the signal-cleanup registry
  std::string dest_, tmp_;
  mode_t mode_ = kOutputFileMode;
  OutputUse use_ = OutputUse::small;
  std::unique_ptr<DirectWriter> writer_;  // bulk only, from open() to commit()
  int fd_ = -1;
  int slot_ = -1;              // registry slot (-1: not registered)
  uint64_t written_ = 0;       // bytes written so far
  uint64_t flush_started_ = 0; // writeback requested up to here
  bool opened_ = false;
  bool committed_ = false;
  bool writes_ended_ = false;
};

// A small text file (report, index, config) written with the discipline above.
// An existing device or FIFO target (/dev/null) is written in place instead.
bool write_file_atomic(const std::string& path, std::string_view content, std::string& error);

// A report destination as the CLIs take it: "-" is standard output (flushed), anything else a
// file written with write_file_atomic.
bool write_report(const std::string& target, std::string_view content, std::string& error);

// A temporary of ckptkit: ".ckpt-tmp-<16 hex>-<8 hex>", or the ".<name>.tmp.<pid>" of 0.1.0.
bool is_temp_name(std::string_view name);
// A temporary (either form) whose destination is the file named `dest_name` (no directory).
bool is_temp_for(std::string_view name, std::string_view dest_name);

// fsync of a directory: makes renames, creations and removals in it durable.
bool sync_directory(const std::string& dir, std::string& error);
// mkdir -p where every directory created is made durable (its parent fsynced); the
// directories created get `mode` (less the umask).
bool create_directories_durable(const std::string& dir, std::string& error, mode_t mode = 0755);

// SIGINT, SIGTERM and SIGHUP: unlink every live temporary of this process (async-signal-
// safe: a fixed table of paths, unlink(2) only), then die of the same signal with its
// default action (a shell reports 130, 143, 129). Idempotent; the apps call it once.
void install_signal_cleanup();
// Live temporaries the signal handler would remove now (tests).
size_t live_temporaries();

// Test seam: replaces fsync(2) for directories (nullptr restores it).
using DirectorySync = int (*)(int fd);
void set_directory_sync_for_testing(DirectorySync sync);

}  // namespace ckpt
