#include "formats/gguf.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <unordered_set>

#include "core/checked_math.h"
#include "core/ggml_types.h"

namespace ckpt {

namespace {

constexpr uint64_t kMinKvBytes = 13;           // u64 key length + i32 type + 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 24;   // u64 name length + u32 n_dims + i32 type + u64 offset
constexpr uint64_t kMaxKeyLength = 65535;      // key syntax rule (gguf.md §3, not in gguf.cpp)
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kInt64Max = static_cast<uint64_t>(INT64_MAX);

std::string num(uint64_t v) { return std::to_string(v); }


bool valid_value_type(int32_t type) { return type >= 0 && type < kGgufTypeCount; }

// Index of the first byte that breaks UTF-8 (overlongs, surrogates and > U+10FFFF included).
std::optional<size_t> first_invalid_utf8(std::span<const uint8_t> s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = s[i];
    if (c < 0x80) { ++i; continue; }
    size_t len = 0;
    uint32_t cp = 0, min_cp = 0;
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; min_cp = 0x80; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; min_cp = 0x800; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; min_cp = 0x10000; }
    else return i;
    if (s.size() - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::nullopt;
}

// ASCII lower_snake_case segments joined by '.', e.g. "qwen3next.ssm.conv_kernel".
bool key_syntax_ok(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyLength) return false;
  bool segment_empty = true;
  for (char c : key) {
    if (c == '.') {
      if (segment_empty) return false;
      segment_empty = true;
    } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') {
      segment_empty = false;
    } else {
      return false;
    }
  }
  return !segment_empty;
}

