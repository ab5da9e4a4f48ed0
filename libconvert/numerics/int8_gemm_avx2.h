// The AVX2 inner loops of decode_int8_shift, int8_gemm_bf16 and gemm_f64 (int8_gemm_avx2.cpp); internal to
// int8_gemm_ref.cpp, which picks them at run time by the process's one ISA choice
// (ggml_dequant_isa(), numerics/ggml_dequant.h) and keeps the scalar loops as the
// reference they are tested against (tests/numerics/int8_gemm_ref_test.cpp).
#pragma once

#include <cstdint>

namespace ckpt::int8_gemm_avx2 {

// decode_int8_shift's q[row·k + i] of the row groups [g_begin, g_end) of an expert of `rows`
// rows, from its mxfp4 tiles and shift2 bytes (spec §4), in the scalar loop's tile order; q
// starts at row 8·g_begin. Precondition: the CPU runs AVX2, k % 32 == 0, the slabs have their
// §4 sizes and g_begin < g_end <= ceil(rows / 8).
void decode_int8_shift(const uint8_t* mxfp4, const uint8_t* shift2, uint64_t rows, uint64_t k, uint64_t g_begin,
                       uint64_t g_end, int8_t* q);

// acc[r·n + c] = Σ_i a[r·k + i]·q[c·k + i] in int32, for a [m, k] and q [n, k] int8.
// Precondition: the CPU runs AVX2 and k ≤ INT32_MAX / 128² (no partial sum can overflow).
void int32_gemm(const int8_t* a, const int8_t* q, uint64_t m, uint64_t n, uint64_t k, int32_t* acc);

// y[r·n + c] = x[r] · w[c] in double in the fixed order of gemm_f64 (int8_gemm_ref.h):
// lane j (0..3) sums x[i]·w[i] for i ≡ j (mod 4), i rising, then (l0 + l1) + (l2 + l3).
// Precondition: fma_supported() (the loop uses FMA: the products are exact, so it gives the
// scalar loop's multiply-then-add bits).
void f64_gemm(const float* x, const float* w, uint64_t m, uint64_t n, uint64_t k, double* y);

// Whether the CPU runs AVX2 and FMA (f64_gemm's precondition).
bool fma_supported();

}  // namespace ckpt::int8_gemm_avx2
