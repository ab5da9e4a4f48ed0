// Reads schemas/deploy/engines.json (engine_rules.h).
#include "deploy/engine_rules.h"

#include <algorithm>

#include "deploy/embedded_rules.h"
#include "formats/json.h"

namespace ckpt {

namespace {

std::vector<std::string> strings(simdjson::dom::element e) {
  std::vector<std::string> out;
  simdjson::dom::array a;
  if (e.get(a) != simdjson::SUCCESS) return out;
  for (auto v : a) {
    std::string_view s;
    if (v.get(s) == simdjson::SUCCESS) out.emplace_back(s);
  }
  return out;
}

std::map<std::string, std::string> string_map(simdjson::dom::element e) {
  std::map<std::string, std::string> out;
  simdjson::dom::object o;
  if (e.get(o) != simdjson::SUCCESS) return out;
  for (auto [k, v] : o) {
    std::string_view s;
    if (v.get(s) == simdjson::SUCCESS) out.emplace(std::string(k), std::string(s));
  }
  return out;
}

BlockBehaviour behaviour_of(const std::string& s) {
  return s == "refuse" ? BlockBehaviour::refuse : s == "silent" ? BlockBehaviour::silent : BlockBehaviour::ok;
}

// Each engine's citation ("sources": engine -> citation object), and its text.
void read_sources(simdjson::dom::element e, std::map<std::string, Citation>& citations,
                  std::map<std::string, std::string>& texts) {
  simdjson::dom::object o;
  if (e.get(o) != simdjson::SUCCESS) return;
  for (auto [engine, value] : o) {
    Citation c = citation_from_json(value);
    texts[std::string(engine)] = c.text();
    citations[std::string(engine)] = std::move(c);
  }
}

KernelEntry kernel_entry(const std::string& s) {
  KernelEntry k;
  if (s == "native") k.support = KernelSupport::native;
  else if (s == "refused") k.support = KernelSupport::refused;
  else if (s.rfind("fallback", 0) == 0) {
    k.support = KernelSupport::fallback;
    k.via = s.size() > 9 ? s.substr(9) : "";
  }
  return k;
}

EngineRules parse_rules() {
  EngineRules r;
  JsonDoc doc;
  std::string error;
  if (!doc.parse(deploy_rules_text("engines"), error)) return r;
  auto root = doc.root();
  r.engines = strings(root["engines"]);
  simdjson::dom::array rules;
  if (root["block_rules"].get(rules) == simdjson::SUCCESS)
    for (auto e : rules) {
      BlockRule b;
      b.id = json_string(e, "id").value_or("");
      b.applies = json_string(e, "applies").value_or("");
      b.dimension = json_string(e, "dimension").value_or("");
      b.message = json_string(e, "message").value_or("");
      for (auto& [engine, what] : string_map(e["behaviour"])) b.behaviour[engine] = behaviour_of(what);
      read_sources(e["sources"], b.citations, b.sources);
      r.block_rules.push_back(std::move(b));
    }
  simdjson::dom::object sizes;
  if (root["block_sizes"]["engines"].get(sizes) == simdjson::SUCCESS)
    for (auto [engine, e] : sizes) {
      BlockSizes b;
      const simdjson::dom::element entry = e;  // a lambda may not capture a structured binding (clang 14)
      auto pair = [&](const char* key, uint64_t& n, uint64_t& k) {
        simdjson::dom::array a;
        if (entry[key].get(a) != simdjson::SUCCESS || a.size() != 2) return;
        int64_t x = 0, y = 0;
        if (a.at(0).get(x) == simdjson::SUCCESS && a.at(1).get(y) == simdjson::SUCCESS && x > 0 && y > 0) {
          n = static_cast<uint64_t>(x);
          k = static_cast<uint64_t>(y);
        }
      };
      pair("min_block", b.min_n, b.min_k);
      pair("full_speed", b.full_n, b.full_k);
      b.fallback = json_string(e, "fallback").value_or("");
      simdjson::dom::element src;
      if (e["source"].get(src) == simdjson::SUCCESS) b.citation = citation_from_json(src);
      b.source = b.citation.text();
      simdjson::dom::array also;
      if (e["also"].get(also) == simdjson::SUCCESS)
        for (auto c : also) b.also.push_back(citation_from_json(c));
      simdjson::dom::element square;
      if (e["square_block"].get(square) == simdjson::SUCCESS) {
        b.square = true;
        b.square_why = json_string(square, "why").value_or("");
        if (square["source"].get(src) == simdjson::SUCCESS) b.square_citation = citation_from_json(src);
      }
      r.block_sizes[std::string(engine)] = std::move(b);
    }
  simdjson::dom::object padding;
  if (root["mxfp4_moe_padding"].get(padding) == simdjson::SUCCESS)
    for (auto [key, value] : padding) {
      uint64_t group = 0;
      if (key == "group") {
        if (value.get(group) == simdjson::SUCCESS && group > 0) r.mx_group = group;
        continue;
      }
      MxPadding p;
      simdjson::dom::object multiples;
      if (value["multiples"].get(multiples) == simdjson::SUCCESS)
        for (auto [backend, m] : multiples) {
          uint64_t v = 0;
          if (m.get(v) == simdjson::SUCCESS && v > 0) p.multiples.emplace_back(std::string(backend), v);
        }
      simdjson::dom::element src;
      if (value["source"].get(src) == simdjson::SUCCESS) p.source = citation_from_json(src);
      r.mx_padding[std::string(key)] = std::move(p);
    }
  simdjson::dom::element kernels;
  if (root["kernels"].get(kernels) != simdjson::SUCCESS) return r;
  r.architectures = strings(kernels["architectures"]);
  simdjson::dom::array formats;
  if (kernels["formats"].get(formats) == simdjson::SUCCESS)
    for (auto f : formats) {
      FormatKernels k;
      k.format = json_string(f, "format").value_or("");
      k.title = json_string(f, "title").value_or("");
      k.instead = json_string(f, "instead").value_or("");
      read_sources(f["sources"], k.citations, k.sources);
      simdjson::dom::object engines;
      if (f["engines"].get(engines) == simdjson::SUCCESS)
        for (auto [engine, archs] : engines)
          for (auto& [arch, what] : string_map(archs)) k.engines[std::string(engine)][arch] = kernel_entry(what);
      r.formats.push_back(std::move(k));
    }
  return r;
}

}  // namespace

const BlockRule* EngineRules::block_rule(const std::string& applies) const {
  for (const auto& b : block_rules)
    if (b.applies == applies) return &b;
  return nullptr;
}

const FormatKernels* EngineRules::kernels(const std::string& format) const {
  for (const auto& f : formats)
    if (f.format == format) return &f;
  return nullptr;
}

bool EngineRules::knows_engine(const std::string& e) const {
  return std::find(engines.begin(), engines.end(), e) != engines.end();
}

bool EngineRules::knows_architecture(const std::string& a) const {
  return std::find(architectures.begin(), architectures.end(), a) != architectures.end();
}

const EngineRules& engine_rules() {
  static const EngineRules kRules = parse_rules();
  return kRules;
}

const char* kernel_support_name(KernelSupport s) {
  switch (s) {
    case KernelSupport::native: return "native";
    case KernelSupport::fallback: return "fallback";
    case KernelSupport::refused: return "refused";
    case KernelSupport::unknown: return "unknown";
  }
  return "unknown";
}

const std::string& deploy_rules_text(const std::string& name) {
  static const std::string kEmpty;
  for (const auto& r : embedded_deploy_rules())
    if (r.name == name) return r.json;
  return kEmpty;
}

}  // namespace ckpt
