// ckpt relayout (libconvert/relayout/relayout.h) end to end: a Qwen3-MoE-shaped block-FP8
// checkpoint (block 128, moe_intermediate_size 192, two KV heads of 64) that does not load at
// TP 2 is rewritten so that it does, every dequantized value equal to the input's, the experts
// still FP8, the same bytes when made twice; each rank's slice of the output dequantizes on its
// own (no scale row shared between ranks); BF16 promotion; DeepSeek-V3; the refusals; resume.
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "deploy/config_tensors.h"
#include "deploy/partition_model.h"
#include "deploy/preflight.h"
#include "formats/json.h"
#include "model/quant_scheme.h"
#include "relayout/relayout.h"
#include "deploy/config_checkpoint.h"
#include "test_util.h"
#include "validate/validate.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using test::describe;

// The released transformers 5 Qwen3-MoE config (tests/fixtures/families/qwen3moe-fp8) with the
// issue's dimensions: moe_intermediate_size 192 (96 rows a rank at TP 2, not a multiple of 128)
// and two KV heads of 64 (64 rows a rank).
std::string qwen3_moe_config(uint64_t moe_intermediate = 192) {
  std::string c = test::read_text(test::fixture("families/qwen3moe-fp8/in/config.json"));
  const std::string key = "\"moe_intermediate_size\": 128";
  c.replace(c.find(key), key.size(), "\"moe_intermediate_size\": " + std::to_string(moe_intermediate));
  return c;
}

// Independent of the library: E4M3FN decoded by its definition.
float ref_e4m3(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(8 + m), e - 10);
  return (c & 0x80) ? -mag : mag;
}

// A checkpoint of every tensor config.json implies (deploy/config_tensors.h), in two shards
// with an index and a side file: FP8 codes random (no NaN), F32 block scales random powers
// of two times a random mantissa, BF16 tensors random finite values.
void write_checkpoint(const std::string& dir, const std::string& config, uint32_t seed = 1) {
  fs::create_directories(dir);
  test::write_text(dir + "/config.json", config);
  test::write_text(dir + "/generation_config.json", "{\"do_sample\": false}\n");
  const std::vector<DeployTensor> tensors = test::tensors_of_config(config);
  ASSERT_FALSE(tensors.empty());
  std::mt19937 rng(seed);
  std::string headers[2] = {"{", "{"};
  std::vector<uint8_t> payloads[2];
  std::string index;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const int s = t.name.find("layers.1.") != std::string::npos ? 1 : 0;
    std::vector<uint8_t> bytes(t.nbytes);
    if (t.dtype == "F8_E4M3") {
      for (auto& b : bytes) {
        b = static_cast<uint8_t>(rng());
        if ((b & 0x7F) == 0x7F) b = 0x3C;
      }
    } else if (t.name.ends_with("_scale_inv") && t.dtype == "BF16") {  // a positive multiplier
      for (size_t k = 0; k + 2 <= bytes.size(); k += 2) {
        const uint16_t v = static_cast<uint16_t>(((108 + rng() % 16) << 7) | (rng() & 0x7F));
        bytes[k] = static_cast<uint8_t>(v & 0xFF);
        bytes[k + 1] = static_cast<uint8_t>(v >> 8);
      }
    } else if (t.dtype == "F32") {
      for (size_t k = 0; k + 4 <= bytes.size(); k += 4) {
        const float v = std::ldexp(1.0f + static_cast<float>(rng() % 1024) / 1024.0f, static_cast<int>(rng() % 16) - 20);
        std::memcpy(&bytes[k], &v, 4);
      }
    } else {  // BF16: random sign, exponent near 1, random mantissa
      for (size_t k = 0; k + 2 <= bytes.size(); k += 2) {
        const uint16_t v = static_cast<uint16_t>(((rng() & 1) << 15) | ((120 + rng() % 8) << 7) | (rng() & 0x7F));
        bytes[k] = static_cast<uint8_t>(v & 0xFF);
        bytes[k + 1] = static_cast<uint8_t>(v >> 8);
      }
    }
    std::string shape;
    for (auto v : t.shape) shape += std::string(shape.empty() ? "" : ",") + std::to_string(v);
    const uint64_t at = payloads[s].size();
    headers[s] += (headers[s].size() > 1 ? "," : "") + json_quote(t.name) + ":{\"dtype\":\"" + t.dtype + "\",\"shape\":[" +
                  shape + "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + t.nbytes) + "]}";
    payloads[s].insert(payloads[s].end(), bytes.begin(), bytes.end());
    index += std::string(index.empty() ? "" : ",") + json_quote(t.name) + ":\"model-0000" + std::to_string(s + 1) + "-of-00002.safetensors\"";
  }
  for (int s = 0; s < 2; ++s)
    test::write_file(dir + "/model-0000" + std::to_string(s + 1) + "-of-00002.safetensors",
                     test::make_safetensors(headers[s] + "}", payloads[s]));
  test::write_text(dir + "/model.safetensors.index.json",
                   "{\"metadata\": {\"total_size\": " + std::to_string(payloads[0].size() + payloads[1].size()) +
                       "}, \"weight_map\": {" + index + "}}\n");
}

