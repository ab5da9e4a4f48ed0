#include "convert/records.h"

#include <filesystem>
#include <vector>

#include "formats/json.h"
#include "io/hash.h"
#include "io/mapped_file.h"
#include "formats/json_writer.h"

namespace ckpt {
namespace fs = std::filesystem;

std::string record_path(const std::string& out_dir, const std::string& shard) {
  return (fs::path(out_dir) / ".ckptkit" / "records" / (shard + ".json")).string();
}

std::string record_json(const ShardRecord& rec) {
  JsonWriter w;
  w.begin_object();
  w.key("shard").value(rec.shard).key("tool_version").value(rec.tool_version);
  w.key("input_size").value(rec.input_size).key("input_mtime_ns").value(rec.input_mtime_ns);
  w.key("input_header_xxh3").value(rec.input_header_xxh3).key("input_xxh3").value(rec.input_xxh3);
  w.key("plan_xxh3").value(rec.plan_xxh3);
  w.key("output_size").value(rec.output_size).key("output_xxh3").value(rec.output_xxh3);
  if (rec.partition_count > 0)
    w.key("partition").begin_object().key("index").value(rec.partition_index).key("count").value(rec.partition_count)
        .end_object();
  w.end_object();
  return w.str() + "\n";
}

std::optional<ShardRecord> read_record(const std::string& path) {
  MappedFile f;
  IoError err;
  if (!f.open(path, err) || f.size() > (1u << 20)) return std::nullopt;
  auto b = f.bytes();
  std::string text(reinterpret_cast<const char*>(b.data()), b.size()), error;
  JsonDoc doc;
  if (!doc.parse(text, error)) return std::nullopt;
  auto root = doc.root();
  ShardRecord r;
  r.shard = json_string(root, "shard").value_or("");
  r.tool_version = json_string(root, "tool_version").value_or("");
  r.input_size = static_cast<uint64_t>(json_int(root, "input_size").value_or(-1));
  r.input_mtime_ns = json_int(root, "input_mtime_ns").value_or(-1);
  r.input_header_xxh3 = json_string(root, "input_header_xxh3").value_or("");
  r.input_xxh3 = json_string(root, "input_xxh3").value_or("");
  r.plan_xxh3 = json_string(root, "plan_xxh3").value_or("");
  r.output_size = static_cast<uint64_t>(json_int(root, "output_size").value_or(-1));
  r.output_xxh3 = json_string(root, "output_xxh3").value_or("");
  if (auto p = json_get(root, "partition")) {
    auto index = json_int(*p, "index"), count = json_int(*p, "count");
    if (index && count && *index >= 0 && *count > *index && *count <= UINT32_MAX) {
      r.partition_index = static_cast<uint32_t>(*index);
      r.partition_count = static_cast<uint32_t>(*count);
    }
  }
  return r;
}

bool record_complete(const ShardRecord& rec) {
  return !rec.shard.empty() && rec.input_size != UINT64_MAX && rec.input_mtime_ns >= 0 &&
         is_hex_digest(rec.input_header_xxh3, 16) && is_hex_digest(rec.input_xxh3, 16) &&
         is_hex_digest(rec.plan_xxh3, 16) && rec.output_size != UINT64_MAX && is_hex_digest(rec.output_xxh3, 16);
}

std::optional<std::string> file_xxh3(const std::string& path) {
  MappedFile f;
  IoError err;
  if (!f.open(path, err)) return std::nullopt;
  Xxh3 h;
  std::vector<uint8_t> buf(1u << 20);
  for (uint64_t pos = 0; pos < f.size();) {
    uint64_t n = std::min<uint64_t>(buf.size(), f.size() - pos);
    if (!f.read_at(pos, std::span<uint8_t>(buf.data(), n), err)) return std::nullopt;
    h.update(std::span<const uint8_t>(buf.data(), n));
    pos += n;
  }
  return xxh3_hex(h.digest());
}

bool shard_already_done(const LoadedModel& in, const PlannedShard& shard, const std::string& out_dir) {
  auto rec = read_record(record_path(out_dir, shard.name));
  if (!rec || !same_input_identity(*rec, input_identity(in, shard))) return false;
  std::string out_path = (fs::path(out_dir) / shard.name).string();
  std::error_code ec;
  if (fs::file_size(out_path, ec) != rec->output_size || ec) return false;
  return file_xxh3(out_path) == rec->output_xxh3;
}

}  // namespace ckpt
