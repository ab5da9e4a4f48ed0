#include "convert/shard_writer.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sys/stat.h>

#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include "io/atomic_file.h"
#include "io/hash.h"
#include "numerics/fp8.h"

namespace ckpt {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors payloads are little-endian");

constexpr uint64_t kCopyUnitBytes = 8u << 20;     // one read = one write for copied tensors
constexpr uint64_t kDequantInBytes = 4u << 20;    // FP8 bytes per unit; BF16 output is twice that
constexpr uint64_t kTokenBytes = kCopyUnitBytes + kDequantInBytes;  // worst case held by one token

// One step of the shard: a byte range of one tensor (a row range when dequantizing).
struct Unit {
  size_t k = 0;           // index into shard.tensors
  uint64_t in_off = 0;    // absolute input offset
  uint64_t in_len = 0;
  uint64_t row_begin = 0; // dequant: first weight row
  bool first = false, last = false;
};

// A scale grid read once per tensor, shared by the tensor's units.
struct ScaleGrid {
  std::vector<uint8_t> bytes;
  std::vector<float> f32;  // F32 multipliers (aligned copy)
};

struct Work {
  const Unit* unit = nullptr;
  std::vector<uint8_t> in;
  std::vector<uint8_t> out;  // dequant output; copies write `in` directly
  std::shared_ptr<const ScaleGrid> scale;
  std::string error;
  WriteStatus error_kind = WriteStatus::ok;
};

std::vector<Unit> plan_units(const ModelView& view, const PlannedShard& shard) {
  std::vector<Unit> units;
  for (size_t k = 0; k < shard.tensors.size(); ++k) {
    const ModelTensor& t = view.tensors[shard.tensors[k].input];
    bool dequant = shard.tensors[k].action != TensorAction::copy;
    uint64_t cols = dequant ? std::max<uint64_t>(1, t.shape[1]) : 1;
    uint64_t step = dequant ? std::max<uint64_t>(1, kDequantInBytes / cols) * cols : kCopyUnitBytes;
    size_t first = units.size();
    for (uint64_t done = 0; done < t.nbytes; done += step)
      units.push_back(Unit{k, t.offset + done, std::min(step, t.nbytes - done), done / cols, false, false});
    if (units.size() == first) units.push_back(Unit{k, t.offset, 0, 0, false, false});  // empty tensor
    units[first].first = true;
    units.back().last = true;
  }
  return units;
}

std::string element_text(const ModelTensor& t, uint64_t element) {
  uint64_t cols = t.shape.size() == 2 && t.shape[1] ? t.shape[1] : 1;
  return "element " + std::to_string(element) + " (row " + std::to_string(element / cols) + ", column " +
         std::to_string(element % cols) + ")";
}

class ShardPipeline {
 public:
  ShardPipeline(const LoadedModel& in, const ConversionPlan& plan, const PlannedShard& shard,
                const ShardWriteOptions& options, AtomicOutput& out)
      : in_(in), view_(in.view), plan_(plan), shard_(shard), options_(options), out_(out),
        digests_(view_.tensors.size()) {}

  bool run(std::string& error, WriteStatus& kind, uint64_t& written, Xxh3& out_hash) {
    std::vector<Unit> units = plan_units(view_, shard_);
    size_t next = 0;
    std::atomic<bool> failed{false};
    size_t tokens = std::clamp<size_t>(options_.memory_budget / kTokenBytes, 2, 16);
    tbb::this_task_arena::isolate([&] {
      tbb::parallel_pipeline(
          tokens,
          tbb::make_filter<void, Work*>(tbb::filter_mode::serial_in_order,
                                        [&](tbb::flow_control& fc) -> Work* {
                                          if (next == units.size() || failed) {
                                            fc.stop();
                                            return nullptr;
                                          }
                                          return read(units[next++]);
                                        }) &
              tbb::make_filter<Work*, Work*>(tbb::filter_mode::parallel, [&](Work* w) { return transform(w); }) &
              tbb::make_filter<Work*, void>(tbb::filter_mode::serial_in_order, [&](Work* w) {
                std::unique_ptr<Work> owned(w);
                if (failed) return;
                if (!w->error.empty()) {
                  error = w->error;
                  kind = w->error_kind;
                  failed = true;
                } else if (!write(*w, out_hash, written)) {
                  error = write_error_;
                  kind = WriteStatus::io_error;
                  failed = true;
                }
              }));
    });
    return !failed;
  }

