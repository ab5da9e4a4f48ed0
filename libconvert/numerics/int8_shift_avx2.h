// The AVX2 inner loops of the MXFP4 → INT8-shift remap (int8_shift_avx2.cpp); internal to
// int8_shift.cpp, which picks them at run time by the process's one ISA choice
// (ggml_dequant_isa(), numerics/ggml_dequant.h) and keeps its scalar loops as the reference
// they are tested against (tests/numerics/int8_shift_isa_test.cpp).
//
// These loops hold no arithmetic of the spec: the output nibble of each (delta, code) comes
// in a table built by int8_shift.cpp from remap_code_nibble, the shift of each delta in one
// built from remap_shift2_for, and the statistics' per-code values in tables too.
// They only move, look up and count bytes.
#pragma once

#include <cstdint>

namespace ckpt::int8_shift_avx2 {

// The largest of n >= 1 bytes. Precondition (all functions here): the CPU runs AVX2.
uint8_t max_byte(const uint8_t* p, uint64_t n);
// The smallest and largest of n >= 1 bytes.
void minmax_byte(const uint8_t* p, uint64_t n, uint8_t* lo, uint8_t* hi);

// The codes of the rows of one group of 8 (rows <= 8 of them: row r's packed E2M1 bytes at
// src_rows[r], its scales at scale_rows[r], its largest scale row_max[r]), tile by tile: block
// kb's 16 source bytes of row r, taken in kTileSourceByte order, each nibble c replaced by
// nibbles[min(row_max[r] − scale_rows[r][kb], delta_cap)][c], stored at tile + kb·tile_stride
// + 16·r. Precondition: every scale <= its row_max, every table entry < 16.
void remap_group(const uint8_t* const* src_rows, const uint8_t* const* scale_rows, const uint8_t* row_max,
                 uint64_t rows, uint64_t blocks, const uint8_t (*nibbles)[16], uint64_t delta_cap, uint8_t* tile,
                 uint64_t tile_stride);

// Per block kb of a row: nz_sq[kb] = (Σ nonzero[c]) << 16 | Σ square[c] over its 32 codes c
// (nonzero[c] in {0, 1}, square[c] <= 255): int8_shift.cpp's byte_nz_sq summed over a block.
void block_nz_sq(const uint8_t* src, uint64_t blocks, const uint8_t* nonzero, const uint8_t* square,
                 uint32_t* nz_sq);

// One row's shift2 bytes (ceil(blocks / 4) of them): field j of byte i (bits 2j, 2j+1) is
// shift_of[min(bmax − scales[4i + j], 15)], fields past the last block 0.
// Precondition: every scales[kb] <= bmax, every shift_of entry < 4.
void shift2_row(const uint8_t* scales, uint64_t blocks, uint8_t bmax, const uint8_t* shift_of, uint8_t* out);

}  // namespace ckpt::int8_shift_avx2
