// The converter against the peers' outputs (byte for byte where they are right, and
// provably different where they are wrong), the 0731 plan, crash/resume and disk-full.
#include "convert/convert.h"

#include <filesystem>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "formats/json.h"
#include "numerics/fp8.h"
#include "file_tree.h"
#include "test_util.h"
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

ConvertReport convert(const std::string& in, const std::string& out) {
  ConvertOptions o;
  o.input = in;
  o.output = out;
  return convert_checkpoint(o);
}

// Tensors present in `reference` and in `ours`: same shard, dtype, shape; bytes equal
// unless listed in `expected_to_differ`. Returns the names whose bytes differ.
std::set<std::string> compare_to_reference(const std::string& ours, const std::string& reference,
                                           const std::set<std::string>& skip = {}) {
  auto a = test::load_model_checked(ours);
  auto b = test::load_model_checked(reference);
  std::set<std::string> differing;
  for (const auto& t : b->view.tensors) {
    if (skip.count(t.name)) continue;
    const ModelTensor* mine = a->view.find(t.name);
    if (!mine) {
      ADD_FAILURE() << "missing " << t.name;
      continue;
    }
    EXPECT_EQ(a->view.file_of(*mine), b->view.file_of(t)) << t.name;
    EXPECT_EQ(mine->type, t.type) << t.name;
    EXPECT_EQ(mine->shape, t.shape) << t.name;
    if (tensor_bytes(*a, *mine) != tensor_bytes(*b, t)) differing.insert(t.name);
  }
  return differing;
}

TEST(Convert, Dsv4TinyEqualsThePeerOutputTensorForTensor) {
  test::TempDir tmp;
  auto r = convert(test::fixture("oracle/dsv4-tiny"), tmp.str("out"));
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  EXPECT_EQ(compare_to_reference(tmp.str("out"), test::fixture("oracle/dsv4-tiny.qw-bf16")), std::set<std::string>{});
  auto ours = test::load_model_checked(tmp.str("out"));
  auto ref = test::load_model_checked(test::fixture("oracle/dsv4-tiny.qw-bf16"));
  EXPECT_EQ(ours->view.tensors.size(), ref->view.tensors.size());
  EXPECT_EQ(r.plan.converted, 42u);  // the peer's run log: dequantized_tensors=42
  EXPECT_EQ(r.plan.expert_weight_tensors, 120u);
  // Side files copied, config rewritten with main_proj kept BF16.
  EXPECT_TRUE(fs::exists(tmp.str("out/tokenizer.json")));
  auto cfg = test::read_file(tmp.str("out/config.json"));
  std::string text(cfg.begin(), cfg.end());
  EXPECT_NE(text.find("\"main_proj\""), std::string::npos);
  EXPECT_NE(text.find("ckptkit_conversion"), std::string::npos);
}

TEST(Convert, Dsv3TinyEqualsDeepSeekV3CastScript) {
  test::TempDir tmp;
  auto r = convert(test::fixture("oracle/dsv3-tiny"), tmp.str("out"));
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  EXPECT_EQ(compare_to_reference(tmp.str("out"), test::fixture("oracle/dsv3-tiny.v3-bf16")), std::set<std::string>{});
  auto ours = test::load_model_checked(tmp.str("out"));
  EXPECT_EQ(ours->view.tensors.size(), 6u);
  // Nothing quantized is left: the FP8 loader route must not be taken.
  auto cfg = test::read_file(tmp.str("out/config.json"));
  EXPECT_EQ(std::string(cfg.begin(), cfg.end()).find("quantization_config"), std::string::npos);
}