  // xxh3 over the length prefix + header, then each input tensor's xxh3 in file order.
  std::string input_digest(const std::string& header_bytes) {
    std::vector<size_t> order;
    for (size_t i = 0; i < view_.tensors.size(); ++i)
      if (view_.tensors[i].file == shard_.input_file) order.push_back(i);
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return view_.tensors[a].offset < view_.tensors[b].offset; });
    Xxh3 h;
    h.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(header_bytes.data()), header_bytes.size()));
    const MappedFile& mf = in_.checkpoint.shards[shard_.input_file].file;
    for (size_t i : order) {
      if (!digests_[i]) {  // not streamed (a consumed scale): hash it now, it is small
        Xxh3 t;
        t.update(mf.slice(view_.tensors[i].offset, view_.tensors[i].nbytes));
        digests_[i] = t.digest();
      }
      uint64_t d = *digests_[i];
      h.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&d), sizeof d));
    }
    return xxh3_hex(h.digest());
  }

 private:
  const MappedFile& file_of(const ModelTensor& t) const { return in_.checkpoint.shards[t.file].file; }

  Work* read(const Unit& u) {
    auto w = std::make_unique<Work>();
    w->unit = &u;
    const PlannedTensor& pt = shard_.tensors[u.k];
    const ModelTensor& t = view_.tensors[pt.input];
    if (u.first) {
      tensor_hash_.reset();
      current_scale_.reset();
      if (pt.action != TensorAction::copy && !load_scale(pt, *w)) return w.release();
    }
    w->scale = current_scale_;
    w->in.resize(u.in_len);
    IoError err;
    if (u.in_len && !file_of(t).read_at(u.in_off, w->in, err)) {
      w->error = view_.file_of(t) + ": cannot read tensor " + t.name + " at byte " + std::to_string(u.in_off) +
                 ": " + err.message;
      w->error_kind = WriteStatus::io_error;
      return w.release();
    }
    tensor_hash_.update(w->in);
    if (u.last) digests_[pt.input] = tensor_hash_.digest();
    return w.release();
  }

  bool load_scale(const PlannedTensor& pt, Work& w) {
    const ModelTensor& s = view_.tensors[pt.scale];
    if (s.nbytes > options_.memory_budget / 4) {
      w.error = view_.file_of(s) + ": scale " + s.name + " is " + std::to_string(s.nbytes) +
                " bytes, too large for the memory budget";
      w.error_kind = WriteStatus::input_error;
      return false;
    }
    auto grid = std::make_shared<ScaleGrid>();
    grid->bytes.resize(s.nbytes);
    IoError err;
    if (!file_of(s).read_at(s.offset, grid->bytes, err)) {
      w.error = view_.file_of(s) + ": cannot read scale " + s.name + ": " + err.message;
      w.error_kind = WriteStatus::io_error;
      return false;
    }
    if (pt.action == TensorAction::dequant_f32) {
      grid->f32.resize(s.nbytes / 4);
      std::memcpy(grid->f32.data(), grid->bytes.data(), grid->f32.size() * 4);
    }
    Xxh3 h;
    h.update(grid->bytes);
    if (s.file == shard_.input_file) digests_[pt.scale] = h.digest();
    current_scale_ = std::move(grid);
    return true;
  }

  Work* transform(Work* w) {
    if (!w->error.empty()) return w;
    const PlannedTensor& pt = shard_.tensors[w->unit->k];
    if (pt.action == TensorAction::copy) return w;
    const ModelTensor& t = view_.tensors[pt.input];
    Fp8Grid grid{t.shape[0], t.shape[1], plan_.pairing.block_rows, plan_.pairing.block_cols};
    w->out.resize(w->in.size() * 2);
    std::optional<Fp8Fault> fault =
        pt.action == TensorAction::dequant_e8m0
            ? dequant_fp8_rows_e8m0(w->in, w->unit->row_begin, grid, w->scale->bytes, w->out)
            : dequant_fp8_rows_f32(w->in, w->unit->row_begin, grid, w->scale->f32, w->out);
    if (fault) {
      w->error = fault_text(t, pt, *fault);
      w->error_kind = WriteStatus::input_error;
    }
    return w;
  }

  std::string fault_text(const ModelTensor& t, const PlannedTensor& pt, const Fp8Fault& fault) const {
    const ModelTensor& s = view_.tensors[pt.scale];
    switch (fault.kind) {
      case Fp8Fault::weight_nan:
        return view_.file_of(t) + ": tensor " + t.name + " holds an F8_E4M3 NaN code (0x7F/0xFF) at " +
               element_text(t, fault.element) + ", byte " + std::to_string(t.offset + fault.element) +
               "; refusing to write NaN";
      case Fp8Fault::scale_nan:
        return view_.file_of(s) + ": scale " + s.name + " is NaN (E8M0 0xFF or non-finite F32) for " +
               element_text(t, fault.element) + " of " + t.name;
      default:
        return view_.file_of(t) + ": tensor " + t.name + ": internal size mismatch while dequantizing";
    }
  }

  bool write(const Work& w, Xxh3& out_hash, uint64_t& written) {
    const std::vector<uint8_t>& bytes = shard_.tensors[w.unit->k].action == TensorAction::copy ? w.in : w.out;
    if (!out_.write(bytes.data(), bytes.size(), write_error_)) return false;
    out_hash.update(bytes);
    written += bytes.size();
    if (options_.on_progress) options_.on_progress(bytes.size());
    if (!partial_point_passed_) {
      partial_point_passed_ = true;
      kill_point("shard payload partly written");
    }
    return true;
  }

  const LoadedModel& in_;
  const ModelView& view_;
  const ConversionPlan& plan_;
  const PlannedShard& shard_;
  const ShardWriteOptions& options_;
  AtomicOutput& out_;
  std::vector<std::optional<uint64_t>> digests_;
  Xxh3 tensor_hash_;
  std::shared_ptr<const ScaleGrid> current_scale_;
  std::string write_error_;
  bool partial_point_passed_ = false;
};

