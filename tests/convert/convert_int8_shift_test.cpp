// `convert --experts int8-shift`: the fused INT8-shift tensors equal the production
// repack (Triton) and its torch fallback byte for byte; everything else equals the
// plain conversion; validate --reference understands the target.
#include <filesystem>

#include <gtest/gtest.h>

#include "convert/convert.h"
#include "formats/json.h"
#include "test_util.h"
#include "validate/validate.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

using test::describe;
using test::tensor_bytes;
const auto q = test::shell_quote;

ConvertReport convert_int8(const std::string& in, const std::string& out, RemapRounding rounding) {
  ConvertOptions o;
  o.input = in;
  o.output = out;
  o.experts = ExpertMode::int8_shift;
  o.remap.rounding = rounding;
  return convert_checkpoint(o);
}

void expect_fused_equal_oracle(const std::string& out, const std::string& oracle_file) {
  auto ours = test::load_model_checked(out);
  auto oracle = test::load_model_checked(test::fixture(oracle_file));
  size_t compared = 0;
  for (const auto& t : oracle->view.tensors) {
    const ModelTensor* mine = ours->view.find(t.name);
    ASSERT_NE(mine, nullptr) << t.name;
    EXPECT_EQ(mine->type, t.type) << t.name;
    EXPECT_EQ(mine->shape, t.shape) << t.name;
    EXPECT_TRUE(tensor_bytes(*ours, *mine) == tensor_bytes(*oracle, t)) << t.name << " differs from " << oracle_file;
    ++compared;
  }
  EXPECT_EQ(compared, 30u);  // 5 blocks x {w13, w2} x {mxfp4, shift2, channel_scale}
}

TEST(ConvertInt8Shift, DefaultRoundingEqualsTheTritonRepack) {
  test::TempDir tmp;
  auto r = convert_int8(test::fixture("oracle/dsv4-tiny"), tmp.str("out"), RemapRounding::half_away);
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  expect_fused_equal_oracle(tmp.str("out"), "oracle/dsv4-tiny.remap.triton.safetensors");
  EXPECT_EQ(r.plan.fused.size(), 10u);
  EXPECT_EQ(r.plan.consumed_expert_tensors, 5u * 8 * 3 * 2);
  // Statistics per fused matrix, as in oracle-report.json: no overflow, row span 6.
  ASSERT_EQ(r.remap_stats.size(), 10u);
  for (const auto& [index, st] : r.remap_stats) {
    EXPECT_EQ(st.overflow, 0u);
    EXPECT_EQ(st.row_span_max, 6);
    EXPECT_GT(st.exact_rate_nonzero(), 0.94);
    EXPECT_GT(st.blocks_folded, 0u);
  }
}

TEST(ConvertInt8Shift, HalfEvenEqualsTheTorchFallback) {
  test::TempDir tmp;
  auto r = convert_int8(test::fixture("oracle/dsv4-tiny"), tmp.str("out"), RemapRounding::half_even);
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  expect_fused_equal_oracle(tmp.str("out"), "oracle/dsv4-tiny.remap.torch.safetensors");
}

TEST(ConvertInt8Shift, NonExpertTensorsEqualThePlainConversionAndConfigRecordsTheFormat) {
  test::TempDir tmp;
  ASSERT_EQ(convert_int8(test::fixture("oracle/dsv4-tiny"), tmp.str("out"), RemapRounding::half_away).status,
            ConvertStatus::ok);
  auto ours = test::load_model_checked(tmp.str("out"));
  auto keep = test::load_model_checked(test::fixture("oracle/dsv4-tiny.qw-bf16"));
  size_t same = 0;
  for (const auto& t : keep->view.tensors) {
    if (t.name.find(".ffn.experts.") != std::string::npos) {
      EXPECT_EQ(ours->view.find(t.name), nullptr) << t.name << " must be folded into the fused tensors";
      continue;
    }
    const ModelTensor* mine = ours->view.find(t.name);
    ASSERT_NE(mine, nullptr) << t.name;
    EXPECT_EQ(ours->view.file_of(*mine), keep->view.file_of(t)) << t.name;
    EXPECT_TRUE(tensor_bytes(*ours, *mine) == tensor_bytes(*keep, t)) << t.name;
    ++same;
  }
  EXPECT_GT(same, 100u);
  const ModelTensor* fused = ours->view.find("layers.1.ffn.experts.w13.mxfp4");
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(ours->view.file_of(*fused), "model-00003-of-00007.safetensors");  // the block's shard
  auto format = json_get(json_get(ours->checkpoint.config->root(), "ckptkit_conversion").value(), "expert_format");
  ASSERT_TRUE(format);
  EXPECT_EQ(json_string(*format, "rounding"), "half-away");
  EXPECT_EQ(json_int(*format, "headroom_bits"), 3);
}

