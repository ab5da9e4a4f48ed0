#include "diff/diff.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include <tbb/parallel_for.h>

#include "core/checked_math.h"
#include "core/display.h"
#include "core/build_info.h"
#include "formats/gguf_writer.h"
#include "formats/json.h"
#include "model/value_codec.h"
#include "hashman/manifest.h"
#include "io/mapped_file.h"
#include "formats/json_writer.h"

namespace ckpt {
namespace {

constexpr uint64_t kDiffStepBytes = 256u << 10;  // per side, per worker

struct Side {
  HashSource src;
  std::vector<std::unique_ptr<MappedFile>> maps;
};

bool open_side(const std::string& path, Side& s, Findings& f) {
  if (!open_hash_source(path, s.src, f)) return false;
  s.maps.resize(s.src.view.files.size());
  for (size_t i = 0; i < s.maps.size(); ++i) {
    IoError err;
    auto m = std::make_unique<MappedFile>();
    if (!m->open(s.src.view.file_paths[i], err)) {
      f.error("IO_OPEN", s.src.view.files[i], "", std::nullopt, "cannot read: " + err.message);
      return false;
    }
    s.maps[i] = std::move(m);
  }
  return true;
}

uint64_t element_count(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n = d && n > UINT64_MAX / d ? UINT64_MAX : n * d;
  return n;
}

bool in_file(const MappedFile& m, const ModelTensor& t) {
  return t.payload_ok && t.offset <= m.size() && t.nbytes <= m.size() - t.offset;
}

// Compares the payloads of two tensors of the same type and size, chunk by chunk.
void compare_values(const Side& sa, const ModelTensor& ta, const Side& sb, const ModelTensor& tb, TensorDiff& d,
                    bool& equal, std::string& io_error) {
  equal = true;
  const MappedFile& ma = *sa.maps[ta.file];
  const MappedFile& mb = *sb.maps[tb.file];
  ValueCodec codec = value_codec(ta);
  if (codec.ok && ta.nbytes % codec.unit_bytes != 0) codec.ok = false;
  if (!codec.ok && d.note.empty()) d.note = codec.why_not.empty() ? "no f32 form" : codec.why_not;
  const uint64_t unit = codec.unit_bytes ? codec.unit_bytes : 1;
  const uint64_t step = std::max<uint64_t>(unit, kDiffStepBytes - kDiffStepBytes % unit);
  std::vector<uint8_t> a(step), b(step);
  std::vector<float> fa, fb;
  bool have_first = false;
  for (uint64_t done = 0; done < ta.nbytes;) {
    const uint64_t n = std::min(step, ta.nbytes - done);
    IoError err;
    if (!ma.read_at(ta.offset + done, std::span<uint8_t>(a.data(), n), err) ||
        !mb.read_at(tb.offset + done, std::span<uint8_t>(b.data(), n), err)) {
      io_error = err.path + ": " + err.message;
      return;
    }
    if (std::memcmp(a.data(), b.data(), n) != 0) {
      equal = false;
      if (!have_first) {
        const uint64_t k = static_cast<uint64_t>(std::mismatch(a.begin(), a.begin() + n, b.begin()).first - a.begin());
        d.first_byte = done + k;
        d.first_element = (done + k) / unit * codec.unit_values;
      }
      const uint64_t units = n / unit;
      if (codec.ok) {
        const size_t nv = units * codec.unit_values;
        fa.resize(nv);
        fb.resize(nv);
        std::string error;
        decode_values(codec, std::span<const uint8_t>(a.data(), n), fa, error);
        decode_values(codec, std::span<const uint8_t>(b.data(), n), fb, error);
        const uint64_t base = done / unit * codec.unit_values;
        for (size_t i = 0; i < nv; ++i) {
          bool differs;
          if (codec.unit_values == 1)
            differs = std::memcmp(a.data() + i * unit, b.data() + i * unit, unit) != 0;
          else
            differs = std::bit_cast<uint32_t>(fa[i]) != std::bit_cast<uint32_t>(fb[i]);
          if (!differs) continue;
          ++d.differing_elements;
          if (!have_first) {
            have_first = true;
            d.first_element = base + i;
            d.value_a = fa[i];
            d.value_b = fb[i];
          }
          const double x = fa[i], y = fb[i];
          if (!std::isfinite(x) || !std::isfinite(y)) {
            ++d.nonfinite_mismatches;
            continue;
          }
          const double abs = std::fabs(x - y);
          const double den = std::max(std::fabs(x), std::fabs(y));
          d.max_abs_diff = std::max(d.max_abs_diff, abs);
          if (den > 0) d.max_rel_diff = std::max(d.max_rel_diff, abs / den);
        }
        if (!have_first) {  // bytes differ but no decoded value does (e.g. unused bits of a block)
          have_first = true;
        }
      } else {
        for (uint64_t u = 0; u < units; ++u)
          if (std::memcmp(a.data() + u * unit, b.data() + u * unit, unit) != 0) ++d.differing_elements;
        have_first = true;
      }
    }
    done += n;
  }
}

void set_types(TensorDiff& d, const ModelTensor& a, const ModelTensor& b) {
  d.type_a = a.type;
  d.type_b = b.type;
  d.shape_a = a.shape;
  d.shape_b = b.shape;
}


std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void value_json(JsonWriter& w, float v) {
  if (std::isfinite(v))
    w.raw(num(v));
  else
    w.value(num(v));
}

// True when the byte ranges [a0, a1) of `fa` and [b0, b1) of `fb` hold the same bytes.
bool same_bytes(const MappedFile& fa, uint64_t a0, uint64_t a1, const MappedFile& fb, uint64_t b0, uint64_t b1,
                std::string& io_error) {
  if (a1 - a0 != b1 - b0) return false;
  std::vector<uint8_t> x(std::min<uint64_t>(kDiffStepBytes, a1 - a0)), y(x.size());
  for (uint64_t done = 0; done < a1 - a0;) {
    const uint64_t n = std::min<uint64_t>(x.size(), a1 - a0 - done);
    IoError err;
    if (!fa.read_at(a0 + done, std::span<uint8_t>(x.data(), n), err) ||
        !fb.read_at(b0 + done, std::span<uint8_t>(y.data(), n), err)) {
      io_error = err.path + ": " + err.message;
      return false;
    }
    if (std::memcmp(x.data(), y.data(), n) != 0) return false;
    done += n;
  }
  return true;
}

// The GGUF key-values of both sides, key by key: each KV's bytes (key, type, value; arrays
// element by element) are compared, so a changed tokenizer.chat_template or vocab is found.
void diff_gguf_metadata(const LoadedModel& ma, const LoadedModel& mb, DiffReport& r) {
  if (!ma.gguf || !mb.gguf) return;
  const GgufFile& ga = *ma.gguf;
  const GgufFile& gb = *mb.gguf;
  std::vector<MetadataDiff> all;
  for (const GgufKV& kv : ga.kvs) {
    const GgufKV* other = gb.find_kv(kv.key);
    if (!other) {
      all.push_back({kv.key, "only_in_a", kv.display(), ""});
      continue;
    }
    ++r.metadata_compared;
    uint64_t a0 = 0, a1 = 0, b0 = 0, b1 = 0;
    std::string io_error;
    if (!gguf_kv_byte_range(ma.gguf_file, kv, a0, a1) || !gguf_kv_byte_range(mb.gguf_file, *other, b0, b1)) {
      r.findings.error("IO_READ", ma.path, "", kv.offset, "the value of key '" + kv.key + "' runs past the end of its file");
      continue;
    }
    if (same_bytes(ma.gguf_file, a0, a1, mb.gguf_file, b0, b1, io_error)) continue;
    if (!io_error.empty()) {
      r.findings.error("IO_READ", ma.path, "", kv.offset, "read failed: " + io_error);
      continue;
    }
    all.push_back({kv.key, "value", kv.display(), other->display()});
  }
  for (const GgufKV& kv : gb.kvs)
    if (!ga.find_kv(kv.key)) all.push_back({kv.key, "only_in_b", "", kv.display()});
  std::sort(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.key < y.key; });
  r.metadata_differing = all.size();
  r.metadata = std::move(all);
}

}  // namespace