// A cursor over the file's bytes: every read checks the bytes remaining first
// (the gguf.cpp reader-object pattern), so no offset from the file is used unchecked.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> bytes) : bytes_(bytes), size_(bytes.size()) {}
  // Reads the file through pread in 4 MiB windows (never a mapping: a file truncated
  // under us is an IO_READ error, not a SIGBUS).
  explicit ByteReader(const InputFile& file)
      : file_(&file), window_(std::in_place, file, size_t{4} << 20), size_(file.size()) {}
  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t remaining() const { return size_ - pos_; }
  template <class T>
  bool read(T& out) {
    if (remaining() < sizeof(T)) return false;
    auto b = at(pos_, sizeof(T));
    if (b.size() != sizeof(T)) return false;
    std::memcpy(&out, b.data(), sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool skip(uint64_t n) {
    if (n > remaining()) return false;
    pos_ += n;
    return true;
  }
  // The next n bytes; the caller has checked n <= remaining(). Empty when a read failed.
  std::span<const uint8_t> peek(uint64_t n) const { return at(pos_, n); }
  // Bytes [offset, offset + n) of the file (inside it); empty when a read failed.
  std::span<const uint8_t> at(uint64_t offset, uint64_t n) const {
    if (!window_) return bytes_.subspan(static_cast<size_t>(offset), static_cast<size_t>(n));
    std::span<const uint8_t> out;
    if (io_failed_ || !window_->get(offset, n, out, io_error_)) {
      io_failed_ = true;
      return {};
    }
    return out;
  }
  // The same for a short random read (padding between tensors in the data section):
  // exactly n bytes read (n is below the alignment limit, 1 MiB), the window untouched.
  std::span<const uint8_t> exact(uint64_t offset, uint64_t n) const {
    if (!file_) return bytes_.subspan(static_cast<size_t>(offset), static_cast<size_t>(n));
    if (io_failed_ || file_->read_range(offset, n, scratch_, io_error_) == false) {
      io_failed_ = true;
      return {};
    }
    return scratch_;
  }
  bool io_failed() const { return io_failed_; }
  const IoError& io_error() const { return io_error_; }

 private:
  std::span<const uint8_t> bytes_;
  const InputFile* file_ = nullptr;
  mutable std::optional<InputWindow> window_;
  mutable std::vector<uint8_t> scratch_;
  mutable bool io_failed_ = false;
  mutable IoError io_error_;
  uint64_t size_ = 0;
  uint64_t pos_ = 0;
};

class GgufParser {
 public:
  GgufParser(std::span<const uint8_t> file, const std::string& display, Findings& findings)
      : r_(file), display_(display), f_(findings) {
    g_.file_size = r_.size();
  }
  GgufParser(const InputFile& file, const std::string& display, Findings& findings)
      : r_(file), display_(display), f_(findings) {
    g_.file_size = r_.size();
  }
  std::optional<GgufFile> run();

 private:
  std::optional<GgufFile> parse();
  bool read_header();
  bool check_counts();
  bool read_kv();
  bool read_value(GgufKV& kv);
  bool read_scalar(GgufKV& kv);
  bool read_array(GgufKV& kv);
  bool walk_string_array(GgufKV& kv);
  void check_bool_array(const GgufKV& kv);
  void check_key(const GgufKV& kv, std::unordered_set<std::string>& seen);
  void apply_alignment();
  void check_vocab();
  bool read_tensor_info(std::unordered_set<std::string>& seen);
  bool read_dims(GgufTensorInfo& t, bool& valid);
  void check_type_and_size(GgufTensorInfo& t, bool& valid);
  void check_data_layout();
  void check_tensor_offsets(uint64_t& data_end);
  void check_zero_bytes(uint64_t begin, uint64_t end, const std::string& tensor, const std::string& what);
  void warn_unpadded_end(const GgufTensorInfo& last, uint64_t padded_end);

  // Reads a length-prefixed string into out (or only validates it when out is null).
  bool read_string(const std::string& what, const std::string& tensor, std::string* out,
                   std::optional<uint64_t>* bad_utf8_at);
  bool truncated(const std::string& what, const std::string& tensor, uint64_t at, uint64_t need);
  void error(const char* code, const std::string& tensor, uint64_t at, std::string msg) {
    f_.error(code, display_, tensor, at, std::move(msg));
  }
  void warning(const char* code, const std::string& tensor, uint64_t at, std::string msg) {
    f_.warning(code, display_, tensor, at, std::move(msg));
  }

  ByteReader r_;
  const std::string& display_;
  Findings& f_;
  GgufFile g_;
  std::vector<bool> tensor_valid_;  // shape, type and size all checked out
};

bool GgufParser::truncated(const std::string& what, const std::string& tensor, uint64_t at, uint64_t need) {
  error("GGUF_TRUNCATED", tensor, at,
        what + " needs " + num(need) + " bytes at offset " + num(at) + " but only " +
            num(r_.size() - std::min(at, r_.size())) + " remain in the " + num(r_.size()) + "-byte file");
  return false;
}

bool GgufParser::read_header() {
  uint8_t magic[4];
  if (!r_.read(magic)) return truncated("the magic", "", 0, 4);
  if (std::memcmp(magic, "FUGG", 4) == 0) {
    error("GGUF_BIG_ENDIAN", "", 0, "magic is byte-reversed (\"FUGG\"): a big-endian GGUF, only little-endian is supported");
    return false;
  }
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "%02x %02x %02x %02x", magic[0], magic[1], magic[2], magic[3]);
    error("GGUF_BAD_MAGIC", "", 0, std::string("magic bytes are ") + hex + ", expected 47 47 55 46 (\"GGUF\")");
    return false;
  }
  if (!r_.read(g_.version)) return truncated("the version", "", 4, 4);
  const uint32_t v = g_.version;
  if (v == 0) {
    error("GGUF_BAD_VERSION", "", 4, "version is 0, expected 2 or 3");
    return false;
  }
  if ((v & 0xFFFF) == 0) {
    error("GGUF_BIG_ENDIAN", "", 4, "version field is " + num(v) + " (low 16 bits zero): a big-endian GGUF, only little-endian is supported");
    return false;
  }
  if (v == 1 || v > 3) {
    error("GGUF_BAD_VERSION", "", 4, "version is " + num(v) + (v == 1 ? " (GGUFv1 is no longer supported)" : "") + ", expected 2 or 3");
    return false;
  }
  if (!r_.read(g_.n_tensors)) return truncated("n_tensors", "", 8, 8);
  if (!r_.read(g_.n_kv)) return truncated("n_kv", "", 16, 8);
  return check_counts();
}

