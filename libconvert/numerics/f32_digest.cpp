// The CPU side of the digest (f32_digest.h): per block of kDigestSpan elements, the inner
// sums sum_j bits(x) * inner[j] (mod 2^64), then each multiplied by its block's outer
// weight. The AVX2 loop takes 8 elements and 8 inner weights per step (f32_digest_avx2.h,
// the step the fused dequantize-and-digest loops of ggml_dequant_avx2.cpp share).
// Integer arithmetic mod 2^64 only, so every ISA and every piece order gives the same bits.
#include "numerics/f32_digest.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <random>

#include "numerics/ggml_dequant.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "numerics/f32_digest_avx2.h"
#define CKPT_AVX2 __attribute__((target("avx2")))
#endif

namespace ckpt {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct Inner {
  uint64_t a, b;
};

// x: n 32-bit elements (floats' bit patterns or little-endian words), any alignment.
Inner inner_scalar(const uint8_t* x, uint64_t n, uint64_t j0, const DigestWeights& w) {
  uint64_t a = 0, b = 0;
  for (uint64_t t = 0; t < n; ++t) {
    uint32_t bits;
    std::memcpy(&bits, x + 4 * t, 4);
    a += uint64_t{bits} * w.inner_a[j0 + t];
    b += uint64_t{bits} * w.inner_b[j0 + t];
  }
  return {a, b};
}

#if defined(__x86_64__)
CKPT_AVX2 Inner inner_avx2(const uint8_t* x, uint64_t n, uint64_t j0, const DigestWeights& w) {
  const uint32_t *wa = w.inner_a.data() + j0, *wb = w.inner_b.data() + j0;
  const auto* xs = reinterpret_cast<const __m256i*>(x);
  digest_avx2::Sums s, t;  // two sets of sums: two vectors in flight
  digest_avx2::clear(s);
  digest_avx2::clear(t);
  const uint64_t octs = n / 8;
  uint64_t q = 0;
  for (; q + 2 <= octs; q += 2) {
    digest_avx2::add8(s, _mm256_loadu_si256(xs + q), wa + 8 * q, wb + 8 * q);
    digest_avx2::add8(t, _mm256_loadu_si256(xs + q + 1), wa + 8 * q + 8, wb + 8 * q + 8);
  }
  if (q < octs) digest_avx2::add8(s, _mm256_loadu_si256(xs + q), wa + 8 * q, wb + 8 * q);
  for (uint64_t e = 8 * octs; e < n; ++e) {
    uint32_t bits;
    std::memcpy(&bits, x + 4 * e, 4);
    digest_avx2::add1(s, bits, wa[e], wb[e]);
  }
  Inner r, r2;
  digest_avx2::finish(s, r.a, r.b);
  digest_avx2::finish(t, r2.a, r2.b);
  return {r.a + r2.a, r.b + r2.b};
}
#endif

}  // namespace

DigestWeights::DigestWeights(uint64_t k) : key(k) {
  uint64_t state = k;
  for (auto* table : {&inner_a, &inner_b}) {
    table->resize(kDigestInnerStored);
    for (auto& v : *table) v = static_cast<uint32_t>(splitmix64(state)) | 1;
  }
  for (auto* table : {&outer_a, &outer_b}) {
    table->resize(kDigestSpan);
    for (auto& v : *table) v = splitmix64(state) | 1;
  }
}

uint64_t digest_fresh_key() {
  std::random_device rd;
  uint64_t state = (uint64_t{rd()} << 32) ^ rd() ^
                   static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return splitmix64(state);
}

namespace {

// n 32-bit elements at x (any alignment), the first of them element first_index.
F32Digest digest_of_words(DequantIsa isa, const uint8_t* x, uint64_t n_words, uint64_t first_index,
                          const DigestWeights& w) {
  F32Digest d;
#if defined(__x86_64__)
  const bool avx2 = ggml_isa_runs_avx2(isa);
#else
  (void)isa;
  const bool avx2 = false;
#endif
  for (uint64_t done = 0, i = first_index; done < n_words;) {
    const uint64_t block = i / kDigestSpan, j0 = i % kDigestSpan;
    const uint64_t n = std::min<uint64_t>(kDigestSpan - j0, n_words - done);
#if defined(__x86_64__)
    const Inner s = avx2 ? inner_avx2(x + 4 * done, n, j0, w) : inner_scalar(x + 4 * done, n, j0, w);
#else
    const Inner s = inner_scalar(x + 4 * done, n, j0, w);
#endif
    d.a += s.a * w.outer_a[block];
    d.b += s.b * w.outer_b[block];
    done += n;
    i += n;
  }
  return d;
}

}  // namespace

F32Digest f32_digest_isa(DequantIsa isa, std::span<const float> x, uint64_t first_index, const DigestWeights& w) {
  static_assert(sizeof(float) == sizeof(uint32_t));
  return digest_of_words(isa, reinterpret_cast<const uint8_t*>(x.data()), x.size(), first_index, w);
}

F32Digest f32_digest(std::span<const float> x, uint64_t first_index, const DigestWeights& w) {
  return f32_digest_isa(ggml_dequant_isa(), x, first_index, w);
}

// Widened 4096 at a time into binary32 bit patterns and digested by the one loop above.
F32Digest bf16_digest(std::span<const uint8_t> le_bytes, uint64_t first_index, const DigestWeights& w) {
  F32Digest d;
  float wide[kDigestSpan];
  const uint64_t n = le_bytes.size() / 2;
  for (uint64_t done = 0; done < n; done += kDigestSpan) {
    const uint64_t m = std::min<uint64_t>(kDigestSpan, n - done);
    for (uint64_t t = 0; t < m; ++t) {
      const uint32_t bits = uint32_t{le_bytes[2 * (done + t)]} | (uint32_t{le_bytes[2 * (done + t) + 1]} << 8);
      std::memcpy(&wide[t], &bits, 4);
    }
    d += f32_digest(std::span<const float>(wide, m), first_index + done, w);
  }
  return d;
}

// Little-endian words on every target ckptkit builds for (x86-64, aarch64): the bytes are the
// words, so they are digested where they lie.
static_assert(std::endian::native == std::endian::little);
F32Digest int8_digest_isa(DequantIsa isa, std::span<const int8_t> q, uint64_t first_word, const DigestWeights& w) {
  return digest_of_words(isa, reinterpret_cast<const uint8_t*>(q.data()), q.size() / 4, first_word, w);
}

F32Digest int8_digest(std::span<const int8_t> q, uint64_t first_word, const DigestWeights& w) {
  return int8_digest_isa(ggml_dequant_isa(), q, first_word, w);
}

}  // namespace ckpt
