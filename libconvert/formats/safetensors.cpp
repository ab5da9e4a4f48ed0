#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <simdjson.h>

#include "core/checked_math.h"
#include "formats/json.h"

namespace ckpt {
namespace {

namespace od = simdjson::ondemand;

constexpr uint64_t kPrefix = 8;  // N_LEN: the u64 header length

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

bool is_json_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Everything one header parse needs to report findings with file and offset.
struct HeaderParse {
  const std::string& display;
  const StReadOptions& options;
  Findings& findings;
  uint64_t header_offset = kPrefix;  // file offset of the first header byte

  void error(const char* code, const std::string& tensor, std::optional<uint64_t> off, std::string msg) {
    findings.error(code, display, tensor, off, std::move(msg));
  }
  void warning(const char* code, const std::string& tensor, std::optional<uint64_t> off, std::string msg) {
    findings.warning(code, display, tensor, off, std::move(msg));
  }
  // The header's JSON is strict or compat per the options; a few rules differ.
  void strict_error_or_warning(const char* code, std::string msg) {
    if (options.mode == StMode::strict)
      error(code, "", header_offset, std::move(msg));
    else
      warning(code, "", header_offset, std::move(msg));
  }
};

// JSON integers in shape/data_offsets: plain non-negative decimal digits that fit in u64.
// "-0", "8.0", "8e0" and strings are rejected (the reference's serde behaviour).
std::optional<uint64_t> parse_json_uint(std::string_view token) {
  while (!token.empty() && is_json_ws(static_cast<uint8_t>(token.back()))) token.remove_suffix(1);
  if (token.empty() || token.size() > 20) return std::nullopt;
  if (token.size() > 1 && token[0] == '0') return std::nullopt;
  uint64_t v = 0;
  for (char c : token) {
    if (c < '0' || c > '9') return std::nullopt;
    if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, static_cast<uint64_t>(c - '0'), &v))
      return std::nullopt;
  }
  return v;
}

bool read_uint_array(od::value value, std::vector<uint64_t>& out, size_t max_len, std::string& why) {
  od::array arr;
  if (value.get_array().get(arr)) {
    why = "is not an array";
    return false;
  }
  for (auto elem : arr) {
    od::value v;
    if (elem.get(v)) {
      why = "is not valid JSON";
      return false;
    }
    od::json_type type;
    if (v.type().get(type) || type != od::json_type::number) {
      why = "holds a non-number";
      return false;
    }
    auto n = parse_json_uint(v.raw_json_token());
    if (!n) {
      why = "holds " + std::string(v.raw_json_token()) + ", not a non-negative integer";
      return false;
    }
    if (out.size() >= max_len) {
      why = "has more than " + std::to_string(max_len) + " entries";
      return false;
    }
    out.push_back(*n);
  }
  return true;
}

std::string name_problem(std::string_view name, size_t max_bytes) {
  if (name.empty()) return "is empty";
  if (name.size() > max_bytes)
    return "is " + std::to_string(name.size()) + " bytes long, more than the limit of " + std::to_string(max_bytes);
  for (unsigned char c : name)
    if (c < 0x20) return "contains the control character U+00" + std::string(c < 0x10 ? "0" : "") + [&] {
      char buf[4];
      snprintf(buf, sizeof buf, "%X", c);
      return std::string(buf);
    }();
  return "";
}