// Bounds both counts by the bytes after the header before anything is allocated:
// a crafted n_tensors = 2^63 is an error here, never a huge reserve.
bool GgufParser::check_counts() {
  const uint64_t rest = r_.remaining();
  const uint64_t max_tensors = rest / kMinTensorInfoBytes;
  if (g_.n_tensors > kInt64Max || g_.n_tensors > max_tensors) {
    error("GGUF_COUNT_TOO_LARGE", "", 8,
          "n_tensors is " + num(g_.n_tensors) + " but the " + num(rest) + " bytes after the header hold at most " +
              num(max_tensors) + " tensor infos of " + num(kMinTensorInfoBytes) + "+ bytes (corrupt count or truncated file)");
    return false;
  }
  const uint64_t rest_for_kv = rest - g_.n_tensors * kMinTensorInfoBytes;
  const uint64_t max_kv = rest_for_kv / kMinKvBytes;
  if (g_.n_kv > kInt64Max || g_.n_kv > max_kv) {
    error("GGUF_COUNT_TOO_LARGE", "", 16,
          "n_kv is " + num(g_.n_kv) + " but the " + num(rest_for_kv) + " bytes left after " + num(g_.n_tensors) +
              " minimal tensor infos hold at most " + num(max_kv) + " KV pairs of " + num(kMinKvBytes) +
              "+ bytes (corrupt count or truncated file)");
    return false;
  }
  return true;
}

bool GgufParser::read_string(const std::string& what, const std::string& tensor, std::string* out,
                             std::optional<uint64_t>* bad_utf8_at) {
  const uint64_t at = r_.pos();
  uint64_t len = 0;
  if (!r_.read(len)) return truncated("the length of " + what, tensor, at, 8);
  if (len > kGgufMaxStringLength) {
    error("GGUF_STRING_TOO_LONG", tensor, at,
          what + " has length " + num(len) + ", more than the " + num(kGgufMaxStringLength) + "-byte limit");
    return false;
  }
  if (len > r_.remaining()) return truncated(what + " of " + num(len) + " bytes", tensor, at + 8, len);
  auto bytes = r_.peek(len);
  if (bad_utf8_at != nullptr && !bad_utf8_at->has_value()) {
    if (auto bad = first_invalid_utf8(bytes)) *bad_utf8_at = at + 8 + *bad;
  }
  if (out != nullptr) out->assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  r_.skip(len);
  return true;
}

bool GgufParser::read_kv() {
  GgufKV kv;
  kv.offset = r_.pos();
  std::optional<uint64_t> bad_utf8;
  if (!read_string("key", "", &kv.key, &bad_utf8)) return false;
  if (bad_utf8) warning("GGUF_BAD_UTF8", "", *bad_utf8, "key at offset " + num(kv.offset) + " is not valid UTF-8 (first bad byte at " + num(*bad_utf8) + ")");
  const uint64_t type_at = r_.pos();
  if (!r_.read(kv.type)) return truncated("the value type of key '" + kv.key + "'", "", type_at, 4);
  if (!valid_value_type(kv.type)) {
    error("GGUF_BAD_KV_TYPE", "", type_at,
          "key '" + kv.key + "' has value type " + std::to_string(kv.type) + ", expected 0..12");
    return false;
  }
  if (!read_value(kv)) return false;
  g_.kvs.push_back(std::move(kv));
  return true;
}

bool GgufParser::read_value(GgufKV& kv) {
  if (kv.type == kGgufArray) return read_array(kv);
  if (kv.type == kGgufString) {
    std::string s;
    std::optional<uint64_t> bad_utf8;
    if (!read_string("the value of key '" + kv.key + "'", "", &s, &bad_utf8)) return false;
    if (bad_utf8) warning("GGUF_BAD_UTF8", "", *bad_utf8, "string value of key '" + kv.key + "' is not valid UTF-8 (first bad byte at " + num(*bad_utf8) + ")");
    kv.scalar = std::move(s);
    return true;
  }
  return read_scalar(kv);
}

bool GgufParser::read_scalar(GgufKV& kv) {
  const uint64_t at = r_.pos();
  const uint64_t size = gguf_value_type_size(kv.type);
  if (r_.remaining() < size) return truncated("the value of key '" + kv.key + "'", "", at, size);
  uint8_t raw[8] = {};
  auto bytes = r_.peek(size);
  if (bytes.size() != size) return false;  // a failed read (run() reports IO_READ)
  std::memcpy(raw, bytes.data(), size);
  r_.skip(size);
  auto load = [&](auto v) { std::memcpy(&v, raw, sizeof v); return v; };
  switch (kv.type) {
    case kGgufUint8: kv.scalar = uint64_t{load(uint8_t{})}; break;
    case kGgufUint16: kv.scalar = uint64_t{load(uint16_t{})}; break;
    case kGgufUint32: kv.scalar = uint64_t{load(uint32_t{})}; break;
    case kGgufUint64: kv.scalar = load(uint64_t{}); break;
    case kGgufInt8: kv.scalar = int64_t{load(int8_t{})}; break;
    case kGgufInt16: kv.scalar = int64_t{load(int16_t{})}; break;
    case kGgufInt32: kv.scalar = int64_t{load(int32_t{})}; break;
    case kGgufInt64: kv.scalar = load(int64_t{}); break;
    case kGgufFloat32: kv.scalar = double{load(float{})}; break;
    case kGgufFloat64: kv.scalar = load(double{}); break;
    case kGgufBool:
      if (raw[0] > 1) warning("GGUF_BAD_BOOL", "", at, "bool key '" + kv.key + "' holds " + num(raw[0]) + ", expected 0 or 1");
      kv.scalar = raw[0] != 0;
      break;
    default: break;
  }
  return true;
}

