#include "formats/json.h"

#include "core/display.h"

#include <algorithm>
#include <cstdio>
#include <unordered_set>

namespace ckpt {

std::string json_error_text(simdjson::error_code e) {
  if (e == simdjson::DEPTH_ERROR)
    return "nested too deep (more than " + std::to_string(kJsonMaxDepth) + " levels of arrays and objects)";
  return simdjson::error_message(e);
}

bool JsonDoc::parse(std::string_view text, std::string& error) {
  parser_ = std::make_unique<simdjson::dom::parser>();
  // The depth limit is set by allocate(); later growth keeps max_depth().
  if (auto e = parser_->allocate(std::max<size_t>(text.size(), 64), kJsonMaxDepth)) {
    error = json_error_text(e);
    return false;
  }
  simdjson::padded_string padded(text);
  auto r = parser_->parse(padded);
  if (r.error()) {
    error = json_error_text(r.error());
    return false;
  }
  root_ = r.value_unsafe();
  if (auto duplicate = json_duplicate_key(root_)) {
    error = *duplicate;
    return false;
  }
  return true;
}

namespace {

// "/a/b~1c/0": RFC 6901 escaping of one path token (~ -> ~0, / -> ~1).
void append_pointer_token(std::string& path, std::string_view token) {
  path += '/';
  for (char c : token) {
    if (c == '~') path += "~0";
    else if (c == '/') path += "~1";
    else path += c;
  }
}

// Depth first; the DOM's depth is bounded by kJsonMaxDepth, so the recursion is too.
std::optional<std::string> find_duplicate(simdjson::dom::element e, std::string& path) {
  simdjson::dom::object obj;
  simdjson::dom::array arr;
  if (!e.get_object().get(obj)) {
    std::unordered_set<std::string_view> seen;
    for (auto member : obj)
      if (!seen.insert(member.key).second)
        return "duplicate key " + json_quote(member.key) + " in " + (path.empty() ? std::string("/") : path) +
               " (a JSON reader would keep one of its values and drop the other; refusing to guess which)";
    for (auto member : obj) {
      const size_t len = path.size();
      append_pointer_token(path, member.key);
      if (auto d = find_duplicate(member.value, path)) return d;
      path.resize(len);
    }
  } else if (!e.get_array().get(arr)) {
    size_t i = 0;
    for (auto item : arr) {
      const size_t len = path.size();
      path += '/' + std::to_string(i++);
      if (auto d = find_duplicate(item, path)) return d;
      path.resize(len);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> json_duplicate_key(simdjson::dom::element root) {
  std::string path;
  return find_duplicate(root, path);
}

simdjson::error_code json_validate_value(simdjson::ondemand::value value, size_t depth_left) {
  namespace od = simdjson::ondemand;
  od::json_type type;
  if (auto e = value.type().get(type)) return e;
  if ((type == od::json_type::object || type == od::json_type::array) && depth_left == 0)
    return simdjson::DEPTH_ERROR;
  switch (type) {
    case od::json_type::object: {
      od::object obj;
      if (auto e = value.get_object().get(obj)) return e;
      for (auto field : obj) {
        std::string_view key;
        if (auto e = field.unescaped_key().get(key)) return e;
        od::value v;
        if (auto e = field.value().get(v)) return e;
        if (auto e = json_validate_value(v, depth_left - 1)) return e;
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::array: {
      od::array arr;
      if (auto e = value.get_array().get(arr)) return e;
      for (auto element : arr) {
        od::value v;
        if (auto e = element.get(v)) return e;
        if (auto e = json_validate_value(v, depth_left - 1)) return e;
      }
      return simdjson::SUCCESS;
    }
    case od::json_type::string: {
      std::string_view sv;
      return value.get_string().get(sv);
    }
    case od::json_type::number: {
      od::number n;
      return value.get_number().get(n);
    }
    case od::json_type::boolean: {
      bool b = false;
      return value.get_bool().get(b);
    }
    case od::json_type::null: {
      bool is_null = false;
      if (auto e = value.is_null().get(is_null)) return e;
      return is_null ? simdjson::SUCCESS : simdjson::N_ATOM_ERROR;
    }
  }
  return simdjson::INCORRECT_TYPE;
}

std::optional<size_t> json_value_end(std::string_view text) {
  size_t depth = 0;
  bool in_string = false, escaped = false, started = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
      started = true;
    } else if (c == '}' || c == ']') {
      if (depth == 0) return std::nullopt;
      if (--depth == 0) return i + 1;
    } else if (!started && c != ' ' && c != '\t' && c != '\r' && c != '\n') {
      return std::nullopt;  // a scalar root: not an object or array
    }
  }
  return std::nullopt;
}

std::optional<simdjson::dom::element> json_get(simdjson::dom::element obj, std::string_view key) {
  simdjson::dom::object o;
  if (obj.get_object().get(o)) return std::nullopt;
  simdjson::dom::element value;
  if (o[key].get(value)) return std::nullopt;
  return value;
}

std::optional<int64_t> json_int(simdjson::dom::element obj, std::string_view key) {
  auto v = json_get(obj, key);
  if (!v) return std::nullopt;
  if (v->is_int64()) return v->get_int64().value_unsafe();
  if (v->is_uint64()) {
    uint64_t u = v->get_uint64().value_unsafe();
    if (u <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(u);
  }
  return std::nullopt;
}

std::optional<std::string> json_string(simdjson::dom::element obj, std::string_view key) {
  auto v = json_get(obj, key);
  if (!v || !v->is_string()) return std::nullopt;
  return std::string(v->get_string().value_unsafe());
}

std::optional<std::vector<int64_t>> json_int_array(simdjson::dom::element obj, std::string_view key) {
  auto v = json_get(obj, key);
  if (!v || !v->is_array()) return std::nullopt;
  simdjson::dom::array arr;
  if (v->get_array().get(arr)) return std::nullopt;
  std::vector<int64_t> out;
  for (auto e : arr) {
    if (!e.is_int64()) return std::nullopt;
    out.push_back(e.get_int64().value_unsafe());
  }
  return out;
}

std::string json_to_string(simdjson::dom::element e) { return simdjson::minify(e); }

std::string json_quote(std::string_view s) {
  // The one string escape (core/display.h): valid UTF-8 exactly as Python's json.dumps
  // writes it, a byte that is not UTF-8 as the text \xHH, so the output is always JSON.
  return json_string_literal(s, JsonText::exact);
}

}  // namespace ckpt