TEST(ConvertInt8Shift, ValidateReferenceRecomputesTheRemap) {
  test::TempDir tmp;
  std::string out = tmp.str("out");
  ASSERT_EQ(convert_int8(test::fixture("oracle/dsv4-tiny"), out, RemapRounding::half_even).status, ConvertStatus::ok);
  ValidateOptions o;
  o.reference = test::fixture("oracle/dsv4-tiny");
  o.deep = true;
  auto clean = validate_path(out, o);
  EXPECT_FALSE(clean.findings.has_errors()) << describe(clean.findings);
  auto m = test::load_model_checked(out);
  const ModelTensor* t = m->view.find("mtp.0.ffn.experts.w2.mxfp4");
  std::string path = m->view.file_paths[t->file];
  auto bytes = test::read_file(path);
  bytes[t->offset + t->nbytes - 100] ^= 0x10;
  test::write_file(path, bytes);
  auto broken = validate_path(out, o);
  EXPECT_TRUE(broken.findings.has_code("REF_CONVERTED_DIFFER")) << describe(broken.findings);
}

TEST(ConvertInt8Shift, ReservedScaleIsAnErrorNamingTensorRowAndBlock) {
  test::TempDir tmp;
  std::string in = tmp.str("in");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  auto m = test::load_model_checked(in);
  const ModelTensor* s = m->view.find("layers.2.ffn.experts.5.w3.scale");  // [128, 8]
  std::string path = m->view.file_paths[s->file];
  auto bytes = test::read_file(path);
  bytes[s->offset + 3 * 8 + 6] = 0xFF;  // row 3, block 6
  test::write_file(path, bytes);
  auto r = convert_int8(in, tmp.str("out"), RemapRounding::half_away);
  EXPECT_EQ(r.status, ConvertStatus::input_error);
  std::string text = describe(r.findings);
  EXPECT_NE(text.find("layers.2.ffn.experts.5.w3.scale"), std::string::npos) << text;
  EXPECT_NE(text.find("row 3, block 6"), std::string::npos) << text;
}

TEST(ConvertInt8Shift, DryRunOfThe0731SparseCheckpoint) {
  test::TempDir tmp;
  std::string in = tmp.str("0731");
  ASSERT_EQ(test::run_ckpt("synth deepseek-v4-flash-0731 " + q(in) + " --sparse").exit_code, 0);
  auto r = test::run_ckpt("convert --dry-run --experts int8-shift --json - " + q(in) + " " + q(tmp.str("out")));
  // A dry run that says NOT ENOUGH exits 1 (this disk may not hold the real-size output).
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.err;
  JsonDoc doc;
  std::string error;
  ASSERT_TRUE(doc.parse(r.out, error)) << error;
  auto totals = json_get(doc.root(), "totals");
  ASSERT_TRUE(totals);
  EXPECT_EQ(r.exit_code, json_int(*totals, "disk_needed") > json_int(*totals, "disk_free") ? 1 : 0);
  // 71,927 - 70,656 per-expert tensors + 46 blocks x 6 fused tensors.
  EXPECT_EQ(json_int(*totals, "tensors"), 1547);
  EXPECT_EQ(json_int(*totals, "remapped_expert_tensors"), 92);
  EXPECT_EQ(json_int(*totals, "consumed_expert_tensors"), 70656);
  // spec §2: 3,279,945,728 B per block replace the kept MXFP4 weights and scales.
  EXPECT_EQ(json_int(*totals, "payload_bytes"), 173182190584 - 148176371712 - 9261023232 + 46 * 3279945728LL);
}

}  // namespace
}  // namespace ckpt
