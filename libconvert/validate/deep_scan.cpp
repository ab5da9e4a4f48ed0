#include "validate/deep_scan.h"

#include <algorithm>
#include <filesystem>
#include <mutex>

#include <tbb/parallel_for.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include "formats/ggml_types.h"
#include "io/hash.h"
#include "io/mapped_file.h"
#include "numerics/float_scan.h"
#include "numerics/ggml_block_scan.h"

namespace ckpt {
namespace {

constexpr uint32_t kNoTensor = UINT32_MAX;

// One contiguous part of a chunk: either bytes of one tensor or bytes between tensors.
struct Piece {
  uint32_t tensor = kNoTensor;  // index into view.tensors
  uint32_t buf_off = 0;         // offset inside the chunk buffer
  uint32_t len = 0;
  bool first = false;           // first piece of its tensor
  bool last = false;            // last piece of its tensor
};

// One pread: [file_off, file_off + len), cut into pieces that never straddle a
// tensor boundary, and inside a tensor stay whole blocks (quant blocks are scanned whole).
struct Chunk {
  uint64_t file_off = 0;
  uint32_t len = 0;
  std::vector<Piece> pieces;
};

// Bytes of the smallest unit a tensor may be cut at.
uint32_t cut_unit(const ModelTensor& t) {
  if (t.ggml_type >= 0) {
    const GgmlTypeInfo* info = ggml_type_info(t.ggml_type);
    return info && info->type_size > 0 ? info->type_size : 1;
  }
  if (t.dtype) return std::max<uint32_t>(1, dtype_bits(*t.dtype) / 8);
  return 1;
}

class ChunkPlanner {
 public:
  explicit ChunkPlanner(bool whole_file) : whole_file_(whole_file) {}

  void add_region(uint64_t off, uint64_t len, uint32_t tensor, uint32_t unit) {
    if (pos_ != off) {
      flush();
      pos_ = off;
    }
    if (len == 0 && tensor != kNoTensor) {  // empty tensors still get a hash
      open_if_needed();
      current_.pieces.push_back(Piece{tensor, current_.len, 0, true, true});
      return;
    }
    uint64_t remaining = len;
    bool first = true;
    while (remaining > 0) {
      open_if_needed();
      uint64_t cap = kScanChunkBytes - current_.len;
      uint64_t take = std::min(remaining, cap);
      if (take < remaining) take -= take % unit;
      if (take == 0) {
        flush();
        continue;
      }
      bool last = take == remaining;
      current_.pieces.push_back(Piece{tensor, current_.len, static_cast<uint32_t>(take), first, last});
      current_.len += static_cast<uint32_t>(take);
      pos_ += take;
      remaining -= take;
      first = false;
      if (current_.len == kScanChunkBytes) flush();
    }
  }
  bool whole_file() const { return whole_file_; }
  uint64_t pos() const { return pos_; }
  std::vector<Chunk> finish() {
    flush();
    return std::move(chunks_);
  }

 private:
  void open_if_needed() {
    if (!open_) {
      current_ = Chunk{};
      current_.file_off = pos_;
      open_ = true;
    }
  }
  void flush() {
    if (open_ && (current_.len > 0 || !current_.pieces.empty())) chunks_.push_back(std::move(current_));
    open_ = false;
  }
  bool whole_file_;
  bool open_ = false;
  uint64_t pos_ = 0;
  Chunk current_;
  std::vector<Chunk> chunks_;
};

std::vector<Chunk> plan_file(const ModelView& view, uint32_t file, uint64_t file_size, const ScanRequest& req) {
  std::vector<uint32_t> order;
  if (req.values)
    for (uint32_t i = 0; i < view.tensors.size(); ++i)
      if (view.tensors[i].file == file && view.tensors[i].payload_ok) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return view.tensors[a].offset < view.tensors[b].offset;
  });
  ChunkPlanner planner(req.sha256);
  for (uint32_t i : order) {
    const ModelTensor& t = view.tensors[i];
    if (t.offset < planner.pos()) continue;  // overlaps an earlier tensor: the header check reported it
    if (req.sha256 && t.offset > planner.pos())
      planner.add_region(planner.pos(), t.offset - planner.pos(), kNoTensor, 1);
    planner.add_region(t.offset, t.nbytes, i, cut_unit(t));
  }
  if (req.sha256 && planner.pos() < file_size)
    planner.add_region(planner.pos(), file_size - planner.pos(), kNoTensor, 1);
  return planner.finish();
}

struct PieceScan {
  ValueScan values;
  BlockScanResult blocks;
};

struct Work {
  const Chunk* chunk = nullptr;
  std::vector<uint8_t>* buffer = nullptr;
  std::vector<PieceScan> scans;
};

void scan_piece(const ModelTensor& t, std::span<const uint8_t> bytes, PieceScan& out) {
  if (t.ggml_type >= 0)
    scan_ggml_blocks(t.ggml_type, bytes, 0, out.blocks);
  else if (t.dtype)
    out.values = scan_values(*t.dtype, bytes);
}

class FileScanner {
 public:
  FileScanner(const ModelView& view, uint32_t file, const ScanRequest& req, std::vector<TensorScanResult>& results)
      : view_(view), file_(file), req_(req), results_(results) {}

