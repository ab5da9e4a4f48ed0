#include "core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace ckpt {

ProgressMode progress_mode(bool quiet, bool force) {
  if (quiet) return ProgressMode::off;
  return force ? ProgressMode::forced : ProgressMode::automatic;
}

Progress::Progress(ProgressMode mode, std::string label, Unit unit, std::string items)
    : label_(std::move(label)), items_(std::move(items)), unit_(unit) {
  tty_ = isatty(STDERR_FILENO) != 0;
  enabled_ = mode == ProgressMode::forced || (mode == ProgressMode::automatic && tty_);
}

Progress::~Progress() { finish(); }

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (shown_ && tty_) std::fprintf(stderr, "\r%70s\r", "");
  shown_ = false;
}

void Progress::add(uint64_t n) {
  if (!enabled_) return;
  const uint64_t done = done_ += n;
  draw(done, total_.load(), false);
}

void Progress::update(uint64_t done, uint64_t total) {
  if (!enabled_) return;
  draw(done, total, total && done >= total);
}

void Progress::draw(uint64_t done, uint64_t total, bool last) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  const auto every = tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(5000);
  if (shown_ && !last && now - last_ < every) return;
  last_ = now;
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double pct = total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 0.0;
  char text[160];
  if (unit_ == Unit::bytes) {
    const double rate = secs > 0 ? static_cast<double>(done) / secs / 1e9 : 0.0;
    if (total)
      std::snprintf(text, sizeof text, "%s %.2f / %.2f GB (%.0f%%) %.2f GB/s", label_.c_str(),
                    static_cast<double>(done) / 1e9, static_cast<double>(total) / 1e9, pct, rate);
    else
      std::snprintf(text, sizeof text, "%s %.2f GB %.2f GB/s", label_.c_str(), static_cast<double>(done) / 1e9, rate);
  } else {
    std::snprintf(text, sizeof text, "%s %llu / %llu %s (%.0f%%)", label_.c_str(), static_cast<unsigned long long>(done),
                  static_cast<unsigned long long>(total), items_.c_str(), pct);
  }
  if (tty_)
    std::fprintf(stderr, "\r  %s   ", text);
  else
    std::fprintf(stderr, "progress: %s\n", text);
  shown_ = true;
}

}  // namespace ckpt
