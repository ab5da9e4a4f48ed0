// The verifier's GGUF checks with digests ahead: ranges of ggml blocks (a GGUF tensor, a
// pack's blob part) dequantized on the device against the CPU's dequantization of the
// bytes they must equal (the same bytes, the reference's tensor of the same name, type and
// shape, or a pack part's source slice), compared by digest where the backend has one; and
// the CPU digests computed ahead while the device opens.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "formats/loader.h"
#include "io/mapped_file.h"
#include "verify/jobs.h"

namespace ckpt {

// CPU digests computed ahead while an OpeningBackend still starts its device (a CUDA
// process's first ~0.3 s): a digest step's CPU side needs no device, so the cores compute
// what they can of it then, in plan order, and a job takes what is done instead of
// computing it again (the same bytes, the same steps, the same function: the digests are
// equal). A step not done ahead is computed by its job as before, so what is verified and
// reported does not depend on how far the phase got. One slot per planned digest step.
class DigestsAhead final : public AheadWork {
 public:
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();
  // Registers the digest steps of a range as its job will take them; its first slot, or
  // kNone for a range compared element by element (or not at all).
  size_t add(const DecodeBackend& be, const VerifyOptions& o, int32_t type, uint64_t row_elems, uint64_t bytes,
             const MappedFile& cpu_file, uint64_t cpu_offset);
  // On all cores but one (the driver's start needs one), while `be` is opening and within
  // `budget` less the backend's own memory. Returns the phase's wall seconds.
  double compute(const DecodeBackend& be, const DigestWeights& w, uint64_t budget, VerifyStages& stages) override;
  // The digest of step `step` of the range registered at `first`, when it was computed.
  bool take(size_t first, uint64_t step, F32Digest& out) const {
    if (first == kNone || !slots_) return false;
    const Slot& s = slots_[first + step];
    if (!s.done.load(std::memory_order_acquire)) return false;
    out = s.value;
    return true;
  }

 private:
  struct Step {
    int32_t type;
    const MappedFile* file;
    uint64_t offset, bytes;
  };
  struct Slot {
    std::atomic<bool> done{false};
    F32Digest value;
  };
  std::vector<Step> steps_;
  std::unique_ptr<Slot[]> slots_;
};

// The bytes the CPU dequantizes for a range, and what the check says it compared with.
struct CpuSide {
  const MappedFile* file = nullptr;
  uint64_t offset = 0;
  std::string against;  // VerifyCheck::verified_against
};

// One job: `bytes` of ggml type `type` (whole rows of `row_elems`) at `src_offset` of `src`
// decoded on the device, against the CPU's dequantization of `cpu`. `src`, `cpu.file` and
// `ahead` outlive the job.
void plan_ggml_range(DecodeBackend& be, const VerifyOptions& o, std::string tensor, std::string part, int32_t type,
                     uint64_t row_elems, uint64_t bytes, const MappedFile& src, uint64_t src_offset, CpuSide cpu,
                     DigestsAhead& ahead, std::vector<Job>& jobs);

// Every tensor of `model` (a GGUF file, or a pack's dense.gguf), device against CPU:
// without `reference`, of the tensor's own bytes; with it, of the reference's tensor of
// the same name, ggml type and shape, and a tensor without one is a failed check
// (VERIFY_UNMATCHED), never compared with itself. `pack_dense`: a pack's blk.N.A_log,
// renamed from the reference's blk.N.ssm_a with other values by design (its values are the
// pack validator's check), is decoded against its own bytes; and the reference's other
// tensors (the experts, now in experts.bin) are not looked for. Otherwise a tensor of the
// reference missing from `model` is VERIFY_UNMATCHED too.
void plan_gguf_checks(DecodeBackend& be, const VerifyOptions& o, const LoadedModel& model, const LoadedModel* reference,
                      bool pack_dense, DigestsAhead& ahead, std::vector<Job>& jobs);

// A GGUF file against a --reference that must be a GGUF file too (loaded into
// `reference`); false with a VERIFY_REFERENCE error naming it when it is a directory, a
// safetensors checkpoint or does not read cleanly.
bool load_gguf_reference(const std::string& path, LoadedModel& reference, Findings& findings);

}  // namespace ckpt
