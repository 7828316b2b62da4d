#pragma once

/// Errors as values for the device layer: nothing in backends/ throws across
/// its interface or aborts the process.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace exo::backend {

/// What went wrong, coarse enough to act on.
enum class errc : std::uint8_t {
  unsupported,      ///< the backend or device cannot do this at all
  invalid_argument, ///< a parameter is malformed (null buffer, bad enum...)
  out_of_range,     ///< an offset or size falls outside a buffer
  out_of_memory,    ///< the device has no room for the allocation
  quota_exceeded,   ///< a caller-level memory quota refused it
  no_device,        ///< no such device, or the backend found none
  device_lost,      ///< the device vanished or stopped answering
  timeout,          ///< an operation did not finish in time
  driver_error,     ///< the driver or runtime returned an error
  paused,           ///< the device refuses new work (thermal or operator)
  wrong_device,     ///< a buffer or event belongs to another device
};

/// A short, stable name for an error code ("out_of_memory").
const char* to_string(errc code) noexcept;

/// An error: a code plus a message that names the problem.
struct error {
  errc code;
  std::string message;

  std::string to_string() const;
};

/// Either a value or an error. A deliberately small cousin of
/// std::expected (C++23), so that the layer stays C++17.
template <class T>
class result {
public:
  result(T value) : data_(std::move(value)) {
  }
  result(error err) : data_(std::move(err)) {
  }

  bool ok() const noexcept {
    return data_.index() == 0;
  }
  explicit operator bool() const noexcept {
    return ok();
  }

  T& value() & {
    return std::get<0>(data_);
  }
  const T& value() const& {
    return std::get<0>(data_);
  }
  T&& value() && {
    return std::get<0>(std::move(data_));
  }
  T& operator*() & {
    return value();
  }
  const T& operator*() const& {
    return value();
  }
  T* operator->() {
    return &value();
  }
  const T* operator->() const {
    return &value();
  }

  const error& err() const {
    return std::get<1>(data_);
  }

private:
  std::variant<T, error> data_;
};

/// Success or an error.
template <>
class result<void> {
public:
  result() = default;
  result(error err) : err_(std::move(err)) {
  }

  bool ok() const noexcept {
    return !err_.has_value();
  }
  explicit operator bool() const noexcept {
    return ok();
  }
  const error& err() const {
    return *err_;
  }

private:
  std::optional<error> err_;
};

using status = result<void>;

/// Builds an error value: `return fail(errc::out_of_range, "offset ...")`.
inline error fail(errc code, std::string message) {
  return error{code, std::move(message)};
}

} // namespace exo::backend

/// Propagates an error from an expression returning a status.
#define EXO_TRY(expr)                                                          \
  do {                                                                         \
    auto exo_try_status_ = (expr);                                             \
    if (!exo_try_status_.ok())                                                 \
      return exo_try_status_.err();                                            \
  } while (false)
