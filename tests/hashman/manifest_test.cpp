// Hash manifests: per-tensor and per-file hashes against independent computations,
// the f32 (dequant) hashes against ggml's own to_float output, the whole-model hash's
// independence from the shard layout, expert packs, and the strict manifest parser.
#include "hashman/manifest.h"

#include <bit>
#include <cstring>

#include <gtest/gtest.h>

#include "formats/json.h"
#include "hashman/check.h"
#include "io/hash.h"
#include "test_util.h"

namespace ckpt {
namespace {

HashManifest hash_path(const std::string& path, HashAlgos algos = {true, true}, bool dequant = false) {
  HashSource src;
  Findings f;
  EXPECT_TRUE(open_hash_source(path, src, f)) << test::describe(f);
  HashOptions o;
  o.algos = algos;
  o.dequant = dequant;
  HashManifest m;
  EXPECT_TRUE(build_hash_manifest(src, o, m, f)) << test::describe(f);
  return m;
}

const ManifestTensor* find_tensor(const HashManifest& m, const std::string& name) {
  for (const auto& t : m.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::string sha256_of(const std::vector<uint8_t>& b) {
  Sha256 s;
  s.update(b);
  return s.hex_digest();
}

std::string xxh3_of(const std::vector<uint8_t>& b) {
  Xxh3 x;
  x.update(b);
  return xxh3_hex(x.digest());
}

TEST(HashManifest, TensorAndFileHashesAreThoseOfTheirBytes) {
  const std::string path = test::fixture("oracle/dsv4-tiny");
  const HashManifest m = hash_path(path);
  auto model = test::load_model_checked(path);
  ASSERT_EQ(m.tensors.size(), model->view.tensors.size());
  EXPECT_EQ(m.tensor_count, 416u);
  for (const char* name : {"embed.weight", "layers.0.attn.wq_a.weight", "layers.2.ffn.experts.3.w2.scale"}) {
    const ManifestTensor* t = find_tensor(m, name);
    ASSERT_TRUE(t) << name;
    const auto bytes = test::tensor_bytes(*model, name);
    EXPECT_EQ(t->bytes, bytes.size());
    EXPECT_EQ(t->sha256, sha256_of(bytes)) << name;
    EXPECT_EQ(t->xxh3, xxh3_of(bytes)) << name;
  }
  ASSERT_EQ(m.files.size(), 12u);  // 7 shards, config, generation config, index, 2 tokenizer files
  for (const auto& f : m.files) {
    const auto bytes = test::read_file(path + "/" + f.name);
    EXPECT_EQ(f.size, bytes.size());
    EXPECT_EQ(f.sha256, sha256_of(bytes)) << f.name;  // what sha256sum prints
    EXPECT_EQ(f.xxh3, xxh3_of(bytes)) << f.name;
  }
  // Sorted by name, deterministic.
  for (size_t i = 1; i < m.tensors.size(); ++i) EXPECT_LT(m.tensors[i - 1].name, m.tensors[i].name);
  EXPECT_EQ(hash_manifest_json(m), hash_manifest_json(hash_path(path)));
}

TEST(HashManifest, WithoutFileHashesTensorsAreHashedTheSame) {
  // dsv4-tiny (7 files) is read file by file in order; without file hashes every tensor is
  // its own task: both paths give the same tensor and model hashes.
  const std::string path = test::fixture("oracle/dsv4-tiny");
  HashSource src;
  Findings f;
  ASSERT_TRUE(open_hash_source(path, src, f));
  HashOptions o;
  o.algos = {true, true};
  o.file_hashes = false;
  HashManifest lean;
  ASSERT_TRUE(build_hash_manifest(src, o, lean, f)) << test::describe(f);
  const HashManifest full = hash_path(path);
  EXPECT_EQ(lean.model_sha256, full.model_sha256);
  ASSERT_EQ(lean.tensors.size(), full.tensors.size());
  for (size_t i = 0; i < lean.tensors.size(); ++i) EXPECT_EQ(lean.tensors[i].sha256, full.tensors[i].sha256);
  ASSERT_EQ(lean.files.size(), 12u);
  ASSERT_EQ(lean.files[2].name, "model-00001-of-00007.safetensors");
  EXPECT_TRUE(lean.files[2].sha256.empty() && lean.files[2].xxh3.empty());
  EXPECT_EQ(lean.files[2].size, full.files[2].size);
  // Instead of the file hash, the hash of the shard's header (what no tensor hash covers).
  EXPECT_TRUE(lean.files[2].has_header && lean.files[2].header_bytes > 8 &&
              lean.files[2].header_bytes < lean.files[2].size && !lean.files[2].header_sha256.empty());
  const std::string text = hash_manifest_json(lean);
  EXPECT_NE(text.find("\"file_hashes\": false"), std::string::npos);
  HashManifest back;
  ASSERT_TRUE(parse_hash_manifest(text, "m.json", back, f)) << test::describe(f);
  EXPECT_EQ(compare_manifests(back, lean).failed, 0u);
}

TEST(HashManifest, DequantHashesEqualGgmlsOwnToFloat) {
  // qwen3next-tiny.ref.json holds, per tensor, the sha256 of ggml's to_float output.
  const HashManifest m = hash_path(test::fixture("ggml/qwen3next-tiny.gguf"), {false, true}, true);
  const auto ref_text = test::read_file(test::fixture("ggml/qwen3next-tiny.ref.json"));
  JsonDoc ref;
  std::string error;
  ASSERT_TRUE(ref.parse(std::string(ref_text.begin(), ref_text.end()), error)) << error;
  ASSERT_EQ(m.tensors.size(), 51u);
  size_t checked = 0;
  for (const auto& t : m.tensors) {
    auto entry = json_get(ref.root(), t.name);
    ASSERT_TRUE(entry) << t.name;
    EXPECT_EQ(t.f32_sha256, json_string(*entry, "sha256_f32le")) << t.name << " " << t.type;
    EXPECT_TRUE(t.f32_unsupported.empty()) << t.f32_unsupported;
    ++checked;
  }
  EXPECT_EQ(checked, 51u);
  EXPECT_EQ(m.model_f32_sha256.size(), 64u);
}

TEST(HashManifest, DequantDecodesSafetensorsDtypesElementWise) {
  // F8_E4M3 codes 0x38 (1.0), 0xB8 (-1.0); E8M0 127 (1.0), 128 (2.0); BF16 1.5; I8 -3.
  test::TempDir tmp;
  const std::string header =
      R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"F8_E8M0","shape":[2],"data_offsets":[2,4]},)"
      R"("c":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]},"d":{"dtype":"I8","shape":[1],"data_offsets":[6,7]},)"
      R"("e":{"dtype":"F4","shape":[2],"data_offsets":[7,8]}})";
  test::write_file(tmp.str("m.safetensors"),
                   test::make_safetensors(header, {0x38, 0xB8, 127, 128, 0xC0, 0x3F, 0xFD, 0x21}));
  const HashManifest m = hash_path(tmp.str("m.safetensors"), {true, false}, true);
  auto f32_xxh3 = [](std::vector<float> v) {
    Xxh3 x;
    x.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4));
    return xxh3_hex(x.digest());
  };
  EXPECT_EQ(find_tensor(m, "a")->f32_xxh3, f32_xxh3({1.0f, -1.0f}));
  EXPECT_EQ(find_tensor(m, "b")->f32_xxh3, f32_xxh3({1.0f, 2.0f}));
  EXPECT_EQ(find_tensor(m, "c")->f32_xxh3, f32_xxh3({1.5f}));
  EXPECT_EQ(find_tensor(m, "d")->f32_xxh3, f32_xxh3({-3.0f}));
  EXPECT_TRUE(find_tensor(m, "e")->f32_xxh3.empty());
  EXPECT_NE(find_tensor(m, "e")->f32_unsupported.find("F4"), std::string::npos);
}

