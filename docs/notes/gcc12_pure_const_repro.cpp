// GCC 12.2 at -O3 deletes the call to blocks() in dequantize(), so the output stays zero
// (docs/notes/gcc12-pure-const.md). g++ -std=c++20 -O3 gcc12_pure_const_repro.cpp && ./a.out
// prints "191 of 256 wrong" with Debian 12's GCC 12.2; -O2, clang 14, and -O3 with
// blocks() marked __attribute__((noipa)) print "0 of 256 wrong". No undefined behaviour:
// -fsanitize=address,undefined at -O3 runs clean and right.
#include <immintrin.h>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#define AVX2 __attribute__((target("avx2")))
namespace {
float f16_at(const uint8_t* p) {  // enough of binary16 for the test's scale 1.0 (0x3c00) and 0
  uint16_t h;
  std::memcpy(&h, p, 2);
  const uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  if (exp == 0) return static_cast<float>(man) * 5.9604644775390625e-8f;
  uint32_t bits = ((exp + 112) << 23) | (man << 13);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
AVX2 inline void put16(float* y, __m256 d, __m128i q, __m256 m) {
  _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q))), m));
  _mm256_storeu_ps(y + 8, _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(q, 8)))), m));
}
// ggml's Q2_K block: 16 scale bytes, 64 bytes of 2-bit codes, f16 d and dmin.
AVX2 inline void q2_k(const uint8_t* b, float* y) {
  const uint8_t* sc = b;
  const float d = f16_at(b + 80), dmin = f16_at(b + 82);
  for (int half = 0; half < 2; ++half) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * half));
    for (int shift = 0; shift < 8; shift += 2, y += 32, sc += 2) {
      const __m256i v = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(3));
      for (int part = 0; part < 2; ++part) {
        const __m256 dl = _mm256_set1_ps(d * static_cast<float>(sc[part] & 0xF));
        const __m256 ml = _mm256_set1_ps(dmin * static_cast<float>(sc[part] >> 4));
        put16(y + 16 * part, dl, part ? _mm256_extracti128_si256(v, 1) : _mm256_castsi256_si128(v), ml);
      }
    }
  }
}
AVX2 void blocks(const uint8_t* in, size_t n, size_t type_size, float* y) {
  for (size_t i = 0; i < n; ++i) q2_k(in + i * type_size, y + i * 256);
}
}  // namespace
__attribute__((noinline)) void dequantize(const uint8_t* in, size_t n, size_t type_size, float* out) {
  blocks(in, n, type_size, out);
}
int main() {
  uint8_t b[84];
  for (int i = 0; i < 84; ++i) b[i] = static_cast<uint8_t>(0x5B * i + 7);
  for (int i = 0; i < 16; ++i) b[i] = 1;         // every sub-block scale 1, minimum 0
  b[80] = 0, b[81] = 0x3c, b[82] = b[83] = 0;    // d = 1.0, dmin = 0
  float y[256] = {};
  dequantize(b, 1, sizeof b, y);
  int bad = 0;
  for (int half = 0; half < 2; ++half)
    for (int s = 0; s < 4; ++s)
      for (int l = 0; l < 32; ++l)
        bad += y[128 * half + 32 * s + l] != static_cast<float>((b[16 + 32 * half + l] >> (2 * s)) & 3);
  std::printf("%d of 256 wrong\n", bad);
  return bad != 0;
}
