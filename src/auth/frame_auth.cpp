#include "auth/frame_auth.hpp"

#include <sodium.h>

#include "core/assert.hpp"

namespace hmcast::auth {
namespace {

static_assert(crypto_aead_xchacha20poly1305_ietf_ABYTES == kTagBytes);
static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == kKeyBytes);
static_assert(crypto_generichash_KEYBYTES_MAX >= kKeyBytes && crypto_generichash_BYTES_MAX >= kKeyBytes);

using AeadNonce = std::array<unsigned char, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES>;

void put_le(unsigned char* out, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

std::uint64_t get_le(const std::byte* in, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  return v;
}

AeadNonce nonce_of(MemberId sender, std::uint32_t channel, std::uint64_t counter) {
  AeadNonce n{};
  put_le(n.data(), sender, 4);
  put_le(n.data() + 4, channel, 4);
  put_le(n.data() + 8, counter, 8);
  return n;  // the last 8 bytes stay 0
}

const unsigned char* uc(const std::byte* p) { return reinterpret_cast<const unsigned char*>(p); }

}  // namespace

ViewKey derive_view_key(const GroupKey& group_key, GroupId group, ViewId view) {
  ensure_sodium();
  static constexpr char kLabel[] = "hmcast view key v1";
  std::array<unsigned char, sizeof kLabel - 1 + 16> in{};
  std::copy(kLabel, kLabel + sizeof kLabel - 1, in.begin());
  put_le(in.data() + sizeof kLabel - 1, group, 8);
  put_le(in.data() + sizeof kLabel - 1 + 8, view, 8);
  ViewKey k;
  const int rc = crypto_generichash(reinterpret_cast<unsigned char*>(k.bytes.data()), k.bytes.size(), in.data(),
                                    in.size(), uc(group_key.bytes.data()), group_key.bytes.size());
  HMCAST_ASSERT(rc == 0);  // fails only for sizes out of range, which the static_asserts rule out
  return k;
}

void seal(const ViewKey& key, MemberId sender, std::uint32_t channel, std::uint64_t counter,
          std::vector<std::byte>& frame) {
  HMCAST_ASSERT(counter != 0);
  ensure_sodium();
  const auto nonce = nonce_of(sender, channel, counter);
  const std::size_t n = frame.size();
  frame.resize(n + kTrailerBytes);
  put_le(reinterpret_cast<unsigned char*>(frame.data() + n), counter, kCounterBytes);
  unsigned long long tag_len = 0;
  unsigned char none = 0;  // nothing is encrypted: the frame is associated data
  const int rc = crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
      &none, reinterpret_cast<unsigned char*>(frame.data() + n + kCounterBytes), &tag_len, nullptr, 0, uc(frame.data()),
      n, nullptr, nonce.data(), uc(key.bytes.data()));
  HMCAST_ASSERT(rc == 0 && tag_len == kTagBytes);
}

std::optional<Opened> open(const ViewKey& key, MemberId sender, std::uint32_t channel,
                           std::span<const std::byte> sealed) {
  if (sealed.size() < kTrailerBytes) return std::nullopt;
  ensure_sodium();
  const std::size_t n = sealed.size() - kTrailerBytes;
  const std::uint64_t counter = get_le(sealed.data() + n, kCounterBytes);
  if (counter == 0) return std::nullopt;
  const auto nonce = nonce_of(sender, channel, counter);
  unsigned char none = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt_detached(&none, nullptr, &none, 0,
                                                          uc(sealed.data() + n + kCounterBytes), uc(sealed.data()), n,
                                                          nonce.data(), uc(key.bytes.data())) != 0)
    return std::nullopt;
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
