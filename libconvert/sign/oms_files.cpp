// The OMS walk of a model and its hashing (sign/oms_files.h).
#include "sign/oms_files.h"

#include <algorithm>
#include <filesystem>

#include <simdjson.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "io/hash.h"
#include "io/input_file.h"
#include "sign/oms_bundle.h"

namespace ckpt::oms {
namespace {

namespace fs = std::filesystem;

bool is_ignored(const std::string& name, const std::vector<std::string>& ignore) {
  for (const auto& i : ignore)
    if (name == i || (name.size() > i.size() && name.compare(0, i.size(), i) == 0 && name[i.size()] == '/')) return true;
  return false;
}

// True when a listed name lies below the directory `dir`.
bool lists_below(const std::vector<std::string>& listed, const std::string& dir) {
  const std::string prefix = dir + "/";
  auto it = std::lower_bound(listed.begin(), listed.end(), prefix);
  return it != listed.end() && it->compare(0, prefix.size(), prefix) == 0;
}

bool inside(const fs::path& root, const fs::path& p) {
  auto r = root.begin(), q = p.begin();
  for (; r != root.end(); ++r, ++q)
    if (q == p.end() || *r != *q) return false;
  return true;
}

class Walker {
 public:
  Walker(const fs::path& root, const ModelScope& scope, std::vector<ModelEntry>& out, Findings& f)
      : root_(root), scope_(scope), out_(out), f_(f) {
    std::error_code ec;
    if (!scope.bundle_path.empty()) bundle_ = fs::weakly_canonical(fs::absolute(scope.bundle_path, ec), ec);
  }

  void walk(const fs::path& dir, const std::string& rel_dir, int depth, bool ignored_dir) {
    if (depth > kMaxModelDepth) {
      f_.error("OMS_MODEL_LIMIT", rel_dir, "", std::nullopt,
               rel_dir + " lies more than " + std::to_string(kMaxModelDepth) + " directories deep; refused");
      return;
    }
    std::error_code ec;
    fs::directory_iterator it(dir, fs::directory_options::none, ec), end;
    std::vector<fs::directory_entry> entries;
    for (; !ec && it != end; it.increment(ec)) {
      if (++seen_ > kMaxModelEntries) {
        f_.error("OMS_MODEL_LIMIT", rel_dir, "", std::nullopt,
                 "the model holds more than " + std::to_string(kMaxModelEntries) + " entries; refused");
        return;
      }
      entries.push_back(*it);
    }
    if (ec) {
      f_.error("IO_READDIR", rel_dir.empty() ? dir.string() : rel_dir, "", std::nullopt,
               "cannot list " + dir.string() + ": " + ec.message());
      return;
    }
    for (const auto& e : entries) visit(e, rel_dir, depth, ignored_dir);
  }

 private:
  void visit(const fs::directory_entry& e, const std::string& rel_dir, int depth, bool ignored_dir) {
    const std::string base = e.path().filename().string();
    const std::string name = rel_dir.empty() ? base : rel_dir + "/" + base;
    if (!bundle_.empty() && e.path() == bundle_) return;
    const bool ignored = ignored_dir || is_ignored(name, scope_.ignore_paths);
    if (!simdjson::validate_utf8(name.data(), name.size())) {
      if (!ignored)
        f_.error("OMS_NAME_NOT_UTF8", name, "", std::nullopt,
                 "a file name that is not valid UTF-8 cannot be named in a bundle (spec §6.1.2)");
      return;
    }
    std::error_code ec;
    const fs::file_status st = e.symlink_status(ec);
    if (ec) {
      f_.error("IO_OPEN", name, "", std::nullopt, "cannot stat " + name + ": " + ec.message());
      return;
    }
    if (fs::is_directory(st)) {
      if (!ignored || lists_below(scope_.listed, name)) walk(e.path(), name, depth + 1, ignored);
      return;
    }
    ModelEntry m{name, e.path().string(), EntryKind::regular, ignored};
    if (fs::is_symlink(st)) {
      m.kind = EntryKind::link;
      if (!ignored) follow_link(e.path(), m);
    } else if (!fs::is_regular_file(st)) {
      m.kind = EntryKind::not_regular;
      if (!ignored)
        f_.error("OMS_NOT_REGULAR", name, "", std::nullopt,
                 name + " is not a regular file (a FIFO, socket or device); never opened");
    }
    out_.push_back(std::move(m));
  }

