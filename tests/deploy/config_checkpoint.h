// Test checkpoints made from a config.json (deploy/config_tensors.h): the tensors the config
// implies, and a safetensors header laying them out one after another. Shared by the
// preflight, hybrid and relayout tests, which had each copied the steps.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "formats/json.h"
#include "deploy/config_tensors.h"
#include "model/quant_scheme.h"
#include "test_util.h"

namespace ckpt::test {

// Every tensor `config` implies; an empty list (and a test failure) when it cannot be read.
inline std::vector<DeployTensor> tensors_of_config(const std::string& config) {
  JsonDoc doc;
  std::string error;
  QuantScheme scheme;
  std::vector<DeployTensor> tensors;
  Findings f;
  if (!doc.parse(config, error) || !detect_quant_scheme(&doc, scheme, error) ||
      !tensors_from_config(doc.root(), scheme, f, tensors)) {
    ADD_FAILURE() << "config.json of the test: " << error << describe(f);
    return {};
  }
  return tensors;
}

// The safetensors header of `tensors` laid out in order from offset 0; `bytes` receives the
// payload size.
inline std::string header_of(const std::vector<DeployTensor>& tensors, uint64_t& bytes) {
  std::string header = "{";
  bytes = 0;
  for (const auto& t : tensors) {
    std::string shape;
    for (auto s : t.shape) shape += std::string(shape.empty() ? "" : ",") + std::to_string(s);
    header += std::string(header.size() > 1 ? "," : "") + json_quote(t.name) + ":{\"dtype\":\"" + t.dtype +
              "\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(bytes) + "," +
              std::to_string(bytes + t.nbytes) + "]}";
    bytes += t.nbytes;
  }
  return header + "}";
}

// `dir` with `config` and one shard (model.safetensors, zero data) holding `tensors`.
inline void write_zero_checkpoint(const std::string& dir, const std::string& config,
                                  const std::vector<DeployTensor>& tensors) {
  std::filesystem::create_directories(dir);
  write_text(dir + "/config.json", config);
  uint64_t bytes = 0;
  const std::string header = header_of(tensors, bytes);
  write_file(dir + "/model.safetensors", make_safetensors(header, std::vector<uint8_t>(bytes, 0)));
}

}  // namespace ckpt::test
