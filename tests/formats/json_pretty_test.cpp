#include "formats/json_pretty.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

#include "formats/json.h"
#include "test_util.h"

namespace ckpt {
namespace {

std::string read_text(const std::string& path) {
  auto bytes = test::read_file(path);
  return std::string(bytes.begin(), bytes.end());
}

// Deep equality that also requires the same key order: json_pretty promises to keep it.
bool same_json(simdjson::dom::element a, simdjson::dom::element b) {
  using T = simdjson::dom::element_type;
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case T::OBJECT: {
      simdjson::dom::object oa, ob;
      if (a.get_object().get(oa) || b.get_object().get(ob) || oa.size() != ob.size()) return false;
      auto ib = ob.begin();
      for (auto ma : oa) {
        auto mb = *ib;
        ++ib;
        if (ma.key != mb.key || !same_json(ma.value, mb.value)) return false;
      }
      return true;
    }
    case T::ARRAY: {
      simdjson::dom::array xa, xb;
      if (a.get_array().get(xa) || b.get_array().get(xb) || xa.size() != xb.size()) return false;
      auto ib = xb.begin();
      for (auto va : xa) {
        if (!same_json(va, *ib)) return false;
        ++ib;
      }
      return true;
    }
    case T::STRING: return a.get_string().value_unsafe() == b.get_string().value_unsafe();
    case T::INT64: return a.get_int64().value_unsafe() == b.get_int64().value_unsafe();
    case T::UINT64: return a.get_uint64().value_unsafe() == b.get_uint64().value_unsafe();
    case T::DOUBLE: {
      // Bit-exact: shortest round-trip digits must give back the very same double.
      double x = a.get_double().value_unsafe(), y = b.get_double().value_unsafe();
      return std::memcmp(&x, &y, sizeof x) == 0;
    }
    case T::BOOL: return a.get_bool().value_unsafe() == b.get_bool().value_unsafe();
    case T::NULL_VALUE: return true;
  }
  return false;
}

std::string pretty_of(std::string_view text, int indent = 2) {
  JsonDoc doc;
  std::string err;
  EXPECT_TRUE(doc.parse(text, err)) << err;
  return json_pretty(doc.root(), indent);
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
  }
  out += static_cast<char>(0x80 | (cp & 0x3F));
}

// Turns json.dumps(ensure_ascii=True) text into its ensure_ascii=False form: \uXXXX
// escapes of code points >= 0x80 (surrogate pairs joined) become raw UTF-8. Escapes
// below 0x80 stay, as Python keeps them escaped either way.
std::string unescape_non_ascii(std::string_view s) {
  std::string out;
  auto hex4 = [&](size_t at) { return static_cast<uint32_t>(std::stoul(std::string(s.substr(at, 4)), nullptr, 16)); };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (s[i + 1] != 'u' || hex4(i + 2) < 0x80) {  // keep any other escape as written
      out += s.substr(i, 2);
      ++i;
      continue;
    }
    uint32_t cp = hex4(i + 2);
    i += 5;
    if (cp >= 0xD800 && cp < 0xDC00 && s.substr(i + 1, 2) == "\\u") {
      cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4(i + 3) - 0xDC00);
      i += 6;
    }
    append_utf8(out, cp);
  }
  return out;
}

