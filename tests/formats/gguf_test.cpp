#include "formats/gguf.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <stdexcept>

#include "core/checked_math.h"
#include "core/ggml_types.h"
#include "test_util.h"

namespace ckpt {
namespace {

using test::TempDir;

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

// ---- a tiny GGUF writer: writes exactly what the spec says, so tests can lie in any field ----

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

void put_str(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

struct KvSpec {
  std::string key;
  int32_t type;
  std::vector<uint8_t> value;  // raw bytes after the type field
};

template <class T>
std::vector<uint8_t> le(T v) { std::vector<uint8_t> out; put(out, v); return out; }

std::vector<uint8_t> str_value(const std::string& s) { std::vector<uint8_t> out; put_str(out, s); return out; }

// Array header (element type, count) followed by the raw elements.
std::vector<uint8_t> array_value(int32_t elem_type, uint64_t count, const std::vector<uint8_t>& elements) {
  std::vector<uint8_t> out;
  put(out, elem_type);
  put(out, count);
  out.insert(out.end(), elements.begin(), elements.end());
  return out;
}

struct TensorSpec {
  std::string name;
  std::vector<int64_t> ne;
  int32_t type = kGgmlF32;
  std::vector<uint8_t> data;
  std::optional<uint32_t> n_dims;   // default ne.size()
  std::optional<uint64_t> offset;   // default: densely packed, padded to alignment
};

struct GgufSpec {
  std::string magic = "GGUF";
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors, n_kv;  // default: the list sizes
  std::vector<KvSpec> kvs;
  std::vector<TensorSpec> tensors;
  uint64_t pad_to = 32;  // the writer's alignment
};

struct Built {
  std::vector<uint8_t> bytes;
  uint64_t infos_end = 0, data_start = 0;
  std::vector<uint64_t> tensor_starts;  // absolute offsets of each tensor's data
};

uint64_t pad(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

Built build(const GgufSpec& s) {
  Built b;
  auto& out = b.bytes;
  out.insert(out.end(), s.magic.begin(), s.magic.end());
  put(out, s.version);
  put<uint64_t>(out, s.n_tensors.value_or(s.tensors.size()));
  put<uint64_t>(out, s.n_kv.value_or(s.kvs.size()));
  for (const KvSpec& kv : s.kvs) {
    put_str(out, kv.key);
    put(out, kv.type);
    out.insert(out.end(), kv.value.begin(), kv.value.end());
  }
  std::vector<uint64_t> offsets;
  uint64_t running = 0;
  for (const TensorSpec& t : s.tensors) {
    offsets.push_back(t.offset.value_or(running));
    running = offsets.back() + pad(t.data.size(), s.pad_to);
  }
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    const TensorSpec& t = s.tensors[i];
    put_str(out, t.name);
    put<uint32_t>(out, t.n_dims.value_or(static_cast<uint32_t>(t.ne.size())));
    for (int64_t d : t.ne) put(out, d);
    put(out, t.type);
    put(out, offsets[i]);
  }
  b.infos_end = out.size();
  b.data_start = s.tensors.empty() ? out.size() : pad(out.size(), s.pad_to);
  out.resize(b.data_start, 0);
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    b.tensor_starts.push_back(b.data_start + offsets[i]);
    if (s.tensors[i].data.empty()) continue;
    const uint64_t at = b.data_start + offsets[i];
    if (out.size() < at) out.resize(at, 0);
    if (out.size() < at + s.tensors[i].data.size()) out.resize(at + s.tensors[i].data.size(), 0);
    std::memcpy(out.data() + at, s.tensors[i].data.data(), s.tensors[i].data.size());
    if (i + 1 < s.tensors.size()) out.resize(pad(out.size(), s.pad_to), 0);
  }
  return b;
}

std::vector<uint8_t> f32_data(size_t n, float first) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < n; ++i) put(out, first + static_cast<float>(i));
  return out;
}

// A valid file covering every KV shape: 3 tensors, the middle one padded, the last one
// a multiple of 32 bytes so the file ends exactly at its end.
GgufSpec base_spec() {
  GgufSpec s;
  std::vector<uint8_t> names;
  put_str(names, "a");
  put_str(names, "bc");
  std::vector<uint8_t> floats;
  put(floats, 1.0f);
  put(floats, 2.0f);
  s.kvs = {
      {"general.architecture", kGgufString, str_value("test")},
      {"general.alignment", kGgufUint32, le<uint32_t>(32)},
      {"test.count", kGgufUint32, le<uint32_t>(7)},
      {"test.offset", kGgufInt64, le<int64_t>(-5)},
      {"test.flag", kGgufBool, {1}},
      {"test.names", kGgufArray, array_value(kGgufString, 2, names)},
      {"test.values", kGgufArray, array_value(kGgufFloat32, 2, floats)},
  };
  std::vector<uint8_t> q8(34, 1);
  q8[0] = 0x00;
  q8[1] = 0x3C;  // d = 1.0
  s.tensors = {
      {"t.f32", {8, 2}, kGgmlF32, f32_data(16, 1.0f), std::nullopt, std::nullopt},
      {"t.q8", {32}, kGgmlQ8_0, q8, std::nullopt, std::nullopt},
      {"t.last", {8}, kGgmlF32, f32_data(8, 100.0f), std::nullopt, std::nullopt},
  };
  return s;
}

