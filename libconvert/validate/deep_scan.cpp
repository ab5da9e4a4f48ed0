#include "validate/deep_scan.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>

#include <unistd.h>

#include <tbb/parallel_for.h>

#include "core/ggml_types.h"
#include "io/hash.h"
#include "io/mapped_file.h"
#include "io/read_ahead.h"
#include "numerics/float_scan.h"
#include "numerics/ggml_block_scan.h"

namespace ckpt {
namespace {

// Bytes of the smallest unit a tensor may be cut at: quant blocks are scanned whole.
uint64_t cut_unit(const ModelTensor& t) {
  if (t.ggml_type >= 0) {
    const GgmlTypeInfo* info = ggml_type_info(t.ggml_type);
    return info && info->type_size > 0 ? info->type_size : 1;
  }
  if (t.dtype) return std::max<uint32_t>(1, dtype_bits(*t.dtype) / 8);
  return 1;
}

// Reads steps of a file with pread into a per-thread buffer small enough to stay in
// the core's cache while it is hashed and checked: one copy out of the page cache (as
// `cat` does), no page-table work, and a shrinking file is a clean I/O error instead
// of a SIGBUS on a mapping.
class StepReader {
 public:
  explicit StepReader(const MappedFile& file) : file_(file) {}
  // bytes [off, off + n) of the file, n <= kScanStepBytes.
  bool read(uint64_t off, uint64_t n, std::span<const uint8_t>& out, std::string& error) {
    thread_local std::vector<uint8_t> buffer;
    if (buffer.size() < n) buffer.resize(kScanStepBytes);
    IoError err;
    if (!file_.read_at(off, std::span<uint8_t>(buffer.data(), n), err)) {
      error = err.message;
      return false;
    }
    out = std::span<const uint8_t>(buffer.data(), n);
    return true;
  }