  bool run(FileScanResult& out, Findings& f) {
    IoError err;
    MappedFile mf;
    const std::string& display = view_.files[file_];
    if (!mf.open(view_.file_paths[file_], err)) {
      f.error("IO_OPEN", display, "", std::nullopt, "cannot read: " + err.message);
      return false;
    }
    mf.advise_sequential();
    std::vector<Chunk> chunks = plan_file(view_, file_, mf.size(), req_);
    pool_.resize(kScanTokens);
    for (auto& b : pool_) b.reserve(kScanChunkBytes);
    size_t next = 0;
    bool io_failed = false;
    Sha256 sha;
    tbb::this_task_arena::isolate([&] {
      tbb::parallel_pipeline(
          kScanTokens,
          tbb::make_filter<void, Work*>(tbb::filter_mode::serial_in_order,
                                        [&](tbb::flow_control& fc) -> Work* {
                                          if (next == chunks.size() || io_failed) {
                                            fc.stop();
                                            return nullptr;
                                          }
                                          return read_chunk(mf, chunks[next++], err, io_failed);
                                        }) &
              tbb::make_filter<Work*, Work*>(tbb::filter_mode::parallel,
                                             [&](Work* w) { return check_values(w); }) &
              tbb::make_filter<Work*, void>(tbb::filter_mode::serial_in_order, [&](Work* w) {
                consume(w, sha, out);
              }));
    });
    if (io_failed) {
      f.error("IO_READ", display, "", std::nullopt, "read failed: " + err.message);
      return false;
    }
    if (req_.sha256) out.sha256 = sha.hex_digest();
    return true;
  }

 private:
  Work* read_chunk(const MappedFile& mf, const Chunk& c, IoError& err, bool& failed) {
    auto* w = new Work;
    w->chunk = &c;
    {
      std::lock_guard lock(pool_mutex_);
      w->buffer = &pool_[free_slot()];
    }
    w->buffer->resize(c.len);
    if (!mf.read_at(c.file_off, *w->buffer, err)) failed = true;
    return w;
  }

  size_t free_slot() {
    for (size_t i = 0; i < in_use_.size(); ++i)
      if (!in_use_[i]) {
        in_use_[i] = true;
        return i;
      }
    return 0;  // unreachable: the pipeline never has more than kScanTokens items in flight
  }

  Work* check_values(Work* w) {
    if (!req_.values) return w;
    w->scans.resize(w->chunk->pieces.size());
    for (size_t i = 0; i < w->chunk->pieces.size(); ++i) {
      const Piece& p = w->chunk->pieces[i];
      if (p.tensor == kNoTensor) continue;
      scan_piece(view_.tensors[p.tensor], std::span<const uint8_t>(w->buffer->data() + p.buf_off, p.len),
                 w->scans[i]);
    }
    return w;
  }

  void consume(Work* w, Sha256& sha, FileScanResult& out) {
    const Chunk& c = *w->chunk;
    if (req_.sha256) sha.update(std::span<const uint8_t>(w->buffer->data(), c.len));
    for (size_t i = 0; i < c.pieces.size(); ++i) {
      const Piece& p = c.pieces[i];
      if (p.tensor == kNoTensor || !req_.values) continue;
      TensorScanResult& r = results_[p.tensor];
      if (p.first) xxh_.reset();
      xxh_.update(std::span<const uint8_t>(w->buffer->data() + p.buf_off, p.len));
      merge(r, w->scans[i], c.file_off + p.buf_off);
      if (p.last) {
        r.xxh3 = xxh_.digest();
        r.scanned = true;
      }
    }
    out.bytes_read += c.len;
    if (req_.on_progress) req_.on_progress(c.len);
    {
      std::lock_guard lock(pool_mutex_);
      in_use_[static_cast<size_t>(w->buffer - pool_.data())] = false;
    }
    delete w;
  }

  static void merge(TensorScanResult& r, const PieceScan& s, uint64_t piece_file_off) {
    auto first = s.values.first_bad ? s.values.first_bad : s.blocks.first_bad_byte;
    if (!r.first_bad && first) r.first_bad = piece_file_off + *first;
    r.nan += s.values.nan + s.blocks.nan;
    r.inf += s.values.inf + s.blocks.inf;
    r.bad_block_scales += s.blocks.bad_scales;
    r.bad_e8m0 += s.blocks.bad_e8m0;
  }

  const ModelView& view_;
  uint32_t file_;
  const ScanRequest& req_;
  std::vector<TensorScanResult>& results_;
  std::vector<std::vector<uint8_t>> pool_;
  std::vector<bool> in_use_ = std::vector<bool>(kScanTokens, false);
  std::mutex pool_mutex_;
  Xxh3 xxh_;
};

std::string count_text(uint64_t n, const char* what) { return std::to_string(n) + " " + what; }

}  // namespace

uint64_t scan_total_bytes(const ModelView& view, const ScanRequest& req) {
  uint64_t total = 0;
  if (req.sha256) {
    for (const auto& p : view.file_paths) {
      std::error_code ec;
      auto size = std::filesystem::file_size(p, ec);
      if (!ec) total += size;
    }
    return total;
  }
  if (req.values)
    for (const auto& t : view.tensors)
      if (t.payload_ok) total += t.nbytes;
  return total;
}

void scan_model(const ModelView& view, const ScanRequest& req, std::vector<TensorScanResult>& results,
                std::vector<FileScanResult>& files, Findings& findings) {
  results.assign(view.tensors.size(), {});
  files.assign(view.files.size(), {});
  std::vector<Findings> per_file(view.files.size());
  tbb::parallel_for(size_t{0}, view.files.size(), [&](size_t i) {
    FileScanner scanner(view, static_cast<uint32_t>(i), req, results);
    scanner.run(files[i], per_file[i]);
  });
  for (const auto& f : per_file) findings.append(f);
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
              t.type + " tensor '" + t.name + "' has " + count_text(r.bad_block_scales, "NaN/Inf fp16 block scales") +
                  where);
    if (r.bad_e8m0)
      f.error("GGUF_MXFP4_E8M0_RESERVED", file, t.name, r.first_bad,
              "MXFP4 tensor '" + t.name + "' has " + count_text(r.bad_e8m0, "block exponents of 0xFF") + where);
  }
}

}  // namespace ckpt
