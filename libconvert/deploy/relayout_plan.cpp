// ckpt relayout's plan (relayout_plan.h): re-block or promote each failing module class.
#include "deploy/relayout_plan.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "deploy/engine_rules.h"
#include "model/module_pattern.h"

namespace ckpt {

const char* relayout_action_name(RelayoutAction a) { return a == RelayoutAction::bf16 ? "bf16" : "reblock"; }

namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

std::string last_component(const std::string& s) {
  size_t dot = s.rfind('.');
  return dot == std::string::npos ? s : s.substr(dot + 1);
}

std::string block_text(uint64_t n, uint64_t k) { return std::to_string(n) + "x" + std::to_string(k); }

// Bytes of a weight's scale grid at block [n, k] (the element size from its present grid).
int64_t scale_bytes_at(const PreflightBlockWeight& w, uint64_t old_n, uint64_t old_k, uint64_t n, uint64_t k) {
  if (w.shape.size() < 2 || !w.scale_bytes) return 0;
  const uint64_t old_count = ceil_div(w.shape[0], old_n) * ceil_div(w.shape[1], old_k);
  const uint64_t elem = old_count ? w.scale_bytes / old_count : 4;
  return static_cast<int64_t>(ceil_div(w.shape[0], n) * ceil_div(w.shape[1], k) * elem);
}

// The exclusion-list entry of a promoted module: the module itself, or for a routed expert
// the layer's experts container (engines quantize a FusedMoE layer as one).
std::string excluded_entry(const std::string& module) {
  const size_t at = module.find(".experts.");
  if (at != std::string::npos && at + 9 < module.size() && module[at + 9] >= '0' && module[at + 9] <= '9')
    return module.substr(0, at + 8);
  return module;
}

// The failing sizes of one module class (its weights not promoted by --bf16).
struct Unit {
  std::set<uint64_t> rows, cols;
  uint64_t gn = 0, gk = 0;  // the largest block dividing the old block and every size
};

std::string sizes_text(const std::set<uint64_t>& s) {
  std::string out;
  for (auto v : s) out += std::string(out.empty() ? "" : "/") + std::to_string(v);
  return out;
}

// Why a unit cannot keep FP8 at block [n, k]: the sizes that do not divide.
std::string misfit(const Unit& u, uint64_t n, uint64_t k) {
  for (auto v : u.rows)
    if (v % n) return "per-rank rows " + std::to_string(v) + " are not a multiple of block_n " + std::to_string(n);
  for (auto v : u.cols)
    if (v % k) return "per-rank columns " + std::to_string(v) + " are not a multiple of block_k " + std::to_string(k);
  return "";
}

void default_min_block(const PreflightReport& r, RelayoutPlan& p) {
  uint64_t n = 1, k = 1;
  const auto& sizes = engine_rules().block_sizes;
  for (const auto& e : r.engines) {
    auto it = sizes.find(e);
    if (it == sizes.end()) continue;
    n = std::max(n, it->second.min_n);
    k = std::max(k, it->second.min_k);
  }
  if (!p.min_n) p.min_n = n;
  if (!p.min_k) p.min_k = k;
}

// The engines asked about that need block_n == block_k, with why and where (for the plan's note).
std::vector<std::string> square_engines(const PreflightReport& r) {
  std::vector<std::string> out;
  const auto& sizes = engine_rules().block_sizes;
  for (const auto& e : r.engines)
    if (auto it = sizes.find(e); it != sizes.end() && it->second.square)
      out.push_back(e + " needs a square block: " + it->second.square_why + " (" + it->second.square_citation.text() + ")");
  return out;
}

// Weights --bf16 names: each pattern must name a block-FP8 module; the whole class is
// promoted in the layers it names (an engine quantizes a merged or FusedMoE layer alike).
bool forced_units(const PreflightReport& r, const RelayoutRequest& q, RelayoutPlan& p,
                  std::set<std::pair<std::string, int64_t>>& forced, std::map<std::string, std::string>& why) {
  for (const auto& pattern : q.bf16) {
    if (auto bad = module_pattern_problem(pattern)) {
      p.problem = "--bf16 '" + pattern + "': " + *bad;
      return false;
    }
    bool any = false;
    for (const auto& w : r.block_weights)
      if (module_pattern_matches(pattern, w.module)) {
        any = true;
        forced.insert({w.unit, w.layer});
        why.emplace(w.unit, "--bf16 " + pattern);
      }
    if (!any) {
      p.problem = "--bf16 '" + pattern + "' names no block-FP8 module of this checkpoint (module names such as " +
                  (r.block_weights.empty() ? std::string("model.layers.0.mlp.down_proj") : r.block_weights.front().module) +
                  ")";
      return false;
    }
  }
  return true;
}

// Chooses the block and the units promoted for want of one. `units`: failing sizes per unit.
void choose_block(const RelayoutRequest& q, bool square, std::map<std::string, Unit>& units, RelayoutPlan& p,
                  std::map<std::string, std::string>& promoted) {
  for (auto& [name, u] : units) {
    u.gn = p.old_n;
    u.gk = p.old_k;
    for (auto v : u.rows) u.gn = std::gcd(u.gn, v);
    for (auto v : u.cols) u.gk = std::gcd(u.gk, v);
  }
  if (q.block_n) {  // --block: units it does not fit are promoted
    p.block_n = q.block_n;
    p.block_k = q.block_k;
    for (const auto& [name, u] : units)
      if (std::string why = misfit(u, p.block_n, p.block_k); !why.empty()) promoted.emplace(name, why + " (--block)");
    return;
  }
  for (const auto& [name, u] : units) {
    const uint64_t n = square ? std::gcd(u.gn, u.gk) : u.gn, k = square ? n : u.gk;
    if (n < p.min_n || k < p.min_k)
      promoted.emplace(name, "it would need block " + block_text(n, k) + " (" + misfit(u, p.old_n, p.old_k) +
                                 "), below --min-block " + block_text(p.min_n, p.min_k));
  }
  while (true) {
    p.block_n = p.old_n;
    p.block_k = p.old_k;
    const std::string* smallest = nullptr;
    for (const auto& [name, u] : units) {
      if (promoted.count(name)) continue;
      p.block_n = std::gcd(p.block_n, u.gn);
      p.block_k = std::gcd(p.block_k, u.gk);
      if (!smallest || u.gn * u.gk < units[*smallest].gn * units[*smallest].gk) smallest = &name;
    }
    if (square) p.block_n = p.block_k = std::gcd(p.block_n, p.block_k);
    if ((p.block_n >= p.min_n && p.block_k >= p.min_k) || !smallest) return;
    // Blocks that are not powers of two: together they can need less than each alone.
    promoted.emplace(*smallest, "with the other classes it would need a block below --min-block " +
                                    block_text(p.min_n, p.min_k));
  }
}

void add_notes(const PreflightReport& r, const std::map<std::string, Unit>& units,
               const std::map<std::string, std::string>& promoted, RelayoutPlan& p) {
  if (p.block_k != p.old_k) {
    std::string by;
    for (const auto& [name, u] : units)
      if (!promoted.count(name) && !u.cols.empty()) by += std::string(by.empty() ? "" : ", ") + name + " (" + sizes_text(u.cols) + " columns a rank)";
    std::string why = by.empty() ? "" : "block_n alone cannot fix " + by;
    if (p.block_k == p.block_n && p.block_n != p.old_n)
      for (const auto& s : square_engines(r)) why += std::string(why.empty() ? "" : "; ") + s;
    p.notes.push_back("block_k changes from " + std::to_string(p.old_k) + " to " + std::to_string(p.block_k) +
                      ": the engine quantizes activations in per-token groups of block_k, so those groups change "
                      "too" + (why.empty() ? "" : "; " + why));
  }
  if (!p.changes_block()) return;
  const auto& sizes = engine_rules().block_sizes;
  for (const auto& e : r.engines) {
    auto it = sizes.find(e);
    // full_n 0: the engine runs one kernel for every block, so no block is slower than another.
    if (it == sizes.end() || !it->second.full_n || (it->second.full_n == p.block_n && it->second.full_k == p.block_k))
      continue;
    p.notes.push_back(e + ": a " + block_text(p.block_n, p.block_k) + " block is not the " +
                      block_text(it->second.full_n, it->second.full_k) + " of its fastest kernels; it runs " +
                      it->second.fallback + " (" + it->second.source + ")");
  }
}

}  // namespace

