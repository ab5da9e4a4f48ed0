// ckpt diff: which tensors changed, where, by how much, with the documented definitions
// (element differs = stored bytes differ; abs/rel over finite values; NaN/Inf counted apart).
#include "diff/diff.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "formats/json.h"
#include "test_util.h"

namespace ckpt {
namespace {

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::string f32_header(const std::string& name, size_t n, size_t begin = 0) {
  return "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(n) + "],\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(begin + 4 * n) + "]}";
}

// std::string("{") + ...: `"{" + <temporary>` trips GCC 12's -Wrestrict false positive at -O3 (bug 105329).
void write_f32_model(const std::string& path, const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<uint8_t> payload = f32_bytes(a);
  auto pb = f32_bytes(b);
  payload.insert(payload.end(), pb.begin(), pb.end());
  test::write_file(path, test::make_safetensors(std::string("{") + f32_header("t.a", a.size()) + "," +
                                                    f32_header("t.b", b.size(), 4 * a.size()) + "}",
                                                payload));
}

const TensorDiff* find(const DiffReport& r, const std::string& name) {
  for (const auto& d : r.diffs)
    if (d.name == name) return &d;
  return nullptr;
}

TEST(Diff, IdenticalModelsAreTheSame) {
  const std::string m = test::fixture("oracle/dsv3-tiny");
  DiffReport r = diff_models(m, m, {});
  EXPECT_EQ(r.status, DiffStatus::same);
  EXPECT_EQ(r.compared, 10u);
  EXPECT_EQ(r.identical, 10u);
  EXPECT_TRUE(r.diffs.empty());
}

TEST(Diff, CountsAndMaximaFollowTheDefinitions) {
  test::TempDir tmp;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  write_f32_model(tmp.str("a.safetensors"), {1.0f, 2.0f, 0.0f, 4.0f, nan, 8.0f, 5.0f}, {1.0f});
  write_f32_model(tmp.str("b.safetensors"), {1.0f, 2.5f, -0.0f, 3.0f, 1.0f, inf, 5.0f}, {1.0f});
  DiffReport r = diff_models(tmp.str("a.safetensors"), tmp.str("b.safetensors"), {});
  EXPECT_EQ(r.status, DiffStatus::different);
  EXPECT_EQ(r.differing, 1u);
  EXPECT_EQ(r.identical, 1u);
  const TensorDiff* d = find(r, "t.a");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->kind, "values");
  EXPECT_EQ(d->first_element, 1u);
  EXPECT_EQ(d->first_byte, 4u + 2u);  // 2.0f = 0x40000000, 2.5f = 0x40200000: byte 2 of the element
  EXPECT_EQ(*d->value_a, 2.0f);
  EXPECT_EQ(*d->value_b, 2.5f);
  EXPECT_EQ(d->elements, 7u);
  EXPECT_EQ(d->differing_elements, 5u);   // 2/2.5, 0/-0, 4/3, nan/1, 8/inf
  EXPECT_EQ(d->nonfinite_mismatches, 2u);  // nan/1, 8/inf: not in the maxima
  EXPECT_DOUBLE_EQ(d->max_abs_diff, 1.0);  // 4 vs 3
  EXPECT_DOUBLE_EQ(d->max_rel_diff, 0.25);  // 1/4 (0.5/2.5 = 0.2)
}

