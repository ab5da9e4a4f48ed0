// Device lanes: how the GPU backend runs calls from many threads at once. A lane is a
// stream with its own pinned host staging and device buffers; LanePool hands out at most
// kLanes of them; DeviceBuffer and PinnedBuffer own device and page-locked host memory.
// Host code over the runtime API of gpu_compat.h (compiled by nvcc and hipcc), used by
// backend_gpu.cu and the benchmarks (gpu_bench.cu).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu_compat.h"
#include "verify/opening_backend.h"

namespace ckpt::gpu {

// A grow-only device buffer; the driver's chunking bounds its size.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }
  void* get(uint64_t bytes, std::string& error) {
    if (bytes <= size_ && ptr_) return ptr_;
    release();
    const gpuError_t e = gpuMalloc(&ptr_, std::max<uint64_t>(bytes, 256));
    if (e != gpuSuccess) {
      ptr_ = nullptr;
      error = std::string("device allocation of ") + std::to_string(bytes) + " bytes failed: " + gpuGetErrorString(e);
      return nullptr;
    }
    size_ = std::max<uint64_t>(bytes, 256);
    return ptr_;
  }
  void release() {
    if (ptr_) (void)gpuFree(ptr_);
    ptr_ = nullptr;
    size_ = 0;
  }

 private:
  void* ptr_ = nullptr;
  uint64_t size_ = 0;
};

inline bool check(gpuError_t e, const char* what, std::string& error) {
  if (e == gpuSuccess) return true;
  error = std::string(what) + ": " + gpuGetErrorString(e);
  return false;
}

// Page-locked host memory of a fixed size (the DMA engines read and write it directly, so
// copies from it are asynchronous). Empty when the allocation failed: its lane then copies
// from and to the caller's pageable memory (correct, synchronous, slower).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_) (void)gpuFreeHost(ptr_);
  }
  void allocate(uint64_t bytes) {
    void* p = nullptr;
    if (gpuMallocHost(&p, bytes) == gpuSuccess) {
      ptr_ = static_cast<uint8_t*>(p);
      size_ = bytes;
    } else {
      (void)gpuGetLastError();  // not sticky: clear it so the next call does not report it
    }
  }
  uint8_t* data() const { return ptr_; }
  uint64_t size() const { return size_; }

 private:
  uint8_t* ptr_ = nullptr;
  uint64_t size_ = 0;
};

// Lanes: one call of the backend runs on one lane from start to end, so calls from several
// threads overlap (concurrent() is true): each lane has its own stream, its own pinned
// staging buffers (kStageIn for the inputs, kStageOut for the outputs) and its own device
// buffers. A call copies its inputs into the pinned buffer, queues the H2D copies, the
// kernel and the D2H copies on the lane's stream, waits for that stream alone and copies
// the results out. Inputs or outputs larger than the staging buffers are copied from or to
// the caller's memory directly (pageable: correct, synchronous). At most kLanes lanes exist
// (made on first need), so the pinned host memory is at most kLanes x (kStageIn +
// kStageOut) = host_memory(); device memory is kLanes x the largest call's buffers. The
// output staging is pinned at a lane's first result larger than kSmallResult, not when the
// lane is made: a digest run brings back 16 bytes per call and never needs it, and pinning
// costs the device's open about 0.4 ms per MiB (H200 host: 128 MiB in 45-70 ms).
constexpr unsigned kLanes = 4;
constexpr uint64_t kStageIn = uint64_t{16} << 20, kStageOut = uint64_t{16} << 20, kSmallResult = 4096;
// Inputs are staged and queued in slices of this size: the DMA engine copies one slice to the
// device while the host stages the next (a call's copies overlap its own staging).
constexpr uint64_t kStageSlice = uint64_t{2} << 20;
// What the backend answers before and after it opens (OpeningBackend plans with it).
constexpr BackendTraits kGpuTraits{kStageIn, uint64_t{kLanes} * (kStageIn + kStageOut), true, true, true, true};