bool GgufParser::read_array(GgufKV& kv) {
  const uint64_t at = r_.pos();
  if (!r_.read(kv.array_type)) return truncated("the element type of array '" + kv.key + "'", "", at, 4);
  if (kv.array_type == kGgufArray) {
    error("GGUF_NESTED_ARRAY", "", at, "key '" + kv.key + "' is an array of arrays, which gguf.cpp rejects");
    return false;
  }
  if (!valid_value_type(kv.array_type)) {
    error("GGUF_BAD_KV_TYPE", "", at,
          "array '" + kv.key + "' has element type " + std::to_string(kv.array_type) + ", expected 0..12 except 9");
    return false;
  }
  if (!r_.read(kv.array_count)) return truncated("the length of array '" + kv.key + "'", "", at + 4, 8);
  if (kv.array_count > kGgufMaxArrayElements) {
    error("GGUF_ARRAY_TOO_LONG", "", at + 4,
          "array '" + kv.key + "' has " + num(kv.array_count) + " elements, more than the limit of " + num(kGgufMaxArrayElements));
    return false;
  }
  kv.array_offset = r_.pos();
  if (kv.array_type == kGgufString) return walk_string_array(kv);
  const uint64_t bytes = kv.array_count * gguf_value_type_size(kv.array_type);  // <= 2^33: no overflow
  if (bytes > r_.remaining()) {
    return truncated("array '" + kv.key + "' of " + num(kv.array_count) + " " + gguf_value_type_name(kv.array_type),
                     "", kv.array_offset, bytes);
  }
  if (kv.array_type == kGgufBool) check_bool_array(kv);
  r_.skip(bytes);
  return true;
}

// String arrays have no fixed stride: walk every element, bounds-checked, storing none.
bool GgufParser::walk_string_array(GgufKV& kv) {
  const uint64_t min_bytes = kv.array_count * 8;  // each element is at least its u64 length
  if (min_bytes > r_.remaining()) {
    return truncated("array '" + kv.key + "' of " + num(kv.array_count) + " STRING", "", kv.array_offset, min_bytes);
  }
  std::optional<uint64_t> bad_utf8;
  const std::string what = "an element of array '" + kv.key + "'";
  for (uint64_t i = 0; i < kv.array_count; ++i) {
    if (!read_string(what, "", nullptr, &bad_utf8)) return false;
  }
  if (bad_utf8) warning("GGUF_BAD_UTF8", "", *bad_utf8, "array '" + kv.key + "' holds a string that is not valid UTF-8 (first bad byte at " + num(*bad_utf8) + ")");
  return true;
}

void GgufParser::check_bool_array(const GgufKV& kv) {
  auto bytes = r_.peek(kv.array_count);
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] > 1) {
      warning("GGUF_BAD_BOOL", "", kv.array_offset + i,
              "bool array '" + kv.key + "' element " + num(i) + " holds " + num(bytes[i]) + ", expected 0 or 1");
      return;
    }
  }
}

void GgufParser::check_key(const GgufKV& kv, std::unordered_set<std::string>& seen) {
  if (kv.key.empty()) {
    error("GGUF_KEY_EMPTY", "", kv.offset, "KV pair at offset " + num(kv.offset) + " has an empty key (length 0, expected at least 1)");
    return;
  }
  if (!seen.insert(kv.key).second) {
    error("GGUF_KEY_DUPLICATE", "", kv.offset, "key '" + kv.key + "' appears more than once (expected unique keys)");
  }
  if (!key_syntax_ok(kv.key)) {
    warning("GGUF_KEY_SYNTAX", "", kv.offset,
            "key '" + kv.key + "' (" + num(kv.key.size()) +
                " bytes) is not lower_snake_case ASCII segments joined by '.' of at most " + num(kMaxKeyLength) + " bytes");
  }
}

