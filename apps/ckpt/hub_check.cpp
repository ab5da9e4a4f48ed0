// `convert --hub-sha256 LIST`: the input checked against a published SHA-256 list (the
// Hub's LFS sha256, or `sha256sum` output) while the conversion runs. The list's rules and
// its check are validate's (validate/hub_list.h: one parser, one comparison); convert adds
// one rule, as an option of that check (ValidateOptions::hub_every_shard): every safetensors
// shard it converts must be listed (the Hub lists every LFS
// file, and shards are LFS files), so a shard the list does not cover is an error here,
// not validate's warning. Small files the list omits (config.json, tokenizer files, the
// index: the Hub publishes their git blob SHA-1, not a SHA-256) are not checked; a listed
// one is. Like --expect-signature, this is a second read of IN on threads of its own,
// concurrent with the conversion's (docs/ckpt-convert.md).
#include <future>
#include <memory>

#include "commands.h"
#include "io/input_file.h"
#include "validate/hub_list.h"

namespace ckptcli {

bool hub_list_usable(const std::string& list, ckpt::Findings& findings) {
  std::string text;
  ckpt::IoError err;
  if (!ckpt::read_input_file(list, ckpt::kMaxHubListBytes, text, err)) {
    findings.error(err.err == EFBIG ? "HUB_LIST_TOO_LARGE" : "IO_READ", list, "", std::nullopt,
                   "cannot read the hash list " + list + ": " + err.message);
    return false;
  }
  std::vector<ckpt::HubListEntry> entries;
  return ckpt::parse_hub_list(text, list, entries, findings);
}

std::function<bool(ckpt::Findings&)> start_hub_check(const std::string& list, const std::string& model) {
  auto check = std::make_shared<std::future<ckpt::ValidationReport>>(std::async(std::launch::async, [list, model] {
    ckpt::ValidateOptions o;
    o.hub_sha256_file = list;
    o.hub_every_shard = true;
    return ckpt::validate_path(model, o);
  }));
  return [check, list](ckpt::Findings& findings) {
    const ckpt::ValidationReport r = check->get();
    bool ok = true;
    uint64_t checked = 0;
    // The list's findings and the reads' (the input's structure is the conversion's to judge).
    for (const ckpt::Finding& f : r.findings.items()) {
      if (f.code.rfind("HUB_", 0) != 0 && f.code.rfind("IO_", 0) != 0) continue;
      ok &= f.severity != ckpt::Severity::error;
      findings.add(f);
    }
    for (const auto& file : r.files) checked += file.hub_status == "ok";
    if (ok && checked == 0) {
      findings.error("HUB_NOTHING_CHECKED", list, "", std::nullopt,
                     "the hash list " + list + " matched no file of the input: nothing was compared");
      return false;
    }
    if (ok)
      findings.info("HUB_VERIFIED", list, "", std::nullopt,
                    "every shard (and every other listed file) has the SHA-256 the hash list " + list + " gives");
    return ok;
  };
}

}  // namespace ckptcli