struct Lane {
  gpuStream_t stream{};
  PinnedBuffer host_in, host_out;
  DeviceBuffer in, aux, out;
  // This call's use of the staging buffers and the pinned results still to copy out.
  uint64_t in_used = 0, out_used = 0;
  bool out_pinning_tried = false;
  struct Pending {
    void* dst;
    const uint8_t* src;
    uint64_t bytes;
  };
  std::vector<Pending> pending;

  static uint64_t align(uint64_t x) { return (x + 255) / 256 * 256; }

  void begin() {
    in_used = out_used = 0;
    pending.clear();
  }
  // Queues the copy of `bytes` host bytes to device address `dst`, staged slice by slice
  // (kStageSlice) where they fit the pinned buffer, each slice's copy queued once it is staged.
  bool put(void* dst, const void* src, uint64_t bytes, std::string& error) {
    if (bytes == 0) return true;
    if (!host_in.data() || in_used + bytes > host_in.size())
      return check(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyHostToDevice, stream), "copy to device", error);
    uint8_t* staged = host_in.data() + in_used;
    in_used += align(bytes);
    for (uint64_t off = 0; off < bytes; off += kStageSlice) {
      const uint64_t n = std::min(kStageSlice, bytes - off);
      std::memcpy(staged + off, static_cast<const uint8_t*>(src) + off, n);
      if (!check(gpuMemcpyAsync(static_cast<uint8_t*>(dst) + off, staged + off, n, gpuMemcpyHostToDevice, stream),
                 "copy to device", error))
        return false;
    }
    return true;
  }
  // Queues the copy of `bytes` device bytes at `src` to host memory `dst` (complete after finish()).
  bool get(void* dst, const void* src, uint64_t bytes, std::string& error) {
    if (bytes == 0) return true;
    if (bytes > kSmallResult && !out_pinning_tried) {
      out_pinning_tried = true;
      host_out.allocate(kStageOut);
    }
    if (host_out.data() && out_used + bytes <= host_out.size()) {
      uint8_t* staged = host_out.data() + out_used;
      out_used += align(bytes);
      pending.push_back({dst, staged, bytes});
      return check(gpuMemcpyAsync(staged, src, bytes, gpuMemcpyDeviceToHost, stream), "copy back", error);
    }
    return check(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyDeviceToHost, stream), "copy back", error);
  }
  // After the kernel launch: its launch error, then the stream's completion, then the
  // staged results copied out.
  bool finish(const char* what, std::string& error) {
    if (!check(gpuGetLastError(), what, error) || !check(gpuStreamSynchronize(stream), what, error)) return false;
    for (const Pending& p : pending) std::memcpy(p.dst, p.src, p.bytes);
    pending.clear();
    return true;
  }
};

class LanePool {
 public:
  ~LanePool() {
    for (auto& l : lanes_)
      if (l->stream) (void)gpuStreamDestroy(l->stream);
  }
  // Every lane made now (on the opening thread), so that its stream and pinned staging do
  // not delay the first calls.
  bool prewarm(std::string& error) {
    std::vector<Lane*> made;
    for (unsigned i = 0; i < kLanes; ++i) {
      Lane* l = acquire(error);
      if (!l) break;
      made.push_back(l);
    }
    for (Lane* l : made) release(l);
    return made.size() == kLanes;
  }
  // A free lane (a new one while fewer than kLanes exist), waiting for one otherwise.
  Lane* acquire(std::string& error) {
    std::unique_lock<std::mutex> lock(mu_);
    while (free_.empty() && lanes_.size() >= kLanes) cv_.wait(lock);
    if (!free_.empty()) {
      Lane* l = free_.back();
      free_.pop_back();
      return l;
    }
    auto lane = std::make_unique<Lane>();
    if (!check(gpuStreamCreateNonBlocking(&lane->stream), "cannot create a stream", error)) return nullptr;
    lane->host_in.allocate(kStageIn);  // host_out: at the lane's first large result (Lane::get)
    lanes_.push_back(std::move(lane));
    return lanes_.back().get();
  }
  void release(Lane* l) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(l);
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::vector<Lane*> free_;
};

}  // namespace ckpt::gpu
