// `convert --hub-sha256 LIST`: the input checked against a published SHA-256 list (the
// Hub's LFS sha256, or `sha256sum` output). The list's rules and its check are validate's
// (validate/hub_list.h: one parser, one comparison), with one rule added as an option of
// that check: every safetensors shard convert converts must be listed (the Hub lists every
// LFS file, and shards are LFS files), so a shard the list does not cover is an error here,
// not validate's warning. The shards' digests are the conversion's own (convert's lockstep
// hash of its inputs, io/lockstep_hasher.h: the disk is read once); small files the list
// names (config.json, tokenizer files) are hashed here, and ones it omits (the Hub
// publishes their git blob SHA-1, not a SHA-256) are not checked.

#include "commands.h"
#include "validate/hub_list.h"

namespace ckptcli {

bool check_hub_list_of_conversion(const std::string& list, const std::vector<ckpt::HubListEntry>& entries,
                                  const std::string& model, const std::vector<ckpt::HashedFile>& read,
                                  ckpt::Findings& findings) {
  ckpt::ValidationReport r;
  for (const auto& h : read) r.files.push_back(ckpt::FileReport{h.name, h.size, h.sha256, "", ""});
  ckpt::check_hub_entries(entries, list, model, /*every_shard=*/true, r);
  bool ok = true;
  uint64_t checked = 0;
  for (const ckpt::Finding& f : r.findings.items()) {
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
                  "every shard (hashed in the conversion's own pass over the input) and every other listed file has "
                  "the SHA-256 the hash list " + list + " gives");
  return ok;
}

}  // namespace ckptcli
