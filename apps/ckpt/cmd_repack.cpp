// `ckpt repack-experts IN.gguf OUT_DIR`: argument parsing and output only; the
// repack itself is libconvert/repack/expert_pack.h.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.h"
#include "io/atomic_file.h"
#include "repack/expert_pack.h"

namespace ckptcli {
namespace {

struct RepackArgs {
  std::string input, out_dir, a_log = "fix", json;
  uint64_t align = 4096;
  bool overwrite = false, quiet = false;
};

// One line on stderr, redrawn at most every 100 ms, only when stderr is a terminal.
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO)) {}
  ~ProgressLine() {
    if (shown_) std::fprintf(stderr, "\r%60s\r", "");
  }
  void update(uint64_t done, uint64_t total) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(100) && done < total) return;
    last_ = now;
    const double pct = total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0;
    std::fprintf(stderr, "\r  repack %.2f / %.2f GB (%.0f%%)   ", static_cast<double>(done) / 1e9,
                 static_cast<double>(total) / 1e9, pct);
    shown_ = true;
  }

 private:
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

void print_summary(const ckpt::RepackReport& r, std::ostream& out) {
  out << "repacked " << r.input << " -> " << r.out_dir << "\n";
  for (const auto& l : r.layers) {
    out << "  layer " << l.layer << ": " << l.experts << " experts, blob " << l.blob_size << " B, stride "
        << l.blob_stride << " B";
    if (!l.reasons.empty()) out << " (" << l.reasons.front() << (l.reasons.size() > 1 ? ", ..." : "") << ")";
    out << "\n";
  }
  out << "  " << ckpt::kPackExpertsFile << ": " << r.blobs << " blobs, " << r.experts_bytes << " B (" << r.padding_bytes
      << " B padding), aligned to " << r.align << "\n";
  out << "  " << ckpt::kPackDenseFile << ": " << r.dense_tensors << " tensors, " << r.dense_bytes << " B; A_log "
      << r.a_log << (r.a_log_tensors ? " (" + std::to_string(r.a_log_tensors) + " tensors rewritten)" : "") << "\n";
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.2f", r.seconds);
  out << "  source sha256 " << r.source_sha256 << ", " << secs << " s\n";
}

void print_findings(const ckpt::RepackReport& r) {
  for (const auto& f : r.findings.items()) {
    std::cerr << "ckpt repack-experts: " << ckpt::severity_name(f.severity) << " " << f.code << ": " << f.message << "\n";
  }
}

int run_repack(const RepackArgs& a) {
  ckpt::RepackOptions o;
  o.align = a.align;
  o.fix_a_log = a.a_log == "fix";
  o.overwrite = a.overwrite;
  ProgressLine progress(!a.quiet);
  o.progress = [&](uint64_t done, uint64_t total) { progress.update(done, total); };
  const auto report = ckpt::repack_experts(a.input, a.out_dir, o);
  const bool json_to_stdout = a.json == "-";
  if (!a.json.empty()) {
    const std::string text = ckpt::repack_report_json(report);
    std::string error;
    if (json_to_stdout) {
      std::cout << text << std::flush;
    } else if (!ckpt::write_file_atomic(a.json, text, error)) {
      std::cerr << "ckpt repack-experts: " << error << "\n";
      return kIoError;
    }
  }
  print_findings(report);
  if (report.status == ckpt::kRepackOk && !json_to_stdout && !a.quiet) print_summary(report, std::cout);
  switch (report.status) {
    case ckpt::kRepackOk: return kOk;
    case ckpt::kRepackInputError: return kFindings;
    case ckpt::kRepackUsage: return kUsage;
    default: return kIoError;
  }
}

}  // namespace

Command add_repack_command(CLI::App& app) {
  auto args = std::make_shared<RepackArgs>();
  Command c;
  c.sub = app.add_subcommand("repack-experts", "Repack GGUF MoE experts into aligned per-expert blobs");
  c.sub->add_option("input", args->input, "input .gguf file")->required();
  c.sub->add_option("out_dir", args->out_dir, "output directory (experts.bin, dense.gguf, manifest.json)")->required();
  c.sub->add_option("--align", args->align, "blob alignment in bytes, a power of two (default 4096)");
  c.sub->add_option("--a-log", args->a_log, "blk.N.ssm_a: fix (write blk.N.A_log = log(-ssm_a), default) or keep")
      ->check(CLI::IsMember({"fix", "keep"}));
  c.sub->add_flag("--overwrite", args->overwrite, "allow a non-empty output directory");
  c.sub->add_flag("-q,--quiet", args->quiet, "no progress line and no summary");
  c.sub->add_option("--json", args->json, "write the JSON report to FILE, or - for stdout");
  c.run = [args] { return run_repack(*args); };
  return c;
}

}  // namespace ckptcli
