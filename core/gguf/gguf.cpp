#include "core/gguf/gguf.hpp"

#include "backends/quant_formats.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <sstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace exo::model {

namespace {

constexpr uint32_t gguf_magic = 0x46554747; // "GGUF" little-endian
constexpr uint32_t max_dims = 4;
constexpr int max_array_depth = 4;

/// A bounds-checked reader over the file bytes.
class cursor {
public:
  cursor(const uint8_t* base, size_t size) : base_(base), size_(size) {
  }

  size_t pos() const {
    return pos_;
  }

  size_t remaining() const {
    return size_ - pos_;
  }

  void need(uint64_t n, const char* what) {
    if (n > remaining()) {
      std::ostringstream os;
      os << "truncated file: " << what << " needs " << n << " bytes at offset "
         << pos_ << " but only " << remaining() << " remain";
      throw gguf_error(os.str());
    }
  }

  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) {
    auto len = read<uint64_t>(what);
    if (len > remaining()) {
      std::ostringstream os;
      os << "string length " << len << " of " << what << " at offset "
         << pos_ - 8 << " exceeds the file (truncated or corrupt, "
         << remaining() << " bytes remain)";
      throw gguf_error(os.str());
    }
    std::string s(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return s;
  }

private:
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
};

/// Minimum encoded size of one value of type `t` (for count sanity checks).
uint64_t min_encoded_size(gguf_value_type t) {
  switch (t) {
    case gguf_value_type::u8:
    case gguf_value_type::i8:
    case gguf_value_type::boolean:
      return 1;
    case gguf_value_type::u16:
    case gguf_value_type::i16:
      return 2;
    case gguf_value_type::u32:
    case gguf_value_type::i32:
    case gguf_value_type::f32:
      return 4;
    case gguf_value_type::u64:
    case gguf_value_type::i64:
    case gguf_value_type::f64:
    case gguf_value_type::string:
      return 8;
    case gguf_value_type::array:
      return 12;
  }
  return 1;
}

bool valid_value_type(uint32_t t) {
  return t <= 12;
}

gguf_value read_value(cursor& c, gguf_value_type t, const std::string& key,
                      int depth) {
  switch (t) {
    case gguf_value_type::u8:
      return uint64_t{c.read<uint8_t>(key.c_str())};
    case gguf_value_type::i8:
      return int64_t{c.read<int8_t>(key.c_str())};
    case gguf_value_type::u16:
      return uint64_t{c.read<uint16_t>(key.c_str())};
    case gguf_value_type::i16:
      return int64_t{c.read<int16_t>(key.c_str())};
    case gguf_value_type::u32:
      return uint64_t{c.read<uint32_t>(key.c_str())};
    case gguf_value_type::i32:
      return int64_t{c.read<int32_t>(key.c_str())};
    case gguf_value_type::f32:
      return double{c.read<float>(key.c_str())};
    case gguf_value_type::u64:
      return c.read<uint64_t>(key.c_str());
    case gguf_value_type::i64:
      return c.read<int64_t>(key.c_str());
    case gguf_value_type::f64:
      return c.read<double>(key.c_str());
    case gguf_value_type::boolean: {
      auto b = c.read<uint8_t>(key.c_str());
      if (b > 1)
        throw gguf_error("invalid boolean value " + std::to_string(b)
                         + " for key '" + key + "'");
      return b != 0;
    }
    case gguf_value_type::string:
      return c.read_string(key.c_str());
    case gguf_value_type::array: {
      if (depth >= max_array_depth)
        throw gguf_error("arrays nested too deeply in key '" + key + "'");
      auto et = c.read<uint32_t>(key.c_str());
      if (!valid_value_type(et))
        throw gguf_error("unknown array element type " + std::to_string(et)
                         + " for key '" + key + "'");
      auto n = c.read<uint64_t>(key.c_str());
      auto etype = static_cast<gguf_value_type>(et);
      if (n > c.remaining() / min_encoded_size(etype)) {
        std::ostringstream os;
        os << "array count " << n << " of key '" << key
           << "' exceeds the file (truncated or corrupt, " << c.remaining()
           << " bytes remain)";
        throw gguf_error(os.str());
      }
      auto arr = std::make_shared<gguf_array>();
      arr->type = etype;
      arr->values.reserve(n);
      for (uint64_t i = 0; i < n; ++i)
        arr->values.push_back(read_value(c, etype, key, depth + 1));
      return arr;
    }
  }
  throw gguf_error("unknown value type for key '" + key + "'");
}

} // namespace