// The same three tensors as one file, as a one-file checkpoint directory, and as two
// shards with an index (in another order inside the files).
TEST(HashManifest, WholeModelHashDoesNotDependOnTheShardLayout) {
  test::TempDir tmp;
  std::vector<uint8_t> a(64), b(32), c(16);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 13 + 5);
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<uint8_t>(i * 3 + 9);
  auto cat = [](std::vector<std::vector<uint8_t>> parts) {
    std::vector<uint8_t> out;
    for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  const std::string one =
      R"({"__metadata__":{"format":"pt"},"x.a":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]},)"
      R"("x.b":{"dtype":"BF16","shape":[16],"data_offsets":[64,96]},"x.c":{"dtype":"U8","shape":[16],"data_offsets":[96,112]}})";
  test::write_file(tmp.str("single.safetensors"), test::make_safetensors(one, cat({a, b, c})));
  std::filesystem::create_directories(tmp.str("dir1"));
  test::write_file(tmp.str("dir1/model.safetensors"), test::make_safetensors(one, cat({a, b, c})));
  std::filesystem::create_directories(tmp.str("dir2"));
  test::write_file(tmp.str("dir2/model-00001-of-00002.safetensors"),
                   test::make_safetensors(R"({"x.c":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},)"
                                          R"("x.a":{"dtype":"F32","shape":[4,4],"data_offsets":[16,80]}})",
                                          cat({c, a})));
  test::write_file(tmp.str("dir2/model-00002-of-00002.safetensors"),
                   test::make_safetensors(R"({"x.b":{"dtype":"BF16","shape":[16],"data_offsets":[0,32]}})", b));
  test::write_text(tmp.str("dir2/model.safetensors.index.json"),
                   R"({"metadata":{"total_size":112},"weight_map":{"x.a":"model-00001-of-00002.safetensors",)"
                   R"("x.b":"model-00002-of-00002.safetensors","x.c":"model-00001-of-00002.safetensors"}})");
  const HashManifest m0 = hash_path(tmp.str("single.safetensors"), {true, true}, true);
  const HashManifest m1 = hash_path(tmp.str("dir1"), {true, true}, true);
  const HashManifest m2 = hash_path(tmp.str("dir2"), {true, true}, true);
  for (const HashManifest* m : {&m1, &m2}) {
    EXPECT_EQ(m->model_xxh3, m0.model_xxh3);
    EXPECT_EQ(m->model_sha256, m0.model_sha256);
    EXPECT_EQ(m->model_f32_sha256, m0.model_f32_sha256);
    EXPECT_EQ(m->tensor_bytes, 112u);
  }
  ASSERT_EQ(m2.files.size(), 3u);  // two shards and the index
  EXPECT_NE(m2.files[0].sha256, m0.files[0].sha256);
  EXPECT_NE(m2.files[0].xxh3, m2.files[1].xxh3);
  // One changed byte in one tensor changes the model hash.
  auto c2 = c;
  c2[3] ^= 1;
  test::write_file(tmp.str("dir1/model.safetensors"), test::make_safetensors(one, cat({a, b, c2})));
  const HashManifest m3 = hash_path(tmp.str("dir1"));
  EXPECT_NE(m3.model_xxh3, m0.model_xxh3);
  EXPECT_NE(m3.model_sha256, m0.model_sha256);
}