DiffReport diff_models(const std::string& pa, const std::string& pb, const DiffOptions& o) {
  DiffReport r;
  r.a = pa;
  r.b = pb;
  Side a, b;
  if (!open_side(pa, a, r.findings) || !open_side(pb, b, r.findings)) {
    r.status = r.findings.has_io_errors() || !r.findings.has_errors() ? DiffStatus::io_error : DiffStatus::bad_input;
    return r;
  }
  const ModelView& va = a.src.view;
  const ModelView& vb = b.src.view;
  r.tensors_a = va.tensors.size();
  r.tensors_b = vb.tensors.size();
  std::vector<TensorDiff> all;
  std::vector<std::pair<const ModelTensor*, const ModelTensor*>> pairs;
  for (const auto& t : va.tensors) {
    const ModelTensor* u = vb.find(t.name);
    if (!u) {
      TensorDiff d;
      d.name = t.name;
      d.kind = "only_in_a";
      d.type_a = t.type;
      d.shape_a = t.shape;
      d.file_a = va.files[t.file];
      all.push_back(std::move(d));
      ++r.only_in_a;
      continue;
    }
    if (t.type != u->type || t.shape != u->shape || t.nbytes != u->nbytes) {
      TensorDiff d;
      d.name = t.name;
      d.kind = t.type != u->type ? "type" : "shape";
      set_types(d, t, *u);
      d.file_a = va.files[t.file];
      d.file_b = vb.files[u->file];
      all.push_back(std::move(d));
      ++r.changed_type_or_shape;
      continue;
    }
    pairs.emplace_back(&t, u);
  }
  for (const auto& t : vb.tensors)
    if (!va.find(t.name)) {
      TensorDiff d;
      d.name = t.name;
      d.kind = "only_in_b";
      d.type_b = t.type;
      d.shape_b = t.shape;
      d.file_b = vb.files[t.file];
      all.push_back(std::move(d));
      ++r.only_in_b;
    }
  std::vector<TensorDiff> value_diffs(pairs.size());
  std::vector<char> equal(pairs.size(), 1);
  std::vector<std::string> io(pairs.size());
  tbb::parallel_for(size_t{0}, pairs.size(), [&](size_t i) {
    const ModelTensor& ta = *pairs[i].first;
    const ModelTensor& tb = *pairs[i].second;
    TensorDiff& d = value_diffs[i];
    if (!in_file(*a.maps[ta.file], ta) || !in_file(*b.maps[tb.file], tb)) {
      io[i] = "payload of " + ta.name + " lies outside its file";
      return;
    }
    bool eq = true;
    compare_values(a, ta, b, tb, d, eq, io[i]);
    equal[i] = eq;
  });
  for (size_t i = 0; i < pairs.size(); ++i) {
    const ModelTensor& ta = *pairs[i].first;
    const ModelTensor& tb = *pairs[i].second;
    ++r.compared;
    if (!io[i].empty()) {
      r.findings.error("IO_READ", va.files[ta.file], ta.name, ta.offset, "read failed: " + io[i]);
      continue;
    }
    if (equal[i]) {
      ++r.identical;
      continue;
    }
    TensorDiff d = std::move(value_diffs[i]);
    d.name = ta.name;
    d.kind = "values";
    set_types(d, ta, tb);
    d.file_a = va.files[ta.file];
    d.file_b = vb.files[tb.file];
    d.elements = ta.ggml_type >= 0 || ta.dtype ? element_count(ta.shape) : 0;
    all.push_back(std::move(d));
    ++r.differing;
  }
  diff_gguf_metadata(*a.src.model, *b.src.model, r);
  if (r.metadata.size() > o.max_reported) {
    r.metadata.resize(o.max_reported);
    r.truncated = true;
  }
  std::sort(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.name < y.name; });
  if (all.size() > o.max_reported) {
    all.resize(o.max_reported);
    r.truncated = true;
  }
  r.diffs = std::move(all);
  if (r.findings.has_io_errors())
    r.status = DiffStatus::io_error;
  else if (r.differing || r.only_in_a || r.only_in_b || r.changed_type_or_shape || r.metadata_differing)
    r.status = DiffStatus::different;
  return r;
}

