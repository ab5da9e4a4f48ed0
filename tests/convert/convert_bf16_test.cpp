// `convert --experts bf16`: every tensor BF16 (or its original F32/I64), routed MXFP4
// experts dequantized exactly, scales gone, config without quantization_config; the
// profile and validate --reference understand the target; resume and dry run work.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "convert/convert.h"
#include "formats/json.h"
#include "numerics/mxfp4.h"
#include "file_tree.h"
#include "test_util.h"
#include "model/pairing.h"
#include "validate/validate.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

using test::describe;
using test::tensor_bytes;
const auto q = test::shell_quote;

// Every regular, non-hidden file under `dir` with its bytes (tests/file_tree.h).
std::map<std::string, std::vector<uint8_t>> tree(const std::string& dir) {
  return test::file_tree(dir, test::TreeSkips::hidden);
}

ConvertReport convert_bf16(const std::string& in, const std::string& out, bool resume = false) {
  ConvertOptions o;
  o.input = in;
  o.output = out;
  o.experts = ExpertMode::bf16;
  o.resume = resume;
  return convert_checkpoint(o);
}

// dsv4-tiny: 5 blocks with routed experts (layers.0..2, mtp.0..1) x 8 experts x w1, w2, w3.
constexpr uint64_t kExperts = 5 * 8 * 3;

TEST(ConvertBf16, Dsv4TinyExpertsBecomeBf16AndEverythingElseEqualsThePlainConversion) {
  test::TempDir tmp;
  std::string in = test::fixture("oracle/dsv4-tiny"), out = tmp.str("out");
  auto r = convert_bf16(in, out);
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  EXPECT_EQ(r.plan.dequantized_experts, kExperts);
  auto src = test::load_model_checked(in);
  auto ours = test::load_model_checked(out);
  auto keep = test::load_model_checked(test::fixture("oracle/dsv4-tiny.qw-bf16"));  // the plain conversion
  uint64_t experts = 0, packed_bytes = 0, scale_bytes = 0;
  for (const auto& t : src->view.tensors) {
    if (t.type == "I8" && is_mxfp4_expert_name(t.name)) {
      const ModelTensor* mine = ours->view.find(t.name);
      ASSERT_NE(mine, nullptr) << t.name;
      EXPECT_EQ(mine->type, "BF16") << t.name;
      EXPECT_EQ(mine->shape, (std::vector<uint64_t>{t.shape[0], 2 * t.shape[1]})) << t.name;
      EXPECT_EQ(ours->view.file_of(*mine), src->view.file_of(t)) << t.name;
      ++experts;
      packed_bytes += t.nbytes;
      const std::string scale = t.name.substr(0, t.name.size() - 7) + ".scale";
      EXPECT_EQ(ours->view.find(scale), nullptr) << scale << " must be consumed";
      scale_bytes += src->view.find(scale)->nbytes;
    }
  }
  EXPECT_EQ(experts, kExperts);
  EXPECT_EQ(r.plan.expert_bytes_in, packed_bytes + scale_bytes);
  EXPECT_EQ(r.plan.expert_bytes_out, 4 * packed_bytes);
  for (const auto& t : ours->view.tensors) {
    EXPECT_NE(t.type, "F8_E4M3") << t.name;
    EXPECT_NE(t.type, "F8_E8M0") << t.name;
    EXPECT_NE(t.type, "I8") << t.name;
  }
  size_t same = 0;
  for (const auto& t : keep->view.tensors) {
    if (t.name.find(".ffn.experts.") != std::string::npos) continue;
    const ModelTensor* mine = ours->view.find(t.name);
    ASSERT_NE(mine, nullptr) << t.name;
    EXPECT_EQ(ours->view.file_of(*mine), keep->view.file_of(t)) << t.name;
    EXPECT_TRUE(tensor_bytes(*ours, *mine) == tensor_bytes(*keep, t)) << t.name;
    ++same;
  }
  EXPECT_EQ(same + kExperts, ours->view.tensors.size());

  const auto& cfg = ours->checkpoint.config->root();
  EXPECT_FALSE(json_get(cfg, "quantization_config").has_value());
  EXPECT_EQ(json_string(cfg, "expert_dtype"), "bf16");
  EXPECT_EQ(json_string(cfg, "torch_dtype"), "bfloat16");
  auto record = json_get(cfg, "ckptkit_conversion");
  ASSERT_TRUE(record);
  EXPECT_EQ(json_string(*record, "experts"), "bf16");
  EXPECT_EQ(json_int(*record, "converted_tensors"), static_cast<int64_t>(r.plan.converted));
  EXPECT_EQ(json_int_array(cfg, "dspark_target_layer_ids"), (std::vector<int64_t>{1, 2}));  // other keys kept

  // The index covers every tensor with the new total size.
  JsonDoc index;
  std::string error;
  ASSERT_TRUE(index.parse(std::string(reinterpret_cast<const char*>(test::read_file(out + "/model.safetensors.index.json").data()),
                                      fs::file_size(out + "/model.safetensors.index.json")),
                          error))
      << error;
  uint64_t payload = 0;
  for (const auto& t : ours->view.tensors) payload += t.nbytes;
  EXPECT_EQ(json_int(*json_get(index.root(), "metadata"), "total_size"), static_cast<int64_t>(payload));
}