TEST(JsonPretty, FloatsLikePythonRepr) {
  // Expected strings are Python 3 repr() of the same values.
  const std::pair<double, const char*> cases[] = {
      {1e-06, "1e-06"},
      {0.02, "0.02"},
      {10000.0, "10000.0"},
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {1e15, "1000000000000000.0"},
      {1e16, "1e+16"},
      {1e-4, "0.0001"},  // plain to_chars would pick the shorter "1e-04"
      {1e-5, "1e-05"},
      {0.0001234, "0.0001234"},
      {123456789.123, "123456789.123"},
      {1.5e300, "1.5e+300"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {0.1 + 0.2, "0.30000000000000004"},
      {-3.0, "-3.0"},
      {1e22, "1e+22"},
      {6.671500159427524e-05, "6.671500159427524e-05"},
      {123456789012345678.0, "1.2345678901234568e+17"},
  };
  for (auto [x, want] : cases) EXPECT_EQ(json_python_float(x), want) << want;
  EXPECT_EQ(json_python_float(std::numeric_limits<double>::infinity()), "Infinity");
  EXPECT_EQ(json_python_float(-std::numeric_limits<double>::infinity()), "-Infinity");
  EXPECT_EQ(json_python_float(std::numeric_limits<double>::quiet_NaN()), "NaN");
}

TEST(JsonPretty, StringsEscapedMinimally) {
  // Python: json.dumps("\x00\x1f\x7f\b\f\n\r\t\"\\/é\u2028😀", ensure_ascii=False)
  std::string in = std::string("\x00\x1f\x7f\b\f\n\r\t\"\\/", 11) + "é\u2028😀";
  EXPECT_EQ(json_python_quote(in), "\"\\u0000\\u001f\x7f\\b\\f\\n\\r\\t\\\"\\\\/é\u2028😀\"");
}

TEST(JsonPretty, LayoutMatchesPythonIndent2) {
  // Expected text is Python's json.dumps(..., indent=2, ensure_ascii=False).
  std::string got = pretty_of(R"({"b":{},"a":[],"c":[{}, 1, -2, 2.5, true, false, null],"d":{"x":"é\u0007"}})");
  EXPECT_EQ(got,
            "{\n"
            "  \"b\": {},\n"
            "  \"a\": [],\n"
            "  \"c\": [\n"
            "    {},\n"
            "    1,\n"
            "    -2,\n"
            "    2.5,\n"
            "    true,\n"
            "    false,\n"
            "    null\n"
            "  ],\n"
            "  \"d\": {\n"
            "    \"x\": \"é\\u0007\"\n"
            "  }\n"
            "}");
  EXPECT_EQ(pretty_of("[]"), "[]");
  EXPECT_EQ(pretty_of("{}"), "{}");
  EXPECT_EQ(pretty_of("\"s\""), "\"s\"");
  EXPECT_EQ(pretty_of("[1,[2]]", 0), "[\n1,\n[\n2\n]\n]");  // Python's indent=0
  EXPECT_EQ(pretty_of("[1,[2]]", 4), "[\n    1,\n    [\n        2\n    ]\n]");
}

TEST(JsonPretty, IntegersExact) {
  EXPECT_EQ(pretty_of("[-9223372036854775808, 9223372036854775807, 18446744073709551615, 0]"),
            "[\n  -9223372036854775808,\n  9223372036854775807,\n  18446744073709551615,\n  0\n]");
  // Floats that hold integers stay floats, integers stay integers.
  EXPECT_EQ(pretty_of("[10000.0, 10000, 1e2, 1E-6]"), "[\n  10000.0,\n  10000,\n  100.0,\n  1e-06\n]");
}

TEST(JsonPretty, WriterBuildsEditedDocuments) {
  JsonDoc doc;
  std::string err;
  ASSERT_TRUE(doc.parse(R"({"keep":[1,2],"drop":0})", err)) << err;
  JsonPrettyWriter w;
  w.begin_object();
  w.key("keep");
  w.element(*json_get(doc.root(), "keep"));
  w.key("new");
  w.string_array({"a"});
  w.key("n");
  w.uint64(7);
  w.key("empty");
  w.string_array({});
  w.end_object();
  EXPECT_EQ(w.text(), "{\n  \"keep\": [\n    1,\n    2\n  ],\n  \"new\": [\n    \"a\"\n  ],\n  \"n\": 7,\n  \"empty\": []\n}");
}

TEST(JsonPretty, Dsv4TinyConfigByteForByte) {
  // oracle/dsv4-tiny/config.json was written by Python json.dumps(indent=2) without a
  // trailing newline, so the pretty text must reproduce it exactly.
  std::string text = read_text(test::fixture("oracle/dsv4-tiny/config.json"));
  EXPECT_EQ(pretty_of(text), text);
}

// Every JSON file of the oracle fixtures: the pretty text re-parses to the same DOM
// (same key order, bit-equal doubles). Files Python wrote with indent=2 must also come
// out byte for byte; oracle-report.json was written with ensure_ascii=True, so it is
// compared after undoing its \uXXXX escapes. tokenizer*.json and generation_config.json
// are compact one-line json.dumps output (", " / ": " separators, no indent): for them
// the layout differs by design and only the DOM is compared.
TEST(JsonPretty, RoundTripsEveryOracleJson) {
  int files = 0, byte_exact = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(test::fixture("oracle"))) {
    if (!entry.is_regular_file() || entry.path().extension() != ".json") continue;
    SCOPED_TRACE(entry.path().string());
    ++files;
    std::string text = read_text(entry.path().string());
    JsonDoc in, out;
    std::string err;
    ASSERT_TRUE(in.parse(text, err)) << err;
    std::string pretty = json_pretty(in.root());
    ASSERT_TRUE(out.parse(pretty, err)) << err;
    EXPECT_TRUE(same_json(in.root(), out.root()));
    if (text.find('\n') != std::string::npos) {
      EXPECT_EQ(pretty, unescape_non_ascii(text));
      ++byte_exact;
    }
  }
  EXPECT_GE(files, 20);
  EXPECT_GE(byte_exact, 10);
}

}  // namespace
}  // namespace ckpt
