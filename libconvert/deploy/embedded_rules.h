// The deployment rules (schemas/deploy/*.json: module partitions per model family, the
// engines' block and kernel rules), embedded at build time by cmake/embed_profiles.cmake.
#pragma once

#include <string>
#include <vector>

namespace ckpt {

struct EmbeddedDeployRules {
  std::string name;  // file stem: "partitions", "engines"
  std::string json;  // the file's text
};
const std::vector<EmbeddedDeployRules>& embedded_deploy_rules();  // generated at build time
// The text of schemas/deploy/NAME.json; "" when no such file was embedded.
const std::string& deploy_rules_text(const std::string& name);

}  // namespace ckpt