  void follow_link(const fs::path& link, ModelEntry& m) {
    if (!scope_.allow_symlinks) {
      f_.error("OMS_SYMLINK", m.name, "", std::nullopt,
               m.name + " is a symbolic link, and links are not allowed (serialization.allow_symlinks false, "
                        "spec §6.1.1)");
      return;
    }
    std::error_code ec;
    const fs::path target = fs::canonical(link, ec);
    const fs::file_status st = ec ? fs::file_status() : fs::status(target, ec);
    if (ec) {
      f_.error("OMS_SYMLINK", m.name, "", std::nullopt, m.name + " is a link that leads nowhere: " + ec.message());
    } else if (fs::is_directory(st)) {
      f_.error("OMS_SYMLINK", m.name, "", std::nullopt,
               m.name + " is a link to a directory; ckptkit follows links to files only (no cycles, no escape)");
    } else if (!fs::is_regular_file(st)) {
      f_.error("OMS_NOT_REGULAR", m.name, "", std::nullopt, m.name + " links to something that is not a regular file");
    } else {
      m.kind = EntryKind::link_to_file;
      m.path = target.string();
      if (!inside(root_, target))
        f_.warning("OMS_LINK_OUTSIDE", m.name, "", std::nullopt,
                   m.name + " links to " + target.string() + ", outside the model root");
    }
  }

  fs::path root_;
  const ModelScope& scope_;
  std::vector<ModelEntry>& out_;
  Findings& f_;
  fs::path bundle_;
  size_t seen_ = 0;
};

}  // namespace

const std::vector<std::string>& default_ignore_paths() {
  static const std::vector<std::string> kDefaults{".git", ".gitattributes", ".github", ".gitignore"};
  return kDefaults;
}

bool is_single_file_model(const std::string& model) {
  std::error_code ec;
  return !fs::is_directory(model, ec);
}

bool list_model(const std::string& model, const ModelScope& scope, std::vector<ModelEntry>& out, Findings& findings) {
  out.clear();
  const size_t errors = findings.count(Severity::error);
  std::error_code ec;
  const fs::path root = fs::canonical(model, ec);
  if (ec) {
    findings.error("IO_OPEN", model, "", std::nullopt, "cannot open the model " + model + ": " + ec.message());
    return false;
  }
  const fs::file_status st = fs::status(root, ec);
  if (fs::is_regular_file(st)) {
    // The name is the basename as given (a link to a blob keeps its own name).
    std::string name = fs::path(model).lexically_normal().filename().string();
    if (name.empty() || name == "." || name == "..") name = root.filename().string();
    out.push_back(ModelEntry{name, root.string(), EntryKind::regular, false});
  } else if (fs::is_directory(st)) {
    Walker(root, scope, out, findings).walk(root, "", 0, false);
  } else {
    findings.error("OMS_NOT_REGULAR", model, "", std::nullopt, model + " is neither a regular file nor a directory");
  }
  std::sort(out.begin(), out.end(), [](const ModelEntry& a, const ModelEntry& b) { return a.name < b.name; });
  return findings.count(Severity::error) == errors;
}

bool ignore_path_in_model(const std::string& model, const std::string& given, std::string& rel, std::string& error) {
  std::string text = given;
  if (!text.empty() && text.front() == '/') {
    std::error_code ec;
    const fs::path root = fs::weakly_canonical(fs::absolute(model, ec), ec);
    const fs::path p = fs::weakly_canonical(fs::path(text), ec);
    if (ec || !inside(root, p) || p == root) {
      error = "the ignore path " + given + " is not inside the model " + model;
      return false;
    }
    text = p.lexically_relative(root).generic_string();
  }
  // Canonical form (spec §6.1.2): "./" and "." components and doubled '/' collapse.
  std::string out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t slash = text.find('/', start);
    if (slash == std::string::npos) slash = text.size();
    const std::string part = text.substr(start, slash - start);
    if (part == "..") {
      error = "the ignore path " + given + " holds '..' (spec §6.2: paths inside the model only)";
      return false;
    }
    if (!part.empty() && part != ".") out += (out.empty() ? "" : "/") + part;
    start = slash + 1;
  }
  if (out.empty() || !is_canonical_relative(out)) {
    error = "the ignore path " + given + " names no path inside the model";
    return false;
  }
  if (out.find_first_of("*?[") != std::string::npos) {
    error = "the ignore path " + given + " holds a glob character (spec §6.2: exact paths only)";
    return false;
  }
  rel = out;
  return true;
}