const char* to_string(gguf_value_type t) {
  switch (t) {
    case gguf_value_type::u8:
      return "uint8";
    case gguf_value_type::i8:
      return "int8";
    case gguf_value_type::u16:
      return "uint16";
    case gguf_value_type::i16:
      return "int16";
    case gguf_value_type::u32:
      return "uint32";
    case gguf_value_type::i32:
      return "int32";
    case gguf_value_type::f32:
      return "float32";
    case gguf_value_type::boolean:
      return "bool";
    case gguf_value_type::string:
      return "string";
    case gguf_value_type::array:
      return "array";
    case gguf_value_type::u64:
      return "uint64";
    case gguf_value_type::i64:
      return "int64";
    case gguf_value_type::f64:
      return "float64";
  }
  return "?";
}

namespace {

namespace quant = exo::backend::quant;

/// The one table: ggml's descriptors (quant::all_types) filtered to weight
/// formats, with the capitalised names derived from ggml's.
struct type_table {
  std::vector<tensor_type> types;
  std::map<uint32_t, std::string> names;
  type_table() {
    std::size_t n = 0;
    const quant::type_info* all = quant::all_types(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (!all[i].weights)
        continue;
      auto id = static_cast<uint32_t>(all[i].type);
      types.push_back(static_cast<tensor_type>(id));
      std::string up = all[i].name;
      for (auto& c : up)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      names[id] = up;
    }
  }
};

const type_table& table() {
  static const type_table t;
  return t;
}

const quant::type_info& info_of(tensor_type t) {
  const auto* i = quant::find_type(static_cast<uint32_t>(t));
  if (!i || !i->weights)
    throw gguf_error("unknown tensor type "
                     + std::to_string(static_cast<uint32_t>(t)));
  return *i;
}

} // namespace

const std::vector<tensor_type>& all_tensor_types() {
  return table().types;
}

const char* to_string(tensor_type t) {
  auto& n = table().names;
  auto it = n.find(static_cast<uint32_t>(t));
  return it == n.end() ? "?" : it->second.c_str();
}

const tensor_type* find_tensor_type(uint32_t id) {
  for (auto& t : table().types)
    if (static_cast<uint32_t>(t) == id)
      return &t;
  return nullptr;
}

const tensor_type* parse_tensor_type(const std::string& name) {
  std::string up = name;
  for (auto& c : up)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (auto& [id, n] : table().names)
    if (n == up)
      return find_tensor_type(id);
  return nullptr;
}

bool is_k_quant(tensor_type t) {
  return block_elements(t) == quant::qk_k;
}

uint64_t block_elements(tensor_type t) {
  return info_of(t).block_size;
}

uint64_t block_bytes(tensor_type t) {
  return info_of(t).block_bytes;
}

uint64_t row_bytes(tensor_type t, uint64_t n) {
  auto be = block_elements(t);
  if (n % be != 0)
    throw gguf_error(std::string("element count ") + std::to_string(n)
                     + " is not a multiple of the " + to_string(t)
                     + " block size " + std::to_string(be));
  auto blocks = n / be;
  auto bb = block_bytes(t);
  if (blocks > UINT64_MAX / bb)
    throw gguf_error("tensor byte size overflows");
  return blocks * bb;
}

