#include "io/atomic_file.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "io/direct_writer.h"
#include "io/hash.h"

namespace ckpt {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

std::atomic<DirectorySync> g_directory_sync{nullptr};

// --- the live-temporary registry, read by the signal handler -------------------------
// A fixed table: the handler may neither allocate nor lock. A slot is published with
// kReady only after its path is complete, and cleared after the temporary is renamed or
// removed, so the handler unlinks at worst a name that no longer exists.
constexpr int kSlots = 64;
constexpr int kFree = 0, kFilling = 1, kReady = 2;

struct TempSlot {
  std::atomic<int> state{kFree};
  char path[PATH_MAX];
};
TempSlot g_slots[kSlots];

int register_temp(const std::string& path) {
  if (path.size() >= PATH_MAX) return -1;  // still removed by its owner and by a later run
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kFilling)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(kReady, std::memory_order_release);
    return i;
  }
  return -1;
}

void unregister_temp(int slot) {
  if (slot >= 0) g_slots[slot].state.store(kFree, std::memory_order_release);
}

extern "C" void remove_temps_and_die(int sig) {
  const int saved = errno;
  for (auto& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == kReady) ::unlink(s.path);
  errno = saved;
  // Die of the signal itself, so a parent (a shell loop, make) sees that we were interrupted.
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // blocked until we return; then the default action ends the process
}

// --- names ----------------------------------------------------------------------------
std::string hex_of(uint64_t v, int digits) {
  static const char* hex = "0123456789abcdef";
  std::string s(static_cast<size_t>(digits), '0');
  for (int i = digits - 1; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = hex[v & 15];
  return s;
}

std::string name_tag(std::string_view dest_name) {
  Xxh3 h;
  h.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(dest_name.data()), dest_name.size()));
  return hex_of(h.digest(), 16);
}

uint32_t random_u32() {
  uint32_t v = 0;
  if (::getrandom(&v, sizeof v, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof v)) return v;
  static std::atomic<uint32_t> counter{0};  // no entropy yet (early boot): still unique per process
  auto now = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return static_cast<uint32_t>(now ^ (now >> 32)) ^ (static_cast<uint32_t>(::getpid()) << 12) ^ counter++;
}

bool all_of(std::string_view s, const char* allowed) { return s.find_first_not_of(allowed) == std::string_view::npos; }

constexpr const char* kHexDigits = "0123456789abcdef";
constexpr size_t kTempNameSize = 10 + 16 + 1 + 8;  // kTempPrefix, tag, '-', random

// ".<dest>.tmp.<pid>" (0.1.0); `dest` empty: any destination.
bool is_legacy_temp(std::string_view name, std::string_view dest) {
  const size_t at = name.rfind(".tmp.");
  if (name.size() < 2 || name[0] != '.' || at == std::string_view::npos || at + 5 >= name.size()) return false;
  if (!all_of(name.substr(at + 5), "0123456789")) return false;
  return dest.empty() || name.substr(1, at - 1) == dest;
}

int sync_fd(int fd) {
  DirectorySync hook = g_directory_sync.load();
  return hook ? hook(fd) : ::fsync(fd);
}

}  // namespace

bool is_temp_name(std::string_view name) {
  if (name.size() == kTempNameSize && name.starts_with(kTempPrefix) && name[26] == '-')
    return all_of(name.substr(10, 16), kHexDigits) && all_of(name.substr(27), kHexDigits);
  return is_legacy_temp(name, "");
}

bool is_temp_for(std::string_view name, std::string_view dest_name) {
  if (name.size() == kTempNameSize && name.starts_with(kTempPrefix))
    return is_temp_name(name) && name.substr(10, 16) == name_tag(dest_name);
  return is_legacy_temp(name, dest_name);
}

bool sync_directory(const std::string& dir, std::string& error) {
  const std::string path = dir.empty() ? "." : dir;
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    error = "cannot open directory " + path + " to fsync it: " + errno_text(errno);
    return false;
  }
  const int rc = sync_fd(fd);
  const int err = errno;
  ::close(fd);
  // A filesystem that cannot fsync a directory at all (some FUSE ones: EINVAL, ENOTSUP)
  // offers no stronger guarantee to wait for; anything else (EIO, ENOSPC) is a failure.
  if (rc != 0 && err != EINVAL && err != ENOTSUP) {
    error = "fsync of directory " + path + " failed: " + errno_text(err);
    return false;
  }
  return true;
}

bool create_directories_durable(const std::string& dir, std::string& error, mode_t mode) {
  namespace fs = std::filesystem;
  fs::path target = fs::path(dir).lexically_normal();
  std::vector<fs::path> missing;
  for (fs::path p = target; !p.empty(); p = p.parent_path()) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode) && !(S_ISLNK(st.st_mode) && fs::is_directory(p))) {
        error = "cannot create " + dir + ": " + p.string() + " exists and is not a directory";
        return false;
      }
      break;
    }
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), mode) != 0 && !(errno == EEXIST && fs::is_directory(*it))) {
      error = "cannot create directory " + it->string() + ": " + errno_text(errno);
      return false;
    }
    if (!sync_directory(it->parent_path().string(), error)) return false;
  }
  return true;
}

