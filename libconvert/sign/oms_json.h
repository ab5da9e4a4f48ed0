// Member lookups for the OMS documents (bundle, statement, provenance) read as hostile
// input: each says what was wrong, a member missing or of another type, in one sentence
// that names the object (`where`) and the member ("WHERE.KEY is not a string").
#pragma once

#include <string>
#include <string_view>

#include "formats/json.h"

namespace ckpt::oms {

struct JsonFields {
  // The missing-member sentence is WHERE + missing + "\"KEY\"": the bundle's and statement's
  // readers say " has no ", the provenance's " has no member " (as their reports always have).
  std::string_view missing;

  bool field(simdjson::dom::element obj, std::string_view key, const std::string& where, simdjson::dom::element& out,
             std::string& error) const;
  bool text(simdjson::dom::element obj, std::string_view key, const std::string& where, std::string& out,
            std::string& error) const;
  bool object(simdjson::dom::element obj, std::string_view key, const std::string& where, simdjson::dom::element& out,
              std::string& error) const;
  bool array(simdjson::dom::element obj, std::string_view key, const std::string& where, simdjson::dom::array& out,
             std::string& error) const;
};

}  // namespace ckpt::oms
