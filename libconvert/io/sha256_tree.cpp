#include "io/sha256_tree.h"

#include <algorithm>
#include <mutex>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

namespace ckpt {
namespace {

constexpr uint64_t kTreeReadBlock = uint64_t{1} << 20;  // pread size (SHA-256 gains nothing from larger)

void put_u64be(uint8_t* p, uint64_t v) {
  for (int i = 7; i >= 0; --i) {
    p[i] = static_cast<uint8_t>(v);
    v >>= 8;
  }
}

}  // namespace

bool sha256_tree_chunk_size_ok(uint64_t chunk_size) {
  return chunk_size >= kSha256TreeMinChunk && chunk_size <= kSha256TreeMaxChunk && (chunk_size & (chunk_size - 1)) == 0;
}

uint64_t sha256_tree_chunk_count(uint64_t size, uint64_t chunk_size) {
  return size / chunk_size + (size % chunk_size != 0 ? 1 : 0);
}

Sha256Digest sha256_tree_root(uint64_t chunk_size, uint64_t size, std::span<const Sha256Digest> chunks) {
  Sha256 root;
  root.update(kSha256TreeScheme);
  uint8_t fields[1 + 8 + 8] = {0};  // the 0x00 separator, then the two sizes
  put_u64be(fields + 1, chunk_size);
  put_u64be(fields + 9, size);
  root.update(std::span<const uint8_t>(fields, sizeof fields));
  for (const auto& d : chunks) root.update(std::span<const uint8_t>(d.data(), d.size()));
  return root.digest();
}

bool sha256_tree_file(const InputFile& file, uint64_t chunk_size, std::vector<Sha256Digest>& chunks, IoError& error,
                      const std::atomic<bool>* stop, std::atomic<uint64_t>* hashed, uint64_t* error_offset) {
  const uint64_t size = file.size();
  const uint64_t n = sha256_tree_chunk_count(size, chunk_size);
  chunks.assign(static_cast<size_t>(n), Sha256Digest{});
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> first_failed{n};  // lowest chunk index whose read failed
  std::atomic<bool> stopped{false};
  std::mutex error_mutex;
  const uint64_t workers = std::min<uint64_t>(n, static_cast<uint64_t>(std::max(1, tbb::this_task_arena::max_concurrency())));
  // One task per worker, each taking the next chunk in file order until none is left.
  tbb::parallel_for(uint64_t{0}, workers, [&](uint64_t) {
    std::vector<uint8_t> buf(static_cast<size_t>(std::min(kTreeReadBlock, chunk_size)));
    for (uint64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      if (i > first_failed.load()) break;  // a lower chunk already failed
      const uint64_t start = i * chunk_size, end = std::min(size, start + chunk_size);
      Sha256 sha;
      bool ok = true;
      for (uint64_t pos = start; pos < end; pos += buf.size()) {
        if (stop != nullptr && stop->load(std::memory_order_relaxed)) {
          stopped = true;
          return;
        }
        const size_t len = static_cast<size_t>(std::min<uint64_t>(buf.size(), end - pos));
        IoError err;
        if (!file.read_at(pos, std::span<uint8_t>(buf.data(), len), err)) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (i < first_failed.load()) {
            first_failed = i;
            error = err;
            if (error_offset != nullptr) *error_offset = pos;
          }
          ok = false;
          break;
        }
        sha.update(std::span<const uint8_t>(buf.data(), len));
        if (hashed != nullptr) hashed->fetch_add(len, std::memory_order_relaxed);
      }
      if (!ok) break;
      chunks[static_cast<size_t>(i)] = sha.digest();
    }
  }, tbb::simple_partitioner());
  if (stopped.load()) {
    error = IoError{};
    return false;
  }
  return first_failed.load() == n;
}

}  // namespace ckpt
