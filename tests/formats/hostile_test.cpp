// Hostile inputs (issue 14, input side): every JSON walk has a depth limit, non-regular
// files are refused before they are read, reads never go through a mapping (a file cut
// short under us is an error, not SIGBUS), findings are bounded, and compat mode is the
// reference reader's behaviour. Each test fails (or crashes, or hangs) on 0.1.0.
#include <csignal>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "formats/checkpoint.h"
#include "formats/gguf.h"
#include "formats/json.h"
#include "formats/safetensors.h"
#include "io/input_file.h"
#include "profiles/qwen3next.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
const auto q = test::shell_quote;

// A regression that blocks on a FIFO must fail the test, not hang the suite: SIGALRM's
// default action kills the test binary.
struct HangGuard {
  explicit HangGuard(unsigned seconds) { alarm(seconds); }
  ~HangGuard() { alarm(0); }
};

std::string nested_arrays(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// A valid one-tensor header whose tensor entry carries an unknown member nested `depth`
// arrays deep (about 2 bytes per level: 50,000 levels make a 100 KB header).
std::vector<uint8_t> deep_header_file(size_t depth) {
  const std::string header = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],\"x\":" +
                             nested_arrays(depth) + "}}";
  return test::make_safetensors(header, {1, 2, 3, 4});
}

bool has_message(const Findings& f, const std::string& code, const std::string& needle) {
  for (const auto& x : f.items())
    if (x.code == code && x.message.find(needle) != std::string::npos) return true;
  return false;
}

