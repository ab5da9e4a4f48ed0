#include "synth/synth_dsv4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include <gtest/gtest.h>
#include <simdjson.h>
#include <sys/stat.h>

#include "formats/json.h"
#include "profiles/deepseek_v4.h"
#include "test_util.h"
#include "model/structure_hash.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

// Headers only, through the library loader: sparse 3.6 GB shards are never read.
std::unique_ptr<LoadedModel> load_headers(const std::string& dir) { return test::load_model_checked(dir); }

std::string dump(const Findings& f) {
  std::string s;
  for (const auto& x : f.items()) s += x.code + " " + x.tensor + ": " + x.message + "\n";
  return s;
}

TEST(SynthDsv4, Sparse0731MatchesPublishedStructure) {
  test::TempDir dir;
  std::string err;
  ASSERT_TRUE(synth_deepseek_v4_flash_0731(dir.str(), SynthSize::sparse, 1, err)) << err;
  auto m = load_headers(dir.str());
  ASSERT_EQ(m->view.files.size(), 48u);
  EXPECT_EQ(m->view.files.front(), "model-00001-of-00048.safetensors");
  EXPECT_EQ(m->view.files.back(), "model-00048-of-00048.safetensors");
  ASSERT_EQ(m->view.tensors.size(), 72317u);

  std::vector<StructureRecord> records;
  uint64_t payload = 0;
  std::map<uint32_t, size_t> per_shard;
  for (const auto& t : m->view.tensors) {
    records.push_back({t.name, t.type, t.shape, t.nbytes});
    payload += t.nbytes;
    per_shard[t.file]++;
  }
  EXPECT_EQ(payload, 166878536440u);
  EXPECT_EQ(structure_sha256(records), "18285fe60ca3655be488bbabb88b59489b8ee03cff7fc4f4729424051ca83e0e");

  // §2 layout: per-shard tensor counts and shard 1 = 8 + 88 + 1,059,061,760 bytes.
  EXPECT_EQ(per_shard[0], 1u);
  EXPECT_EQ(per_shard[1], 1565u);
  EXPECT_EQ(per_shard[3], 1576u);  // layers.2 (ratio 4, hash)
  EXPECT_EQ(per_shard[4], 1569u);  // layers.3 (ratio 128)
  EXPECT_EQ(per_shard[44], 5u);
  EXPECT_EQ(per_shard[45], 1568u);
  EXPECT_EQ(per_shard[46], 1565u);
  EXPECT_EQ(per_shard[47], 1572u);
  EXPECT_EQ(m->checkpoint.shards[0].header->header_len, 88u);
  EXPECT_EQ(m->view.find("layers.7.attn.wq_a.weight")->file, 8u);  // layer L in shard L+2

  uint64_t file_bytes = 0, blocks = 0;
  for (const auto& p : m->view.file_paths) {
    struct stat st {};
    ASSERT_EQ(::stat(p.c_str(), &st), 0);
    file_bytes += static_cast<uint64_t>(st.st_size);
    blocks += static_cast<uint64_t>(st.st_blocks);
  }
  EXPECT_EQ(fs::file_size(m->view.file_paths[0]), 8u + 88u + 1059061760u);
  // §2: the official files sum to 166,886,535,336 B, so reference-writer headers without
  // __metadata__ reproduce every shard's size.
  EXPECT_EQ(file_bytes, 166886535336u);
  EXPECT_LT(blocks * 512, uint64_t{64} << 20) << "sparse shards must not use disk";
  std::printf("0731 sparse: %zu tensors, payload %llu B, files %llu B\n", m->view.tensors.size(),
              static_cast<unsigned long long>(payload), static_cast<unsigned long long>(file_bytes));

  // Index: total_size and one entry per tensor pointing at its shard.
  JsonDoc index;
  auto text = test::read_file(dir.str("model.safetensors.index.json"));
  ASSERT_TRUE(index.parse(std::string(text.begin(), text.end()), err)) << err;
  EXPECT_EQ(json_int(*json_get(index.root(), "metadata"), "total_size"), 166878536440);
  auto wm = json_get(index.root(), "weight_map")->get_object().value();
  EXPECT_EQ(wm.size(), 72317u);
  EXPECT_EQ(std::string(wm["mtp.2.markov_head.markov_w1.weight"].get_string().value()),
            "model-00048-of-00048.safetensors");
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    EXPECT_TRUE(fs::exists(dir.str(f))) << f;

  Findings f;
  check_deepseek_v4(m->view, f);
  EXPECT_EQ(f.items().size(), 0u) << dump(f);
}