// Every expert value against an independent decode (float e2m1 x 2^(b-127), narrowed), and
// one expert against `ckpt dump --as f32` of the input (the library's other MXFP4 path).
TEST(ConvertBf16, ExpertBitsEqualAnIndependentDecodeAndTheDumpOfTheInput) {
  test::TempDir tmp;
  std::string in = test::fixture("oracle/dsv4-tiny"), out = tmp.str("out");
  ASSERT_EQ(convert_bf16(in, out).status, ConvertStatus::ok);
  auto src = test::load_model_checked(in);
  auto ours = test::load_model_checked(out);
  uint64_t values = 0, negative_zeros = 0;
  for (const auto& t : src->view.tensors) {
    if (t.type != "I8" || !is_mxfp4_expert_name(t.name)) continue;
    auto packed = tensor_bytes(*src, t);
    auto scales = tensor_bytes(*src, t.name.substr(0, t.name.size() - 7) + ".scale");
    auto bf16 = tensor_bytes(*ours, t.name);
    const uint64_t k = 2 * t.shape[1];
    ASSERT_EQ(bf16.size(), 2 * k * t.shape[0]);
    for (uint64_t e = 0; e < k * t.shape[0]; ++e) {
      const uint8_t code = (packed[e / 2] >> (4 * (e % 2))) & 0xF;
      const float want = std::ldexp(e2m1_to_float(code), static_cast<int>(scales[e / 32]) - 127);
      uint32_t bits = 0;
      std::memcpy(&bits, &want, 4);
      ASSERT_EQ(bits & 0xFFFFu, 0u) << t.name << " element " << e;
      const uint16_t got = static_cast<uint16_t>(bf16[2 * e] | bf16[2 * e + 1] << 8);
      ASSERT_EQ(got, bits >> 16) << t.name << " element " << e;
      negative_zeros += got == 0x8000;
      ++values;
    }
  }
  EXPECT_EQ(values, kExperts * 128 * 256);  // w1, w3 [128, 256] and w2 [256, 128] elements each
  EXPECT_GT(negative_zeros, 0u);  // code 8 stays -0

  const std::string name = "mtp.1.ffn.experts.7.w2.weight";
  auto dumped = test::run_ckpt("dump " + q(in) + " " + name + " --as f32 -o " + q(tmp.str("w2.f32")));
  ASSERT_EQ(dumped.exit_code, 0) << dumped.err;
  auto f32 = test::read_file(tmp.str("w2.f32"));
  auto bf16 = tensor_bytes(*ours, name);
  ASSERT_EQ(f32.size(), 2 * bf16.size());
  for (size_t i = 0; i < bf16.size() / 2; ++i) {
    const uint8_t widened[4] = {0, 0, bf16[2 * i], bf16[2 * i + 1]};  // BF16 -> F32 is exact
    ASSERT_EQ(std::memcmp(widened, f32.data() + 4 * i, 4), 0) << name << " element " << i;
  }
}

