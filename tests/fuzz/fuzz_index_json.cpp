// libFuzzer target: the text of model.safetensors.index.json parsed by parse_index_text,
// the function open_checkpoint calls on the file (limit: kMaxIndexBytes = 512 MiB), then
// the shard-name check select_shards applies to every weight_map value. An index accepted
// without error findings must be valid JSON for a full parser too.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>

#include <simdjson.h>

#include "formats/checkpoint.h"
#include "formats/json.h"
#include "fuzz_util.h"

using namespace ckpt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  CheckpointIndex index;
  Findings findings;
  parse_index_text(text, index, findings);
  fuzz::fuzz_check(index.present, "index not marked present");
  if (!index.parsed) fuzz::fuzz_check(findings.has_errors(), "unparsed index without an error finding");
  if (!findings.has_errors()) {
    // Accepted without an error: every other JSON reader (Python's json, the DOM parser)
    // must be able to read it too. Syntax only: a key named twice inside a member the index
    // does not read (e.g. an unknown object) means nothing to ckptkit, while JsonDoc, the
    // reader of JSON read for meaning, refuses any duplicate by design.
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    fuzz::fuzz_check(parser.parse(text.data(), text.size(), true).get(root) == simdjson::SUCCESS,
                     "index accepted without errors but it is not valid JSON");
  }
  std::set<std::string> names;
  for (const auto& [tensor, shard] : index.weight_map) {
    fuzz::fuzz_check(names.insert(tensor).second, "weight_map kept a duplicate tensor name");
    if (is_plain_file_name(shard)) {
      fuzz::fuzz_check(shard.find('/') == std::string::npos && shard != ".." && shard != ".",
                       "is_plain_file_name accepted a path");
    }
  }
  return 0;
}
