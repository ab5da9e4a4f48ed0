// The verifier's job pipeline and buffer pools: the work of a verification cut into jobs (a
// tensor, an expert of a fused matrix, a GGUF tensor or pack part), each with the host
// memory its buffers hold at most; run on a oneTBB pipeline of as many jobs as fit in
// --memory-budget, each writing into its own Sink, merged into the report in job order
// (so the report is the same whatever the thread order). Step buffers, and an INT8-shift
// expert's matrices, are reused from job to job through a pool.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/findings.h"
#include "numerics/f32_digest.h"
#include "verify/gpu_verify.h"

namespace ckpt {

// Steps of the streaming checks: each job holds a few buffers of at most this many input
// codes (FP8), output elements (MXFP4, ggml) or bytes (copies), so a job's memory is tens
// of MiB whatever the tensor size (experts: one expert's matrices).
inline constexpr uint64_t kStepElems = uint64_t{4} << 20;

struct Slabs {
  std::vector<uint8_t> mxfp4, shift2, channel_scale;
};

// One INT8-shift expert's large buffers: IN's weight and scale bytes of each part, OUT's
// slabs and their remap, the CPU and device decodes, a step of the device's original weights.
struct ExpertBuffers {
  std::vector<std::vector<uint8_t>> parts;
  Slabs got, want;
  std::vector<int8_t> q_cpu, q_dev;
  std::vector<float> w_step;  // one step of the device's original weights
};

// Step buffers reused from job to job: a job takes a set for its run and gives it back, so
// at most (jobs in flight) sets exist, each grown to the largest step a job asked of it
// (within that job's accounted memory), and a pack of thousands of small parts allocates
// and page-faults a few sets, not one per part. A set holds either step buffers or one
// INT8-shift expert's buffers, never both (StepPool::take), so it stays within the largest
// job's memory.
struct StepBuffers {
  std::vector<uint8_t> a, b, c;
  std::vector<uint16_t> h1, h2;
  std::vector<float> got, want;
  std::unique_ptr<ExpertBuffers> expert;  // set when the set serves experts
  template <class T>
  static std::span<T> take(std::vector<T>& v, uint64_t n) {
    if (v.size() < n) v.resize(n);
    return std::span<T>(v.data(), n);
  }
};

class StepPool {
 public:
  // A set of the kind asked for (experts' or steps'), else a free one of the other kind
  // emptied and turned into this kind, else a new one.
  std::unique_ptr<StepBuffers> take(bool expert = false);
  void give(std::unique_ptr<StepBuffers> s);

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<StepBuffers>> free_;
};

// A set taken from the pool for one scope (a fresh one when there is no pool).
class PooledSteps {
 public:
  explicit PooledSteps(StepPool* pool, bool expert = false)
      : pool_(pool), s_(pool ? pool->take(expert) : std::make_unique<StepBuffers>()) {
    if (expert && !s_->expert) s_->expert = std::make_unique<ExpertBuffers>();
  }
  PooledSteps(const PooledSteps&) = delete;
  PooledSteps& operator=(const PooledSteps&) = delete;
  ~PooledSteps() {
    if (pool_) pool_->give(std::move(s_));
  }
  StepBuffers* operator->() { return s_.get(); }

 private:
  StepPool* pool_;
  std::unique_ptr<StepBuffers> s_;
};

// What one job found: its checks and findings, merged into the report in job order.
struct Sink {
  std::deque<VerifyCheck> checks;  // a deque: references to a check survive later checks
  Findings findings;
  VerifyStages stages;  // this job's (the backend's calls are counted by TimedBackend)
  uint64_t input_bytes_decoded = 0;
  double max_rel_l2 = 0;
  std::string backend;
  StepPool* steps = nullptr;              // run_jobs' pool of step buffers
  const DigestWeights* digest = nullptr;  // run_jobs' digest key
};

// Seconds between consecutive stages of one job: next() is the time since the last call
// (or since construction). Two steady_clock reads per stage, nothing shared.
class Lap {
 public:
  double next() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - t_).count();
    t_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point t_ = std::chrono::steady_clock::now();
};

// One unit of work and the host memory its buffers hold at most while it runs.
struct Job {
  uint64_t memory = 0;
  std::function<void(Sink&)> run;
};

// Work done before the jobs while an OpeningBackend still starts its device (the CPU
// digests of GGUF and pack steps, DigestsAhead). Returns its wall seconds.
class AheadWork {
 public:
  virtual ~AheadWork() = default;
  virtual double compute(const DecodeBackend& be, const DigestWeights& w, uint64_t budget, VerifyStages& stages) = 0;
};

// How many jobs may run at once: the budget less what the backend holds itself (its pinned
// staging, DecodeBackend::host_memory), divided by the largest job's memory; at least one,
// at most twice the cores. A job larger than the budget alone runs alone.
uint64_t jobs_in_flight(const std::vector<Job>& jobs, uint64_t budget, uint64_t backend_memory);

// Runs the jobs (`ahead` first, while the device opens) and merges their results into `r`
// in job order. A passing check that compared no element is no evidence and is not
// counted. Jobs do not start on a backend that failed to open (the caller reports
// NO_DEVICE).
void run_jobs(std::vector<Job>& jobs, const DecodeBackend& be, const VerifyOptions& o, VerifyReport& r,
              AheadWork* ahead = nullptr);

}  // namespace ckpt
