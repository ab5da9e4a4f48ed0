#include "convert/output_dir.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

#include "convert/records.h"
#include "formats/checkpoint.h"
#include "formats/json.h"
#include "formats/json_writer.h"
#include "io/atomic_file.h"
#include "io/hash.h"
#include "io/input_file.h"
#include "io/mapped_file.h"

namespace ckpt {
namespace fs = std::filesystem;
namespace {

constexpr uint64_t kMaxManifestBytes = 64ull << 20;

std::string name_hash(std::string_view name) {
  Xxh3 h;
  h.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(name.data()), name.size()));
  return xxh3_hex(h.digest());
}

bool dir_has_entries(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::directory_iterator(dir, ec) != fs::directory_iterator();
}

// A path a manifest or record may name: relative, normal, inside OUT, not OUT's bookkeeping.
bool safe_relative(const std::string& rel) {
  if (rel.empty() || rel.find('\0') != std::string::npos) return false;
  fs::path p(rel);
  if (p.is_absolute() || p.lexically_normal().string() != rel) return false;
  for (const auto& part : p)
    if (part == ".." || part == "." || part == ".ckptkit") return false;
  return true;
}

// Opened as an input is: regular file, no symlink, bounded (io/input_file.h).
bool read_manifest_text(const std::string& path, std::string& text) {
  IoError err;
  return read_input_file(path, kMaxManifestBytes, text, err, InputLinks::refuse);
}

// "" when `path` is absent or of the type wanted (lstat: a symlink is never followed).
std::string entry_problem(const std::string& path, bool want_dir) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT ? "" : path + ": " + std::strerror(errno);
  if (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) return "";
  return path + " is " + file_kind_name(st.st_mode) + ", not a regular " + (want_dir ? "directory" : "file") +
         "; ckptkit keeps only those in .ckptkit/ and does not open it (remove it, or choose another output "
         "directory)";
}

}  // namespace

std::string state_dir(const std::string& out) { return (fs::path(out) / ".ckptkit").string(); }
std::string records_dir(const std::string& out) { return (fs::path(out) / ".ckptkit" / "records").string(); }
std::string out_lock_path(const std::string& out) { return output_dir_lock_path(out); }
std::string manifest_path(const std::string& out) { return (fs::path(out) / ".ckptkit" / "manifest.json").string(); }

std::string shard_lock_path(const std::string& out, const std::string& shard) {
  return (fs::path(out) / ".ckptkit" / "locks" / (name_hash(shard) + ".lock")).string();
}

bool out_has_content(const std::string& out) {
  std::error_code ec;
  for (auto it = fs::directory_iterator(out, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->path().filename() != ".ckptkit") return true;
  return is_ckptkit_output(out);
}

bool is_ckptkit_output(const std::string& out) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(manifest_path(out), ec)) || dir_has_entries(records_dir(out));
}

