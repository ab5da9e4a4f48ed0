#include "validate/hub_list.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include <tbb/parallel_for.h>

#include "formats/model_files.h"
#include "io/hash.h"
#include "io/mapped_file.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kHashStepBytes = 1u << 20;

bool is_blank(char c) { return c == ' ' || c == '\t'; }

std::string lower(std::string_view hex) {
  std::string out(hex);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct ParsedLine {
  std::string name, sha256;
};

// One non-blank, non-comment line in any of the three forms, or nullopt.
std::optional<ParsedLine> parse_line(std::string_view line) {
  // sha256sum: SHA256, one blank, an optional ' ' or '*' mode mark, NAME to the end.
  if (line.size() > 65 && is_hex_digest(line.substr(0, 64), 64) && is_blank(line[64])) {
    size_t at = 65;
    if (line[at] == ' ' || line[at] == '*') ++at;
    if (at < line.size()) return ParsedLine{std::string(line.substr(at)), lower(line.substr(0, 64))};
  }
  // sha256sum --tag: SHA256 (NAME) = SHA256
  constexpr std::string_view kTag = "SHA256 (";
  if (line.starts_with(kTag) && line.size() > kTag.size() + 68) {
    const std::string_view hash = line.substr(line.size() - 64);
    const std::string_view middle = line.substr(kTag.size(), line.size() - 64 - kTag.size());
    if (is_hex_digest(hash, 64) && middle.ends_with(") = ") && middle.size() > 4)
      return ParsedLine{std::string(middle.substr(0, middle.size() - 4)), lower(hash)};
  }
  // Hub listing: NAME, blanks, SHA256 at the end.
  size_t begin = 0;
  while (begin < line.size() && is_blank(line[begin])) ++begin;
  size_t end = line.size();
  while (end > begin && is_blank(line[end - 1])) --end;
  if (end - begin > 64 && is_hex_digest(line.substr(end - 64, 64), 64) && is_blank(line[end - 65])) {
    size_t name_end = end - 65;
    while (name_end > begin && is_blank(line[name_end - 1])) --name_end;
    if (name_end > begin) return ParsedLine{std::string(line.substr(begin, name_end - begin)), lower(line.substr(end - 64, 64))};
  }
  return std::nullopt;
}

// Why NAME is not a plain relative path, without repeating control characters.
std::string name_problem(const std::string& name) {
  if (std::any_of(name.begin(), name.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; }))
    return "the name holds a control character";
  if (name.starts_with("/")) return "'" + name + "' is an absolute path";
  return "'" + name + "' is not a plain relative path inside the checkpoint (no '..', '.', empty part, '\\')";
}

class HubListParser {
 public:
  HubListParser(const std::string& label, Findings& f) : label_(label), f_(f) {}

  // False once reading must stop (too many bad lines, too many entries).
  bool line(std::string_view text, uint64_t number, uint64_t offset, std::vector<HubListEntry>& out) {
    if (text.size() > kMaxHubListLineBytes)
      return bad("HUB_LIST_PARSE", number, offset, "is longer than " + std::to_string(kMaxHubListLineBytes) + " bytes");
    if (text.ends_with('\r')) text.remove_suffix(1);
    size_t first = 0;
    while (first < text.size() && is_blank(text[first])) ++first;
    if (first == text.size() || text[first] == '#') return true;
    if (text[0] == '\\')
      return bad("HUB_LIST_NAME", number, offset,
                 "is a sha256sum line with an escaped name (a '\\', newline or CR in it): not a plain file name");
    auto parsed = parse_line(text);
    if (!parsed)
      return bad("HUB_LIST_PARSE", number, offset,
                 "is not 'SHA256  NAME', 'NAME SHA256' or 'SHA256 (NAME) = SHA256' (SHA256: 64 hex digits)");
    std::string name = std::move(parsed->name);
    while (name.starts_with("./")) name.erase(0, 2);
    if (!is_plain_relative_path(name)) return bad("HUB_LIST_NAME", number, offset, name_problem(name));
    auto [it, inserted] = first_line_.emplace(name, number);
    if (!inserted)
      return bad("HUB_LIST_DUPLICATE", number, offset,
                 "lists '" + name + "' again (first on line " + std::to_string(it->second) +
                     "); which digest is meant is unknown");
    if (out.size() == kMaxHubListEntries) {
      f_.error("HUB_LIST_TOO_LARGE", label_, "", offset,
               "line " + std::to_string(number) + ": more than " + std::to_string(kMaxHubListEntries) +
                   " entries; not read further");
      return false;
    }
    out.push_back(HubListEntry{std::move(name), std::move(parsed->sha256), number});
    return true;
  }

