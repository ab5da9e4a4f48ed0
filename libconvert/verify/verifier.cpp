// The base of every verifier check (verify/verifier.h): recording, failing, reading.
#include "verify/verifier.h"

#include <algorithm>
#include <cstdio>

namespace ckpt {

std::string verify_hex(uint64_t v, int digits) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

std::string verify_fmt(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

VerifyCheck& Verifier::add_check(std::string check, std::string tensor, std::string part, uint64_t elements,
                                 std::string against) {
  VerifyCheck c;
  c.check = std::move(check);
  c.tensor = std::move(tensor);
  c.part = std::move(part);
  c.verified_against = std::move(against);
  c.elements = elements;
  r_.checks.push_back(std::move(c));
  return r_.checks.back();
}

void Verifier::fail(VerifyCheck& c, const char* code, const std::string& file, std::optional<uint64_t> offset,
                    const std::string& message, const std::string* tensor) {
  c.ok = false;
  r_.findings.error(code, file, tensor ? *tensor : c.tensor, offset, message);
}

bool Verifier::backend_failed(VerifyCheck& c, const std::string& file, const std::string& error) {
  fail(c, error.starts_with("unsupported") ? "VERIFY_UNSUPPORTED" : "VERIFY_BACKEND", file, std::nullopt,
       r_.backend + ": " + error);
  return false;
}

bool Verifier::scale_rule_holds(VerifyCheck& c, const std::string& file, ScaleEncoding encoding, const ModelTensor& s,
                                std::span<const uint8_t> bytes, uint64_t first_index, const std::string& used_by) {
  if (!s.dtype) return true;  // a scale without a known dtype is refused by the plan
  ScaleCheck check;
  check_scale_values(encoding, *s.dtype, bytes, first_index, check);
  const ScaleProblem problem = check.first_refused();
  if (problem == ScaleProblem::none) return true;
  const uint64_t esize = std::max<uint32_t>(1, dtype_bits(*s.dtype) / 8);
  fail(c, "VERIFY_INPUT", file, s.offset + check.of(problem).first * esize,
       scale_refusal_text(encoding, check, file, s.name, s.offset, esize, s.shape, used_by), &s.name);
  return false;
}

bool Verifier::read(const MappedFile& f, uint64_t offset, std::span<uint8_t> buf, VerifyCheck* c) {
  IoError err;
  Lap lap;
  const bool ok = f.read_at(offset, buf, err);
  r_.stages.read += lap.next();
  if (ok) return true;
  r_.findings.error("IO_READ", err.path, "", offset, err.message);
  if (c) c->ok = false;  // the IO_READ finding above names it
  return false;
}

bool Verifier::passed_by_digest(VerifyCheck& c) {
  static constexpr const char* kByDigest = "; by keyed digest";
  if (!c.verified_against.ends_with(kByDigest)) c.verified_against += kByDigest;
  return true;
}

bool Verifier::digest_kernel_wrong(VerifyCheck& c, const std::string& file, const std::string& step,
                                   const char* results) {
  return backend_failed(c, file,
                        "the device's digest of " + step + " disagrees with the CPU's while its " + results +
                            ": the digest kernel is wrong");
}

}  // namespace ckpt
