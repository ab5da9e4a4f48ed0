// core/display.h: the one escaping of untrusted strings in human output and the one
// error line format.
#include "core/display.h"

#include <gtest/gtest.h>

#include "formats/json.h"
#include "formats/json_writer.h"

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

TEST(Display, BidiControlsAndInvisibleFormatCharactersAreEscaped) {
  // U+202E would print "...thgiew" reversed and reorder the rest of the log line.
  EXPECT_EQ(display_escape("w\u202Ethgiew: OK"), "w\\u202ethgiew: OK");
  for (const char* bidi : {"\u202A", "\u202B", "\u202C", "\u202D", "\u2066", "\u2067", "\u2068", "\u2069",
                           "\u200E", "\u200F", "\u061C"})
    EXPECT_EQ(display_escape(bidi).substr(0, 2), "\\u") << display_escape(bidi);
  EXPECT_EQ(display_escape("a\u200Bb\u200Cc\u200Dd\u2060e\u2064f\uFEFFg\u00ADh"),
            "a\\u200bb\\u200cc\\u200dd\\u2060e\\u2064f\\ufeffg\\u00adh");
  EXPECT_EQ(display_escape("x\u2028y"), "x\\u2028y");                   // line separator
  EXPECT_EQ(display_escape("tag\U000E0041"), "tag\\U000e0041");          // a Cf above U+FFFF
  EXPECT_EQ(display_escape("\u202F\u00A0\u05D0"), "\u202F\u00A0\u05D0");  // visible spaces and Hebrew kept
}

TEST(JsonWriterEscape, BytesThatAreNotUtf8GiveValidJsonThatReadsBackToTheSameBytes) {
  const std::string name = std::string("a\xff\xc3(b\\x41\\", 9) + "\\\\";
  JsonWriter w;
  w.begin_object().key(name).value(name).end_object();
  JsonDoc doc;
  std::string error;
  ASSERT_TRUE(doc.parse(w.str(), error)) << error << ": " << w.str();
  simdjson::dom::object obj;
  ASSERT_FALSE(doc.root().get_object().get(obj));
  for (auto m : obj) {
    EXPECT_EQ(std::string(m.key), "a\\xff\\xc3(b\\x5cx41\\\\");  // the text the bytes are written as
    EXPECT_EQ(json_unescape_bytes(m.key), name);
    EXPECT_EQ(json_unescape_bytes(std::string(m.value.get_string().value_unsafe())), name);
  }
  // Valid UTF-8 without "\\xHH" is written as before; safe text escapes U+202E, exact keeps it.
  EXPECT_EQ(json_string_literal("h\u00e9 \\n"), "\"h\u00e9 \\\\n\"");
  EXPECT_EQ(json_string_literal("\u202E", JsonText::safe), "\"\\u202e\"");
  EXPECT_EQ(json_string_literal("\u202E", JsonText::exact), "\"\u202E\"");
  EXPECT_EQ(json_string_literal("\\x41\xff", JsonText::exact), "\"\\\\x41\\\\xff\"");  // valid text as Python writes it
}

TEST(Display, FindingLineHasTheOneFormat) {
  Finding f{"ST_OFFSET_GAP", Severity::error, "dir/m.safetensors", "w\n1", 1234, "gap of 8 bytes"};
  EXPECT_EQ(finding_line("ckpt validate", f),
            "ckpt validate: error ST_OFFSET_GAP dir/m.safetensors@1234 [w\\n1]: gap of 8 bytes");
  EXPECT_EQ(error_line("ckpt dump", "USAGE", "", "missing TENSOR"), "ckpt dump: error USAGE -: missing TENSOR");
}

}  // namespace
}  // namespace ckpt
