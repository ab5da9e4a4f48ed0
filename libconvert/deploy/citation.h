// A rule's citation of the engine code it mirrors (schemas/deploy/*.json "sources"): the
// repository, the revision read, the file and its lines, the function. A rule that states
// the absence of code (no such kernel, no such quantizer) names the place searched instead.
#pragma once

#include <string>

#include <simdjson.h>

namespace ckpt {

struct Citation {
  std::string repo, revision, path;
  std::string lines;     // "634-640" or "57": empty only for an absence
  std::string function;  // the function or class at those lines
  std::string note;
  std::string absent;    // what is not there ("" for a citation of code)

  bool has_line() const;  // lines is N or N-M with 0 < N <= M
  // "path:lines function (note)", or "path: absent" for an absence.
  std::string text() const;
};

// A citation from its JSON object; a plain string (an old-style source) becomes the note.
Citation citation_from_json(simdjson::dom::element e);

}  // namespace ckpt
