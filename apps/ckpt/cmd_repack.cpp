// `ckpt repack-experts IN.gguf OUT_DIR`: argument parsing and output only; the
// repack itself is libconvert/repack/expert_pack.h.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "../cli_common.h"
#include "commands.h"
#include "io/atomic_file.h"
#include "repack/expert_pack.h"

namespace ckptcli {
namespace {

constexpr const char* kRepack = "ckpt repack-experts";

struct RepackArgs {
  std::string input, out_dir, a_log = "fix";
  uint64_t align = 4096;
  uint64_t tree_chunk = ckpt::kSha256TreeDefaultChunk;
  bool overwrite = false, buffered = false, source_sha256 = false;
  std::string sign_key;  // --sign-key
  CommonFlags c;
};

void print_summary(const ckpt::RepackReport& r, std::ostream& out) {
  out << "repacked " << ckpt::display_escape(r.input) << " -> " << ckpt::display_escape(r.out_dir) << "\n";
  for (const auto& l : r.layers) {
    out << "  layer " << l.layer << ": " << l.experts << " experts, blob " << l.blob_size << " B, stride "
        << l.blob_stride << " B";
    if (!l.reasons.empty()) out << " (" << ckpt::display_escape(l.reasons.front()) << (l.reasons.size() > 1 ? ", ..." : "") << ")";
    out << "\n";
  }
  out << "  " << ckpt::kPackExpertsFile << ": " << r.blobs << " blobs, " << r.experts_bytes << " B (" << r.padding_bytes
      << " B padding), aligned to " << r.align << "\n";
  out << "  " << ckpt::kPackDenseFile << ": " << r.dense_tensors << " tensors, " << r.dense_bytes << " B; A_log "
      << r.a_log << (r.a_log_tensors ? " (" + std::to_string(r.a_log_tensors) + " tensors rewritten)" : "") << "\n";
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.2f", r.seconds);
  out << "  source";
  if (!r.source_sha256.empty()) out << " sha256 " << r.source_sha256 << (r.source_tree_root.empty() ? "" : ",");
  if (!r.source_tree_root.empty()) out << " sha256 tree root " << r.source_tree_root << " (chunks of " << r.tree_chunk << " B)";
  out << ", " << secs << " s\n";
}

ckpt::Outcome run_repack(const RepackArgs& a) {
  ckpt::InputSet inputs;
  inputs.add_checkpoint(a.input);
  inputs.add_file(a.sign_key);
  if (auto o = check_outputs(kRepack, inputs, {a.c.json, "-"}); o != ckpt::Outcome::ok) return o;
  apply_output_io(kRepack, a.buffered, a.c.quiet);
  ckpt::RepackOptions o;
  o.overwrite = a.overwrite;
  // The options that determine OUT_DIR, applied through the mapping a provenance records them by.
  const auto recorded = repack_options_recorded(a.align, a.a_log, a.tree_chunk, a.source_sha256);
  if (std::string error; !apply_repack_options(recorded, o, error)) return usage_error(kRepack, error);
  if (auto o = check_sign_key(kRepack, a.sign_key); o != ckpt::Outcome::ok) return o;
  if (!a.sign_key.empty()) {
    ckpt::oms::ConversionAttestation att{"repack-experts", a.input, a.out_dir, recorded, "", a.sign_key};
    o.after_finish = [att, mode = a.c.mode()](ckpt::RepackReport& r) mutable {
      ckpt::Progress meter(mode, "sign");  // OUT_DIR, then IN, hashed again for the attestation
      att.progress = [&meter](uint64_t done, uint64_t total) { meter.update(done, total); };
      bool usage = false;
      const bool signed_ok = attest_into(att, r.findings, usage);
      meter.finish();
      if (signed_ok) return true;
      r.status = usage ? ckpt::kRepackUsage : ckpt::kRepackIoError;
      return false;
    };
  }
  ckpt::Progress progress(a.c.mode(), "repack");
  o.progress = [&](uint64_t done, uint64_t total) { progress.update(done, total); };
  const auto report = ckpt::repack_experts(a.input, a.out_dir, o);
  progress.finish();
  const ckpt::Outcome written = emit(kRepack, a.c.json, ckpt::repack_report_json(report), inputs);
  print_findings(kRepack, report.findings);
  if (report.status == ckpt::kRepackOk && a.c.human()) print_summary(report, std::cout);
  return ckpt::worse(ckpt::repack_outcome(report.status), written);
}

}  // namespace

Command add_repack_command(CLI::App& app) {
  auto args = std::make_shared<RepackArgs>();
  Command c;
  c.name = kRepack;
  c.sub = app.add_subcommand("repack-experts", "Repack GGUF MoE experts into aligned per-expert blobs");
  c.sub->add_option("input", args->input, "input .gguf file")->required();
  c.sub->add_option("out_dir", args->out_dir, "output directory (experts.bin, dense.gguf, manifest.json)")->required();
  c.sub->add_option("--align", args->align, "blob alignment in bytes, a power of two (default 4096)");
  c.sub->add_option("--a-log", args->a_log, "blk.N.ssm_a: fix (write blk.N.A_log = log(-ssm_a), default) or keep")
      ->check(CLI::IsMember({"fix", "keep"}));
  c.sub->add_option("--tree-chunk", args->tree_chunk,
                    "chunk size of the source's SHA-256 tree in the manifest: a power of two, 65536 .. 1073741824 "
                    "(default 67108864), or 0 for none");
  auto* whole = c.sub->add_flag("--source-sha256", args->source_sha256,
                                "also write the source's whole-file SHA-256 (what sha256sum and the Hub print) in the "
                                "manifest: one stream on one core (~1.2 GB/s), the bound of the repack on a faster disk; "
                                "by default the SHA-256 tree, hashed on every core, names the source alone");
  // The default since the tree became the source's identity; kept so that scripts written
  // for earlier versions run unchanged.
  c.sub->add_flag("--no-source-sha256")
      ->description("the default: no whole-file SHA-256 (the tree alone)")
      ->excludes(whole);
  c.sub->add_flag("--overwrite", args->overwrite, "allow a non-empty output directory");
  add_buffered(c.sub, args->buffered);
  add_sign_key_option(c.sub, args->sign_key);
  add_common(c.sub, args->c, "errors only: no progress line and no summary");
  add_json(c.sub, args->c, "schemas/repack-report.schema.json");
  c.run = [args] { return run_repack(*args); };
  return c;
}

}  // namespace ckptcli