TEST(Diff, MissingExtraTypeAndShapeChangesAreNamed) {
  test::TempDir tmp;
  test::write_file(tmp.str("a.safetensors"),
                   test::make_safetensors(std::string("{") + f32_header("gone", 1) + "," + f32_header("same", 1, 4) + "," +
                                              f32_header("reshaped", 2, 8) + "," + f32_header("retyped", 1, 16) + "}",
                                          std::vector<uint8_t>(20, 0)));
  test::write_file(tmp.str("b.safetensors"),
                   test::make_safetensors(std::string("{") + f32_header("same", 1) + "," + f32_header("new", 1, 4) + "," +
                                              R"("reshaped":{"dtype":"F32","shape":[1,2],"data_offsets":[8,16]},)"
                                              R"("retyped":{"dtype":"I32","shape":[1],"data_offsets":[16,20]}})",
                                          std::vector<uint8_t>(20, 0)));
  DiffReport r = diff_models(tmp.str("a.safetensors"), tmp.str("b.safetensors"), {});
  EXPECT_EQ(r.status, DiffStatus::different);
  EXPECT_EQ(r.only_in_a, 1u);
  EXPECT_EQ(r.only_in_b, 1u);
  EXPECT_EQ(r.changed_type_or_shape, 2u);
  EXPECT_EQ(r.identical, 1u);
  ASSERT_TRUE(find(r, "gone"));
  EXPECT_EQ(find(r, "gone")->kind, "only_in_a");
  ASSERT_TRUE(find(r, "new"));
  EXPECT_EQ(find(r, "new")->kind, "only_in_b");
  ASSERT_TRUE(find(r, "reshaped"));
  EXPECT_EQ(find(r, "reshaped")->kind, "shape");
  ASSERT_TRUE(find(r, "retyped"));
  EXPECT_EQ(find(r, "retyped")->kind, "type");
  const std::string text = diff_report_text(r);
  EXPECT_NE(text.find("gone: only in A"), std::string::npos) << text;
  EXPECT_NE(text.find("retyped: type changed: F32 [1] -> I32 [1]"), std::string::npos) << text;
  // --max caps the list, not the counts.
  DiffOptions o;
  o.max_reported = 1;
  DiffReport capped = diff_models(tmp.str("a.safetensors"), tmp.str("b.safetensors"), o);
  EXPECT_EQ(capped.diffs.size(), 1u);
  EXPECT_TRUE(capped.truncated);
  EXPECT_EQ(capped.only_in_a + capped.only_in_b + capped.changed_type_or_shape, 4u);
}

TEST(Diff, QuantizedGgufBlocksAreComparedByDecodedValues) {
  test::TempDir tmp;
  const std::string a = test::fixture("ggml/qwen3next-tiny.gguf");
  test::copy_tree(a, tmp.str("b.gguf"));
  auto bytes = test::read_file(tmp.str("b.gguf"));
  uint64_t offset = 0;
  {
    auto m = test::load_model_checked(a);
    const ModelTensor* t = m->view.find("blk.0.ffn_down_shexp.weight");  // Q8_0: 34-byte blocks of 32
    ASSERT_TRUE(t);
    offset = t->offset;
  }
  bytes[offset + 34 * 3 + 2 + 5] ^= 0x04;  // block 3, quant 5
  test::write_file(tmp.str("b.gguf"), bytes);
  DiffReport r = diff_models(a, tmp.str("b.gguf"), {});
  EXPECT_EQ(r.status, DiffStatus::different);
  const TensorDiff* d = find(r, "blk.0.ffn_down_shexp.weight");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->first_byte, 34u * 3 + 7);
  EXPECT_EQ(d->first_element, 32u * 3 + 5);
  EXPECT_EQ(d->differing_elements, 1u);
  ASSERT_TRUE(d->value_a && d->value_b);
  EXPECT_NE(*d->value_a, *d->value_b);
  EXPECT_GT(d->max_abs_diff, 0.0);
  EXPECT_EQ(r.differing, 1u);
}

TEST(DiffCli, ExitCodesAndJson) {
  const auto q = test::shell_quote;
  const std::string a = test::fixture("oracle/dsv4-tiny.qw-bf16");
  EXPECT_EQ(test::run_ckpt("diff " + q(a) + " " + q(a)).exit_code, 0);
  EXPECT_EQ(test::run_ckpt("diff " + q(a) + " /nonexistent").exit_code, 3);
  EXPECT_EQ(test::run_ckpt("diff " + q(a)).exit_code, 2);
  auto r = test::run_ckpt("diff --max 2 --json - " + q(test::fixture("oracle/dsv4-tiny")) + " " + q(a));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  JsonDoc doc;
  std::string error;
  ASSERT_TRUE(doc.parse(r.out, error)) << error << r.out.substr(0, 300);
  EXPECT_EQ(json_string(doc.root(), "schema"), "ckptkit/diff-report/v1");
  auto summary = json_get(doc.root(), "summary");
  ASSERT_TRUE(summary);
  EXPECT_EQ(json_int(*summary, "only_in_a"), 42);  // the consumed FP8 scales
  EXPECT_EQ(json_int(*summary, "changed_type_or_shape"), 42);  // FP8 -> BF16
  simdjson::dom::array tensors;
  ASSERT_FALSE(json_get(doc.root(), "tensors")->get_array().get(tensors));
  EXPECT_EQ(tensors.size(), 2u);
}

}  // namespace
}  // namespace ckpt
