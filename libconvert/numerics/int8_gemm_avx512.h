// The AVX-512 loop of gemm_f64 (int8_gemm_avx512.cpp); internal to int8_gemm_ref.cpp, which
// runs it where the process's ISA choice is avx512 (ggml_dequant_isa(), numerics/
// ggml_dequant.h) and keeps the scalar loop as the reference it is tested against
// (tests/numerics/int8_gemm_ref_test.cpp).
#pragma once

#include <cstdint>

namespace ckpt::int8_gemm_avx512 {

// y[r·n + c] = x[r] · w[c] in double in the fixed order of gemm_f64 (int8_gemm_ref.h), the
// bits of the scalar and AVX2 loops. Precondition: supported().
void f64_gemm(const float* x, const float* w, uint64_t m, uint64_t n, uint64_t k, double* y);

// Whether the CPU runs AVX-512F, AVX2 and FMA (f64_gemm's precondition).
bool supported();

}  // namespace ckpt::int8_gemm_avx512
