#include "io/lockstep_hasher.h"

#include <algorithm>

#include "io/hash.h"

namespace ckpt {

LockstepHasher::LockstepHasher(std::vector<const InputFile*> files, std::vector<std::string> names, size_t lead,
                               unsigned threads)
    : files_(std::move(files)), results_(files_.size()), lead_(lead), finished_(files_.size(), false) {
  for (size_t k = 0; k < results_.size(); ++k) results_[k].name = k < names.size() ? names[k] : files_[k]->path();
  threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(std::max<size_t>(1, files_.size()))));
  for (unsigned t = 0; t < threads; ++t) threads_.emplace_back([this] { work(); });
}

LockstepHasher::~LockstepHasher() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void LockstepHasher::reached(size_t k) {
  std::unique_lock lock(mutex_);
  reached_ = std::max(reached_, k);
  cv_.notify_all();
  cv_.wait(lock, [&] { return stopping_ || done_prefix_ >= std::min(k, files_.size()); });
  lock.unlock();
  // File k - 1 is hashed and converted: its pages are of no more use to either reader.
  // Dropped, they leave the page cache to the two files being read (the kernel would
  // otherwise keep the pages read twice and evict the ones read once: the next file's,
  // which the other reader still needs).
  if (k >= 1 && k - 1 < files_.size()) files_[k - 1]->advise_done();
}

void LockstepHasher::release() {
  {
    std::lock_guard lock(mutex_);
    released_ = true;
  }
  cv_.notify_all();
}

size_t LockstepHasher::started() const {
  std::lock_guard lock(mutex_);
  return next_;
}

size_t LockstepHasher::hashed_prefix() const {
  std::lock_guard lock(mutex_);
  return done_prefix_;
}

void LockstepHasher::work() {
  for (;;) {
    size_t k = 0;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || (next_ < files_.size() && (released_ || next_ <= reached_ + lead_)); });
      if (stopping_) return;
      k = next_++;
    }
    hash_one(k);
    {
      std::lock_guard lock(mutex_);
      ++done_;
      finished_[k] = true;
      while (done_prefix_ < finished_.size() && finished_[done_prefix_]) ++done_prefix_;
    }
    cv_.notify_all();
  }
}

void LockstepHasher::hash_one(size_t k) {
  const InputFile& file = *files_[k];
  HashedFile& out = results_[k];  // this thread's alone until done_ counts it
  out.size = file.size();
  FileIdentity before, after;
  std::string error;
  if (!identity_of_fd(file.fd(), before)) {
    out.error = "cannot stat it";
  } else if (std::string why = file_change(file.identity_at_open(), before); !why.empty()) {
    out.error = "it changed after the conversion opened it, before it was hashed: " + why;
  } else if (!sha256_file(file, out.sha256, error)) {
    out.error = "cannot read it: " + error;
  } else if (!identity_of_fd(file.fd(), after)) {
    out.error = "cannot stat it";
  } else if (std::string why = file_change(before, after); !why.empty()) {
    out.error = "it changed while it was hashed: " + why;
  }
  if (!out.error.empty()) out.sha256.clear();
}

std::vector<HashedFile> LockstepHasher::finish() {
  release();
  {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return done_ == files_.size(); });
  }
  std::vector<HashedFile> out = results_;
  for (size_t k = 0; k < out.size(); ++k) {
    if (!out[k].error.empty()) continue;
    if (std::string why = files_[k]->change_since_open(); !why.empty()) {
      out[k].error = "it changed after it was hashed, while it was converted: " + why;
      out[k].sha256.clear();
    }
  }
  return out;
}

}  // namespace ckpt