PreflightReport preflight_at(const std::string& path, uint32_t tp, uint32_t ep = 1) {
  PreflightOptions o;
  o.deployment = {tp, ep, 1};
  return preflight(path, o);
}

RelayoutReport relayout(const std::string& in, const std::string& out, uint32_t tp, RelayoutRequest request = {},
                        bool dry_run = false) {
  RelayoutOptions o;
  o.input = in;
  o.output = out;
  o.deployment = {tp, 1, 1};
  o.request = std::move(request);
  o.dry_run = dry_run;
  return relayout_checkpoint(o);
}

std::string all_findings(const RelayoutReport& r) { return describe(r.findings) + describe(r.convert.findings); }

// `ckpt validate --deep --reference IN OUT`'s findings.
Findings validate_reference(const std::string& out, const std::string& in) {
  ValidateOptions vo;
  vo.reference = in;
  vo.deep = true;
  return validate_path(out, vo).findings;
}

// A block-FP8 weight's values as f32 from its bytes and its scale grid at `bn` x `bk`
// (F32 scales), computed here: e4m3(code) * scale, one binary32 multiply.
struct Fp8Weight {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  uint64_t rows = 0, cols = 0, bn = 0, bk = 0;
  float value(uint64_t i, uint64_t j) const {
    const uint64_t scale_cols = (cols + bk - 1) / bk;
    return ref_e4m3(codes[i * cols + j]) * scales[(i / bn) * scale_cols + j / bk];
  }
};

std::pair<uint64_t, uint64_t> block_of(const LoadedModel& m) {
  auto q = json_get(m.checkpoint.config->root(), "quantization_config");
  auto b = json_get(*q, "weight_block_size");
  simdjson::dom::array a;
  EXPECT_FALSE(b->get_array().get(a));
  return {static_cast<uint64_t>(a.at(0).get_int64().value()), static_cast<uint64_t>(a.at(1).get_int64().value())};
}

Fp8Weight fp8_weight(const LoadedModel& m, const std::string& name) {
  Fp8Weight w;
  const ModelTensor* t = m.view.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return w;
  EXPECT_EQ(t->type, "F8_E4M3") << name;
  w.rows = t->shape[0];
  w.cols = t->shape[1];
  std::tie(w.bn, w.bk) = block_of(m);
  w.codes = test::tensor_bytes(m, *t);
  const std::string module = name.substr(0, name.size() - 7);
  const ModelTensor* st = m.view.find(module + ".weight_scale_inv");
  EXPECT_NE(st, nullptr) << name;
  if (!st) return w;
  auto sb = test::tensor_bytes(m, *st);
  if (st->type == "BF16") {  // widened exactly
    for (size_t k = 0; k + 2 <= sb.size(); k += 2)
      w.scales.push_back(std::bit_cast<float>(static_cast<uint32_t>(sb[k] | sb[k + 1] << 8) << 16));
  } else {
    EXPECT_EQ(st->type, "F32") << name;
    w.scales.resize(sb.size() / 4);
    std::memcpy(w.scales.data(), sb.data(), sb.size());
  }
  EXPECT_EQ(w.scales.size(), ((w.rows + w.bn - 1) / w.bn) * ((w.cols + w.bk - 1) / w.bk)) << name;
  return w;
}

