#include "convert/shard_writer.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include <tbb/global_control.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include "io/atomic_file.h"
#include "io/direct_writer.h"
#include "io/hash.h"
#include "numerics/fp8.h"
#include "numerics/int8_shift.h"
#include "numerics/mxfp4.h"
#include "numerics/scale_regrid.h"
#include "numerics/scale_rule.h"

namespace ckpt {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors payloads are little-endian");

std::atomic<unsigned> g_shard_workers{0};      // 0: kDefaultShardWorkers
std::atomic<unsigned> g_active_transforms{0}, g_peak_transforms{0};
std::atomic<bool> g_count_transforms{false};  // set by reset_shard_pipeline_peak_concurrency (tests)

// Counts the units being transformed at once (shard_pipeline_peak_concurrency), only once a
// test asked: otherwise every unit would pay two read-modify-writes of one shared line.
struct ActiveTransform {
  const bool counting = g_count_transforms.load(std::memory_order_relaxed);
  ActiveTransform() {
    if (!counting) return;
    const unsigned now = ++g_active_transforms;
    unsigned peak = g_peak_transforms.load();
    while (now > peak && !g_peak_transforms.compare_exchange_weak(peak, now)) {
    }
  }
  ~ActiveTransform() {
    if (counting) --g_active_transforms;
  }
};

constexpr uint64_t kCopyUnitBytes = 8u << 20;     // one read = one write for copied tensors
constexpr uint64_t kDequantInBytes = 4u << 20;    // FP8 bytes per unit; BF16 output is twice that
constexpr uint64_t kMxfp4InBytes = 2u << 20;      // packed MXFP4 bytes per unit; BF16 output is 4x that

// Input bytes a unit reads: one tensor's range (`tensor` = its view index, `whole` when
// the range is the entire tensor, so its xxh3 can be recorded on the way).
struct Segment {
  size_t tensor = 0;
  uint64_t offset = 0;  // absolute offset in the tensor's file
  uint64_t length = 0;
  bool whole = false;
};

// One step of the shard, written in order: a byte range of one tensor (a row range when
// dequantizing), or one expert's slab of a fused INT8-shift tensor.
struct Unit {
  size_t k = 0;            // index into shard.tensors
  std::vector<Segment> in; // read back to back into the work buffer
  uint64_t out_len = 0;
  uint64_t row_begin = 0;  // dequant: first weight row
  uint64_t expert = 0;     // remap: which expert's slab; MXFP4 blocks: the first expert
  uint64_t expert_count = 1;  // MXFP4 blocks: experts in this unit
  bool first = false, last = false;
  uint64_t in_len() const {
    uint64_t n = 0;
    for (const auto& s : in) n += s.length;
    return n;
  }
};

// A scale grid read once per tensor, shared by the tensor's units.
struct ScaleGrid {
  std::vector<uint8_t> bytes;
  std::vector<float> f32;  // F32 multipliers (aligned copy)
  uint64_t xxh3 = 0;       // of `bytes`: a scale in another shard is part of this shard's identity
};

struct Work {
  const Unit* unit = nullptr;
  std::vector<uint8_t> in;
  std::vector<uint8_t> out;  // dequant / remap output; copies write `in` directly
  std::shared_ptr<const ScaleGrid> scale;
  RemapStats stats;          // remap_mxfp4 units
  std::string error;
  WriteStatus error_kind = WriteStatus::ok;
};

// Works in flight are recycled: their buffers keep their capacity, so the pipeline does
// not map, fault in and zero fresh multi-MiB buffers for every unit (kernel time that
// otherwise rivals the conversion itself).
class WorkPool {
 public:
  std::unique_ptr<Work> take() {
    std::lock_guard lock(mutex_);
    if (free_.empty()) return std::make_unique<Work>();
    auto w = std::move(free_.back());
    free_.pop_back();
    return w;
  }
  void give(std::unique_ptr<Work> w) {
    w->unit = nullptr;
    w->scale.reset();
    w->stats = RemapStats{};
    w->error.clear();
    w->error_kind = WriteStatus::ok;
    std::lock_guard lock(mutex_);
    free_.push_back(std::move(w));
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<Work>> free_;
};

void add_tensor_units(const ModelView& view, const PlannedShard& shard, size_t k, std::vector<Unit>& units) {
  const ModelTensor& t = view.tensors[shard.tensors[k].input];
  bool dequant = shard.tensors[k].action != TensorAction::copy;
  bool mxfp4 = shard.tensors[k].action == TensorAction::dequant_mxfp4;
  uint64_t cols = dequant ? std::max<uint64_t>(1, t.shape[1]) : 1;  // input bytes per row
  uint64_t step = dequant ? std::max<uint64_t>(1, (mxfp4 ? kMxfp4InBytes : kDequantInBytes) / cols) * cols
                          : kCopyUnitBytes;
  for (uint64_t done = 0; done < t.nbytes || done == 0; done += step) {
    uint64_t n = std::min(step, t.nbytes - done);
    Unit u;
    u.k = k;
    u.in.push_back(Segment{shard.tensors[k].input, t.offset + done, n, n == t.nbytes});
    u.out_len = mxfp4 ? 4 * n : dequant ? 2 * n : n;
    u.row_begin = done / cols;
    units.push_back(std::move(u));
    if (t.nbytes == 0) break;  // an empty tensor is one empty unit
  }
}

// One unit per expert: mxfp4 reads each part's weight and scale, shift2 and
// channel_scale only the scales.
void add_remap_units(const ModelView& view, const ConversionPlan& plan, const PlannedShard& shard, size_t k,
                     std::vector<Unit>& units) {
  const PlannedTensor& pt = shard.tensors[k];
  const FusedMatrix& m = plan.fused[pt.fused];
  for (uint64_t e = 0; e < m.experts; ++e) {
    Unit u;
    u.k = k;
    u.expert = e;
    for (const auto& [weight, scale] : m.parts[e]) {
      if (pt.action == TensorAction::remap_mxfp4) {
        const ModelTensor& w = view.tensors[weight];
        u.in.push_back(Segment{weight, w.offset, w.nbytes, true});
      }
      const ModelTensor& s = view.tensors[scale];
      u.in.push_back(Segment{scale, s.offset, s.nbytes, true});
    }
    u.out_len = pt.action == TensorAction::remap_mxfp4   ? remap_mxfp4_bytes(m.params)
                : pt.action == TensorAction::remap_shift2 ? remap_shift2_bytes(m.params)
                                                          : remap_channel_scale_bytes(m.params);
    units.push_back(std::move(u));
  }
}

// gpt-oss MXFP4 blocks: whole experts (each [R, K] is transposed whole), as many as fit in
// kMxfp4InBytes, at least one, per unit. The unit count is bounded by the tensor's bytes,
// never by the expert count of its header: [100000000, 0, 1, 16] holds no byte and is one
// empty unit.
void add_blocks_units(const ModelView& view, const PlannedShard& shard, size_t k, std::vector<Unit>& units) {
  const PlannedTensor& pt = shard.tensors[k];
  const ModelTensor& t = view.tensors[pt.input];
  const uint64_t per_expert = pt.experts ? t.nbytes / pt.experts : 0;
  if (per_expert == 0) {
    Unit u;
    u.k = k;
    u.expert_count = 0;
    u.in.push_back(Segment{pt.input, t.offset, 0, t.nbytes == 0});
    units.push_back(std::move(u));
    return;
  }
  const uint64_t per_unit = std::max<uint64_t>(1, kMxfp4InBytes / per_expert);
  for (uint64_t e = 0; e < pt.experts; e += per_unit) {
    const uint64_t n = std::min(per_unit, pt.experts - e);
    Unit u;
    u.k = k;
    u.expert = e;
    u.expert_count = n;
    u.row_begin = e * pt.rows;
    u.in.push_back(Segment{pt.input, t.offset + e * per_expert, n * per_expert, n * per_expert == t.nbytes});
    u.out_len = 4 * n * per_expert;
    units.push_back(std::move(u));
  }
}

// ckpt relayout: one unit per scale grid, read whole and written re-gridded (a grid is
// small: one value per block; the memory budget bounds it in transform).
void add_regrid_unit(const ModelView& view, const PlannedShard& shard, size_t k, std::vector<Unit>& units) {
  const PlannedTensor& pt = shard.tensors[k];
  const ModelTensor& s = view.tensors[pt.input];
  Unit u;
  u.k = k;
  u.in.push_back(Segment{pt.input, s.offset, s.nbytes, true});
  u.out_len = shard.writer_tensors[k].nbytes;
  units.push_back(std::move(u));
}

std::vector<Unit> plan_units(const ModelView& view, const ConversionPlan& plan, const PlannedShard& shard) {
  std::vector<Unit> units;
  for (size_t k = 0; k < shard.tensors.size(); ++k) {
    size_t first = units.size();
    if (shard.tensors[k].action == TensorAction::regrid_scale)
      add_regrid_unit(view, shard, k, units);
    else if (shard.tensors[k].action == TensorAction::dequant_mxfp4_blocks)
      add_blocks_units(view, shard, k, units);
    else if (is_remap(shard.tensors[k].action))
      add_remap_units(view, plan, shard, k, units);
    else
      add_tensor_units(view, shard, k, units);
    units[first].first = true;
    units.back().last = true;
  }
  return units;
}

// Bytes one pipeline token holds at most: its input and output buffers.
uint64_t largest_unit_bytes(const std::vector<Unit>& units) {
  uint64_t most = 1;
  for (const auto& u : units) most = std::max(most, u.in_len() + u.out_len);
  return most;
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

  // Four stages, so that no per-byte serial step bounds the shard: the units are admitted
  // in order (a tensor's scale grid read and checked with its first unit), read and
  // transformed in parallel, hashed in order (each input tensor's xxh3 and the output's),
  // and handed to the writer in order. The two in-order byte stages run on two threads.
  bool run(std::string& error, WriteStatus& kind, uint64_t& written, Xxh3& out_hash) {
    std::vector<Unit> units = plan_units(view_, plan_, shard_);
    size_t next = 0;
    std::atomic<bool> failed{false};
    const size_t tokens = pipeline_tokens(options_.memory_budget, largest_unit_bytes(units));
    tbb::task_arena workers(static_cast<int>(shard_pipeline_workers()));
    workers.execute([&] {
      tbb::parallel_pipeline(
          tokens,
          tbb::make_filter<void, Work*>(tbb::filter_mode::serial_in_order,
                                        [&](tbb::flow_control& fc) -> Work* {
                                          if (next == units.size() || failed) {
                                            fc.stop();
                                            return nullptr;
                                          }
                                          return admit(units[next++]);
                                        }) &
              tbb::make_filter<Work*, Work*>(tbb::filter_mode::parallel,
                                             [&](Work* w) {
                                               ActiveTransform active;
                                               return transform(read(w));
                                             }) &
              tbb::make_filter<Work*, Work*>(tbb::filter_mode::serial_in_order,
                                             [&](Work* w) { return hash(w, out_hash); }) &
              tbb::make_filter<Work*, void>(tbb::filter_mode::serial_in_order, [&](Work* w) {
                std::unique_ptr<Work> owned(w);
                struct Recycle {
                  WorkPool& pool;
                  std::unique_ptr<Work>& work;
                  ~Recycle() { pool.give(std::move(work)); }
                } recycle{pool_, owned};
                if (failed) return;
                if (!w->error.empty()) {
                  error = w->error;
                  kind = w->error_kind;
                  failed = true;
                } else if (!write(*w, written)) {
                  error = write_error_;
                  kind = WriteStatus::io_error;
                  failed = true;
                }
              }));
    });
    return !failed;
  }

  // Every input tensor read so far with the xxh3 of its bytes as they were read.
  std::vector<std::pair<size_t, uint64_t>> input_digests() const {
    std::vector<std::pair<size_t, uint64_t>> out;
    for (size_t i = 0; i < digests_.size(); ++i)
      if (digests_[i]) out.emplace_back(i, *digests_[i]);
    return out;
  }

 private:
  const MappedFile& file_of(const ModelTensor& t) const { return in_.checkpoint.shards[t.file].file; }

  // In order: the unit's work, with its tensor's scale grid (read and checked once, with
  // the tensor's first unit).
  Work* admit(const Unit& u) {
    auto w = pool_.take();
    w->unit = &u;
    const PlannedTensor& pt = shard_.tensors[u.k];
    const bool dequant = pt.action == TensorAction::dequant_e8m0 || pt.action == TensorAction::dequant_f32 ||
                         pt.action == TensorAction::dequant_mxfp4 || pt.action == TensorAction::dequant_mxfp4_blocks;
    if (u.first) {
      current_scale_.reset();
      if (dequant && !load_scale(pt, *w)) return w.release();
    }
    w->scale = current_scale_;
    if (dequant && !w->scale) {
      // The tensor's scale was refused in its first unit, whose error is written (in order)
      // before this one: the later units of the tensor are admitted before that error stops
      // the pipeline and must not be dequantized without a grid.
      w->error = "scale of " + view_.tensors[pt.input].name + " refused";
      w->error_kind = WriteStatus::input_error;
    }
    return w.release();
  }

  // In parallel: the unit's input bytes, its segments back to back.
  Work* read(Work* w) {
    if (!w->error.empty()) return w;
    const Unit& u = *w->unit;
    w->in.resize(u.in_len());
    uint64_t at = 0;
    for (const Segment& s : u.in) {
      const ModelTensor& t = view_.tensors[s.tensor];
      std::span<uint8_t> dst(w->in.data() + at, s.length);
      IoError err;
      if (s.length && !file_of(t).read_at(s.offset, dst, err)) {
        w->error = view_.file_of(t) + ": cannot read tensor " + t.name + " at byte " + std::to_string(s.offset) +
                   ": " + err.message;
        w->error_kind = WriteStatus::io_error;
        return w;
      }
      at += s.length;
    }
    return w;
  }

  // In order: each input tensor's xxh3 as its bytes were read, and the output's.
  Work* hash(Work* w, Xxh3& out_hash) {
    if (!w->error.empty()) return w;
    const Unit& u = *w->unit;
    const PlannedTensor& pt = shard_.tensors[u.k];
    if (u.first) {
      tensor_hash_.reset();
      if (w->scale) digests_[pt.scale] = w->scale->xxh3;
    }
    uint64_t at = 0;
    for (const Segment& s : u.in) {
      record_digest(s, std::span<const uint8_t>(w->in.data() + at, s.length), is_remap(pt.action));
      at += s.length;
    }
    out_hash.update(output_of(*w));
    return w;
  }

  // The unit's output bytes: a copied range is written as it was read.
  const std::vector<uint8_t>& output_of(const Work& w) const {
    return shard_.tensors[w.unit->k].action == TensorAction::copy ? w.in : w.out;
  }

  // Each input tensor's xxh3, whichever file holds it, for the shard record: streamed
  // tensors hash as they pass; a remapped expert tensor is read whole in one unit.
  void record_digest(const Segment& s, std::span<const uint8_t> bytes, bool remap) {
    if (remap) {
      if (s.whole && !digests_[s.tensor]) {
        Xxh3 h;
        h.update(bytes);
        digests_[s.tensor] = h.digest();
      }
      return;
    }
    tensor_hash_.update(bytes);
    if (s.offset + s.length == view_.tensors[s.tensor].offset + view_.tensors[s.tensor].nbytes)
      digests_[s.tensor] = tensor_hash_.digest();
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
    if (pt.action == TensorAction::dequant_f32 && !(s.dtype && scale_grid_to_f32(*s.dtype, grid->bytes, grid->f32))) {
      w.error = view_.file_of(s) + ": scale " + s.name + " is " + s.type + ", not an F32/BF16/F16 multiplier";
      w.error_kind = WriteStatus::input_error;
      return false;
    }
    if (!scale_rule_holds(pt, s, grid->bytes, w)) return false;
    Xxh3 h;
    h.update(grid->bytes);
    grid->xxh3 = h.digest();  // recorded in order by hash(): part of this shard's identity
    current_scale_ = std::move(grid);
    return true;
  }

  // The one scale-validity rule (numerics/scale_rule.h), the rule validate --deep applies:
  // a grid holding a refused value is an input error naming the scale's element and byte,
  // before any weight of the tensor is read.
  bool scale_rule_holds(const PlannedTensor& pt, const ModelTensor& s, std::span<const uint8_t> bytes, Work& w) {
    const ScaleEncoding encoding = pt.action == TensorAction::dequant_e8m0  ? ScaleEncoding::fp8_e8m0
                                   : pt.action == TensorAction::dequant_f32 ? ScaleEncoding::fp8_multiplier
                                                                             : ScaleEncoding::mxfp4_e8m0;
    ScaleCheck check;
    if (s.dtype) check_scale_values(encoding, *s.dtype, bytes, 0, check);
    if (check.first_refused() == ScaleProblem::none) return true;
    const uint64_t esize = s.dtype ? std::max<uint32_t>(1, dtype_bits(*s.dtype) / 8) : 1;
    w.error = scale_refusal_text(encoding, check, view_.file_of(s), s.name, s.offset, esize, s.shape,
                                 view_.tensors[pt.input].name);
    w.error_kind = WriteStatus::input_error;
    return false;
  }

  Work* transform(Work* w) {
    if (!w->error.empty()) return w;
    const PlannedTensor& pt = shard_.tensors[w->unit->k];
    if (pt.action == TensorAction::copy) return w;
    if (pt.action == TensorAction::regrid_scale) return regrid(w, pt);
    if (is_remap(pt.action)) return remap(w, pt);
    if (pt.action == TensorAction::dequant_mxfp4) return dequant_experts(w, pt);
    if (pt.action == TensorAction::dequant_mxfp4_blocks) return dequant_blocks(w, pt);
    const ModelTensor& t = view_.tensors[pt.input];
    const Fp8Grid grid = planned_fp8_grid(plan_, pt, t);
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

  // ckpt relayout: the old scale grid repeated onto the new block (numerics/scale_regrid.h).
  Work* regrid(Work* w, const PlannedTensor& pt) {
    const ModelTensor& s = view_.tensors[pt.input];
    const uint64_t elements = s.shape.size() == 2 ? s.shape[0] * s.shape[1] : 0;
    const Regrid r{Fp8Grid{pt.rows, pt.k, pt.block_rows, pt.block_cols}, plan_.regrid_rows, plan_.regrid_cols,
                   elements ? s.nbytes / elements : 0};
    if (w->unit->out_len > options_.memory_budget / 4) {
      w->error = view_.file_of(s) + ": scale " + s.name + " re-gridded is " + std::to_string(w->unit->out_len) +
                 " bytes, too large for the memory budget";
      w->error_kind = WriteStatus::input_error;
      return w;
    }
    w->out.resize(w->unit->out_len);
    if (!regrid_scales(r, w->in, w->out)) {
      const std::string why = regrid_problem(r);
      w->error = view_.file_of(s) + ": scale " + s.name + " cannot be re-gridded to " +
                 std::to_string(plan_.regrid_rows) + "x" + std::to_string(plan_.regrid_cols) + ": " +
                 (why.empty() ? "its size is not its grid's" : why);
      w->error_kind = WriteStatus::input_error;
    }
    return w;
  }

  // Rows of one MXFP4 expert weight to BF16 [rows, K] (numerics/mxfp4.h): each row's E8M0
  // scales are the same rows of the tensor's scale grid, read once per tensor.
  Work* dequant_experts(Work* w, const PlannedTensor& pt) {
    const ModelTensor& t = view_.tensors[pt.input];
    const uint64_t packed_cols = t.shape[1], k = 2 * packed_cols, blocks = k / 32;
    const uint64_t rows = packed_cols ? w->in.size() / packed_cols : 0;
    w->out.resize(w->unit->out_len);
    std::span<const uint8_t> scales;
    if (blocks && (w->unit->row_begin + rows) * blocks <= w->scale->bytes.size())
      scales = std::span<const uint8_t>(w->scale->bytes).subspan(w->unit->row_begin * blocks, rows * blocks);
    std::optional<Mxfp4Fault> fault = dequant_mxfp4_rows(w->in, scales, k, w->unit->row_begin, w->out);
    if (fault) {
      w->error = mxfp4_fault_text(t, view_.tensors[pt.scale], k, *fault);
      w->error_kind = WriteStatus::input_error;
    }
    return w;
  }

  // One gpt-oss expert: its [R, K] MXFP4 rows to BF16, transposed to [K, R] (numerics/mxfp4.h;
  // transformers' BF16 layout: gate_up_proj [E, H, 2I], down_proj [E, I, H]).
  Work* dequant_blocks(Work* w, const PlannedTensor& pt) {
    const ModelTensor& t = view_.tensors[pt.input];
    const uint64_t rows = pt.rows, k = pt.k, blocks = k / 32;
    thread_local std::vector<uint8_t> scratch;
    w->out.resize(w->unit->out_len);
    const uint64_t count = w->unit->expert_count, per_expert = count ? w->in.size() / count : 0;
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t e = w->unit->expert + i;
      std::span<const uint8_t> scales;
      if ((e + 1) * rows * blocks <= w->scale->bytes.size())
        scales = std::span<const uint8_t>(w->scale->bytes).subspan(e * rows * blocks, rows * blocks);
      const auto in = std::span<const uint8_t>(w->in).subspan(i * per_expert, per_expert);
      const auto out = std::span<uint8_t>(w->out).subspan(4 * i * per_expert, 4 * per_expert);
      if (auto fault = dequant_mxfp4_transposed(in, scales, rows, k, e * rows, scratch, out)) {
        w->error = mxfp4_fault_text(t, view_.tensors[pt.scale], k, *fault);
        w->error_kind = WriteStatus::input_error;
        break;
      }
    }
    return w;
  }

  std::string mxfp4_fault_text(const ModelTensor& t, const ModelTensor& s, uint64_t k, const Mxfp4Fault& fault) const {
    const uint64_t row = k ? fault.element / k : 0, col = k ? fault.element % k : 0;
    const std::string where = "element " + std::to_string(fault.element) + " (row " + std::to_string(row) +
                              ", column " + std::to_string(col) + ")";
    switch (fault.kind) {
      case Mxfp4Fault::scale_nan:
        return view_.file_of(s) + ": scale " + s.name + " holds E8M0 0xFF (NaN) at row " + std::to_string(row) +
               ", block " + std::to_string(col / 32) + " (byte " + std::to_string(s.offset + row * (k / 32) + col / 32) +
               "), used by " + where + " of " + t.name + "; refusing to write NaN";
      case Mxfp4Fault::overflow:
        return view_.file_of(t) + ": tensor " + t.name + ": " + where + ", byte " +
               std::to_string(t.offset + fault.element / 2) + ", times its scale 2^(" + s.name +
               " - 127) is beyond BF16's largest finite value (3.39e38); refusing to write inf";
      default:
        return view_.file_of(t) + ": tensor " + t.name + ": shapes the MXFP4 -> BF16 conversion cannot hold";
    }
  }

  // One expert's slab of a fused INT8-shift tensor (mxfp4-int8-shift.md §3-§4).
  Work* remap(Work* w, const PlannedTensor& pt) {
    const FusedMatrix& m = plan_.fused[pt.fused];
    std::vector<RemapPart> parts;
    uint64_t at = 0;
    for (const auto& [weight, scale] : m.parts[w->unit->expert]) {
      const ModelTensor& wt = view_.tensors[weight];
      const ModelTensor& st = view_.tensors[scale];
      RemapPart part;
      part.rows = wt.shape[0];
      if (pt.action == TensorAction::remap_mxfp4) {
        part.weight = std::span<const uint8_t>(w->in.data() + at, wt.nbytes);
        at += wt.nbytes;
      }
      part.scale = std::span<const uint8_t>(w->in.data() + at, st.nbytes);
      at += st.nbytes;
      parts.push_back(part);
    }
    w->out.resize(w->unit->out_len);  // every byte is written by the remap (padding included)
    std::optional<RemapFault> fault =
        pt.action == TensorAction::remap_mxfp4    ? remap_expert_mxfp4(parts, m.params, w->out, &w->stats)
        : pt.action == TensorAction::remap_shift2 ? remap_expert_shift2(parts, m.params, w->out)
                                                  : remap_expert_channel_scale(parts, m.params, w->out);
    if (fault) {
      w->error = remap_fault_text(m, w->unit->expert, *fault);
      w->error_kind = WriteStatus::input_error;
    }
    return w;
  }

  std::string remap_fault_text(const FusedMatrix& m, uint64_t expert, const RemapFault& fault) const {
    // Fused rows stack the parts: find which input tensor holds the faulty row.
    uint64_t row = fault.row;
    for (const auto& [weight, scale] : m.parts[expert]) {
      const ModelTensor& st = view_.tensors[scale];
      if (row < st.shape[0]) {
        if (fault.kind == RemapFault::e8m0_nan)
          return view_.file_of(st) + ": scale " + st.name + " holds E8M0 0xFF (NaN) at row " + std::to_string(row) +
                 ", block " + std::to_string(fault.block) + "; the INT8-shift form has no NaN";
        break;
      }
      row -= st.shape[0];
    }
    std::string what = fault.kind == RemapFault::overflow ? "a target outside int8 (raise no headroom above 3)"
                                                          : "shapes the INT8-shift form cannot hold";
    return "expert " + std::to_string(expert) + " of " + m.block + ".ffn.experts." + m.matrix + ": " + what;
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
      case Fp8Fault::overflow:
        return view_.file_of(t) + ": tensor " + t.name + ": " + element_text(t, fault.element) + ", byte " +
               std::to_string(t.offset + fault.element) + ", times its scale (" + s.name +
               ") is beyond BF16's largest finite value (3.39e38); refusing to write inf";
      default:
        return view_.file_of(t) + ": tensor " + t.name + ": internal size mismatch while dequantizing";
    }
  }