std::shared_ptr<gguf_file> gguf_file::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw gguf_error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    auto err = errno;
    ::close(fd);
    throw gguf_error("cannot stat '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw gguf_error("'" + path + "' is not a regular file");
  }
  std::shared_ptr<gguf_file> f(new gguf_file);
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      auto err = errno;
      ::close(fd);
      throw gguf_error("cannot map '" + path + "': " + std::strerror(err));
    }
    // Huge pages for the weights where the kernel can: pages read through
    // this mapping come in 2 MiB folios and are mapped by one TLB entry
    // each (a decode step streams every weight; with 4 KiB pages, walks and
    // faults cost a third of a 1B model's step on a VM). Advice only.
    (void) ::madvise(p, f->size_, MADV_HUGEPAGE);
    f->mapping_ = p;
    f->base_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  try {
    f->parse_all();
  } catch (const gguf_error& e) {
    throw gguf_error("'" + path + "': " + e.what());
  }
  return f;
}

std::shared_ptr<gguf_file> gguf_file::parse(const uint8_t* bytes,
                                            size_t size) {
  std::shared_ptr<gguf_file> f(new gguf_file);
  // Over-allocate so the copy starts on a 64-byte boundary, like a mapping
  // (page-aligned) would: tensor data then keeps the file's alignment.
  f->owned_.resize(size + 64);
  auto addr = reinterpret_cast<uintptr_t>(f->owned_.data());
  uint8_t* start = f->owned_.data() + ((64 - addr % 64) % 64);
  if (size > 0)
    std::memcpy(start, bytes, size);
  f->base_ = start;
  f->size_ = size;
  f->parse_all();
  return f;
}

gguf_file::~gguf_file() {
  if (mapping_ != nullptr)
    ::munmap(mapping_, size_);
}