// Parses one tensor entry {"dtype":..., "shape":[...], "data_offsets":[s,e]}.
// Returns false (with a finding) when the entry is unusable.
bool parse_tensor_entry(HeaderParse& hp, const std::string& name, od::value value, StTensor& t) {
  od::object obj;
  if (value.get_object().get(obj)) {
    hp.error("ST_ENTRY_NOT_OBJECT", name, hp.header_offset, "tensor entry '" + name + "' is not a JSON object");
    return false;
  }
  bool have_dtype = false, have_shape = false, have_offsets = false;
  std::vector<uint64_t> offsets;
  for (auto field : obj) {
    std::string_view key;
    if (field.unescaped_key().get(key)) {
      hp.error("ST_HEADER_JSON", name, hp.header_offset, "malformed key inside tensor entry '" + name + "'");
      return false;
    }
    auto duplicate = [&](bool& seen) {
      if (seen) {
        hp.error("ST_FIELD_DUPLICATE", name, hp.header_offset,
                 "tensor '" + name + "' has field '" + std::string(key) + "' twice");
        return true;
      }
      seen = true;
      return false;
    };
    std::string why;
    if (key == "dtype") {
      if (duplicate(have_dtype)) return false;
      std::string_view s;
      if (field.value().get_string().get(s)) {
        hp.error("ST_BAD_DTYPE", name, hp.header_offset, "tensor '" + name + "' has a dtype that is not a string");
        return false;
      }
      auto d = dtype_from_name(s);
      if (!d) {
        hp.error("ST_UNKNOWN_DTYPE", name, hp.header_offset,
                 "tensor '" + name + "' has unknown dtype '" + std::string(s) +
                     "' (names are case-sensitive: BOOL, U8, I8, F8_E4M3, F8_E8M0, BF16, F16, F32, ...)");
        return false;
      }
      t.dtype = *d;
    } else if (key == "shape") {
      if (duplicate(have_shape)) return false;
      if (!read_uint_array(field.value(), t.shape, 1024, why)) {
        hp.error("ST_BAD_SHAPE", name, hp.header_offset, "tensor '" + name + "' shape " + why);
        return false;
      }
    } else if (key == "data_offsets") {
      if (duplicate(have_offsets)) return false;
      if (!read_uint_array(field.value(), offsets, 2, why) || offsets.size() != 2) {
        hp.error("ST_BAD_OFFSETS", name, hp.header_offset,
                 "tensor '" + name + "' data_offsets " + (why.empty() ? "must hold exactly two integers" : why));
        return false;
      }
    } else {
      hp.warning("ST_FIELD_UNKNOWN", name, hp.header_offset,
                 "tensor '" + name + "' has unknown field '" + std::string(key) + "' (ignored by the reference)");
      od::value ignored;
      auto e = field.value().get(ignored);
      if (!e) e = json_validate_value(ignored, kJsonMaxDepth - 16);
      if (e) {
        hp.error("ST_HEADER_JSON", name, hp.header_offset,
                 "tensor '" + name + "' field '" + std::string(key) + "' is not valid JSON: " + json_error_text(e));
        return false;
      }
    }
  }
  const char* missing = !have_dtype ? "dtype" : !have_shape ? "shape" : !have_offsets ? "data_offsets" : nullptr;
  if (missing) {
    hp.error("ST_FIELD_MISSING", name, hp.header_offset,
             "tensor '" + name + "' has no '" + missing + "' field");
    return false;
  }
  t.begin = offsets[0];
  t.end = offsets[1];
  return true;
}

bool parse_metadata(HeaderParse& hp, od::value value, StHeader& header) {
  od::json_type type;
  if (auto e = value.type().get(type)) {
    hp.error("ST_HEADER_JSON", "", hp.header_offset,
             std::string("__metadata__ is not valid JSON: ") + json_error_text(e));
    return false;
  }
  if (type == od::json_type::null) {
    bool is_null = false;
    if (value.is_null().get(is_null) || !is_null) {
      hp.error("ST_HEADER_JSON", "", hp.header_offset, "__metadata__ is not valid JSON (expected null)");
      return false;
    }
    hp.warning("ST_METADATA_NULL", "", hp.header_offset,
               "__metadata__ is null; the README wants a map of strings (the reference accepts it)");
    return true;
  }
  od::object obj;
  if (value.get_object().get(obj)) {
    hp.error("ST_METADATA_NOT_OBJECT", "", hp.header_offset, "__metadata__ is not an object of strings");
    return false;
  }
  std::unordered_set<std::string> seen;
  for (auto field : obj) {
    std::string_view key, val;
    if (auto e = field.unescaped_key().get(key)) {
      hp.error("ST_HEADER_JSON", "", hp.header_offset,
               std::string("__metadata__ has a malformed key: ") + json_error_text(e));
      return false;
    }
    std::string k(key);
    if (field.value().get_string().get(val)) {
      hp.error("ST_METADATA_NOT_STRING", "", hp.header_offset,
               "__metadata__ value for '" + k + "' is not a string (the reference rejects this)");
      return false;
    }
    if (!seen.insert(k).second)
      hp.warning("ST_METADATA_DUPLICATE_KEY", "", hp.header_offset,
                 "__metadata__ has key '" + k + "' twice (the reference keeps the last)");
    header.metadata.emplace_back(k, std::string(val));
  }
  return true;
}