TEST(Hostile, DeeplyNestedHeaderIsAnErrorNotACrash) {
  const auto bytes = deep_header_file(50'000);
  ASSERT_GT(bytes.size(), 100'000u);
  Findings f;
  auto h = read_safetensors_header(bytes, "deep.safetensors", StReadOptions{}, f);
  EXPECT_FALSE(h.has_value());
  EXPECT_TRUE(has_message(f, "ST_HEADER_JSON", "too deep")) << test::describe(f);

  test::TempDir tmp;
  test::write_file(tmp.str("deep.safetensors"), bytes);
  auto r = test::run_ckpt("validate " + q(tmp.str("deep.safetensors")));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("too deep"), std::string::npos) << r.out;
}

TEST(Hostile, ModestNestingInAnUnknownMemberIsStillAccepted) {
  Findings f;
  auto h = read_safetensors_header(deep_header_file(100), "ok.safetensors", StReadOptions{}, f);
  ASSERT_TRUE(h.has_value()) << test::describe(f);
  EXPECT_FALSE(f.has_errors()) << test::describe(f);
  // Whatever nesting the header walk accepts, a DOM parse of the header accepts too.
  size_t accepted = 0;
  for (size_t depth = kJsonMaxDepth - 24; depth < kJsonMaxDepth + 2; ++depth) {
    const auto bytes = deep_header_file(depth);
    Findings g;
    read_safetensors_header(bytes, "d.safetensors", StReadOptions{}, g);
    if (g.has_errors()) continue;
    ++accepted;
    JsonDoc doc;
    std::string error;
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];
    const std::string text(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
    EXPECT_TRUE(doc.parse(text, error)) << depth << ": " << error;
  }
  EXPECT_GT(accepted, 0u);  // the boundary lies inside the range tried
}

TEST(Hostile, DeeplyNestedIndexIsAnErrorNotACrash) {
  for (const std::string& text :
       {"{\"weight_map\":{},\"x\":" + nested_arrays(50'000) + "}",
        "{\"metadata\":{\"y\":" + nested_arrays(50'000) + "},\"weight_map\":{}}"}) {
    CheckpointIndex index;
    Findings f;
    parse_index_text(text, index, f);
    EXPECT_FALSE(index.parsed);
    EXPECT_TRUE(has_message(f, "IDX_PARSE", "too deep")) << test::describe(f);
  }
  // Through the CLI: a directory with a valid shard and the hostile index.
  test::TempDir tmp;
  test::write_file(tmp.str("model.safetensors"),
                   test::make_safetensors("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", {7}));
  test::write_text(tmp.str(kIndexName), "{\"weight_map\":{\"a\":\"model.safetensors\"},\"x\":" + nested_arrays(50'000) + "}");
  auto r = test::run_ckpt("validate " + q(tmp.str()));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("too deep"), std::string::npos) << r.out;
}

TEST(Hostile, DeeplyNestedConfigIsAnErrorNotACrash) {
  JsonDoc doc;
  std::string error;
  EXPECT_FALSE(doc.parse("{\"a\":" + nested_arrays(50'000) + "}", error));
  EXPECT_NE(error.find("too deep"), std::string::npos) << error;
  // The DOM limit is the on-demand walkers' (which stop a few levels earlier, so that what
  // they accept a DOM parse accepts too).
  EXPECT_TRUE(doc.parse(nested_arrays(kJsonMaxDepth - 1), error)) << error;
  EXPECT_FALSE(doc.parse(nested_arrays(kJsonMaxDepth + 1), error));
}

// ---------------------------------------------------------------- findings are bounded

std::string many_duplicates(size_t copies) {
  std::string header = "{";
  header.reserve(copies * 56);
  for (size_t i = 0; i < copies; ++i) {
    if (i) header += ",";
    header += "\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}";
  }
  return header + "}";
}

TEST(Hostile, ADuplicatedNameDoesNotFloodTheFindings) {
  const size_t copies = 300'000;
  const auto bytes = test::make_safetensors(many_duplicates(copies), {});
  Findings f;
  auto h = read_safetensors_header(bytes, "dup.safetensors", StReadOptions{}, f);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->tensors.size(), 1u);
  EXPECT_EQ(f.count_code("ST_DUPLICATE_TENSOR"), copies - 1);  // counts stay exact
  EXPECT_LE(f.items().size(), 2 * kMaxFindingsPerCode);      // what is kept is bounded
  EXPECT_EQ(f.count(Severity::error), copies - 1);
  ASSERT_EQ(f.omitted().size(), 1u);
  EXPECT_EQ(f.omitted()[0].count, copies - 1 - kMaxFindingsPerCode);

  test::TempDir tmp;
  test::write_file(tmp.str("dup.safetensors"), bytes);
  auto human = test::run_ckpt("validate " + q(tmp.str("dup.safetensors")));
  EXPECT_EQ(human.exit_code, 1) << human.err;
  EXPECT_LT(human.out.size(), 100'000u);
  EXPECT_NE(human.out.find("and " + std::to_string(copies - 1 - kMaxFindingsPerCode) + " more ST_DUPLICATE_TENSOR"),
            std::string::npos)
      << human.out.substr(0, 4000);
  auto json = test::run_ckpt("validate --json - " + q(tmp.str("dup.safetensors")));
  EXPECT_EQ(json.exit_code, 1) << json.err;
  EXPECT_LT(json.out.size(), 200'000u);
  JsonDoc doc;
  std::string error;
  ASSERT_TRUE(doc.parse(json.out, error)) << error;
  auto summary = json_get(doc.root(), "summary");
  ASSERT_TRUE(summary);
  EXPECT_EQ(json_int(*summary, "errors"), static_cast<int64_t>(copies - 1));
  auto omitted = json_get(doc.root(), "findings_omitted");
  ASSERT_TRUE(omitted && omitted->is_array()) << json.out.substr(0, 2000);
  simdjson::dom::array arr = omitted->get_array().value_unsafe();
  ASSERT_EQ(arr.size(), 1u);
  EXPECT_EQ(json_string(arr.at(0).value_unsafe(), "code"), "ST_DUPLICATE_TENSOR");
  EXPECT_EQ(json_int(arr.at(0).value_unsafe(), "count"), static_cast<int64_t>(copies - 1 - kMaxFindingsPerCode));
}

TEST(Hostile, DuplicatesCountAgainstTheTensorLimit) {
  StReadOptions o;
  o.max_tensors = 10;
  Findings f;
  auto h = read_safetensors_header(test::make_safetensors(many_duplicates(20), {}), "dup.safetensors", o, f);
  EXPECT_FALSE(h.has_value());
  EXPECT_TRUE(f.has_code("ST_TOO_MANY_TENSORS")) << test::describe(f);
}

TEST(Hostile, FindingsAreCappedPerCodeAndMergedWithCounts) {
  Findings a, b;
  for (int i = 0; i < 250; ++i) a.error("X_CODE", "f", "", std::nullopt, "m");
  for (int i = 0; i < 30; ++i) b.warning("Y_CODE", "f", "", std::nullopt, "m");
  b.append(a);
  EXPECT_EQ(b.count_code("X_CODE"), 250u);
  EXPECT_EQ(b.count(Severity::error), 250u);
  EXPECT_EQ(b.count(Severity::warning), 30u);
  EXPECT_EQ(b.items().size(), kMaxFindingsPerCode + 30);
  ASSERT_EQ(b.omitted_lines().size(), 1u);
  EXPECT_NE(b.omitted_lines()[0].find("150 more X_CODE errors"), std::string::npos) << b.omitted_lines()[0];
}

// ---------------------------------------------------------------- compat = the reference

TEST(Compat, DuplicateTensorKeepsTheLastEntry) {
  const std::string header =
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
  const auto bytes = test::make_safetensors(header, {1, 2, 3, 4});
  StReadOptions compat;
  compat.mode = StMode::compat;
  Findings f;
  auto h = read_safetensors_header(bytes, "d.safetensors", compat, f);
  ASSERT_TRUE(h.has_value());
  ASSERT_EQ(h->tensors.size(), 1u);
  EXPECT_EQ(h->tensors[0].dtype, Dtype::U8);  // the reference's HashMap keeps the last
  EXPECT_FALSE(f.has_errors()) << test::describe(f);
  EXPECT_TRUE(f.has_code("ST_DUPLICATE_TENSOR"));
  Findings strict;
  read_safetensors_header(bytes, "d.safetensors", StReadOptions{}, strict);
  EXPECT_TRUE(strict.has_errors());
}

TEST(Compat, EmptyAndNulNamesAreAcceptedStrictRefusesThem) {
  const std::string header =
      "{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
      "\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}";
  const auto bytes = test::make_safetensors(header, {1, 2});
  StReadOptions compat;
  compat.mode = StMode::compat;
  Findings f;
  auto h = read_safetensors_header(bytes, "n.safetensors", compat, f);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->tensors.size(), 2u);
  EXPECT_FALSE(f.has_errors()) << test::describe(f);
  Findings strict;
  read_safetensors_header(bytes, "n.safetensors", StReadOptions{}, strict);
  EXPECT_EQ(strict.count_code("ST_BAD_NAME"), 2u) << test::describe(strict);
  EXPECT_TRUE(strict.has_errors());
}

// ---------------------------------------------------------------- non-regular inputs

void make_fifo(const std::string& path) { ASSERT_EQ(mkfifo(path.c_str(), 0600), 0) << path; }

void write_small_checkpoint(const test::TempDir& tmp) {
  test::write_file(tmp.str("model.safetensors"),
                   test::make_safetensors("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", {7}));
}

TEST(Inputs, AFifoIsRefusedBeforeItIsRead) {
  HangGuard guard(60);
  test::TempDir tmp;
  make_fifo(tmp.str("fifo"));
  IoError err;
  EXPECT_EQ(open_input_fd(tmp.str("fifo"), err), -1);
  EXPECT_NE(err.message.find("FIFO"), std::string::npos) << err.message;
  std::string text;
  EXPECT_FALSE(read_input_file(tmp.str("fifo"), 1024, text, err));
  // A symlink is refused where links are not allowed.
  test::write_text(tmp.str("real"), "x");
  fs::create_symlink("real", tmp.path() / "link");
  EXPECT_EQ(open_input_fd(tmp.str("link"), err, InputLinks::refuse), -1);
  const int fd = open_input_fd(tmp.str("link"), err, InputLinks::follow);
  ASSERT_GE(fd, 0) << err.message;
  close(fd);
}

TEST(Inputs, AFifoAsShardIsAnIoErrorNotAHang) {
  HangGuard guard(60);
  test::TempDir tmp;
  make_fifo(tmp.str("model.safetensors"));
  Checkpoint ck;
  Findings f;
  open_checkpoint(tmp.str(), StReadOptions{}, ck, f);
  EXPECT_TRUE(f.has_io_errors()) << test::describe(f);
  auto r = test::run_ckpt_env("", "validate " + q(tmp.str()), "timeout 30 ");
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("model.safetensors"), std::string::npos) << r.out << r.err;
}

TEST(Inputs, AFifoAsConfigOrTokenizerIsAnIoErrorNotAHang) {
  HangGuard guard(60);
  for (const char* side : {"config.json", "tokenizer.json", "tokenizer_config.json"}) {
    test::TempDir tmp;
    write_small_checkpoint(tmp);
    make_fifo(tmp.str(side));
    Checkpoint ck;
    Findings f;
    open_checkpoint(tmp.str(), StReadOptions{}, ck, f);
    EXPECT_TRUE(f.has_io_errors()) << side << ": " << test::describe(f);
    auto r = test::run_ckpt_env("", "validate " + q(tmp.str()), "timeout 30 ");
    EXPECT_EQ(r.exit_code, 3) << side << ": " << r.out << r.err;
    EXPECT_NE((r.out + r.err).find(side), std::string::npos) << r.out << r.err;
  }
}

TEST(Inputs, AFifoAsGgufIsAnIoErrorNotAHang) {
  HangGuard guard(60);
  test::TempDir tmp;
  make_fifo(tmp.str("model.gguf"));
  auto r = test::run_ckpt_env("", "validate " + q(tmp.str("model.gguf")), "timeout 30 ");
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  auto i = test::run_ckpt_env("", "inspect " + q(tmp.str("model.gguf")), "timeout 30 ");
  EXPECT_EQ(i.exit_code, 3) << i.out << i.err;
}

// ---------------------------------------------------------------- no mapping: no SIGBUS

TEST(Inputs, AShardTruncatedAfterOpenIsAnIoErrorNotSigbus) {
  test::TempDir tmp;
  const std::string path = tmp.str("model.safetensors");
  std::string header = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4096],\"data_offsets\":[0,4096]}}";
  test::write_file(path, test::make_safetensors(header, std::vector<uint8_t>(4096, 1)));
  InputFile f;
  IoError err;
  ASSERT_TRUE(f.open(path, err)) << err.message;
  ASSERT_EQ(truncate(path.c_str(), 4), 0);  // cut under us, after open and fstat
  Findings findings;
  auto h = read_safetensors_header(f, "model.safetensors", StReadOptions{}, findings);
  EXPECT_FALSE(h.has_value());
  EXPECT_TRUE(findings.has_io_errors()) << test::describe(findings);
  std::vector<uint8_t> buf(16);
  EXPECT_FALSE(f.read_at(4000, buf, err));
  EXPECT_NE(err.message.find("4"), std::string::npos) << err.message;
  EXPECT_EQ(err.path, path);
}

TEST(Inputs, AGgufTruncatedAfterOpenIsAnIoErrorNotSigbus) {
  test::TempDir tmp;
  const std::string path = tmp.str("m.gguf");
  test::copy_tree(test::fixture("ggml/qwen3next-tiny.gguf"), path);
  InputFile f;
  IoError err;
  ASSERT_TRUE(f.open(path, err)) << err.message;
  Findings findings;
  auto g = read_gguf(f, "m.gguf", findings);
  ASSERT_TRUE(g.has_value()) << test::describe(findings);
  // The payload disappears after the header was read: the profile's value checks read it.
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(g->data_start)), 0);
  Findings checks;
  check_qwen3next(*g, f, "m.gguf", checks);
  EXPECT_TRUE(checks.has_io_errors()) << test::describe(checks);
  // And the header itself, cut short after open.
  InputFile f2;
  ASSERT_TRUE(f2.open(path, err));
  ASSERT_EQ(truncate(path.c_str(), 64), 0);
  Findings again;
  EXPECT_FALSE(read_gguf(f2, "m.gguf", again).has_value());
  EXPECT_TRUE(again.has_io_errors()) << test::describe(again);
}

}  // namespace
}  // namespace ckpt