std::vector<std::string> fp8_weights(const LoadedModel& m) {
  std::vector<std::string> out;
  for (const auto& t : m.view.tensors)
    if (t.type == "F8_E4M3") out.push_back(t.name);
  return out;
}

// Every element of every FP8 weight of `in` against `out`: the same value, bit for bit.
void expect_same_values(const LoadedModel& in, const LoadedModel& out) {
  for (const auto& name : fp8_weights(in)) {
    const ModelTensor* o = out.view.find(name);
    ASSERT_NE(o, nullptr) << name;
    if (o->type != "F8_E4M3") continue;  // promoted: compared by validate --reference
    const Fp8Weight a = fp8_weight(in, name), b = fp8_weight(out, name);
    ASSERT_EQ(a.codes, b.codes) << name << ": the FP8 bytes changed";
    for (uint64_t i = 0; i < a.rows; ++i)
      for (uint64_t j = 0; j < a.cols; ++j)
        ASSERT_EQ(std::bit_cast<uint32_t>(a.value(i, j)), std::bit_cast<uint32_t>(b.value(i, j)))
            << name << " element (" << i << ", " << j << ")";
  }
}

// The bytes of every file of a checkpoint directory (.ckptkit/ aside), by name.
std::map<std::string, std::vector<uint8_t>> model_files(const std::string& dir) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) out[e.path().filename().string()] = test::read_file(e.path().string());
  return out;
}

class Qwen3Moe : public ::testing::Test {
 protected:
  void SetUp() override { write_checkpoint(tmp.str("in"), qwen3_moe_config()); }
  test::TempDir tmp;
};

TEST_F(Qwen3Moe, FailsPreflightAtTp2AndItsRelayoutPassesWithEveryValueEqual) {
  const auto before = preflight_at(tmp.str("in"), 2);
  ASSERT_FALSE(before.loads()) << describe(before.findings);
  EXPECT_NE(describe(before.findings).find("moe_intermediate_size 192 / tp 2 = 96"), std::string::npos)
      << describe(before.findings);
  // Preflight's fix is the relayout, as relayout plans it.
  EXPECT_NE(describe(before.findings).find("ckpt relayout --tp 2 IN OUT`: re-block to 32x32"), std::string::npos)
      << describe(before.findings);
  auto r = relayout(tmp.str("in"), tmp.str("out"), 2);
  ASSERT_EQ(relayout_outcome(r), Outcome::ok) << all_findings(r);
  EXPECT_EQ(r.plan.block_n, 32u);
  EXPECT_EQ(r.plan.block_k, 32u);  // down_proj's 96 columns a rank: block_k must change, and the plan says so
  ASSERT_FALSE(r.plan.notes.empty());
  EXPECT_NE(r.plan.notes[0].find("block_k changes from 128 to 32"), std::string::npos) << r.plan.notes[0];
  EXPECT_TRUE(r.plan.promoted.empty());
  const auto after = preflight_at(tmp.str("out"), 2);
  EXPECT_TRUE(after.loads()) << describe(after.findings);
  auto in = test::load_model_checked(tmp.str("in"));
  auto out = test::load_model_checked(tmp.str("out"));
  EXPECT_EQ(block_of(*out), std::make_pair(uint64_t{32}, uint64_t{32}));
  expect_same_values(*in, *out);
  // Every other tensor byte for byte; the same tensor set; side files unchanged.
  ASSERT_EQ(in->view.tensors.size(), out->view.tensors.size());
  for (const auto& t : in->view.tensors) {
    if (t.name.ends_with(".weight_scale_inv")) continue;
    EXPECT_EQ(test::tensor_bytes(*in, t), test::tensor_bytes(*out, t.name)) << t.name;
  }
  EXPECT_EQ(test::read_text(tmp.str("in/generation_config.json")), test::read_text(tmp.str("out/generation_config.json")));
}