void GgufParser::apply_alignment() {
  const GgufKV* kv = g_.find_kv("general.alignment");
  if (kv == nullptr) return;
  if (kv->type != kGgufUint32) {
    error("GGUF_BAD_ALIGNMENT", "", kv->offset,
          "general.alignment is stored as " + gguf_value_type_name(kv->type) + ", expected UINT32; using the default " +
              num(kGgufDefaultAlignment));
    return;
  }
  const uint64_t a = std::get<uint64_t>(kv->scalar);
  if (!is_power_of_two(a) || a > kGgufMaxAlignment) {
    error("GGUF_BAD_ALIGNMENT", "", kv->offset,
          "general.alignment is " + num(a) + ", expected a power of two between 1 and " + num(kGgufMaxAlignment) +
              "; using the default " + num(kGgufDefaultAlignment));
    return;
  }
  g_.alignment = a;
}

// llama-vocab casts these arrays without checking their element types (PR #26690).
void GgufParser::check_vocab() {
  struct VocabArray { const char* key; int32_t elem; };
  constexpr VocabArray kVocab[] = {{"tokenizer.ggml.tokens", kGgufString}, {"tokenizer.ggml.scores", kGgufFloat32},
                                   {"tokenizer.ggml.token_type", kGgufInt32}, {"tokenizer.ggml.merges", kGgufString}};
  for (const VocabArray& v : kVocab) {
    const GgufKV* kv = g_.find_kv(v.key);
    if (kv == nullptr || (kv->type == kGgufArray && kv->array_type == v.elem)) continue;
    const std::string found = kv->type == kGgufArray ? "array of " + gguf_value_type_name(kv->array_type)
                                                     : gguf_value_type_name(kv->type);
    error("GGUF_VOCAB_TYPE", "", kv->offset,
          std::string(v.key) + " is " + found + ", expected array of " + gguf_value_type_name(v.elem));
  }
  const GgufKV* tokens = g_.find_kv("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->type != kGgufArray) return;
  for (const char* key : {"tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
    const GgufKV* kv = g_.find_kv(key);
    if (kv == nullptr || kv->type != kGgufArray || kv->array_count == tokens->array_count) continue;
    error("GGUF_VOCAB_COUNT", "", kv->offset,
          std::string(key) + " has " + num(kv->array_count) + " entries, expected " + num(tokens->array_count) +
              " (one per entry of tokenizer.ggml.tokens)");
  }
}

bool GgufParser::read_dims(GgufTensorInfo& t, bool& valid) {
  const uint64_t at = r_.pos();
  if (!r_.read(t.n_dims)) return truncated("n_dims", t.name, at, 4);
  if (t.n_dims > kMaxDims) {
    error("GGUF_BAD_NDIMS", t.name, at, "tensor '" + t.name + "' has n_dims " + num(t.n_dims) + ", expected at most 4");
    return false;
  }
  for (uint32_t j = 0; j < t.n_dims; ++j) {
    const uint64_t dim_at = r_.pos();
    int64_t ne = 0;
    if (!r_.read(ne)) return truncated("ne[" + num(j) + "]", t.name, dim_at, 8);
    if (ne < 0) {
      error("GGUF_BAD_DIM", t.name, dim_at,
            "tensor '" + t.name + "' has ne[" + num(j) + "] = " + std::to_string(ne) + ", expected >= 0");
      valid = false;
      ne = 0;
    }
    t.ne[j] = static_cast<uint64_t>(ne);
  }
  // gguf.cpp: the element count must fit in int64 (checked only when no dim is 0).
  const bool any_zero = std::find(t.ne, t.ne + 4, uint64_t{0}) != t.ne + 4;
  auto elements = checked_product(std::span<const uint64_t>(t.ne, 4));
  if (valid && !any_zero && (!elements || *elements > kInt64Max)) {
    error("GGUF_SHAPE_OVERFLOW", t.name, at,
          "tensor '" + t.name + "' shape " + shape_to_string(std::span<const uint64_t>(t.ne, t.n_dims)) +
              " has more than INT64_MAX (" + num(kInt64Max) + ") elements");
    valid = false;
  }
  return true;
}

void GgufParser::check_type_and_size(GgufTensorInfo& t, bool& valid) {
  const uint64_t at = r_.pos() - 4;  // the type field just read
  const GgmlTypeInfo* info = ggml_type_info(t.type);
  if (info == nullptr) {
    error("GGUF_UNKNOWN_TYPE", t.name, at,
          "tensor '" + t.name + "' has ggml type " + std::to_string(t.type) + ", expected 0.." + num(kGgmlTypeCount - 1));
    valid = false;
    return;
  }
  if (info->removed) {
    error("GGUF_REMOVED_TYPE", t.name, at,
          "tensor '" + t.name + "' has ggml type " + std::to_string(t.type) + " (" + ggml_type_name(t.type) +
              "), which ggml no longer supports");
    valid = false;
    return;
  }
  if (!valid) return;
  if (t.ne[0] % info->block_size != 0) {
    error("GGUF_BLOCK_MISMATCH", t.name, at,
          "tensor '" + t.name + "' of type " + info->name + " has ne[0] = " + num(t.ne[0]) +
              ", expected a multiple of the block size " + num(info->block_size));
    valid = false;
    return;
  }
  auto nbytes = ggml_nbytes(t.type, t.ne);
  if (!nbytes) {
    error("GGUF_SIZE_OVERFLOW", t.name, at,
          "tensor '" + t.name + "' of type " + info->name + " and shape " +
              shape_to_string(std::span<const uint64_t>(t.ne, t.n_dims)) + " needs more than 2^64-1 bytes");
    valid = false;
    return;
  }
  t.nbytes = *nbytes;
}

bool GgufParser::read_tensor_info(std::unordered_set<std::string>& seen) {
  GgufTensorInfo t;
  t.info_offset = r_.pos();
  std::optional<uint64_t> bad_utf8;
  if (!read_string("a tensor name", "", &t.name, &bad_utf8)) return false;
  if (bad_utf8) warning("GGUF_BAD_UTF8", t.name, *bad_utf8, "tensor name at offset " + num(t.info_offset) + " is not valid UTF-8");
  if (t.name.size() > kGgufMaxNameLength) {
    error("GGUF_NAME_TOO_LONG", t.name, t.info_offset,
          "tensor name '" + t.name + "' is " + num(t.name.size()) + " bytes, expected at most " + num(kGgufMaxNameLength));
  }
  if (!seen.insert(t.name).second) {
    error("GGUF_NAME_DUPLICATE", t.name, t.info_offset, "tensor name '" + t.name + "' appears more than once (expected unique names)");
  }
  bool valid = true;
  if (!read_dims(t, valid)) return false;
  if (!r_.read(t.type)) return truncated("the ggml type", t.name, r_.pos(), 4);
  check_type_and_size(t, valid);
  if (!r_.read(t.offset)) return truncated("the data offset", t.name, r_.pos(), 8);
  if (!valid) t.nbytes = 0;
  g_.tensors.push_back(std::move(t));
  tensor_valid_.push_back(valid);
  return true;
}

// Zero padding is what ggml writes; anything else is hidden data or a misplaced write.
void GgufParser::check_zero_bytes(uint64_t begin, uint64_t end, const std::string& tensor, const std::string& what) {
  if (begin >= end) return;
  auto bytes = r_.exact(begin, end - begin);
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != 0) {
      warning("GGUF_NONZERO_PADDING", tensor, begin + i,
              what + " holds byte " + num(bytes[i]) + " at offset " + num(begin + i) + ", expected 0");
      return;
    }
  }
}