TEST(ConvertBf16, ProfileAndValidateReferenceAcceptTheOutputAndCatchAFlippedByte) {
  test::TempDir tmp;
  std::string in = test::fixture("oracle/dsv4-tiny"), out = tmp.str("out");
  ASSERT_EQ(convert_bf16(in, out).status, ConvertStatus::ok);
  auto plain = validate_path(out, ValidateOptions{});
  EXPECT_FALSE(plain.findings.has_errors()) << describe(plain.findings);
  auto cli = test::run_ckpt("validate --deep --reference " + q(in) + " " + q(out));
  EXPECT_EQ(cli.exit_code, 0) << cli.out << cli.err;
  EXPECT_NE(cli.out.find("VERDICT: PASS"), std::string::npos) << cli.out;

  auto m = test::load_model_checked(out);
  const ModelTensor* t = m->view.find("layers.1.ffn.experts.3.w3.weight");  // BF16 [128, 256]
  std::string path = m->view.file_paths[t->file];
  auto bytes = test::read_file(path);
  bytes[t->offset + 2 * (5 * 256 + 17) + 1] ^= 0x01;  // row 5, column 17
  test::write_file(path, bytes);
  ValidateOptions o;
  o.reference = in;
  o.deep = true;
  auto broken = validate_path(out, o);
  ASSERT_TRUE(broken.findings.has_code("REF_CONVERTED_DIFFER")) << describe(broken.findings);
  std::string text = describe(broken.findings);
  EXPECT_NE(text.find("row 5, column 17"), std::string::npos) << text;
}

TEST(ConvertBf16, ProfileRejectsExpertsThatDoNotMatchExpertDtype) {
  test::TempDir tmp;
  std::string out = tmp.str("out");
  ASSERT_EQ(convert_bf16(test::fixture("oracle/dsv4-tiny"), out).status, ConvertStatus::ok);
  // The same tensors under a config that still claims fp4 experts: wrong dtype and shape.
  auto cfg = test::read_file(out + "/config.json");
  std::string text(cfg.begin(), cfg.end());
  text.replace(text.find("\"expert_dtype\": \"bf16\""), 22, "\"expert_dtype\": \"fp4\" ");
  test::write_text(out + "/config.json", text);
  auto r = validate_path(out, ValidateOptions{});
  EXPECT_TRUE(r.findings.has_code("DSV4_CONFIG_MISSING_KEY")) << describe(r.findings);  // no quantization_config

  // A BF16-expert config over a keep conversion (MXFP4 experts still there) is caught too.
  std::string keep = tmp.str("keep");
  test::copy_tree(test::fixture("oracle/dsv4-tiny.qw-bf16"), keep);
  auto kc = test::read_file(keep + "/config.json");
  std::string ktext(kc.begin(), kc.end());
  ktext.replace(ktext.find("\"expert_dtype\": \"fp4\""), 21, "\"expert_dtype\": \"bf16\"");
  test::write_text(keep + "/config.json", ktext);
  auto k = validate_path(keep, ValidateOptions{});
  EXPECT_TRUE(k.findings.has_code("CAT_DTYPE_MISMATCH")) << describe(k.findings);

  // The original (FP8 + MXFP4) under a fully-BF16 config: no loader route for its FP8.
  std::string orig = tmp.str("orig");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), orig);
  auto oc = test::read_file(orig + "/config.json");
  std::string otext(oc.begin(), oc.end());
  otext.replace(otext.find("\"expert_dtype\": \"fp4\""), 21, "\"expert_dtype\": \"bf16\"");
  size_t qc = otext.find(",\n  \"quantization_config\"");
  ASSERT_NE(qc, std::string::npos);
  otext = otext.substr(0, qc) + "\n}\n";
  test::write_text(orig + "/config.json", otext);
  auto o = validate_path(orig, ValidateOptions{});
  EXPECT_TRUE(o.findings.has_code("DSV4_QUANT_CONFIG")) << describe(o.findings);
  EXPECT_TRUE(o.findings.has_code("CAT_DTYPE_MISMATCH")) << describe(o.findings);
}