// The exact arithmetic, element by element, independent of the block dequantizer.
std::vector<uint8_t> exact_bf16(const LoadedModel& in, const std::string& weight, const std::string& scale,
                                uint64_t block) {
  const ModelTensor* w = in.view.find(weight);
  const ModelTensor* s = in.view.find(scale);
  auto wb = tensor_bytes(in, *w), sb = tensor_bytes(in, *s);
  uint64_t rows = w->shape[0], cols = w->shape[1], scols = s->shape[1];
  std::vector<uint8_t> out(rows * cols * 2);
  for (uint64_t i = 0; i < rows; ++i)
    for (uint64_t j = 0; j < cols; ++j) {
      uint16_t v = fp8_e8m0_product_bf16(wb[i * cols + j], sb[(i / block) * scols + j / block]);
      out[2 * (i * cols + j)] = static_cast<uint8_t>(v);
      out[2 * (i * cols + j) + 1] = static_cast<uint8_t>(v >> 8);
    }
  return out;
}

TEST(Convert, Dsv4EdgeIsRightWhereThePeerIsWrong) {
  test::TempDir tmp;
  auto r = convert(test::fixture("oracle/dsv4-edge"), tmp.str("out"));
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  auto in = test::load_model_checked(test::fixture("oracle/dsv4-edge"));
  auto ours = test::load_model_checked(tmp.str("out"));
  struct Case {
    const char* weight;
    const char* scale;
  };
  for (Case c : {Case{"layers.0.attn.ragged_rows.weight", "layers.0.attn.ragged_rows.scale"},
                 Case{"layers.0.attn.ragged_both.weight", "layers.0.attn.ragged_both.scale"},
                 Case{"layers.0.attn.split_pair.weight", "layers.0.attn.split_pair.scale"},
                 Case{"layers.0.attn.small_scale", "layers.0.attn.small_scale.scale"}}) {
    const ModelTensor* t = ours->view.find(c.weight);
    ASSERT_NE(t, nullptr) << c.weight;
    EXPECT_EQ(t->type, "BF16") << c.weight;
    EXPECT_EQ(tensor_bytes(*ours, *t), exact_bf16(*in, c.weight, c.scale, 128)) << c.weight;
    EXPECT_EQ(ours->view.find(c.scale), nullptr) << c.scale << " must be consumed";
  }
  // The peer differs exactly on the four tensors the fixture README lists (and writes a
  // stray BF16 split_pair.scale / small_scale.scale); everything else is equal.
  auto differing = compare_to_reference(tmp.str("out"), test::fixture("oracle/dsv4-edge.qw-bf16"),
                                        {"layers.0.attn.split_pair.scale", "layers.0.attn.small_scale.scale"});
  EXPECT_EQ(differing, (std::set<std::string>{"layers.0.attn.ragged_rows.weight", "layers.0.attn.ragged_both.weight",
                                              "layers.0.attn.split_pair.weight", "layers.0.attn.small_scale"}));
}

TEST(Convert, ValidateReferenceAcceptsTheOutputAndCatchesAFlippedByte) {
  test::TempDir tmp;
  std::string out = tmp.str("out");
  ASSERT_EQ(convert(test::fixture("oracle/dsv4-tiny"), out).status, ConvertStatus::ok);
  ValidateOptions o;
  o.reference = test::fixture("oracle/dsv4-tiny");
  o.deep = true;
  auto clean = validate_path(out, o);
  EXPECT_FALSE(clean.findings.has_errors()) << describe(clean.findings);
  // The peer's output is also a correct conversion of dsv4-tiny, except its config.
  auto peer = validate_path(test::fixture("oracle/dsv4-tiny.qw-bf16"), o);
  EXPECT_TRUE(peer.findings.has_code("REF_CONFIG")) << describe(peer.findings);
  EXPECT_FALSE(peer.findings.has_code("REF_CONVERTED_DIFFER")) << describe(peer.findings);
  // Flip one byte of a converted tensor and one of a copied tensor.
  auto m = test::load_model_checked(out);
  const ModelTensor* converted = m->view.find("layers.1.attn.wq_a.weight");
  const ModelTensor* copied = m->view.find("layers.1.ffn.experts.3.w2.weight");
  for (const ModelTensor* t : {converted, copied}) {
    std::string path = m->view.file_paths[t->file];
    auto bytes = test::read_file(path);
    bytes[t->offset + 10] ^= 0x01;
    test::write_file(path, bytes);
  }
  auto broken = validate_path(out, o);
  EXPECT_TRUE(broken.findings.has_code("REF_CONVERTED_DIFFER")) << describe(broken.findings);
  EXPECT_TRUE(broken.findings.has_code("REF_BYTES_DIFFER")) << describe(broken.findings);
}