// gguf.cpp's offset rule (tensors densely packed in info order from 0, each padded to the
// alignment) plus the per-tensor data bounds that only llama.cpp's loader checks.
void GgufParser::check_tensor_offsets(uint64_t& data_end) {
  std::optional<uint64_t> expected = 0;  // unknown after a tensor whose size is unknown
  bool all_in_file = true;
  for (size_t i = 0; i < g_.tensors.size(); ++i) {
    const GgufTensorInfo& t = g_.tensors[i];
    if (!tensor_valid_[i]) { expected.reset(); all_in_file = false; continue; }
    if (expected && t.offset != *expected) {
      const std::string why = i == 0 ? "the first tensor must start at 0"
                              : t.offset > *expected ? "a gap of " + num(t.offset - *expected) + " bytes"
                                                     : "overlaps earlier data by " + num(*expected - t.offset) + " bytes";
      error("GGUF_BAD_OFFSET", t.name, t.info_offset,
            "tensor '" + t.name + "' has offset " + num(t.offset) + ", expected " + num(*expected) + " (" + why + ")");
    } else if (!expected && t.offset % g_.alignment != 0) {
      error("GGUF_BAD_OFFSET", t.name, t.info_offset,
            "tensor '" + t.name + "' has offset " + num(t.offset) + ", expected a multiple of the alignment " + num(g_.alignment));
    }
    auto padded = checked_pad(t.nbytes, g_.alignment);
    if (!padded) {
      error("GGUF_PAD_OVERFLOW", t.name, t.info_offset,
            "tensor '" + t.name + "' size " + num(t.nbytes) + " overflows 64 bits when padded to " + num(g_.alignment));
    }
    expected = padded ? checked_add(t.offset, *padded) : std::nullopt;
    if (padded && !expected) {
      error("GGUF_SIZE_OVERFLOW", t.name, t.info_offset,
            "tensor '" + t.name + "' at offset " + num(t.offset) + " with padded size " + num(*padded) +
                " ends past 2^64-1: the data section size overflows");
    }
    auto begin = checked_add(g_.data_start, t.offset);
    auto end = begin ? checked_add(*begin, t.nbytes) : std::nullopt;
    if (!end || *end > g_.file_size) {
      error("GGUF_TENSOR_OUT_OF_FILE", t.name, begin.value_or(t.info_offset),
            "tensor '" + t.name + "' data at data_start " + num(g_.data_start) + " + offset " + num(t.offset) + " with " +
                num(t.nbytes) + " bytes ends past the end of the " + num(g_.file_size) + "-byte file");
      all_in_file = false;
      continue;
    }
    // The padding is under one alignment unit, so end + padding cannot wrap.
    const uint64_t pad_end = padded ? std::min(*end + (*padded - t.nbytes), g_.file_size) : *end;
    check_zero_bytes(*end, pad_end, t.name, "padding after tensor '" + t.name + "'");
    data_end = std::max(data_end, pad_end);
    if (padded && i + 1 == g_.tensors.size() && pad_end < *end + (*padded - t.nbytes)) {
      warn_unpadded_end(t, *end + (*padded - t.nbytes));
    }
  }
  if (!all_in_file) data_end = 0;  // no trailing-byte verdict on a broken layout
}

