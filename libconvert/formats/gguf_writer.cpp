#include "formats/gguf_writer.h"

#include <cstring>

#include "core/checked_math.h"
#include "core/ggml_types.h"

namespace ckpt {
namespace {

constexpr uint32_t kGgufVersion = 3;
constexpr size_t kZeroChunk = 4096;


// A bounds-checked cursor over the source, read with pread through a small window:
// every read proves it stays in the file.
class Cursor {
 public:
  Cursor(const MappedFile& f, uint64_t pos) : f_(f), window_(f, size_t{64} << 10), pos_(pos) {}
  uint64_t pos() const { return pos_; }
  template <typename T>
  bool read(T& v) {
    if (!has(sizeof v)) return false;
    std::span<const uint8_t> b;
    IoError error;
    if (!window_.get(pos_, sizeof v, b, error)) return false;
    std::memcpy(&v, b.data(), sizeof v);
    pos_ += sizeof v;
    return true;
  }
  bool skip(uint64_t n) {
    if (!has(n)) return false;
    pos_ += n;
    return true;
  }
  bool skip_string() {
    uint64_t len = 0;
    return read(len) && skip(len);
  }

 private:
  bool has(uint64_t n) const { return pos_ <= f_.size() && n <= f_.size() - pos_; }
  const MappedFile& f_;
  InputWindow window_;
  uint64_t pos_;
};

bool skip_array(Cursor& c) {
  int32_t elem_type = 0;
  uint64_t count = 0;
  if (!c.read(elem_type) || !c.read(count)) return false;
  if (elem_type == kGgufString) {
    if (count > kGgufMaxArrayElements) return false;
    for (uint64_t i = 0; i < count; ++i) {
      if (!c.skip_string()) return false;
    }
    return true;
  }
  const uint64_t size = gguf_value_type_size(elem_type);
  auto bytes = checked_mul(count, size);
  return size != 0 && bytes && c.skip(*bytes);
}

// GCC 12 at -O3 reports -Wstringop-overflow for the first insert into the still-empty vector of
// serialise_header ("writing 1 or more bytes into a region of size 0"): a false positive (GCC
// bug 106199; insert grows the vector first). Silenced here only, for GCC only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  put_bytes(out, &v, sizeof v);
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put(out, static_cast<uint64_t>(s.size()));
  put_bytes(out, s.data(), s.size());
}

bool fail(std::string& error, std::string message) {
  error = std::move(message);
  return false;
}

uint64_t tensor_info_bytes(const GgufWriterTensor& t) {
  return 8 + t.name.size() + 4 + 8ull * t.n_dims + 4 + 8;
}

bool write_zeros(AtomicOutput& out, uint64_t n, std::string& error) {
  static const uint8_t zeros[kZeroChunk] = {};
  while (n > 0) {
    const size_t chunk = n < kZeroChunk ? static_cast<size_t>(n) : kZeroChunk;
    if (!out.write(zeros, chunk, error)) return false;
    n -= chunk;
  }
  return true;
}

}  // namespace

bool gguf_kv_byte_range(const MappedFile& file, const GgufKV& kv, uint64_t& begin, uint64_t& end) {
  Cursor c(file, kv.offset);
  int32_t type = -1;
  if (!c.skip_string() || !c.read(type)) return false;
  bool ok = false;
  if (type == kGgufString) {
    ok = c.skip_string();
  } else if (type == kGgufArray) {
    ok = skip_array(c);
  } else {
    ok = gguf_value_type_size(type) != 0 && c.skip(gguf_value_type_size(type));
  }
  if (!ok) return false;
  begin = kv.offset;
  end = c.pos();
  return true;
}

bool GgufWriter::add_key(std::string_view key, std::string& error) {
  if (begun_) {
    error = "GGUF writer: KV '" + std::string(key) + "' added after the header was written";
    return false;
  }
  if (key.empty() || key.size() > kGgufMaxStringLength) {
    error = "GGUF writer: key length " + std::to_string(key.size()) + " is outside 1.." + std::to_string(kGgufMaxStringLength);
    return false;
  }
  if (!keys_.insert(std::string(key)).second) {
    error = "GGUF writer: key '" + std::string(key) + "' would appear twice";
    return false;
  }
  ++kv_count_;
  return true;
}

bool GgufWriter::copy_kv(const MappedFile& source, const GgufKV& kv, std::string& error) {
  uint64_t begin = 0, end = 0;
  if (!gguf_kv_byte_range(source, kv, begin, end)) {
    error = "GGUF writer: KV '" + kv.key + "' at offset " + std::to_string(kv.offset) + " runs past the end of " +
            source.path();
    return false;
  }
  std::vector<uint8_t> bytes;
  IoError io;
  if (!source.read_range(begin, end - begin, bytes, io)) {
    error = "GGUF writer: cannot read KV '" + kv.key + "' of " + source.path() + ": " + io.message;
    return false;
  }
  if (!add_key(kv.key, error)) return false;
  kv_bytes_.insert(kv_bytes_.end(), bytes.begin(), bytes.end());
  return true;
}

bool GgufWriter::add_string_kv(std::string_view key, std::string_view value, std::string& error) {
  if (!add_key(key, error)) return false;
  put_string(kv_bytes_, key);
  put(kv_bytes_, static_cast<int32_t>(kGgufString));
  put_string(kv_bytes_, value);
  return true;
}