// Copies dsv4-tiny and overwrites bytes of one tensor.
std::string damaged_copy(const test::TempDir& tmp, const std::string& tensor,
                         const std::vector<std::pair<uint64_t, uint8_t>>& edits) {
  std::string in = tmp.str("in");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  auto m = test::load_model_checked(in);
  const ModelTensor* t = m->view.find(tensor);
  EXPECT_NE(t, nullptr) << tensor;
  if (!t) return in;
  std::string path = m->view.file_paths[t->file];
  auto bytes = test::read_file(path);
  for (auto [at, value] : edits) bytes[t->offset + at] = value;
  test::write_file(path, bytes);
  return in;
}

TEST(ConvertBf16, ReservedScaleIsAnErrorNamingTensorRowAndBlock) {
  test::TempDir tmp;
  std::string in = damaged_copy(tmp, "layers.2.ffn.experts.5.w3.scale", {{3 * 8 + 6, 0xFF}});  // [128, 8]
  auto r = convert_bf16(in, tmp.str("out"));
  EXPECT_EQ(r.status, ConvertStatus::input_error);
  std::string text = describe(r.findings);
  EXPECT_NE(text.find("layers.2.ffn.experts.5.w3.scale"), std::string::npos) << text;
  EXPECT_NE(text.find("row 3, block 6"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(tmp.str("out") + "/config.json"));
}

TEST(ConvertBf16, OverflowingExpertIsAnErrorNamingTheElement) {
  test::TempDir tmp;
  // layers.0.ffn.experts.2.w1: [128, 128] packed, scale [128, 8]. Row 4, block 1 gets
  // exponent 127 (b = 254) and its element 32 + 7 = 39 (byte 19, high nibble) code 4 (2.0):
  // 2 * 2^127 = 2^128 is past BF16's largest finite value.
  std::string in = tmp.str("in");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  auto m = test::load_model_checked(in);
  const ModelTensor* w = m->view.find("layers.0.ffn.experts.2.w1.weight");
  const ModelTensor* s = m->view.find("layers.0.ffn.experts.2.w1.scale");
  ASSERT_TRUE(w && s);
  auto wb = test::read_file(m->view.file_paths[w->file]);
  for (uint64_t j = 16; j < 32; ++j) wb[w->offset + 4 * 128 + j] = 0x11;  // block 1 of row 4: all 0.5
  wb[w->offset + 4 * 128 + 19] = 0x41;                                     // element 39 = 2.0
  test::write_file(m->view.file_paths[w->file], wb);
  auto sb = test::read_file(m->view.file_paths[s->file]);
  sb[s->offset + 4 * 8 + 1] = 254;
  test::write_file(m->view.file_paths[s->file], sb);
  auto r = convert_bf16(in, tmp.str("out"));
  EXPECT_EQ(r.status, ConvertStatus::input_error);
  std::string text = describe(r.findings);
  EXPECT_NE(text.find("layers.0.ffn.experts.2.w1.weight"), std::string::npos) << text;
  // The scale rule refuses the exponent itself (6 x 2^127 is beyond BF16), naming its block.
  EXPECT_NE(text.find("scale layers.0.ffn.experts.2.w1.scale at row 4, block 1"), std::string::npos) << text;
  EXPECT_NE(text.find("beyond BF16"), std::string::npos) << text;
}

TEST(ConvertBf16, KilledThenResumedIsByteIdenticalAndResumeRedoesADamagedShard) {
  test::TempDir tmp;
  std::string in = test::fixture("oracle/dsv4-tiny"), clean_dir = tmp.str("clean");
  ASSERT_EQ(convert_bf16(in, clean_dir).status, ConvertStatus::ok);
  auto clean = tree(clean_dir);
  for (int k : {2, 9, 17, 30, 37}) {  // shard 1 header; inside shards 2, 4 and 6; the index
    std::string out = tmp.str("run" + std::to_string(k));
    auto killed = test::run_ckpt_env("CKPT_TEST_KILL_AT=" + std::to_string(k),
                                     "convert -q --experts bf16 " + q(in) + " " + q(out));
    ASSERT_EQ(killed.exit_code, 128 + 9) << "kill point " << k << ": " << killed.err;
    for (const auto& [name, bytes] : tree(out)) EXPECT_EQ(bytes, clean.at(name)) << "kill point " << k << ": " << name;
    auto resumed = test::run_ckpt("convert -q --resume --experts bf16 " + q(in) + " " + q(out));
    ASSERT_EQ(resumed.exit_code, 0) << "kill point " << k << ": " << resumed.err;
    EXPECT_EQ(tree(out), clean) << "kill point " << k;
  }
  // A damaged expert shard is redone; a resume with another expert mode redoes everything.
  auto bytes = test::read_file(clean_dir + "/model-00003-of-00007.safetensors");
  bytes[bytes.size() - 7] ^= 0xFF;
  test::write_file(clean_dir + "/model-00003-of-00007.safetensors", bytes);
  auto r = convert_bf16(in, clean_dir, true);
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  EXPECT_EQ(r.shards_written, 1u);
  EXPECT_EQ(r.shards_resumed, 6u);
  EXPECT_EQ(tree(clean_dir), clean);
}

TEST(ConvertBf16, DryRunSaysTheExpertsGrowFourfold) {
  test::TempDir tmp;
  auto r = test::run_ckpt("convert --dry-run --experts bf16 " + q(test::fixture("oracle/dsv4-tiny")) + " " +
                          q(tmp.str("out")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(tmp.str("out")));
  // 120 experts: 1,966,080 packed bytes + 122,880 scale bytes -> 7,864,320 BF16 bytes.
  EXPECT_NE(r.out.find("experts: 120 MXFP4 weights to BF16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(3.8x)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(42 FP8 -> BF16, 120 MXFP4 experts -> BF16,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(2,088,960 -> 7,864,320 bytes)"), std::string::npos) << r.out;
}

TEST(ConvertBf16, DryRunOfThe0731SparseCheckpoint) {
  test::TempDir tmp;
  std::string in = tmp.str("0731");
  ASSERT_EQ(test::run_ckpt("synth deepseek-v4-flash-0731 " + q(in) + " --sparse").exit_code, 0);
  auto r = test::run_ckpt("convert --dry-run --experts bf16 --json - " + q(in) + " " + q(tmp.str("out")));
  // A dry run that says NOT ENOUGH exits 1 (this disk may not hold the real-size output).
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.err;
  JsonDoc doc;
  std::string error;
  ASSERT_TRUE(doc.parse(r.out, error)) << error;
  EXPECT_EQ(json_string(doc.root(), "experts"), "bf16");
  auto totals = json_get(doc.root(), "totals");
  ASSERT_TRUE(totals);
  EXPECT_EQ(r.exit_code, json_int(*totals, "disk_needed") > json_int(*totals, "disk_free") ? 1 : 0);
  // 35,328 expert weights of 4,194,304 packed bytes (+ 262,144 scale bytes each) become
  // 16,777,216 BF16 bytes: 157,437,394,944 -> 592,705,486,848 bytes.
  EXPECT_EQ(json_int(*totals, "dequantized_expert_tensors"), 35328);
  EXPECT_EQ(json_int(*totals, "expert_bytes_in"), 157437394944);
  EXPECT_EQ(json_int(*totals, "expert_bytes_out"), 592705486848);
  EXPECT_EQ(json_int(*totals, "tensors"), 71927 - 35328);
  EXPECT_EQ(json_int(*totals, "converted"), 390 + 35328);
  EXPECT_EQ(json_int(*totals, "dropped_scales"), 390 + 35328);
  EXPECT_EQ(json_int(*totals, "expert_weight_tensors"), 35328);
  EXPECT_EQ(json_int(*totals, "payload_bytes"), 173182190584 - 157437394944 + 592705486848);
  auto config = json_get(doc.root(), "config");
  ASSERT_TRUE(config);
  EXPECT_FALSE(json_get(*config, "quantization_config").has_value());
  EXPECT_EQ(json_string(*config, "expert_dtype"), "bf16");
}

}  // namespace
}  // namespace ckpt