  bool write(const Work& w, uint64_t& written) {
    const PlannedTensor& pt = shard_.tensors[w.unit->k];
    const std::vector<uint8_t>& bytes = output_of(w);
    if (pt.action == TensorAction::remap_mxfp4) stats_[pt.fused].merge(w.stats);
    if (!out_.write(bytes.data(), bytes.size(), write_error_)) return false;
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
  WorkPool pool_;

 public:
  std::map<size_t, RemapStats> stats_;  // per fused matrix, merged in write order
};

}  // namespace

void kill_point(const char* where) {
  static const long kill_at = [] {
    const char* v = std::getenv("CKPT_TEST_KILL_AT");
    return v ? std::atol(v) : 0L;
  }();
  static const long stop_at = [] {
    const char* v = std::getenv("CKPT_TEST_STOP_AT");
    return v ? std::atol(v) : 0L;
  }();
  static std::atomic<long> count{0};
  if (kill_at <= 0 && stop_at <= 0) return;
  const long n = ++count;
  if (n == kill_at) {
    std::fprintf(stderr, "ckpt: CKPT_TEST_KILL_AT=%ld: killed at '%s'\n", kill_at, where);
    std::raise(SIGKILL);
  }
  if (n == stop_at) {
    std::fprintf(stderr, "ckpt: CKPT_TEST_STOP_AT=%ld: stopped at '%s'\n", stop_at, where);
    std::raise(SIGSTOP);
  }
}

void stop_point(const char* where) {
  static const char* stop_where = std::getenv("CKPT_TEST_STOP_WHERE");
  if (!stop_where || std::strcmp(stop_where, where) != 0) return;
  std::fprintf(stderr, "ckpt: CKPT_TEST_STOP_WHERE: stopped at '%s'\n", where);
  std::raise(SIGSTOP);
}

void set_shard_pipeline_workers(unsigned n) { g_shard_workers = n; }

unsigned shard_pipeline_workers() {
  const unsigned asked = g_shard_workers.load();
  // What TBB may use here: the cores this process may run on, and --threads (global_control).
  const size_t allowed = std::min<size_t>(static_cast<size_t>(std::max(1, tbb::this_task_arena::max_concurrency())),
                                          tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism));
  return static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(asked ? asked : kDefaultShardWorkers, allowed)));
}

