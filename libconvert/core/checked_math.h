// Overflow-checked unsigned arithmetic. Every length, offset and shape product
// read from a file goes through these before it is used or allocated.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ckpt {

inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Product of dimensions folded from 1, left to right (the safetensors reference's order:
// once a 0 is multiplied in, later dimensions cannot overflow).
inline std::optional<uint64_t> checked_product(std::span<const uint64_t> dims) {
  uint64_t p = 1;
  for (uint64_t d : dims) {
    if (__builtin_mul_overflow(p, d, &p)) return std::nullopt;
  }
  return p;
}

// ceil(a / b) for b > 0, without the a + b - 1 overflow.
inline uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Round up to a multiple of a power-of-two alignment; nullopt on overflow.
inline std::optional<uint64_t> checked_pad(uint64_t n, uint64_t align) {
  auto s = checked_add(n, align - 1);
  if (!s) return std::nullopt;
  return *s & ~(align - 1);
}

inline bool is_power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// A shape for messages and reports: "[4096, 7168]" by default; reports that have always
// written "[4096,7168]" (hash check, diff) or "4096x7168" (plan) pass their separator.
std::string shape_to_string(std::span<const uint64_t> shape, std::string_view separator = ", ", bool brackets = true);

}  // namespace ckpt