// Bytes after the JSON text up to 8 + N: the writer pads with spaces.
void classify_padding(HeaderParse& hp, std::string_view padding, uint64_t padding_offset) {
  if (padding.empty()) return;
  if (padding.find('\0') != std::string_view::npos) {
    hp.error("ST_PADDING_NUL", "", padding_offset + padding.find('\0'),
             "header is padded with NUL bytes; only spaces are allowed (the reference rejects NUL: "
             "\"trailing characters\")");
    return;
  }
  if (padding.find_first_not_of(' ') != std::string_view::npos)
    hp.strict_error_or_warning("ST_PADDING_NOT_SPACE",
                               "header padding contains JSON whitespace other than spaces (tab, CR or LF); "
                               "the README says spaces");
}

// The JSON object: tensors in order, duplicates detected by name.
bool parse_header_json(HeaderParse& hp, std::string_view json, StHeader& header) {
  auto end = json_value_end(json);
  if (!end || *end != json.size()) {
    hp.error("ST_HEADER_JSON", "", hp.header_offset,
             end ? "header has content after the JSON object" : "header JSON brackets do not balance");
    return false;
  }
  simdjson::padded_string padded(json);
  od::parser parser;
  od::document doc;
  auto fail = [&](simdjson::error_code e) {
    hp.error("ST_HEADER_JSON", "", hp.header_offset,
             std::string("header is not valid JSON of the expected form: ") + json_error_text(e));
    return false;
  };
  if (auto e = parser.iterate(padded).get(doc)) return fail(e);
  od::object root;
  od::json_type root_type;
  if (auto e = doc.type().get(root_type)) return fail(e);
  if (root_type != od::json_type::object) {
    hp.error("ST_HEADER_NOT_OBJECT", "", hp.header_offset, "header JSON root is not an object");
    return false;
  }
  if (auto e = doc.get_object().get(root)) return fail(e);

  std::unordered_map<std::string, size_t> names;  // name -> index in header.tensors
  size_t entries = 0;  // tensor entries read, duplicates included: they count against the limit
  bool seen_metadata = false;
  for (auto field : root) {
    std::string_view key_view;
    if (auto e = field.unescaped_key().get(key_view)) return fail(e);
    std::string key(key_view);
    od::value value;
    if (auto e = field.value().get(value)) return fail(e);
    if (key == "__metadata__") {
      if (seen_metadata) {
        hp.error("ST_METADATA_DUPLICATE", "", hp.header_offset, "header has two __metadata__ members");
        return false;
      }
      seen_metadata = true;
      header.has_metadata = true;
      if (!parse_metadata(hp, value, header)) return false;
      continue;
    }
    if (entries >= hp.options.max_tensors) {
      hp.error("ST_TOO_MANY_TENSORS", "", hp.header_offset,
               "header lists more than " + std::to_string(hp.options.max_tensors) +
                   " tensor entries (duplicates included)");
      return false;
    }
    ++entries;
    StTensor t;
    t.name = key;
    if (!parse_tensor_entry(hp, key, value, t)) return false;
    if (auto problem = name_problem(key, hp.options.max_name_bytes); !problem.empty()) {
      // The reference accepts any name (empty, "\u0000"): compat mode does too, with a
      // warning; strict refuses. The length cap is a resource limit in both modes.
      const bool too_long = key.size() > hp.options.max_name_bytes;
      if (hp.options.mode == StMode::strict || too_long)
        hp.error("ST_BAD_NAME", key.substr(0, 200), hp.header_offset, "tensor name " + problem);
      else
        hp.warning("ST_BAD_NAME", key.substr(0, 200), hp.header_offset,
                   "tensor name " + problem + " (the reference accepts it; strict mode refuses it)");
    }
    auto [it, inserted] = names.emplace(key, header.tensors.size());
    if (!inserted) {
      // The reference keeps the last duplicate silently: a parser differential. Strict
      // rejects; compat does what the reference does and keeps the last entry.
      if (hp.options.mode == StMode::strict) {
        hp.error("ST_DUPLICATE_TENSOR", key, hp.header_offset,
                 "tensor '" + key + "' is listed twice in the header; readers disagree on which one loads");
      } else {
        hp.warning("ST_DUPLICATE_TENSOR", key, hp.header_offset,
                   "tensor '" + key + "' is listed twice in the header; the reference keeps the last, so does compat mode");
        header.tensors[it->second] = std::move(t);
      }
      continue;
    }
    header.tensors.push_back(std::move(t));
  }
  return true;
}

