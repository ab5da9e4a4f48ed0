#include "profiles/qwen3next.h"

#include <algorithm>

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <unordered_map>

#include "core/checked_math.h"
#include "core/ggml_types.h"
#include "formats/json.h"
#include "profiles/embedded.h"

namespace ckpt {

namespace {

// The profile's parameters, read from schemas/profiles/qwen3next.json.
struct Q3nProfile {
  std::string detect_key, detect_value;
  std::string kv_block_count, kv_interval, kv_expert_count;
  std::string ssm_a_suffix;
  int32_t ssm_a_type = kGgmlF32;
  std::string gate, up, down, gate_up;  // expert tensor suffixes after "blk.N."
};

std::optional<std::string> json_path_string(simdjson::dom::element root, std::string_view obj, std::string_view key) {
  auto o = json_get(root, obj);
  return o ? json_string(*o, key) : std::nullopt;
}

std::optional<Q3nProfile> parse_profile(std::string_view text) {
  JsonDoc doc;
  std::string err;
  if (!doc.parse(text, err)) return std::nullopt;
  auto root = doc.root();
  Q3nProfile p;
  auto detect_key = json_path_string(root, "detect", "key");
  auto detect_value = json_path_string(root, "detect", "equals");
  auto blocks = json_path_string(root, "kv", "block_count");
  auto interval = json_path_string(root, "kv", "full_attention_interval");
  auto experts = json_path_string(root, "kv", "expert_count");
  auto suffix = json_path_string(root, "ssm_a", "suffix");
  auto type = json_path_string(root, "ssm_a", "type");
  auto gate = json_path_string(root, "experts", "gate");
  auto up = json_path_string(root, "experts", "up");
  auto down = json_path_string(root, "experts", "down");
  auto gate_up = json_path_string(root, "experts", "gate_up");
  if (!detect_key || !detect_value || !blocks || !interval || !experts || !suffix || !type || !gate || !up ||
      !down || !gate_up) {
    return std::nullopt;
  }
  auto type_id = ggml_type_from_name(*type);
  if (!type_id) return std::nullopt;
  return Q3nProfile{*detect_key, *detect_value, *blocks, *interval, *experts, *suffix, *type_id,
                    *gate, *up, *down, *gate_up};
}

// Parsed once: the embedded text cannot change while the program runs.
const std::optional<Q3nProfile>& profile() {
  static const std::optional<Q3nProfile> kProfile = [] {
    for (const EmbeddedProfile& e : embedded_profiles()) {
      if (e.name == "qwen3next") return parse_profile(e.json);
    }
    return std::optional<Q3nProfile>{};
  }();
  return kProfile;
}

std::string num(int64_t v) { return std::to_string(v); }

struct Context {
  const GgufFile& g;
  const MappedFile& file;
  const std::string& display;
  Findings& f;
  const Q3nProfile& p;
  std::unordered_map<std::string_view, const GgufTensorInfo*> by_name;
};

// A required positive integer KV; reports it missing or invalid. `max` bounds loops over it.
std::optional<int64_t> required_kv(Context& c, const std::string& key, int64_t max) {
  const GgufKV* kv = c.g.find_kv(key);
  if (kv == nullptr) {
    c.f.error("Q3N_KV_MISSING", c.display, "", std::nullopt, key + " is missing; a qwen3next GGUF must set it");
    return std::nullopt;
  }
  auto v = c.g.get_int(key);
  if (!v || *v <= 0 || *v > max) {
    c.f.error("Q3N_KV_INVALID", c.display, "", kv->offset,
              key + " is " + kv->display() + ", expected an integer between 1 and " + num(max));
    return std::nullopt;
  }
  return v;
}

// Reads [begin, begin + nbytes) in bounded chunks (pread) and hands each float to
// `fn(index, value)`; fn returns false to stop. A failed read is an IO_READ finding.
template <class Fn>
void for_each_f32(Context& c, const GgufTensorInfo& t, uint64_t begin, Fn fn) {
  constexpr uint64_t kChunk = uint64_t{1} << 20;  // a multiple of 4
  std::vector<uint8_t> buf;
  IoError err;
  for (uint64_t done = 0; done < t.nbytes; done += kChunk) {
    const uint64_t n = std::min(kChunk, t.nbytes - done);
    if (!c.file.read_range(begin + done, n, buf, err)) {
      c.f.error("IO_READ", c.display, t.name, begin + done, "cannot read " + t.name + ": " + err.message);
      return;
    }
    for (uint64_t i = 0; i < n / 4; ++i) {
      float v;
      std::memcpy(&v, buf.data() + i * 4, 4);
      if (!fn(done / 4 + i, v)) return;
    }
  }
}

// Counts the elements that are not finite and strictly negative (-0.0 and NaN fail `x < 0`).
void check_ssm_a_values(Context& c, const GgufTensorInfo& t) {
  auto begin = checked_add(c.g.data_start, t.offset);
  auto end = begin ? checked_add(*begin, t.nbytes) : std::nullopt;
  if (!end || *end > c.file.size() || t.nbytes % 4 != 0) return;  // the reader already reported it
  const uint64_t n = t.nbytes / 4;
  uint64_t bad = 0, first = 0;
  float first_value = 0;
  for_each_f32(c, t, *begin, [&](uint64_t i, float v) {
    if (std::isfinite(v) && v < 0.0f) return true;
    if (bad++ == 0) { first = i; first_value = v; }
    return true;
  });
  if (bad == 0) return;
  char value[32];
  std::snprintf(value, sizeof value, "%g", static_cast<double>(first_value));
  c.f.error("Q3N_SSM_A_NOT_NEGATIVE", c.display, t.name, *begin + first * 4,
            t.name + " has " + std::to_string(bad) + " of " + std::to_string(n) +
                " elements that are not finite and strictly negative (first: element " + std::to_string(first) +
                " = " + value + "); ssm_a stores -exp(A_log), so every element must be < 0");
}

// `ckpt repack-experts --a-log fix` replaces blk.N.ssm_a by blk.N.A_log = log(-ssm_a) and
// marks the file; such a layer is whole when its A_log is F32 and finite everywhere.
bool check_recovered_a_log(Context& c, int64_t il) {
  if (c.g.get_string("ckptkit.repack.a_log") != "fixed") return false;
  auto it = c.by_name.find("blk." + num(il) + ".A_log");
  if (it == c.by_name.end()) return false;
  const GgufTensorInfo& t = *it->second;
  auto begin = checked_add(c.g.data_start, t.offset);
  auto end = begin ? checked_add(*begin, t.nbytes) : std::nullopt;
  if (t.type != c.p.ssm_a_type || !end || *end > c.file.size() || t.nbytes % 4 != 0) {
    c.f.error("Q3N_SSM_A_TYPE", c.display, t.name, t.info_offset, t.name + " must be F32 and inside the file");
    return true;
  }
  for_each_f32(c, t, *begin, [&](uint64_t i, float v) {
    if (std::isfinite(v)) return true;
    c.f.error("Q3N_SSM_A_NOT_NEGATIVE", c.display, t.name, *begin + i * 4,
              t.name + " element " + std::to_string(i) + " is not finite; A_log = log(-ssm_a) must be");
    return false;
  });
  return true;
}

void check_ssm_a(Context& c, int64_t block_count, int64_t interval) {
  for (int64_t il = 0; il < block_count; ++il) {
    if ((il + 1) % interval == 0) continue;  // a full-attention layer
    const std::string name = "blk." + num(il) + "." + c.p.ssm_a_suffix;
    auto it = c.by_name.find(name);
    if (it == c.by_name.end()) {
      if (check_recovered_a_log(c, il)) continue;
      c.f.error("Q3N_SSM_A_MISSING", c.display, name, std::nullopt,
                name + " is missing; layer " + num(il) + " is recurrent ((il + 1) % " + num(interval) +
                    " != 0) and needs it");
      continue;
    }
    const GgufTensorInfo& t = *it->second;
    if (t.type != c.p.ssm_a_type) {
      c.f.error("Q3N_SSM_A_TYPE", c.display, name, t.info_offset,
                name + " has type " + ggml_type_name(t.type) + ", expected " + ggml_type_name(c.p.ssm_a_type));
      continue;
    }
    check_ssm_a_values(c, t);
  }
}

struct BlockExperts {
  const GgufTensorInfo* gate = nullptr;
  const GgufTensorInfo* up = nullptr;
  const GgufTensorInfo* down = nullptr;
  const GgufTensorInfo* gate_up = nullptr;
};

// "blk.12.ffn_up_exps.weight" -> (12, "ffn_up_exps.weight").
std::optional<std::pair<uint64_t, std::string_view>> split_block_name(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  size_t i = kPrefix.size();
  uint64_t block = 0;
  const size_t digits_start = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i - digits_start < 9) {
    block = block * 10 + static_cast<uint64_t>(name[i] - '0');
    ++i;
  }
  if (i == digits_start || i >= name.size() || name[i] != '.') return std::nullopt;
  return std::make_pair(block, name.substr(i + 1));
}

std::string shape_of(const GgufTensorInfo& t) {
  return shape_to_string(std::span<const uint64_t>(t.ne, t.n_dims));
}

void shape_error(Context& c, const GgufTensorInfo& t, const std::string& why) {
  c.f.error("Q3N_EXPERT_SHAPE", c.display, t.name, t.info_offset, t.name + " has ne " + shape_of(t) + ": " + why);
}

// Each expert tensor on its own: 3-D with one slice per expert.
bool check_expert_tensor(Context& c, const GgufTensorInfo& t, std::optional<int64_t> expert_count) {
  if (t.n_dims != 3) {
    shape_error(c, t, "expected 3 dims {cols, rows, n_expert}, found " + std::to_string(t.n_dims));
    return false;
  }
  if (expert_count && t.ne[2] != static_cast<uint64_t>(*expert_count)) {
    c.f.error("Q3N_EXPERT_COUNT", c.display, t.name, t.info_offset,
              t.name + " has ne[2] = " + std::to_string(t.ne[2]) + " experts, expected " + c.p.kv_expert_count +
                  " = " + num(*expert_count));
  }
  return true;
}

// gate/up {n_embd, n_ff, E}, down {n_ff, n_embd, E}, fused gate_up {n_embd, 2 n_ff, E}.
void check_block_experts(Context& c, const BlockExperts& b) {
  if (b.gate && b.up && (b.gate->ne[0] != b.up->ne[0] || b.gate->ne[1] != b.up->ne[1] || b.gate->ne[2] != b.up->ne[2])) {
    shape_error(c, *b.up, "expected the same shape as " + b.gate->name + " " + shape_of(*b.gate));
  }
  if (b.gate && b.down && (b.down->ne[0] != b.gate->ne[1] || b.down->ne[1] != b.gate->ne[0])) {
    shape_error(c, *b.down, "expected ne0 = " + std::to_string(b.gate->ne[1]) + " (n_ff, ne1 of " + b.gate->name +
                               ") and ne1 = " + std::to_string(b.gate->ne[0]) + " (n_embd)");
  }
  if (b.gate_up && b.down && (b.gate_up->ne[1] != 2 * b.down->ne[0] || b.gate_up->ne[0] != b.down->ne[1])) {
    shape_error(c, *b.gate_up, "expected ne0 = " + std::to_string(b.down->ne[1]) + " (n_embd) and ne1 = 2 * " +
                                  std::to_string(b.down->ne[0]) + " (2 n_ff from " + b.down->name + ")");
  }
}

void check_experts(Context& c, std::optional<int64_t> expert_count) {
  std::map<uint64_t, BlockExperts> blocks;
  for (const GgufTensorInfo& t : c.g.tensors) {
    auto split = split_block_name(t.name);
    if (!split) continue;
    const GgufTensorInfo** slot = split->second == c.p.gate      ? &blocks[split->first].gate
                                  : split->second == c.p.up      ? &blocks[split->first].up
                                  : split->second == c.p.down    ? &blocks[split->first].down
                                  : split->second == c.p.gate_up ? &blocks[split->first].gate_up
                                                                 : nullptr;
    if (slot != nullptr && check_expert_tensor(c, t, expert_count) && *slot == nullptr) *slot = &t;
  }
  for (const auto& [block, experts] : blocks) check_block_experts(c, experts);
}

}  // namespace