bool GgufWriter::add_u32_kv(std::string_view key, uint32_t value, std::string& error) {
  if (!add_key(key, error)) return false;
  put_string(kv_bytes_, key);
  put(kv_bytes_, static_cast<int32_t>(kGgufUint32));
  put(kv_bytes_, value);
  return true;
}

bool GgufWriter::add_tensor(const std::string& name, uint32_t n_dims, const uint64_t ne[4], int32_t type,
                            std::string& error) {
  const std::string where = "GGUF writer: tensor '" + name + "'";
  if (begun_) return fail(error, where + " added after the header was written");
  if (name.empty() || name.size() > kGgufMaxNameLength) {
    return fail(error, where + " has a name of " + std::to_string(name.size()) + " bytes, expected 1..63");
  }
  if (!tensor_names_.insert(name).second) return fail(error, where + " would appear twice");
  if (n_dims < 1 || n_dims > 4) return fail(error, where + " has " + std::to_string(n_dims) + " dims, expected 1..4");
  GgufWriterTensor t;
  t.name = name;
  t.n_dims = n_dims;
  t.type = type;
  for (uint32_t d = 0; d < 4; ++d) {
    t.ne[d] = d < n_dims ? ne[d] : 1;
    if (d >= n_dims && ne[d] != 1) return fail(error, where + " has ne[" + std::to_string(d) + "] != 1 beyond n_dims");
    if (t.ne[d] > static_cast<uint64_t>(INT64_MAX)) return fail(error, where + " has a dimension above INT64_MAX");
  }
  auto nbytes = ggml_nbytes(type, t.ne);
  if (!nbytes) return fail(error, where + " has no valid byte size for type " + ggml_type_name(type));
  auto padded = checked_pad(*nbytes, alignment_);
  auto total = padded ? checked_add(data_bytes_, *padded) : std::nullopt;
  if (!total) return fail(error, where + ": the data section size overflows 64 bits");
  t.nbytes = *nbytes;
  t.offset = data_bytes_;  // the loader's rule: Σ_{j<i} PAD(nbytes_j)
  data_bytes_ = *total;
  tensors_.push_back(std::move(t));
  return true;
}

uint64_t GgufWriter::data_start() const {
  uint64_t header = 4 + 4 + 8 + 8 + kv_bytes_.size();
  for (const auto& t : tensors_) header += tensor_info_bytes(t);
  // The header lives in memory, so it is far below 2^64 − alignment.
  return *checked_pad(header, alignment_);
}

std::vector<uint8_t> GgufWriter::serialise_header() const {
  std::vector<uint8_t> out;
  put_bytes(out, "GGUF", 4);
  put(out, kGgufVersion);
  put(out, static_cast<uint64_t>(tensors_.size()));
  put(out, kv_count_);
  out.insert(out.end(), kv_bytes_.begin(), kv_bytes_.end());
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put(out, t.n_dims);
    for (uint32_t d = 0; d < t.n_dims; ++d) put(out, t.ne[d]);
    put(out, t.type);
    put(out, t.offset);
  }
  // Data start is padded even with zero tensors, as gguf.cpp's writer does (§2).
  out.resize(static_cast<size_t>(data_start()), 0);
  return out;
}

bool GgufWriter::begin(AtomicOutput& out, std::string& error) {
  if (begun_) return fail(error, "GGUF writer: begin() called twice");
  if (!is_power_of_two(alignment_) || alignment_ > kGgufMaxAlignment) {
    return fail(error, "GGUF writer: alignment " + std::to_string(alignment_) + " is not a power of two up to 1 MiB");
  }
  begun_ = true;
  auto header = serialise_header();
  return out.write(header.data(), header.size(), error);
}

bool GgufWriter::write_data(AtomicOutput& out, std::span<const uint8_t> bytes, std::string& error) {
  if (!begun_ || current_ >= tensors_.size()) return fail(error, "GGUF writer: data written outside a tensor");
  const auto& t = tensors_[current_];
  if (bytes.size() > t.nbytes - current_written_) {
    return fail(error, "GGUF writer: tensor '" + t.name + "' given more than its " + std::to_string(t.nbytes) + " bytes");
  }
  current_written_ += bytes.size();
  return out.write(bytes.data(), bytes.size(), error);
}

bool GgufWriter::end_tensor(AtomicOutput& out, std::string& error) {
  if (!begun_ || current_ >= tensors_.size()) return fail(error, "GGUF writer: end_tensor() without a tensor");
  const auto& t = tensors_[current_];
  if (current_written_ != t.nbytes) {
    return fail(error, "GGUF writer: tensor '" + t.name + "' got " + std::to_string(current_written_) + " of " +
                   std::to_string(t.nbytes) + " bytes");
  }
  // Each tensor, the last one included, is zero-padded to the alignment (§2).
  const uint64_t pad = *checked_pad(t.nbytes, alignment_) - t.nbytes;
  ++current_;
  current_written_ = 0;
  return write_zeros(out, pad, error);
}

bool GgufWriter::finish(std::string& error) const {
  if (!begun_ || current_ != tensors_.size()) {
    return fail(error, "GGUF writer: " + std::to_string(current_) + " of " + std::to_string(tensors_.size()) +
                   " tensors written");
  }
  return true;
}

}  // namespace ckpt
