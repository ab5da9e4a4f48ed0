// The verify digest (numerics/f32_digest.h): the AVX2 loop equals the scalar one, pieces add
// up to the whole, and the differences a broken kernel makes are always seen. The device's
// per-element form (kern::digest_terms) is checked against it in kernel_arith_test.cpp.
#include <gtest/gtest.h>

#include <bit>
#include <random>
#include <vector>

#include "numerics/f32_digest.h"
#include "numerics/ggml_dequant.h"

namespace ckpt {
namespace {

std::vector<float> random_floats(uint64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(n);
  for (auto& v : x) v = std::bit_cast<float>(static_cast<uint32_t>(rng()));  // NaN payloads included
  return x;
}

// The definition, one element at a time.
F32Digest naive(const std::vector<float>& x, uint64_t first, const DigestWeights& w) {
  F32Digest d;
  for (uint64_t t = 0; t < x.size(); ++t) {
    const uint64_t i = first + t, bits = std::bit_cast<uint32_t>(x[t]);
    d.a += bits * (w.inner_a[i % kDigestSpan] * w.outer_a[i / kDigestSpan]);
    d.b += bits * (w.inner_b[i % kDigestSpan] * w.outer_b[i / kDigestSpan]);
  }
  return d;
}

// The definition over elements of `width` little-endian bytes each (BF16: 2; int8 words: 4).
F32Digest naive_le(std::span<const uint8_t> bytes, int width, uint64_t first, const DigestWeights& w) {
  F32Digest d;
  for (uint64_t t = 0; t < bytes.size() / width; ++t) {
    const uint64_t i = first + t;
    uint64_t bits = 0;
    for (int b = 0; b < width; ++b) bits |= uint64_t{bytes[width * t + b]} << (8 * b);
    d.a += bits * (w.inner_a[i % kDigestSpan] * w.outer_a[i / kDigestSpan]);
    d.b += bits * (w.inner_b[i % kDigestSpan] * w.outer_b[i / kDigestSpan]);
  }
  return d;
}

TEST(F32Digest, WeightsAreOddAndDependOnTheKey) {
  const DigestWeights w(1), v(2);
  for (const auto* t : {&w.inner_a, &w.inner_b}) {
    ASSERT_EQ(t->size(), kDigestInnerStored);
    for (uint32_t x : *t) ASSERT_EQ(x & 1, 1u);
  }
  for (const auto* t : {&w.outer_a, &w.outer_b}) {
    ASSERT_EQ(t->size(), kDigestSpan);
    for (uint64_t x : *t) ASSERT_EQ(x & 1, 1u);
  }
  EXPECT_NE(w.inner_a, v.inner_a);
  EXPECT_NE(w.inner_a, w.inner_b);
  EXPECT_NE(digest_fresh_key(), digest_fresh_key());
}

TEST(F32Digest, EveryIsaEqualsTheDefinitionAtAnyOffsetAndLength) {
  const DigestWeights w(0x1234);
  std::mt19937_64 rng(7);
  for (int round = 0; round < 40; ++round) {
    const uint64_t n = rng() % 20000, first = round % 4 == 0 ? kDigestMaxElems - n : rng() % (kDigestMaxElems - n);
    const auto x = random_floats(n, static_cast<uint32_t>(round));
    const F32Digest want = naive(x, first, w);
    EXPECT_EQ(f32_digest_isa(DequantIsa::scalar, x, first, w), want) << "n " << n << " first " << first;
    EXPECT_EQ(f32_digest_isa(DequantIsa::avx2, x, first, w), want) << "n " << n << " first " << first;
  }
}

// BF16 bytes (little-endian, 2 per element): each element's 16 bits are its term's bits, at
// any offset and length (across the 4096-element widening it works in).
TEST(F32Digest, Bf16DigestIsTheDefinitionOverTheSixteenBitValues) {
  const DigestWeights w(0x4321);
  std::mt19937_64 rng(11);
  for (int round = 0; round < 30; ++round) {
    const uint64_t n = rng() % 20000, first = round % 4 == 0 ? kDigestMaxElems - n : rng() % (kDigestMaxElems - n);
    std::vector<uint8_t> bytes(2 * n);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    EXPECT_EQ(bf16_digest(bytes, first, w), naive_le(bytes, 2, first, w)) << "n " << n << " first " << first;
  }
}

// int8 values four to a little-endian word: each word is one element's bits, at any offset
// and length; one changed value always changes the digest.
TEST(F32Digest, Int8DigestIsTheDefinitionOverLittleEndianWords) {
  const DigestWeights w(0x5151);
  std::mt19937_64 rng(13);
  for (int round = 0; round < 30; ++round) {
    const uint64_t words = rng() % 9000, first = round % 4 == 0 ? kDigestMaxElems - words : rng() % (kDigestMaxElems - words);
    std::vector<int8_t> q(4 * words);
    for (auto& v : q) v = static_cast<int8_t>(rng());
    const F32Digest want = naive_le(std::span(reinterpret_cast<const uint8_t*>(q.data()), q.size()), 4, first, w);
    for (DequantIsa isa : {DequantIsa::scalar, DequantIsa::avx2})
      ASSERT_EQ(int8_digest_isa(isa, q, first, w), want) << "words " << words << " first " << first;
    EXPECT_EQ(int8_digest(q, first, w), want);
    if (words == 0) continue;
    const uint64_t at = rng() % q.size();
    q[at] = static_cast<int8_t>(q[at] ^ (1 << (rng() % 8)));
    const F32Digest changed = int8_digest(q, first, w);
    EXPECT_NE(changed.a, want.a) << at;
    EXPECT_NE(changed.b, want.b) << at;
  }
}

TEST(F32Digest, PiecesAddUpToTheWhole) {
  const DigestWeights w(99);
  const auto x = random_floats(3 * kDigestSpan + 1001, 3);
  F32Digest pieces;
  for (uint64_t at = 0; at < x.size(); at += 777) {
    const uint64_t n = std::min<uint64_t>(777, x.size() - at);
    pieces += f32_digest(std::span<const float>(x).subspan(at, n), at, w);
  }
  EXPECT_EQ(pieces, f32_digest(x, 0, w));
}

// One differing element is always seen, in both sums (any bit of any element: d * odd
// weight is never 0 mod 2^64); so are the patterns of layout slips: two elements swapped
// (within a block, a row of 4096 apart), two sign flips, an element shifted by one.
TEST(F32Digest, TheDifferencesOfABrokenKernelChangeBothSums) {
  const DigestWeights w(digest_fresh_key());
  const uint64_t n = 3 * kDigestSpan;
  const auto x = random_floats(n, 11);
  const F32Digest base = f32_digest(x, 5, w);
  auto expect_seen = [&](const std::vector<float>& y, const std::string& what) {
    const F32Digest d = f32_digest(y, 5, w);
    EXPECT_NE(d.a, base.a) << what;
    EXPECT_NE(d.b, base.b) << what;
  };
  for (uint64_t i : {uint64_t{0}, uint64_t{1}, kDigestSpan - 6, kDigestSpan, n - 1})
    for (int bit = 0; bit < 32; ++bit) {
      auto y = x;
      y[i] = std::bit_cast<float>(std::bit_cast<uint32_t>(y[i]) ^ (1u << bit));
      expect_seen(y, "bit " + std::to_string(bit) + " of element " + std::to_string(i));
    }
  for (uint64_t gap : {uint64_t{1}, uint64_t{2}, kDigestSpan, 2 * kDigestSpan}) {
    auto y = x;
    std::swap(y[3], y[3 + gap]);
    expect_seen(y, "swap at distance " + std::to_string(gap));
    y = x;
    y[3] = -y[3];
    y[3 + gap] = -y[3 + gap];
    expect_seen(y, "two sign flips at distance " + std::to_string(gap));
  }
  auto shifted = x;
  std::rotate(shifted.begin(), shifted.begin() + 1, shifted.end());
  expect_seen(shifted, "every element one place over");
}

}  // namespace
}  // namespace ckpt
