// Reading a conversion's provenance statement (sign/provenance.h parse_provenance) as
// hostile input: what provenance_json writes reads back the same; every field it relies
// on is refused when missing, mistyped, or inconsistent, each with a reason.
#include <gtest/gtest.h>

#include "sign/provenance.h"

namespace ckpt::oms {
namespace {

Provenance sample() {
  Provenance p;
  p.command = "convert";
  p.options = {{"experts", "keep"}, {"headroom-bits", "3"}, {"rounding", "half-away"}};
  p.tool_version = "0.1.0 (commit abc)";
  p.input_name = "in";
  p.output_name = "out";
  p.input.resources = {{"a.safetensors", std::string(64, 'a')}, {"config.json", std::string(64, 'b')}};
  p.input.root_digest = root_digest(p.input.resources);
  p.output.resources = {{"a.safetensors", std::string(64, 'c')}, {"sub/config.json", std::string(64, 'd')}};
  p.output.root_digest = root_digest(p.output.resources);
  p.input_bundle_name = "in.sig";
  p.input_bundle_digest = std::string(64, 'e');
  return p;
}

std::string refused(const std::string& text) {
  Provenance p;
  std::string error;
  EXPECT_FALSE(parse_provenance(text, p, error)) << text;
  EXPECT_FALSE(error.empty());
  return error;
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

TEST(ProvenanceParse, WhatIsWrittenReadsBackTheSame) {
  const Provenance p = sample();
  Provenance back;
  std::string error;
  ASSERT_TRUE(parse_provenance(provenance_json(p), back, error)) << error;
  EXPECT_EQ(back.command, p.command);
  EXPECT_EQ(back.options, p.options);
  EXPECT_EQ(back.tool_version, p.tool_version);
  EXPECT_EQ(back.input.root_digest, p.input.root_digest);
  EXPECT_EQ(back.output.root_digest, p.output.root_digest);
  ASSERT_EQ(back.output.resources.size(), 2u);
  EXPECT_EQ(back.output.resources[1].name, "sub/config.json");
  EXPECT_EQ(back.input_bundle_digest, p.input_bundle_digest);
  EXPECT_EQ(provenance_json(back), provenance_json(p));  // deterministic
}

TEST(ProvenanceParse, ANameLeavingItsModelIsRefused) {
  const std::string text = provenance_json(sample());
  EXPECT_NE(refused(replaced(text, "\"out/sub/config.json\"", "\"out/../config.json\"")).find("plain relative"),
            std::string::npos);
  EXPECT_NE(refused(replaced(text, "\"in/config.json\"", "\"other/config.json\"")).find("not under"), std::string::npos);
}

TEST(ProvenanceParse, ARootDigestThatIsNotTheOneOverItsFilesIsRefused) {
  Provenance p = sample();
  p.output.root_digest = std::string(64, '0');
  EXPECT_NE(refused(provenance_json(p)).find("root digest"), std::string::npos);
}

TEST(ProvenanceParse, AFileListedTwiceIsRefused) {
  Provenance p = sample();
  p.input.resources.push_back(p.input.resources.front());
  p.input.root_digest = root_digest(p.input.resources);
  EXPECT_NE(refused(provenance_json(p)).find("twice"), std::string::npos);
}

TEST(ProvenanceParse, OtherStatementsAndBuildTypesAreRefused) {
  const std::string text = provenance_json(sample());
  refused(replaced(text, "https://slsa.dev/provenance/v1", "https://slsa.dev/provenance/v0.2"));
  refused(replaced(text, "https://ckptkit.dev/provenance/conversion/v1", "https://example.com/build"));
  refused(replaced(text, "https://in-toto.io/Statement/v1", "https://in-toto.io/Statement/v0.1"));
  refused("[]");
  refused("{\"_type\": ");
}

TEST(ProvenanceParse, MistypedFieldsAreRefused) {
  const std::string text = provenance_json(sample());
  refused(replaced(text, "\"headroom-bits\":\"3\"", "\"headroom-bits\":3"));
  refused(replaced(text, "\"sha256\":\"" + std::string(64, 'c') + "\"", "\"sha256\":\"" + std::string(64, 'C') + "\""));
  refused(replaced(text, "\"role\":\"input-signature\"", "\"role\":\"something-else\""));
  refused(replaced(text, "\"role\":\"input-root\"", "\"role\":\"input-signature\""));
}

}  // namespace
}  // namespace ckpt::oms
