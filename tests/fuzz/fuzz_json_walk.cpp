// libFuzzer target: the JSON walkers every input goes through, on arbitrary text.
//   - the on-demand walk json_validate_value (what the safetensors header, the index and
//     their unknown members are checked with), with its depth limit kJsonMaxDepth;
//   - the DOM parse (JsonDoc: config.json, manifests, profiles, reports) and the DOM
//     walks on it (json_pretty, json_to_string, json_get and friends);
//   - the same text as an unknown member inside a safetensors tensor entry and as an
//     unknown member of model.safetensors.index.json.
// Invariants: no crash or stack overflow at any nesting; a walk that accepted the text
// (the DOM parse) saw no nesting deeper than the limit; the pretty printer's output parses.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/json.h"
#include "formats/json_pretty.h"
#include "formats/safetensors.h"
#include "fuzz_util.h"

using namespace ckpt;

namespace {

// Deepest bracket nesting outside strings (the bound json_validate_value enforces).
size_t max_nesting(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') deepest = std::max(deepest, ++depth);
    else if ((c == ']' || c == '}') && depth > 0) --depth;
  }
  return deepest;
}

void ondemand_walk(std::string_view text) {
  namespace od = simdjson::ondemand;
  // Wrapped in an array so that any value (scalars too) is a walkable element.
  simdjson::padded_string padded("[" + std::string(text) + "]");
  od::parser parser;
  od::document doc;
  if (parser.iterate(padded).get(doc)) return;
  od::array arr;
  if (doc.get_array().get(arr)) return;
  for (auto element : arr) {
    od::value v;
    if (element.get(v)) return;
    // The wrapped text need not split where the original does, so only "no crash, no
    // stack overflow" is checked here; the depth invariant is the DOM walk's below.
    (void)json_validate_value(v);
  }
}

void dom_walk(std::string_view text) {
  JsonDoc doc;
  std::string error;
  if (!doc.parse(text, error)) {
    fuzz::fuzz_check(!error.empty(), "DOM parse failed without a message");
    return;
  }
  fuzz::fuzz_check(max_nesting(text) <= kJsonMaxDepth, "DOM parse accepted nesting past the limit");
  const std::string pretty = json_pretty(doc.root());
  JsonDoc again;
  fuzz::fuzz_check(again.parse(pretty, error), "json_pretty wrote text the DOM parser refuses");
  (void)json_to_string(doc.root());
  (void)json_get(doc.root(), "weight_map");
  (void)json_int(doc.root(), "total_size");
  (void)json_string(doc.root(), "model_type");
  (void)json_int_array(doc.root(), "weight_block_size");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 20)) return 0;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  ondemand_walk(text);
  dom_walk(text);
  (void)json_value_end(text);

  // As an unknown member of a tensor entry (safetensors header) and of the index.
  std::string header = "{\"t\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0],\"x\":" + std::string(text) + "}}";
  std::vector<uint8_t> file(8 + header.size());
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(header.begin(), header.end(), file.begin() + 8);
  Findings sf;
  (void)read_safetensors_header(file, "fuzz.safetensors", StReadOptions{}, sf);

  CheckpointIndex index;
  Findings inf;
  parse_index_text("{\"weight_map\":{},\"x\":" + std::string(text) + "}", index, inf);
  if (!index.parsed) fuzz::fuzz_check(inf.has_errors(), "unparsed index without an error finding");
  return 0;
}
