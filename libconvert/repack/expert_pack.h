// `ckpt repack-experts`: splits a GGUF MoE file into
//   OUT_DIR/experts.bin    one blob per (layer, expert) = that expert's slices of
//                          ffn_gate_exps, ffn_up_exps (or fused ffn_gate_up_exps) and
//                          ffn_down_exps, raw quantized bytes unchanged, each blob at a
//                          multiple of `align` and the file zero-padded to one, so an
//                          O_DIRECT reader can fetch any expert with one aligned pread;
//   OUT_DIR/dense.gguf     every other tensor and all metadata as a valid GGUF v3, with
//                          ckptkit.repack.* keys (and blk.N.ssm_a -> blk.N.A_log with --a-log fix);
//   OUT_DIR/manifest.json  schemas/expert-pack-manifest.schema.json, written last; it
//                          records the source's SHA-256 (one stream, on a thread of its
//                          own) and its SHA-256 tree (io/sha256_tree.h, on all cores).
// (gguf.md §7-§8). Streams with fixed-size buffers; every output is written under a hidden
// temporary name, fsynced and renamed, so an interrupted run leaves no partial file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/findings.h"
#include "core/outcome.h"
#include "formats/pack_manifest.h"
#include "io/sha256_tree.h"

namespace ckpt {

struct RepackOptions {
  uint64_t align = 4096;   // power of two, 512 B .. 1 GiB
  bool fix_a_log = true;   // blk.N.ssm_a (−exp(A_log)) -> blk.N.A_log = log(−ssm_a)
  bool overwrite = false;  // allow a non-empty OUT_DIR
  // Chunk size of the source's SHA-256 tree (io/sha256_tree.h) in the manifest: a power
  // of two in [kSha256TreeMinChunk, kSha256TreeMaxChunk], or 0 for none (a manifest as
  // written before the tree, which validators check with the serial SHA-256).
  uint64_t tree_chunk = kSha256TreeDefaultChunk;
  // The whole-file SHA-256 of the source in the manifest too (`--source-sha256`: what
  // `sha256sum` and the Hub print). It is one stream on one core (~1.2 GB/s with SHA-NI),
  // the bound of the whole repack on any disk faster than that (docs/benchmarks.md), so it
  // is asked for, not the default: the tree, hashed on every core and as strong, names the
  // source alone (it needs tree_chunk != 0 then).
  bool source_sha256 = false;
  // (bytes done, bytes total) over everything read and written; may be empty.
  std::function<void(uint64_t done, uint64_t total)> progress;
  // Called under OUT_DIR's lock once the manifest (the pack's last file) is written, before
  // the lock is released; false reports a failure (the hook has set the report's status and
  // findings). May be empty. `--sign-key` (sign/provenance.h: OUT_DIR/model.sig and
  // OUT_DIR/model.provenance, which an --overwrite run withdraws with the manifest).
  std::function<bool(struct RepackReport&)> after_finish;
};


// Status values (the CLI's exit codes).
enum RepackStatus : int { kRepackOk = 0, kRepackInputError = 1, kRepackUsage = 2, kRepackIoError = 3 };
// What a status means for the exit code (core/outcome.h), and its JSON `status` name.
inline Outcome repack_outcome(int status) {
  static constexpr Outcome kOutcome[] = {Outcome::ok, Outcome::findings, Outcome::usage, Outcome::io};
  return status >= kRepackOk && status <= kRepackIoError ? kOutcome[status] : Outcome::io;
}

struct RepackPartStats {
  std::string tensor, role, type;  // role: gate, up, gate_up, down
  uint64_t expert_stride = 0;      // bytes of one expert's slice
  bool stride_aligned = false;     // expert_stride % align == 0
};

struct RepackLayerStats {
  uint64_t layer = 0, experts = 0;
  std::vector<RepackPartStats> parts;
  uint64_t blob_size = 0, blob_stride = 0;  // unpadded / padded to align
  std::vector<std::string> reasons;         // why the source layout is not O_DIRECT-ready
};

struct RepackReport {
  int status = kRepackOk;
  Findings findings;
  std::string input, out_dir, source_sha256, a_log;  // a_log: "fixed" or "kept"; source_sha256: "" when not asked
  std::string source_tree_root;                       // the SHA-256 tree's root; "" without one
  uint64_t align = 0, tree_chunk = 0;                 // tree_chunk: 0 without a tree
  std::vector<RepackLayerStats> layers;
  uint64_t blobs = 0, experts_bytes = 0, dense_bytes = 0, dense_tensors = 0, a_log_tensors = 0;
  uint64_t source_bytes = 0, padding_bytes = 0;
  double seconds = 0;
};

RepackReport repack_experts(const std::string& in, const std::string& out_dir, const RepackOptions& options);

// ckptkit/repack-report/v1: options, per-layer stats, totals, findings.
std::string repack_report_json(const RepackReport& report);

// The A_log recovery of one value: log(−ssm_a) in double, rounded once to f32. Only
// meaningful for finite, strictly negative inputs (the caller checks).
float a_log_from_ssm_a(float ssm_a);

}  // namespace ckpt