unsigned shard_pipeline_peak_concurrency() { return g_peak_transforms.load(); }
void reset_shard_pipeline_peak_concurrency() {
  g_peak_transforms = 0;
  g_count_transforms = true;
}

size_t pipeline_tokens(uint64_t memory_budget, uint64_t largest_unit) {
  const uint64_t for_units = memory_budget > kDirectWriterBytes ? memory_budget - kDirectWriterBytes : 0;
  return static_cast<size_t>(std::clamp<uint64_t>(for_units / std::max<uint64_t>(1, largest_unit), 2, 16));
}

std::string shard_header_bytes(const PlannedShard& shard) {
  std::string bytes(8, '\0');
  uint64_t n = shard.header.size();
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return bytes + shard.header;
}

ShardWriteResult write_shard(const LoadedModel& in, const ConversionPlan& plan, const PlannedShard& shard,
                             const std::string& out_path, const ShardWriteOptions& options) {
  ShardWriteResult result;
  AtomicOutput out(out_path, options.mode, OutputUse::bulk);
  std::string error;
  std::string head = shard_header_bytes(shard);
  if (!out.open(error) || !out.reserve(shard.file_bytes, error) ||
      !out.write(reinterpret_cast<const uint8_t*>(head.data()), head.size(), error)) {
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
  result.input_digests = pipeline.input_digests();
  result.output_size = written;
  result.output_xxh3 = out_hash.digest();
  result.remap_stats = std::move(pipeline.stats_);
  return result;
}

}  // namespace ckpt