TEST(HashManifest, ConvertedModelHashEqualsThePeersOutputDespiteOtherHeaders) {
  // dsv4-tiny.qw-bf16 (the deployment converter's output) has every tensor right but
  // different header metadata: the same whole-model hash, different file hashes.
  const HashManifest peer = hash_path(test::fixture("oracle/dsv4-tiny.qw-bf16"));
  test::TempDir tmp;
  auto r = test::run_ckpt("convert -q " + test::shell_quote(test::fixture("oracle/dsv4-tiny")) + " " +
                          test::shell_quote(tmp.str("out")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const HashManifest ours = hash_path(tmp.str("out"));
  EXPECT_EQ(ours.model_sha256, peer.model_sha256);
  EXPECT_EQ(ours.model_xxh3, peer.model_xxh3);
  ASSERT_EQ(ours.files.size(), peer.files.size());
  ASSERT_EQ(ours.files[3].name, "model-00002-of-00007.safetensors");
  EXPECT_NE(ours.files[3].sha256, peer.files[3].sha256);
}

TEST(HashManifest, ExpertPackPartsAreTensors) {
  test::TempDir tmp;
  const std::string pack = tmp.str("pack");
  auto r = test::run_ckpt("repack-experts -q " + test::shell_quote(test::fixture("ggml/qwen3next-tiny.gguf")) + " " +
                          test::shell_quote(pack));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const HashManifest m = hash_path(pack, {true, false});
  EXPECT_EQ(m.format, "expert-pack");
  ASSERT_EQ(m.files.size(), 3u);
  EXPECT_EQ(m.files[0].name, "dense.gguf");
  EXPECT_EQ(m.files[1].name, "experts.bin");
  EXPECT_EQ(m.files[2].name, "manifest.json");  // a file like the others, hashed whole
  // Every part's xxh3 is the one repack-experts wrote into its manifest.
  const auto text = test::read_file(pack + "/manifest.json");
  JsonDoc doc;
  std::string error;
  ASSERT_TRUE(doc.parse(std::string(text.begin(), text.end()), error));
  simdjson::dom::array blobs;
  ASSERT_FALSE(json_get(doc.root(), "blobs")->get_array().get(blobs));
  size_t parts = 0;
  for (auto b : blobs) {
    simdjson::dom::array ps;
    ASSERT_FALSE(json_get(b, "parts")->get_array().get(ps));
    for (auto p : ps) {
      const std::string name = *json_string(p, "tensor") + "#" + std::to_string(*json_int(b, "expert"));
      const ManifestTensor* t = find_tensor(m, name);
      ASSERT_TRUE(t) << name;
      EXPECT_EQ(t->xxh3, json_string(p, "xxh3")) << name;
      EXPECT_EQ(t->file, "experts.bin");
      ++parts;
    }
  }
  EXPECT_EQ(parts, 4u * 8u * 3u);
  EXPECT_EQ(m.tensors.size(), parts + 39u);  // + dense.gguf's tensors
}

TEST(HashManifest, JsonRoundTripsThroughTheParser) {
  const HashManifest m = hash_path(test::fixture("ggml/qwen3next-tiny.gguf"), {true, true}, true);
  const std::string text = hash_manifest_json(m);
  HashManifest back;
  Findings f;
  ASSERT_TRUE(parse_hash_manifest(text, "m.json", back, f)) << test::describe(f);
  EXPECT_EQ(hash_manifest_json(back), text);
  EXPECT_EQ(compare_manifests(m, back).failed, 0u);
}

struct BadManifest {
  const char* what;
  std::string from, to;  // replace the first `from` in a valid manifest by `to`
  const char* code;
};

TEST(HashManifest, ParserRejectsBadManifestsWithAFinding) {
  const HashManifest m = hash_path(test::fixture("oracle/dsv3-tiny"), {true, false});
  const std::string good = hash_manifest_json(m);
  const std::string t0 = m.tensors[0].name;
  const std::vector<BadManifest> cases = {
      {"not json", "{", "[", "HASHMAN_JSON"},
      {"wrong schema", "ckptkit/hash-manifest/v1", "ckptkit/hash-manifest/v9", "HASHMAN_FIELD"},
      {"unknown member", "\"dequant\": false", "\"dequant\": false, \"extra\": 1", "HASHMAN_FIELD"},
      {"unknown format", "\"safetensors\"", "\"onnx\"", "HASHMAN_FIELD"},
      {"unknown algorithm", "[\"xxh3\"]", "[\"md5\"]", "HASHMAN_FIELD"},
      {"no algorithm", "[\"xxh3\"]", "[]", "HASHMAN_FIELD"},
      {"repeated algorithm", "[\"xxh3\"]", "[\"xxh3\",\"xxh3\"]", "HASHMAN_FIELD"},
      {"uppercase hex", m.tensors[0].xxh3, "ABCDEF0123456789", "HASHMAN_FIELD"},
      {"short hex", m.tensors[0].xxh3, "abc", "HASHMAN_FIELD"},
      {"sha256 not listed", "\"xxh3\":\"" + m.files[0].xxh3 + "\"",
       "\"xxh3\":\"" + m.files[0].xxh3 + "\",\"sha256\":\"" + std::string(64, 'a') + "\"", "HASHMAN_FIELD"},
      {"missing hash", ",\"xxh3\":\"" + m.tensors[0].xxh3 + "\"", "", "HASHMAN_FIELD"},
      {"negative size", "\"bytes\":" + std::to_string(m.tensors[0].bytes), "\"bytes\":-1", "HASHMAN_FIELD"},
      {"shape not integers", "\"shape\":[", "\"shape\":[\"x\",", "HASHMAN_FIELD"},
      {"count mismatch", "\"tensor_count\":" + std::to_string(m.tensor_count), "\"tensor_count\":99", "HASHMAN_FIELD"},
      {"duplicate tensor", "\"name\":\"" + m.tensors[1].name + "\"", "\"name\":\"" + t0 + "\"", "HASHMAN_FIELD"},
      {"empty name", "\"name\":\"" + t0 + "\"", "\"name\":\"\"", "HASHMAN_FIELD"},
      {"f32 without dequant", "\"file\":", "\"f32_xxh3\":\"0123456789abcdef\",\"file\":", "HASHMAN_FIELD"},
      {"dequant not bool", "\"dequant\": false", "\"dequant\": 0", "HASHMAN_FIELD"},
      {"file hashes not bool", "\"file_hashes\": true", "\"file_hashes\": 1", "HASHMAN_FIELD"},
      {"file hash without file_hashes", "\"file_hashes\": true", "\"file_hashes\": false", "HASHMAN_FIELD"},
  };
  for (const auto& c : cases) {
    std::string text = good;
    const size_t at = text.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.what;
    text.replace(at, c.from.size(), c.to);
    HashManifest out;
    Findings f;
    EXPECT_FALSE(parse_hash_manifest(text, "m.json", out, f)) << c.what;
    EXPECT_TRUE(f.has_code(c.code)) << c.what << ": " << test::describe(f);
    for (const auto& x : f.items()) EXPECT_EQ(x.file, "m.json") << c.what;
  }
  // Too many dims.
  std::string text = good;
  std::string dims(200, '1');
  for (size_t i = 1; i < dims.size(); i += 2) dims[i] = ',';
  text.replace(text.find("\"shape\":[") + 9, 0, dims.substr(0, 199) + ",");
  HashManifest out;
  Findings f;
  EXPECT_FALSE(parse_hash_manifest(text, "m.json", out, f));
  EXPECT_TRUE(f.has_code("HASHMAN_FIELD")) << test::describe(f);
}

TEST(HashManifest, ParserSurvivesMutatedAndTruncatedInput) {
  // A cheap stand-in for the fuzzer: deterministic byte flips, insertions and cuts of a
  // valid manifest either parse or give a finding; never a crash (the ASan run checks).
  const std::string good = hash_manifest_json(hash_path(test::fixture("oracle/dsv3-tiny"), {true, true}, true));
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  size_t rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = good;
    const int edits = 1 + static_cast<int>(next() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = next() % text.size();
      switch (next() % 3) {
        case 0: text[at] = static_cast<char>(next() & 0xFF); break;
        case 1: text.insert(at, 1, "{}[]\",:0-e"[next() % 10]); break;
        default: text.resize(at); break;
      }
    }
    HashManifest out;
    Findings f;
    if (!parse_hash_manifest(text, "m.json", out, f)) {
      ++rejected;
      EXPECT_TRUE(f.has_errors());
    }
  }
  EXPECT_GT(rejected, 1000u);
}

TEST(HashManifest, CompareNamesMissingExtraAndChangedTensors) {
  HashManifest a = hash_path(test::fixture("oracle/dsv3-tiny"), {true, false});
  HashManifest b = a;
  b.tensors[0].xxh3 = "0000000000000000";
  b.tensors[1].shape.push_back(1);
  b.tensors.erase(b.tensors.begin() + 2);
  ManifestTensor extra = a.tensors[3];
  extra.name = "zz.extra";
  b.tensors.push_back(extra);
  compute_model_hashes(b);
  const CheckResult r = compare_manifests(a, b);
  EXPECT_EQ(r.status, CheckStatus::mismatch);
  const std::string lines = check_lines_text(r, false);
  EXPECT_NE(lines.find(a.tensors[0].name + ": FAILED\n"), std::string::npos) << lines;
  EXPECT_NE(lines.find(a.tensors[1].name + ": FAILED (shape"), std::string::npos) << lines;
  EXPECT_NE(lines.find(a.tensors[2].name + ": FAILED (missing)"), std::string::npos) << lines;
  EXPECT_NE(lines.find("zz.extra: FAILED (not in manifest)"), std::string::npos) << lines;
  EXPECT_NE(lines.find("(model): FAILED"), std::string::npos) << lines;
  EXPECT_EQ(r.failed, 5u);
  EXPECT_EQ(compare_manifests(a, a).status, CheckStatus::ok);
}

TEST(HashCli, ManifestCheckAndExitCodes) {
  test::TempDir tmp;
  const auto q = test::shell_quote;
  const std::string model = test::fixture("ggml/qwen3next-tiny.gguf");
  auto r = test::run_ckpt("hash --algo sha256 -o " + q(tmp.str("m.json")) + " " + q(model));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto c = test::run_ckpt("hash --check " + q(tmp.str("m.json")) + " " + q(model));
  EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
  EXPECT_NE(c.out.find("qwen3next-tiny.gguf: OK\n"), std::string::npos);
  EXPECT_NE(c.out.find("blk.0.ssm_a: OK\n"), std::string::npos);
  EXPECT_NE(c.err.find("all 53 checksums OK"), std::string::npos) << c.err;
  EXPECT_EQ(test::run_ckpt("hash --check " + q(tmp.str("m.json")) + " /nonexistent.gguf").exit_code, 3);
  EXPECT_EQ(test::run_ckpt("hash /nonexistent").exit_code, 3);
  EXPECT_EQ(test::run_ckpt("hash --algo md5 " + q(model)).exit_code, 2);
  {  // A structurally broken input is a finding (exit 1), named, never a crash.
    auto whole = test::read_file(model);
    whole.resize(whole.size() / 2);
    test::write_file(tmp.str("half.gguf"), whole);
    auto half = test::run_ckpt("hash " + q(tmp.str("half.gguf")));
    EXPECT_EQ(half.exit_code, 1) << half.err;
    EXPECT_NE(half.err.find("GGUF_"), std::string::npos) << half.err;
    EXPECT_TRUE(half.out.empty());
  }
  test::write_text(tmp.str("bad.json"), "{\"schema\":1}");
  EXPECT_EQ(test::run_ckpt("hash --check " + q(tmp.str("bad.json")) + " " + q(model)).exit_code, 1);
  // A corrupt copy: exit 1, FAILED lines only with --quiet, nothing with --status.
  test::copy_tree(model, tmp.str("copy.gguf"));
  auto bytes = test::read_file(tmp.str("copy.gguf"));
  {
    auto loaded = test::load_model_checked(model);
    const ModelTensor* t = loaded->view.find("blk.0.ssm_a");
    ASSERT_TRUE(t);
    bytes[t->offset + 5] ^= 0x10;
  }
  test::write_file(tmp.str("copy.gguf"), bytes);
  auto bad = test::run_ckpt("hash -q --check " + q(tmp.str("m.json")) + " " + q(tmp.str("copy.gguf")));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.out.find(": OK"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("copy.gguf: FAILED (not in manifest)"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("qwen3next-tiny.gguf: FAILED (open or read)"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("blk.0.ssm_a: FAILED\n"), std::string::npos) << bad.out;
  auto st = test::run_ckpt("hash --status --check " + q(tmp.str("m.json")) + " " + q(tmp.str("copy.gguf")));
  EXPECT_EQ(st.exit_code, 1);
  EXPECT_TRUE(st.out.empty()) << st.out;
}

}  // namespace
}  // namespace ckpt