TEST_F(Qwen3Moe, ExpertsStayFp8NotABf16Copy) {
  ASSERT_EQ(relayout_outcome(relayout(tmp.str("in"), tmp.str("out"), 2)), Outcome::ok);
  auto out = test::load_model_checked(tmp.str("out"));
  uint64_t experts = 0, in_bytes = 0, out_bytes = 0;
  for (const auto& t : out->view.tensors) {
    out_bytes += t.nbytes;
    if (t.name.find(".mlp.experts.") != std::string::npos && t.name.ends_with(".weight")) {
      EXPECT_EQ(t.type, "F8_E4M3") << t.name;
      ++experts;
    }
  }
  auto in = test::load_model_checked(tmp.str("in"));
  for (const auto& t : in->view.tensors) in_bytes += t.nbytes;
  EXPECT_EQ(experts, 2u * 4u * 3u);
  // Only the scales grew (16x at 32x32): far from the 2x of a BF16 copy.
  EXPECT_LT(out_bytes, in_bytes + in_bytes / 4);
  auto cfg = json_get(out->checkpoint.config->root(), "quantization_config");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(json_string(*cfg, "quant_method"), "fp8");
  EXPECT_TRUE(json_get(out->checkpoint.config->root(), "ckptkit_relayout"));
}

TEST_F(Qwen3Moe, ARelayoutIsByteIdenticalWhenMadeTwice) {
  ASSERT_EQ(relayout_outcome(relayout(tmp.str("in"), tmp.str("a"), 2)), Outcome::ok);
  ASSERT_EQ(relayout_outcome(relayout(tmp.str("in"), tmp.str("b"), 2)), Outcome::ok);
  const auto a = model_files(tmp.str("a")), b = model_files(tmp.str("b"));
  EXPECT_EQ(a.size(), 5u);  // 2 shards, the index, config.json, generation_config.json
  EXPECT_TRUE(a == b);
}

// For each rank, its slice of a weight as the engine cuts it (partition model: rows of each
// part, or input columns) with only the scale rows (columns) of that slice: the values equal
// the same slice of the input's values, and the slice begins and ends on the scale grid, so
// no scale row is shared between ranks. On the input the same check finds shared rows.
struct SliceCheck {
  uint64_t checked = 0, shared = 0;
};

SliceCheck check_rank_slices(const LoadedModel& in, const LoadedModel& out, uint32_t tp) {
  SliceCheck c;
  const ArchitectureRules* arch = architecture_for("qwen3_moe");
  EXPECT_NE(arch, nullptr);
  HeadGeometry heads{4, 2, 64};
  for (const auto& name : fp8_weights(in)) {
    const ModuleRule* rule = classify_module(*arch, module_of(name));
    if (!rule) continue;
    const Fp8Weight a = fp8_weight(in, name), b = fp8_weight(out, name);
    const TensorPartition p = partition_tensor(rule->split, {a.rows, a.cols}, Deployment{tp, 1, 1}, heads);
    const bool cut_rows = split_cuts_rows(rule->split);
    std::vector<std::pair<uint64_t, uint64_t>> slices;  // [begin, size) of each rank's share, rows or columns
    if (cut_rows) {
      for (const auto& part : p.parts) {
        for (uint64_t r = 0; r < part.size / part.per_rank; ++r) slices.push_back({part.begin + r * part.per_rank, part.per_rank});
      }
    } else if (p.degree > 1) {
      for (uint64_t r = 0; r < p.degree; ++r) slices.push_back({r * p.rank_cols, p.rank_cols});
    }
    for (const auto& [begin, size] : slices) {
      const uint64_t block = cut_rows ? b.bn : b.bk;
      if (begin % block || size % block) {
        ++c.shared;
        continue;
      }
      // The rank's own scale rows (columns): local index i / block from the slice's first.
      const uint64_t first = begin / block;
      const uint64_t scale_cols = (b.cols + b.bk - 1) / b.bk;
      for (uint64_t x = 0; x < size; ++x)
        for (uint64_t y = 0; y < (cut_rows ? b.cols : b.rows); ++y) {
          const uint64_t i = cut_rows ? begin + x : y, j = cut_rows ? y : begin + x;
          const uint64_t srow = cut_rows ? first + x / b.bn : i / b.bn, scol = cut_rows ? j / b.bk : first + x / b.bk;
          const float mine = ref_e4m3(b.codes[i * b.cols + j]) * b.scales[srow * scale_cols + scol];
          EXPECT_EQ(std::bit_cast<uint32_t>(mine), std::bit_cast<uint32_t>(a.value(i, j))) << name;
          if (std::bit_cast<uint32_t>(mine) != std::bit_cast<uint32_t>(a.value(i, j))) return c;
        }
      ++c.checked;
    }
  }
  return c;
}