 private:
  const MappedFile& file_;
};

void merge_scan(TensorScanResult& r, const ValueScan& v, const BlockScanResult& b, uint64_t step_off) {
  auto first = v.first_bad ? v.first_bad : b.first_bad_byte;
  if (!r.first_bad && first) r.first_bad = step_off + *first;
  r.nan += v.nan + b.nan;
  r.inf += v.inf + b.inf;
  r.bad_block_scales += b.bad_scales;
  r.bad_e8m0 += b.bad_e8m0;
}

void note_out_of_range(TensorScanResult& r, uint64_t element, int64_t value, int64_t limit) {
  r.range_limit = limit;
  if (!r.first_out_of_range) {
    r.first_out_of_range = element;
    r.first_out_of_range_value = value;
  }
  ++r.out_of_range;
}

// The tensor's ValueRule over whole elements of one step; `first` is the step's first element.
void check_rule(const ModelTensor& t, ValueRule rule, std::span<const uint8_t> bytes, uint64_t first,
                TensorScanResult& r) {
  if (rule.kind == ValueRule::scale && t.dtype) {
    r.scale_encoding = rule.encoding;
    check_scale_values(rule.encoding, *t.dtype, bytes, first, r.scales);
  } else if (rule.kind == ValueRule::expert_id && (t.dtype == Dtype::I64 || t.dtype == Dtype::I32)) {
    const size_t size = t.dtype == Dtype::I64 ? 8 : 4;
    for (size_t i = 0; i + size <= bytes.size(); i += size) {
      int64_t v = 0;
      if (size == 8) {
        std::memcpy(&v, bytes.data() + i, 8);
      } else {
        int32_t v32;
        std::memcpy(&v32, bytes.data() + i, 4);
        v = v32;
      }
      if (v < 0 || v >= rule.limit) note_out_of_range(r, first + i / size, v, rule.limit);
    }
  }
}

// Feeds one step of a tensor's bytes to its hash and value checks.
void scan_step(const ModelTensor& t, std::span<const uint8_t> bytes, uint64_t file_off, Xxh3& xxh,
               TensorScanResult& r, ValueRule rule = {}) {
  xxh.update(bytes);
  if (rule.kind != ValueRule::none && t.dtype)
    check_rule(t, rule, bytes, (file_off - t.offset) / std::max<uint32_t>(1, dtype_bits(*t.dtype) / 8), r);
  ValueScan v;
  BlockScanResult b;
  if (t.ggml_type >= 0)
    scan_ggml_blocks(t.ggml_type, bytes, 0, b);
  else if (t.dtype)
    v = scan_values(*t.dtype, bytes);
  merge_scan(r, v, b, file_off);
}

// Largest step not above kScanStepBytes that keeps whole cut units.
uint64_t step_size(uint64_t unit) { return std::max<uint64_t>(unit, kScanStepBytes - kScanStepBytes % unit); }

ValueRule rule_of(const ScanRequest& req, size_t tensor) {
  return tensor < req.rules.size() ? req.rules[tensor] : ValueRule{};
}

void scan_tensor(const MappedFile& mf, const ModelTensor& t, ValueRule rule, const ScanRequest& req,
                 TensorScanResult& r) {
  Xxh3 xxh;
  StepReader reader(mf);
  const uint64_t step = step_size(cut_unit(t));
  for (uint64_t done = 0; done < t.nbytes;) {
    uint64_t n = std::min(step, t.nbytes - done);
    std::span<const uint8_t> bytes;
    if (!reader.read(t.offset + done, n, bytes, r.io_error)) return;
    scan_step(t, bytes, t.offset + done, xxh, r, rule);
    done += n;
    if (req.on_progress) req.on_progress(n);
  }
  r.xxh3 = xxh.digest();
  r.scanned = true;
}

// Whole-file pass (--sha256): the file in order once; tensors met on the way are
// hashed and checked in the same pass, so --deep --sha256 still reads each byte once.
// A reader thread preads the file ahead (io/read_ahead.h) and the file's SHA-256 runs on
// a thread of its own over every byte, so one file hashes at the speed of one SHA-256
// core while this thread checks the tensors.
void scan_file_in_order(const MappedFile& mf, const ModelView& view, const std::vector<uint32_t>& tensors,
                        const ScanRequest& req, std::vector<TensorScanResult>& results, FileScanResult& out) {
  Sha256 sha;  // outlives the reader: its tap thread feeds it
  ReadAheadOptions ro;
  ro.tap = [&sha](std::span<const uint8_t> bytes) { sha.update(bytes); };
  ReadAhead reader(mf, std::move(ro));
  uint64_t pos = 0;
  auto skip_to = [&](uint64_t end) {  // bytes only the file hash needs
    if (end > pos && req.on_progress) req.on_progress(end - pos);
    pos = std::max(pos, end);
  };
  for (uint32_t i : tensors) {
    const ModelTensor& t = view.tensors[i];
    if (t.offset < pos) continue;  // overlaps an earlier tensor: the header check reported it
    skip_to(t.offset);
    Xxh3 xxh;
    const uint64_t step = step_size(cut_unit(t));  // <= kScanStepBytes < the read-ahead block
    for (uint64_t done = 0; done < t.nbytes;) {
      uint64_t n = std::min(step, t.nbytes - done);
      std::span<const uint8_t> bytes;
      if (!reader.read(pos, n, bytes, out.io_error)) return;
      scan_step(t, bytes, pos, xxh, results[i], rule_of(req, i));
      pos += n;
      done += n;
      if (req.on_progress) req.on_progress(n);
    }
    results[i].xxh3 = xxh.digest();
    results[i].scanned = true;
  }
  skip_to(mf.size());
  if (!reader.finish(out.io_error)) return;
  out.sha256 = sha.hex_digest();
  out.bytes_read = mf.size();
}

std::string count_text(uint64_t n, const char* what) { return std::to_string(n) + " " + what; }

// "element 300 (row 1, column 44)" for a 2-D tensor, "element 300" otherwise.
std::string element_text(const ModelTensor& t, uint64_t element) {
  std::string text = "element " + std::to_string(element);
  if (t.shape.size() == 2 && t.shape[1] > 0)
    text += " (row " + std::to_string(element / t.shape[1]) + ", column " + std::to_string(element % t.shape[1]) + ")";
  return text;
}

uint64_t element_offset(const ModelTensor& t, uint64_t element) {
  return t.offset + element * (t.dtype ? std::max<uint32_t>(1, dtype_bits(*t.dtype) / 8) : 1);
}

// An FP8 weight's E8M0 exponents outside 3..246 (both ends of the exact range, the rule's
// overflows_bf16 and inexact_bf16), one finding as before the rule existed.
void report_fp8_exponent_range(const std::string& file, const ModelTensor& t, const ScaleCheck& c, Findings& f) {
  const auto& over = c.of(ScaleProblem::overflows_bf16);
  const auto& under = c.of(ScaleProblem::inexact_bf16);
  if (!over.count && !under.count) return;
  const auto& first = !under.count || (over.count && over.first < under.first) ? over : under;
  const int64_t b = static_cast<int64_t>(first.value);
  f.error("FP8_SCALE_RANGE", file, t.name, element_offset(t, first.first),
          (t.dtype == Dtype::U8 ? "U8 (E8M0) scale '" : "F8_E8M0 scale '") + t.name + "' holds " + count_text(over.count + under.count, "exponents") +
              " outside -124..119 (bytes 3..246), where FP8 x E8M0 is exact in BF16 (below: subnormal rounding; "
              "above: overflow); first at " + element_text(t, first.first) + ": byte " + std::to_string(b) +
              " = 2^" + std::to_string(b - 127));
}

// What the scale rule refuses (numerics/scale_rule.h), as convert would refuse it. NaN codes
// of an F8_E8M0 tensor are E8M0_RESERVED already (the dtype's own scan); FP8 E8M0 overflow is
// in FP8_SCALE_RANGE.
void report_scale_findings(const ModelView& view, const ModelTensor& t, const TensorScanResult& r, Findings& f) {
  const std::string& file = view.files[t.file];
  const ScaleCheck& c = r.scales;
  const bool fp8_e8m0 = r.scale_encoding == ScaleEncoding::fp8_e8m0;
  if (fp8_e8m0) report_fp8_exponent_range(file, t, c, f);
  ScaleCheck refused;
  for (size_t p = 0; p < c.by_problem.size(); ++p) {
    const auto problem = static_cast<ScaleProblem>(p);
    if (!scale_problem_refused(problem)) continue;
    if (problem == ScaleProblem::nan && t.dtype == Dtype::F8_E8M0) continue;
    if (problem == ScaleProblem::overflows_bf16 && fp8_e8m0) continue;
    refused.by_problem[p] = c.by_problem[p];
  }
  const ScaleProblem first = refused.first_refused();
  if (first == ScaleProblem::none) return;
  const auto& tally = refused.of(first);
  const bool nan_code = first == ScaleProblem::nan && r.scale_encoding != ScaleEncoding::fp8_multiplier;
  f.error(nan_code ? "E8M0_RESERVED" : "SCALE_INVALID", file, t.name, element_offset(t, tally.first),
          t.type + " scale '" + t.name + "' holds " + count_text(refused.refused(), "values") +
              " that convert refuses (NaN, not finite, not positive, or a largest product beyond BF16); first at " +
              element_text(t, tally.first) + ", which " + scale_problem_text(r.scale_encoding, first, tally.value));
}

void report_range_findings(const ModelView& view, const ModelTensor& t, const TensorScanResult& r, Findings& f) {
  report_scale_findings(view, t, r, f);
  if (!r.out_of_range) return;
  const std::string& file = view.files[t.file];
  const uint64_t element = *r.first_out_of_range;
  f.error("EXPERT_ID_RANGE", file, t.name, element_offset(t, element),
          t.type + " routing table '" + t.name + "' holds " + count_text(r.out_of_range, "expert ids") +
              " outside [0, " + std::to_string(r.range_limit) + ") (n_routed_experts); first at " +
              element_text(t, element) + ": " + std::to_string(r.first_out_of_range_value));
}

}  // namespace

void add_scale_rules(const ModelView& view, const std::vector<Fp8Pair>& pairs,
                     const std::vector<Mxfp4BlocksPair>& blocks, std::vector<ValueRule>& rules) {
  rules.resize(view.tensors.size());
  for (const auto& p : pairs)
    rules[p.scale] = ValueRule{ValueRule::scale, 0,
                               p.f32_scale ? ScaleEncoding::fp8_multiplier : ScaleEncoding::fp8_e8m0};
  for (const auto& b : blocks) rules[b.scales] = ValueRule{ValueRule::scale, 0, ScaleEncoding::mxfp4_e8m0};
  for (const auto& t : view.tensors) {
    if (t.type != "I8" || !is_mxfp4_expert_name(t.name)) continue;
    if (const ModelTensor* s = view.find(t.name.substr(0, t.name.size() - 7) + ".scale"))
      rules[static_cast<size_t>(s - view.tensors.data())] = ValueRule{ValueRule::scale, 0, ScaleEncoding::mxfp4_e8m0};
  }
}

uint64_t scan_total_bytes(const ModelView& view, const ScanRequest& req) {
  uint64_t total = 0;
  if (req.sha256) {
    for (size_t f = 0; f < view.file_paths.size(); ++f) {
      if (!req.wants(f)) continue;
      std::error_code ec;
      auto size = std::filesystem::file_size(view.file_paths[f], ec);
      if (!ec) total += size;
    }
    return total;
  }
  if (req.values)
    for (const auto& t : view.tensors)
      if (t.payload_ok && req.wants(t.file)) total += t.nbytes;
  return total;
}

void scan_model(const ModelView& view, const ScanRequest& req, std::vector<TensorScanResult>& results,
                std::vector<FileScanResult>& files, Findings& findings) {
  results.assign(view.tensors.size(), {});
  files.assign(view.files.size(), {});
  std::vector<std::unique_ptr<MappedFile>> maps(view.files.size());
  std::vector<std::vector<uint32_t>> tensors_of(view.files.size());
  for (size_t f = 0; f < view.files.size(); ++f) {
    if (!req.wants(f)) continue;  // another partition's file
    IoError err;
    auto mf = std::make_unique<MappedFile>();
    if (!mf->open(view.file_paths[f], err)) {
      findings.error("IO_OPEN", view.files[f], "", std::nullopt, "cannot read: " + err.message);
      continue;
    }
    mf->advise_sequential();
    maps[f] = std::move(mf);
  }
  // Only tensors whose header checks proved them inside their file are read.
  for (uint32_t i = 0; i < view.tensors.size(); ++i) {
    const ModelTensor& t = view.tensors[i];
    if (req.values && t.payload_ok && maps[t.file] && t.offset + t.nbytes <= maps[t.file]->size())
      tensors_of[t.file].push_back(i);
  }
  for (auto& list : tensors_of)
    std::sort(list.begin(), list.end(),
              [&](uint32_t a, uint32_t b) { return view.tensors[a].offset < view.tensors[b].offset; });

  if (req.sha256) {
    tbb::parallel_for(size_t{0}, view.files.size(), [&](size_t f) {
      if (maps[f]) scan_file_in_order(*maps[f], view, tensors_of[f], req, results, files[f]);
    }, tbb::simple_partitioner());
    return;
  }
  // --deep alone: tensors are independent, so they spread over all cores.
  std::vector<uint32_t> all;
  for (auto& list : tensors_of) all.insert(all.end(), list.begin(), list.end());
  tbb::parallel_for(size_t{0}, all.size(), [&](size_t k) {
    const ModelTensor& t = view.tensors[all[k]];
    scan_tensor(*maps[t.file], t, rule_of(req, all[k]), req, results[all[k]]);
  }, tbb::simple_partitioner());
  for (uint32_t i : all) files[view.tensors[i].file].bytes_read += view.tensors[i].nbytes;
}

void report_io_findings(const ModelView& view, const std::vector<TensorScanResult>& results,
                        const std::vector<FileScanResult>& files, Findings& f) {
  for (size_t i = 0; i < files.size(); ++i)
    if (!files[i].io_error.empty())
      f.error("IO_READ", view.files[i], "", std::nullopt, "read failed: " + files[i].io_error);
  for (size_t i = 0; i < results.size(); ++i)
    if (!results[i].io_error.empty())
      f.error("IO_READ", view.files[view.tensors[i].file], view.tensors[i].name, view.tensors[i].offset,
              "read failed: " + results[i].io_error);
}

void report_value_findings(const ModelView& view, const std::vector<TensorScanResult>& results, Findings& f) {
  for (size_t i = 0; i < view.tensors.size(); ++i) {
    const ModelTensor& t = view.tensors[i];
    const TensorScanResult& r = results[i];
    if (!r.scanned) continue;
    const std::string& file = view.files[t.file];
    std::string where = r.first_bad ? "; first at file byte " + std::to_string(*r.first_bad) : "";
    if (t.dtype == Dtype::F8_E4M3 && r.nan)
      f.error("FP8_NAN_CODE", file, t.name, r.first_bad,
              "F8_E4M3 tensor '" + t.name + "' holds " + count_text(r.nan, "NaN codes (0x7F/0xFF)") + where);
    else if (t.dtype == Dtype::F8_E8M0 && r.nan)
      f.error("E8M0_RESERVED", file, t.name, r.first_bad,
              "F8_E8M0 scale '" + t.name + "' holds " + count_text(r.nan, "0xFF (NaN) codes") + where);
    else if (r.nan)
      f.error("DATA_NAN", file, t.name, r.first_bad,
              t.type + " tensor '" + t.name + "' holds " + count_text(r.nan, "NaN values") + where);
    if (r.inf)
      f.error("DATA_INF", file, t.name, r.first_bad,
              t.type + " tensor '" + t.name + "' holds " + count_text(r.inf, "infinite values") + where);
    if (r.bad_block_scales)
      f.error("GGUF_BLOCK_SCALE_NAN", file, t.name, r.first_bad,
              t.type + " tensor '" + t.name + "' has " +
                  count_text(r.bad_block_scales, "NaN/Inf fp16 block scales") + where);
    if (r.bad_e8m0)
      f.error("GGUF_MXFP4_E8M0_RESERVED", file, t.name, r.first_bad,
              "MXFP4 tensor '" + t.name + "' has " + count_text(r.bad_e8m0, "block exponents of 0xFF") + where);
    report_range_findings(view, t, r, f);
  }
}

}  // namespace ckpt