// Step 7's per-tensor arithmetic: numel, bits, whole bytes, span (reference validate()).
void check_tensor_size(HeaderParse& hp, StTensor& t, uint64_t data_start) {
  uint64_t at = data_start + std::min(t.begin, UINT64_MAX - data_start);
  auto numel = checked_product(t.shape);
  auto nbits = numel ? checked_mul(*numel, dtype_bits(t.dtype)) : std::nullopt;
  if (!nbits) {
    hp.error("ST_SHAPE_OVERFLOW", t.name, at,
             "tensor '" + t.name + "' shape " + shape_to_string(t.shape) + " overflows 64-bit arithmetic");
    return;
  }
  if (*nbits % 8 != 0) {
    hp.error("ST_MISALIGNED_SLICE", t.name, at,
             "tensor '" + t.name + "' of " + dtype_name(t.dtype) + " " + shape_to_string(t.shape) + " is " +
                 std::to_string(*nbits) + " bits, not a whole number of bytes");
    return;
  }
  t.nbytes = *nbits / 8;
  if (t.end >= t.begin && t.end - t.begin != t.nbytes) {
    hp.error("ST_SIZE_MISMATCH", t.name, at,
             "tensor '" + t.name + "' " + dtype_name(t.dtype) + " " + shape_to_string(t.shape) + " needs " +
                 std::to_string(t.nbytes) + " bytes but data_offsets [" + std::to_string(t.begin) + ", " +
                 std::to_string(t.end) + "] span " + std::to_string(t.end - t.begin));
    return;
  }
  t.sizes_ok = t.end >= t.begin;
}

// Coverage in (begin, end) order: no gap, overlap or reversed pair; the data
// section is covered exactly. Reports every violating tensor, not only the first.
bool check_coverage(HeaderParse& hp, StHeader& h) {
  std::vector<size_t> order(h.tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto &x = h.tensors[a], &y = h.tensors[b];
    return std::tie(x.begin, x.end, x.name) < std::tie(y.begin, y.end, y.name);
  });
  const uint64_t data_len = h.file_size - h.data_start;
  bool ok = true;
  uint64_t covered = 0;  // running end of covered bytes
  for (size_t i : order) {
    StTensor& t = h.tensors[i];
    uint64_t at = h.data_start + std::min(t.begin, data_len);
    if (t.end < t.begin) {
      hp.error("ST_OFFSET_REVERSED", t.name, at,
               "tensor '" + t.name + "' has data_offsets [" + std::to_string(t.begin) + ", " +
                   std::to_string(t.end) + "]: end before start");
      t.sizes_ok = false;
      ok = false;
      continue;
    }
    if (t.begin > covered) {
      hp.error("ST_OFFSET_GAP", t.name, h.data_start + std::min(covered, data_len),
               "data bytes [" + std::to_string(covered) + ", " + std::to_string(t.begin) +
                   ") before tensor '" + t.name + "' belong to no tensor");
      ok = false;
    } else if (t.begin < covered) {
      hp.error("ST_OFFSET_OVERLAP", t.name, at,
               "tensor '" + t.name + "' starts at data byte " + std::to_string(t.begin) +
                   " inside bytes already used (up to " + std::to_string(covered) + ")");
      ok = false;
    }
    if (t.end > data_len) {
      hp.error("ST_TENSOR_PAST_EOF", t.name, at,
               "tensor '" + t.name + "' ends at file byte " + std::to_string(h.data_start) + " + " +
                   std::to_string(t.end) + " but the file has " + std::to_string(h.file_size) +
                   " bytes (truncated?)");
      t.sizes_ok = false;
      ok = false;
    }
    covered = std::max(covered, t.end);
  }
  if (covered < data_len) {
    hp.error("ST_TRAILING_BYTES", "", h.data_start + covered,
             std::to_string(data_len - covered) + " bytes after the last tensor belong to no tensor");
    ok = false;
  }
  return ok;
}

void note_alignment(HeaderParse& hp, const StHeader& h) {
  if (h.header_len % 8 != 0)
    hp.findings.add("ST_HEADER_UNALIGNED", hp.options.mode == StMode::strict ? Severity::warning : Severity::info,
                    hp.display, "", 0,
                    "header length " + std::to_string(h.header_len) +
                        " is not a multiple of 8 (older writers); tensor data may be unaligned");
}

}  // namespace