TEST(Convert, RefusesUnsafePathsAndNonEmptyOutput) {
  test::TempDir tmp;
  std::string in = tmp.str("in");
  test::copy_tree(test::fixture("oracle/dsv3-tiny"), in);
  EXPECT_EQ(convert(in, in + "/out").status, ConvertStatus::usage_error);
  EXPECT_EQ(convert(in, in).status, ConvertStatus::usage_error);
  fs::create_directories(tmp.str("busy"));
  test::write_text(tmp.str("busy/x"), "x");
  EXPECT_EQ(convert(in, tmp.str("busy")).status, ConvertStatus::usage_error);
  EXPECT_EQ(convert(tmp.str("missing"), tmp.str("o2")).status, ConvertStatus::io_error);
  EXPECT_EQ(test::run_ckpt("convert " + q(in) + " " + q(tmp.str("busy"))).exit_code, 2);
}

TEST(Convert, RefusesNanCodesAndUnpairedFp8NamingTheTensor) {
  test::TempDir tmp;
  std::string in = tmp.str("in");
  test::copy_tree(test::fixture("oracle/dsv3-tiny"), in);
  auto m = test::load_model_checked(in);
  const ModelTensor* t = m->view.find("model.layers.0.self_attn.q_a_proj.weight");
  std::string path = m->view.file_paths[t->file];
  auto bytes = test::read_file(path);
  bytes[t->offset + 300] = 0x7F;  // element 300: row 1, column 44
  test::write_file(path, bytes);
  auto r = convert(in, tmp.str("out"));
  EXPECT_EQ(r.status, ConvertStatus::input_error);
  std::string text = describe(r.findings);
  EXPECT_NE(text.find("model.layers.0.self_attn.q_a_proj.weight"), std::string::npos) << text;
  EXPECT_NE(text.find("element 300"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(tmp.str("out/model-00001-of-00002.safetensors"))) << "no partial output at a final name";

  auto edge = convert(test::fixture("oracle/dsv4-edge.qw-bf16"), tmp.str("out2"));
  EXPECT_EQ(edge.status, ConvertStatus::input_error);  // the peer's stray BF16 scales
}

TEST(Convert, DryRunOfThe0731SparseCheckpoint) {
  test::TempDir tmp;
  std::string in = tmp.str("0731");
  ASSERT_EQ(test::run_ckpt("synth deepseek-v4-flash-0731 " + q(in) + " --sparse").exit_code, 0);
  auto r = test::run_ckpt("convert --dry-run --json - " + q(in) + " " + q(tmp.str("out")));
  // A dry run that says NOT ENOUGH exits 1 (this disk may not hold the real-size output).
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.err;
  EXPECT_FALSE(fs::exists(tmp.str("out")));
  JsonDoc doc;
  std::string error;
  ASSERT_TRUE(doc.parse(r.out, error)) << error;
  auto totals = json_get(doc.root(), "totals");
  ASSERT_TRUE(totals);
  EXPECT_EQ(r.exit_code, json_int(*totals, "disk_needed") > json_int(*totals, "disk_free") ? 1 : 0);
  EXPECT_EQ(json_int(*totals, "tensors"), 71927);
  EXPECT_EQ(json_int(*totals, "payload_bytes"), 173182190584);
  EXPECT_EQ(json_int(*totals, "expert_weight_tensors"), 35328);
  EXPECT_EQ(json_int(*totals, "mtp_tensors"), 4680);
  EXPECT_EQ(json_int(*totals, "converted"), 390);
  EXPECT_EQ(json_int(*totals, "dropped_scales"), 390);
  auto config = json_get(doc.root(), "config");
  ASSERT_TRUE(config);
  EXPECT_EQ(json_string(*config, "torch_dtype"), "bfloat16");
  auto quant = json_get(*config, "quantization_config");
  ASSERT_TRUE(quant);
  EXPECT_NE(json_to_string(*quant).find("\"main_proj\""), std::string::npos);
}

TEST(Convert, KilledAtEveryPointThenResumedIsByteIdentical) {
  test::TempDir tmp;
  std::string in = test::fixture("oracle/dsv4-tiny");
  ASSERT_EQ(test::run_ckpt("convert -q " + q(in) + " " + q(tmp.str("clean"))).exit_code, 0);
  auto clean = tree(tmp.str("clean"));
  int kills = 0;
  for (int k = 1; k < 200; ++k) {
    std::string out = tmp.str("run" + std::to_string(k));
    auto killed = test::run_ckpt_env("CKPT_TEST_KILL_AT=" + std::to_string(k), "convert -q " + q(in) + " " + q(out));
    if (killed.exit_code == 0) break;  // past the last kill point
    ASSERT_EQ(killed.exit_code, 128 + 9) << "kill point " << k << ": " << killed.err;
    ++kills;
    // At no kill point does a final name hold a partial (or any other) content.
    for (const auto& [name, bytes] : tree(out)) EXPECT_EQ(bytes, clean.at(name)) << "kill point " << k << ": " << name;
    auto resumed = test::run_ckpt("convert -q --resume " + q(in) + " " + q(out));
    ASSERT_EQ(resumed.exit_code, 0) << "kill point " << k << ": " << resumed.err;
    EXPECT_EQ(tree(out), clean) << "kill point " << k;
    fs::remove_all(out);
  }
  EXPECT_GE(kills, 20);  // every shard's header, payload, rename and record points, then index
}

TEST(Convert, ResumeSkipsFinishedShardsAndRedoesADamagedOne) {
  test::TempDir tmp;
  std::string out = tmp.str("out");
  ASSERT_EQ(convert(test::fixture("oracle/dsv4-tiny"), out).status, ConvertStatus::ok);
  auto clean = tree(out);
  auto bytes = test::read_file(out + "/model-00003-of-00007.safetensors");
  bytes[bytes.size() / 2] ^= 0xFF;
  test::write_file(out + "/model-00003-of-00007.safetensors", bytes);
  ConvertOptions o;
  o.input = test::fixture("oracle/dsv4-tiny");
  o.output = out;
  o.resume = true;
  auto r = convert_checkpoint(o);
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  EXPECT_EQ(r.shards_written, 1u);
  EXPECT_EQ(r.shards_resumed, 6u);
  EXPECT_EQ(tree(out), clean);
}

TEST(Convert, AFileSizeLimitEndsWithExitThreeAndNoPartialFile) {
  test::TempDir tmp;
  std::string out = tmp.str("out");
  // ulimit -f counts 512-byte blocks in dash: 400 KB, less than the largest output shard.
  auto r = test::run_ckpt_env("", "convert -q " + q(test::fixture("oracle/dsv4-tiny")) + " " + q(out),
                              "ulimit -f 800; ");
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
  auto clean_dir = tmp.str("clean");
  ASSERT_EQ(convert(test::fixture("oracle/dsv4-tiny"), clean_dir).status, ConvertStatus::ok);
  auto clean = tree(clean_dir);
  for (const auto& [name, bytes] : tree(out)) EXPECT_EQ(bytes, clean.at(name)) << name;
  EXPECT_FALSE(fs::exists(out + "/config.json"));
}

}  // namespace
}  // namespace ckpt
