#pragma once

/// A bound on the sequence lengths a peer may claim on the wire.
///
/// CAF 0.17's binary deserializer reads a sequence's length (up to 2^32)
/// and, for a byte sequence (std::vector<char>, a built-in type any peer
/// may put in any message), resizes the vector to that length before it
/// reads a byte: one 1 MiB message could make a node allocate and zero
/// 4 GiB. messages/sequence_bound.cpp (linked into every program that runs
/// CAF, see exo_use_caf) refuses, inside CAF's deserializer, any claimed
/// length greater than the bytes left in the message: every element of
/// every sequence exo or CAF sends takes at least one byte, so a true
/// length always fits, and a refused claim costs nothing. The one
/// exception is std::vector<bool>, which CAF packs eight to a byte and
/// sizes by its bit count (the same flaw): it cannot cross the wire, and
/// exo's messages send bits as std::vector<std::uint8_t>.

#include <cstdint>

namespace exo {

/// Claims refused since the process started.
std::uint64_t refused_sequence_claims() noexcept;

/// Whether the bound is in force in this process: deserializes a claim of
/// 100 elements over 10 bytes and checks that it is refused (false when
/// the dynamic linker bound CAF's deserializer to CAF's own definition).
bool sequence_bound_in_force();

} // namespace exo
