// The corruption suite: damaged copies of the fixtures, each made by the test,
// each detected with its specific code by the same entry point the CLI uses.
// A global operator new hook proves no case allocates beyond the header limit.
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>

#include <gtest/gtest.h>

#include "formats/safetensors.h"
#include "test_util.h"
#include "validate/validate.h"

namespace {
std::atomic<size_t> g_largest_allocation{0};
}

// Under AddressSanitizer the allocator owns operator new; the sanitizer run enforces
// the same bound with ASAN_OPTIONS=max_allocation_size_mb (see the Makefile) instead.
#if !CKPT_TEST_ASAN
// The replacement pairs malloc with free consistently; GCC cannot see that across the
// replaced operators and warns.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
  size_t prev = g_largest_allocation.load(std::memory_order_relaxed);
  while (n > prev && !g_largest_allocation.compare_exchange_weak(prev, n, std::memory_order_relaxed)) {
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop
#endif

namespace ckpt {
namespace {

namespace fs = std::filesystem;

// --- surgery on copies -------------------------------------------------------

struct StFile {
  std::string header;
  std::vector<uint8_t> data;
};

StFile split(const std::string& path) {
  auto bytes = test::read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];
  StFile f;
  f.header.assign(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n));
  f.data.assign(bytes.begin() + 8 + static_cast<long>(n), bytes.end());
  return f;
}

void join(const std::string& path, const StFile& f) {
  std::string h = f.header;
  while (!h.empty() && h.back() == ' ') h.pop_back();
  test::write_file(path, test::make_safetensors(h, f.data));
}

void replace_once(std::string& s, const std::string& from, const std::string& to) {
  auto pos = s.find(from);
  ASSERT_NE(pos, std::string::npos) << "'" << from << "' not found";
  s.replace(pos, from.size(), to);
}

void edit_header(const std::string& path, const std::string& from, const std::string& to) {
  StFile f = split(path);
  replace_once(f.header, from, to);
  join(path, f);
}

void edit_text(const std::string& path, const std::string& from, const std::string& to) {
  auto bytes = test::read_file(path);
  std::string s(bytes.begin(), bytes.end());
  replace_once(s, from, to);
  test::write_text(path, s);
}

// Absolute file offset of a tensor's first byte, read with the library's own reader.
uint64_t tensor_offset(const std::string& path, const std::string& tensor) {
  MappedFile f;
  IoError err;
  EXPECT_TRUE(f.open(path, err));
  Findings findings;
  auto h = read_safetensors_header(f, path, StReadOptions{}, findings);
  EXPECT_TRUE(h.has_value());
  for (const auto& t : h->tensors)
    if (t.name == tensor) return h->data_start + t.begin;
  ADD_FAILURE() << tensor << " not in " << path;
  return 0;
}

void poke(const std::string& path, uint64_t offset, std::vector<uint8_t> bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void truncate_to(const std::string& path, uint64_t len) { fs::resize_file(path, len); }

const std::string S2 = "model-00002-of-00007.safetensors";
const std::string S3 = "model-00003-of-00007.safetensors";
const std::string IDX = "model.safetensors.index.json";

// --- the table ---------------------------------------------------------------

struct Corruption {
  const char* name;
  const char* fixture;  // copied into a temp dir first
  std::function<void(const std::string& root)> damage;
  const char* code;     // the finding that must be reported
  bool deep = false;
  const char* profile = "auto";
  const char* target = "";  // validate root/target instead of root (a file inside the copy)
};

std::vector<Corruption> corruptions() {
  auto in = [](const std::string& root, const std::string& f) { return root + "/" + f; };
  return {
      // safetensors structure (truncation at each structural boundary)
      {"truncate_in_length_prefix", "oracle/dsv4-tiny", [=](auto r) { truncate_to(in(r, S2), 5); }, "ST_TOO_SMALL"},
      {"truncate_in_header", "oracle/dsv4-tiny", [=](auto r) { truncate_to(in(r, S2), 300); }, "ST_HEADER_PAST_EOF"},
      {"truncate_at_data_start", "oracle/dsv4-tiny",
       [=](auto r) { truncate_to(in(r, S2), 8 + split(in(r, S2)).header.size()); }, "ST_TENSOR_PAST_EOF"},
      {"truncate_mid_data", "oracle/dsv4-tiny", [=](auto r) { truncate_to(in(r, S3), 600000); }, "ST_TENSOR_PAST_EOF"},
      {"truncate_last_byte", "oracle/dsv4-tiny",
       [=](auto r) { truncate_to(in(r, S3), fs::file_size(in(r, S3)) - 1); }, "ST_TENSOR_PAST_EOF"},
      {"header_length_huge", "oracle/dsv4-tiny", [=](auto r) { poke(in(r, S2), 4, {0x10, 0, 0, 0}); }, "ST_HEADER_TOO_LARGE"},
      {"header_bitflip_root", "oracle/dsv4-tiny", [=](auto r) { poke(in(r, S2), 8, {'{' ^ 0x20}); },
       "ST_HEADER_NOT_OBJECT"},
      {"header_bitflip_colon", "oracle/dsv4-tiny",
       [=](auto r) { poke(in(r, S2), 8 + split(in(r, S2)).header.find(':'), {':' ^ 0x01}); }, "ST_HEADER_JSON"},
      {"header_bitflip_quote", "oracle/dsv4-tiny",
       [=](auto r) { poke(in(r, S2), 8 + split(in(r, S2)).header.find("\"dtype\""), {'"' ^ 0x02}); },
       "ST_HEADER_JSON"},
      {"header_bitflip_utf8", "oracle/dsv4-tiny", [=](auto r) { poke(in(r, S2), 12, {0xC3}); }, "ST_HEADER_UTF8"},
      {"header_nul_padding", "oracle/dsv4-tiny",
       [=](auto r) {
         StFile f = split(in(r, S2));
         f.header += std::string(8, '\0');
         test::write_file(in(r, S2), test::make_safetensors(f.header, f.data, false));
       },
       "ST_PADDING_NUL"},
      {"trailing_bytes", "oracle/dsv4-tiny",
       [=](auto r) {
         std::ofstream(in(r, S2), std::ios::app | std::ios::binary) << "polyglot";
       },
       "ST_TRAILING_BYTES"},
      {"offsets_gap", "oracle/dsv4-tiny",
       [=](auto r) {
         StFile f = split(in(r, "model-00005-of-00007.safetensors"));
         replace_once(f.header, "\"data_offsets\":[0,", "\"data_offsets\":[4,");
         f.data.insert(f.data.begin(), 4, 0);
         join(in(r, "model-00005-of-00007.safetensors"), f);
       },
       "ST_OFFSET_GAP"},
      {"offsets_overlap", "oracle/dsv4-tiny",
       [=](auto r) { edit_header(in(r, "model-00005-of-00007.safetensors"), "[0,8]", "[0,12]"); },
       "ST_OFFSET_OVERLAP"},
      {"dtype_shape_mismatch", "oracle/dsv4-tiny",
       [=](auto r) { edit_header(in(r, "model-00001-of-00007.safetensors"), "[512,256]", "[512,255]"); },
       "ST_SIZE_MISMATCH"},
      {"duplicate_tensor_name", "oracle/dsv4-tiny",
       [=](auto r) {
         StFile f = split(in(r, "model-00005-of-00007.safetensors"));
         replace_once(f.header, "\"hc_head_scale\"", "\"hc_head_base\"");
         join(in(r, "model-00005-of-00007.safetensors"), f);
       },
       "ST_DUPLICATE_TENSOR"},
      {"unknown_dtype", "oracle/dsv4-tiny",
       [=](auto r) { edit_header(in(r, "model-00001-of-00007.safetensors"), "\"BF16\"", "\"BF17\""); },
       "ST_UNKNOWN_DTYPE"},
      // the directory and its index
      {"missing_shard", "oracle/dsv4-tiny", [=](auto r) { fs::remove(in(r, S3)); }, "IDX_SHARD_MISSING"},
      {"extra_shard", "oracle/dsv4-tiny",
       [=](auto r) { fs::copy_file(in(r, S3), in(r, "model-00008-of-00007.safetensors")); }, "IDX_SHARD_UNLISTED"},
      {"renamed_shard", "oracle/dsv4-tiny",
       [=](auto r) { fs::rename(in(r, S3), in(r, "model-00003-of-00008.safetensors")); }, "IDX_SHARD_UNLISTED"},
      {"index_wrong_shard", "oracle/dsv4-tiny",
       [=](auto r) {
         edit_text(in(r, IDX), "\"norm.weight\": \"model-00005-of-00007.safetensors\"",
                   "\"norm.weight\": \"model-00002-of-00007.safetensors\"");
       },
       "IDX_WRONG_SHARD"},
      {"index_path_traversal", "oracle/dsv4-tiny",
       [=](auto r) {
         edit_text(in(r, IDX), "\"embed.weight\": \"model-00001-of-00007.safetensors\"",
                   "\"embed.weight\": \"../model-00001-of-00007.safetensors\"");
       },
       "IDX_BAD_PATH"},
      {"index_absolute_path", "oracle/dsv4-tiny",
       [=](auto r) {
         edit_text(in(r, IDX), "\"embed.weight\": \"model-00001-of-00007.safetensors\"",
                   "\"embed.weight\": \"/etc/passwd\"");
       },
       "IDX_BAD_PATH"},
      {"symlink_escapes", "oracle/dsv4-tiny",
       [=](auto r) {
         fs::rename(in(r, S3), r + "/../outside.safetensors");
         fs::create_symlink(r + "/../outside.safetensors", in(r, S3));
       },
       "IDX_PATH_ESCAPE"},
      {"index_total_size", "oracle/dsv4-tiny", [=](auto r) { edit_text(in(r, IDX), "5175259", "5175260"); },
       "IDX_TOTAL_SIZE_MISMATCH"},
      {"index_drops_tensor", "oracle/dsv4-tiny",
       [=](auto r) { edit_text(in(r, IDX), "\"head.weight\": \"model-00005-of-00007.safetensors\",", ""); },
       "IDX_TENSOR_UNMAPPED"},
      {"index_names_ghost_tensor", "oracle/dsv4-tiny",
       [=](auto r) {
         edit_text(in(r, IDX), "\"embed.weight\":", "\"ghost.weight\": \"model-00001-of-00007.safetensors\", \"embed.weight\":");
       },
       "IDX_TENSOR_NOT_IN_SHARD"},
      {"index_duplicate_key", "oracle/dsv4-tiny",
       [=](auto r) {
         edit_text(in(r, IDX), "\"embed.weight\":", "\"norm.weight\": \"model-00005-of-00007.safetensors\", \"embed.weight\":");
       },
       "IDX_DUPLICATE_KEY"},
      {"index_not_json", "oracle/dsv4-tiny", [=](auto r) { edit_text(in(r, IDX), "\"weight_map\"", "weight_map"); },
       "IDX_PARSE"},
      {"tensor_in_two_shards", "oracle/dsv4-tiny",
       [=](auto r) { edit_header(in(r, "model-00005-of-00007.safetensors"), "\"norm.weight\"", "\"embed.weight\""); },
       "CKPT_DUPLICATE_TENSOR"},
      {"config_not_json", "oracle/dsv4-tiny", [=](auto r) { edit_text(in(r, "config.json"), "{", "["); }, "CFG_PARSE"},
      // the DeepSeek-V4 profile
      {"missing_scale", "oracle/dsv4-tiny",
       [=](auto r) {
         edit_header(in(r, S2), "\"layers.0.attn.wkv.scale\"", "\"layers.0.attn.wkv.scald\"");
         edit_text(in(r, IDX), "\"layers.0.attn.wkv.scale\"", "\"layers.0.attn.wkv.scald\"");
       },
       "FP8_UNPAIRED"},
      {"misshaped_scale", "oracle/dsv4-tiny",
       [=](auto r) {
         StFile f = split(in(r, S2));
         replace_once(f.header, "\"layers.0.attn.wkv.scale\":{\"dtype\":\"F8_E8M0\",\"shape\":[1,2]",
                      "\"layers.0.attn.wkv.scale\":{\"dtype\":\"F8_E8M0\",\"shape\":[2,1]");
         join(in(r, S2), f);
       },
       "SCALE_GRID_MISMATCH"},
      {"scale_wrong_dtype", "oracle/dsv4-tiny",
       [=](auto r) {
         edit_header(in(r, S2), "\"layers.0.attn.wkv.scale\":{\"dtype\":\"F8_E8M0\"",
                     "\"layers.0.attn.wkv.scale\":{\"dtype\":\"U8\"");
       },
       "SCALE_DTYPE"},
      {"expert_dtype_changed", "oracle/dsv4-tiny",
       [=](auto r) {
         edit_header(in(r, S2), "\"layers.0.ffn.experts.0.w1.weight\":{\"dtype\":\"I8\"",
                     "\"layers.0.ffn.experts.0.w1.weight\":{\"dtype\":\"U8\"");
       },
       "CAT_DTYPE_MISMATCH"},
      {"compress_ratios_short", "oracle/dsv4-tiny",
       [=](auto r) { edit_text(in(r, "config.json"), "    4,\n", "    5,\n"); }, "DSV4_COMPRESS_RATIOS"},
      {"dspark_targets_vs_stages", "oracle/dsv4-tiny",
       [=](auto r) { edit_text(in(r, "config.json"), "128,\n    0,\n    0\n  ]", "128,\n    0\n  ]"); },
       "DSV4_DSPARK_TARGETS"},
      // payload (--deep)
      {"e8m0_nan_scale", "oracle/dsv4-tiny",
       [=](auto r) { poke(in(r, S2), tensor_offset(in(r, S2), "layers.0.attn.wkv.scale"), {0xFF}); }, "E8M0_RESERVED",
       true},
      {"fp8_nan_code", "oracle/dsv4-tiny",
       [=](auto r) { poke(in(r, S2), tensor_offset(in(r, S2), "layers.0.attn.wkv.weight") + 77, {0x7F}); },
       "FP8_NAN_CODE", true},
      {"fp8_negative_nan_code", "oracle/dsv4-tiny",
       [=](auto r) { poke(in(r, S2), tensor_offset(in(r, S2), "layers.0.attn.wq_a.weight") + 5, {0xFF}); },
       "FP8_NAN_CODE", true},
      {"bf16_nan", "oracle/dsv4-tiny",
       [=](auto r) {
         auto p = in(r, "model-00001-of-00007.safetensors");
         poke(p, tensor_offset(p, "embed.weight") + 100, {0xC1, 0x7F});
       },
       "DATA_NAN", true},
      {"f32_inf", "oracle/dsv4-tiny",
       [=](auto r) {
         auto p = in(r, "model-00005-of-00007.safetensors");
         poke(p, tensor_offset(p, "hc_head_fn") + 8, {0x00, 0x00, 0x80, 0x7F});
       },
       "DATA_INF", true},
      // GGUF
      {"gguf_bad_magic", "ggml/qwen3next-tiny.gguf", [](auto r) { poke(r, 0, {'G', 'G', 'U', 'X'}); }, "GGUF_BAD_MAGIC"},
      {"gguf_bad_version", "ggml/qwen3next-tiny.gguf", [](auto r) { poke(r, 4, {4, 0, 0, 0}); }, "GGUF_BAD_VERSION"},
      {"gguf_tensor_past_eof", "ggml/qwen3next-tiny.gguf", [](auto r) { truncate_to(r, 7000000); },
       "GGUF_TENSOR_OUT_OF_FILE"},
      {"gguf_tensor_count_huge", "ggml/qwen3next-tiny.gguf",
       [](auto r) { poke(r, 8, {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F}); }, "GGUF_COUNT_TOO_LARGE"},
  };
}

void PrintTo(const Corruption& c, std::ostream* os) { *os << c.name; }

class CorruptionSuite : public ::testing::TestWithParam<Corruption> {};

TEST_P(CorruptionSuite, IsDetectedWithItsCode) {
  const Corruption& c = GetParam();
  test::TempDir tmp;
  std::string root = tmp.str(fs::path(c.fixture).filename().string());
  test::copy_tree(test::fixture(c.fixture), root);
  c.damage(root);
  ValidateOptions o;
  o.deep = c.deep;
  o.profile = c.profile;
  g_largest_allocation = 0;
  auto report = validate_path(root, o);
  std::string got;
  for (const auto& f : report.findings.items()) got += f.code + " ";
  EXPECT_TRUE(report.findings.has_code(c.code)) << c.name << ": got " << got;
  EXPECT_TRUE(report.findings.has_errors()) << c.name;
  for (const auto& f : report.findings.items()) {
    if (f.code == c.code) {
      EXPECT_FALSE(f.file.empty()) << c.name;
      EXPECT_FALSE(f.message.empty()) << c.name;
    }
  }
  // Nothing is sized from a lying length field: the largest single allocation stays
  // far below the 100,000,000-byte header limit.
  EXPECT_LT(g_largest_allocation.load(), 100'000'000u) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CorruptionSuite, ::testing::ValuesIn(corruptions()),
                         [](const ::testing::TestParamInfo<Corruption>& info) { return std::string(info.param.name); });

TEST(CorruptionSuiteSize, HasAtLeastThirtyDistinctCorruptions) {
  std::set<std::string> names;
  for (const auto& c : corruptions()) names.insert(c.name);
  EXPECT_GE(names.size(), 30u);
}

}  // namespace
}  // namespace ckpt
