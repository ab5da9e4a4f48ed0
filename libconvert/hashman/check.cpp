#include "hashman/check.h"

#include "core/checked_math.h"
#include "core/display.h"

#include <map>

namespace ckpt {
namespace {

// Every hash the expected side holds must be equal; the actual side was built with the
// same algorithms, so an empty actual hash means it could not be computed.
bool hashes_equal(const std::string& e, const std::string& a) { return e.empty() || e == a; }

template <typename T>
std::map<std::string, const T*> by_name(const std::vector<T>& v) {
  std::map<std::string, const T*> m;
  for (const auto& x : v) m.emplace(x.name, &x);
  return m;
}

CheckLine compare_tensor(const ManifestTensor& e, const ManifestTensor* a) {
  CheckLine l{e.name, true, ""};
  if (!a) return {e.name, false, "missing"};
  if (e.type != a->type) return {e.name, false, "type " + e.type + " -> " + a->type};
  if (e.shape != a->shape) return {e.name, false, "shape " + shape_to_string(e.shape, ",") + " -> " + shape_to_string(a->shape, ",")};
  if (e.bytes != a->bytes)
    return {e.name, false, "bytes " + std::to_string(e.bytes) + " -> " + std::to_string(a->bytes)};
  if (!hashes_equal(e.xxh3, a->xxh3) || !hashes_equal(e.sha256, a->sha256)) return {e.name, false, ""};
  if (!hashes_equal(e.f32_xxh3, a->f32_xxh3) || !hashes_equal(e.f32_sha256, a->f32_sha256))
    return {e.name, false, "f32 values"};
  return l;
}

constexpr const char* kUnreadable = "open or read";  // coreutils' word for a listed file that is gone

CheckLine compare_file(const ManifestFile& e, const ManifestFile* a) {
  if (!a) return {e.name, false, kUnreadable};
  if (e.size != a->size) return {e.name, false, "size " + std::to_string(e.size) + " -> " + std::to_string(a->size)};
  if (!hashes_equal(e.xxh3, a->xxh3) || !hashes_equal(e.sha256, a->sha256)) return {e.name, false, ""};
  // Without file hashes the header (a GGUF's key-values, a safetensors header's
  // __metadata__) is covered by its own hash; a manifest written before it was has none.
  if (e.has_header) {
    if (!a->has_header || e.header_bytes != a->header_bytes)
      return {e.name, false, "header size " + std::to_string(e.header_bytes) + " -> " +
                                 (a->has_header ? std::to_string(a->header_bytes) : std::string("none"))};
    if (!hashes_equal(e.header_xxh3, a->header_xxh3) || !hashes_equal(e.header_sha256, a->header_sha256))
      return {e.name, false, "header: metadata or tensor index"};
  }
  return {e.name, true, ""};
}

}  // namespace

CheckResult compare_manifests(const HashManifest& expected, const HashManifest& actual) {
  CheckResult r;
  auto actual_files = by_name(actual.files);
  auto actual_tensors = by_name(actual.tensors);
  auto expected_files = by_name(expected.files);
  auto expected_tensors = by_name(expected.tensors);
  for (const auto& e : expected.files) {
    auto it = actual_files.find(e.name);
    r.files.push_back(compare_file(e, it == actual_files.end() ? nullptr : it->second));
  }
  for (const auto& a : actual.files)
    if (!expected_files.count(a.name)) r.files.push_back({a.name, false, "not in manifest"});
  for (const auto& e : expected.tensors) {
    auto it = actual_tensors.find(e.name);
    r.tensors.push_back(compare_tensor(e, it == actual_tensors.end() ? nullptr : it->second));
  }
  for (const auto& a : actual.tensors)
    if (!expected_tensors.count(a.name)) r.tensors.push_back({a.name, false, "not in manifest"});
  r.model = {"(model)", hashes_equal(expected.model_xxh3, actual.model_xxh3) &&
                            hashes_equal(expected.model_sha256, actual.model_sha256) &&
                            hashes_equal(expected.model_f32_xxh3, actual.model_f32_xxh3) &&
                            hashes_equal(expected.model_f32_sha256, actual.model_f32_sha256) &&
                            expected.format == actual.format,
             expected.format == actual.format ? "" : "format " + expected.format + " -> " + actual.format};
  for (const auto* list : {&r.files, &r.tensors})
    for (const auto& l : *list) {
      ++r.checked;
      if (!l.ok) ++r.failed;
    }
  for (const auto& l : r.files)
    if (!l.ok && l.why == kUnreadable) ++r.unreadable;
  ++r.checked;
  if (!r.model.ok) ++r.failed;
  r.status = r.failed ? CheckStatus::mismatch : CheckStatus::ok;
  return r;
}

CheckResult check_hash_manifest(const HashManifest& expected, const std::string& path, const HashOptions& progress) {
  HashSource src;
  Findings f;
  if (!open_hash_source(path, src, f)) {
    CheckResult r;
    r.status = f.has_io_errors() || !f.has_errors() ? CheckStatus::io_error : CheckStatus::bad_input;
    r.findings = std::move(f);
    return r;
  }
  HashOptions o = progress;
  o.algos = expected.algos;
  o.dequant = expected.dequant;
  o.file_hashes = expected.file_hashes;
  HashManifest actual;
  const bool read_ok = build_hash_manifest(src, o, actual, f);
  CheckResult r = compare_manifests(expected, actual);
  r.findings = std::move(f);
  if (!read_ok) r.status = CheckStatus::io_error;
  return r;
}

std::string check_lines_text(const CheckResult& r, bool quiet) {
  std::string out;
  auto emit = [&](const CheckLine& l) {
    if (quiet && l.ok) return;
    out += display_escape(l.name) + ": " + (l.ok ? "OK" : "FAILED");
    if (!l.ok && !l.why.empty()) out += " (" + display_escape(l.why) + ")";
    out += "\n";
  };
  for (const auto& l : r.files) emit(l);
  for (const auto& l : r.tensors) emit(l);
  if (r.checked) emit(r.model);
  return out;
}

std::string check_summary_text(const CheckResult& r) {
  if (r.failed == 0) return "ckpt hash: all " + std::to_string(r.checked) + " checksums OK\n";
  std::string out;
  if (r.unreadable)
    out = "ckpt hash: WARNING: " + std::to_string(r.unreadable) + (r.unreadable == 1 ? " listed file" : " listed files") +
          " could not be read\n";
  return out + "ckpt hash: WARNING: " + std::to_string(r.failed) + " of " + std::to_string(r.checked) +
         " computed checksums did NOT match\n";
}

}  // namespace ckpt