std::string diff_report_text(const DiffReport& r) {
  std::string out;
  for (const auto& d : r.diffs) {
    out += display_escape(d.name) + ": ";
    if (d.kind == "only_in_a") {
      out += "only in A (" + display_escape(d.type_a) + " " + shape_to_string(d.shape_a, ",") + ", " + display_escape(d.file_a) + ")\n";
    } else if (d.kind == "only_in_b") {
      out += "only in B (" + display_escape(d.type_b) + " " + shape_to_string(d.shape_b, ",") + ", " + display_escape(d.file_b) + ")\n";
    } else if (d.kind == "type" || d.kind == "shape") {
      out += d.kind + " changed: " + display_escape(d.type_a) + " " + shape_to_string(d.shape_a, ",") + " -> " + display_escape(d.type_b) + " " +
             shape_to_string(d.shape_b, ",") + "\n";
    } else {
      out += "values differ (" + display_escape(d.type_a) + " " + shape_to_string(d.shape_a, ",") + ", " + display_escape(d.file_a) + "): " +
             std::to_string(d.differing_elements) + " of " + std::to_string(d.elements) +
             " elements; first at byte " + std::to_string(d.first_byte) + ", element " +
             std::to_string(d.first_element);
      if (d.value_a && d.value_b) out += ": A " + num(*d.value_a) + ", B " + num(*d.value_b);
      out += "; max abs diff " + num(d.max_abs_diff) + ", max rel diff " + num(d.max_rel_diff);
      if (d.nonfinite_mismatches) out += ", " + std::to_string(d.nonfinite_mismatches) + " NaN/Inf mismatches";
      if (!d.note.empty()) out += " (" + display_escape(d.note) + ")";
      out += "\n";
    }
  }
  for (const auto& m : r.metadata) {
    out += "key " + display_escape(m.key) + ": ";
    if (m.kind == "only_in_a") out += "only in A (" + display_escape(m.value_a) + ")\n";
    else if (m.kind == "only_in_b") out += "only in B (" + display_escape(m.value_b) + ")\n";
    else out += "value differs: A " + display_escape(m.value_a) + ", B " + display_escape(m.value_b) + "\n";
  }
  if (r.truncated) out += "... (more differences; raise --max)\n";
  out += (r.status == DiffStatus::same ? "SAME: " : "DIFFERENT: ") + std::to_string(r.compared) +
         " tensors compared, " + std::to_string(r.identical) + " identical, " + std::to_string(r.differing) +
         " with different values, " + std::to_string(r.changed_type_or_shape) + " with a different type or shape, " +
         std::to_string(r.only_in_a) + " only in A, " + std::to_string(r.only_in_b) + " only in B";
  if (r.metadata_compared || r.metadata_differing)
    out += "; " + std::to_string(r.metadata_differing) + " of the GGUF key-values differ";
  out += "\n";
  return out;
}