namespace {

// The header checks on `file`, which holds at least the first min(file_size, 8) bytes
// and all of [0, 8 + N) when N passes its bounds checks.
std::optional<StHeader> parse_header_bytes(std::span<const uint8_t> file, uint64_t file_size, const std::string& display,
                                           const StReadOptions& options, Findings& findings) {
  HeaderParse hp{display, options, findings};
  StHeader h;
  h.file_size = file_size;
  if (h.file_size < kPrefix) {
    hp.error("ST_TOO_SMALL", "", 0,
             "file is " + std::to_string(h.file_size) + " bytes, shorter than the 8-byte header length");
    return std::nullopt;
  }
  const uint8_t* base = file.data();  // holds [0, 8 + N) once N is checked
  h.header_len = read_u64_le(base);
  if (h.header_len > options.max_header_bytes) {
    hp.error("ST_HEADER_TOO_LARGE", "", 0,
             "header length " + std::to_string(h.header_len) + " exceeds the limit of " +
                 std::to_string(options.max_header_bytes) + " bytes");
    return std::nullopt;
  }
  if (h.header_len > h.file_size - kPrefix) {
    hp.error("ST_HEADER_PAST_EOF", "", 0,
             "header length " + std::to_string(h.header_len) + " runs past the end of the file (" +
                 std::to_string(h.file_size) + " bytes)");
    return std::nullopt;
  }
  h.data_start = kPrefix + h.header_len;
  std::string_view text(reinterpret_cast<const char*>(base + kPrefix), static_cast<size_t>(h.header_len));
  if (!simdjson::validate_utf8(text.data(), text.size())) {
    hp.error("ST_HEADER_UTF8", "", kPrefix, "header is not valid UTF-8");
    return std::nullopt;
  }
  if (text.size() >= 3 && std::memcmp(text.data(), "\xEF\xBB\xBF", 3) == 0) {
    hp.error("ST_HEADER_BOM", "", kPrefix, "header starts with a byte-order mark");
    return std::nullopt;
  }
  if (!text.empty() && is_json_ws(static_cast<uint8_t>(text[0])))
    hp.strict_error_or_warning("ST_HEADER_LEADING_WS",
                               "header has whitespace before '{'; the README says it must begin with '{'");
  // Split off the padding: trailing spaces, other JSON whitespace and NULs.
  size_t json_end = text.size();
  while (json_end > 0 && (is_json_ws(static_cast<uint8_t>(text[json_end - 1])) || text[json_end - 1] == '\0'))
    --json_end;
  if (json_end == 0) {
    hp.error("ST_HEADER_JSON", "", kPrefix, "header is empty");
    return std::nullopt;
  }
  classify_padding(hp, text.substr(json_end), kPrefix + json_end);
  if (!parse_header_json(hp, text.substr(0, json_end), h)) return std::nullopt;

  for (auto& t : h.tensors) check_tensor_size(hp, t, h.data_start);
  bool covered = check_coverage(hp, h);
  h.layout_ok = covered && std::all_of(h.tensors.begin(), h.tensors.end(), [](const StTensor& t) { return t.sizes_ok; });
  note_alignment(hp, h);
  return h;
}

}  // namespace

uint64_t StHeader::payload_bytes() const {
  uint64_t total = 0;
  for (const auto& t : tensors) total += t.nbytes;
  return total;
}

std::optional<StHeader> read_safetensors_header(const MappedFile& file, const std::string& display,
                                                const StReadOptions& options, Findings& findings) {
  // Only the 8 + N header bytes are read (pread, bounded by max_header_bytes and the
  // file size); the payload is never touched here.
  const uint64_t size = file.size();
  std::vector<uint8_t> head(static_cast<size_t>(std::min<uint64_t>(size, kPrefix)));
  IoError err;
  auto io_fail = [&](uint64_t at) {
    findings.error("IO_READ", display, "", at, "cannot read the header: " + err.message);
    return std::nullopt;
  };
  if (!file.read_at(0, head, err)) return io_fail(0);
  if (head.size() == kPrefix) {
    const uint64_t n = read_u64_le(head.data());
    if (n <= options.max_header_bytes && n <= size - kPrefix) {
      head.resize(static_cast<size_t>(kPrefix + n));
      if (!file.read_at(kPrefix, std::span<uint8_t>(head).subspan(kPrefix), err)) return io_fail(kPrefix);
    }
  }
  return parse_header_bytes(head, size, display, options, findings);
}

std::optional<StHeader> read_safetensors_header(std::span<const uint8_t> file, const std::string& display,
                                                const StReadOptions& options, Findings& findings) {
  return parse_header_bytes(file, file.size(), display, options, findings);
}

}  // namespace ckpt
