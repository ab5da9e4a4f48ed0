// Conversion attestations on the command line (sign/provenance.h): `--sign-key` of the
// converting commands, the one mapping between each command's options and what its
// provenance records, and `verify-signature --recompute`'s conversion again of IN.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "../cli_common.h"
#include "commands.h"
#include "core/progress.h"
#include "convert/convert.h"
#include "relayout/relayout.h"
#include "repack/expert_pack.h"

namespace ckptcli {
namespace {

namespace fs = std::filesystem;
using ckpt::oms::ConversionOption;

// The value of `name` among `options`, or nullptr.
const std::string* option_value(const std::vector<ConversionOption>& options, const std::string& name) {
  for (const auto& [n, v] : options)
    if (n == name) return &v;
  return nullptr;
}

// Every recorded option is one `known` names, and each known one is recorded once.
bool only_known(const std::string& command, const std::vector<ConversionOption>& options,
                const std::vector<std::string>& known, std::string& error) {
  for (size_t i = 0; i < options.size(); ++i) {
    if (std::find(known.begin(), known.end(), options[i].first) == known.end()) {
      error = "the provenance records the " + command + " option '" + options[i].first +
              "', which this version of ckpt does not know: refused (no conversion with an option it cannot apply)";
      return false;
    }
    for (size_t j = 0; j < i; ++j)
      if (options[j].first == options[i].first) {
        error = "the provenance records the option '" + options[i].first + "' twice";
        return false;
      }
  }
  for (const auto& k : known)
    if (!option_value(options, k)) {
      error = "the provenance of a " + command + " does not record its option '" + k + "'";
      return false;
    }
  return true;
}

bool parse_unsigned(const std::string& text, uint64_t& out) {
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  out = std::stoull(text);
  return true;
}

bool one_of(const std::string& value, std::initializer_list<const char*> allowed) {
  for (const char* a : allowed)
    if (value == a) return true;
  return false;
}

// A sibling of OUT that does not exist yet, made empty (mkdtemp): where --recompute converts.
bool make_sibling_dir(const std::string& out, std::string& dir, std::string& error) {
  fs::path p = fs::path(out).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  std::string templ = (p.parent_path() / ("." + p.filename().string() + ".recompute-XXXXXX")).string();
  if (::mkdtemp(templ.data()) == nullptr) {
    error = "cannot create a temporary directory beside " + out + ": " + std::strerror(errno);
    return false;
  }
  dir = templ;
  return true;
}

}  // namespace

void add_sign_key_option(CLI::App* sub, std::string& key) {
  sub->add_option("--sign-key", key,
                  "PEM EC private key: sign OUT (OUT/model.sig, an OMS bundle) and write OUT/model.provenance, a signed "
                  "SLSA provenance binding IN's digests and the options to OUT's (docs/ckpt-verify-signature.md)");
}

std::vector<ConversionOption> convert_options_recorded(const std::string& experts, unsigned headroom_bits,
                                                       const std::string& rounding) {
  return {{"experts", experts}, {"headroom-bits", std::to_string(headroom_bits)}, {"rounding", rounding}};
}

bool apply_convert_options(const std::vector<ConversionOption>& options, ckpt::ConvertOptions& o, std::string& error) {
  if (!only_known("convert", options, {"experts", "headroom-bits", "rounding"}, error)) return false;
  const std::string& experts = *option_value(options, "experts");
  const std::string& rounding = *option_value(options, "rounding");
  uint64_t headroom = 0;
  if (!one_of(experts, {"keep", "int8-shift", "bf16"}) || !one_of(rounding, {"half-away", "half-even"}) ||
      !parse_unsigned(*option_value(options, "headroom-bits"), headroom) || headroom > 3) {
    error = "the recorded convert options (experts " + experts + ", headroom-bits " +
            *option_value(options, "headroom-bits") + ", rounding " + rounding + ") are not values convert accepts";
    return false;
  }
  o.experts = experts == "int8-shift" ? ckpt::ExpertMode::int8_shift
              : experts == "bf16"     ? ckpt::ExpertMode::bf16
                                      : ckpt::ExpertMode::keep;
  o.remap.headroom = static_cast<unsigned>(headroom);
  o.remap.rounding = rounding == "half-even" ? ckpt::RemapRounding::half_even : ckpt::RemapRounding::half_away;
  return true;
}

std::vector<ConversionOption> repack_options_recorded(uint64_t align, const std::string& a_log, uint64_t tree_chunk,
                                                      bool source_sha256) {
  std::vector<ConversionOption> recorded{
      {"a-log", a_log}, {"align", std::to_string(align)}, {"tree-chunk", std::to_string(tree_chunk)}};
  // Recorded when "no" only: a provenance without it means "yes", as every provenance of a
  // version whose default was the whole-file SHA-256 does (and --source-sha256 writes the
  // same), so those still --recompute.
  if (!source_sha256) recorded.emplace_back("source-sha256", "no");
  return recorded;
}

bool apply_repack_options(std::vector<ConversionOption> options, ckpt::RepackOptions& o, std::string& error) {
  // Absent: the whole-file SHA-256 was written (--source-sha256, or a version from before
  // the option or from when it was the default).
  if (!option_value(options, "source-sha256")) options.emplace_back("source-sha256", "yes");
  if (!only_known("repack-experts", options, {"a-log", "align", "tree-chunk", "source-sha256"}, error)) return false;
  const std::string& a_log = *option_value(options, "a-log");
  const std::string& source_sha256 = *option_value(options, "source-sha256");
  if (!one_of(a_log, {"fix", "keep"}) || !one_of(source_sha256, {"yes", "no"}) ||
      !parse_unsigned(*option_value(options, "align"), o.align) ||
      !parse_unsigned(*option_value(options, "tree-chunk"), o.tree_chunk)) {
    error = "the recorded repack-experts options are not values repack-experts accepts";
    return false;
  }
  o.fix_a_log = a_log == "fix";
  o.source_sha256 = source_sha256 == "yes";
  return true;
}

namespace {

std::string join(const std::vector<std::string>& items, char sep) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : std::string(1, sep)) + item;
  return out;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> items;
  if (text.empty()) return items;
  size_t at = 0;
  for (size_t next; (next = text.find(sep, at)) != std::string::npos; at = next + 1) items.push_back(text.substr(at, next - at));
  items.push_back(text.substr(at));
  return items;
}

