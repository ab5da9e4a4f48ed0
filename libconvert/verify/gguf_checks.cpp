// The verifier's GGUF checks with digests ahead (verify/gguf_checks.h): every range of
// ggml blocks decoded on the device against the CPU's dequantization of the bytes it must
// equal, step by step, by digest where the backend has one.
#include "verify/gguf_checks.h"

#include <algorithm>
#include <filesystem>

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include "core/checked_math.h"
#include "core/ggml_types.h"
#include "numerics/ggml_dequant.h"
#include "verify/verifier.h"

namespace ckpt {
namespace {

class GgufVerifier : public Verifier {
 public:
  GgufVerifier(DecodeBackend& backend, const VerifyOptions& o, Sink& r) : Verifier(backend, o, r) {}

  // Whether a job's steps compare digests: the backend has them, --full-compare is off and
  // one row fits a digest.
  static bool digest_steps(const DecodeBackend& be, const VerifyOptions& o, uint64_t row_elems) {
    return be.has_ggml_digest() && !o.full_compare && row_elems <= kDigestMaxElems;
  }
  // The bytes of each step of a range of whole rows (the last may be shorter): at most the
  // backend's chunk, and kDigestMaxElems elements where digests are compared (a step then
  // holds only its input; a quarter as many backend calls, each with its fixed launches and
  // wait, as with kStepElems) or kStepElems where every element is (its f32 on both sides).
  static uint64_t step_bytes(uint64_t row_bytes, uint64_t row_elems, uint64_t bytes, uint64_t chunk, bool digest) {
    return std::min(rows_per_step(row_bytes, row_elems, chunk, digest) * row_bytes, bytes);
  }
  static uint64_t rows_per_step(uint64_t row_bytes, uint64_t row_elems, uint64_t chunk, bool digest) {
    const uint64_t elems = digest ? kDigestMaxElems : kStepElems;
    return std::max<uint64_t>(1, std::min(chunk / std::max<uint64_t>(1, row_bytes), elems / std::max<uint64_t>(1, row_elems)));
  }
  // Two input steps, and two f32 steps (device and CPU) when every element is compared, or
  // two f32 pieces when digests are (a differing step is then compared piece by piece).
  static uint64_t job_memory(const DecodeBackend& be, const VerifyOptions& o, int32_t type, uint64_t row_elems,
                             uint64_t bytes) {
    const GgmlTypeInfo* info = ggml_type_info(type);
    if (!info || info->block_size == 0 || info->type_size == 0 || row_elems % info->block_size || bytes == 0) return 0;
    const uint64_t row_bytes = row_elems / info->block_size * info->type_size;
    if (row_bytes == 0) return 0;
    const bool digest = digest_steps(be, o, row_elems);
    const uint64_t rows = std::min(rows_per_step(row_bytes, row_elems, std::max<uint64_t>(1, be.max_chunk_bytes()), digest),
                                   std::max<uint64_t>(1, bytes / row_bytes));
    const uint64_t f32 = digest ? 2 * 4 * kDigestPiece : 8 * rows * row_elems;
    return 2 * rows * row_bytes + f32;
  }

