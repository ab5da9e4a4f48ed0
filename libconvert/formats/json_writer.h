// A small streaming JSON writer for reports and manifests: commas and nesting handled in
// one place, strings through the one JSON escape (core/display.h json_string_literal: any
// bytes give valid UTF-8 JSON). Output is compact and deterministic.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/display.h"

namespace ckpt {

class Findings;

class JsonWriter {
 public:
  // `safe` for reports and manifests; `exact` where the bytes must stay those of the
  // string (records a hash is computed over).
  explicit JsonWriter(JsonText text = JsonText::safe) : text_(text) {}
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);
  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(uint64_t v);
  JsonWriter& value(int64_t v);
  JsonWriter& value(int v) { return value(static_cast<int64_t>(v)); }
  JsonWriter& value(unsigned v) { return value(static_cast<uint64_t>(v)); }
  JsonWriter& value(double v);
  JsonWriter& value(bool v);
  JsonWriter& null();
  JsonWriter& raw(std::string_view json);  // an already-serialised JSON value
  const std::string& str() const { return out_; }

 private:
  void before_value();
  JsonText text_;
  std::string out_;
  std::vector<bool> has_items_;  // per open container
  bool after_key_ = false;
};

// "findings": [{code, severity, file, tensor, offset|null, message}, ...], the shape
// every report schema in schemas/ shares.
void write_findings_json(JsonWriter& w, const Findings& findings);

}  // namespace ckpt
