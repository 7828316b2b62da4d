#pragma once

/// exo's error category for CAF: every error an actor returns carries one of
/// these codes and a message naming the problem.

#include "backends/result.hpp"

#include <caf/error.hpp>
#include <caf/fwd.hpp>

#include <string>

namespace exo {

/// Codes of the "exo" error category. Values start at 1 (0 means "none").
enum class exo_errc : std::uint8_t {
  unsupported = 1,
  invalid_argument,
  out_of_range,
  out_of_memory,
  quota_exceeded,
  no_device,
  device_lost,
  timeout,
  driver_error,
  paused,
  wrong_device,
  unknown_handle,
  access_denied,
  failed_state,
};

const char* to_string(exo_errc code) noexcept;

/// The category atom of exo's errors.
caf::atom_value exo_error_category();

/// An exo error with a message.
caf::error make_exo_error(exo_errc code, std::string message);

/// Converts an error value of the device layer.
caf::error to_caf_error(const backend::error& err);

/// The message of an exo error ("" for errors of other categories).
std::string error_message(const caf::error& err);

/// Registers the renderer of the "exo" category.
void add_error_category(caf::actor_system_config& cfg);

} // namespace exo
