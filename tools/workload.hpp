// The messages the multi-process tools (demo, soak, bench) broadcast, and how a
// member checks what it delivered. Every byte is a function of (seed, sender,
// index, attempt), so any member can regenerate what it should have received and
// compare: no central record, no trust in the transport.
//
// Layout of a message: u32 index, u32 attempt (little-endian), then pseudo-random
// bytes. The tools send every index once (attempt 0): the protocol never fails a
// survivor's message, so nothing is sent again, and a member counts any other
// attempt as unexpected. The field stays so a future tool can tell a resend apart
// from a protocol duplicate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <algorithm>
#include <vector>

#include "hmcast/types.hpp"
#include "size_text.hpp"

namespace hmcast::tools {

inline constexpr std::size_t kMessageHeader = 8;

/// How a forged message begins (`hmcast soak --spray-forged`): a member that
/// delivers one counts it as forged_accepted, apart from other unexpected messages.
inline constexpr std::string_view kForgedMarker = "FORGED!!";
inline bool is_forged(std::span<const std::byte> bytes) {
  return bytes.size() >= kForgedMarker.size() &&
         std::equal(kForgedMarker.begin(), kForgedMarker.end(), bytes.begin(),
                    [](char c, std::byte b) { return static_cast<std::byte>(c) == b; });
}

/// Sizes with weights, e.g. "64,2KiB:30,1MiB:1" (weight 1 when omitted).
struct SizeMix {
  std::vector<std::pair<std::uint64_t, std::uint32_t>> sizes;  // (bytes, weight)
  /// Parses the list; throws std::invalid_argument with what is wrong.
  static SizeMix parse(const std::string& spec);
  [[nodiscard]] std::string to_string() const;
  /// The size of message `index` of `sender`: drawn by weight, the same everywhere.
  [[nodiscard]] std::uint64_t size_of(std::uint64_t seed, MemberId sender, std::uint32_t index) const;
};


/// Message `index` of `sender` (attempt `attempt`) into `out` (at least 8 bytes):
/// an 8-byte header (index, attempt) and a pseudo-random body, reproducible
/// anywhere from the seed.
void fill_message(std::span<std::byte> out, std::uint64_t seed, MemberId sender, std::uint32_t index,
                  std::uint32_t attempt);

struct Checked {
  std::uint32_t index = 0;
  std::uint32_t attempt = 0;
  bool intact = false;  // every byte is what (seed, sender, index, attempt) gives
};
/// How much of a message a member checks. `full`: every byte (soaks, the demo).
/// `sampled`: about 512 words (4 KiB) spread over the body, its last word and its
/// tail, as the Open MPI baseline's latency runs (bench/mpi/mpi_bench.cpp) check up
/// to 4096 bytes of theirs: benchmarks compare like with like, and a stale or
/// misplaced buffer still shows. `stamp`:
/// a received message's header (index and attempt) and size, and the sampled check
/// of each sender's last message only, as the baseline's streams check theirs (the
/// member decides which; check_message treats it as `sampled`).
enum class Verify : std::uint8_t { full, sampled, stamp };

/// Reads the header and checks the bytes; nothing if there is no header.
std::optional<Checked> check_message(std::uint64_t seed, MemberId sender, std::span<const std::byte> bytes,
                                     Verify verify = Verify::full);

/// An order-independent digest of a set of messages (sender, index, attempt 0 content).
std::uint64_t message_digest(std::uint64_t seed, MemberId sender, std::uint32_t index, std::uint64_t size);

}  // namespace hmcast::tools