void gguf_file::parse_all() {
  cursor c(base_, size_);
  if (size_ < 4)
    throw gguf_error("truncated file: " + std::to_string(size_)
                     + " bytes is too short for a GGUF header");
  auto magic = c.read<uint32_t>("magic");
  if (magic != gguf_magic) {
    // Never echo the bytes: a console client may name any file of the node.
    throw gguf_error("wrong magic: the file does not start with \"GGUF\" "
                     "(not a GGUF file)");
  }
  version_ = c.read<uint32_t>("version");
  if (version_ != 3)
    throw gguf_error("unsupported GGUF version " + std::to_string(version_)
                     + " (only version 3 is supported)");
  auto n_tensors = c.read<uint64_t>("tensor count");
  auto n_kv = c.read<uint64_t>("metadata count");
  // Each key/value needs at least 8 (key length) + 4 (type) + 1 bytes.
  if (n_kv > c.remaining() / 13)
    throw gguf_error("metadata count " + std::to_string(n_kv)
                     + " exceeds what the file can hold (truncated or "
                       "corrupt)");
  for (uint64_t i = 0; i < n_kv; ++i) {
    gguf_kv kv;
    kv.key = c.read_string("metadata key");
    if (kv.key.empty())
      throw gguf_error("metadata key " + std::to_string(i) + " is empty");
    auto t = c.read<uint32_t>("metadata value type");
    if (!valid_value_type(t))
      throw gguf_error("unknown metadata value type " + std::to_string(t)
                       + " for key '" + kv.key + "'");
    kv.type = static_cast<gguf_value_type>(t);
    kv.value = read_value(c, kv.type, kv.key, 0);
    if (kv_index_.count(kv.key) != 0)
      throw gguf_error("duplicate metadata key '" + kv.key + "'");
    kv_index_.emplace(kv.key, kvs_.size());
    kvs_.push_back(std::move(kv));
  }
  if (auto* a = find("general.alignment")) {
    if (a->type != gguf_value_type::u32)
      throw gguf_error("general.alignment must be uint32, not "
                       + std::string(to_string(a->type)));
    alignment_ = std::get<uint64_t>(a->value);
    if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0)
      throw gguf_error("general.alignment " + std::to_string(alignment_)
                       + " is not a power of two");
  }
  // Each tensor needs at least 8 (name) + 4 (n_dims) + 4 (type) + 8 bytes.
  if (n_tensors > c.remaining() / 24)
    throw gguf_error("tensor count " + std::to_string(n_tensors)
                     + " exceeds what the file can hold (truncated or "
                       "corrupt)");
  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    tensor_info ti;
    ti.name = c.read_string("tensor name");
    auto n_dims = c.read<uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > max_dims)
      throw gguf_error("tensor '" + ti.name + "' has "
                       + std::to_string(n_dims)
                       + " dimensions (1 to 4 are allowed)");
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      auto ne = c.read<uint64_t>("tensor dimension");
      if (ne > static_cast<uint64_t>(INT64_MAX))
        throw gguf_error("tensor '" + ti.name + "' has a negative dimension");
      if (ne != 0 && n > static_cast<uint64_t>(INT64_MAX) / ne)
        throw gguf_error("tensor '" + ti.name
                         + "': product of dimensions overflows");
      n *= ne;
      ti.ne.push_back(ne);
    }
    auto t = c.read<uint32_t>("tensor type");
    const tensor_type* known = find_tensor_type(t);
    if (!known) {
      const auto* q = backend::quant::find_type(t);
      std::string supported;
      for (auto k : all_tensor_types())
        supported += std::string(supported.empty() ? "" : ", ") + to_string(k)
                     + "=" + std::to_string(static_cast<uint32_t>(k));
      throw gguf_error("tensor '" + ti.name + "' has unknown or unsupported "
                       "tensor type " + std::to_string(t)
                       + (q ? std::string(" (") + q->name
                                + ", an activation format)"
                            : std::string())
                       + " (supported: " + supported + ")");
    }
    ti.type = *known;
    ti.offset = c.read<uint64_t>("tensor offset");
    ti.n_elements = n;
    if (ti.ne[0] % block_elements(ti.type) != 0)
      throw gguf_error("tensor '" + ti.name + "': row length "
                       + std::to_string(ti.ne[0])
                       + " is not a multiple of the block size");
    try {
      ti.n_bytes = row_bytes(ti.type, n);
    } catch (const gguf_error& e) {
      throw gguf_error("tensor '" + ti.name + "': " + e.what());
    }
    if (ti.offset % alignment_ != 0)
      throw gguf_error("tensor '" + ti.name + "' offset "
                       + std::to_string(ti.offset)
                       + " is not a multiple of the alignment "
                       + std::to_string(alignment_));
    if (tensor_index_.count(ti.name) != 0)
      throw gguf_error("duplicate tensor name '" + ti.name + "'");
    tensor_index_.emplace(ti.name, tensors_.size());
    tensors_.push_back(std::move(ti));
  }
  uint64_t pos = c.pos();
  data_offset_ = (pos + alignment_ - 1) / alignment_ * alignment_;
  if (data_offset_ < pos) // wrapped
    throw gguf_error("data section offset overflows");
  uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  if (!tensors_.empty() && data_offset_ > size_)
    throw gguf_error("truncated file: the data section starts at "
                     + std::to_string(data_offset_) + " beyond the end ("
                     + std::to_string(size_) + " bytes)");
  std::vector<const tensor_info*> by_offset;
  for (auto& ti : tensors_) {
    if (ti.offset > data_size || ti.n_bytes > data_size - ti.offset) {
      std::ostringstream os;
      os << "tensor '" << ti.name << "' data [" << ti.offset << ", +"
         << ti.n_bytes << ") lies outside the data section (" << data_size
         << " bytes): offset or size outside the file";
      throw gguf_error(os.str());
    }
    ti.data = base_ + data_offset_ + ti.offset;
    by_offset.push_back(&ti);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    auto* a = by_offset[i - 1];
    auto* b = by_offset[i];
    if (a->offset + a->n_bytes > b->offset)
      throw gguf_error("tensors '" + a->name + "' and '" + b->name
                       + "' overlap");
  }
}

const gguf_kv* gguf_file::find(const std::string& key) const {
  auto i = kv_index_.find(key);
  return i == kv_index_.end() ? nullptr : &kvs_[i->second];
}