std::string header_bytes_of(const std::string& header) {
  std::string bytes(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return bytes + header;
}

std::string hash_text(std::string_view text) {
  Xxh3 h;
  h.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  return xxh3_hex(h.digest());
}

}  // namespace

void kill_point(const char* where) {
  static const long kill_at = [] {
    const char* v = std::getenv("CKPT_TEST_KILL_AT");
    return v ? std::atol(v) : 0L;
  }();
  static std::atomic<long> count{0};
  if (kill_at > 0 && ++count == kill_at) {
    std::fprintf(stderr, "ckpt: CKPT_TEST_KILL_AT=%ld: killed at '%s'\n", kill_at, where);
    std::raise(SIGKILL);
  }
}

ShardRecord input_identity(const LoadedModel& in, const PlannedShard& shard) {
  ShardRecord r;
  const Shard& src = in.checkpoint.shards[shard.input_file];
  r.shard = shard.name;
  r.input_size = src.file.size();
  struct stat st {};
  if (::fstat(src.file.fd(), &st) == 0)
    r.input_mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  if (src.header) {
    auto prefix = src.file.slice(0, src.header->data_start);
    Xxh3 h;
    h.update(prefix);
    r.input_header_xxh3 = xxh3_hex(h.digest());
  }
  r.plan_xxh3 = hash_text(header_bytes_of(shard.header));
  r.tool_version = CKPT_VERSION;
  return r;
}

bool same_input_identity(const ShardRecord& a, const ShardRecord& b) {
  return a.shard == b.shard && a.input_size == b.input_size && a.input_mtime_ns == b.input_mtime_ns &&
         a.input_header_xxh3 == b.input_header_xxh3 && a.plan_xxh3 == b.plan_xxh3;
}

ShardWriteResult write_shard(const LoadedModel& in, const ConversionPlan& plan, const PlannedShard& shard,
                             const std::string& out_path, const ShardWriteOptions& options) {
  ShardWriteResult result;
  result.record = input_identity(in, shard);
  AtomicOutput out(out_path);
  std::string error;
  std::string head = header_bytes_of(shard.header);
  if (!out.open(error) || !out.write(reinterpret_cast<const uint8_t*>(head.data()), head.size(), error)) {
    result.status = WriteStatus::io_error;
    result.message = error;
    return result;
  }
  kill_point("shard header written");
  Xxh3 out_hash;
  out_hash.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(head.data()), head.size()));
  uint64_t written = head.size();
  ShardPipeline pipeline(in, plan, shard, options, out);
  WriteStatus kind = WriteStatus::ok;
  if (!pipeline.run(error, kind, written, out_hash)) {
    result.status = kind;
    result.message = error;
    return result;
  }
  kill_point("shard complete, before rename");
  if (!out.commit(error)) {
    result.status = WriteStatus::io_error;
    result.message = error;
    return result;
  }
  kill_point("shard renamed, before record");
  const Shard& src = in.checkpoint.shards[shard.input_file];
  result.record.input_xxh3 = pipeline.input_digest(std::string(
      reinterpret_cast<const char*>(src.file.slice(0, src.header->data_start).data()), src.header->data_start));
  result.record.output_size = written;
  result.record.output_xxh3 = xxh3_hex(out_hash.digest());
  return result;
}

}  // namespace ckpt