 private:
  bool bad(const char* code, uint64_t number, uint64_t offset, const std::string& why) {
    f_.error(code, label_, "", offset, "line " + std::to_string(number) + " " + why);
    if (++bad_lines_ < kMaxHubListBadLines) return true;
    f_.error("HUB_LIST_PARSE", label_, "", offset,
             "stopped reading after " + std::to_string(bad_lines_) + " bad lines (line " + std::to_string(number) + ")");
    return false;
  }

  const std::string& label_;
  Findings& f_;
  std::map<std::string, uint64_t> first_line_;
  size_t bad_lines_ = 0;
};

// The list file's text: a regular file (never a FIFO or device), at most kMaxHubListBytes,
// read with pread.
bool read_list(const std::string& path, std::string& text, Findings& f) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    f.error("IO_OPEN", path, "", std::nullopt, "cannot read the hash list " + path + ": no such file");
    return false;
  }
  if (!fs::is_regular_file(status)) {
    f.error("IO_NOT_REGULAR", path, "", std::nullopt, "the hash list " + path + " is not a regular file");
    return false;
  }
  MappedFile file;
  IoError err;
  if (!file.open(path, err)) {
    f.error("IO_OPEN", path, "", std::nullopt, "cannot read the hash list " + path + ": " + err.message);
    return false;
  }
  if (file.size() > kMaxHubListBytes) {
    f.error("HUB_LIST_TOO_LARGE", path, "", std::nullopt,
            "the hash list is " + std::to_string(file.size()) + " bytes, above the limit " +
                std::to_string(kMaxHubListBytes));
    return false;
  }
  text.assign(static_cast<size_t>(file.size()), '\0');
  if (!file.read_at(0, std::span<uint8_t>(reinterpret_cast<uint8_t*>(text.data()), text.size()), err)) {
    f.error("IO_READ", path, "", std::nullopt, "cannot read the hash list " + path + ": " + err.message);
    return false;
  }
  return true;
}

// SHA-256 of a whole file, read with pread in bounded steps.
bool sha256_of_file(const std::string& path, uint64_t& size, std::string& hex, IoError& err) {
  MappedFile file;
  if (!file.open(path, err)) return false;
  size = file.size();
  Sha256 sha;
  std::vector<uint8_t> buffer(static_cast<size_t>(std::min<uint64_t>(kHashStepBytes, size)));
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min<uint64_t>(buffer.size(), size - done);
    std::span<uint8_t> step(buffer.data(), static_cast<size_t>(n));
    if (!file.read_at(done, step, err)) return false;
    sha.update(step);
    done += n;
  }
  hex = sha.hex_digest();
  return true;
}

// A listed name that is not a shard: looked up inside the checkpoint directory, refused
// when a link leads out of it or it is not a regular file, else hashed.
void check_side_entry(const fs::path& root, const HubListEntry& e, FileReport& fr, Findings& f) {
  fr.name = e.name;
  fr.expected_sha256 = e.sha256;
  const fs::path path = root / e.name;
  std::error_code ec;
  if (link_escapes_directory(root, path)) {
    fr.hub_status = "refused";
    f.error("HUB_PATH_ESCAPE", e.name, "", std::nullopt,
            e.name + " is listed, but it is a link leading outside the checkpoint; not read");
    return;
  }
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    fr.hub_status = "missing";
    f.error("HUB_FILE_MISSING", e.name, "", std::nullopt, e.name + " is in the hash list but not in the checkpoint");
    return;
  }
  if (!fs::is_regular_file(status)) {
    fr.hub_status = "refused";
    f.error("IO_NOT_REGULAR", e.name, "", std::nullopt, e.name + " is listed, but it is not a regular file; not read");
    return;
  }
  IoError err;
  if (!sha256_of_file(path.string(), fr.size, fr.sha256, err)) {
    fr.hub_status = "refused";
    f.error("IO_READ", e.name, "", std::nullopt, "cannot read " + e.name + ": " + err.message);
    return;
  }
  fr.hub_status = fr.sha256 == e.sha256 ? "ok" : "mismatch";
}