void install_signal_cleanup() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  struct sigaction sa {};
  sa.sa_handler = remove_temps_and_die;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&sa.sa_mask, s);  // one cleanup at a time
  for (int s : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    // A signal ignored by our parent (nohup, `trap '' INT`) stays ignored.
    if (::sigaction(s, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(s, &sa, nullptr);
  }
}

size_t live_temporaries() {
  size_t n = 0;
  for (auto& s : g_slots) n += s.state.load() == kReady;
  return n;
}

void set_directory_sync_for_testing(DirectorySync sync) { g_directory_sync.store(sync); }

AtomicOutput::AtomicOutput(const std::string& dest, mode_t mode, OutputUse use)
    : dest_(dest), mode_(mode), use_(use) {}

AtomicOutput::~AtomicOutput() {
  writer_.reset();  // its writes in flight end before the file is closed and removed
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && opened_) ::unlink(tmp_.c_str());
  forget();
}

void AtomicOutput::forget() {
  unregister_temp(slot_);
  slot_ = -1;
}

bool AtomicOutput::open(std::string& error) {
  std::filesystem::path p(dest_);
  const std::string prefix = std::string(kTempPrefix) + name_tag(p.filename().string()) + "-";
  for (int attempt = 0; attempt < 16; ++attempt) {
    tmp_ = (p.parent_path() / (prefix + hex_of(random_u32(), 8))).string();
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode_);
    if (fd_ >= 0) break;
    if (errno != EEXIST) break;
  }
  if (fd_ < 0) {
    error = "cannot create " + tmp_ + " (temporary for " + dest_ + "): " + errno_text(errno);
    return false;
  }
  opened_ = true;
  slot_ = register_temp(tmp_);
  // Its messages name the destination (what the user asked for), not the hidden temporary.
  if (use_ == OutputUse::bulk) writer_ = std::make_unique<DirectWriter>(fd_, dest_);
  return true;
}

bool AtomicOutput::direct() const { return writer_ && writer_->direct(); }

bool AtomicOutput::reserve(uint64_t bytes, std::string& error) { return !writer_ || writer_->reserve(bytes, error); }

constexpr uint64_t kWritebackWindow = 64ull << 20;

bool AtomicOutput::write(const uint8_t* data, size_t len, std::string& error) {
  if (writes_ended_) {
    error = "internal: write to " + tmp_ + " after its last write";
    return false;
  }
  if (writer_) return writer_->write(data, len, error);
  written_ += len;
  while (len > 0) {
    ssize_t n = ::write(fd_, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = "cannot write " + tmp_ + ": " + errno_text(n < 0 ? errno : EIO);
      return false;
    }
    data += n;
    len -= static_cast<size_t>(n);
  }
  if (written_ - flush_started_ >= kWritebackWindow) {
    // Best effort (not every filesystem supports it); fsync in commit() is what counts.
    ::sync_file_range(fd_, static_cast<off_t>(flush_started_), static_cast<off_t>(written_ - flush_started_),
                      SYNC_FILE_RANGE_WRITE);
    flush_started_ = written_;
  }
  return true;
}

bool AtomicOutput::end_writes(std::string& error) {
  writes_ended_ = true;
  if (!writer_) return true;
  const bool ok = writer_->finish(error);
  writer_.reset();
  return ok;
}

bool AtomicOutput::commit(std::string& error) {
  if (!end_writes(error)) return false;
  if (::fsync(fd_) != 0) {
    error = "fsync " + tmp_ + " failed: " + errno_text(errno);
    return false;
  }
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    error = "close " + tmp_ + " failed: " + errno_text(errno);
    return false;
  }
  if (::rename(tmp_.c_str(), dest_.c_str()) != 0) {
    error = "cannot rename " + tmp_ + " to " + dest_ + ": " + errno_text(errno);
    return false;
  }
  committed_ = true;
  forget();  // after the rename: a signal in between unlinks a name that is gone
  std::string dir_error;
  if (!sync_directory(std::filesystem::path(dest_).parent_path().string(), dir_error)) {
    error = dest_ + " was renamed into place but the rename is not durable: " + dir_error;
    return false;
  }
  return true;
}

// An existing non-regular target (/dev/null, a FIFO, a terminal) is written in place:
// renaming a temporary over it would replace the device node with a regular file.
bool write_in_place(const std::string& path, std::string_view content, std::string& error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    error = "cannot open " + path + ": " + errno_text(errno);
    return false;
  }
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = "cannot write " + path + ": " + errno_text(errno);
      ::close(fd);
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return ::close(fd) == 0 || (error = "cannot close " + path + ": " + errno_text(errno), false);
}

bool write_file_atomic(const std::string& path, std::string_view content, std::string& error) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return write_in_place(path, content, error);
  AtomicOutput out(path);
  if (!out.open(error)) return false;
  if (!out.write(reinterpret_cast<const uint8_t*>(content.data()), content.size(), error)) return false;
  return out.commit(error);
}

bool write_report(const std::string& target, std::string_view content, std::string& error) {
  if (target != "-") return write_file_atomic(target, content, error);
  if (std::fwrite(content.data(), 1, content.size(), stdout) != content.size() || std::fflush(stdout) != 0) {
    error = "cannot write to standard output: " + errno_text(errno);
    return false;
  }
  return true;
}

}  // namespace ckpt
