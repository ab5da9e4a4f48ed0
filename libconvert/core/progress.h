// The one progress meter of every command: a line on stderr, redrawn in place at most every
// 100 ms on a terminal; with --progress on a non-terminal (a Slurm log) a plain line every
// few seconds and one at the end; off with -q, and off by default when stderr is not a
// terminal. Thread-safe: add() and update() may be called from worker threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace ckpt {

enum class ProgressMode { automatic, off, forced };  // default, -q, --progress

// -q wins over --progress.
ProgressMode progress_mode(bool quiet, bool force);

class Progress {
 public:
  enum class Unit { bytes, items };
  // `label` leads the line ("validate", "verified"); `items` names the unit of Unit::items.
  Progress(ProgressMode mode, std::string label, Unit unit = Unit::bytes, std::string items = "tensors");
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool enabled() const { return enabled_; }
  void set_total(uint64_t total) { total_ = total; }
  void update(uint64_t done, uint64_t total);  // absolute
  void add(uint64_t n);                        // relative, against set_total()'s total
  void finish();                               // clears the terminal line (the destructor does too)

 private:
  void draw(uint64_t done, uint64_t total, bool last);
  bool enabled_ = false, tty_ = false, shown_ = false;
  std::string label_, items_;
  Unit unit_;
  std::atomic<uint64_t> done_{0}, total_{0};
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_{};
};

}  // namespace ckpt
