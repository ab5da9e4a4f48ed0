// The one scale-validity rule (numerics/scale_rule.h) and its two users: validate --deep
// refuses every scale convert refuses, with the same verdict (FP8_SCALE_RANGE for FP8 E8M0
// exponents, E8M0_RESERVED for NaN codes, SCALE_INVALID for the rest).
#include "numerics/scale_rule.h"

#include <cmath>
#include <filesystem>
#include <limits>

#include <gtest/gtest.h>

#include "../model/tiny_checkpoint.h"
#include "test_util.h"

namespace ckpt {
namespace {

const auto q = test::shell_quote;

TEST(ScaleRule, MultipliersMustBeFinitePositiveAndKeepTheLargestProductInBf16) {
  EXPECT_EQ(multiplier_scale_problem(1.0f), ScaleProblem::none);
  EXPECT_EQ(multiplier_scale_problem(1e-30f), ScaleProblem::none);
  EXPECT_EQ(multiplier_scale_problem(0.0f), ScaleProblem::not_positive);
  EXPECT_EQ(multiplier_scale_problem(-0.0f), ScaleProblem::not_positive);
  EXPECT_EQ(multiplier_scale_problem(-0.5f), ScaleProblem::not_positive);
  EXPECT_EQ(multiplier_scale_problem(std::numeric_limits<float>::quiet_NaN()), ScaleProblem::nan);
  EXPECT_EQ(multiplier_scale_problem(std::numeric_limits<float>::infinity()), ScaleProblem::not_finite);
  EXPECT_EQ(multiplier_scale_problem(1e36f), ScaleProblem::overflows_bf16);  // 448 * 1e36 > 3.39e38
  EXPECT_EQ(multiplier_scale_problem(7e35f), ScaleProblem::none);            // 3.136e38 rounds to a finite BF16
}

TEST(ScaleRule, E8m0ExponentsAreRefusedWhereTheLargestProductOverflowsAndNaN) {
  EXPECT_EQ(e8m0_scale_problem(ScaleEncoding::fp8_e8m0, 246), ScaleProblem::none);
  EXPECT_EQ(e8m0_scale_problem(ScaleEncoding::fp8_e8m0, 247), ScaleProblem::overflows_bf16);
  EXPECT_EQ(e8m0_scale_problem(ScaleEncoding::fp8_e8m0, 3), ScaleProblem::none);
  EXPECT_EQ(e8m0_scale_problem(ScaleEncoding::fp8_e8m0, 2), ScaleProblem::inexact_bf16);  // reported, not refused
  EXPECT_FALSE(scale_problem_refused(ScaleProblem::inexact_bf16));
  EXPECT_EQ(e8m0_scale_problem(ScaleEncoding::fp8_e8m0, 0xFF), ScaleProblem::nan);
  EXPECT_EQ(e8m0_scale_problem(ScaleEncoding::mxfp4_e8m0, 0), ScaleProblem::none);  // E2M1 x 2^-127 is exact
  EXPECT_EQ(e8m0_scale_problem(ScaleEncoding::mxfp4_e8m0, 252), ScaleProblem::none);
  EXPECT_EQ(e8m0_scale_problem(ScaleEncoding::mxfp4_e8m0, 253), ScaleProblem::overflows_bf16);
  EXPECT_EQ(e8m0_scale_problem(ScaleEncoding::mxfp4_e8m0, 0xFF), ScaleProblem::nan);
}

TEST(ScaleRule, ASpanIsTalliedByProblemWithTheFirstElementOfEach) {
  ScaleCheck c;
  const auto bytes = test::f32_bytes({1.0f, -2.0f, 0.0f, 1e37f, -3.0f});
  check_scale_values(ScaleEncoding::fp8_multiplier, Dtype::F32, bytes, 10, c);
  EXPECT_EQ(c.refused(), 4u);
  EXPECT_EQ(c.first_refused(), ScaleProblem::not_positive);
  EXPECT_EQ(c.of(ScaleProblem::not_positive).count, 3u);
  EXPECT_EQ(c.of(ScaleProblem::not_positive).first, 11u);
  EXPECT_EQ(c.of(ScaleProblem::not_positive).value, -2.0);
  EXPECT_EQ(c.of(ScaleProblem::overflows_bf16).first, 13u);
  ScaleCheck later;
  check_scale_values(ScaleEncoding::fp8_multiplier, Dtype::BF16, std::vector<uint8_t>{0x80, 0x7F}, 15, later);  // +inf
  c.merge(later);
  EXPECT_EQ(c.refused(), 5u);
  EXPECT_EQ(c.of(ScaleProblem::not_finite).first, 15u);
  EXPECT_NE(scale_problem_text(ScaleEncoding::fp8_multiplier, ScaleProblem::not_positive, -2.0).find("-2, not a positive"),
            std::string::npos);
  const std::vector<uint64_t> shape{4, 4};  // element 11 = row 2, block 3, at byte 100 + 4 * 11
  EXPECT_EQ(scale_refusal_text(ScaleEncoding::fp8_multiplier, c, "f.safetensors", "w.weight_scale_inv", 100, 4, shape,
                               "w.weight"),
            "f.safetensors: scale w.weight_scale_inv at row 2, block 3 (byte 144), used by w.weight, is -2, not a "
            "positive multiplier; refusing to convert (5 such scale values in the tensor)");
  EXPECT_EQ(scale_refusal_text(ScaleEncoding::fp8_multiplier, ScaleCheck{}, "f", "s", 0, 4, shape, "w"), "");
}

// dsv3-tiny: F32 weight_scale_inv multipliers. Each value validate --deep passed on the base
// and convert refused or silently got wrong: now both refuse it.
TEST(ScaleRule, ValidateDeepRefusesEveryMultiplierConvertRefuses) {
  struct Poke {
    const char* name;
    float value;
    const char* code;
    const char* text;
  };
  for (const Poke& p : {Poke{"negative", -0.25f, "SCALE_INVALID", "not a positive multiplier"},
                        Poke{"zero", 0.0f, "SCALE_INVALID", "not a positive multiplier"},
                        Poke{"overflow", 1e36f, "SCALE_INVALID", "beyond BF16"}}) {
    SCOPED_TRACE(p.name);
    test::TempDir tmp;
    const std::string in = tmp.str("in"), out = tmp.str("out");
    test::copy_tree(test::fixture("oracle/dsv3-tiny"), in);
    auto m = test::load_model_checked(in);
    const ModelTensor* s = nullptr;
    for (const auto& t : m->view.tensors)
      if (t.name.ends_with(".weight_scale_inv") && !s) s = &t;
    ASSERT_NE(s, nullptr);
    const std::string path = m->view.file_paths[s->file], scale = s->name;
    const uint64_t at = s->offset + 4;  // element 1
    m.reset();
    auto bytes = test::read_file(path);
    const auto v = test::f32_bytes({p.value});
    std::copy(v.begin(), v.end(), bytes.begin() + static_cast<std::ptrdiff_t>(at));
    test::write_file(path, bytes);
    auto val = test::run_ckpt("validate --deep " + q(in));
    EXPECT_EQ(val.exit_code, 1) << val.out;
    EXPECT_NE(val.out.find(p.code), std::string::npos) << val.out;
    EXPECT_NE(val.out.find(scale), std::string::npos) << val.out;
    EXPECT_NE(val.out.find(p.text), std::string::npos) << val.out;
    auto conv = test::run_ckpt("convert -q " + q(in) + " " + q(out));
    EXPECT_EQ(conv.exit_code, 1) << conv.out << conv.err;
    EXPECT_NE((conv.out + conv.err).find(scale), std::string::npos) << conv.out << conv.err;
    EXPECT_NE((conv.out + conv.err).find(p.text), std::string::npos) << conv.out << conv.err;
    EXPECT_NE((conv.out + conv.err).find("byte " + std::to_string(at)), std::string::npos) << conv.out << conv.err;
  }
}

// MiniMax-style MXFP8: E8M0 exponents stored as U8 (scale_fmt ue8m0). The base checked the
// exponent range of F8_E8M0 tensors only, so a U8 250 or 0xFF passed validate --deep.
TEST(ScaleRule, ValidateDeepRefusesAU8E8m0ExponentOutOfRangeAsConvertDoes) {
  struct Poke {
    uint8_t byte;
    const char* code;
  };
  for (const Poke& p : {Poke{250, "FP8_SCALE_RANGE"}, Poke{0xFF, "E8M0_RESERVED"}}) {
    SCOPED_TRACE(static_cast<int>(p.byte));
    test::TempDir tmp;
    const std::string in = tmp.str("in"), out = tmp.str("out");
    std::vector<uint8_t> scales(4, 120);
    scales[2] = p.byte;
    test::write_tiny_checkpoint(
        in,
        R"({"model_type": "llama", "quantization_config": {"quant_method": "mxfp8", "weight_block_size": [1, 32], "scale_fmt": "ue8m0"}})",
        {{{"model.layers.0.mlp.up_proj.weight", "F8_E4M3", {4, 32}, std::vector<uint8_t>(128, 0x38)},
          {"model.layers.0.mlp.up_proj.weight_scale_inv", "U8", {4, 1}, scales}}});
    auto plain = test::run_ckpt("validate " + q(in));
    EXPECT_EQ(plain.exit_code, 0) << plain.out;  // the layout is fine: only the values are not
    auto val = test::run_ckpt("validate --deep " + q(in));
    EXPECT_EQ(val.exit_code, 1) << val.out;
    EXPECT_NE(val.out.find(p.code), std::string::npos) << val.out;
    EXPECT_NE(val.out.find("up_proj.weight_scale_inv"), std::string::npos) << val.out;
    auto conv = test::run_ckpt("convert -q " + q(in) + " " + q(out));
    EXPECT_EQ(conv.exit_code, 1) << conv.out << conv.err;
    EXPECT_NE((conv.out + conv.err).find("row 2, block 0"), std::string::npos) << conv.out << conv.err;
    const auto seed = test::read_file(in + "/model.safetensors");
    test::dump_fuzz_seed("safetensors_header", std::string("u8 e8m0 scale ") + p.code, seed);
  }
}

// gpt-oss X_scales (U8 E8M0 of MXFP4 blocks): 0xFF passed validate --deep on the base, and
// convert --experts bf16 refused it.
TEST(ScaleRule, ValidateDeepRefusesAnMxfp4BlockScaleConvertRefuses) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  test::copy_tree(test::fixture("families/gptoss-mxfp4/in"), in);
  auto m = test::load_model_checked(in);
  const ModelTensor* s = nullptr;
  for (const auto& t : m->view.tensors)
    if (t.name.ends_with("_scales") && !s) s = &t;
  ASSERT_NE(s, nullptr);
  const std::string path = m->view.file_paths[s->file], scale = s->name;
  const uint64_t at = s->offset + 3;
  m.reset();
  auto bytes = test::read_file(path);
  bytes[at] = 0xFF;
  test::write_file(path, bytes);
  auto val = test::run_ckpt("validate --deep " + q(in));
  EXPECT_EQ(val.exit_code, 1) << val.out;
  EXPECT_NE(val.out.find("E8M0_RESERVED"), std::string::npos) << val.out;
  EXPECT_NE(val.out.find(scale), std::string::npos) << val.out;
  auto conv = test::run_ckpt("convert -q --experts bf16 " + q(in) + " " + q(out));
  EXPECT_EQ(conv.exit_code, 1) << conv.out << conv.err;
  EXPECT_NE((conv.out + conv.err).find(scale), std::string::npos) << conv.out << conv.err;
}

}  // namespace
}  // namespace ckpt
