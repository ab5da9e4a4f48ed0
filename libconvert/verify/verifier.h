// The base of every verifier check: how a check is recorded (what it compared against),
// how it fails (always with a finding naming it), how inputs are read, and the one
// comparison step every check runs: digests first, then every element, then fail closed.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

#include "formats/model_view.h"
#include "io/mapped_file.h"
#include "numerics/scale_rule.h"
#include "verify/jobs.h"

namespace ckpt {

std::string verify_hex(uint64_t v, int digits);  // "0x00ab"
std::string verify_fmt(double v);                // %.9g

inline float bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// First index where two arrays differ bitwise, or nullopt.
template <class T>
std::optional<uint64_t> first_difference(std::span<const T> a, std::span<const T> b) {
  if (std::memcmp(a.data(), b.data(), a.size_bytes()) == 0) return std::nullopt;
  for (uint64_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return i;
  return std::nullopt;
}

// The first i in [0, n) with bad(i), or nullopt: ranges on all cores, the smallest wins.
template <class Bad>
std::optional<uint64_t> first_index(uint64_t n, Bad bad) {
  constexpr uint64_t kNone = UINT64_MAX;
  const uint64_t first = tbb::parallel_reduce(
      tbb::blocked_range<uint64_t>(0, n, 65536), kNone,
      [&](const tbb::blocked_range<uint64_t>& r, uint64_t best) {
        for (uint64_t i = r.begin(); i < r.end() && i < best; ++i)
          if (bad(i)) return i;
        return best;
      },
      [](uint64_t a, uint64_t b) { return std::min(a, b); });
  return first == kNone ? std::nullopt : std::optional<uint64_t>(first);
}

// What a step's digests said (Verifier::compare_step).
enum class StepDigest {
  off,     // not compared by digest (the backend has none, --full-compare, too large)
  equal,   // the device's digest equals the CPU's: the step passes
  differ,  // they differ: every element is compared to name the first difference
  failed,  // a side failed, already reported
};

// The shared state of one job's checks and the helpers every check uses.
class Verifier {
 public:
  Verifier(DecodeBackend& backend, const VerifyOptions& o, Sink& r) : be_(backend), o_(o), r_(r) {}

  // A check of `tensor` (and `part`) compared with `against` (VerifyCheck::verified_against).
  VerifyCheck& add_check(std::string check, std::string tensor, std::string part, uint64_t elements,
                         std::string against);
  // The only way a check fails: with an error finding `code` naming the check's tensor (or
  // `tensor` when given), so a FAIL always says why.
  void fail(VerifyCheck& c, const char* code, const std::string& file, std::optional<uint64_t> offset,
            const std::string& message, const std::string* tensor = nullptr);
  void mismatch(VerifyCheck& c, const std::string& file, std::optional<uint64_t> offset, const std::string& message) {
    fail(c, "VERIFY_MISMATCH", file, offset, message);
  }
  // The one scale-validity rule (numerics/scale_rule.h), as validate --deep and convert apply
  // it, to `bytes` of scale `s` (in `file`) starting at element `first_index`: a value they
  // refuse fails `c` as VERIFY_INPUT naming the scale's element and byte, so verify never
  // passes (or decodes) a scale convert would refuse.
  bool scale_rule_holds(VerifyCheck& c, const std::string& file, ScaleEncoding encoding, const ModelTensor& s,
                        std::span<const uint8_t> bytes, uint64_t first_index, const std::string& used_by);
  // A backend call failed: VERIFY_UNSUPPORTED for a type it does not decode, else VERIFY_BACKEND.
  bool backend_failed(VerifyCheck& c, const std::string& file, const std::string& error);
  // Reads `buf` at `offset`; a failure is an IO_READ finding, and fails `c` when given.
  bool read(const MappedFile& f, uint64_t offset, std::span<uint8_t> buf, VerifyCheck* c = nullptr);
  uint64_t chunk_bytes() const { return std::max<uint64_t>(1, be_.max_chunk_bytes()); }
  static std::string step_at(uint64_t offset) { return "the step at byte " + std::to_string(offset); }

  // The one comparison of a step, for every check. digest() compares the device's digest
  // with the CPU's where the backend has one (StepDigest); equal passes the step. Else
  // full() compares every element (false when it reported the first difference or a
  // failure). Digests that differed over elements that are all equal mean a broken digest
  // kernel: the check fails closed. `step`: where the step is ("the step at byte N",
  // "expert 3's decode"); `equal_results`: what full() found equal.
  template <class DigestFn, class FullFn>
  bool compare_step(VerifyCheck& c, const std::string& file, const std::string& step, const char* equal_results,
                    DigestFn digest, FullFn full) {
    const StepDigest d = digest();
    if (d == StepDigest::failed) return false;
    if (d == StepDigest::equal) return passed_by_digest(c);
    if (!full()) return false;
    if (d == StepDigest::differ) return digest_kernel_wrong(c, file, step, equal_results);
    return true;
  }

 protected:
  DecodeBackend& be_;
  const VerifyOptions& o_;
  Sink& r_;

 private:
  bool passed_by_digest(VerifyCheck& c);
  bool digest_kernel_wrong(VerifyCheck& c, const std::string& file, const std::string& step, const char* results);
};

}  // namespace ckpt
