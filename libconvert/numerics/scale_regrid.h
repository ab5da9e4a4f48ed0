// Re-blocking a block-FP8 scale grid (ckpt relayout): a weight [rows, cols] quantized in
// blocks [old_rows, old_cols] has the scale grid [ceil(rows/old_rows), ceil(cols/old_cols)];
// split into blocks [new_rows, new_cols] that divide the old ones, every new block lies
// inside exactly one old block, so repeating the old block's scale for each of its
// sub-blocks gives every element the very scale it had: the dequantized values are the
// same bit for bit, and the FP8 bytes do not change. Ragged edges stay exact: a 192-row
// weight on a 128 grid has 2 scale rows; on a 64 grid 3, the third repeating the second.
// Scale elements are copied as bytes (any width: F32, BF16, F16, E8M0): no value is read.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "numerics/fp8.h"

namespace ckpt {

// The old grid and the new block.
struct Regrid {
  Fp8Grid from;                 // rows, cols and the old block
  uint64_t block_rows = 0, block_cols = 0;  // the new block (divides the old)
  uint64_t element_bytes = 4;   // one scale element
};

// Why the regrid cannot be done ("" when it can): a zero size, a new block that does not
// divide the old one, a product past 2^62.
std::string regrid_problem(const Regrid& r);

// Bytes of the old and of the new scale grid.
uint64_t regrid_input_bytes(const Regrid& r);
uint64_t regrid_output_bytes(const Regrid& r);

// The old row and column of new scale (i, j): the old block that holds new block (i, j).
inline uint64_t regrid_source_row(const Regrid& r, uint64_t i) { return i * r.block_rows / r.from.block_rows; }
inline uint64_t regrid_source_col(const Regrid& r, uint64_t j) { return j * r.block_cols / r.from.block_cols; }

// Writes the new grid (row-major) into `out` from the old grid `in`. False when the sizes
// do not match regrid_input_bytes / regrid_output_bytes or regrid_problem is not empty.
bool regrid_scales(const Regrid& r, std::span<const uint8_t> in, std::span<uint8_t> out);

}  // namespace ckpt
