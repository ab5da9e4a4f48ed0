// --resume and --finalize reuse a shard only when its record proves it: written by this
// tool version with these options (--experts, --headroom-bits, --rounding, the config's
// weight_block_size), from these very input bytes, including the ones in other shards
// (a scale paired through the index, the experts of a fused INT8-shift matrix).
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "convert/convert.h"
#include "convert/records.h"
#include "formats/json.h"
#include "file_tree.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using test::describe;
const auto q = test::shell_quote;

// Every regular, non-hidden file under `dir` with its bytes (tests/file_tree.h).
std::map<std::string, std::vector<uint8_t>> tree(const std::string& dir) {
  return test::file_tree(dir, test::TreeSkips::hidden);
}

ConvertOptions options(const std::string& in, const std::string& out) {
  ConvertOptions o;
  o.input = in;
  o.output = out;
  return o;
}

ConvertReport run(ConvertOptions o) { return convert_checkpoint(o); }

// The redo reasons of a report, one per line.
std::string redone(const ConvertReport& r) {
  std::string s;
  for (const auto& f : r.findings.items())
    if (f.code == "CONVERT_SHARD_REDONE") s += f.message + "\n";
  return s;
}

// Flips one payload byte of `tensor` (to a value that is still a valid code) in a copy.
void bump_byte(const std::string& dir, const std::string& tensor, uint64_t at = 0) {
  auto m = test::load_model_checked(dir);
  const ModelTensor* t = m->view.find(tensor);
  ASSERT_NE(t, nullptr) << tensor;
  std::string path = m->view.file_paths[t->file];
  auto bytes = test::read_file(path);
  uint8_t& b = bytes[t->offset + at];
  b = b == 0x70 ? 0x71 : 0x70;  // E8M0 2^-15 / 2^-14, E4M3 256 / 288: finite either way
  test::write_file(path, bytes);
}

TEST(Resume, OtherOptionsRedoTheShard) {
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny");
  struct Variant {
    const char* name;
    ConvertOptions first, second;
    const char* option;
  };
  std::vector<Variant> variants;
  {
    Variant v{"rounding", options(in, ""), options(in, ""), "--rounding"};
    v.first.experts = v.second.experts = ExpertMode::int8_shift;
    v.second.remap.rounding = RemapRounding::half_even;
    variants.push_back(v);
  }
  {
    Variant v{"headroom", options(in, ""), options(in, ""), "--headroom-bits"};
    v.first.experts = v.second.experts = ExpertMode::int8_shift;
    v.second.remap.headroom = 2;
    variants.push_back(v);
  }
  {
    Variant v{"experts", options(in, ""), options(in, ""), "--experts"};
    v.second.experts = ExpertMode::bf16;
    variants.push_back(v);
  }
  for (Variant& v : variants) {
    SCOPED_TRACE(v.name);
    const std::string out = tmp.str(std::string("out-") + v.name), fresh = tmp.str(std::string("fresh-") + v.name);
    v.first.output = out;
    ASSERT_EQ(run(v.first).status, ConvertStatus::ok);
    ConvertOptions resume = v.second;
    resume.output = out;
    resume.resume = true;
    auto r = run(resume);
    ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
    EXPECT_GT(r.shards_written, 0u);
    EXPECT_NE(redone(r).find(std::string("it was written with ") + v.option), std::string::npos) << redone(r);
    ConvertOptions clean = v.second;
    clean.output = fresh;
    ASSERT_EQ(run(clean).status, ConvertStatus::ok);
    EXPECT_TRUE(tree(out) == tree(fresh)) << "the resumed output is not what these options produce";
  }
}

TEST(Resume, OtherWeightBlockSizeRedoesTheShard) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  test::copy_tree(test::fixture("oracle/dsv3-tiny"), in);
  ASSERT_EQ(run(options(in, out)).status, ConvertStatus::ok);
  // [130, 130] keeps every scale grid's shape (576 rows: 5 blocks either way) but moves the
  // block boundaries: the same headers, other BF16 values.
  std::string config = test::read_text(in + "/config.json");
  auto at = config.find("\"weight_block_size\"");
  ASSERT_NE(at, std::string::npos);
  auto end = config.find(']', at);
  config.replace(at, end + 1 - at, "\"weight_block_size\": [130, 130]");
  test::write_text(in + "/config.json", config);
  ConvertOptions o = options(in, out);
  o.resume = true;
  auto r = run(o);
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  EXPECT_NE(redone(r).find("weight_block_size [128, 128]; this run uses weight_block_size [130, 130]"),
            std::string::npos)
      << redone(r);
  ASSERT_EQ(run(options(in, tmp.str("fresh"))).status, ConvertStatus::ok);
  EXPECT_TRUE(tree(out) == tree(tmp.str("fresh")));
}

