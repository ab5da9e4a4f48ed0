// parse_index_text: the index reader open_checkpoint runs on model.safetensors.index.json.
// The regression cases came from the fuzz target tests/fuzz/fuzz_index_json.cpp.
#include <gtest/gtest.h>

#include <string>

#include "formats/checkpoint.h"
#include "test_util.h"

namespace ckpt {
namespace {

struct IndexResult {
  CheckpointIndex index;
  Findings findings;
};

IndexResult parse(const std::string& text) {
  IndexResult r;
  parse_index_text(text, r.index, r.findings);
  return r;
}

TEST(IndexText, BothMetadataFormsParse) {
  auto a = parse(R"({"metadata":{"total_size":8},"weight_map":{"a":"m.safetensors"}})");
  EXPECT_TRUE(a.index.parsed) << test::describe(a.findings);
  EXPECT_FALSE(a.findings.has_errors()) << test::describe(a.findings);
  EXPECT_EQ(a.index.total_size, 8u);
  auto b = parse(R"({"metadata":{},"weight_map":{"a":"m.safetensors"},"extra":[1,{"x":null}]})");
  EXPECT_TRUE(b.index.parsed);
  EXPECT_FALSE(b.findings.has_errors()) << test::describe(b.findings);
  EXPECT_FALSE(b.index.total_size.has_value());
}

// Fuzz regression: a key with a bad escape used to leave the index unparsed with no
// finding at all, so validate ignored the broken index and could pass the checkpoint.
TEST(IndexText, BadKeyEscapeIsAnError) {
  for (const char* text : {R"({"metadata":{"total\x":8},"weight_map":{}})",
                           R"({"weight_map":{"a\q":"m.safetensors"}})"}) {
    SCOPED_TRACE(text);
    auto r = parse(text);
    EXPECT_FALSE(r.index.parsed);
    EXPECT_TRUE(r.findings.has_code("IDX_PARSE")) << test::describe(r.findings);
  }
}

// Fuzz regression: members the reader does not use were skipped unchecked, so an index
// that Python's json.load rejects (and with it every loader) passed validation.
TEST(IndexText, InvalidValuesInIgnoredMembersAreErrors) {
  for (const char* text : {R"({"weight_map":{"a":"m.safetensors"},"x":tru})",
                           R"({"weight_map":{"a":"m.safetensors"},"x":[1,nul]})",
                           R"({"weight_map":{"a":"m.safetensors"},"x":{"y":-}})",
                           R"({"metadata":{"format":"pt","n":01},"weight_map":{"a":"m.safetensors"}})",
                           R"({"metadata":{"note":"\uZZZZ"},"weight_map":{"a":"m.safetensors"}})"}) {
    SCOPED_TRACE(text);
    auto r = parse(text);
    EXPECT_TRUE(r.findings.has_code("IDX_PARSE")) << test::describe(r.findings);
  }
}

TEST(IndexText, DuplicateKeysAndTrailingContent) {
  auto dup = parse(R"({"weight_map":{"a":"x.safetensors","a":"y.safetensors"}})");
  EXPECT_TRUE(dup.findings.has_code("IDX_DUPLICATE_KEY"));
  ASSERT_EQ(dup.index.weight_map.size(), 1u);
  EXPECT_EQ(dup.index.weight_map[0].second, "x.safetensors");
  // Fuzz regression (regress-two-weight-maps.json): a second top-level weight_map was
  // merged into the first, so one tensor could be listed twice with different shards.
  for (const char* text : {R"({"weight_map":{"a":"x.safetensors"},"weight_map":{"a":"y.safetensors"}})",
                           R"({"metadata":{"total_size":1},"metadata":{"total_size":2},"weight_map":{}})"}) {
    SCOPED_TRACE(text);
    auto twice = parse(text);
    EXPECT_TRUE(twice.findings.has_code("IDX_DUPLICATE_KEY")) << test::describe(twice.findings);
    EXPECT_FALSE(twice.index.parsed);
  }
  auto trailing = parse(R"({"weight_map":{}} {})");
  EXPECT_TRUE(trailing.findings.has_code("IDX_PARSE"));
  EXPECT_FALSE(trailing.index.parsed);
}

}  // namespace
}  // namespace ckpt
