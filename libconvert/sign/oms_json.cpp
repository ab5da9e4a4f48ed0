// Member lookups for the OMS documents (sign/oms_json.h).
#include "sign/oms_json.h"

namespace ckpt::oms {

namespace dom = simdjson::dom;

bool JsonFields::field(dom::element obj, std::string_view key, const std::string& where, dom::element& out,
                       std::string& error) const {
  auto v = json_get(obj, key);
  if (!v) {
    error = where + std::string(missing) + "\"" + std::string(key) + "\"";
    return false;
  }
  out = *v;
  return true;
}

bool JsonFields::text(dom::element obj, std::string_view key, const std::string& where, std::string& out,
                      std::string& error) const {
  dom::element v;
  if (!field(obj, key, where, v, error)) return false;
  std::string_view s;
  if (v.get_string().get(s) != simdjson::SUCCESS) {
    error = where + "." + std::string(key) + " is not a string";
    return false;
  }
  out = std::string(s);
  return true;
}

bool JsonFields::object(dom::element obj, std::string_view key, const std::string& where, dom::element& out,
                        std::string& error) const {
  if (!field(obj, key, where, out, error)) return false;
  if (!out.is_object()) {
    error = where + "." + std::string(key) + " is not an object";
    return false;
  }
  return true;
}

bool JsonFields::array(dom::element obj, std::string_view key, const std::string& where, dom::array& out,
                       std::string& error) const {
  dom::element v;
  if (!field(obj, key, where, v, error)) return false;
  if (v.get_array().get(out) != simdjson::SUCCESS) {
    error = where + "." + std::string(key) + " is not an array";
    return false;
  }
  return true;
}

}  // namespace ckpt::oms
