#include "auth/frame_auth.hpp"

#include <sodium.h>

#include "core/assert.hpp"
#include "core/byte_io.hpp"

namespace hmcast::auth {
namespace {

static_assert(crypto_aead_aes256gcm_ABYTES == kTagBytes && crypto_aead_chacha20poly1305_ietf_ABYTES == kTagBytes);
static_assert(crypto_aead_aes256gcm_KEYBYTES == kKeyBytes && crypto_aead_chacha20poly1305_ietf_KEYBYTES == kKeyBytes);
static_assert(crypto_aead_aes256gcm_NPUBBYTES == 12 && crypto_aead_chacha20poly1305_ietf_NPUBBYTES == 12);
static_assert(crypto_generichash_KEYBYTES_MAX >= kKeyBytes && crypto_generichash_BYTES_MAX >= kKeyBytes);

using AeadNonce = std::array<unsigned char, 12>;

static_assert(kCounterBytes == sizeof(std::uint64_t));

template <class T>
void put_le(unsigned char* out, T v) {
  wire::store_le(reinterpret_cast<std::byte*>(out), v);
}

AeadNonce nonce_of(MemberId sender, std::uint64_t counter) {
  AeadNonce n{};
  put_le(n.data(), std::uint32_t{sender});
  put_le(n.data() + 4, counter);
  return n;
}

const unsigned char* uc(const std::byte* p) { return reinterpret_cast<const unsigned char*>(p); }

}  // namespace

ChannelKey::ChannelKey(const GroupKey& group_key, GroupId group, ViewId view, std::uint64_t channel)
    : cipher_(group_key.cipher) {
  HMCAST_ASSERT(channel <= UINT32_MAX || (channel >= kDirectChannel && channel - kDirectChannel <= UINT32_MAX));
  static_assert(sizeof(crypto_aead_aes256gcm_state) <= kStateBytes);
  static_assert(alignof(crypto_aead_aes256gcm_state) <= 16);
  require_cipher(cipher_);  // also initialises libsodium
  // Direct channels under a label of their own: the other channels' keys stay what they were.
  static constexpr char kLabel[] = "hmcast channel key v2";
  static constexpr char kDirectLabel[] = "hmcast direct key v1";
  static_assert(sizeof kDirectLabel < sizeof kLabel);
  const bool direct = channel >= kDirectChannel;
  std::array<unsigned char, sizeof kLabel - 1 + 1 + 8 + 8 + 4> in{};
  unsigned char* p = direct ? std::copy(kDirectLabel, kDirectLabel + sizeof kDirectLabel - 1, in.begin())
                            : std::copy(kLabel, kLabel + sizeof kLabel - 1, in.begin());
  *p++ = static_cast<unsigned char>(cipher_);
  put_le(p, std::uint64_t{group});
  put_le(p + 8, std::uint64_t{view});
  put_le(p + 16, static_cast<std::uint32_t>(direct ? channel - kDirectChannel : channel));
  const auto used = static_cast<std::size_t>(p + 20 - in.data());  // a direct key's shorter label leaves a byte
  const int rc = crypto_generichash(raw_.data(), raw_.size(), in.data(), used, uc(group_key.bytes.data()),
                                    group_key.bytes.size());
  HMCAST_ASSERT(rc == 0);  // fails only for sizes out of range, which the static_asserts rule out
  if (cipher_ == Cipher::aes256gcm) {
    auto* st = reinterpret_cast<crypto_aead_aes256gcm_state*>(state_.data());
    const int set_up = crypto_aead_aes256gcm_beforenm(st, raw_.data());
    HMCAST_ASSERT(set_up == 0);  // require_cipher checked the CPU
  }
}

void seal(const ChannelKey& key, MemberId sender, std::uint64_t counter, std::vector<std::byte>& frame) {
  HMCAST_ASSERT(counter != 0);
  const auto nonce = nonce_of(sender, counter);
  const std::size_t n = frame.size();
  frame.resize(n + kTrailerBytes);
  wire::store_le(frame.data() + n, counter);
  auto* tag = reinterpret_cast<unsigned char*>(frame.data() + n + kCounterBytes);
  unsigned long long tag_len = 0;
  unsigned char none = 0;  // nothing is encrypted: the frame is associated data
  int rc = -1;
  switch (key.cipher_) {
    case Cipher::aes256gcm:
      rc = crypto_aead_aes256gcm_encrypt_detached_afternm(
          &none, tag, &tag_len, nullptr, 0, uc(frame.data()), n, nullptr, nonce.data(),
          reinterpret_cast<const crypto_aead_aes256gcm_state*>(key.state_.data()));
      break;
    case Cipher::chacha20poly1305:
      rc = crypto_aead_chacha20poly1305_ietf_encrypt_detached(&none, tag, &tag_len, nullptr, 0, uc(frame.data()), n,
                                                              nullptr, nonce.data(), key.raw_.data());
      break;
  }
  HMCAST_ASSERT(rc == 0 && tag_len == kTagBytes);
}

std::optional<Opened> open(const ChannelKey& key, MemberId sender, std::span<const std::byte> sealed) {
  if (sealed.size() < kTrailerBytes) return std::nullopt;
  const std::size_t n = sealed.size() - kTrailerBytes;
  const std::uint64_t counter = wire::load_le<std::uint64_t>(sealed.data() + n);
  if (counter == 0) return std::nullopt;
  const auto nonce = nonce_of(sender, counter);
  const unsigned char* tag = uc(sealed.data() + n + kCounterBytes);
  unsigned char none = 0;
  int rc = -1;
  switch (key.cipher_) {
    case Cipher::aes256gcm:
      rc = crypto_aead_aes256gcm_decrypt_detached_afternm(
          &none, nullptr, &none, 0, tag, uc(sealed.data()), n, nonce.data(),
          reinterpret_cast<const crypto_aead_aes256gcm_state*>(key.state_.data()));
      break;
    case Cipher::chacha20poly1305:
      rc = crypto_aead_chacha20poly1305_ietf_decrypt_detached(&none, nullptr, &none, 0, tag, uc(sealed.data()), n,
                                                              nonce.data(), key.raw_.data());
      break;
  }
  if (rc != 0) return std::nullopt;
  return Opened{n, counter};
}

bool ReplayWindow::accept(std::uint64_t counter) {
  if (counter == 0) return false;
  if (counter > highest_) {
    const std::uint64_t shift = counter - highest_;
    seen_ = shift >= kWidth ? 0 : seen_ << shift;
    seen_ |= 1;
    highest_ = counter;
    return true;
  }
  const std::uint64_t behind = highest_ - counter;
  if (behind >= kWidth) return false;
  const std::uint64_t bit = std::uint64_t{1} << behind;
  if ((seen_ & bit) != 0) return false;
  seen_ |= bit;
  return true;
}

}  // namespace hmcast::auth
