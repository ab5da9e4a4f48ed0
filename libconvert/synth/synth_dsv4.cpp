#include "synth/synth_dsv4.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/findings.h"
#include "formats/json.h"
#include "formats/safetensors_writer.h"
#include "io/atomic_file.h"
#include "io/output_lock.h"
#include "profiles/deepseek_v4.h"

namespace ckpt {
namespace {

// Numbers shared by both sizes are the 0731 values of deepseek-v4.md §6; the tiny
// config only shrinks dimensions and the layer count.
struct ConfigShape {
  int vocab, hidden, moe_inter, layers, heads, head_dim, q_lora, o_lora, o_groups, experts, per_tok, hash_layers,
      hc_mult, index_heads, index_head_dim, markov_rank, noise_token;
  std::string ratios, targets;
};

std::string ratios_0731() {
  std::string r = "0, 0";
  for (int i = 0; i < 20; ++i) r += ", 4, 128";
  return r + ", 4, 0, 0, 0";  // layer 42 at ratio 4, then the three DSpark stages
}

std::string config_text(const ConfigShape& c) {
  auto kv = [](const char* key, auto value) { return std::string("  \"") + key + "\": " + std::to_string(value) + ",\n"; };
  std::string s = "{\n";
  s += "  \"architectures\": [\"DeepseekV4ForCausalLM\"],\n  \"model_type\": \"deepseek_v4\",\n";
  s += "  \"transformers_version\": \"4.57.1\",\n  \"torch_dtype\": \"bfloat16\",\n";
  s += "  \"bos_token_id\": 0,\n  \"eos_token_id\": 1,\n  \"expert_dtype\": \"fp4\",\n";
  s += "  \"attention_bias\": false,\n  \"attention_dropout\": 0.0,\n  \"initializer_range\": 0.02,\n";
  s += "  \"use_cache\": true,\n  \"tie_word_embeddings\": false,\n";
  s += kv("vocab_size", c.vocab) + kv("hidden_size", c.hidden) + kv("moe_intermediate_size", c.moe_inter);
  s += kv("num_hidden_layers", c.layers) + kv("num_attention_heads", c.heads) + kv("num_key_value_heads", 1);
  s += kv("head_dim", c.head_dim) + kv("qk_rope_head_dim", 64) + kv("q_lora_rank", c.q_lora);
  s += kv("o_lora_rank", c.o_lora) + kv("o_groups", c.o_groups);
  s += "  \"hidden_act\": \"silu\",\n  \"swiglu_limit\": 10.0,\n  \"rms_norm_eps\": 1e-06,\n";
  s += "  \"max_position_embeddings\": 1048576,\n  \"rope_theta\": 10000,\n";
  s += "  \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 16, \"beta_fast\": 32, \"beta_slow\": 1, "
       "\"original_max_position_embeddings\": 65536},\n";
  s += kv("n_routed_experts", c.experts) + kv("n_shared_experts", 1) + kv("num_experts_per_tok", c.per_tok);
  s += "  \"scoring_func\": \"sqrtsoftplus\",\n  \"topk_method\": \"noaux_tc\",\n  \"norm_topk_prob\": true,\n";
  s += "  \"routed_scaling_factor\": 1.5,\n  \"sliding_window\": 128,\n  \"compress_rope_theta\": 160000,\n";
  s += kv("num_hash_layers", c.hash_layers);
  s += "  \"compress_ratios\": [" + c.ratios + "],\n";
  s += kv("index_n_heads", c.index_heads) + kv("index_head_dim", c.index_head_dim) + kv("index_topk", 512);
  s += kv("hc_mult", c.hc_mult) + kv("hc_sinkhorn_iters", 20);
  s += "  \"hc_eps\": 1e-06,\n  \"num_nextn_predict_layers\": 1,\n";
  s += kv("dspark_block_size", 5) + kv("dspark_noise_token_id", c.noise_token);
  s += "  \"dspark_target_layer_ids\": [" + c.targets + "],\n";
  s += kv("dspark_markov_rank", c.markov_rank);
  s += "  \"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", "
       "\"scale_fmt\": \"ue8m0\", \"weight_block_size\": [128, 128]}\n}\n";
  return s;
}

// ---------------------------------------------------------------- deterministic payload

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Uniform in [-1, 1) from the top 24 bits: exactly representable in F32 and finite.
float unit_float(uint64_t r) { return static_cast<float>(static_cast<int64_t>(r >> 40) - (1 << 23)) / (1 << 23); }

uint16_t bf16_rne(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

// Element `j` of tensor `t`: counter-based, so any chunk can be produced independently.
struct PayloadGen {
  uint64_t seed;
  uint64_t experts;

  void fill(const WriterTensor& t, uint64_t offset, std::span<uint8_t> out) const {
    uint64_t key = splitmix64(seed ^ fnv1a(t.name));
    size_t width = dtype_bits(t.dtype) / 8;
    bool is_norm = t.name.find("norm") != std::string::npos;
    for (size_t i = 0; i < out.size(); i += width) {
      uint64_t r = splitmix64(key + (offset + i) / width);
      write_element(t.dtype, r, is_norm, out.data() + i);
    }
  }

  void write_element(Dtype d, uint64_t r, bool is_norm, uint8_t* p) const {
    float v = is_norm ? 1.0f + 0.125f * unit_float(r) : 0.0625f * unit_float(r);
    switch (d) {
      case Dtype::F8_E4M3: {
        uint8_t b = static_cast<uint8_t>(r);
        *p = (b & 0x7F) == 0x7F ? b ^ 1 : b;  // 0x7F/0xFF are NaN: use the neighbouring finite code
        return;
      }
      case Dtype::F8_E8M0: *p = static_cast<uint8_t>(115 + r % 16); return;  // 2^-12 .. 2^3
      case Dtype::I8: *p = static_cast<uint8_t>(r); return;                  // any E2M1 nibble pair is finite
      case Dtype::BF16: {
        uint16_t h = bf16_rne(v);
        std::memcpy(p, &h, 2);
        return;
      }
      case Dtype::F32: std::memcpy(p, &v, 4); return;
      case Dtype::I64: {
        int64_t id = static_cast<int64_t>(r % experts);  // tid2eid: an expert id
        std::memcpy(p, &id, 8);
        return;
      }
      default: std::memset(p, 0, dtype_bits(d) / 8); return;
    }
  }
};

// ---------------------------------------------------------------- layout

// §2: shard 1 = embed, shard L+2 = layers.L, shard L+2 (after the last layer) = head,
// norm and hc_head_*, then one shard per stage mtp.S.
uint32_t shard_of(const std::string& name, uint32_t layers) {
  if (name == "embed.weight") return 1;
  unsigned n = 0;
  if (std::sscanf(name.c_str(), "layers.%u.", &n) == 1) return n + 2;
  if (std::sscanf(name.c_str(), "mtp.%u.", &n) == 1) return layers + 3 + n;
  return layers + 2;
}

std::string shard_name(uint32_t i, uint32_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05u-of-%05u.safetensors", i, n);
  return buf;
}

std::string index_json(const std::map<std::string, std::string>& weight_map, uint64_t total) {
  std::string s = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(total) + "\n  },\n  \"weight_map\": {\n";
  size_t i = 0;
  for (const auto& [name, file] : weight_map)
    s += "    " + json_quote(name) + ": " + json_quote(file) + (++i < weight_map.size() ? ",\n" : "\n");
  return s + "  }\n}\n";
}

bool write_side_files(const std::filesystem::path& dir, const std::string& config, std::string& error) {
  const std::pair<const char*, std::string> files[] = {
      {"config.json", config},
      {"generation_config.json", "{\"_from_model_config\": true, \"bos_token_id\": 0, \"eos_token_id\": 1, "
                                 "\"do_sample\": true, \"temperature\": 1.0, \"top_p\": 1.0}\n"},
      {"tokenizer.json", "{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\", \"vocab\": {\"<｜begin▁of▁sentence｜>\": 0, "
                         "\"<｜end▁of▁sentence｜>\": 1}, \"merges\": []}}\n"},
      {"tokenizer_config.json", "{\"bos_token\": \"<｜begin▁of▁sentence｜>\", \"eos_token\": "
                                "\"<｜end▁of▁sentence｜>\", \"model_max_length\": 1048576}\n"},
  };
  for (const auto& [name, text] : files)
    if (!write_file_atomic((dir / name).string(), text, error)) return false;
  return true;
}

bool catalogue_for(const std::string& config, std::vector<ExpectedTensor>& cat, std::string& error) {
  JsonDoc doc;
  if (!doc.parse(config, error)) return false;
  Findings f;
  if (!dsv4_expected_catalogue(doc.root(), "config.json", f, cat) || f.has_errors()) {
    error = "synth config rejected by the profile";
    for (const auto& x : f.items()) error += "; " + x.code + ": " + x.message;
    return false;
  }
  return true;
}

bool write_shards(const std::filesystem::path& dir, const std::vector<ExpectedTensor>& cat, uint32_t layers,
                  uint32_t shards, const SafetensorsWriteOptions& opt, const TensorFill& fill, std::string& error) {
  std::vector<std::vector<WriterTensor>> per_shard(shards + 1);
  for (const auto& e : cat) {
    uint32_t s = shard_of(e.name, layers);
    if (s < 1 || s > shards) {
      error = "tensor " + e.name + " maps to shard " + std::to_string(s) + " of " + std::to_string(shards);
      return false;
    }
    per_shard[s].push_back(WriterTensor{e.name, *dtype_from_name(e.dtype), e.shape, 0, 0});
  }
  for (uint32_t s = 1; s <= shards; ++s) {
    std::string path = (dir / shard_name(s, shards)).string();
    if (!write_safetensors(path, std::move(per_shard[s]), fill, opt, error)) return false;
  }
  return true;
}

uint64_t payload_of(const std::vector<ExpectedTensor>& cat) {
  uint64_t total = 0;
  for (const auto& e : cat) {
    uint64_t n = dtype_bits(*dtype_from_name(e.dtype)) / 8;
    for (uint64_t d : e.shape) n *= d;  // the catalogue's shapes were range-checked when built
    total += n;
  }
  return total;
}

}  // namespace

std::string dsv4_0731_config_json() {
  return config_text(ConfigShape{129280, 4096, 2048, 43, 64, 512, 1024, 1024, 8, 256, 6, 3, 4, 64, 128, 256, 128799,
                                 ratios_0731(), "40, 41, 42"});
}

std::string dsv4_tiny_config_json() {
  // Layer 0: ratio 0 + hash; layer 1: ratio 4 + hash (like 0731's layer 2); layers 2-4 alternate.
  return config_text(ConfigShape{512, 256, 128, 5, 2, 128, 128, 128, 2, 8, 2, 2, 2, 2, 64, 64, 511,
                                 "0, 4, 128, 4, 128, 0, 0, 0", "2, 3, 4"});
}

std::string synth_target_problem(const std::string& out_dir, bool overwrite) {
  std::error_code ec;
  const std::filesystem::path dir(out_dir);
  if (!std::filesystem::exists(std::filesystem::symlink_status(dir, ec))) return "";
  if (!std::filesystem::is_directory(dir, ec)) return out_dir + " exists and is not a directory";
  if (overwrite || output_dir_is_empty(out_dir)) return "";
  return out_dir + " is not empty; synth writes only into an empty (or new) directory; pass --overwrite to replace "
                   "its checkpoint files";
}

namespace {

// OUT created and locked, then found empty (or --overwrite): usage when refused.
Outcome lock_synth_target(const std::string& out_dir, bool overwrite, FileLock& lock, std::string& error) {
  std::string holder;
  switch (lock_output_dir(out_dir, FileLock::Mode::exclusive, "ckpt synth", lock, holder)) {
    case FileLock::Result::acquired: break;
    case FileLock::Result::busy: error = output_dir_busy_message(out_dir, holder); return Outcome::usage;
    case FileLock::Result::error: error = holder; return Outcome::io;
  }
  error = synth_target_problem(out_dir, overwrite);
  return error.empty() ? Outcome::ok : Outcome::usage;
}

}  // namespace

bool synth_deepseek_v4_flash_0731(const std::string& out_dir, SynthSize size, uint64_t seed, std::string& error,
                                  bool overwrite, Outcome* outcome) {
  Outcome unused;
  Outcome& why = outcome ? *outcome : unused;
  why = Outcome::usage;
  if (error = synth_target_problem(out_dir, overwrite); !error.empty()) return false;  // early, nothing created
  why = Outcome::io;
  std::string config = size == SynthSize::sparse ? dsv4_0731_config_json() : dsv4_tiny_config_json();
  std::vector<ExpectedTensor> cat;
  if (!catalogue_for(config, cat, error)) return false;
  JsonDoc doc;
  if (!doc.parse(config, error)) return false;
  uint32_t layers = static_cast<uint32_t>(json_int(doc.root(), "num_hidden_layers").value_or(0));
  uint32_t stages = static_cast<uint32_t>(json_int_array(doc.root(), "compress_ratios")->size()) - layers;
  uint64_t experts = static_cast<uint64_t>(json_int(doc.root(), "n_routed_experts").value_or(1));
  uint32_t shards = layers + 2 + stages;

  std::filesystem::path dir(out_dir);
  FileLock lock;
  if ((why = lock_synth_target(out_dir, overwrite, lock, error)) != Outcome::ok) return false;
  why = Outcome::io;
  SafetensorsWriteOptions opt;
  opt.sparse = size == SynthSize::sparse;
  PayloadGen gen{seed, experts};
  TensorFill fill = [&gen](const WriterTensor& t, uint64_t off, std::span<uint8_t> out, std::string&) {
    gen.fill(t, off, out);
    return true;
  };
  if (!write_shards(dir, cat, layers, shards, opt, fill, error)) return false;
  std::map<std::string, std::string> weight_map;
  for (const auto& e : cat) weight_map.emplace(e.name, shard_name(shard_of(e.name, layers), shards));
  if (!write_file_atomic((dir / "model.safetensors.index.json").string(), index_json(weight_map, payload_of(cat)),
                         error))
    return false;
  return write_side_files(dir, config, error);
}

}  // namespace ckpt
