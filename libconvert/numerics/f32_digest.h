// A keyed linear digest of binary32 results (their bit patterns), so that `ckpt-gpu verify`
// can prove a device's decode equal to the CPU's without bringing every f32 back to the
// host: the device returns 16 bytes per step instead of 4 bytes per element (for a 4-bit
// GGUF type, 8x the input), and the CPU digests its reference in cache-sized pieces that
// never reach main memory. The digest is only a filter in front of the exact comparison: a
// step whose digests differ is decoded again in full and compared element by element, so a
// mismatch is still named to its first element with both values (docs/verify.md).
//
// Definition (the kernels compute it per element with kern::digest_term, kernels/decode.h;
// the CPU here in blocks): for x_i, i = 0 .. n-1 (n <= kDigestMaxElems), with M = kDigestSpan,
//   a = sum_i bits(x_i) * inner_a[i mod M] * outer_a[i div M]   (mod 2^64), b likewise,
// inner weights odd 32-bit and outer odd 64-bit values drawn from the run's random key
// (DigestWeights). An integer sum mod 2^64 is the same in any order, so device and CPU
// agree bit for bit exactly when their terms do. (32-bit inner weights: the CPU's inner
// loop is one 32 x 32 -> 64 multiply per element and sum, its tables 32 KiB, in L1.)
//
// Why it cannot miss a real difference (d_i = bits' - bits as integers, |d_i| < 2^32):
// - one differing element always changes a and b: d_i * w is 0 mod 2^64 only if 2^64
//   divides d_i (w is odd);
// - any other difference, fixed before the key is drawn, leaves a unchanged with probability
//   at most ~2^-26 over the key (a term of least 2-adic valuation takes 2^31 values with
//   equal probability as its inner weight varies, then likewise with the outer weight), and
//   a and b have independent weights: ~2^-52 per step. The key is fresh on every run, so no
//   file or kernel bug can be built to match it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ckpt {

enum class DequantIsa;  // numerics/ggml_dequant.h

inline constexpr uint64_t kDigestSpan = 4096;
inline constexpr uint64_t kDigestMaxElems = kDigestSpan * kDigestSpan;
// Inner weights stored per table: the span's, plus one pad entry that no digest term uses.
// The AVX2 step loads a vector's odd weights from one element on (their 64-bit lanes' low
// halves, all vpmuludq reads), which at a span's last vector reads one entry past it.
inline constexpr uint64_t kDigestInnerStored = kDigestSpan + 1;

struct F32Digest {
  uint64_t a = 0, b = 0;
  bool operator==(const F32Digest&) const = default;
  // Digests of consecutive pieces (each with its own first index) add up to the whole's.
  F32Digest& operator+=(const F32Digest& o) {
    a += o.a;
    b += o.b;
    return *this;
  }
};

// The weights of one key: kDigestSpan odd values each (splitmix64 of the key); the inner
// tables hold kDigestInnerStored (their last entry a pad, see above).
struct DigestWeights {
  explicit DigestWeights(uint64_t key);
  uint64_t key;
  std::vector<uint32_t> inner_a, inner_b;
  std::vector<uint64_t> outer_a, outer_b;
};

// A key nobody chose: std::random_device mixed with the clock.
uint64_t digest_fresh_key();

// The digest of x as elements first_index .. first_index + x.size() - 1 of a step.
// Precondition: first_index + x.size() <= kDigestMaxElems. On the process's ISA
// (ggml_dequant_isa()); f32_digest_isa on an explicit one (the tests compare them).
F32Digest f32_digest(std::span<const float> x, uint64_t first_index, const DigestWeights& w);
F32Digest f32_digest_isa(DequantIsa isa, std::span<const float> x, uint64_t first_index, const DigestWeights& w);

// The digest of BF16 values given as little-endian bytes (2 per element): each element's 16
// bits, zero-extended, are its bits(x_i) above (|d_i| < 2^16, so the argument holds). What
// the verifier compares with a device's digest of the BF16 a conversion wrote.
F32Digest bf16_digest(std::span<const uint8_t> le_bytes, uint64_t first_index, const DigestWeights& w);

// The digest of int8 values taken four at a time as little-endian 32-bit words: word j holds
// q[4j .. 4j+3] (q[4j+t] in bits 8t .. 8t+7) and is element first_word + j above. A changed
// value changes its word by less than 2^32, so the argument holds, and the digest costs a
// quarter of one taken per value (the device sums the words its INT8-shift decode wrote).
// Precondition: q.size() % 4 == 0 and first_word + q.size() / 4 <= kDigestMaxElems.
F32Digest int8_digest(std::span<const int8_t> q, uint64_t first_word, const DigestWeights& w);
F32Digest int8_digest_isa(DequantIsa isa, std::span<const int8_t> q, uint64_t first_word, const DigestWeights& w);

}  // namespace ckpt
