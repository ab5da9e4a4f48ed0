// A parsed JSON document (simdjson DOM) that owns its buffer, plus small typed
// accessors. Used for config.json, the index, profiles and manifests; never
// include this from a .cu file (simdjson does not compile under nvcc).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

namespace ckpt {

// The deepest nesting of arrays and objects any JSON input may have: every JSON walk
// (DOM documents, the on-demand readers of headers and the index) refuses deeper input
// with simdjson::DEPTH_ERROR ("...too deep..."), so no walk can exhaust the stack.
inline constexpr size_t kJsonMaxDepth = 256;

class JsonDoc {
 public:
  // Parses `text`. On failure returns false and sets `error` to simdjson's message, or to
  // json_duplicate_key's when an object names a key twice: simdjson would answer lookups with
  // the first value while Python's json (transformers, vLLM, the reference scripts) keeps the
  // last, so a file with a duplicate key means two things and is refused, never read.
  bool parse(std::string_view text, std::string& error);
  simdjson::dom::element root() const { return root_; }

 private:
  std::unique_ptr<simdjson::dom::parser> parser_;
  simdjson::dom::element root_;
};

// The first key that some object of `root` names twice, depth first in document order, as
// "duplicate key \"K\" in PATH" (PATH: the JSON Pointer of the object, "/" for the root;
// each occurrence is a value a consumer may read), or nullopt. JsonDoc::parse runs it.
std::optional<std::string> json_duplicate_key(simdjson::dom::element root);

// Where the top-level value that starts at text[0] (after leading whitespace) ends:
// the index one past its closing bracket, found by a string-aware bracket scan.
// nullopt when the brackets never balance. Lets callers reject trailing content.
std::optional<size_t> json_value_end(std::string_view text);

// On-demand parsing skips the values it is not asked for without checking them, so
// {"weight_map": {...}, "x": tru} would be accepted where every other JSON reader fails.
// Readers walk the members they ignore with this: SUCCESS when `value` (recursively) is
// valid JSON. `depth_left` bounds the recursion: nesting deeper than that is DEPTH_ERROR
// (callers inside a document pass kJsonMaxDepth minus the depth of `value`, so that what
// this walk accepts a DOM parse with kJsonMaxDepth accepts too).
simdjson::error_code json_validate_value(simdjson::ondemand::value value, size_t depth_left = kJsonMaxDepth);
// "...: The JSON document was too deep..." for DEPTH_ERROR, simdjson's message otherwise.
std::string json_error_text(simdjson::error_code e);

// Typed lookups; nullopt when the key is missing or of another type.
std::optional<simdjson::dom::element> json_get(simdjson::dom::element obj, std::string_view key);
std::optional<int64_t> json_int(simdjson::dom::element obj, std::string_view key);
std::optional<std::string> json_string(simdjson::dom::element obj, std::string_view key);
std::optional<std::vector<int64_t>> json_int_array(simdjson::dom::element obj, std::string_view key);
// Compact JSON text of a value (for reports that echo config values).
std::string json_to_string(simdjson::dom::element e);
// Escapes a string as a JSON string literal, with quotes, the way Python's json.dumps
// (ensure_ascii=False) does: \" \\ \b \f \n \r \t, other controls as \u00XX, UTF-8 raw;
// a byte that is not UTF-8 as the text \xHH (json_string_literal, JsonText::exact).
std::string json_quote(std::string_view s);

}  // namespace ckpt