TEST_F(Qwen3Moe, EachRanksSliceDequantizesOnItsOwnWithNoScaleRowShared) {
  ASSERT_EQ(relayout_outcome(relayout(tmp.str("in"), tmp.str("out"), 2)), Outcome::ok);
  auto in = test::load_model_checked(tmp.str("in"));
  auto out = test::load_model_checked(tmp.str("out"));
  const SliceCheck after = check_rank_slices(*in, *out, 2);
  EXPECT_EQ(after.shared, 0u);
  EXPECT_GT(after.checked, 2u * 4u * 3u * 2u);  // every expert weight's two slices, and attention's
  // The input itself, sliced the same way: its 128-row grid puts rows of two ranks under one scale row.
  const SliceCheck before = check_rank_slices(*in, *in, 2);
  EXPECT_GT(before.shared, 0u);
}

TEST_F(Qwen3Moe, AModuleThatWouldNeedABlockBelowMinBlockIsPromotedToBf16Exactly) {
  RelayoutRequest q;
  q.min_n = q.min_k = 64;  // the experts would need 32x32
  auto r = relayout(tmp.str("in"), tmp.str("out"), 2, q);
  ASSERT_EQ(relayout_outcome(r), Outcome::ok) << all_findings(r);
  EXPECT_EQ(r.plan.block_n, 64u);   // K/V: 64 rows a rank
  // Nothing left needs block_k changed for its columns, but vLLM (asked about by default) needs
  // a square block: its activation groups are block_n (RelayoutPlan.VllmNeedsASquareBlock...).
  EXPECT_EQ(r.plan.block_k, 64u);
  bool promoted_experts = false;
  for (const auto& c : r.plan.choices)
    if (c.action == RelayoutAction::bf16) {
      promoted_experts = c.unit == "FusedMoE (routed experts)";
      EXPECT_NE(c.why.find("below --min-block 64x64"), std::string::npos) << c.why;
    }
  EXPECT_TRUE(promoted_experts);
  auto out = test::load_model_checked(tmp.str("out"));
  for (const auto& t : out->view.tensors)
    if (t.name.find(".mlp.experts.") != std::string::npos) {
      EXPECT_TRUE(t.name.ends_with(".weight")) << t.name << ": a promoted module's scale is dropped";
      EXPECT_EQ(t.type, "BF16") << t.name;
    }
  auto q_cfg = json_get(out->checkpoint.config->root(), "quantization_config");
  ASSERT_TRUE(q_cfg);
  // The family's own list (modules_to_not_convert), the input's entries kept, the experts appended.
  const std::string list = json_to_string(*json_get(*q_cfg, "modules_to_not_convert"));
  EXPECT_NE(list.find("\"model.embed_tokens\""), std::string::npos) << list;
  EXPECT_NE(list.find("\"model.layers.0.mlp.experts\""), std::string::npos) << list;
  EXPECT_NE(list.find("\"model.layers.1.mlp.experts\""), std::string::npos) << list;
  EXPECT_FALSE(json_get(*q_cfg, "ignored_layers"));  // the input has no such list: not invented beside its own
  EXPECT_TRUE(preflight_at(tmp.str("out"), 2).loads());
  // The BF16 experts are the exact dequantization, the rest equal: validate --reference --deep.
  const auto ref_out = tmp.str("out"), ref_in = tmp.str("in");
  const auto v = validate_reference(ref_out, ref_in);
  EXPECT_FALSE(v.has_errors()) << describe(v);
  auto in = test::load_model_checked(tmp.str("in"));
  expect_same_values(*in, *out);
}

