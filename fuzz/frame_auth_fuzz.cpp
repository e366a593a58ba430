// libFuzzer target: the group key's tags (auth/frame_auth.hpp). Whatever a stranger
// sends must not crash open() and must not open without the key; a frame sealed
// here must open with its own sender and channel only; the replay window, fed the
// input's counters, must accept each at most once and agree with a plain set.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <span>
#include <vector>

#include "auth/frame_auth.hpp"

using namespace hmcast::auth;

namespace {

/// Fixed keys for channels 0 and 1 under each cipher this CPU runs.
struct Keys {
  std::vector<ChannelKey> channel0, channel1;
};

const Keys& fixed_keys() {
  static const Keys k = [] {
    Keys out;
    for (const Cipher c : {Cipher::chacha20poly1305, Cipher::aes256gcm}) {
      if (!cipher_available(c)) continue;
      GroupKey g;
      for (std::size_t i = 0; i < g.bytes.size(); ++i) g.bytes[i] = static_cast<std::byte>(i * 7 + 1);
      g.cipher = c;
      out.channel0.emplace_back(g, 0x1234, 5, 0);
      out.channel1.emplace_back(g, 0x1234, 5, 1);
    }
    return out;
  }();
  return k;
}

std::uint32_t u32(std::span<const std::byte> b, std::size_t at) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4 && at + i < b.size(); ++i) v |= static_cast<std::uint32_t>(b[at + i]) << (8 * i);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  const std::uint32_t sender = u32(bytes, 0);
  const std::size_t which = static_cast<std::size_t>(u32(bytes, 4)) % fixed_keys().channel0.size();
  const ChannelKey& key = fixed_keys().channel0[which];
  const ChannelKey& other_channel = fixed_keys().channel1[which];
  const auto rest = bytes.size() > 8 ? bytes.subspan(8) : std::span<const std::byte>{};
  // A stranger's bytes: a tag made without the key never checks.
  if (open(key, sender, rest)) std::abort();

  // Sealed here: opens as itself only.
  std::vector<std::byte> f(rest.begin(), rest.end());
  const std::uint64_t counter = std::uint64_t{u32(bytes, 0)} + 1;
  seal(key, sender, counter, f);
  const auto ok = open(key, sender, f);
  if (!ok || ok->frame_size != rest.size() || ok->counter != counter) std::abort();
  if (open(key, sender + 1, f) || open(other_channel, sender, f)) std::abort();

  // The replay window against a set: the input's bytes as counters near each other.
  ReplayWindow w;
  std::set<std::uint64_t> seen;
  std::uint64_t highest = 0;
  for (std::byte b : rest) {
    const std::uint64_t c = 1000 + static_cast<std::uint64_t>(b);  // 256 values: some in, some out of the window
    const bool fresh = !seen.contains(c) && (highest < ReplayWindow::kWidth || c > highest - ReplayWindow::kWidth);
    if (w.accept(c) != fresh) std::abort();
    if (fresh) {
      seen.insert(c);
      if (c > highest) highest = c;
    }
  }
  return 0;
}