RelayoutPlan plan_relayout(const PreflightReport& r, const RelayoutRequest& q) {
  RelayoutPlan p;
  p.old_n = r.block_n;
  p.old_k = r.block_k;
  p.min_n = q.min_n;
  p.min_k = q.min_k;
  if (!p.old_n || !p.old_k || r.block_weights.empty()) {
    p.problem = "no block-FP8 weights (quantization profile '" + r.quant_profile +
                "'): relayout re-blocks FP8 weights with 2-D block scales only";
    return p;
  }
  default_min_block(r, p);
  if (q.block_n && (p.old_n % q.block_n || p.old_k % q.block_k || !q.block_k)) {
    p.problem = "--block " + block_text(q.block_n, q.block_k) + " does not divide the checkpoint's block " +
                block_text(p.old_n, p.old_k) + " (a new block must lie inside one old block for the scales to stay exact)";
    return p;
  }
  std::set<std::pair<std::string, int64_t>> forced;
  std::map<std::string, std::string> forced_why;
  if (!forced_units(r, q, p, forced, forced_why)) return p;
  std::map<std::string, Unit> units;
  for (const auto& w : r.block_weights) {
    if (!w.fails() || forced.count({w.unit, w.layer})) continue;
    Unit& u = units[w.unit];
    u.rows.insert(w.rows.begin(), w.rows.end());
    u.cols.insert(w.cols.begin(), w.cols.end());
  }
  const bool square = !square_engines(r).empty();
  if (square && q.block_n && q.block_n != q.block_k) {
    p.problem = "--block " + block_text(q.block_n, q.block_k) + ": " + square_engines(r).front() +
                "; ask for a square block, or name the other engines with --engine";
    return p;
  }
  std::map<std::string, std::string> promoted;  // unit -> why
  choose_block(q, square, units, p, promoted);
  p.needed = !units.empty() || !forced.empty() || p.changes_block();

  // Each weight's fate, gathered into one choice per (unit, action).
  std::map<std::pair<std::string, RelayoutAction>, RelayoutChoice> choices;
  std::map<std::pair<std::string, RelayoutAction>, std::set<std::string>> names;
  std::set<std::string> excluded;
  uint64_t kept = 0;
  for (const auto& w : r.block_weights) {
    const bool bf16 = promoted.count(w.unit) || forced.count({w.unit, w.layer});
    const int64_t scale_growth = p.changes_block() ? scale_bytes_at(w, p.old_n, p.old_k, p.block_n, p.block_k) -
                                                         static_cast<int64_t>(w.scale_bytes)
                                                   : 0;
    if (bf16) {
      p.promoted.push_back(w.tensor);
      excluded.insert(excluded_entry(w.module));
      p.bf16_bytes += static_cast<int64_t>(w.weight_bytes) - static_cast<int64_t>(w.scale_bytes);
    } else {
      ++kept;
      p.scale_bytes += scale_growth;
      if (p.changes_block()) ++p.regridded;
    }
    if (!bf16 && !units.count(w.unit)) continue;  // re-gridded along, not a choice of its own
    const auto key = std::make_pair(w.unit, bf16 ? RelayoutAction::bf16 : RelayoutAction::reblock);
    RelayoutChoice& c = choices[key];
    c.unit = w.unit;
    c.action = key.second;
    if (w.layer >= 0) c.layers.push_back(w.layer);
    c.tensors += 1;
    c.bytes += bf16 ? static_cast<int64_t>(w.weight_bytes) - static_cast<int64_t>(w.scale_bytes) : scale_growth;
    names[key].insert(last_component(w.module));
    if (bf16) {
      auto f = promoted.find(w.unit);
      c.why = f != promoted.end() ? f->second : forced_why[w.unit];
    } else {
      const Unit& u = units[w.unit];
      c.why = "per-rank ";
      if (!u.rows.empty()) c.why += "rows " + sizes_text(u.rows);
      if (!u.rows.empty() && !u.cols.empty()) c.why += ", ";
      if (!u.cols.empty()) c.why += "columns " + sizes_text(u.cols);
      c.why += ": block " + block_text(p.block_n, p.block_k);
    }
  }
  if (kept == 0) {
    p.problem = "every block-FP8 weight would be promoted to BF16: that is `ckpt convert IN OUT` (exact, no FP8 left)";
    return p;
  }
  for (auto& [key, c] : choices) {
    for (const auto& n : names[key]) c.names += (c.names.empty() ? "" : ", ") + n;
    std::sort(c.layers.begin(), c.layers.end());
    c.layers.erase(std::unique(c.layers.begin(), c.layers.end()), c.layers.end());
    p.choices.push_back(std::move(c));
  }
  std::sort(p.promoted.begin(), p.promoted.end());
  p.excluded.assign(excluded.begin(), excluded.end());
  add_notes(r, units, promoted, p);
  return p;
}

std::string relayout_summary(const RelayoutPlan& p) {
  std::string out;
  if (p.changes_block())
    out = "re-block to " + block_text(p.block_n, p.block_k) + ", +" + std::to_string(p.scale_bytes) +
          " bytes of scales, FP8 bytes unchanged" +
          (p.block_k != p.old_k ? " (block_k changes: the engine's activation groups change too)" : "");
  std::string bf16;
  for (const auto& c : p.choices)
    if (c.action == RelayoutAction::bf16) bf16 += std::string(bf16.empty() ? "" : ", ") + c.unit + " (" + c.names + ")";
  if (!bf16.empty())
    out += std::string(out.empty() ? "" : "; ") + std::string("BF16 for ") + bf16 + ", +" + std::to_string(p.bf16_bytes) + " bytes";
  return out;
}

}  // namespace ckpt