TEST_F(Qwen3Moe, Bf16NamesAModuleClassInTheLayersItMatches) {
  RelayoutRequest q;
  q.bf16 = {"model.layers.1.self_attn.k_proj"};
  auto r = relayout(tmp.str("in"), tmp.str("out"), 2, q);
  ASSERT_EQ(relayout_outcome(r), Outcome::ok) << all_findings(r);
  // q, k and v of layer 1 go together (QKVParallelLinear quantizes them alike); layer 0 stays FP8.
  EXPECT_EQ(r.plan.promoted, (std::vector<std::string>{"model.layers.1.self_attn.k_proj.weight",
                                                       "model.layers.1.self_attn.q_proj.weight",
                                                       "model.layers.1.self_attn.v_proj.weight"}));
  auto out = test::load_model_checked(tmp.str("out"));
  EXPECT_EQ(out->view.find("model.layers.1.self_attn.k_proj.weight")->type, "BF16");
  EXPECT_EQ(out->view.find("model.layers.0.self_attn.k_proj.weight")->type, "F8_E4M3");
  EXPECT_EQ(out->view.find("model.layers.1.self_attn.k_proj.weight_scale_inv"), nullptr);
  const auto ref_out = tmp.str("out"), ref_in = tmp.str("in");
  EXPECT_FALSE(validate_reference(ref_out, ref_in).has_errors()) << describe(validate_reference(ref_out, ref_in));
}

TEST_F(Qwen3Moe, ValidateReferencePassesOnARelayoutAndCatchesAChangedScale) {
  ASSERT_EQ(relayout_outcome(relayout(tmp.str("in"), tmp.str("out"), 2)), Outcome::ok);
  const auto ref_out = tmp.str("out"), ref_in = tmp.str("in");
  const auto ok = validate_reference(ref_out, ref_in);
  EXPECT_FALSE(ok.has_errors()) << describe(ok);
  // One re-gridded scale value changed (the last of a repeated group): a value differs.
  auto out = test::load_model_checked(tmp.str("out"));
  const ModelTensor* s = out->view.find("model.layers.0.mlp.experts.1.up_proj.weight_scale_inv");
  ASSERT_NE(s, nullptr);
  const std::string file = tmp.str("out/" + out->view.file_of(*s));
  const uint64_t at = s->offset;  // `s` points into `out`, released before the file is rewritten
  out.reset();
  auto bytes = test::read_file(file);
  bytes[at + 4 * 5] ^= 0x01;
  test::write_file(file, bytes);
  const auto bad = validate_reference(ref_out, ref_in);
  EXPECT_TRUE(bad.has_code("REF_CONVERTED_DIFFER")) << describe(bad);
}

TEST_F(Qwen3Moe, GpuVerifyReferenceDecodesEveryReblockedWeightOnItsNewGrid) {
  ASSERT_EQ(relayout_outcome(relayout(tmp.str("in"), tmp.str("out"), 2)), Outcome::ok);
  const std::string args = "verify --backend emulate --reference " + tmp.str("in") + " " + tmp.str("out");
  auto ok = test::run_tool("ckpt-gpu", "", args);
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("fp8_regrid               32 ok      0 failed"), std::string::npos) << ok.out;
  // A re-gridded scale value changed: the device decode on the new grid differs from the input's.
  auto out = test::load_model_checked(tmp.str("out"));
  const ModelTensor* s = out->view.find("model.layers.1.self_attn.k_proj.weight_scale_inv");
  ASSERT_NE(s, nullptr);
  const std::string file = tmp.str("out/" + out->view.file_of(*s));
  const uint64_t at = s->offset;
  out.reset();
  auto bytes = test::read_file(file);
  bytes[at + 1] ^= 0x01;  // a BF16 scale's high byte: its exponent
  test::write_file(file, bytes);
  auto bad = test::run_tool("ckpt-gpu", "", args);
  EXPECT_EQ(bad.exit_code, 1) << bad.out << bad.err;
  EXPECT_NE((bad.out + bad.err).find("device decode on the new grid"), std::string::npos) << bad.out << bad.err;
}

