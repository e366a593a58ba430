// Joining under the group key (issue 21): before a control connection carries any
// control message, the member and the manager prove to each other that they hold
// the key, without sending it. Three frames, each a control frame's body:
//
//   member  -> manager   hello     magic | version | 1 | member nonce (24)
//   manager -> member    challenge magic | version | 2 | manager nonce (24) | manager proof (32)
//   member  -> manager   proof     magic | version | 3 | member proof (32)
//
// A proof is keyed BLAKE2b under the group key of the role and both nonces, so it
// is good for this connection only: both nonces are fresh random bytes, and a
// recorded exchange replayed on another connection meets another nonce. The member
// checks the manager's proof before it sends its own (a stranger posing as the
// manager learns nothing it could use). Sans-I/O: the manager's side is a state
// machine fed with frames; the member's side is two calls.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "auth/group_key.hpp"

namespace hmcast::auth {

inline constexpr std::size_t kNonceBytes = 24;
inline constexpr std::size_t kProofBytes = 32;
using Nonce = std::array<std::byte, kNonceBytes>;
using Proof = std::array<std::byte, kProofBytes>;

enum class Role : std::uint8_t { member = 1, manager = 2 };

[[nodiscard]] Nonce fresh_nonce();
[[nodiscard]] Proof make_proof(const GroupKey& key, Role role, const Nonce& member_nonce, const Nonce& manager_nonce);
/// In constant time.
[[nodiscard]] bool proof_matches(const Proof& a, const Proof& b);

[[nodiscard]] std::vector<std::byte> encode_hello(const Nonce& member_nonce);
[[nodiscard]] std::vector<std::byte> encode_challenge(const Nonce& manager_nonce, const Proof& manager_proof);
[[nodiscard]] std::vector<std::byte> encode_proof(const Proof& member_proof);

struct Challenge {
  Nonce manager_nonce{};
  Proof manager_proof{};
};
/// Nothing unless the bytes are exactly that frame.
[[nodiscard]] std::optional<Nonce> decode_hello(std::span<const std::byte> bytes);
[[nodiscard]] std::optional<Challenge> decode_challenge(std::span<const std::byte> bytes);
[[nodiscard]] std::optional<Proof> decode_proof(std::span<const std::byte> bytes);

/// The member's side: hello() first; then, given the manager's challenge, the proof
/// to send, or nothing if the manager does not hold the key (or it is no challenge).
class JoinInitiator {
 public:
  explicit JoinInitiator(const GroupKey& key) : key_(key), nonce_(fresh_nonce()) {}
  [[nodiscard]] std::vector<std::byte> hello() const { return encode_hello(nonce_); }
  [[nodiscard]] std::optional<std::vector<std::byte>> answer(std::span<const std::byte> challenge) const;

 private:
  GroupKey key_;
  Nonce nonce_;
};

/// The manager's side of one connection, fed with each frame that arrives on it
/// until done() (then frames are control messages) or failed() (close it).
class JoinResponder {
 public:
  explicit JoinResponder(const GroupKey& key) : key_(key), nonce_(fresh_nonce()) {}
  /// What to send back (the challenge after a hello; nothing otherwise).
  [[nodiscard]] std::optional<std::vector<std::byte>> on_frame(std::span<const std::byte> frame);
  [[nodiscard]] bool done() const { return state_ == State::done; }
  [[nodiscard]] bool failed() const { return state_ == State::failed; }

 private:
  enum class State : std::uint8_t { await_hello, await_proof, done, failed };
  GroupKey key_;
  Nonce nonce_;
  Nonce member_nonce_{};
  State state_ = State::await_hello;
};

}  // namespace hmcast::auth
