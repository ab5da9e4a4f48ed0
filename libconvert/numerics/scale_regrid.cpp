// Re-blocking a block-FP8 scale grid (scale_regrid.h): each new scale a byte copy of the
// old scale of the block that holds it.
#include "numerics/scale_regrid.h"

#include <cstring>


namespace ckpt {

namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

constexpr uint64_t kLimit = uint64_t{1} << 62;

bool grid_bytes(uint64_t rows, uint64_t cols, uint64_t br, uint64_t bc, uint64_t elem, uint64_t& out) {
  const uint64_t r = ceil_div(rows, br), c = ceil_div(cols, bc);
  if (r && c > kLimit / r) return false;
  if (r != 0 && c != 0 && elem > kLimit / (r * c)) return false;
  out = r * c * elem;
  return true;
}

}  // namespace

std::string regrid_problem(const Regrid& r) {
  const Fp8Grid& g = r.from;
  if (!g.block_rows || !g.block_cols || !r.block_rows || !r.block_cols || !r.element_bytes)
    return "a block or element size is 0";
  if (g.block_rows % r.block_rows || g.block_cols % r.block_cols)
    return "the new block " + std::to_string(r.block_rows) + "x" + std::to_string(r.block_cols) +
           " does not divide the old block " + std::to_string(g.block_rows) + "x" + std::to_string(g.block_cols);
  uint64_t bytes = 0;
  if (!grid_bytes(g.rows, g.cols, r.block_rows, r.block_cols, r.element_bytes, bytes))
    return "the new scale grid of a " + std::to_string(g.rows) + "x" + std::to_string(g.cols) + " weight is too large";
  return "";
}

uint64_t regrid_input_bytes(const Regrid& r) {
  uint64_t n = 0;
  return r.from.block_rows && r.from.block_cols &&
                 grid_bytes(r.from.rows, r.from.cols, r.from.block_rows, r.from.block_cols, r.element_bytes, n)
             ? n
             : 0;
}

uint64_t regrid_output_bytes(const Regrid& r) {
  uint64_t n = 0;
  return r.block_rows && r.block_cols && grid_bytes(r.from.rows, r.from.cols, r.block_rows, r.block_cols, r.element_bytes, n)
             ? n
             : 0;
}

bool regrid_scales(const Regrid& r, std::span<const uint8_t> in, std::span<uint8_t> out) {
  if (!regrid_problem(r).empty() || in.size() != regrid_input_bytes(r) || out.size() != regrid_output_bytes(r))
    return false;
  const uint64_t e = r.element_bytes;
  const uint64_t old_cols = ceil_div(r.from.cols, r.from.block_cols);
  const uint64_t new_rows = ceil_div(r.from.rows, r.block_rows), new_cols = ceil_div(r.from.cols, r.block_cols);
  uint8_t* dst = out.data();
  for (uint64_t i = 0; i < new_rows; ++i) {
    const uint8_t* src_row = in.data() + regrid_source_row(r, i) * old_cols * e;
    for (uint64_t j = 0; j < new_cols; ++j, dst += e) std::memcpy(dst, src_row + regrid_source_col(r, j) * e, e);
  }
  return true;
}

}  // namespace ckpt
