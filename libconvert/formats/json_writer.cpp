#include "formats/json_writer.h"

#include <cmath>
#include <cstdio>

#include "core/findings.h"

namespace ckpt {

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_items_.empty()) {
    if (has_items_.back()) out_ += ',';
    has_items_.back() = true;
  }
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  has_items_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  out_ += '}';
  has_items_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  has_items_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  out_ += ']';
  has_items_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view k) {
  before_value();
  out_ += json_string_literal(k, text_);
  out_ += ':';
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view s) {
  before_value();
  out_ += json_string_literal(s, text_);
  return *this;
}

JsonWriter& JsonWriter::value(uint64_t v) {
  before_value();
  out_ += std::to_string(v);
  return *this;
}

JsonWriter& JsonWriter::value(int64_t v) {
  before_value();
  out_ += std::to_string(v);
  return *this;
}

JsonWriter& JsonWriter::value(double v) {
  before_value();
  if (!std::isfinite(v)) {
    out_ += "null";
    return *this;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  out_ += buf;
  return *this;
}

JsonWriter& JsonWriter::value(bool v) {
  before_value();
  out_ += v ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  return *this;
}

JsonWriter& JsonWriter::raw(std::string_view json) {
  before_value();
  out_ += json;
  return *this;
}

void write_findings_json(JsonWriter& w, const Findings& findings) {
  w.key("findings").begin_array();
  for (const auto& f : findings.items()) {
    w.begin_object().key("code").value(f.code).key("severity").value(severity_name(f.severity));
    w.key("file").value(f.file).key("tensor").value(f.tensor).key("offset");
    if (f.offset)
      w.value(*f.offset);
    else
      w.null();
    w.key("message").value(f.message).end_object();
  }
  w.end_array();
  // At most kMaxFindingsPerCode findings of one code are listed; the rest are counted
  // here (only when there are any, so ordinary reports are unchanged).
  const auto omitted = findings.omitted();
  if (omitted.empty()) return;
  w.key("findings_omitted").begin_array();
  for (const auto& o : omitted)
    w.begin_object().key("code").value(o.code).key("severity").value(severity_name(o.severity)).key("count").value(o.count).end_object();
  w.end_array();
}

}  // namespace ckpt
