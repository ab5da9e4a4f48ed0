// uring_write_bench: O_DIRECT sequential write bandwidth of the two ways issue 33 names, on
// the same file system in the same run: (a) a pool of pwrite threads, as io/direct_writer.cpp
// (3 threads, 4 page-aligned buffers of 8 MiB: 3 requests in flight), and (b) io_uring from
// one thread with the same buffers and the same number of requests in flight (liburing).
// The buffers are filled by the submitting thread (a memcpy of 8 MiB per request, as the
// writer does); every run ends with fsync. Not part of the build: bench/write_direct.sh
// compiles it when liburing's header is present (Debian liburing-dev) and says "not
// measured" otherwise. ckptkit does not link liburing.
//
// Usage: uring_write_bench DIR [GIB] [IN_FLIGHT]   (defaults 1, 3); prints GB/s, best of 3
#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kBuf = 8u << 20;

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

int open_direct(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0) die("open O_DIRECT");
  return fd;
}

std::vector<uint8_t*> buffers(unsigned n) {
  std::vector<uint8_t*> b(n);
  for (auto& p : b) {
    p = static_cast<uint8_t*>(std::aligned_alloc(4096, kBuf));
    std::memset(p, 0x5A, kBuf);
  }
  return b;
}

// (a) the writer's way: the caller fills a free buffer, a pool thread writes it.
double pwrite_pool(const std::string& path, uint64_t requests, unsigned in_flight, const uint8_t* src) {
  const int fd = open_direct(path);
  auto bufs = buffers(in_flight + 1);
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<size_t, uint64_t>> pending;  // buffer, offset
  std::vector<size_t> free_list;
  for (size_t i = 0; i < bufs.size(); ++i) free_list.push_back(i);
  bool stop = false;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < in_flight; ++t)
    pool.emplace_back([&] {
      for (;;) {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stop || !pending.empty(); });
        if (pending.empty()) return;
        auto [i, off] = pending.front();
        pending.pop_front();
        lock.unlock();
        if (::pwrite(fd, bufs[i], kBuf, static_cast<off_t>(off)) != static_cast<ssize_t>(kBuf)) die("pwrite");
        lock.lock();
        free_list.push_back(i);
        cv.notify_all();
      }
    });
  for (uint64_t r = 0; r < requests; ++r) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return !free_list.empty(); });
    const size_t i = free_list.back();
    free_list.pop_back();
    lock.unlock();
    std::memcpy(bufs[i], src, kBuf);
    lock.lock();
    pending.emplace_back(i, r * kBuf);
    cv.notify_all();
  }
  {
    std::lock_guard lock(mu);
    stop = true;
  }
  cv.notify_all();
  for (auto& t : pool) t.join();
  if (::fsync(fd) != 0) die("fsync");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  for (auto* p : bufs) std::free(p);
  return s;
}

// (b) io_uring: the same buffers, at most `in_flight` writes queued, one thread.
double uring(const std::string& path, uint64_t requests, unsigned in_flight, const uint8_t* src) {
  const int fd = open_direct(path);
  auto bufs = buffers(in_flight + 1);
  io_uring ring;
  if (io_uring_queue_init(in_flight * 2, &ring, 0) != 0) die("io_uring_queue_init");
  std::vector<size_t> free_list;
  for (size_t i = 0; i < bufs.size(); ++i) free_list.push_back(i);
  unsigned queued = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto reap = [&](bool wait) {
    io_uring_cqe* cqe = nullptr;
    const int rc = wait ? io_uring_wait_cqe(&ring, &cqe) : io_uring_peek_cqe(&ring, &cqe);
    if (rc != 0 || !cqe) return false;
    if (cqe->res != static_cast<int>(kBuf)) {
      errno = cqe->res < 0 ? -cqe->res : EIO;
      die("io_uring write");
    }
    free_list.push_back(static_cast<size_t>(io_uring_cqe_get_data64(cqe)));
    io_uring_cqe_seen(&ring, cqe);
    --queued;
    return true;
  };
  for (uint64_t r = 0; r < requests; ++r) {
    while (reap(false)) {
    }
    // One buffer fills while `in_flight` are written.
    while (free_list.empty() || queued >= in_flight) reap(true);
    const size_t i = free_list.back();
    free_list.pop_back();
    std::memcpy(bufs[i], src, kBuf);
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_write(sqe, fd, bufs[i], kBuf, r * kBuf);
    io_uring_sqe_set_data64(sqe, i);
    io_uring_submit(&ring);
    ++queued;
  }
  while (queued > 0) reap(true);
  if (::fsync(fd) != 0) die("fsync");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  io_uring_queue_exit(&ring);
  ::close(fd);
  for (auto* p : bufs) std::free(p);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: uring_write_bench DIR [GIB] [IN_FLIGHT]\n");
    return 2;
  }
  const std::string path = std::string(argv[1]) + "/uring-bench.out";
  const double gib = argc > 2 ? std::atof(argv[2]) : 1.0;
  const unsigned in_flight = argc > 3 ? static_cast<unsigned>(std::max(1, std::atoi(argv[3]))) : 3;
  const uint64_t requests = std::max<uint64_t>(1, static_cast<uint64_t>(gib * (1u << 30) / kBuf));
  std::vector<uint8_t> src(kBuf, 0xA5);
  double best_pool = 1e30, best_uring = 1e30;
  for (int r = 0; r < 3; ++r) {  // interleaved: a noisy neighbour slows both alike
    best_pool = std::min(best_pool, pwrite_pool(path, requests, in_flight, src.data()));
    best_uring = std::min(best_uring, uring(path, requests, in_flight, src.data()));
  }
  ::unlink(path.c_str());
  const double bytes = static_cast<double>(requests * kBuf);
  std::printf("O_DIRECT writes of 8 MiB, %u in flight, %.2f GB, best of 3: pwrite pool %.2f GB/s, io_uring %.2f GB/s "
              "(io_uring / pool %.2f)\n",
              in_flight, bytes / 1e9, bytes / best_pool / 1e9, bytes / best_uring / 1e9, best_pool / best_uring);
  return 0;
}