// The spec does not require the last tensor's padding (§2), but gguf.cpp's full-read mode
// (no_alloc = false: llama-gguf-hash) reads Σ PAD(nbytes) bytes from the data start and
// refuses a file that ends inside it; ckptkit's writer always pads.
void GgufParser::warn_unpadded_end(const GgufTensorInfo& last, uint64_t padded_end) {
  warning("GGUF_LAST_TENSOR_UNPADDED", last.name, g_.file_size,
          "the file ends at " + num(g_.file_size) + ", " + num(padded_end - g_.file_size) +
              " bytes before the alignment padding of the last tensor '" + last.name + "' ends at " + num(padded_end) +
              ": llama.cpp's full-read mode (llama-gguf-hash) refuses such a file");
}

void GgufParser::check_data_layout() {
  const uint64_t infos_end = r_.pos();
  auto data_start = checked_pad(infos_end, g_.alignment);
  g_.data_start = data_start.value_or(infos_end);
  const uint64_t size = g_.file_size;
  if (g_.tensors.empty()) {
    // ggml reads no padding here, so 0-tensor files may end before the boundary (vocab fixtures).
    const uint64_t pad_end = std::min(g_.data_start, size);
    check_zero_bytes(infos_end, pad_end, "", "padding before the data section");
    if (size > g_.data_start) {
      warning("GGUF_TRAILING_BYTES", "", g_.data_start,
              num(size - g_.data_start) + " bytes follow the end of the header at " + num(g_.data_start) + ", expected none");
    }
    return;
  }
  if (g_.data_start > size) {
    error("GGUF_DATA_START_PAST_EOF", "", infos_end,
          "data section starts at " + num(g_.data_start) + " (tensor infos end at " + num(infos_end) + ", padded to " +
              num(g_.alignment) + ") but the file is " + num(size) + " bytes");
    return;
  }
  check_zero_bytes(infos_end, g_.data_start, "", "padding before the data section");
  uint64_t data_end = 0;
  check_tensor_offsets(data_end);
  if (data_end != 0 && size > data_end) {
    warning("GGUF_TRAILING_BYTES", "", data_end,
            num(size - data_end) + " bytes follow the last tensor's padded end at " + num(data_end) + ", expected none");
  }
}