TEST_F(Qwen3Moe, ValidateReferenceChecksTheRecordAgainstTheScalesAndTheConfig) {
  ASSERT_EQ(relayout_outcome(relayout(tmp.str("in"), tmp.str("out"), 2)), Outcome::ok);
  const std::string config = test::read_text(tmp.str("out/config.json"));
  auto with = [&](const std::string& from, const std::string& to) {
    std::string c = config;
    const size_t at = c.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) c.replace(at, from.size(), to);
    test::write_text(tmp.str("out/config.json"), c);
    return validate_reference(tmp.str("out"), tmp.str("in"));
  };
  // The record says another block than the scales have: every scale is of the wrong shape.
  const std::string record_block = "\"weight_block_size\": [\n      32,\n      32\n    ],\n    \"min_block\"";
  auto wrong = with(record_block, "\"weight_block_size\": [\n      16,\n      32\n    ],\n    \"min_block\"");
  EXPECT_TRUE(wrong.has_code("REF_SHAPE")) << describe(wrong);
  // A record that is not one: refused by name, never a guess.
  auto broken = with("\"ckptkit_relayout\": {", "\"ckptkit_relayout\": {\"x\": 1}, \"ckptkit_relayout_\": {");
  EXPECT_TRUE(broken.has_code("REF_CONFIG")) << describe(broken);
  // quantization_config's block disagrees with the record.
  auto block = with("\"weight_block_size\": [\n      32,", "\"weight_block_size\": [\n      64,");  // the first: quantization_config's
  EXPECT_TRUE(block.has_code("REF_CONFIG")) << describe(block);
  test::write_text(tmp.str("out/config.json"), config);
  EXPECT_FALSE(validate_reference(tmp.str("out"), tmp.str("in")).has_errors());
}

TEST(Relayout, DeepSeekV3FailsAtTp2AndItsRelayoutLoadsWithEveryValueEqual) {
  test::TempDir tmp;
  const std::string in = test::fixture("families/dsv3-fp8/in");
  ASSERT_FALSE(preflight_at(in, 2).loads());
  auto r = relayout(in, tmp.str("out"), 2);
  ASSERT_EQ(relayout_outcome(r), Outcome::ok) << all_findings(r);
  EXPECT_EQ(r.plan.block_n, 64u);
  EXPECT_EQ(r.plan.block_k, 64u);
  EXPECT_TRUE(preflight_at(tmp.str("out"), 2).loads()) << describe(preflight_at(tmp.str("out"), 2).findings);
  auto a = test::load_model_checked(in);
  auto b = test::load_model_checked(tmp.str("out"));
  expect_same_values(*a, *b);
  const auto ref_out = tmp.str("out"), ref_in = in;
  EXPECT_FALSE(validate_reference(ref_out, ref_in).has_errors()) << describe(validate_reference(ref_out, ref_in));
}

