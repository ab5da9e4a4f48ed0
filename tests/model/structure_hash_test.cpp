#include "model/structure_hash.h"

#include <gtest/gtest.h>

namespace ckpt {
namespace {

// Expected values from Python: json.dumps(sorted records, sort_keys=True,
// separators=(",", ":")) + "\n", then hashlib.sha256.
TEST(StructureHash, EmptyList) {
  EXPECT_EQ(structure_json({}), "[]\n");
  EXPECT_EQ(structure_sha256({}), "37517e5f3dc66819f61f5a7bb8ace1921282415f10551d2defa5c3eb0985b570");
}

TEST(StructureHash, OneRecordMatchesSpecText) {
  std::vector<StructureRecord> r{{"embed.weight", "BF16", {129280, 4096}, 1059061760}};
  EXPECT_EQ(structure_json(r),
            "[{\"dtype\":\"BF16\",\"name\":\"embed.weight\",\"shape\":[129280,4096],\"size_bytes\":1059061760}]\n");
  EXPECT_EQ(structure_sha256(r), "148a0e1ada19654b7facc60b307bda55d0bdcf5aaf786dabb5df3b00619d4eaf");
}

TEST(StructureHash, SortsBytewiseAndEscapesLikePython) {
  std::vector<StructureRecord> r{
      {"b", "F32", {}, 4},
      {"a\xC3\xA9\xF0\x9F\x98\x80\"\\\n\x7F", "I8", {2, 3}, 6},
      {"B", "U8", {1}, 1},
  };
  EXPECT_EQ(structure_json(r),
            "[{\"dtype\":\"U8\",\"name\":\"B\",\"shape\":[1],\"size_bytes\":1},"
            "{\"dtype\":\"I8\",\"name\":\"a\\u00e9\\ud83d\\ude00\\\"\\\\\\n\\u007f\",\"shape\":[2,3],\"size_bytes\":6},"
            "{\"dtype\":\"F32\",\"name\":\"b\",\"shape\":[],\"size_bytes\":4}]\n");
  EXPECT_EQ(structure_sha256(r), "3158fc40a6987e88490dfce7c1e758b65e1ed548c94c646a93b1a9c1acf010f6");
}

TEST(StructureHash, OrderOfInputDoesNotMatter) {
  std::vector<StructureRecord> a{{"x", "BF16", {2}, 4}, {"y", "F32", {1}, 4}};
  std::vector<StructureRecord> b{a[1], a[0]};
  EXPECT_EQ(structure_sha256(a), structure_sha256(b));
}

TEST(StructureHash, InvalidUtf8IsReplacementNotCrash) {
  EXPECT_EQ(json_quote_ascii("a\xFF" "b"), "\"a\\ufffdb\"");
  EXPECT_EQ(json_quote_ascii("\xE2\x82"), "\"\\ufffd\\ufffd\"");  // truncated sequence
  EXPECT_EQ(json_quote_ascii("\xED\xA0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");  // encoded surrogate
  EXPECT_EQ(json_quote_ascii(std::string("\x01\b\f\t", 4)), "\"\\u0001\\b\\f\\t\"");
}

}  // namespace
}  // namespace ckpt
