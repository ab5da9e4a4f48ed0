// The partition model (partition_model.h): module classes from schemas/deploy/partitions.json,
// each rank's share of a tensor from its split.
#include "deploy/partition_model.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <stdexcept>

#include "deploy/embedded_rules.h"
#include "formats/json.h"

namespace ckpt {

const char* split_name(Split s) {
  switch (s) {
    case Split::column: return "column";
    case Split::column_kv: return "column_kv";
    case Split::row: return "row";
    case Split::replicated: return "replicated";
    case Split::vocab: return "vocab";
    case Split::expert_column: return "expert_column";
    case Split::expert_row: return "expert_row";
    case Split::expert_fused_column: return "expert_fused_column";
    case Split::expert_fused_row: return "expert_fused_row";
    case Split::fused_qkv: return "fused_qkv";
    case Split::fused_gate_up: return "fused_gate_up";
    case Split::none: return "none";
  }
  return "none";
}

bool split_is_expert(Split s) {
  return s == Split::expert_column || s == Split::expert_row || s == Split::expert_fused_column ||
         s == Split::expert_fused_row;
}

bool split_cuts_rows(Split s) {
  return s == Split::column || s == Split::column_kv || s == Split::vocab || s == Split::expert_column ||
         s == Split::expert_fused_column || s == Split::fused_qkv || s == Split::fused_gate_up;
}

namespace {

Split split_from_name(std::string_view n) {
  for (Split s : {Split::column, Split::column_kv, Split::row, Split::replicated, Split::vocab, Split::expert_column,
                  Split::expert_row, Split::expert_fused_column, Split::expert_fused_row, Split::fused_qkv,
                  Split::fused_gate_up})
    if (n == split_name(s)) return s;
  return Split::none;
}

// Parses schemas/deploy/partitions.json. The file is ours and embedded: a malformed one is a
// build defect, caught by the tests (an empty list here).
std::vector<ArchitectureRules> parse_families() {
  std::vector<ArchitectureRules> out;
  JsonDoc doc;
  std::string error;
  if (!doc.parse(deploy_rules_text("partitions"), error)) return out;
  simdjson::dom::array families;
  if (doc.root()["families"].get(families) != simdjson::SUCCESS) return out;
  for (auto fam : families) {
    ArchitectureRules a;
    a.family = json_string(fam, "name").value_or("");
    a.source = json_string(fam, "source").value_or("");
    simdjson::dom::array cites;
    if (fam["sources"].get(cites) == simdjson::SUCCESS)
      for (auto c : cites) a.citations.push_back(citation_from_json(c));
    simdjson::dom::array types, modules;
    if (fam["model_types"].get(types) == simdjson::SUCCESS)
      for (auto t : types) {
        std::string_view s;
        if (t.get(s) == simdjson::SUCCESS) a.model_types.emplace_back(s);
      }
    if (fam["modules"].get(modules) == simdjson::SUCCESS)
      for (auto m : modules) {
        ModuleRule r;
        r.match = json_string(m, "match").value_or("");
        r.cls = json_string(m, "class").value_or("");
        r.split = split_from_name(json_string(m, "split").value_or(""));
        r.merged = json_string(m, "merged").value_or("");
        bool whole = false;
        auto wg = json_get(m, "whole_groups");
        r.whole_groups = wg && wg->get(whole) == simdjson::SUCCESS && whole;
        a.modules.push_back(std::move(r));
      }
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<std::string_view> components(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    out.push_back(s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return out;
}

bool matches_tail(std::string_view pattern, std::string_view module) {
  const auto p = components(pattern), m = components(module);
  if (p.size() > m.size()) return false;
  const size_t off = m.size() - p.size();
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != "*" && p[i] != m[off + i]) return false;
  return true;
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

}  // namespace

const std::vector<ArchitectureRules>& architecture_families() {
  static const std::vector<ArchitectureRules> kFamilies = parse_families();
  return kFamilies;
}

const ArchitectureRules* architecture_for(std::string_view model_type) {
  for (const auto& a : architecture_families())
    for (const auto& t : a.model_types)
      if (t == model_type) return &a;
  return nullptr;
}

const ModuleRule* classify_module(const ArchitectureRules& arch, std::string_view module) {
  for (const auto& r : arch.modules)
    if (matches_tail(r.match, module)) return &r;
  return nullptr;
}

std::string module_of(std::string_view tensor, std::string* role) {
  struct Suffix {
    std::string_view text, role;
  };
  // Longest first: ".weight_scale_inv" before ".weight".
  static constexpr Suffix kSuffixes[] = {
      {".weight_scale_inv", "scale"}, {".weight_scale", "scale"}, {".input_scale", "scale"}, {"_scales", "scale"},
      {".scale", "scale"},           {".weight", "weight"},      {"_blocks", "weight"},     {".bias", "bias"},
      {"_bias", "bias"},
  };
  for (const auto& s : kSuffixes)
    if (tensor.size() > s.text.size() && tensor.substr(tensor.size() - s.text.size()) == s.text) {
      if (role) *role = s.role;
      return std::string(tensor.substr(0, tensor.size() - s.text.size()));
    }
  if (role) role->clear();
  // gpt-oss keeps unquantized fused experts without a suffix (mlp.experts.gate_up_proj).
  return std::string(tensor);
}

int64_t layer_of(std::string_view tensor) {
  for (std::string_view key : {"layers.", "blk."}) {
    size_t at = tensor.find(key);
    if (at == std::string_view::npos || (at > 0 && tensor[at - 1] != '.')) continue;
    const char* begin = tensor.data() + at + key.size();
    const char* end = tensor.data() + tensor.size();
    int64_t n = -1;
    auto [p, ec] = std::from_chars(begin, end, n);
    if (ec == std::errc() && p != begin && (p == end || *p == '.')) return n;
  }
  return -1;
}

namespace {

// One part of `size` rows split by `degree`.
PartSlice split_part(std::string part, uint64_t begin, uint64_t size, uint32_t degree, std::string& problem) {
  PartSlice p{std::move(part), begin, size, size, 1};
  if (degree <= 1) return p;
  if (size % degree != 0) {
    problem = (p.part.empty() ? std::string("rows ") : p.part + " rows ") + std::to_string(size) +
              " do not divide by " + std::to_string(degree);
    p.per_rank = ceil_div(size, degree);
  } else {
    p.per_rank = size / degree;
  }
  return p;
}

// K or V rows: one head per rank (replicated TP / KV-heads times) when KV heads < TP.
PartSlice split_kv(std::string part, uint64_t begin, uint64_t size, uint32_t degree, const HeadGeometry& h,
                   std::string& problem) {
  if (degree > 1 && h.head_dim > 0 && size % h.head_dim == 0) {
    const uint64_t kv = size / h.head_dim;
    if (kv < degree) {
      if (degree % kv != 0) problem = "tp " + std::to_string(degree) + " is not a multiple of " + std::to_string(kv) + " KV heads";
      return PartSlice{std::move(part), begin, size, h.head_dim, degree / std::max<uint64_t>(kv, 1)};
    }
  }
  return split_part(std::move(part), begin, size, degree, problem);
}

}  // namespace

TensorPartition partition_tensor(Split split, const std::vector<uint64_t>& shape, const Deployment& d,
                                 const HeadGeometry& heads, uint64_t fused_gate_up_intermediate) {
  TensorPartition t;
  t.split = split;
  const bool fused_experts = split == Split::expert_fused_column || split == Split::expert_fused_row;
  std::vector<uint64_t> s = shape;
  if (fused_experts && !s.empty()) {
    t.experts = s.front();
    s.erase(s.begin());
  }
  t.rows = s.empty() ? 1 : s[0];
  t.cols = 1;
  for (size_t i = 1; i < s.size(); ++i) t.cols *= s[i];
  switch (split) {
    case Split::column:
    case Split::vocab:
    case Split::column_kv:
    case Split::row:
    case Split::fused_qkv:
    case Split::fused_gate_up: t.degree = std::max<uint32_t>(d.tp, 1); break;
    case Split::expert_column:
    case Split::expert_row:
    case Split::expert_fused_column:
    case Split::expert_fused_row: t.degree = d.expert_tp(); break;
    case Split::replicated:
    case Split::none: t.degree = 1; break;
  }
  if (split_is_expert(split) && d.ep > 1) {
    // Expert counts come from the tensor (fused) or the caller (per-expert names).
    if (t.experts) t.experts_per_rank = ceil_div(t.experts, d.ep);
  } else if (t.experts) {
    t.experts_per_rank = t.experts;
  }
  t.rank_rows = t.rows;
  t.rank_cols = t.cols;
  if (split == Split::fused_qkv && heads.head_dim > 0) {
    const uint64_t q = heads.heads * heads.head_dim, kv = heads.kv_heads * heads.head_dim;
    if (q + 2 * kv == t.rows) {
      t.parts.push_back(split_part("q", 0, q, t.degree, t.problem));
      t.parts.push_back(split_kv("k", q, kv, t.degree, heads, t.problem));
      t.parts.push_back(split_kv("v", q + kv, kv, t.degree, heads, t.problem));
    }
  } else if (split == Split::fused_gate_up || (split == Split::expert_fused_column && fused_gate_up_intermediate > 0)) {
    const uint64_t i = fused_gate_up_intermediate ? fused_gate_up_intermediate : t.rows / 2;
    if (2 * i == t.rows) {
      t.parts.push_back(split_part("gate", 0, i, t.degree, t.problem));
      t.parts.push_back(split_part("up", i, i, t.degree, t.problem));
    }
  }
  if (t.parts.empty() && split_cuts_rows(split)) {
    if (split == Split::column_kv)
      t.parts.push_back(split_kv("", 0, t.rows, t.degree, heads, t.problem));
    else
      t.parts.push_back(split_part("", 0, t.rows, t.degree, t.problem));
  }
  if (!t.parts.empty()) {
    t.rank_rows = 0;
    for (const auto& p : t.parts) t.rank_rows += p.per_rank;
  }
  if (split == Split::row || split == Split::expert_row || split == Split::expert_fused_row) {
    // The input dimension of a [rows, cols...] weight: fused MXFP4 experts keep it in their
    // last two dims (blocks x 16 bytes); the split is of the logical columns.
    if (t.degree > 1) {
      if (t.cols % t.degree != 0) t.problem = "columns " + std::to_string(t.cols) + " do not divide by " + std::to_string(t.degree);
      t.rank_cols = ceil_div(t.cols, t.degree);
    }
  }
  return t;
}

}  // namespace ckpt
