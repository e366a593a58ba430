// Fault injection for tests: a process that dies while it is copying a large frame
// into a peer's inbox (`hmcast soak --kill-mid-write`). A SIGKILL sent from outside
// lands wherever the process happens to be; this one lands mid-copy, every time,
// so the soak shows what the inbox promises a writer's death leaves behind: a
// record half written and never published, the inbox lock held by a dead owner,
// and (when the frame spans several fragments) the first ones of a frame that will
// never end; or, for a sender, a datagram half written into its multicast log, whose
// head never moved.
//
// Off unless a process arms it; nothing in the library arms it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hmcast::shm {

/// The next fragment of a frame of at least `min_frame` bytes, starting at least
/// `min_offset` bytes into it, that this process writes into a peer's inbox, or the
/// next datagram of at least `min_frame` bytes it writes into its own multicast log
/// (when `min_offset` is 0), is cut: half of its payload is copied, one line of JSON
/// is written to `report_fd` ({"event":"crashed_mid_write",...}), and the process
/// SIGKILLs itself with the lock it writes under held. Async-signal-safe (a signal
/// handler may call it).
void arm_crash_mid_write(int report_fd, std::size_t min_frame, std::size_t min_offset = 0) noexcept;

/// Whether the fragment at `offset` of a frame of `frame_size` bytes is where an
/// armed process dies.
[[nodiscard]] bool crash_due(std::size_t frame_size, std::size_t offset) noexcept;

/// Reports and dies (crash_due() said so): `copied` of the record's `length`
/// payload bytes were written, into member `to`'s inbox (0: our own multicast log).
[[noreturn]] void crash_mid_write(std::uint32_t to, std::size_t frame_size, std::size_t offset, std::size_t length,
                                  std::size_t copied) noexcept;

}  // namespace hmcast::shm