void hash_entries(const std::vector<const ModelEntry*>& entries, std::vector<std::string>& digests, Findings& findings,
                  std::atomic<uint64_t>& bytes, const BytesDone& on_bytes) {
  digests.assign(entries.size(), std::string());
  std::vector<Findings> per_file(entries.size());
  tbb::parallel_for(tbb::blocked_range<size_t>(0, entries.size(), 1), [&](const tbb::blocked_range<size_t>& r) {
    for (size_t i = r.begin(); i != r.end(); ++i) {
      const ModelEntry& e = *entries[i];
      IoError err;
      InputFile file;
      // A plain entry is opened without following links: one swapped for a link since the
      // walk is refused, not followed out of the model.
      const InputLinks links = e.kind == EntryKind::link_to_file ? InputLinks::follow : InputLinks::refuse;
      std::string hex, why;
      if (!file.open(e.path, err, links)) {
        per_file[i].error("IO_OPEN", e.name, "", std::nullopt, "cannot open " + e.name + ": " + err.message);
        continue;
      }
      file.advise_sequential();
      if (!sha256_file(file, hex, why)) {
        per_file[i].error("IO_READ", e.name, "", std::nullopt, "cannot read " + e.name + ": " + why);
        continue;
      }
      digests[i] = hex;
      bytes += file.size();
      if (on_bytes) on_bytes(file.size());
    }
  });
  for (const auto& f : per_file) findings.append(f);
}

void hash_ranges(const std::vector<FileRange>& ranges, std::vector<std::string>& digests, Findings& findings,
                 std::atomic<uint64_t>& bytes, const BytesDone& on_bytes) {
  constexpr uint64_t kBlock = uint64_t{1} << 20;
  digests.assign(ranges.size(), std::string());
  std::vector<Findings> per_range(ranges.size());
  tbb::parallel_for(tbb::blocked_range<size_t>(0, ranges.size(), 1), [&](const tbb::blocked_range<size_t>& r) {
    std::vector<uint8_t> buf(kBlock);
    for (size_t i = r.begin(); i != r.end(); ++i) {
      const FileRange& range = ranges[i];
      const ModelEntry& e = *range.entry;
      IoError err;
      InputFile file;
      if (!file.open(e.path, err, e.kind == EntryKind::link_to_file ? InputLinks::follow : InputLinks::refuse)) {
        per_range[i].error("IO_OPEN", e.name, "", std::nullopt, "cannot open " + e.name + ": " + err.message);
        continue;
      }
      Sha256 h;
      bool ok = true;
      for (uint64_t at = range.start; at < range.end && ok; at += kBlock) {
        const size_t n = static_cast<size_t>(std::min(kBlock, range.end - at));
        ok = file.read_at(at, std::span<uint8_t>(buf.data(), n), err);
        if (ok) {
          h.update(std::span<const uint8_t>(buf.data(), n));
          if (on_bytes) on_bytes(n);
        } else {
          per_range[i].error("IO_READ", e.name, "", at, "cannot read " + e.name + ": " + err.message);
        }
      }
      if (!ok) continue;
      digests[i] = h.hex_digest();
      bytes += range.end - range.start;
    }
  });
  for (const auto& f : per_range) findings.append(f);
}

}  // namespace ckpt::oms