  // Dequantizes `bytes` of type `type` (whole rows of `row_elems`) read from `src` at
  // `src_offset` on the device; the CPU dequantizes `cpu` (the same bytes, or the ones they
  // must equal). `ahead_first`: the range's first slot in `ahead` (its CPU digests possibly
  // done).
  void verify_range(const std::string& tensor, const std::string& part, int32_t type, uint64_t row_elems,
                    uint64_t bytes, const MappedFile& src, uint64_t src_offset, const CpuSide& cpu,
                    const DigestsAhead* ahead = nullptr, size_t ahead_first = DigestsAhead::kNone) {
    const GgmlTypeInfo* info = ggml_type_info(type);
    VerifyCheck& c = add_check("ggml_dequant", tensor, part, 0, cpu.against);
    if (!info || info->block_size == 0 || info->type_size == 0 || row_elems % info->block_size)
      return fail(c, "VERIFY_UNSUPPORTED", src.path(), src_offset, "unsupported ggml type id " + std::to_string(type));
    // A zero-element tensor (some ne is 0; every reader accepts it) decodes to nothing on
    // both sides: a check of 0 elements, which is no evidence and is not counted (run_jobs).
    if (bytes == 0) return;
    const uint64_t row_bytes = row_elems / info->block_size * info->type_size;
    if (row_bytes == 0 || bytes % row_bytes) return fail(c, "VERIFY_LAYOUT", src.path(), src_offset, "byte length is not whole rows");
    c.elements = bytes / row_bytes * row_elems;
    // Digests first where the backend has them: 16 bytes back per step instead of every
    // f32 (8x a 4-bit input), the CPU's reference digested in cache-sized pieces.
    const bool digest = digest_steps(be_, o_, row_elems);
    const uint64_t step = step_bytes(row_bytes, row_elems, bytes, chunk_bytes(), digest);
    // A GGUF checked alone decodes the same bytes on both sides: one read per step.
    const bool same_bytes = &src == cpu.file && src_offset == cpu.offset;
    PooledSteps bufs(r_.steps);
    const std::span<uint8_t> dev_in = StepBuffers::take(bufs->a, step);
    const std::span<uint8_t> cpu_in = same_bytes ? dev_in : StepBuffers::take(bufs->b, step);
    for (uint64_t done = 0; done < bytes; done += step) {
      const uint64_t n = std::min(step, bytes - done), elems = n / row_bytes * row_elems;
      const Step st{tensor, part, *info, src.path(), src_offset, done / row_bytes * row_elems, done, same_bytes};
      std::span<uint8_t> a(dev_in.data(), n), b(cpu_in.data(), n);
      if (!read(src, src_offset + done, a, &c) || (!same_bytes && !read(*cpu.file, cpu.offset + done, b, &c))) return;
      std::string error;
      r_.input_bytes_decoded += n;
      auto by_digest = [&] {
        if (!digest) return StepDigest::off;
        F32Digest device, cpu_digest_value;
        if (!be_.ggml_digest(type, a, *r_.digest, device, error)) return backend_failed(c, src.path(), error), StepDigest::failed;
        Lap lap;
        if (!(ahead && ahead->take(ahead_first, done / step, cpu_digest_value)) &&
            !cpu_digest(type, b, *r_.digest, cpu_digest_value, error))
          return cpu_failed(c, src.path(), src_offset, error), StepDigest::failed;
        r_.stages.cpu_reference += lap.next();
        return device == cpu_digest_value ? StepDigest::equal : StepDigest::differ;
      };
      // Every element: the whole step, or where digests were compared (and differ) piece
      // by piece within the job's memory, to name the first differing element and both values.
      auto every_element = [&] {
        if (!digest) return compare(c, st, type, a, b, StepBuffers::take(bufs->got, elems), StepBuffers::take(bufs->want, elems));
        const uint64_t piece_bytes = kDigestPiece / info->block_size * info->type_size;
        for (uint64_t off = 0; off < n; off += piece_bytes) {
          const uint64_t nb = std::min(piece_bytes, n - off);
          const Step sp{tensor, part, *info, src.path(), src_offset, st.first_element + off / info->type_size * info->block_size,
                        done + off, same_bytes};
          const uint64_t pe = nb / info->type_size * info->block_size;
          if (!compare(c, sp, type, a.subspan(off, nb), b.subspan(off, nb), StepBuffers::take(bufs->got, pe),
                       StepBuffers::take(bufs->want, pe)))
            return false;
        }
        return true;
      };
      if (!compare_step(c, src.path(), step_at(src_offset + done), "f32 results equal the CPU's", by_digest, every_element))
        return;
    }
  }

  // Where a compared range lies: its first element and byte within the tensor or part.
  struct Step {
    const std::string &tensor, &part;
    const GgmlTypeInfo& info;
    const std::string& path;
    uint64_t src_offset, first_element, first_byte;
    bool same_bytes;
  };
  // The device's and the CPU's f32 of whole blocks a (device input) and b (CPU input),
  // element by element; false when they differ (the first difference reported) or a side
  // failed.
  bool compare(VerifyCheck& c, const Step& st, int32_t type, std::span<const uint8_t> a, std::span<const uint8_t> b,
               std::span<float> got, std::span<float> want) {
    std::string error;
    if (!be_.ggml_to_f32(type, a, got, error)) return backend_failed(c, st.path, error);
    if (!ggml_dequantize(type, b, want, error)) return cpu_failed(c, st.path, st.src_offset, error), false;
    const auto i = first_difference<float>(got, want);
    if (!i) return true;
    const uint64_t block_offset = st.first_byte + (*i / st.info.block_size) * st.info.type_size;
    mismatch(c, st.path, st.src_offset + block_offset,
             (st.part.empty() ? "" : st.part + " ") + "element " + std::to_string(st.first_element + *i) + " (" +
                 st.info.name + " block at byte " + std::to_string(block_offset) + "): device " + verify_fmt(got[*i]) + " [" +
                 verify_hex(f32_bits(got[*i]), 8) + "] vs CPU dequant of the " + (st.same_bytes ? "same bytes " : "source ") +
                 verify_fmt(want[*i]) + " [" + verify_hex(f32_bits(want[*i]), 8) + "]");
    return false;
  }

