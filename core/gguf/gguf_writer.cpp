#include "core/gguf/gguf_writer.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/gguf/quant.hpp"

namespace exo::model {

namespace {

template <class T>
void append(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

void append_string(std::vector<uint8_t>& out, const std::string& s) {
  append<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

template <class T>
const T& held(const gguf_value& v, const std::string& key) {
  if (auto* p = std::get_if<T>(&v))
    return *p;
  throw gguf_error("metadata '" + key + "' does not hold its declared type");
}

void encode_value(std::vector<uint8_t>& out, gguf_value_type t,
                  const gguf_value& v, const std::string& key) {
  switch (t) {
    case gguf_value_type::u8:
      append(out, static_cast<uint8_t>(held<uint64_t>(v, key)));
      return;
    case gguf_value_type::i8:
      append(out, static_cast<int8_t>(held<int64_t>(v, key)));
      return;
    case gguf_value_type::u16:
      append(out, static_cast<uint16_t>(held<uint64_t>(v, key)));
      return;
    case gguf_value_type::i16:
      append(out, static_cast<int16_t>(held<int64_t>(v, key)));
      return;
    case gguf_value_type::u32:
      append(out, static_cast<uint32_t>(held<uint64_t>(v, key)));
      return;
    case gguf_value_type::i32:
      append(out, static_cast<int32_t>(held<int64_t>(v, key)));
      return;
    case gguf_value_type::u64:
      append(out, held<uint64_t>(v, key));
      return;
    case gguf_value_type::i64:
      append(out, held<int64_t>(v, key));
      return;
    case gguf_value_type::f32:
      append(out, static_cast<float>(held<double>(v, key)));
      return;
    case gguf_value_type::f64:
      append(out, held<double>(v, key));
      return;
    case gguf_value_type::boolean:
      append(out, static_cast<uint8_t>(held<bool>(v, key) ? 1 : 0));
      return;
    case gguf_value_type::string:
      append_string(out, held<std::string>(v, key));
      return;
    case gguf_value_type::array: {
      const auto& a = held<std::shared_ptr<gguf_array>>(v, key);
      if (!a)
        throw gguf_error("metadata '" + key + "' holds no array");
      append<uint32_t>(out, static_cast<uint32_t>(a->type));
      append<uint64_t>(out, a->values.size());
      for (auto& x : a->values)
        encode_value(out, a->type, x, key);
      return;
    }
  }
  throw gguf_error("metadata '" + key + "' has an unknown type");
}

} // namespace

void gguf_writer::set_value(const gguf_kv& kv) {
  if (kv.key == "general.alignment" && kv.type == gguf_value_type::u32) {
    set_u32(kv.key, static_cast<uint32_t>(held<uint64_t>(kv.value, kv.key)));
    return;
  }
  std::vector<uint8_t> e;
  encode_value(e, kv.type, kv.value, kv.key);
  put(kv.key, kv.type, std::move(e));
}

void gguf_writer::put(const std::string& key, gguf_value_type t,
                      std::vector<uint8_t> encoded) {
  for (auto& e : kvs_)
    if (e.key == key) {
      e.type = t;
      e.encoded = std::move(encoded);
      return;
    }
  kvs_.push_back(entry{key, t, std::move(encoded)});
}

void gguf_writer::set_u32(const std::string& key, uint32_t v) {
  std::vector<uint8_t> e;
  append(e, v);
  put(key, gguf_value_type::u32, std::move(e));
  if (key == "general.alignment")
    alignment_ = v;
}

void gguf_writer::set_i32(const std::string& key, int32_t v) {
  std::vector<uint8_t> e;
  append(e, v);
  put(key, gguf_value_type::i32, std::move(e));
}

void gguf_writer::set_u64(const std::string& key, uint64_t v) {
  std::vector<uint8_t> e;
  append(e, v);
  put(key, gguf_value_type::u64, std::move(e));
}

void gguf_writer::set_f32(const std::string& key, float v) {
  std::vector<uint8_t> e;
  append(e, v);
  put(key, gguf_value_type::f32, std::move(e));
}

void gguf_writer::set_bool(const std::string& key, bool v) {
  put(key, gguf_value_type::boolean, {static_cast<uint8_t>(v ? 1 : 0)});
}

void gguf_writer::set_string(const std::string& key, const std::string& v) {
  std::vector<uint8_t> e;
  append_string(e, v);
  put(key, gguf_value_type::string, std::move(e));
}

void gguf_writer::set_strings(const std::string& key,
                              const std::vector<std::string>& v) {
  std::vector<uint8_t> e;
  append<uint32_t>(e, static_cast<uint32_t>(gguf_value_type::string));
  append<uint64_t>(e, v.size());
  for (auto& s : v)
    append_string(e, s);
  put(key, gguf_value_type::array, std::move(e));
}

void gguf_writer::set_f32s(const std::string& key,
                           const std::vector<float>& v) {
  std::vector<uint8_t> e;
  append<uint32_t>(e, static_cast<uint32_t>(gguf_value_type::f32));
  append<uint64_t>(e, v.size());
  for (auto x : v)
    append(e, x);
  put(key, gguf_value_type::array, std::move(e));
}

void gguf_writer::set_i32s(const std::string& key,
                           const std::vector<int32_t>& v) {
  std::vector<uint8_t> e;
  append<uint32_t>(e, static_cast<uint32_t>(gguf_value_type::i32));
  append<uint64_t>(e, v.size());
  for (auto x : v)
    append(e, x);
  put(key, gguf_value_type::array, std::move(e));
}

void gguf_writer::add_tensor(const std::string& name,
                             std::vector<uint64_t> ne, tensor_type type,
                             std::vector<uint8_t> data) {
  uint64_t n = 1;
  for (auto d : ne)
    n *= d;
  if (data.size() != row_bytes(type, n))
    throw gguf_error("tensor '" + name + "': data size does not match shape");
  tensors_.push_back(tensor{name, std::move(ne), type, std::move(data)});
}

void gguf_writer::add_tensor(const std::string& name,
                             std::vector<uint64_t> ne, tensor_type type,
                             const std::vector<float>& values) {
  std::vector<uint8_t> data(row_bytes(type, values.size()));
  quantize(type, values.data(), data.data(), values.size());
  add_tensor(name, std::move(ne), type, std::move(data));
}

std::vector<uint8_t> gguf_writer::bytes() const {
  std::vector<uint8_t> out;
  append<uint32_t>(out, 0x46554747);
  append<uint32_t>(out, 3);
  append<uint64_t>(out, tensors_.size());
  append<uint64_t>(out, kvs_.size());
  for (auto& e : kvs_) {
    append_string(out, e.key);
    append<uint32_t>(out, static_cast<uint32_t>(e.type));
    out.insert(out.end(), e.encoded.begin(), e.encoded.end());
  }
  auto pad = [this](uint64_t x) {
    return (x + alignment_ - 1) / alignment_ * alignment_;
  };
  uint64_t offset = 0;
  for (auto& t : tensors_) {
    append_string(out, t.name);
    append<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (auto d : t.ne)
      append<uint64_t>(out, d);
    append<uint32_t>(out, static_cast<uint32_t>(t.type));
    append<uint64_t>(out, offset);
    offset = pad(offset + t.data.size());
  }
  out.resize(pad(out.size()), 0);
  for (auto& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    out.resize(pad(out.size()), 0);
  }
  return out;
}

void gguf_writer::write(const std::string& path) const {
  auto b = bytes();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f)
    throw gguf_error("cannot create '" + path + "': " + std::strerror(errno));
  bool ok = std::fwrite(b.data(), 1, b.size(), f) == b.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok)
    throw gguf_error("cannot write '" + path + "'");
}

} // namespace exo::model
