// Writing a large output at the disk's speed without filling the page cache: the bytes
// are gathered into page-aligned buffers that a small pool of threads writes with
// O_DIRECT (several requests in flight), the last partial block is padded and the file
// cut back to its true size. A filesystem that refuses O_DIRECT (EINVAL from fcntl or
// from the first write) gets buffered writes instead, each buffer's range written back
// and dropped from the page cache (sync_file_range, posix_fadvise DONTNEED) before the
// buffer is reused; that fallback is said once per process (set_output_io_notice).
//
// The writer owns no name: io/atomic_file.h opens the temporary, fsyncs and renames it
// (AtomicOutput with OutputUse::bulk), so the temporary-name and resume rules are those of
// every other output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ckpt {

// How bulk outputs are written, for the whole process (the apps set it from --buffered).
enum class OutputIo {
  direct,    // O_DIRECT where the filesystem takes it, else the buffered fallback
  buffered,  // --buffered: the fallback always (page cache, dropped behind the writer)
};
void set_output_io(OutputIo io);
OutputIo output_io();

// Called once per process when a filesystem refuses O_DIRECT (not for --buffered), with
// the file and what happens; the apps print it on stderr (info IO_BUFFERED) unless -q.
// nullptr (the default): nothing is said.
using OutputIoNotice = void (*)(const std::string& file, const std::string& message);
void set_output_io_notice(OutputIoNotice notice);

// O_DIRECT alignment of buffers, offsets and lengths (covers 512-byte and 4 KiB sectors).
inline constexpr size_t kDirectAlign = 4096;
// One buffer: the size of one write request.
inline constexpr size_t kDirectBufferBytes = 8u << 20;
// Buffers per writer: one filling while the others are written (kDirectBuffers - 1 in flight).
inline constexpr unsigned kDirectBuffers = 4;
// The memory one writer holds at most (its buffers); callers count it in --memory-budget.
inline constexpr uint64_t kDirectWriterBytes = uint64_t{kDirectBuffers} * kDirectBufferBytes;

class DirectWriter {
 public:
  // `fd`: a regular file open for writing, empty, written from offset 0 by this writer
  // only. `name` (the destination the file becomes) is used in error messages.
  DirectWriter(int fd, std::string name);
  ~DirectWriter();  // waits for the writes in flight
  DirectWriter(const DirectWriter&) = delete;
  DirectWriter& operator=(const DirectWriter&) = delete;

  // Before the first write: the file's blocks allocated up to `bytes` (the caller's planned
  // size, rounded up to kDirectAlign) with fallocate. Every O_DIRECT write then lands inside
  // the file's size: ext4 and XFS run such writes side by side, while a write that extends
  // the file takes the inode lock alone, so the requests in flight to one file would run one
  // at a time. finish() cuts the file to the bytes written. A filesystem without fallocate
  // is no error (nothing reserved); a disk without the space is, now and not after gigabytes.
  bool reserve(uint64_t bytes, std::string& error);
  // Appends `len` bytes (copied: the caller may reuse `data` at once). A failed write of
  // an earlier buffer is reported here or by finish().
  bool write(const void* data, size_t len, std::string& error);
  // Writes what is left (the tail padded, then the file truncated to the bytes given) and
  // waits for every write. The caller fsyncs. Nothing may be written after.
  bool finish(std::string& error);
  // True while O_DIRECT is in use (false after a fallback or with OutputIo::buffered).
  bool direct() const;
  uint64_t written() const { return appended_; }

 private:
  struct State;
  bool write_tail(std::string& error);

  std::unique_ptr<State> s_;
  uint64_t appended_ = 0;
  uint64_t reserved_ = 0;  // the file's size after reserve()
};

// Test seams. A write request that would cover byte `offset` fails with EIO (0: off; also
// CKPT_TEST_WRITE_FAIL_AT=N in the environment).
void set_direct_write_failure_for_testing(uint64_t offset);
// Act as on a filesystem that refuses O_DIRECT (also CKPT_TEST_NO_DIRECT=1 in the
// environment); the notice may be said again after reset_output_io_notice_for_testing().
void set_refuse_direct_for_testing(bool refuse);
void reset_output_io_notice_for_testing();
// Files whose blocks reserve() allocated since the process started.
uint64_t reserved_outputs();
// Write requests issued with O_DIRECT / buffered since the process started.
uint64_t direct_write_requests();
uint64_t buffered_write_requests();

}  // namespace ckpt