// Every payload byte of a tiny synth is valid for its dtype.
void expect_valid_payload(const LoadedModel& m, uint64_t experts) {
  for (const auto& t : m.view.tensors) {
    auto file = test::read_file(m.view.file_paths[t.file]);
    const uint8_t* p = file.data() + t.offset;
    size_t bad = 0;
    for (uint64_t i = 0; i < t.nbytes; ++i) {
      if (t.type == "F8_E4M3") bad += (p[i] & 0x7F) == 0x7F;
      if (t.type == "F8_E8M0") bad += p[i] < 115 || p[i] > 130;
    }
    if (t.type == "BF16")
      for (uint64_t i = 0; i < t.nbytes; i += 2) bad += ((p[i + 1] & 0x7F) == 0x7F && (p[i] & 0x80));
    if (t.type == "F32")
      for (uint64_t i = 0; i < t.nbytes; i += 4) {
        float v;
        std::memcpy(&v, p + i, 4);
        bad += !std::isfinite(v);
      }
    if (t.type == "I64")
      for (uint64_t i = 0; i < t.nbytes; i += 8) {
        int64_t v;
        std::memcpy(&v, p + i, 8);
        bad += v < 0 || static_cast<uint64_t>(v) >= experts;
      }
    EXPECT_EQ(bad, 0u) << t.name;
  }
}

TEST(SynthDsv4, TinyIsValidDeterministicAndSmall) {
  test::TempDir a, b, c;
  std::string err;
  ASSERT_TRUE(synth_deepseek_v4_flash_0731(a.str(), SynthSize::tiny, 42, err)) << err;
  ASSERT_TRUE(synth_deepseek_v4_flash_0731(b.str(), SynthSize::tiny, 42, err)) << err;
  ASSERT_TRUE(synth_deepseek_v4_flash_0731(c.str(), SynthSize::tiny, 43, err)) << err;
  auto m = load_headers(a.str());
  ASSERT_EQ(m->view.files.size(), 10u);  // embed + 5 layers + head + 3 stages
  Findings f;
  check_deepseek_v4(m->view, f);
  EXPECT_EQ(f.items().size(), 0u) << dump(f);
  expect_valid_payload(*m, 8);

  uint64_t total = 0;
  bool differs = false;
  for (const auto& name : m->view.files) {
    auto x = test::read_file(a.str(name));
    EXPECT_EQ(x, test::read_file(b.str(name))) << name;
    differs |= x != test::read_file(c.str(name));
    total += x.size();
  }
  EXPECT_TRUE(differs) << "the seed must change the payload";
  EXPECT_GT(total, uint64_t{1} << 20);
  EXPECT_LT(total, uint64_t{16} << 20);
  // Block types present: hash layers 0-1 (tid2eid), ratio 4 indexer, ratio 128 compressor, 3 stages.
  for (const char* n : {"layers.0.ffn.gate.tid2eid", "layers.1.ffn.gate.tid2eid", "layers.1.attn.indexer.wq_b.weight",
                        "layers.2.attn.compressor.ape", "layers.2.ffn.gate.bias", "mtp.0.main_proj.scale",
                        "mtp.2.markov_head.markov_w2.weight", "mtp.2.hc_head_fn"})
    EXPECT_NE(m->view.find(n), nullptr) << n;
  EXPECT_EQ(m->view.find("layers.2.attn.indexer.wq_b.weight"), nullptr);
}

TEST(SynthDsv4, UnwritableDirectoryIsAnError) {
  std::string err;
  EXPECT_FALSE(synth_deepseek_v4_flash_0731("/proc/ckpt-no-such/dir", SynthSize::tiny, 1, err));
  EXPECT_FALSE(err.empty());
}

}  // namespace
}  // namespace ckpt