TEST(Resume, OtherToolVersionRedoesTheShard) {
  test::TempDir tmp;
  const std::string out = tmp.str("out");
  ASSERT_EQ(run(options(test::fixture("oracle/dsv4-edge"), out)).status, ConvertStatus::ok);
  const std::string rec = record_path(out, "model-00002-of-00002.safetensors");
  std::string text = test::read_text(rec);
  const std::string version = std::string("\"tool_version\":\"") + CKPT_VERSION + "\"";
  ASSERT_NE(text.find(version), std::string::npos) << text;
  text.replace(text.find(version), version.size(), "\"tool_version\":\"0.0.1\"");
  test::write_text(rec, text);
  ConvertOptions o = options(test::fixture("oracle/dsv4-edge"), out);
  o.resume = true;
  auto r = run(o);
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  EXPECT_EQ(r.shards_written, 1u);
  EXPECT_EQ(r.shards_resumed, 1u);
  EXPECT_NE(redone(r).find("written by ckptkit 0.0.1; this is ckptkit " CKPT_VERSION), std::string::npos) << redone(r);
}

// dsv4-edge: split_pair.weight lives in shard 1, its scale in shard 2. Changing the scale
// changes shard 1's output (and not shard 2's, which drops the scale).
TEST(Resume, ChangedCrossShardScaleRedoesTheShard) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  test::copy_tree(test::fixture("oracle/dsv4-edge"), in);
  ASSERT_EQ(run(options(in, out)).status, ConvertStatus::ok);
  bump_byte(in, "layers.0.attn.split_pair.scale", 3);
  ConvertOptions o = options(in, out);
  o.resume = true;
  auto r = run(o);
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  EXPECT_EQ(r.shards_written, 1u) << redone(r);
  EXPECT_EQ(r.shards_resumed, 1u) << "shard 2's own output does not depend on the scale it drops";
  EXPECT_NE(redone(r).find("model-00001-of-00002.safetensors is converted again: its input "
                           "layers.0.attn.split_pair.scale (model-00002-of-00002.safetensors bytes"),
            std::string::npos)
      << redone(r);
  ASSERT_EQ(run(options(in, tmp.str("fresh"))).status, ConvertStatus::ok);
  EXPECT_TRUE(tree(out) == tree(tmp.str("fresh")));
}

// Rewrites a copied checkpoint so that `names` live in shard `to` instead of their own:
// both shard files and the index, payload bytes unchanged.
void move_tensors(const std::string& dir, const std::vector<std::string>& names, const std::string& to) {
  auto m = test::load_model_checked(dir);
  std::map<std::string, std::vector<const ModelTensor*>> by_file;
  for (const auto& t : m->view.tensors) {
    bool moved = std::find(names.begin(), names.end(), t.name) != names.end();
    by_file[moved ? to : m->view.files[t.file]].push_back(&t);
  }
  std::string index = test::read_text(dir + "/model.safetensors.index.json");
  for (const auto& name : names) {
    const ModelTensor* t = m->view.find(name);
    ASSERT_NE(t, nullptr) << name;
    const std::string from = "\"" + name + "\": \"" + m->view.files[t->file] + "\"";
    auto at = index.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    index.replace(at, from.size(), "\"" + name + "\": \"" + to + "\"");
  }
  std::map<std::string, std::vector<uint8_t>> files;
  for (const auto& [file, tensors] : by_file) {
    std::string header = "{";
    std::vector<uint8_t> payload;
    for (const ModelTensor* t : tensors) {
      std::string shape;
      // Separators appended on their own: `(c ? "," : "") + <temporary>` trips GCC 12's -Wrestrict
      // false positive at -O3 (bug 105329).
      for (uint64_t d : t->shape) {
        if (!shape.empty()) shape += ",";
        shape += std::to_string(d);
      }
      if (header.size() > 1) header += ",";
      header += json_quote(t->name) + ":{\"dtype\":\"" + t->type + "\",\"shape\":[" +
                shape + "],\"data_offsets\":[" + std::to_string(payload.size()) + "," +
                std::to_string(payload.size() + t->nbytes) + "]}";
      auto bytes = test::tensor_bytes(*m, *t);
      payload.insert(payload.end(), bytes.begin(), bytes.end());
    }
    files[file] = test::make_safetensors(header + "}", payload);
  }
  m.reset();
  for (const auto& [file, bytes] : files) test::write_file(dir + "/" + file, bytes);
  test::write_text(dir + "/model.safetensors.index.json", index);
}

