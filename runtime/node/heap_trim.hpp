#pragma once

// A node gives its heap's free pages back to the host now and then.
//
// Why: glibc keeps what a thread frees in that thread's arena and returns
// pages to the host only from an arena's top. A node's work is spread over
// many threads (CAF's workers, detached actors, the multiplexer), so memory
// freed after a job stays resident inside the arenas: over a 30-minute soak
// the live heap of a node stayed near 10 MiB while its arenas' resident
// pages kept growing, and one malloc_trim(0) gave back 7 of 61 MiB
// (docs/soak.md). malloc_trim(0) releases every free page of every arena
// (MADV_DONTNEED); it costs a walk over the free chunks, well under a
// millisecond at a node's heap sizes.

#include <caf/fwd.hpp>

#include <chrono>

namespace exo {

/// Spawns the actor that calls malloc_trim(0) every `interval` (nothing
/// on a C library without it). Stop it with an exit message.
caf::actor start_heap_trim(caf::actor_system& sys,
                           std::chrono::milliseconds interval
                           = std::chrono::seconds{30});

} // namespace exo