struct Parsed {
  std::optional<GgufFile> g;
  Findings f;
};

// Writes bytes to a scratch file and reads it back through the real mmap path.
Parsed parse_bytes(const std::vector<uint8_t>& bytes) {
  TempDir dir;
  const std::string path = dir.str("t.gguf");
  test::write_file(path, bytes);
  MappedFile file;
  IoError err;
  Parsed p;
  if (!file.open(path, err)) {
    ADD_FAILURE() << err.message;
    return p;
  }
  p.g = read_gguf(file, "t.gguf", p.f);
  return p;
}

Parsed parse_fixture(const std::string& rel) {
  MappedFile file;
  IoError err;
  Parsed p;
  if (!file.open(test::fixture(rel), err)) {
    ADD_FAILURE() << err.message;
    return p;
  }
  p.g = read_gguf(file, rel, p.f);
  return p;
}

std::string dump(const Findings& f) {
  std::string out;
  for (const Finding& x : f.items()) {
    out += x.code + " [" + severity_name(x.severity) + "] " + x.tensor + " @" +
           (x.offset ? std::to_string(*x.offset) : "-") + ": " + x.message + "\n";
  }
  return out;
}

// Every finding names the file, an absolute offset and a sentence.
void expect_well_formed(const Findings& f) {
  for (const Finding& x : f.items()) {
    EXPECT_EQ(x.file, "t.gguf");
    EXPECT_TRUE(x.offset.has_value()) << x.code;
    EXPECT_FALSE(x.message.empty()) << x.code;
    EXPECT_EQ(x.code.rfind("GGUF_", 0), 0u) << x.code;
  }
}

// ---- fixtures ----

TEST(GgufFixtures, EveryExternalFileReadsClean) {
  const std::string dir = test::fixture("external/gguf");
  int count = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".gguf") continue;
    ++count;
    Parsed p = parse_fixture("external/gguf/" + e.path().filename().string());
    ASSERT_TRUE(p.g.has_value()) << e.path() << "\n" << dump(p.f);
    EXPECT_TRUE(p.f.items().empty()) << e.path() << "\n" << dump(p.f);
    EXPECT_EQ(p.g->version, 3u);
    EXPECT_EQ(p.g->kvs.size(), p.g->n_kv);
    EXPECT_EQ(p.g->tensors.size(), p.g->n_tensors);
  }
  EXPECT_EQ(count, 7);
}