// --experts int8-shift: a block's fused matrices live in its expert 0's shard, but are
// computed from every expert's weights and scales, wherever those are.
TEST(Resume, ChangedExpertInAnotherShardRedoesTheFusedShard) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  std::vector<std::string> expert7;
  for (const char* m : {"w1", "w2", "w3"})
    for (const char* part : {"weight", "scale"})
      expert7.push_back(std::string("layers.0.ffn.experts.7.") + m + "." + part);
  move_tensors(in, expert7, "model-00003-of-00007.safetensors");
  ConvertOptions o = options(in, out);
  o.experts = ExpertMode::int8_shift;
  ASSERT_EQ(run(o).status, ConvertStatus::ok);
  bump_byte(in, "layers.0.ffn.experts.7.w2.scale", 5);
  o.resume = true;
  auto r = run(o);
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  EXPECT_EQ(r.shards_written, 1u) << redone(r);
  EXPECT_NE(redone(r).find("model-00002-of-00007.safetensors is converted again: its input "
                           "layers.0.ffn.experts.7.w2.scale (model-00003-of-00007.safetensors"),
            std::string::npos)
      << redone(r);
  ConvertOptions clean = o;
  clean.resume = false;
  clean.output = tmp.str("fresh");
  ASSERT_EQ(run(clean).status, ConvertStatus::ok);
  EXPECT_TRUE(tree(out) == tree(tmp.str("fresh")));
}

// Reuse is proven by content: new mtimes (a copy, a touch) do not force a redo.
TEST(Resume, TouchedButUnchangedInputIsNotRedone) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  ASSERT_EQ(run(options(in, out)).status, ConvertStatus::ok);
  for (const auto& e : fs::directory_iterator(in))
    fs::last_write_time(e.path(), fs::last_write_time(e.path()) + std::chrono::seconds(10));
  ConvertOptions o = options(in, out);
  o.resume = true;
  auto r = run(o);
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  EXPECT_EQ(r.shards_written, 0u) << redone(r);
  EXPECT_EQ(r.shards_resumed, 7u);
}

// The recorded input_xxh3 is compared, not only written.
TEST(Resume, ARecordWhoseInputHashDisagreesIsNotTrusted) {
  test::TempDir tmp;
  const std::string out = tmp.str("out"), in = test::fixture("oracle/dsv4-edge");
  ASSERT_EQ(run(options(in, out)).status, ConvertStatus::ok);
  const std::string rec = record_path(out, "model-00001-of-00002.safetensors");
  std::string text = test::read_text(rec);
  auto at = text.find("\"input_xxh3\":\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at + 14, 16, "0123456789abcdef");
  test::write_text(rec, text);
  ConvertOptions o = options(in, out);
  o.resume = true;
  auto r = run(o);
  ASSERT_EQ(r.status, ConvertStatus::ok) << describe(r.findings);
  EXPECT_EQ(r.shards_written, 1u);
  EXPECT_NE(redone(r).find("input_xxh3"), std::string::npos) << redone(r);
}

// --finalize never redoes: records written with other options are refused, naming them.
TEST(Finalize, RefusesShardsWrittenWithOtherOptions) {
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny"), out = tmp.str("out");
  for (const char* part : {"0/2", "1/2"})
    ASSERT_EQ(test::run_ckpt("convert -q --experts int8-shift --rounding half-even --partition " + std::string(part) +
                             " " + q(in) + " " + q(out))
                  .exit_code,
              0);
  auto r = test::run_ckpt("convert --experts int8-shift --finalize " + q(in) + " " + q(out));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("CONVERT_SHARD_STALE"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("it was written with --rounding half-even; this run uses --rounding half-away"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(out + "/config.json"));
  r = test::run_ckpt("convert -q --experts int8-shift --rounding half-even --finalize " + q(in) + " " + q(out));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(out + "/config.json"));
}

}  // namespace
}  // namespace ckpt