  // Elements per piece of the CPU's digest: 256 KiB of f32, dequantized and digested while
  // in cache (a multiple of every ggml block size).
  static constexpr uint64_t kDigestPiece = 65536;

  // The digest of the CPU dequantization of `blocks` (whole blocks), fused: the AVX2 block
  // loops feed the digest's sums directly and store no f32 (numerics/ggml_dequant.h).
  static bool cpu_digest(int32_t type, std::span<const uint8_t> blocks, const DigestWeights& w, F32Digest& out,
                         std::string& error) {
    return ggml_dequant_digest(type, blocks, 0, w, out, error);
  }
  void cpu_failed(VerifyCheck& c, const std::string& file, uint64_t offset, const std::string& error) {
    fail(c, "VERIFY_UNSUPPORTED", file, offset, "CPU reference: " + error);
  }

};

}  // namespace

size_t DigestsAhead::add(const DecodeBackend& be, const VerifyOptions& o, int32_t type, uint64_t row_elems,
                         uint64_t bytes, const MappedFile& cpu_file, uint64_t cpu_offset) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  if (!info || info->block_size == 0 || info->type_size == 0 || row_elems % info->block_size || bytes == 0) return kNone;
  const uint64_t row_bytes = row_elems / info->block_size * info->type_size;
  if (row_bytes == 0 || bytes % row_bytes) return kNone;  // verify_range reports it
  if (!GgufVerifier::digest_steps(be, o, row_elems)) return kNone;
  const uint64_t step = GgufVerifier::step_bytes(row_bytes, row_elems, bytes, std::max<uint64_t>(1, be.max_chunk_bytes()), true);
  const size_t first = steps_.size();
  for (uint64_t done = 0; done < bytes; done += step)
    steps_.push_back({type, &cpu_file, cpu_offset + done, std::min(step, bytes - done)});
  return first;
}

double DigestsAhead::compute(const DecodeBackend& be, const DigestWeights& w, uint64_t budget, VerifyStages& stages) {
  if (steps_.empty() || be.state() != BackendState::opening) return 0;
  Lap wall;
  slots_ = std::make_unique<Slot[]>(steps_.size());
  uint64_t largest = 1;
  for (const Step& st : steps_) largest = std::max(largest, st.bytes);
  const uint64_t per_thread = largest;  // a step's input (the fused digest stores no f32)
  const uint64_t for_ahead = budget > be.host_memory() ? budget - be.host_memory() : 0;
  const int cores = std::max(1, tbb::this_task_arena::max_concurrency());
  const int threads = static_cast<int>(std::clamp<uint64_t>(for_ahead / per_thread, 1, std::max(1, cores - 1)));
  struct Buffers {
    std::vector<uint8_t> in;
    double seconds = 0;
  };
  tbb::enumerable_thread_specific<Buffers> buffers;
  std::atomic<bool> stop{false};
  tbb::task_arena arena(threads);
  arena.execute([&] {
    tbb::parallel_for(
        tbb::blocked_range<size_t>(0, steps_.size(), 1),
        [&](const tbb::blocked_range<size_t>& r) {
          Buffers& b = buffers.local();
          for (size_t i = r.begin(); i < r.end(); ++i) {
            if (stop.load(std::memory_order_relaxed)) return;
            if (be.state() != BackendState::opening) return stop.store(true);
            const Step& st = steps_[i];
            Lap lap;
            IoError err;
            std::string error;
            F32Digest d;
            if (st.file->read_at(st.offset, StepBuffers::take(b.in, st.bytes), err) &&
                GgufVerifier::cpu_digest(st.type, std::span<const uint8_t>(b.in.data(), st.bytes), w, d, error)) {
              slots_[i].value = d;
              slots_[i].done.store(true, std::memory_order_release);
            }  // else its job reads and computes it again, and reports what fails
            b.seconds += lap.next();
          }
        },
        tbb::simple_partitioner());
  });
  for (const Buffers& b : buffers) stages.cpu_reference += b.seconds;
  return wall.next();
}


void plan_ggml_range(DecodeBackend& be, const VerifyOptions& o, std::string tensor, std::string part, int32_t type,
                     uint64_t row_elems, uint64_t bytes, const MappedFile& src, uint64_t src_offset, CpuSide cpu,
                     DigestsAhead& ahead, std::vector<Job>& jobs) {
  const size_t first = ahead.add(be, o, type, row_elems, bytes, *cpu.file, cpu.offset);
  jobs.push_back({GgufVerifier::job_memory(be, o, type, row_elems, bytes),
                  [&be, &o, tensor = std::move(tensor), part = std::move(part), type, row_elems, bytes, &src, src_offset,
                   cpu = std::move(cpu), &ahead, first](Sink& s) {
                    GgufVerifier(be, o, s).verify_range(tensor, part, type, row_elems, bytes, src, src_offset, cpu, &ahead,
                                                        first);
                  }});
}

