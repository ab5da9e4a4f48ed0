// The verifier's job pipeline and buffer pools (verify/jobs.h).
#include "verify/jobs.h"

#include <algorithm>

#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

namespace ckpt {

std::unique_ptr<StepBuffers> StepPool::take(bool expert) {
  std::unique_ptr<StepBuffers> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(free_.rbegin(), free_.rend(), [&](const auto& f) { return (f->expert != nullptr) == expert; });
    if (it == free_.rend() && !free_.empty()) it = free_.rbegin();
    if (it != free_.rend()) {
      s = std::move(*it);
      free_.erase(std::next(it).base());
    }
  }
  if (!s) s = std::make_unique<StepBuffers>();
  if (expert && !s->expert) {
    s->a = {}, s->b = {}, s->c = {}, s->h1 = {}, s->h2 = {}, s->got = {}, s->want = {};
    s->expert = std::make_unique<ExpertBuffers>();
  } else if (!expert) {
    s->expert.reset();
  }
  return s;
}

void StepPool::give(std::unique_ptr<StepBuffers> s) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(std::move(s));
}

uint64_t jobs_in_flight(const std::vector<Job>& jobs, uint64_t budget, uint64_t backend_memory) {
  uint64_t largest = 1;
  for (const Job& j : jobs) largest = std::max(largest, j.memory);
  const uint64_t cores = static_cast<uint64_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
  const uint64_t for_jobs = budget > backend_memory ? budget - backend_memory : 0;
  return std::clamp<uint64_t>(for_jobs / largest, 1, 2 * cores);
}

namespace {

// One job's results into the report. A check that passed having compared no element (a
// zero-element tensor) is no evidence: it is not counted, so a run of only such checks
// has 0 checks and is VERIFY_NOTHING, never a PASS.
void merge(Sink& s, VerifyReport& r) {
  for (auto& c : s.checks)
    if (!c.ok || c.elements != 0) r.checks.push_back(std::move(c));
  r.findings.append(s.findings);
  r.input_bytes_decoded += s.input_bytes_decoded;
  r.max_rel_l2 = std::max(r.max_rel_l2, s.max_rel_l2);
  r.stages += s.stages;
}

}  // namespace

void run_jobs(std::vector<Job>& jobs, const DecodeBackend& be, const VerifyOptions& o, VerifyReport& r,
              AheadWork* ahead) {
  const uint64_t tokens = jobs_in_flight(jobs, o.memory_budget, be.host_memory());
  StepPool steps;
  // One fresh key per run (numerics/f32_digest.h: no input or kernel bug can be made to match it).
  const DigestWeights digest(digest_fresh_key());
  if (ahead) r.stages.ahead += ahead->compute(be, digest, o.memory_budget, r.stages);
  if (be.state() == BackendState::failed) return;
  r.backend = be.name();  // waits for an opening backend
  r.jobs = jobs.size();
  r.jobs_in_flight = tokens;
  size_t next = 0, done = 0;
  struct Item {
    size_t index = 0;
    std::unique_ptr<Sink> sink;
  };
  tbb::parallel_pipeline(
      static_cast<size_t>(tokens),
      tbb::make_filter<void, Item>(tbb::filter_mode::serial_in_order,
                                   [&](tbb::flow_control& fc) {
                                     if (next == jobs.size()) {
                                       fc.stop();
                                       return Item{};
                                     }
                                     return Item{next++, nullptr};
                                   }) &
          tbb::make_filter<Item, Item>(tbb::filter_mode::parallel,
                                       [&](Item it) {
                                         it.sink = std::make_unique<Sink>();
                                         it.sink->backend = r.backend;
                                         it.sink->steps = &steps;
                                         it.sink->digest = &digest;
                                         Lap lap;
                                         jobs[it.index].run(*it.sink);
                                         it.sink->stages.jobs += lap.next();
                                         jobs[it.index].run = nullptr;  // captured state goes now
                                         return it;
                                       }) &
          tbb::make_filter<Item, void>(tbb::filter_mode::serial_in_order, [&](Item it) {
            merge(*it.sink, r);
            ++done;
            if (o.progress) o.progress(done, jobs.size());
          }));
}

}  // namespace ckpt
