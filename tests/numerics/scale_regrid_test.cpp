// Re-gridding block scales (libconvert/numerics/scale_regrid.h): each new scale is the old
// scale of the block that holds it, ragged edges included; blocks that do not divide are refused.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "numerics/scale_regrid.h"

namespace ckpt {
namespace {

// A 192 x 300 weight on a 128 x 128 grid: 2 x 3 scales, rows 128..191 and columns 256..299
// in partial blocks; re-gridded to 64 x 32 it has 3 x 10 scales.
TEST(ScaleRegrid, ARaggedWeightOnA128GridRegridsTo64x32WithEveryElementKeepingItsScale) {
  const Regrid r{Fp8Grid{192, 300, 128, 128}, 64, 32, 4};
  ASSERT_EQ(regrid_problem(r), "");
  EXPECT_EQ(regrid_input_bytes(r), 2u * 3u * 4u);
  EXPECT_EQ(regrid_output_bytes(r), 3u * 10u * 4u);
  std::vector<float> old_scales = {1, 2, 3, 4, 5, 6};  // [2, 3]
  std::vector<uint8_t> in(24), out(120);
  std::memcpy(in.data(), old_scales.data(), 24);
  ASSERT_TRUE(regrid_scales(r, in, out));
  std::vector<float> got(30);
  std::memcpy(got.data(), out.data(), 120);
  // Every element (i, j) of the weight: the new grid's scale equals the old grid's.
  for (uint64_t i = 0; i < 192; ++i)
    for (uint64_t j = 0; j < 300; ++j)
      ASSERT_EQ(got[(i / 64) * 10 + j / 32], old_scales[(i / 128) * 3 + j / 128]) << i << ", " << j;
  EXPECT_EQ(got[2 * 10 + 9], 6.0f);  // the third row of 64 repeats the second old row
}

TEST(ScaleRegrid, OneByteE8m0ScalesAreCopiedAsBytes) {
  const Regrid r{Fp8Grid{256, 128, 128, 128}, 32, 128, 1};
  std::vector<uint8_t> in = {0x7F, 0x80}, out(8);
  ASSERT_TRUE(regrid_scales(r, in, out));
  EXPECT_EQ(out, (std::vector<uint8_t>{0x7F, 0x7F, 0x7F, 0x7F, 0x80, 0x80, 0x80, 0x80}));
}

TEST(ScaleRegrid, ABlockThatDoesNotDivideTheOldOneOrWrongSizesAreRefused) {
  const Regrid bad{Fp8Grid{192, 256, 128, 128}, 48, 128, 4};
  EXPECT_NE(regrid_problem(bad).find("does not divide"), std::string::npos);
  std::vector<uint8_t> in(16), out(64);
  EXPECT_FALSE(regrid_scales(bad, in, out));
  const Regrid ok{Fp8Grid{192, 256, 128, 128}, 64, 128, 4};
  std::vector<uint8_t> short_in(15), right_out(3 * 2 * 4);
  EXPECT_FALSE(regrid_scales(ok, short_in, right_out));
  EXPECT_NE(regrid_problem(Regrid{Fp8Grid{1, 1, 128, 128}, 0, 128, 4}), "");
  // A grid whose size does not fit in 2^62 bytes is a problem, not an overflow.
  EXPECT_NE(regrid_problem(Regrid{Fp8Grid{uint64_t{1} << 40, uint64_t{1} << 40, 128, 128}, 1, 1, 4}), "");
}

}  // namespace
}  // namespace ckpt