std::vector<std::string> checkpoint_files_in(const std::string& out) {
  std::vector<std::string> found;
  std::error_code ec;
  for (auto it = fs::directory_iterator(out, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.ends_with(".safetensors") || name == kIndexName || name == "config.json") found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  if (found.size() > 3) found.resize(3);
  return found;
}

std::vector<std::pair<std::string, std::string>> records_in(const std::string& out) {
  std::vector<std::pair<std::string, std::string>> records;
  std::error_code ec;
  for (auto it = fs::directory_iterator(records_dir(out), ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.ends_with(".json") || is_temp_name(name)) continue;
    auto rec = read_record(it->path().string());
    // A 0.1.0 record or an unreadable one is still known by its file name.
    std::string shard = rec && !rec->shard.empty() ? rec->shard : name.substr(0, name.size() - 5);
    records.emplace_back(it->path().string(), shard);
  }
  return records;
}

std::set<std::string> files_written_before(const std::string& out) {
  std::set<std::string> files;
  std::string text, error;
  JsonDoc doc;
  simdjson::dom::array list;
  if (read_manifest_text(manifest_path(out), text) && doc.parse(text, error))
    if (auto l = json_get(doc.root(), "files"); l && !l->get_array().get(list))
      for (auto f : list) {
        std::string_view name;
        if (!f.get_string().get(name)) files.emplace(name);
      }
  for (const auto& [path, shard] : records_in(out)) files.insert(shard);
  for (auto it = files.begin(); it != files.end();) it = safe_relative(*it) ? std::next(it) : files.erase(it);
  return files;
}

bool write_manifest(const std::string& out, const std::set<std::string>& files, mode_t mode, std::string& error) {
  JsonWriter w;
  w.begin_object().key("format").value("ckptkit-output").key("version").value(1);
  w.key("tool_version").value(CKPT_VERSION);
  w.key("files").begin_array();
  for (const auto& f : files) w.value(f);
  w.end_array().end_object();
  return write_out_file(manifest_path(out), w.str() + "\n", mode, error);
}

bool write_out_file(const std::string& path, const std::string& content, mode_t mode, std::string& error) {
  AtomicOutput out(path, mode);
  return out.open(error) && out.write(reinterpret_cast<const uint8_t*>(content.data()), content.size(), error) &&
         out.commit(error);
}

std::string state_files_problem(const std::string& out) {
  const std::string state = state_dir(out);
  for (const std::string& dir : {state, records_dir(out), (fs::path(state) / "locks").string()})
    if (std::string why = entry_problem(dir, true); !why.empty()) return why;
  for (const std::string& file : {manifest_path(out), out_lock_path(out)})
    if (std::string why = entry_problem(file, false); !why.empty()) return why;
  for (const std::string& dir : {records_dir(out), (fs::path(state) / "locks").string()}) {
    std::error_code ec;
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
      if (std::string why = entry_problem(it->path().string(), false); !why.empty()) return why;
  }
  return "";
}

bool remove_output_files(const std::string& out, const std::vector<std::string>& rel, std::string& error) {
  std::set<std::string> dirs;
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(out, ec);
  for (const auto& r : rel) {
    const fs::path p = fs::path(out) / r;
    // A directory on the way that became a symlink out of OUT is not followed.
    const fs::path parent = fs::weakly_canonical(p.parent_path(), ec);
    const auto inside = parent.lexically_relative(root);
    if (ec || inside.empty() || *inside.begin() == "..") continue;
    if (::unlink(p.c_str()) == 0) {
      dirs.insert(p.parent_path().string());
    } else if (errno != ENOENT && errno != EISDIR && errno != EPERM) {  // a directory now: not ours
      error = "cannot remove " + p.string() + ": " + std::strerror(errno);
      return false;
    }
  }
  for (const auto& d : dirs)
    if (!sync_directory(d, error)) return false;
  return true;
}

void remove_stale_temps(const std::string& out, const std::set<std::string>* only_for) {
  std::error_code ec;
  if (!fs::is_directory(out, ec)) return;
  std::vector<fs::path> stale;
  for (auto it = fs::recursive_directory_iterator(out, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!it->is_regular_file(ec) || !is_temp_name(name)) continue;
    if (only_for && std::none_of(only_for->begin(), only_for->end(),
                                 [&](const std::string& dest) { return is_temp_for(name, dest); }))
      continue;
    stale.push_back(it->path());
  }
  for (const auto& p : stale) fs::remove(p, ec);
}

LockResult lock_output(const std::string& out, const std::vector<std::string>* partition_shards,
                       const std::string& what, OutputLocks& locks, std::string& message) {
  const bool partition = partition_shards != nullptr;
  auto mode = partition ? FileLock::Mode::shared : FileLock::Mode::exclusive;
  std::string holder;
  switch (lock_output_dir(out, mode, what, locks.out, holder)) {
    case FileLock::Result::acquired: break;
    case FileLock::Result::busy:
      message = out + " is being written by another conversion (" + holder + "; lock " + out_lock_path(out) +
                "); wait for it to finish, or choose another output directory";
      return LockResult::busy;
    case FileLock::Result::error: message = holder; return LockResult::error;
  }
  if (!partition) return LockResult::acquired;
  const std::string locks_dir = (fs::path(state_dir(out)) / "locks").string();
  if (std::string why = entry_problem(locks_dir, true); !why.empty()) {  // never through a link
    message = why;
    return LockResult::error;
  }
  std::string error;
  if (!create_directories_durable(locks_dir, error)) {
    message = error;
    return LockResult::error;
  }
  for (const auto& shard : *partition_shards) {
    FileLock lock;
    switch (lock.acquire(shard_lock_path(out, shard), FileLock::Mode::exclusive, what, holder)) {
      case FileLock::Result::acquired: locks.shards.push_back(std::move(lock)); break;
      case FileLock::Result::busy:
        message = "shard " + shard + " of " + out + " is being converted by another run (" + holder +
                  "); two runs of one partition never write at once";
        return LockResult::busy;
      case FileLock::Result::error: message = holder; return LockResult::error;
    }
  }
  return LockResult::acquired;
}

}  // namespace ckpt