std::string diff_report_json(const DiffReport& r) {
  JsonWriter w;
  w.begin_object().key("schema").value("ckptkit/diff-report/v1");
  w.key("tool").begin_object().key("name").value("ckptkit").key("version").value(kVersion).key("commit").value(build_commit()).end_object();
  w.key("a").value(r.a).key("b").value(r.b);
  w.key("same").value(r.status == DiffStatus::same);
  w.key("summary").begin_object();
  w.key("tensors_a").value(r.tensors_a).key("tensors_b").value(r.tensors_b).key("compared").value(r.compared);
  w.key("identical").value(r.identical).key("differing").value(r.differing);
  w.key("changed_type_or_shape").value(r.changed_type_or_shape);
  w.key("only_in_a").value(r.only_in_a).key("only_in_b").value(r.only_in_b).key("truncated").value(r.truncated);
  w.key("metadata_compared").value(r.metadata_compared).key("metadata_differing").value(r.metadata_differing);
  w.end_object();
  w.key("metadata").begin_array();
  for (const auto& m : r.metadata) {
    w.begin_object().key("key").value(m.key).key("kind").value(m.kind);
    if (m.kind != "only_in_b") w.key("value_a").value(m.value_a);
    if (m.kind != "only_in_a") w.key("value_b").value(m.value_b);
    w.end_object();
  }
  w.end_array();
  w.key("tensors").begin_array();
  for (const auto& d : r.diffs) {
    w.begin_object().key("name").value(d.name).key("kind").value(d.kind);
    if (!d.type_a.empty()) {
      w.key("type_a").value(d.type_a).key("shape_a").begin_array();
      for (uint64_t x : d.shape_a) w.value(x);
      w.end_array().key("file_a").value(d.file_a);
    }
    if (!d.type_b.empty()) {
      w.key("type_b").value(d.type_b).key("shape_b").begin_array();
      for (uint64_t x : d.shape_b) w.value(x);
      w.end_array().key("file_b").value(d.file_b);
    }
    if (d.kind == "values") {
      w.key("first_byte").value(d.first_byte).key("first_element").value(d.first_element);
      if (d.value_a && d.value_b) {
        w.key("value_a");
        value_json(w, *d.value_a);
        w.key("value_b");
        value_json(w, *d.value_b);
      }
      w.key("elements").value(d.elements).key("differing_elements").value(d.differing_elements);
      w.key("nonfinite_mismatches").value(d.nonfinite_mismatches);
      w.key("max_abs_diff").raw(num(d.max_abs_diff)).key("max_rel_diff").raw(num(d.max_rel_diff));
      if (!d.note.empty()) w.key("note").value(d.note);
    }
    w.end_object();
  }
  w.end_array();
  write_findings_json(w, r.findings);
  w.end_object();
  return w.str() + "\n";
}

}  // namespace ckpt