bool is_qwen3next(const GgufFile& g) {
  const auto& p = profile();
  return p && g.get_string(p->detect_key) == p->detect_value;
}

void check_qwen3next(const GgufFile& g, const MappedFile& file, const std::string& display, Findings& f) {
  const auto& p = profile();
  if (!p) {
    f.error("Q3N_PROFILE_INVALID", display, "", std::nullopt,
            "the embedded profile schemas/profiles/qwen3next.json is missing or lacks a required field");
    return;
  }
  Context c{g, file, display, f, *p, {}};
  for (const GgufTensorInfo& t : g.tensors) c.by_name.emplace(t.name, &t);
  // Every recurrent block holds at least one tensor, so a block count above the tensor
  // count is corrupt (and would make the ssm_a loop run for 2^63 iterations).
  const int64_t max_blocks = static_cast<int64_t>(g.tensors.size());
  auto block_count = required_kv(c, p->kv_block_count, std::max<int64_t>(max_blocks, 1));
  auto interval = required_kv(c, p->kv_interval, INT64_MAX);
  auto expert_count = required_kv(c, p->kv_expert_count, INT64_MAX);
  if (block_count && interval) check_ssm_a(c, *block_count, *interval);
  check_experts(c, expert_count);
}

}  // namespace ckpt
