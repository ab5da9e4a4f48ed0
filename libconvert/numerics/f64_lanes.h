// gemm_f64's one fixed order (int8_gemm_ref.h), written once for the scalar loop and the
// tails of its AVX2 and AVX-512 loops (included only by files built with
// -ffp-contract=off, so nothing here is fused).
#pragma once

#include <cstdint>

namespace ckpt {

// Lane j (0..3) goes on summing x[i]·w[i] for i ≡ j (mod 4), i rising, over [from, k); then
// (l0 + l1) + (l2 + l3). W: float (the columns as given) or double (widened: the same values).
template <class W>
inline double f64_lanes_finish(double lane[4], const float* x, const W* w, uint64_t from, uint64_t k) {
  for (uint64_t i = from; i < k; ++i) lane[i % 4] += static_cast<double>(x[i]) * static_cast<double>(w[i]);
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

}  // namespace ckpt
