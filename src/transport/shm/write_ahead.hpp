// A ring's pages mapped ahead of its writer. The file behind a ring is touched page by
// page as it fills (memory follows use), and the first write to each page is a fault
// that allocates and clears it: on a ring's first lap about one record in two of 2 KiB
// paid a fault on the sender's path, and a latency run of a few thousand messages
// never left its first lap. The writer maps a chunk ahead in one madvise() instead,
// so memory still follows use, a chunk at a time. Used for a member's multicast log
// (one writer); an inbox has a writer per peer, each of which would map every chunk
// in its own page tables, and its records (ACKs, mostly) are small.
#pragma once

#include <cstdint>

#include "transport/shm/shm_layout.hpp"

namespace hmcast::shm {

class WriteAhead {
 public:
  /// Bytes mapped ahead at once: one call per chunk, and at most this much of a
  /// ring's file in use before its writer reaches it.
  static constexpr std::uint64_t kChunk = 128 * 1024;

  /// Before this process writes `need` bytes at absolute position `tail` of `ring`
  /// (Ring::span_at's: padding to the end included). Cheap once the ring's pages are
  /// all mapped here.
  void before_write(const Ring& ring, std::uint64_t tail, std::uint64_t need) {
    if (mapped_ >= ring.capacity) return;
    const std::uint64_t at = tail % ring.capacity;
    // A record that does not fit before the end starts at 0: all of the ring is then
    // in use (the padding ran to its end).
    const std::uint64_t end = at + need <= ring.capacity ? at + need : ring.capacity;
    if (end > mapped_) map_to(ring, end);
  }

 private:
  void map_to(const Ring& ring, std::uint64_t end);

  std::uint64_t mapped_ = 0;  // the ring's first bytes mapped for writing in this process
};

}  // namespace hmcast::shm