TEST(Relayout, DryRunPrintsThePlanAndWritesNothing) {
  test::TempDir tmp;
  write_checkpoint(tmp.str("in"), qwen3_moe_config());
  const auto run = test::run_ckpt("relayout --dry-run --tp 2 " + tmp.str("in") + " " + tmp.str("out"));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("block 128x128 -> 32x32"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("reblock FusedMoE (routed experts)"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("bytes"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("block_k changes"), std::string::npos) << run.out;
  EXPECT_FALSE(fs::exists(tmp.str("out")));
}

TEST(Relayout, RefusesWhatItCannotRewrite) {
  test::TempDir tmp;
  write_checkpoint(tmp.str("in"), qwen3_moe_config());
  const std::string in = tmp.str("in"), out = tmp.str("out");
  // Not block FP8: an MXFP4 checkpoint.
  EXPECT_EQ(test::run_ckpt("relayout -q --tp 2 " + test::fixture("families/gptoss-mxfp4/in") + " " + out).exit_code, 1);
  // OUT is IN.
  EXPECT_EQ(test::run_ckpt("relayout -q --tp 2 " + in + " " + in).exit_code, 2);
  // A --bf16 pattern that names no block-FP8 module.
  auto unknown = test::run_ckpt("relayout -q --tp 2 --bf16 model.layers.0.mlp.nonexistent " + in + " " + out);
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("names no block-FP8 module"), std::string::npos) << unknown.err;
  // A --block that does not divide the checkpoint's.
  EXPECT_EQ(test::run_ckpt("relayout -q --tp 2 --block 48x48 " + in + " " + out).exit_code, 2);
  EXPECT_EQ(test::run_ckpt("relayout -q --tp 2 --block 12 " + in + " " + out).exit_code, 2);
  // EP not dividing TP.
  EXPECT_EQ(test::run_ckpt("relayout -q --tp 2 --ep 3 " + in + " " + out).exit_code, 2);
  EXPECT_FALSE(fs::exists(out + "/config.json"));
  // A checkpoint that already loads (moe_intermediate_size 128 at TP 1): nothing to do, nothing written.
  auto fine = test::run_ckpt("relayout --tp 1 " + test::fixture("families/qwen3moe-fp8/in") + " " + out);
  EXPECT_EQ(fine.exit_code, 0) << fine.err;
  EXPECT_NE(fine.out.find("RELAYOUT_NOT_NEEDED"), std::string::npos) << fine.out;
  EXPECT_FALSE(fs::exists(out + "/config.json"));
  // A non-empty OUT needs --resume or --overwrite; the input is never written.
  ASSERT_EQ(test::run_ckpt("relayout -q --tp 2 " + in + " " + out).exit_code, 0);
  EXPECT_EQ(test::run_ckpt("relayout -q --tp 2 " + in + " " + out).exit_code, 2);
  EXPECT_EQ(test::run_ckpt("relayout -q --tp 2 --overwrite " + in + " " + out).exit_code, 0);
}

TEST(Relayout, PartitionsAndFinalizeMakeTheSameBytesAsOneRun) {
  test::TempDir tmp;
  write_checkpoint(tmp.str("in"), qwen3_moe_config());
  ASSERT_EQ(relayout_outcome(relayout(tmp.str("in"), tmp.str("whole"), 2)), Outcome::ok);
  const std::string io = tmp.str("in") + " " + tmp.str("out");
  ASSERT_EQ(test::run_ckpt("relayout -q --tp 2 --partition 0/2 " + io).exit_code, 0);
  // Finalizing before every partition ran names the one to rerun and writes no config.json.
  auto early = test::run_ckpt("relayout -q --tp 2 --finalize --partitions 2 " + io);
  EXPECT_EQ(early.exit_code, 1) << early.err;
  EXPECT_NE(early.err.find("CONVERT_RERUN"), std::string::npos) << early.err;
  EXPECT_FALSE(fs::exists(tmp.str("out/config.json")));
  ASSERT_EQ(test::run_ckpt("relayout -q --tp 2 --partition 1/2 " + io).exit_code, 0);
  auto fin = test::run_ckpt("relayout -q --tp 2 --finalize --partitions 2 " + io);
  ASSERT_EQ(fin.exit_code, 0) << fin.err;
  EXPECT_TRUE(model_files(tmp.str("whole")) == model_files(tmp.str("out")));
  EXPECT_EQ(test::run_ckpt("relayout -q --tp 2 --partition 1/2 --finalize " + io).exit_code, 2);
}

TEST(Relayout, AnInterruptedRelayoutResumesToTheSameBytes) {
  test::TempDir tmp;
  write_checkpoint(tmp.str("in"), qwen3_moe_config());
  ASSERT_EQ(relayout_outcome(relayout(tmp.str("in"), tmp.str("clean"), 2)), Outcome::ok);
  // Killed at its 7th kill point (the second shard's header written, the first shard and its
  // record done): no config.json, no index.
  auto killed = test::run_ckpt_env("CKPT_TEST_KILL_AT=7", "relayout -q --tp 2 " + tmp.str("in") + " " + tmp.str("out"));
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  EXPECT_FALSE(fs::exists(tmp.str("out/config.json")));
  EXPECT_EQ(test::run_ckpt("relayout -q --tp 2 " + tmp.str("in") + " " + tmp.str("out")).exit_code, 2);
  auto resumed = test::run_ckpt("relayout --tp 2 --resume " + tmp.str("in") + " " + tmp.str("out"));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("1 resumed"), std::string::npos) << resumed.out;
  EXPECT_TRUE(model_files(tmp.str("clean")) == model_files(tmp.str("out")));
}

}  // namespace
}  // namespace ckpt
