// core/display.h: the one escaping of untrusted strings in human output and the one
// error line format.
#include "core/display.h"

#include <gtest/gtest.h>

namespace ckpt {
namespace {

TEST(Display, EscapesTerminalControlsAndNewlines) {
  EXPECT_EQ(display_escape("a\x1b[31mb"), "a\\x1b[31mb");
  EXPECT_EQ(display_escape("x\nVERDICT: PASS"), "x\\nVERDICT: PASS");
  EXPECT_EQ(display_escape("\r\t\\"), "\\r\\t\\\\");
  EXPECT_EQ(display_escape(std::string("\0\x07\x7f", 3)), "\\x00\\x07\\x7f");
  EXPECT_EQ(display_escape("\xc2\x9b" "2J"), "\\xc2\\x9b2J");  // C1 CSI
}

TEST(Display, KeepsValidUtf8AndPlainText) {
  EXPECT_EQ(display_escape("model.layers.0.mlp.experts.7.w1.weight"), "model.layers.0.mlp.experts.7.w1.weight");
  EXPECT_EQ(display_escape("héllo 模型 \xf0\x9f\x99\x82"), "héllo 模型 \xf0\x9f\x99\x82");
}

TEST(Display, InvalidUtf8IsHex) {
  EXPECT_EQ(display_escape("\xff"), "\\xff");
  EXPECT_EQ(display_escape("\xc3"), "\\xc3");              // truncated
  EXPECT_EQ(display_escape("\xc0\xaf"), "\\xc0\\xaf");     // overlong
  EXPECT_EQ(display_escape("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // surrogate
}

TEST(Display, FindingLineHasTheOneFormat) {
  Finding f{"ST_OFFSET_GAP", Severity::error, "dir/m.safetensors", "w\n1", 1234, "gap of 8 bytes"};
  EXPECT_EQ(finding_line("ckpt validate", f),
            "ckpt validate: error ST_OFFSET_GAP dir/m.safetensors@1234 [w\\n1]: gap of 8 bytes");
  EXPECT_EQ(error_line("ckpt dump", "USAGE", "", "missing TENSOR"), "ckpt dump: error USAGE -: missing TENSOR");
}

}  // namespace
}  // namespace ckpt