TEST(GgufFixtures, Qwen3nextTinyFacts) {
  Parsed p = parse_fixture("ggml/qwen3next-tiny.gguf");
  ASSERT_TRUE(p.g.has_value()) << dump(p.f);
  EXPECT_TRUE(p.f.items().empty()) << dump(p.f);
  const GgufFile& g = *p.g;
  EXPECT_EQ(g.version, 3u);
  EXPECT_EQ(g.tensors.size(), 51u);
  EXPECT_EQ(g.kvs.size(), 10u);
  EXPECT_EQ(g.alignment, 32u);
  EXPECT_EQ(g.data_start, 3648u);
  EXPECT_EQ(g.file_size, 7895936u);
  EXPECT_EQ(g.get_string("general.architecture"), "qwen3next");
  EXPECT_EQ(g.get_int("qwen3next.expert_count"), 8);
  uint64_t total = 0;
  for (const GgufTensorInfo& t : g.tensors) total += checked_pad(t.nbytes, 32).value();
  EXPECT_EQ(g.data_start + total, g.file_size);
  const GgufTensorInfo* gate = g.find_tensor("blk.0.ffn_gate_exps.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->type, kGgmlIQ3_S);
  EXPECT_EQ(gate->n_dims, 3u);
  EXPECT_EQ(gate->ne[0], 256u);
  EXPECT_EQ(gate->ne[1], 512u);
  EXPECT_EQ(gate->ne[2], 8u);
  EXPECT_EQ(gate->nbytes, 8u * 56320u);  // gguf.md §8: 56,320 B per expert
  const GgufTensorInfo* down = g.find_tensor("blk.2.ffn_down_exps.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->nbytes, 8u * 107520u);
}

TEST(GgufFixtures, DummyExampleFacts) {
  Parsed p = parse_fixture("external/gguf/llama-gguf-example-dummy.gguf");
  ASSERT_TRUE(p.g.has_value()) << dump(p.f);
  const GgufFile& g = *p.g;
  EXPECT_EQ(g.kvs.size(), 15u);
  EXPECT_EQ(g.tensors.size(), 10u);
  EXPECT_EQ(g.data_start, 1216u);
  EXPECT_EQ(g.get_int("some.parameter.uint8"), 0x12);
  EXPECT_EQ(g.get_int("some.parameter.int8"), -0x13);
  EXPECT_EQ(g.get_int("some.parameter.uint64"), 0x123456789abcdef0);
  EXPECT_EQ(g.get_string("some.parameter.string"), "hello world");
  EXPECT_EQ(g.find_kv("some.parameter.string")->display(), "\"hello world\"");
  EXPECT_EQ(g.find_kv("some.parameter.bool")->display(), "true");
  const GgufKV* arr = g.find_kv("some.parameter.arr.str");
  ASSERT_NE(arr, nullptr);
  EXPECT_EQ(arr->type, kGgufArray);
  EXPECT_EQ(arr->array_type, kGgufString);
  EXPECT_EQ(arr->array_count, 3u);
  EXPECT_EQ(arr->display(), "[STRING x 3]");
  const GgufKV* i16 = g.find_kv("some.parameter.arr.i16");
  ASSERT_NE(i16, nullptr);
  EXPECT_EQ(i16->array_count, 4u);
  EXPECT_EQ(i16->array_offset, i16->offset + 8 + i16->key.size() + 4 + 4 + 8);
  for (const GgufTensorInfo& t : g.tensors) EXPECT_EQ(t.type, kGgmlF32) << t.name;
  const GgufTensorInfo& last = g.tensors.back();
  EXPECT_EQ(g.data_start + last.offset + last.nbytes, g.file_size);
}

TEST(GgufFixtures, VocabFilesEndBeforeTheAlignedDataStart) {
  const std::pair<const char*, uint64_t> files[] = {
      {"ggml-vocab-bert-bge.gguf", 627552},  {"ggml-vocab-deepseek-coder.gguf", 1156096},
      {"ggml-vocab-gpt-2.gguf", 1766816},    {"ggml-vocab-llama-spm.gguf", 723872},
      {"ggml-vocab-phi-3.gguf", 726048},
  };
  for (const auto& [name, data_start] : files) {
    Parsed p = parse_fixture(std::string("external/gguf/") + name);
    ASSERT_TRUE(p.g.has_value()) << name << dump(p.f);
    EXPECT_FALSE(p.f.has_errors()) << name << dump(p.f);
    EXPECT_EQ(p.g->tensors.size(), 0u);
    EXPECT_EQ(p.g->data_start, data_start) << name;
    EXPECT_GT(p.g->data_start, p.g->file_size) << name;
    const GgufKV* tokens = p.g->find_kv("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->array_type, kGgufString);
  }
  Parsed gpt2 = parse_fixture("external/gguf/ggml-vocab-gpt-2.gguf");
  EXPECT_EQ(gpt2.g->find_kv("tokenizer.ggml.tokens")->array_count, 50257u);
}

TEST(GgufFixtures, LlamaTinyRandomFacts) {
  Parsed p = parse_fixture("external/gguf/llama-2-tiny-random.gguf");
  ASSERT_TRUE(p.g.has_value()) << dump(p.f);
  EXPECT_EQ(p.g->tensors.size(), 12u);
  EXPECT_EQ(p.g->kvs.size(), 18u);
  EXPECT_EQ(p.g->data_start, 724416u);
  EXPECT_EQ(p.g->find_kv("tokenizer.ggml.scores")->array_count, 32000u);
}

// ---- the corruption table ----

TEST(GgufBuilt, BaseFileIsValid) {
  Built b = build(base_spec());
  test::dump_fuzz_seed("gguf_header", "base", b.bytes);
  Parsed p = parse_bytes(b.bytes);
  ASSERT_TRUE(p.g.has_value()) << dump(p.f);
  EXPECT_TRUE(p.f.items().empty()) << dump(p.f);
  EXPECT_EQ(p.g->tensors.size(), 3u);
  EXPECT_EQ(p.g->tensors[1].nbytes, 34u);
  EXPECT_EQ(p.g->tensors[2].offset, 128u);
  EXPECT_EQ(p.g->data_start, b.data_start);
  EXPECT_EQ(p.g->get_int("test.offset"), -5);
  EXPECT_EQ(p.g->find_kv("test.values")->display(), "[FLOAT32 x 2]");
  EXPECT_EQ(b.bytes.size(), b.data_start + 160);
}

using Edit = std::function<void(GgufSpec&)>;
using Patch = std::function<void(std::vector<uint8_t>&, const Built&)>;

struct Corruption {
  const char* name;
  Edit edit;
  Patch patch;
  const char* code;
  Severity severity = Severity::error;
  const char* absent = nullptr;  // a code that must NOT be reported
};

KvSpec& kv(GgufSpec& s, const std::string& key) {
  for (KvSpec& k : s.kvs) if (k.key == key) return k;
  throw std::runtime_error("no kv " + key);
}

Edit set_kv(std::string key, int32_t type, std::vector<uint8_t> value) {
  return [=](GgufSpec& s) { s.kvs.push_back({key, type, value}); };
}
Edit replace_kv(std::string key, int32_t type, std::vector<uint8_t> value) {
  return [=](GgufSpec& s) { KvSpec& k = kv(s, key); k.type = type; k.value = value; };
}
Edit tensor_edit(size_t i, std::function<void(TensorSpec&)> f) {
  return [=](GgufSpec& s) { f(s.tensors[i]); };
}
Edit last_tensor(std::vector<int64_t> ne, int32_t type) {
  return tensor_edit(2, [=](TensorSpec& t) { t.ne = ne; t.type = type; t.data.clear(); });
}

std::vector<uint8_t> u64_then(uint64_t v, std::vector<uint8_t> tail = {}) {
  std::vector<uint8_t> out = le(v);
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

std::vector<Corruption> corruption_table() {
  const uint64_t k2p30 = uint64_t{1} << 30;
  return {
      {"bad magic", [](GgufSpec& s) { s.magic = "GGUX"; }, nullptr, "GGUF_BAD_MAGIC"},
      {"byte-reversed magic", [](GgufSpec& s) { s.magic = "FUGG"; }, nullptr, "GGUF_BIG_ENDIAN"},
      {"version 0", [](GgufSpec& s) { s.version = 0; }, nullptr, "GGUF_BAD_VERSION"},
      {"version 1", [](GgufSpec& s) { s.version = 1; }, nullptr, "GGUF_BAD_VERSION"},
      {"version 4", [](GgufSpec& s) { s.version = 4; }, nullptr, "GGUF_BAD_VERSION"},
      {"version 0x03000000", [](GgufSpec& s) { s.version = 0x03000000; }, nullptr, "GGUF_BIG_ENDIAN"},
      {"n_tensors 2^63", [](GgufSpec& s) { s.n_tensors = uint64_t{1} << 63; }, nullptr, "GGUF_COUNT_TOO_LARGE"},
      {"n_tensors 2^64-1", [](GgufSpec& s) { s.n_tensors = kU64Max; }, nullptr, "GGUF_COUNT_TOO_LARGE"},
      {"n_tensors SIZE_MAX/sizeof+1", [](GgufSpec& s) { s.n_tensors = kU64Max / 120 + 1; }, nullptr, "GGUF_COUNT_TOO_LARGE"},
      {"n_kv 2^62", [](GgufSpec& s) { s.n_kv = uint64_t{1} << 62; }, nullptr, "GGUF_COUNT_TOO_LARGE"},
      {"n_kv 2^64-1", [](GgufSpec& s) { s.n_kv = kU64Max; }, nullptr, "GGUF_COUNT_TOO_LARGE"},
      {"empty key", set_kv("", kGgufUint8, {1}), nullptr, "GGUF_KEY_EMPTY"},
      {"duplicate key", set_kv("test.count", kGgufUint32, le<uint32_t>(8)), nullptr, "GGUF_KEY_DUPLICATE"},
      {"key syntax", set_kv("Test.Upper Case", kGgufUint8, {1}), nullptr, "GGUF_KEY_SYNTAX", Severity::warning},
      {"key empty segment", set_kv("test..x", kGgufUint8, {1}), nullptr, "GGUF_KEY_SYNTAX", Severity::warning},
      {"kv type 13", set_kv("test.bad", 13, {0, 0, 0, 0}), nullptr, "GGUF_BAD_KV_TYPE"},
      {"kv type -1", set_kv("test.bad", -1, {0, 0, 0, 0}), nullptr, "GGUF_BAD_KV_TYPE"},
      {"array element type 13", set_kv("test.bad", kGgufArray, array_value(13, 1, {0})), nullptr, "GGUF_BAD_KV_TYPE"},
      {"array element type -1", set_kv("test.bad", kGgufArray, array_value(-1, 1, {0})), nullptr, "GGUF_BAD_KV_TYPE"},
      {"array of array", set_kv("test.nested", kGgufArray, array_value(kGgufArray, 1, array_value(kGgufUint8, 1, {0}))),
       nullptr, "GGUF_NESTED_ARRAY"},
      {"string length 2^64-1", set_kv("test.s", kGgufString, u64_then(kU64Max, {'a'})), nullptr, "GGUF_STRING_TOO_LONG"},
      {"string length 2^30+1", set_kv("test.s", kGgufString, u64_then(k2p30 + 1, {'a'})), nullptr, "GGUF_STRING_TOO_LONG"},
      {"string length > remaining", set_kv("test.s", kGgufString, u64_then(100000, {'a'})), nullptr, "GGUF_TRUNCATED"},
      {"key length 2^64-1", nullptr, [](std::vector<uint8_t>& b, const Built&) { std::fill(b.begin() + 24, b.begin() + 32, 0xFF); },
       "GGUF_STRING_TOO_LONG"},
      {"array n > 2^30", set_kv("test.a", kGgufArray, array_value(kGgufUint8, k2p30 + 1, {0})), nullptr, "GGUF_ARRAY_TOO_LONG"},
      {"array n*elem > remaining", set_kv("test.a", kGgufArray, array_value(kGgufUint32, 100000, {0})), nullptr, "GGUF_TRUNCATED"},
      {"string array n*8 > remaining", set_kv("test.a", kGgufArray, array_value(kGgufString, 100000, {0})), nullptr, "GGUF_TRUNCATED"},
      {"string array element too long", set_kv("test.a", kGgufArray, array_value(kGgufString, 1, u64_then(k2p30 + 1))), nullptr, "GGUF_STRING_TOO_LONG"},
      {"bool 2", set_kv("test.b", kGgufBool, {2}), nullptr, "GGUF_BAD_BOOL", Severity::warning},
      {"bool array 3", set_kv("test.b", kGgufArray, array_value(kGgufBool, 2, {1, 3})), nullptr, "GGUF_BAD_BOOL", Severity::warning},
      {"non-UTF-8 string", set_kv("test.s", kGgufString, str_value("ok\xff\xfe")), nullptr, "GGUF_BAD_UTF8", Severity::warning},
      {"overlong UTF-8", set_kv("test.s", kGgufString, str_value("\xc0\xaf")), nullptr, "GGUF_BAD_UTF8", Severity::warning},
      {"non-UTF-8 string array", [](GgufSpec& s) {
         std::vector<uint8_t> e; put_str(e, "fine"); put_str(e, "\xed\xa0\x80");  // a surrogate
         s.kvs.push_back({"test.a", kGgufArray, array_value(kGgufString, 2, e)});
       }, nullptr, "GGUF_BAD_UTF8", Severity::warning},
      {"alignment 0", replace_kv("general.alignment", kGgufUint32, le<uint32_t>(0)), nullptr, "GGUF_BAD_ALIGNMENT"},
      {"alignment 3", replace_kv("general.alignment", kGgufUint32, le<uint32_t>(3)), nullptr, "GGUF_BAD_ALIGNMENT"},
      {"alignment 24", replace_kv("general.alignment", kGgufUint32, le<uint32_t>(24)), nullptr, "GGUF_BAD_ALIGNMENT"},
      {"alignment 0x80000000", replace_kv("general.alignment", kGgufUint32, le<uint32_t>(0x80000000u)), nullptr, "GGUF_BAD_ALIGNMENT"},
      {"alignment as INT32", replace_kv("general.alignment", kGgufInt32, le<int32_t>(32)), nullptr, "GGUF_BAD_ALIGNMENT"},
      {"vocab scores as INT8", set_kv("tokenizer.ggml.scores", kGgufArray, array_value(kGgufInt8, 2, {1, 2})), nullptr, "GGUF_VOCAB_TYPE"},
      {"vocab token_type as FLOAT32", set_kv("tokenizer.ggml.token_type", kGgufArray, array_value(kGgufFloat32, 1, le(1.0f))), nullptr, "GGUF_VOCAB_TYPE"},
      {"vocab tokens not an array", set_kv("tokenizer.ggml.tokens", kGgufString, str_value("x")), nullptr, "GGUF_VOCAB_TYPE"},
      {"vocab scores count", [](GgufSpec& s) {
         std::vector<uint8_t> e; put_str(e, "a"); put_str(e, "b");
         s.kvs.push_back({"tokenizer.ggml.tokens", kGgufArray, array_value(kGgufString, 2, e)});
         s.kvs.push_back({"tokenizer.ggml.scores", kGgufArray, array_value(kGgufFloat32, 1, le(0.5f))});
       }, nullptr, "GGUF_VOCAB_COUNT"},
      {"name length 64", tensor_edit(0, [](TensorSpec& t) { t.name = std::string(64, 'n'); }), nullptr, "GGUF_NAME_TOO_LONG"},
      {"name length 2^64-1", nullptr, [](std::vector<uint8_t>& b, const Built&) {
         const std::string name = "t.q8";
         auto it = std::search(b.begin(), b.end(), name.begin(), name.end());
         std::fill(it - 8, it, 0xFF);
       }, "GGUF_STRING_TOO_LONG"},
      {"duplicate tensor names", tensor_edit(1, [](TensorSpec& t) { t.name = "t.f32"; }), nullptr, "GGUF_NAME_DUPLICATE"},
      {"n_dims 5", tensor_edit(0, [](TensorSpec& t) { t.ne = {8, 2, 1, 1, 1}; }), nullptr, "GGUF_BAD_NDIMS"},
      {"n_dims 2^32-1", tensor_edit(0, [](TensorSpec& t) { t.n_dims = 0xFFFFFFFFu; }), nullptr, "GGUF_BAD_NDIMS"},
      {"ne -1", tensor_edit(0, [](TensorSpec& t) { t.ne = {8, -1}; }), nullptr, "GGUF_BAD_DIM"},
      {"element count 2^64", last_tensor({int64_t{1} << 32, int64_t{1} << 32}, kGgmlF32), nullptr, "GGUF_SHAPE_OVERFLOW"},
      {"element count 2^63", last_tensor({int64_t{1} << 31, int64_t{1} << 32}, kGgmlF32), nullptr, "GGUF_SHAPE_OVERFLOW"},
      {"type 4", tensor_edit(0, [](TensorSpec& t) { t.type = 4; }), nullptr, "GGUF_REMOVED_TYPE"},
      {"type 31", tensor_edit(0, [](TensorSpec& t) { t.type = 31; }), nullptr, "GGUF_REMOVED_TYPE"},
      {"type 36", tensor_edit(0, [](TensorSpec& t) { t.type = 36; }), nullptr, "GGUF_REMOVED_TYPE"},
      {"type 43", tensor_edit(0, [](TensorSpec& t) { t.type = 43; }), nullptr, "GGUF_UNKNOWN_TYPE"},
      {"type 99", tensor_edit(0, [](TensorSpec& t) { t.type = 99; }), nullptr, "GGUF_UNKNOWN_TYPE"},
      {"type -1", tensor_edit(0, [](TensorSpec& t) { t.type = -1; }), nullptr, "GGUF_UNKNOWN_TYPE"},
      {"Q4_K ne0 = 100", last_tensor({100}, kGgmlQ4_K), nullptr, "GGUF_BLOCK_MISMATCH"},
      {"byte size overflow (F32 ne0 = 2^62)", last_tensor({int64_t{1} << 62}, kGgmlF32), nullptr, "GGUF_SIZE_OVERFLOW"},
      {"PAD overflow (F32 ne0 = SIZE_MAX/4)", last_tensor({4611686018427387903}, kGgmlF32), nullptr, "GGUF_PAD_OVERFLOW"},
      {"Q4_0 ne0 = 2^62 (multiply-before-divide)", last_tensor({int64_t{1} << 62}, kGgmlQ4_0), nullptr,
       "GGUF_TENSOR_OUT_OF_FILE", Severity::error, "GGUF_SIZE_OVERFLOW"},
      {"data size accumulation wraps", [](GgufSpec& s) {
         s.tensors.clear();
         for (int i = 0; i < 3; ++i) {
           s.tensors.push_back({"huge" + std::to_string(i), {int64_t{1} << 61}, kGgmlF32, {}, std::nullopt,
                                uint64_t(i == 1) << 63});
         }
       }, nullptr, "GGUF_SIZE_OVERFLOW"},
      {"dim patched to 2^42+1", tensor_edit(0, [](TensorSpec& t) { t.ne = {8, 4398046511105}; }), nullptr, "GGUF_BAD_OFFSET"},
      {"Bleeding Llama: dims exceed data", last_tensor({8, 4398046511105}, kGgmlF32), nullptr, "GGUF_TENSOR_OUT_OF_FILE"},
      {"first offset != 0", tensor_edit(0, [](TensorSpec& t) { t.offset = 32; }), nullptr, "GGUF_BAD_OFFSET"},
      {"gap", tensor_edit(1, [](TensorSpec& t) { t.offset = 96; }), nullptr, "GGUF_BAD_OFFSET"},
      {"overlap", tensor_edit(1, [](TensorSpec& t) { t.offset = 32; }), nullptr, "GGUF_BAD_OFFSET"},
      {"unaligned offset", tensor_edit(1, [](TensorSpec& t) { t.offset = 65; }), nullptr, "GGUF_BAD_OFFSET"},
      {"swapped order", [](GgufSpec& s) { s.tensors[1].offset = 128; s.tensors[2].offset = 64; }, nullptr, "GGUF_BAD_OFFSET"},
      {"tensor past end of file", tensor_edit(2, [](TensorSpec& t) { t.ne = {8, 4}; }), nullptr, "GGUF_TENSOR_OUT_OF_FILE"},
      {"data start past EOF", nullptr, [](std::vector<uint8_t>& b, const Built& built) { b.resize(built.infos_end + 1); },
       "GGUF_DATA_START_PAST_EOF"},
      {"non-zero padding between tensors", nullptr,
       [](std::vector<uint8_t>& b, const Built& built) { b[built.tensor_starts[1] + 40] = 0xAB; },
       "GGUF_NONZERO_PADDING", Severity::warning},
      {"non-zero padding before data", nullptr,
       [](std::vector<uint8_t>& b, const Built& built) { b[built.data_start - 1] = 1; },
       "GGUF_NONZERO_PADDING", Severity::warning},
      {"trailing bytes", nullptr, [](std::vector<uint8_t>& b, const Built&) { b.insert(b.end(), 5, 0); },
       "GGUF_TRAILING_BYTES", Severity::warning},
  };
}

TEST(GgufCorruption, EachCaseReportsItsCode) {
  for (const Corruption& c : corruption_table()) {
    SCOPED_TRACE(c.name);
    GgufSpec spec = base_spec();
    if (c.edit) c.edit(spec);
    Built b = build(spec);
    if (c.patch) c.patch(b.bytes, b);
    test::dump_fuzz_seed("gguf_header", std::string("corrupt_") + c.name, b.bytes);
    Parsed p = parse_bytes(b.bytes);
    EXPECT_TRUE(p.f.has_code(c.code)) << dump(p.f);
    if (c.absent) {
      EXPECT_FALSE(p.f.has_code(c.absent)) << dump(p.f);
    }
    for (const Finding& x : p.f.items()) {
      if (x.code == c.code) {
        EXPECT_EQ(x.severity, c.severity) << x.code;
      }
    }
    if (c.severity == Severity::warning) {
      EXPECT_FALSE(p.f.has_errors()) << dump(p.f);
      EXPECT_TRUE(p.g.has_value());
    } else {
      EXPECT_TRUE(p.f.has_errors());
    }
    expect_well_formed(p.f);
  }
}

TEST(GgufCorruption, NonZeroPaddingBeforeDataIsReachable) {
  // The row above only means something if the base file has padding before its data.
  Built b = build(base_spec());
  EXPECT_LT(b.infos_end, b.data_start);
}

TEST(GgufCorruption, FindingsNameTensorAndOffset) {
  GgufSpec spec = base_spec();
  spec.tensors[1].offset = 96;
  Built b = build(spec);
  Parsed p = parse_bytes(b.bytes);
  ASSERT_EQ(p.f.count_code("GGUF_BAD_OFFSET"), 1u) << dump(p.f);
  const Finding& x = p.f.items().front();
  EXPECT_EQ(x.tensor, "t.q8");
  EXPECT_EQ(x.message, "tensor 't.q8' has offset 96, expected 64 (a gap of 32 bytes)");
}

TEST(GgufCorruption, HugeCountsFailFastWithoutAllocating) {
  for (uint64_t n : {uint64_t{1} << 63, kU64Max, uint64_t{1} << 40}) {
    GgufSpec spec = base_spec();
    spec.n_tensors = n;
    Parsed p = parse_bytes(build(spec).bytes);
    EXPECT_FALSE(p.g.has_value());
    EXPECT_EQ(p.f.count_code("GGUF_COUNT_TOO_LARGE"), 1u) << dump(p.f);
  }
}

TEST(GgufCorruption, InvalidAlignmentFallsBackToDefault) {
  GgufSpec spec = base_spec();
  kv(spec, "general.alignment").value = le<uint32_t>(3);
  Parsed p = parse_bytes(build(spec).bytes);
  ASSERT_TRUE(p.g.has_value());
  EXPECT_EQ(p.g->alignment, 32u);
  EXPECT_EQ(p.f.items().size(), 1u) << dump(p.f);  // no cascade of offset errors
}

TEST(GgufCorruption, CustomAlignmentIsHonoured) {
  GgufSpec spec = base_spec();
  kv(spec, "general.alignment").value = le<uint32_t>(64);
  spec.pad_to = 64;
  spec.tensors[2].ne = {16};
  spec.tensors[2].data = f32_data(16, 0);  // 64 bytes: the file still ends at its end
  Parsed p = parse_bytes(build(spec).bytes);
  ASSERT_TRUE(p.g.has_value());
  EXPECT_TRUE(p.f.items().empty()) << dump(p.f);
  EXPECT_EQ(p.g->alignment, 64u);
  EXPECT_EQ(p.g->data_start % 64, 0u);
}

// The spec does not require the last tensor's alignment padding, but llama.cpp's full-read
// mode (gguf_init_from_file with no_alloc = false, llama-gguf-hash) refuses a file that ends
// inside it: a warning, with the padded end (real_client_llama checks the warning against
// llama.cpp's own full read on every file of its corpus).
TEST(GgufCorruption, WarnsWhenTheLastTensorIsNotFollowedByItsAlignmentPadding) {
  GgufSpec spec = base_spec();
  spec.tensors[2].ne = {3};
  spec.tensors[2].data = f32_data(3, 0);  // 12 bytes; the builder writes no padding after the last
  Built b = build(spec);
  test::dump_fuzz_seed("gguf_header", "last_tensor_unpadded", b.bytes);
  Parsed p = parse_bytes(b.bytes);
  ASSERT_TRUE(p.g.has_value());
  EXPECT_FALSE(p.f.has_errors()) << dump(p.f);
  ASSERT_TRUE(p.f.has_code("GGUF_LAST_TENSOR_UNPADDED")) << dump(p.f);
  EXPECT_EQ(p.f.items().size(), 1u) << dump(p.f);
  EXPECT_NE(p.f.items()[0].message.find("ends at " + std::to_string(b.tensor_starts[2] + 32)), std::string::npos)
      << dump(p.f);
  b.bytes.resize(b.tensor_starts[2] + 32, 0);  // the padding written: no finding
  Parsed padded = parse_bytes(b.bytes);
  EXPECT_TRUE(padded.f.items().empty()) << dump(padded.f);
}

TEST(GgufCorruption, VersionTwoIsAccepted) {
  GgufSpec spec = base_spec();
  spec.version = 2;
  Parsed p = parse_bytes(build(spec).bytes);
  EXPECT_TRUE(p.f.items().empty()) << dump(p.f);
}

TEST(GgufCorruption, ZeroTensorFileNeedNotReachTheBoundary) {
  GgufSpec spec = base_spec();
  spec.tensors.clear();
  Built b = build(spec);
  ASSERT_NE(b.bytes.size() % 32, 0u);
  Parsed p = parse_bytes(b.bytes);
  ASSERT_TRUE(p.g.has_value());
  EXPECT_TRUE(p.f.items().empty()) << dump(p.f);
  EXPECT_GT(p.g->data_start, p.g->file_size);
}

// ---- truncation ----

// Which codes a prefix may report: inside the header a read runs out (or a count no longer
// fits); after it the data section or a tensor is cut.
void expect_truncation_reported(const Parsed& p, uint64_t len, uint64_t infos_end) {
  ASSERT_TRUE(p.f.has_errors()) << "prefix " << len << " accepted";
  if (len < infos_end) {
    EXPECT_TRUE(p.f.has_code("GGUF_TRUNCATED") || p.f.has_code("GGUF_COUNT_TOO_LARGE")) << len << "\n" << dump(p.f);
    EXPECT_FALSE(p.g.has_value()) << len;
  } else {
    EXPECT_TRUE(p.f.has_code("GGUF_DATA_START_PAST_EOF") || p.f.has_code("GGUF_TENSOR_OUT_OF_FILE")) << len << "\n" << dump(p.f);
  }
}

TEST(GgufTruncation, EveryPrefixOfASmallFileIsAnError) {
  Built b = build(base_spec());
  TempDir dir;
  const std::string path = dir.str("t.gguf");
  for (uint64_t len = 0; len < b.bytes.size(); ++len) {
    test::write_file(path, std::vector<uint8_t>(b.bytes.begin(), b.bytes.begin() + static_cast<ptrdiff_t>(len)));
    MappedFile file;
    IoError err;
    ASSERT_TRUE(file.open(path, err)) << err.message;
    Parsed p;
    p.g = read_gguf(file, "t.gguf", p.f);
    expect_truncation_reported(p, len, b.infos_end);
  }
}

TEST(GgufTruncation, StructuralBoundariesReportTruncated) {
  Built b = build(base_spec());
  // magic, version, n_tensors, n_kv, the first key's length, then its bytes.
  for (uint64_t len : {0u, 2u, 4u, 6u, 8u, 12u}) {
    Parsed p = parse_bytes(std::vector<uint8_t>(b.bytes.begin(), b.bytes.begin() + len));
    EXPECT_TRUE(p.f.has_code("GGUF_TRUNCATED")) << len << dump(p.f);
  }
}

TEST(GgufTruncation, DummyFixturePrefixes) {
  const auto bytes = test::read_file(test::fixture("external/gguf/llama-gguf-example-dummy.gguf"));
  Parsed whole = parse_fixture("external/gguf/llama-gguf-example-dummy.gguf");
  ASSERT_TRUE(whole.g.has_value());
  const GgufTensorInfo& last = whole.g->tensors.back();
  const uint64_t infos_end = last.info_offset + 8 + last.name.size() + 4 + 8 * last.n_dims + 4 + 8;
  ASSERT_LT(infos_end, 1216u);
  TempDir dir;
  const std::string path = dir.str("t.gguf");
  // Every byte through the header and the start of the data, then a stride through the data.
  for (uint64_t len = 0; len < bytes.size(); len += (len < 1300 ? 1 : 97)) {
    test::write_file(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(len)));
    MappedFile file;
    IoError err;
    ASSERT_TRUE(file.open(path, err));
    Parsed p;
    p.g = read_gguf(file, "t.gguf", p.f);
    expect_truncation_reported(p, len, infos_end);
  }
}

}  // namespace
}  // namespace ckpt