bool parse_degree(const std::string& text, uint32_t& out) {
  uint64_t v = 0;
  if (!parse_unsigned(text, v) || v == 0 || v > 65536) return false;
  out = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

std::vector<ConversionOption> relayout_options_recorded(const RelayoutRecorded& r) {
  return {{"tp", std::to_string(r.tp)},        {"ep", std::to_string(r.ep)},
          {"engine", join(r.engines, ',')},    {"min-block", r.min_block},
          {"block", r.block},                  {"bf16", join(r.bf16, '\n')}};
}

bool apply_relayout_options(const std::vector<ConversionOption>& options, ckpt::RelayoutOptions& o, std::string& error) {
  if (!only_known("relayout", options, {"tp", "ep", "engine", "min-block", "block", "bf16"}, error)) return false;
  const std::string& min_block = *option_value(options, "min-block");
  const std::string& block = *option_value(options, "block");
  o.engines = split(*option_value(options, "engine"), ',');
  o.request.bf16 = split(*option_value(options, "bf16"), '\n');
  bool good = parse_degree(*option_value(options, "tp"), o.deployment.tp) &&
              parse_degree(*option_value(options, "ep"), o.deployment.ep);
  for (const auto& e : o.engines) good = good && one_of(e, {"vllm", "sglang", "transformers"});
  for (const auto& pattern : o.request.bf16) good = good && !pattern.empty();
  if (!good) {
    error = "the relayout options (tp " + *option_value(options, "tp") + ", ep " + *option_value(options, "ep") +
            ", engine '" + *option_value(options, "engine") +
            "', bf16 patterns) are not values relayout accepts (degrees 1..65536, engines vllm, sglang, transformers)";
    return false;
  }
  if (!min_block.empty() && !parse_block_size(min_block, o.request.min_n, o.request.min_k)) {
    error = "--min-block '" + min_block + "' is not ROWSxCOLS (e.g. 32x32)";
    return false;
  }
  if (!block.empty() && !parse_block_size(block, o.request.block_n, o.request.block_k)) {
    error = "--block '" + block + "' is not ROWSxCOLS (e.g. 64x64)";
    return false;
  }
  return true;
}

bool attest_into(const ckpt::oms::ConversionAttestation& a, ckpt::Findings& findings, bool& usage) {
  const ckpt::oms::AttestationResult r = ckpt::oms::attest_conversion(a);
  findings.append(r.findings);
  usage = r.usage;
  if (r.findings.has_errors()) {
    findings.error("CONVERT_ATTESTATION", a.output, "", std::nullopt,
                   "OUT is complete but not signed: no model.sig, no model.provenance (see above)");
    return false;
  }
  findings.info("OMS_SIGNED", r.bundle_path, "", std::nullopt,
                "signed " + std::to_string(r.output.resources.size()) + " files, root digest " + r.output.root_digest +
                    "; provenance " + r.provenance_path + " binds the input's root digest " + r.input.root_digest);
  return true;
}

ckpt::Outcome check_sign_key(std::string_view prog_sub, const std::string& key) {
  if (key.empty()) return ckpt::Outcome::ok;
  ckpt::Findings findings;
  bool usage = false;
  if (ckpt::oms::signing_key_usable(key, findings, usage)) return ckpt::Outcome::ok;
  print_findings(prog_sub, findings, ckpt::Severity::error);
  return usage ? ckpt::Outcome::usage : findings.has_io_errors() ? ckpt::Outcome::io : ckpt::Outcome::usage;
}

std::function<bool(ckpt::ConvertReport&)> attest_after_finalize(ckpt::oms::ConversionAttestation att,
                                                               ckpt::ProgressMode mode) {
  return [att, mode](ckpt::ConvertReport& r) mutable {
    att.mode = r.output_mode;
    for (const auto& h : r.input_sha256)  // the input shards as the conversion read them
      if (h.error.empty()) att.input_sha256.emplace(h.name, h.sha256);
    ckpt::Progress meter(mode, "sign");  // OUT, then IN's other files, hashed for the attestation
    att.progress = [&meter](uint64_t done, uint64_t total) { meter.update(done, total); };
    bool usage = false;
    const bool signed_ok = attest_into(att, r.findings, usage);
    meter.finish();
    if (signed_ok) return true;
    r.status = usage ? ckpt::ConvertStatus::usage_error : ckpt::ConvertStatus::io_error;
    return false;
  };
}

namespace {

// One converting command run again for --recompute: its recorded options applied (false
// with `error` when they cannot be: nothing runs), IN converted into `tmp`; `converted`
// false with the run's findings appended when it failed.
struct Recomputer {
  const char* command;
  bool (*run)(const std::vector<ConversionOption>& options, const std::string& in, const std::string& tmp,
              std::string& error, bool& converted, ckpt::Findings& findings);
};

bool rerun_convert(const std::vector<ConversionOption>& options, const std::string& in, const std::string& tmp,
                   std::string& error, bool& converted, ckpt::Findings& findings) {
  ckpt::ConvertOptions o;
  if (!apply_convert_options(options, o, error)) return false;
  o.input = in;
  o.output = tmp;
  const ckpt::ConvertReport r = ckpt::convert_checkpoint(o);
  converted = r.status == ckpt::ConvertStatus::ok;
  if (!converted) findings.append(r.findings);
  return true;
}

bool rerun_repack(const std::vector<ConversionOption>& options, const std::string& in, const std::string& tmp,
                  std::string& error, bool& converted, ckpt::Findings& findings) {
  ckpt::RepackOptions o;
  if (!apply_repack_options(options, o, error)) return false;
  const ckpt::RepackReport r = ckpt::repack_experts(in, tmp, o);
  converted = r.status == ckpt::kRepackOk;
  if (!converted) findings.append(r.findings);
  return true;
}

bool rerun_relayout(const std::vector<ConversionOption>& options, const std::string& in, const std::string& tmp,
                    std::string& error, bool& converted, ckpt::Findings& findings) {
  ckpt::RelayoutOptions o;
  if (!apply_relayout_options(options, o, error)) return false;
  o.input = in;
  o.output = tmp;
  const ckpt::RelayoutReport r = ckpt::relayout_checkpoint(o);
  converted = ckpt::relayout_outcome(r) == ckpt::Outcome::ok;
  if (!converted) {
    findings.append(r.findings);
    findings.append(r.convert.findings);
  }
  return true;
}

// Every command whose provenance --recompute can reproduce (a new converting command adds
// its line, with the apply_*_options its own front end uses).
constexpr Recomputer kRecomputers[] = {
    {"convert", rerun_convert}, {"repack-experts", rerun_repack}, {"relayout", rerun_relayout}};

}  // namespace

bool recompute_conversion(const ckpt::oms::Provenance& p, const std::string& in, const std::string& out,
                          ckpt::Findings& findings, bool& usage) {
  usage = false;
  const Recomputer* rerun = nullptr;
  for (const auto& r : kRecomputers)
    if (p.command == r.command) rerun = &r;
  std::string error, tmp;
  if (!rerun) {
    findings.error("PROVENANCE_OPTIONS", "", "", std::nullopt,
                   "the provenance records the command '" + p.command + "', which --recompute does not know: refused");
    usage = true;
    return false;
  }
  if (!make_sibling_dir(out, tmp, error)) {
    findings.error("IO_WRITE", out, "", std::nullopt, error);
    return false;
  }
  bool converted = false, same = false;
  if (!rerun->run(p.options, in, tmp, error, converted, findings)) {
    findings.error("PROVENANCE_OPTIONS", "", "", std::nullopt, error);
    usage = true;
  } else if (!converted) {
    findings.error("PROVENANCE_RECOMPUTE", in, "", std::nullopt,
                   "converting the reference input again with the recorded options failed (above)");
  } else {
    ckpt::oms::Statement now;
    if (ckpt::oms::attested_resources(tmp, now, findings))
      same = ckpt::oms::compare_resources(p.output, now, "the recomputed output", "PROVENANCE_RECOMPUTE_MISMATCH", "",
                                          findings);
  }
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (ec) findings.warning("IO_WRITE", tmp, "", std::nullopt, "cannot remove the temporary " + tmp + ": " + ec.message());
  return same;
}

}  // namespace ckptcli
