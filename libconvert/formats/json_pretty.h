// JSON text in the exact layout Python's json.dumps(obj, indent=2, ensure_ascii=False)
// produces. Checkpoint configs are written by Python tools, so a converter that rewrites
// config.json should emit the same bytes for the members it does not touch: diffs then
// show only the real edits, and a pretty-printed untouched file equals its source.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

namespace ckpt {

// Serialises a DOM value: object keys in their original order, `indent` spaces per
// level (a negative indent acts as 0, like Python), "[]" / "{}" for empty containers,
// integers exact, doubles as Python's repr. No trailing newline (json.dumps adds none).
std::string json_pretty(simdjson::dom::element e, int indent = 2);

// A double as Python's float repr: shortest round-trip digits; fixed notation while the
// decimal exponent is in [-4, 16), else "1e-06" / "1e+16" style; integral values keep
// ".0" so they re-parse as floats. Non-finite values give NaN / Infinity / -Infinity
// (what json.dumps writes; simdjson cannot read them back).
std::string json_python_float(double x);

// A string literal escaped like json.dumps(ensure_ascii=False): only '"', '\\' and
// control characters below 0x20 are escaped (\b \f \n \r \t short, the rest \u00xx);
// bytes that are not UTF-8 (which Python's str cannot hold) get the one reversible byte
// escape of core/display.h json_string_literal (JsonText::exact).
std::string json_python_quote(std::string_view s);

// Streaming writer with the same layout, for building edited documents: walk the parsed
// input, copy members with element(), and substitute or append the ones being changed.
// Callers must nest calls correctly (key() only directly inside an object); the writer
// does not validate that.
class JsonPrettyWriter {
 public:
  explicit JsonPrettyWriter(int indent = 2) : indent_(indent < 0 ? 0 : indent) {}

  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }
  void key(std::string_view k);

  void string(std::string_view s);
  void int64(int64_t v);
  void uint64(uint64_t v);
  void float64(double v);
  void boolean(bool v);
  void null();
  void string_array(const std::vector<std::string>& items);
  // Copies a whole DOM value (recursively).
  void element(simdjson::dom::element e);

  const std::string& text() const { return out_; }

 private:
  void open(char bracket);
  void close(char bracket);
  // Separator and newline before an array item or an object key; nothing after a key.
  void before_value();
  void newline_indent();

  std::string out_;
  int indent_;
  // One flag per open container: has it received an item yet (decides "{}" vs "{\n...}").
  std::vector<bool> has_items_;
  bool after_key_ = false;
};

}  // namespace ckpt
