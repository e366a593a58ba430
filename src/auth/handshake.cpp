#include "auth/handshake.hpp"

#include <sodium.h>

#include <algorithm>

#include "core/assert.hpp"

namespace hmcast::auth {
namespace {

// Not a control message's magic ("HMC"): a manager without a key refuses it as
// malformed, and one with a key refuses a control message sent in its place.
constexpr std::array<std::byte, 4> kMagic{std::byte{'H'}, std::byte{'M'}, std::byte{'A'}, std::byte{'K'}};
constexpr std::byte kVersion{1};
constexpr std::byte kHello{1};
constexpr std::byte kChallenge{2};
constexpr std::byte kProofType{3};
constexpr std::size_t kPrefix = kMagic.size() + 2;

std::vector<std::byte> frame_of(std::byte type, std::initializer_list<std::span<const std::byte>> parts) {
  std::vector<std::byte> out(kMagic.begin(), kMagic.end());
  out.push_back(kVersion);
  out.push_back(type);
  for (auto p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

/// The body of a frame of `type` if `bytes` is one of exactly `body` bytes.
std::optional<std::span<const std::byte>> body_of(std::span<const std::byte> bytes, std::byte type, std::size_t body) {
  if (bytes.size() != kPrefix + body || !std::equal(kMagic.begin(), kMagic.end(), bytes.begin()) ||
      bytes[kMagic.size()] != kVersion || bytes[kMagic.size() + 1] != type)
    return std::nullopt;
  return bytes.subspan(kPrefix);
}

template <std::size_t N>
std::array<std::byte, N> array_of(std::span<const std::byte> b) {
  std::array<std::byte, N> a{};
  std::copy_n(b.begin(), N, a.begin());
  return a;
}

const unsigned char* as_uchar(const std::byte* p) { return reinterpret_cast<const unsigned char*>(p); }

}  // namespace

Nonce fresh_nonce() {
  ensure_sodium();
  Nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

Proof make_proof(const GroupKey& key, Role role, const Nonce& member_nonce, const Nonce& manager_nonce) {
  ensure_sodium();
  static constexpr char kLabel[] = "hmcast join proof v2";
  crypto_generichash_state st;
  int rc = crypto_generichash_init(&st, as_uchar(key.bytes.data()), key.bytes.size(), kProofBytes);
  rc |= crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(kLabel), sizeof kLabel - 1);
  const auto r = static_cast<unsigned char>(role);
  rc |= crypto_generichash_update(&st, &r, 1);
  // The cipher is part of the key: a member whose frames nobody could open is refused here.
  const auto c = static_cast<unsigned char>(key.cipher);
  rc |= crypto_generichash_update(&st, &c, 1);
  rc |= crypto_generichash_update(&st, as_uchar(member_nonce.data()), member_nonce.size());
  rc |= crypto_generichash_update(&st, as_uchar(manager_nonce.data()), manager_nonce.size());
  Proof p;
  rc |= crypto_generichash_final(&st, reinterpret_cast<unsigned char*>(p.data()), p.size());
  HMCAST_ASSERT(rc == 0);  // fails only for sizes out of range
  return p;
}

bool proof_matches(const Proof& a, const Proof& b) { return sodium_memcmp(a.data(), b.data(), a.size()) == 0; }

std::vector<std::byte> encode_hello(const Nonce& member_nonce) { return frame_of(kHello, {member_nonce}); }
std::vector<std::byte> encode_challenge(const Nonce& manager_nonce, const Proof& manager_proof) {
  return frame_of(kChallenge, {manager_nonce, manager_proof});
}
std::vector<std::byte> encode_proof(const Proof& member_proof) { return frame_of(kProofType, {member_proof}); }

std::optional<Nonce> decode_hello(std::span<const std::byte> bytes) {
  const auto b = body_of(bytes, kHello, kNonceBytes);
  if (!b) return std::nullopt;
  return array_of<kNonceBytes>(*b);
}

std::optional<Challenge> decode_challenge(std::span<const std::byte> bytes) {
  const auto b = body_of(bytes, kChallenge, kNonceBytes + kProofBytes);
  if (!b) return std::nullopt;
  return Challenge{array_of<kNonceBytes>(*b), array_of<kProofBytes>(b->subspan(kNonceBytes))};
}

std::optional<Proof> decode_proof(std::span<const std::byte> bytes) {
  const auto b = body_of(bytes, kProofType, kProofBytes);
  if (!b) return std::nullopt;
  return array_of<kProofBytes>(*b);
}

std::optional<std::vector<std::byte>> JoinInitiator::answer(std::span<const std::byte> challenge) const {
  const auto c = decode_challenge(challenge);
  if (!c || !proof_matches(c->manager_proof, make_proof(key_, Role::manager, nonce_, c->manager_nonce)))
    return std::nullopt;
  return encode_proof(make_proof(key_, Role::member, nonce_, c->manager_nonce));
}

std::optional<std::vector<std::byte>> JoinResponder::on_frame(std::span<const std::byte> frame) {
  switch (state_) {
    case State::await_hello: {
      const auto n = decode_hello(frame);
      if (!n) {
        state_ = State::failed;
        return std::nullopt;
      }
      member_nonce_ = *n;
      state_ = State::await_proof;
      return encode_challenge(nonce_, make_proof(key_, Role::manager, member_nonce_, nonce_));
    }
    case State::await_proof: {
      const auto p = decode_proof(frame);
      state_ = p && proof_matches(*p, make_proof(key_, Role::member, member_nonce_, nonce_)) ? State::done
                                                                                              : State::failed;
      return std::nullopt;
    }
    case State::done:
    case State::failed: break;
  }
  HMCAST_ASSERT(false && "JoinResponder fed after it finished");
  return std::nullopt;
}

}  // namespace hmcast::auth