std::optional<GgufFile> GgufParser::run() {
  auto g = parse();
  if (r_.io_failed()) {
    error("IO_READ", "", 0, "cannot read the header: " + r_.io_error().message);
    return std::nullopt;
  }
  return g;
}

std::optional<GgufFile> GgufParser::parse() {
  if (!read_header()) return std::nullopt;
  std::unordered_set<std::string> keys;
  for (uint64_t i = 0; i < g_.n_kv; ++i) {
    if (!read_kv()) return std::nullopt;
    check_key(g_.kvs.back(), keys);
  }
  apply_alignment();
  check_vocab();
  std::unordered_set<std::string> names;
  for (uint64_t i = 0; i < g_.n_tensors; ++i) {
    if (!read_tensor_info(names)) return std::nullopt;
  }
  check_data_layout();
  return std::move(g_);
}

}  // namespace

uint64_t gguf_value_type_size(int32_t type) {
  switch (type) {
    case kGgufUint8: case kGgufInt8: case kGgufBool: return 1;
    case kGgufUint16: case kGgufInt16: return 2;
    case kGgufUint32: case kGgufInt32: case kGgufFloat32: return 4;
    case kGgufUint64: case kGgufInt64: case kGgufFloat64: return 8;
    default: return 0;
  }
}

std::string gguf_value_type_name(int32_t type) {
  static constexpr const char* kNames[kGgufTypeCount] = {"UINT8", "INT8", "UINT16", "INT16", "UINT32",
                                                         "INT32", "FLOAT32", "BOOL", "STRING", "ARRAY",
                                                         "UINT64", "INT64", "FLOAT64"};
  if (!valid_value_type(type)) return "type " + std::to_string(type);
  return kNames[type];
}

namespace {

// The string quoted and cut at max_chars (on a UTF-8 character boundary) with "...". Its
// bytes are kept: the output escapes them (display_escape for human output,
// json_string_literal for JSON, core/display.h), so they are escaped once, not twice.
std::string quote_for_display(const std::string& s, size_t max_chars) {
  // Appended piece by piece: `"\"" + <temporary>` trips GCC 12's -Wrestrict false
  // positive at -O3 (GCC bug 105329).
  std::string out(1, '"');
  if (s.size() + 2 <= max_chars) {
    out += s;
    out += '"';
    return out;
  }
  size_t cut = max_chars > 5 ? max_chars - 5 : 0;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  out.append(s, 0, cut);
  out += "...";
  return out;
}

}  // namespace

std::string GgufKV::display(size_t max_chars) const {
  std::string out;
  if (type == kGgufArray) {
    out = "[" + gguf_value_type_name(array_type) + " x " + std::to_string(array_count) + "]";
  } else if (auto* s = std::get_if<std::string>(&scalar)) {
    out = quote_for_display(*s, max_chars);
  } else if (auto* u = std::get_if<uint64_t>(&scalar)) {
    out = std::to_string(*u);
  } else if (auto* i = std::get_if<int64_t>(&scalar)) {
    out = std::to_string(*i);
  } else if (auto* d = std::get_if<double>(&scalar)) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.9g", *d);
    out = buf;
  } else if (auto* b = std::get_if<bool>(&scalar)) {
    out = *b ? "true" : "false";
  }
  if (out.size() > max_chars) out.resize(max_chars);
  return out;
}

const GgufKV* GgufFile::find_kv(std::string_view key) const {
  for (const GgufKV& kv : kvs) {
    if (kv.key == key) return &kv;
  }
  return nullptr;
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufKV* kv = find_kv(key);
  if (kv == nullptr) return std::nullopt;
  if (auto* s = std::get_if<std::string>(&kv->scalar)) return *s;
  return std::nullopt;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufKV* kv = find_kv(key);
  if (kv == nullptr) return std::nullopt;
  if (auto* i = std::get_if<int64_t>(&kv->scalar)) return *i;
  if (auto* u = std::get_if<uint64_t>(&kv->scalar); u != nullptr && *u <= kInt64Max) {
    return static_cast<int64_t>(*u);
  }
  return std::nullopt;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const GgufTensorInfo& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::optional<GgufFile> read_gguf(const MappedFile& file, const std::string& display, Findings& findings) {
  return GgufParser(file, display, findings).run();
}

std::optional<GgufFile> read_gguf(std::span<const uint8_t> file_bytes, const std::string& display, Findings& findings) {
  return GgufParser(file_bytes, display, findings).run();
}

}  // namespace ckpt
