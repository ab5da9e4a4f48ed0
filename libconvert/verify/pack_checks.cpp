// The verifier's expert-pack checks (verify/pack_checks.h): validate_expert_pack (manifest,
// experts.bin's geometry and part hashes, dense.gguf; with the reference its SHA-256 and
// every part byte-equal to its source slice), beside the decode jobs: every blob part
// against its source slice, every dense tensor against the reference's tensor of the same
// name, type and shape (verify/gguf_checks.h).
#include "verify/pack_checks.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#include "formats/loader.h"
#include "formats/pack_manifest.h"
#include "io/input_file.h"
#include "repack/pack_validate.h"
#include "verify/gguf_checks.h"
#include "verify/jobs.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

// An expert pack: every blob part against its source slice, then the dense remainder. The
// files opened here outlive the jobs that read them.
struct PackPlan {
  MappedFile experts, ref;
  LoadedModel dense, source;  // source: the reference's tensors
  bool have_dense = false;

  DigestsAhead ahead;

  bool plan(DecodeBackend& be, const VerifyOptions& o, const std::string& dir, const PackManifest& m,
            const std::string& reference, std::vector<Job>& jobs, Findings& findings) {
    IoError err;
    if (!experts.open((fs::path(dir) / m.experts_name).string(), err) || (!reference.empty() && !ref.open(reference, err))) {
      findings.error("IO_OPEN", err.path, "", std::nullopt, err.message);
      return false;
    }
    Findings df;
    const std::string dense_path = (fs::path(dir) / m.dense_name).string();
    have_dense = load_model(dense_path, StReadOptions{}, dense, df) && !df.has_errors() && dense.format == ModelFormat::gguf;
    if (!have_dense) {  // its tensors would go unverified: say so, never a silent pass
      findings.append(df);
      findings.error("VERIFY_INPUT", dense_path, "", std::nullopt,
                     "the pack's dense GGUF does not read cleanly: its tensors are not verified");
    }
    for (const auto& b : m.blobs) {
      for (const auto& p : b.parts) {
        // validate_expert_pack has range-checked every part against experts.bin and the source.
        const std::string blob = pack_blob_name(b);
        CpuSide cpu = reference.empty()
                          ? CpuSide{&experts, b.offset + p.offset,
                                    "CPU decode of the same bytes (" + experts.path() + " " + blob + " part " + p.tensor + ")"}
                          : CpuSide{&ref, p.source_offset,
                                    "CPU decode of reference " + reference + " tensor " + p.tensor + ", its slice at byte " +
                                        std::to_string(p.source_offset)};
        plan_ggml_range(be, o, p.tensor, blob, static_cast<int32_t>(p.type_id), p.ne0, p.size, experts, b.offset + p.offset,
                        std::move(cpu), ahead, jobs);
      }
    }
    // The dense remainder, device against the CPU of the reference's tensor of the same
    // name, type and shape (without a reference, of its own bytes).
    const bool have_source = !reference.empty() && load_gguf_reference(reference, source, findings);
    if (have_dense && (reference.empty() || have_source))
      plan_gguf_checks(be, o, dense, have_source ? &source : nullptr, true, ahead, jobs);
    return true;
  }
};


// Content findings (a part's hash or source bytes differ) still leave every range valid:
// decode anyway, so the report names the element that changed.
bool pack_geometry_ok(const Findings& validation) {
  return std::all_of(validation.items().begin(), validation.items().end(), [](const Finding& f) {
    return f.severity != Severity::error || f.code == "PACK_PART_HASH" || f.code == "PACK_SOURCE_MISMATCH" ||
           f.code == "PACK_DENSE_MISMATCH" || f.code == "PACK_A_LOG_MISMATCH";
  });
}

// The checks of the manifest's text against experts.bin's actual size (names, alignment,
// every blob and part inside the file and sized as its type and shape say): what bounds
// the jobs' reads and buffers. Cheap (no payload byte is read).
bool pack_quick_geometry_ok(const std::string& dir, const PackManifest& m) {
  std::error_code ec;
  const uint64_t experts_size = fs::file_size(fs::path(dir) / m.experts_name, ec);
  if (ec) return false;
  std::string text;
  IoError err;
  if (!read_input_file((fs::path(dir) / kPackManifestFile).string(), uint64_t{1} << 30, text, err)) return false;
  Findings quick;
  check_pack_manifest_text(text, (fs::path(dir) / kPackManifestFile).string(), experts_size, quick);
  return !quick.has_errors();
}

// Joins a thread when the scope ends, however it ends.
struct Joined {
  std::thread t;
  ~Joined() {
    if (t.joinable()) t.join();
  }
};

}  // namespace

// An expert pack: validate_expert_pack first (manifest, experts.bin's geometry and part
// hashes, dense.gguf; with the reference its SHA-256 and every part byte-equal to its
// source slice), then every blob part decoded against its source. The validation is one
// thread's pass over each file, so when the manifest's geometry passes the quick check
// above it runs on a thread of its own beside the decode jobs, and the jobs' results are
// kept only if the full validation leaves every range valid: the report (validation
// findings first, then the jobs' in job order) is the same as when it ran first.
void verify_pack(const std::string& path, DecodeBackend& be, const VerifyOptions& o, VerifyReport& r) {
  r.kind = "expert-pack";
  PackManifest m;
  Findings mf;
  const bool manifest_read = read_pack_manifest(path, m, mf);
  if (!manifest_read || !pack_quick_geometry_ok(path, m)) {  // one after the other, as always
    validate_expert_pack(path, o.reference, false, r.findings);
    if (!pack_geometry_ok(r.findings)) return;
    if (!manifest_read) return r.findings.append(mf);
    std::vector<Job> jobs;
    PackPlan pack;
    if (pack.plan(be, o, path, m, o.reference, jobs, r.findings)) run_jobs(jobs, be, o, r, &pack.ahead);
    return;
  }
  Findings validation, plan_findings;
  VerifyReport decoded;
  std::vector<Job> jobs;
  PackPlan pack;
  bool planned = false;
  {
    Joined validator{std::thread([&] { validate_expert_pack(path, o.reference, false, validation); })};
    planned = pack.plan(be, o, path, m, o.reference, jobs, plan_findings);
    if (planned) run_jobs(jobs, be, o, decoded, &pack.ahead);
  }
  r.findings.append(validation);
  if (!pack_geometry_ok(validation)) return;
  r.findings.append(plan_findings);
  if (!planned) return;
  for (auto& c : decoded.checks) r.checks.push_back(std::move(c));
  r.findings.append(decoded.findings);
  r.input_bytes_decoded = decoded.input_bytes_decoded;
  r.max_rel_l2 = decoded.max_rel_l2;
  r.jobs = decoded.jobs;
  r.jobs_in_flight = decoded.jobs_in_flight;
  r.stages = decoded.stages;
}

}  // namespace ckpt
