// A transport's profile: the measured facts the policy chooses from (policy.hpp).
//
// Built-in profiles exist for socket, verbs, sim and inproc; `hmcast bench
// --calibrate` measures the crossover points on the current transport and writes
// a profile file (format below), which a Node loads through Config::profile_file.
//
// File format (text, one "key value" per line, '#' starts a comment):
//   hmcast-profile 4            first line: the format version (1: without
//                               small_bytes_per_member, read as 0; 1 and 2: without
//                               segment_size, read as 65536; 1 to 3: without
//                               small_bytes_per_receiver, read as 0)
//   transport socket
//   max_small_message 1048576   the largest message the small path carries (and accepts)
//   small_bytes_per_member 65536  messages up to this times the group size (and at most
//                               max_small_message) take the small path; 0: all up to
//                               max_small_message. The small path's one multicast wins more
//                               the more members there are; the large path's fixed costs
//                               per hop lose less the larger the message.
//   small_bytes_per_receiver 0  the same rule by the group's receivers (its size less
//                               one) instead: what the route grows by with each member
//                               is then not what it starts from. At most one of the two
//                               is not 0.
//   flat_tree_max_group 16      groups up to this size ACK straight to the sender
//   tree_radix 4                ACK-tree radix in larger groups (>= 2)
//   min_block_size 65536        a large message is cut into about target_blocks
//   max_block_size 1048576        blocks of a size in [min, max] (RDMC: the best
//   target_blocks 64              block grows with the message)
//   segment_size 65536          a block moves in transfers of this many bytes (at
//                               most the block), each forwarded by a relay as soon
//                               as it holds it
//   ack_interval_ns 20000       ACK coalescing interval
//   receive_window 4            large path: blocks a receiver lets come at once
//   credit_lead_bytes 1048576   large path: ask for the next block this early
// Every key must appear exactly once; unknown keys, values out of the bounds
// below and trailing garbage are errors (ProfileError says which line).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hmcast::policy {

struct Profile {
  std::string transport = "socket";
  std::uint32_t max_small_message = 1U << 20;
  std::uint32_t small_bytes_per_member = 0;
  std::uint32_t small_bytes_per_receiver = 0;
  std::uint32_t flat_tree_max_group = 16;
  std::uint32_t tree_radix = 4;
  std::uint64_t min_block_size = 64U << 10;
  std::uint64_t max_block_size = 1U << 20;
  std::uint32_t target_blocks = 64;
  std::uint64_t segment_size = 64U << 10;
  std::int64_t ack_interval_ns = 20'000;
  std::uint32_t receive_window = 1;
  std::uint64_t credit_lead_bytes = 256U << 10;
  friend bool operator==(const Profile&, const Profile&) = default;
};

/// Bounds every parsed or built profile must respect (a profile file is input).
namespace bounds {
inline constexpr std::uint32_t kMinSmall = 64, kMaxSmall = 64U << 20;
inline constexpr std::uint32_t kMaxFlatGroup = 1024;
inline constexpr std::uint32_t kMaxRadix = 1024;
inline constexpr std::uint64_t kMinBlock = 4096, kMaxBlock = 64ULL << 20;
inline constexpr std::uint64_t kMinSegment = 4096;
inline constexpr std::uint32_t kMaxTargetBlocks = 1U << 16;
inline constexpr std::int64_t kMaxAckIntervalNs = 100'000'000;
inline constexpr std::uint32_t kMaxReceiveWindow = 64;
inline constexpr std::uint64_t kMaxCreditLead = 1ULL << 30;
}  // namespace bounds

struct ProfileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline constexpr int kProfileVersion = 4;

/// The built-in profile of "socket", "shm", "verbs", "sim" or "inproc", for datagrams of
/// up to `datagram` bytes (0: the transport's usual size; the socket transport's
/// crossover depends on it). Throws ProfileError for another name.
[[nodiscard]] Profile builtin_profile(std::string_view transport, std::uint32_t datagram = 0);

/// Datagrams at least this large (loopback's, SocketOptions::datagram_size) carry a
/// message in an eighth as many as the 8 KiB ones the socket profile was first measured with.
inline constexpr std::uint32_t kLargeDatagram = 32U << 10;

/// Throws ProfileError naming the first field out of its bounds.
void validate(const Profile& p);

/// The file form of a profile (parse_profile(format_profile(p)) == p).
[[nodiscard]] std::string format_profile(const Profile& p);
/// Parses the file form. Throws ProfileError with the line and what to fix.
[[nodiscard]] Profile parse_profile(std::string_view text);
/// Reads and parses a file. Throws ProfileError (also when it cannot be read).
[[nodiscard]] Profile load_profile(const std::string& path);

}  // namespace hmcast::policy
