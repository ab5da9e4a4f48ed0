#include "formats/json_pretty.h"

#include "core/display.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ckpt {

namespace {

// Shortest round-trip digits of |x| (> 0, finite) and the decimal point position:
// x = 0.DIGITS * 10^decpt. std::to_chars in scientific form gives exactly the shortest
// digits; only the layout rule differs from Python, so it is reapplied below.
void shortest_digits(double x, std::string& digits, int& decpt) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string_view s(buf, static_cast<size_t>(res.ptr - buf));  // "d.ddde+XX" or "de-XX"
  size_t e = s.find('e');
  digits.clear();
  for (char c : s.substr(0, e))
    if (c != '.') digits += c;
  int exp10 = 0;
  std::string_view ex = s.substr(e + 1);
  if (!ex.empty() && ex[0] == '+') ex.remove_prefix(1);  // from_chars rejects a '+'
  std::from_chars(ex.data(), ex.data() + ex.size(), exp10);
  decpt = exp10 + 1;
}

// Python's float_repr_style 'short' ('r' mode): exponent form when decpt <= -4 or > 16,
// at least two exponent digits with an explicit sign; fixed form gets ".0" if integral.
std::string layout_like_python(const std::string& digits, int decpt) {
  const int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    std::string out(1, digits[0]);
    if (n > 1) {  // two appends: `"." + digits.substr(1)` trips GCC 12's -Wrestrict at -O3 (bug 105329)
      out += '.';
      out.append(digits, 1);
    }
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", decpt - 1 < 0 ? '-' : '+', std::abs(decpt - 1));
    return out + ebuf;
  }
  if (decpt <= 0) return "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  if (decpt >= n) return digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
  return digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
}

}  // namespace

std::string json_python_float(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x < 0 ? "-Infinity" : "Infinity";
  std::string sign = std::signbit(x) ? "-" : "";
  if (x == 0) return sign + "0.0";
  std::string digits;
  int decpt = 0;
  shortest_digits(std::fabs(x), digits, decpt);
  return sign + layout_like_python(digits, decpt);
}

std::string json_python_quote(std::string_view s) { return json_string_literal(s, JsonText::exact); }

void JsonPrettyWriter::newline_indent() {
  out_ += '\n';
  out_.append(has_items_.size() * static_cast<size_t>(indent_), ' ');
}

void JsonPrettyWriter::before_value() {
  if (after_key_) {  // the value of an object member follows its key on the same line
    after_key_ = false;
    return;
  }
  if (has_items_.empty()) return;  // the top-level value
  if (has_items_.back()) out_ += ',';
  has_items_.back() = true;
  newline_indent();
}

void JsonPrettyWriter::open(char bracket) {
  before_value();
  out_ += bracket;
  has_items_.push_back(false);
}

void JsonPrettyWriter::close(char bracket) {
  bool had_items = has_items_.back();
  has_items_.pop_back();
  if (had_items) newline_indent();
  out_ += bracket;
}

void JsonPrettyWriter::key(std::string_view k) {
  before_value();
  out_ += json_python_quote(k);
  out_ += ": ";
  after_key_ = true;
}

void JsonPrettyWriter::string(std::string_view s) {
  before_value();
  out_ += json_python_quote(s);
}

void JsonPrettyWriter::int64(int64_t v) {
  before_value();
  out_ += std::to_string(v);
}

void JsonPrettyWriter::uint64(uint64_t v) {
  before_value();
  out_ += std::to_string(v);
}

void JsonPrettyWriter::float64(double v) {
  before_value();
  out_ += json_python_float(v);
}

void JsonPrettyWriter::boolean(bool v) {
  before_value();
  out_ += v ? "true" : "false";
}

void JsonPrettyWriter::null() {
  before_value();
  out_ += "null";
}

void JsonPrettyWriter::string_array(const std::vector<std::string>& items) {
  begin_array();
  for (const auto& s : items) string(s);
  end_array();
}

void JsonPrettyWriter::element(simdjson::dom::element e) {
  using T = simdjson::dom::element_type;
  switch (e.type()) {
    case T::OBJECT: {
      simdjson::dom::object obj;
      if (e.get_object().get(obj)) return;  // cannot fail: the type was just checked
      begin_object();
      for (auto member : obj) {
        key(member.key);
        element(member.value);
      }
      end_object();
      return;
    }
    case T::ARRAY: {
      simdjson::dom::array arr;
      if (e.get_array().get(arr)) return;
      begin_array();
      for (auto item : arr) element(item);
      end_array();
      return;
    }
    case T::STRING: string(e.get_string().value_unsafe()); return;
    case T::INT64: int64(e.get_int64().value_unsafe()); return;
    case T::UINT64: uint64(e.get_uint64().value_unsafe()); return;
    case T::DOUBLE: float64(e.get_double().value_unsafe()); return;
    case T::BOOL: boolean(e.get_bool().value_unsafe()); return;
    case T::NULL_VALUE: null(); return;
  }
}

std::string json_pretty(simdjson::dom::element e, int indent) {
  JsonPrettyWriter w(indent);
  w.element(e);
  return w.text();
}

}  // namespace ckpt
