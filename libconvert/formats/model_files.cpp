#include "formats/model_files.h"

#include <algorithm>

#include "formats/checkpoint.h"

namespace ckpt {
namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxRelativePathBytes = 4096;

// What one directory entry is, with links resolved by the rules of model_files.h.
enum class EntryKind { regular, directory, skipped };

EntryKind classify(const fs::path& dir, const fs::directory_entry& entry, const std::string& name, Findings& f) {
  std::error_code ec;
  const fs::file_status own = entry.symlink_status(ec);
  if (ec) {
    f.error("IO_OPEN", name, "", std::nullopt, "cannot stat " + name + ": " + ec.message());
    return EntryKind::skipped;
  }
  fs::file_status target = own;
  if (fs::is_symlink(own)) {
    target = fs::status(entry.path(), ec);
    if (ec || !fs::exists(target)) {
      f.error("IO_OPEN", name, "", std::nullopt, name + " is a symlink to nothing (dangling)");
      return EntryKind::skipped;
    }
    if (link_escapes_directory(dir, entry.path())) {
      f.error("LINK_ESCAPE", name, "", std::nullopt,
              name + " is a symlink leading outside the checkpoint; it is not read");
      return EntryKind::skipped;
    }
    if (fs::is_directory(target)) {
      f.warning("LINK_DIR_NOT_FOLLOWED", name, "", std::nullopt,
                name + " is a symlink to a directory; it is not followed, its files are not covered");
      return EntryKind::skipped;
    }
  }
  if (fs::is_directory(own)) return EntryKind::directory;
  if (fs::is_regular_file(target)) return EntryKind::regular;
  f.error("IO_NOT_REGULAR", name, "", std::nullopt,
          name + " is not a regular file (FIFO, socket or device); it is not read");
  return EntryKind::skipped;
}

}  // namespace

bool link_escapes_directory(const fs::path& dir, const fs::path& file) {
  std::error_code ec;
  const fs::path real_dir = fs::weakly_canonical(dir, ec);
  if (ec) return true;
  const fs::path real_file = fs::weakly_canonical(file, ec);
  if (ec) return true;
  const fs::path rel = real_file.lexically_relative(real_dir);
  if (!rel.empty() && *rel.begin() != ".." && *rel.begin() != ".") return false;
  // Hub cache layout: snapshots/<rev>/<file> -> ../../blobs/<etag>.
  const fs::path blobs = real_dir.parent_path().parent_path() / "blobs";
  return real_dir.parent_path().filename() != "snapshots" || real_file.parent_path() != blobs;
}

bool is_plain_relative_path(const std::string& name) {
  if (name.empty() || name.size() > kMaxRelativePathBytes) return false;
  size_t start = 0;
  while (true) {
    const size_t slash = name.find('/', start);
    const std::string part = name.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (!is_plain_file_name(part)) return false;  // also refuses "", "." and ".."
    if (slash == std::string::npos) return true;
    start = slash + 1;
  }
}

bool list_model_files(const std::string& dir, std::vector<ModelFile>& out, Findings& f) {
  out.clear();
  const size_t errors_before = f.count(Severity::error);
  const fs::path root(dir);
  std::error_code ec;
  auto it = fs::recursive_directory_iterator(root, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::directory_entry& entry = *it;
    const std::string base = entry.path().filename().string();
    const std::string name = entry.path().lexically_relative(root).generic_string();
    if (base.empty() || base[0] == '.') {
      it.disable_recursion_pending();  // a hidden directory's subtree is skipped too
      continue;
    }
    const EntryKind kind = classify(root, entry, name, f);
    if (kind == EntryKind::directory) {
      if (it.depth() + 1 >= kMaxModelDirDepth) {
        f.error("MODEL_DIR_LIMIT", name, "", std::nullopt,
                name + " lies more than " + std::to_string(kMaxModelDirDepth) + " directories deep; not read");
        it.disable_recursion_pending();
      }
      continue;
    }
    if (kind != EntryKind::regular) continue;
    if (out.size() == kMaxModelFiles) {
      f.error("MODEL_DIR_LIMIT", dir, "", std::nullopt,
              "the directory holds more than " + std::to_string(kMaxModelFiles) + " files; the rest is not read");
      break;
    }
    ModelFile mf;
    mf.name = name;
    mf.path = entry.path().string();
    mf.size = entry.file_size(ec);
    if (ec) {
      f.error("IO_OPEN", name, "", std::nullopt, "cannot stat " + name + ": " + ec.message());
      ec.clear();
      continue;
    }
    out.push_back(std::move(mf));
  }
  if (ec) f.error("IO_READDIR", dir, "", std::nullopt, "cannot list " + dir + ": " + ec.message());
  std::sort(out.begin(), out.end(), [](const ModelFile& a, const ModelFile& b) { return a.name < b.name; });
  return f.count(Severity::error) == errors_before;
}

}  // namespace ckpt
