#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace exo::access {

/// Operations a client may be allowed to perform. The names (`to_string`)
/// are the wire names inside tokens; only append.
enum class permission : std::uint8_t {
  device_list,
  device_info,
  memory_allocate,
  memory_free,
  memory_copy,
  p2p_copy,
  compute_run,
  compute_sync,
  monitoring_read,
  thermal_read,
  job_submit,
  job_cancel,
  audit_read,
  policy_admin,
};

inline constexpr std::size_t permission_count = 14;

/// Roles, each a fixed set of permissions (see `role_permissions`).
enum class role : std::uint8_t { monitor, user, power_user, admin };

inline constexpr std::size_t role_count = 4;

/// A set of permissions as a bit mask.
class permission_set {
public:
  constexpr permission_set() noexcept = default;

  constexpr permission_set(std::initializer_list<permission> ps) noexcept {
    for (auto p : ps)
      bits_ |= bit(p);
  }

  static constexpr permission_set from_bits(std::uint32_t bits) noexcept {
    permission_set s;
    s.bits_ = bits & ((1u << permission_count) - 1);
    return s;
  }

  constexpr bool contains(permission p) const noexcept {
    return (bits_ & bit(p)) != 0;
  }

  constexpr void add(permission p) noexcept { bits_ |= bit(p); }

  constexpr permission_set operator|(permission_set o) const noexcept {
    return from_bits(bits_ | o.bits_);
  }

  constexpr bool empty() const noexcept { return bits_ == 0; }

  constexpr std::uint32_t bits() const noexcept { return bits_; }

  constexpr bool operator==(permission_set o) const noexcept {
    return bits_ == o.bits_;
  }

  constexpr bool operator!=(permission_set o) const noexcept {
    return bits_ != o.bits_;
  }

private:
  static constexpr std::uint32_t bit(permission p) noexcept {
    return 1u << static_cast<unsigned>(p);
  }

  std::uint32_t bits_ = 0;
};

/// The permissions of a role:
///
///   monitor:    device_list device_info monitoring_read thermal_read
///   user:       monitor + memory_allocate memory_free memory_copy
///               compute_run compute_sync job_submit job_cancel
///   power_user: user + p2p_copy audit_read
///   admin:      everything, policy_admin included
permission_set role_permissions(role r) noexcept;

std::string_view to_string(permission p) noexcept;
std::string_view to_string(role r) noexcept;
std::optional<permission> parse_permission(std::string_view name) noexcept;
/// Accepts "power_user" and "power-user".
std::optional<role> parse_role(std::string_view name) noexcept;

} // namespace exo::access