void report_mismatch(const FileReport& file, Findings& f) {
  f.error("HUB_SHA256_MISMATCH", file.name, "", std::nullopt,
          file.name + " has SHA-256 " + file.sha256 + " but the hash list expects " + file.expected_sha256);
}

}  // namespace

bool parse_hub_list(std::string_view text, const std::string& label, std::vector<HubListEntry>& out, Findings& f) {
  out.clear();
  const size_t errors_before = f.count(Severity::error);
  HubListParser parser(label, f);
  uint64_t number = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t nl = text.find('\n', start);
    const size_t end = nl == std::string_view::npos ? text.size() : nl;
    if (!parser.line(text.substr(start, end - start), ++number, start, out)) break;
    start = end + 1;
  }
  if (out.empty() && f.count(Severity::error) == errors_before)
    f.error("HUB_LIST_EMPTY", label, "", std::nullopt,
            "the hash list holds no 'SHA256  NAME' line (" + std::to_string(number) +
                " lines read); nothing would be checked");
  if (f.count(Severity::error) == errors_before) return true;
  out.clear();
  return false;
}

bool read_hub_list(const std::string& list, std::vector<HubListEntry>& entries, Findings& findings) {
  std::string text;
  return read_list(list, text, findings) && parse_hub_list(text, list, entries, findings);
}

void check_hub_list(const std::string& list, const std::string& model_path, bool every_shard, ValidationReport& report) {
  std::vector<HubListEntry> entries;
  if (read_hub_list(list, entries, report.findings)) check_hub_entries(entries, list, model_path, every_shard, report);
}

void check_hub_entries(const std::vector<HubListEntry>& entries, const std::string& list, const std::string& model_path,
                       bool every_shard, ValidationReport& report) {
  std::map<std::string, const HubListEntry*> by_name;
  for (const auto& e : entries) by_name.emplace(e.name, &e);
  for (auto& file : report.files) {
    auto it = by_name.find(file.name);
    if (it == by_name.end()) {
      file.hub_status = "extra";
      const std::string why = file.name + " is not in the hash list " + list;
      if (every_shard)
        report.findings.error("HUB_FILE_NOT_LISTED", file.name, "", std::nullopt, why + ", which must list every shard");
      else
        report.findings.warning("HUB_FILE_NOT_LISTED", file.name, "", std::nullopt, why);
      continue;
    }
    file.expected_sha256 = it->second->sha256;
    file.hub_status = file.sha256 == it->second->sha256 ? "ok" : "mismatch";
    if (file.hub_status == "mismatch") report_mismatch(file, report.findings);
    by_name.erase(it);
  }
  // The other listed names, in name order: files of the checkpoint directory beside the
  // shards (a single-file checkpoint has none), each hashed on its own.
  std::error_code ec;
  const bool directory = fs::is_directory(model_path, ec);
  std::vector<const HubListEntry*> side;
  for (const auto& [name, e] : by_name) side.push_back(e);
  std::vector<FileReport> side_reports(side.size());
  std::vector<Findings> side_findings(side.size());
  tbb::parallel_for(size_t{0}, side.size(), [&](size_t i) {
    if (directory) return check_side_entry(fs::path(model_path), *side[i], side_reports[i], side_findings[i]);
    side_reports[i] = FileReport{side[i]->name, 0, "", side[i]->sha256, "missing"};
    side_findings[i].error("HUB_FILE_MISSING", side[i]->name, "", std::nullopt,
                           side[i]->name + " is in the hash list, but " + model_path + " is a single file");
  });
  for (size_t i = 0; i < side.size(); ++i) {
    report.findings.append(side_findings[i]);
    if (side_reports[i].hub_status == "mismatch") report_mismatch(side_reports[i], report.findings);
    if (!side_reports[i].sha256.empty()) report.bytes_read += side_reports[i].size;
    report.files.push_back(std::move(side_reports[i]));
  }
}

}  // namespace ckpt