namespace {

std::string described(const ModelTensor& t) {
  return ggml_type_name(t.ggml_type) + " " + shape_to_string(t.shape);
}

// A tensor of `model` that has nothing to be compared with: a failed check, never one of
// its bytes against themselves.
void unmatched_job(const ModelTensor& t, const LoadedModel& model, const std::string& reference, const std::string& why,
                   std::vector<Job>& jobs) {
  jobs.push_back({0, [&t, &model, reference, why](Sink& s) {
                    VerifyCheck c;
                    c.check = "ggml_dequant";
                    c.tensor = t.name;
                    c.verified_against = "reference " + reference + ": " + why;
                    c.ok = false;
                    s.checks.push_back(std::move(c));
                    s.findings.error("VERIFY_UNMATCHED", model.gguf_file.path(), t.name, std::nullopt,
                                     described(t) + " has no tensor of the same name, ggml type and shape in the reference " +
                                         reference + " (" + why + "): it cannot be verified against it");
                  }});
}

// A pack's blk.N.A_log: the repack's log(-ssm_a) of the reference's blk.N.ssm_a.
bool renamed_a_log(const ModelTensor& t, const LoadedModel& reference) {
  constexpr std::string_view kALog = "A_log";
  if (!t.name.ends_with(kALog) || reference.view.find(t.name)) return false;
  return reference.view.find(t.name.substr(0, t.name.size() - kALog.size()) + "ssm_a") != nullptr;
}

}  // namespace

void plan_gguf_checks(DecodeBackend& be, const VerifyOptions& o, const LoadedModel& model, const LoadedModel* reference,
                      bool pack_dense, DigestsAhead& ahead, std::vector<Job>& jobs) {
  const std::string& file = model.gguf_file.path();
  for (const auto& t : model.view.tensors) {
    if (!t.payload_ok || t.shape.empty()) {
      jobs.push_back({0, [](Sink&) {}});  // counted in the progress
      continue;
    }
    CpuSide cpu{&model.gguf_file, t.offset, "CPU decode of the same bytes (" + file + " tensor " + t.name + ")"};
    if (reference) {
      const ModelTensor* namesake = reference->view.find(t.name);
      const std::string& ref_file = reference->gguf_file.path();
      if (namesake && namesake->payload_ok && namesake->ggml_type == t.ggml_type && namesake->shape == t.shape &&
          namesake->nbytes == t.nbytes) {
        cpu = {&reference->gguf_file, namesake->offset, "CPU decode of reference " + ref_file + " tensor " + t.name};
      } else if (pack_dense && !namesake && renamed_a_log(t, *reference)) {
        cpu.against += "; its values against log(-ssm_a) of the reference's: the pack validator";
      } else {
        unmatched_job(t, model, ref_file, namesake ? "it is " + described(*namesake) : "it has no tensor of this name", jobs);
        continue;
      }
    }
    plan_ggml_range(be, o, t.name, "", t.ggml_type, t.shape[0], t.nbytes, model.gguf_file, t.offset, std::move(cpu), ahead,
                    jobs);
  }
  if (!reference || pack_dense) return;
  for (const auto& t : reference->view.tensors)
    if (!model.view.find(t.name)) {
      jobs.push_back({0, [&t, reference, &model](Sink& s) {
                        s.findings.error("VERIFY_UNMATCHED", model.gguf_file.path(), t.name, std::nullopt,
                                         "the reference " + reference->gguf_file.path() + " has tensor " + t.name + " (" +
                                             described(t) + "), which is missing here");
                      }});
    }
}

bool load_gguf_reference(const std::string& path, LoadedModel& reference, Findings& findings) {
  auto refuse = [&](const std::string& what) {
    findings.error("VERIFY_REFERENCE", path, "", std::nullopt,
                   "--reference is " + what +
                       ": a GGUF file is verified tensor by tensor against a GGUF file (the same name, ggml type and "
                       "shape, then every value)");
    return false;
  };
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return refuse("not a regular file (a directory, or missing)");
  Findings lf;
  if (!load_model(path, StReadOptions{}, reference, lf) || lf.has_errors()) {
    for (const auto& f : lf.items()) findings.add(f);
    return refuse("a file that does not read cleanly (see the other findings)");
  }
  if (reference.format != ModelFormat::gguf) return refuse("not a GGUF file");
  return true;
}

}  // namespace ckpt
