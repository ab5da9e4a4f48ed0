// Hand-built checkpoints for the refusal tests: a directory with config.json and one or more
// safetensors shards (an index when more than one), each tensor given by name, dtype, shape
// and bytes. Hostile layouts are built here rather than stored as fixtures.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "test_util.h"

namespace ckpt::test {

struct TinyTensor {
  std::string name, dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};

inline std::string tiny_shape_json(const std::vector<uint64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
  return t + "]";
}

// The bytes of one safetensors file holding `tensors` back to back.
inline std::vector<uint8_t> tiny_safetensors(const std::vector<TinyTensor>& tensors) {
  std::string header = "{";
  std::vector<uint8_t> payload;
  for (const auto& t : tensors) {
    header += std::string(header.size() > 1 ? "," : "") + "\"" + t.name + "\":{\"dtype\":\"" + t.dtype +
              "\",\"shape\":" + tiny_shape_json(t.shape) + ",\"data_offsets\":[" + std::to_string(payload.size()) +
              "," + std::to_string(payload.size() + t.bytes.size()) + "]}";
    payload.insert(payload.end(), t.bytes.begin(), t.bytes.end());
  }
  return make_safetensors(header + "}", payload);
}

// DIR/config.json (`config`, omitted when empty) and the shards: one model.safetensors, or
// model-0000i-of-0000n.safetensors with model.safetensors.index.json for several.
inline void write_tiny_checkpoint(const std::string& dir, const std::string& config,
                                  const std::vector<std::vector<TinyTensor>>& shards) {
  std::filesystem::create_directories(dir);
  if (!config.empty()) write_text(dir + "/config.json", config);
  if (shards.size() == 1) {
    write_file(dir + "/model.safetensors", tiny_safetensors(shards[0]));
    return;
  }
  std::string map;
  uint64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = "model-0000" + std::to_string(i + 1) + "-of-0000" + std::to_string(shards.size()) +
                             ".safetensors";
    write_file(dir + "/" + name, tiny_safetensors(shards[i]));
    for (const auto& t : shards[i]) {
      map += std::string(map.empty() ? "" : ",") + "\"" + t.name + "\":\"" + name + "\"";
      total += t.bytes.size();
    }
  }
  write_text(dir + "/model.safetensors.index.json",
             "{\"metadata\":{\"total_size\":" + std::to_string(total) + "},\"weight_map\":{" + map + "}}\n");
}

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i) std::memcpy(out.data() + 4 * i, &v[i], 4);
  return out;
}

}  // namespace ckpt::test