const tensor_info* gguf_file::find_tensor(const std::string& name) const {
  auto i = tensor_index_.find(name);
  return i == tensor_index_.end() ? nullptr : &tensors_[i->second];
}

const tensor_info& gguf_file::tensor(const std::string& name) const {
  if (auto* t = find_tensor(name))
    return *t;
  throw gguf_error("missing tensor '" + name + "'");
}

namespace {

const gguf_kv& need_key(const gguf_file& f, const std::string& key) {
  if (auto* kv = f.find(key))
    return *kv;
  throw gguf_error("missing required key '" + key + "'");
}

[[noreturn]] void wrong_type(const gguf_kv& kv, const char* wanted) {
  throw gguf_error("key '" + kv.key + "' has type "
                   + to_string(kv.type) + " but " + wanted
                   + " was expected");
}

} // namespace

uint64_t gguf_file::get_uint(const std::string& key) const {
  auto& kv = need_key(*this, key);
  if (auto* u = std::get_if<uint64_t>(&kv.value))
    return *u;
  if (auto* i = std::get_if<int64_t>(&kv.value); i && *i >= 0)
    return static_cast<uint64_t>(*i);
  wrong_type(kv, "a non-negative integer");
}

int64_t gguf_file::get_int(const std::string& key) const {
  auto& kv = need_key(*this, key);
  if (auto* i = std::get_if<int64_t>(&kv.value))
    return *i;
  if (auto* u = std::get_if<uint64_t>(&kv.value);
      u && *u <= static_cast<uint64_t>(INT64_MAX))
    return static_cast<int64_t>(*u);
  wrong_type(kv, "an integer");
}

double gguf_file::get_float(const std::string& key) const {
  auto& kv = need_key(*this, key);
  if (auto* d = std::get_if<double>(&kv.value))
    return *d;
  wrong_type(kv, "a float");
}

bool gguf_file::get_bool(const std::string& key) const {
  auto& kv = need_key(*this, key);
  if (auto* b = std::get_if<bool>(&kv.value))
    return *b;
  wrong_type(kv, "a bool");
}

const std::string& gguf_file::get_string(const std::string& key) const {
  auto& kv = need_key(*this, key);
  if (auto* s = std::get_if<std::string>(&kv.value))
    return *s;
  wrong_type(kv, "a string");
}

const gguf_array& gguf_file::get_array(const std::string& key) const {
  auto& kv = need_key(*this, key);
  if (auto* a = std::get_if<std::shared_ptr<gguf_array>>(&kv.value))
    return **a;
  wrong_type(kv, "an array");
}

uint64_t gguf_file::get_uint_or(const std::string& key,
                                uint64_t fallback) const {
  return find(key) ? get_uint(key) : fallback;
}

double gguf_file::get_float_or(const std::string& key,
                               double fallback) const {
  return find(key) ? get_float(key) : fallback;
}

std::string gguf_file::get_string_or(const std::string& key,
                                     const std::string& fallback) const {
  return find(key) ? get_string(key) : fallback;
}

std::string to_display_string(const gguf_value& v, size_t max_items) {
  std::ostringstream os;
  if (auto* u = std::get_if<uint64_t>(&v))
    os << *u;
  else if (auto* i = std::get_if<int64_t>(&v))
    os << *i;
  else if (auto* d = std::get_if<double>(&v))
    os << *d;
  else if (auto* b = std::get_if<bool>(&v))
    os << (*b ? "true" : "false");
  else if (auto* s = std::get_if<std::string>(&v))
    os << '"' << (s->size() > 60 ? s->substr(0, 60) + "..." : *s) << '"';
  else if (auto* a = std::get_if<std::shared_ptr<gguf_array>>(&v)) {
    auto& arr = **a;
    os << "[" << to_string(arr.type) << " x " << arr.values.size() << ":";
    for (size_t k = 0; k < arr.values.size() && k < max_items; ++k)
      os << (k ? ", " : " ") << to_display_string(arr.values[k], max_items);
    if (arr.values.size() > max_items)
      os << ", ...";
    os << "]";
  }
  return os.str();
}

} // namespace exo::model
