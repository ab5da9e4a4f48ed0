// Subcommands that live in their own files register here; main.cpp runs the one chosen.
#pragma once

#include <functional>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/outcome.h"
#include "core/progress.h"
#include "io/lockstep_hasher.h"
#include "sign/oms_verify.h"
#include "sign/provenance.h"
#include "validate/hub_list.h"

namespace ckpt {
struct ConvertOptions;
struct ConvertReport;
struct RepackOptions;
struct RelayoutOptions;
}  // namespace ckpt

namespace ckptcli {

// A subcommand's run returns its Outcome; main turns it into the exit code (core/outcome.h)
// after checking stdout (apps/cli_common.h: finish).
struct Command {
  CLI::App* sub = nullptr;
  std::string name;                  // "ckpt dump": the prefix of its error lines
  std::function<ckpt::Outcome()> run;  // called after parsing when `sub` was chosen
};

Command add_dump_command(CLI::App& app);    // apps/ckpt/cmd_dump.cpp
Command add_repack_command(CLI::App& app);  // apps/ckpt/cmd_repack.cpp
Command add_hash_command(CLI::App& app);    // apps/ckpt/cmd_hash.cpp
Command add_diff_command(CLI::App& app);    // apps/ckpt/cmd_diff.cpp
Command add_preflight_command(CLI::App& app);  // apps/ckpt/cmd_preflight.cpp
Command add_relayout_command(CLI::App& app);   // apps/ckpt/cmd_relayout.cpp
Command add_sign_command(CLI::App& app);              // apps/ckpt/cmd_sign.cpp
Command add_verify_signature_command(CLI::App& app);  // apps/ckpt/cmd_sign.cpp

// `validate --signature BUNDLE` and `convert --expect-signature BUNDLE`, with --public-key PUB
// or --cert-chain CA... (apps/ckpt/cmd_sign.cpp): the OMS check of `ckpt verify-signature`
// inside another command, its findings added to that command's report.
struct SignatureFlags {
  std::string bundle, public_key;
  std::vector<std::string> cert_chain;
  bool active() const { return !bundle.empty() || !public_key.empty() || !cert_chain.empty(); }
  bool complete() const { return !bundle.empty() && (!public_key.empty() || !cert_chain.empty()); }
};
// `bundle_option` names the bundle's flag: "--signature" (validate), "--expect-signature" (convert).
void add_signature_options(CLI::App* sub, SignatureFlags& flags, const std::string& bundle_option = "--signature");
// usage (after printing why) when the flags are incomplete; else ok, the findings of the
// check appended to `findings` (an info OMS_VERIFIED naming the bundle when it passed).
// `hashed`: SHA-256 of model files validate already read (its --deep pass), by name: not read again.
ckpt::Outcome check_signature_into(const SignatureFlags& flags, const std::string& model, ckpt::Findings& findings,
                                   const std::map<std::string, std::string>& hashed = {});

// `convert --expect-signature`, in two steps. Before the conversion: the bundle verified
// without reading the model (oms/oms_verify.h verify_bundle: trust, DSSE, statement),
// so a bundle that cannot verify is refused before anything is written (false with its
// findings; usage: the trust given could not be used); `verified` holds its statement.
// Once every shard is written: the model's files checked against that statement
// (verify_files: the bundle is not read or its signature checked again), the input
// shards' digests taken from the conversion's own lockstep read (ConvertReport::input_sha256)
// and every other signed file hashed here; true when it verifies (an OMS_VERIFIED info
// saying how many files came from the conversion's read).
bool check_signature_bundle(const SignatureFlags& flags, std::optional<ckpt::oms::VerifiedBundle>& verified,
                            ckpt::Findings& findings, bool& usage);
bool check_signature_of_conversion(const SignatureFlags& flags, const ckpt::oms::VerifiedBundle& verified,
                                   const std::string& model, const std::vector<ckpt::HashedFile>& read,
                                   ckpt::Findings& findings, bool& usage);

// `convert --hub-sha256 LIST` (apps/ckpt/hub_check.cpp): the list is read and parsed once,
// before the conversion, by validate's reader (ckpt::read_hub_list); once every shard is
// written, IN is checked against those entries, the shards' digests taken from the
// conversion's own lockstep read and every other listed file hashed here. Appends the
// HUB_* / IO_* findings and returns whether every shard is listed and every listed file
// present with its SHA-256.
bool check_hub_list_of_conversion(const std::string& list, const std::vector<ckpt::HubListEntry>& entries,
                                  const std::string& model, const std::vector<ckpt::HashedFile>& read,
                                  ckpt::Findings& findings);

// Conversion attestations (apps/ckpt/attest.cpp, sign/provenance.h). `--sign-key KEY.pem`
// of a converting command; each command's options as its provenance records them and
// applied back from a provenance (unknown, missing or bad values refused, with `error`);
// the attestation itself, run from the command's hook under OUT's lock (findings appended;
// false when OUT could not be signed); and --recompute: IN converted again with the recorded
// command and options into a temporary sibling of OUT (removed afterwards), its resources
// compared with the recorded output's (usage: a command or option it does not know).
void add_sign_key_option(CLI::App* sub, std::string& key);
std::vector<ckpt::oms::ConversionOption> convert_options_recorded(const std::string& experts, unsigned headroom_bits,
                                                                  const std::string& rounding);
bool apply_convert_options(const std::vector<ckpt::oms::ConversionOption>& options, ckpt::ConvertOptions& o,
                           std::string& error);
// repack's: a-log, align, tree-chunk, and source-sha256 "no" when the source is named by
// its tree alone (the default); absent means the whole-file digest was written too
// (--source-sha256), which is what every provenance written before the key meant.
std::vector<ckpt::oms::ConversionOption> repack_options_recorded(uint64_t align, const std::string& a_log,
                                                                 uint64_t tree_chunk, bool source_sha256);
bool apply_repack_options(std::vector<ckpt::oms::ConversionOption> options, ckpt::RepackOptions& o, std::string& error);
// relayout's recorded options: --tp, --ep, --engine (comma-joined), --min-block, --block
// ("" = chosen), --bf16 (newline-joined patterns).
struct RelayoutRecorded {
  unsigned tp = 1, ep = 1;
  std::vector<std::string> engines, bf16;
  std::string min_block, block;
};
std::vector<ckpt::oms::ConversionOption> relayout_options_recorded(const RelayoutRecorded& r);
bool apply_relayout_options(const std::vector<ckpt::oms::ConversionOption>& options, ckpt::RelayoutOptions& o,
                            std::string& error);
// "64x64" (also "64X64", "64,64") -> two positive sizes of at most 2^20 (apps/ckpt/cmd_relayout.cpp).
bool parse_block_size(const std::string& text, uint64_t& n, uint64_t& k);
bool attest_into(const ckpt::oms::ConversionAttestation& a, ckpt::Findings& findings, bool& usage);
// --sign-key checked before anything is read or written (a key that cannot sign would
// otherwise be found after the whole conversion): ok, or the findings printed and usage / io.
ckpt::Outcome check_sign_key(std::string_view prog_sub, const std::string& key);
// convert's and relayout's --sign-key hook (ConvertOptions::after_finalize): the attestation
// with its own progress line, OUT's status set when it fails (usage or I/O).
std::function<bool(ckpt::ConvertReport&)> attest_after_finalize(ckpt::oms::ConversionAttestation att,
                                                               ckpt::ProgressMode mode);
bool recompute_conversion(const ckpt::oms::Provenance& p, const std::string& in, const std::string& out,
                          ckpt::Findings& findings, bool& usage);

}  // namespace ckptcli
