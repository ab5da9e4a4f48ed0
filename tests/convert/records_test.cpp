// convert/records.h: a shard record read back holds the names it was written with, byte
// for byte, also a name whose bytes json_string_literal escapes (a backslash before "x" and
// two hex digits, a byte that is not UTF-8): otherwise --resume would never prove such a
// shard finished.
#include "convert/records.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace ckpt {
namespace {

TEST(ShardRecordJson, NamesReadBackAreTheBytesWritten) {
  ShardRecord rec;
  rec.version = 1;
  rec.shard = "odd\\x41name-\xff.safetensors";
  rec.state = "done";
  rec.input_files = {"in\\x5c-\xfe.safetensors", "plain.safetensors"};
  rec.inputs = {RecordRange{1, 0, 8, std::string(16, 'a')}};
  test::TempDir tmp;
  const std::string path = tmp.str("rec.json");
  test::write_text(path, record_json(rec));
  const auto back = read_record(path);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->shard, rec.shard);
  EXPECT_EQ(back->input_files, rec.input_files);
}

}  // namespace
}  // namespace ckpt
