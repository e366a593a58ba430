// The group key's tags: what checks, what fails, and replays.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "auth/frame_auth.hpp"
#include "auth/group_key.hpp"
#include "hmcast/error.hpp"

using namespace hmcast;
using namespace hmcast::auth;

namespace {

std::vector<std::byte> frame_of(std::size_t n) {
  std::vector<std::byte> f(n);
  for (std::size_t i = 0; i < n; ++i) f[i] = static_cast<std::byte>(i * 37 + 11);
  return f;
}

std::string scratch_path(const char* name) {
  return "/tmp/hmcast-test-" + std::to_string(::getpid()) + "-" + name;
}

}  // namespace

/// The ciphers this CPU runs (ChaCha20-Poly1305 always; AES-256-GCM with AES-NI).
std::vector<Cipher> ciphers_here() {
  std::vector<Cipher> c{Cipher::chacha20poly1305};
  if (cipher_available(Cipher::aes256gcm)) c.push_back(Cipher::aes256gcm);
  else WARN("this CPU has no AES-NI: AES-256-GCM untested here");
  return c;
}

GroupKey key_under(Cipher c) {
  GroupKey k = generate_key();
  k.cipher = c;
  return k;
}

TEST_CASE("frame auth: a sealed frame opens under its channel key and sender only", "[auth]") {
  for (const Cipher c : ciphers_here()) {
    CAPTURE(cipher_name(c));
    const GroupKey gk = key_under(c);
    const ChannelKey k(gk, 7, 3, kMulticastChannel);
    GroupKey other_cipher = gk;
    other_cipher.cipher = c == Cipher::aes256gcm ? Cipher::chacha20poly1305 : Cipher::aes256gcm;
    for (std::size_t n : {0U, 1U, 40U, 2048U, 65000U}) {
      auto f = frame_of(n);
      seal(k, 5, 9, f);
      REQUIRE(f.size() == n + kTrailerBytes);
      const auto ok = open(k, 5, f);
      REQUIRE(ok.has_value());
      CHECK(ok->frame_size == n);
      CHECK(ok->counter == 9);
      CHECK(std::equal(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n), frame_of(n).begin()));
      CHECK_FALSE(open(k, 6, f));                                              // another sender
      CHECK_FALSE(open(ChannelKey(gk, 7, 3, 2), 5, f));                        // another channel
      CHECK_FALSE(open(ChannelKey(gk, 7, 4, kMulticastChannel), 5, f));        // the next view
      CHECK_FALSE(open(ChannelKey(gk, 8, 3, kMulticastChannel), 5, f));        // another group
      CHECK_FALSE(open(ChannelKey(key_under(c), 7, 3, kMulticastChannel), 5, f));  // another key
      if (cipher_available(other_cipher.cipher))  // the same bytes under the other cipher
        CHECK_FALSE(open(ChannelKey(other_cipher, 7, 3, kMulticastChannel), 5, f));
    }
  }
}

TEST_CASE("frame auth: any altered byte, a cut or a counter of 0 fails", "[auth]") {
  for (const Cipher c : ciphers_here()) {
    CAPTURE(cipher_name(c));
    const ChannelKey k(key_under(c), 1, 1, kMulticastChannel);
    auto f = frame_of(100);
    seal(k, 2, 1, f);
    for (std::size_t i = 0; i < f.size(); ++i) {
      auto g = f;
      g[i] ^= std::byte{0x01};
      CHECK_FALSE(open(k, 2, g));
    }
    CHECK_FALSE(open(k, 2, std::span(f).first(f.size() - 1)));
    CHECK_FALSE(open(k, 2, std::span(f).first(kTrailerBytes - 1)));
    CHECK_FALSE(open(k, 2, std::span<const std::byte>{}));
    std::vector<std::byte> zero(kTrailerBytes);  // counter 0 and an all-zero tag
    CHECK_FALSE(open(k, 2, zero));
  }
}

TEST_CASE("frame auth: channel keys differ per cipher, group, view and channel, and are the same for every holder",
          "[auth]") {
  const GroupKey gk = key_under(Cipher::chacha20poly1305);
  GroupKey aes = gk;
  aes.cipher = Cipher::aes256gcm;
  const auto raw = [](const GroupKey& g, GroupId group, ViewId view, std::uint32_t ch) {
    return ChannelKey(g, group, view, ch).raw();
  };
  CHECK(raw(gk, 1, 1, 0) == raw(gk, 1, 1, 0));
  CHECK(raw(gk, 1, 1, 0) != raw(gk, 1, 2, 0));
  CHECK(raw(gk, 1, 1, 0) != raw(gk, 2, 1, 0));
  CHECK(raw(gk, 1, 1, 0) != raw(gk, 1, 1, 1));
  // Group, view and channel are not interchangeable (each has its own place in the input).
  CHECK(raw(gk, 1, 2, 0) != raw(gk, 2, 1, 0));
  CHECK(raw(gk, 1, 1, 2) != raw(gk, 1, 2, 1));
  if (cipher_available(Cipher::aes256gcm)) CHECK(raw(gk, 1, 1, 0) != raw(aes, 1, 1, 0));
}

TEST_CASE("frame auth: a key under a cipher this CPU lacks is refused at set-up, saying what to do", "[auth]") {
  GroupKey gk = generate_key();
  gk.cipher = Cipher::aes256gcm;
  if (cipher_available(Cipher::aes256gcm)) {
    CHECK_NOTHROW(ChannelKey(gk, 1, 1, 0));
  } else {
    CHECK_THROWS_WITH(ChannelKey(gk, 1, 1, 0), Catch::Contains("hmcast keygen --cipher chacha20poly1305"));
  }
  gk.cipher = static_cast<Cipher>(9);
  CHECK_THROWS_WITH(ChannelKey(gk, 1, 1, 0), Catch::Contains("unknown group key cipher"));
}

TEST_CASE("replay window: each counter once, a little out of order, never far behind", "[auth]") {
  ReplayWindow w;
  CHECK_FALSE(w.accept(0));
  CHECK(w.accept(1));
  CHECK_FALSE(w.accept(1));
  CHECK(w.accept(5));
  CHECK(w.accept(3));  // late but inside the window
  CHECK_FALSE(w.accept(3));
  CHECK(w.accept(2));
  CHECK(w.accept(4));
  CHECK_FALSE(w.accept(5));
  CHECK(w.highest() == 5);
  CHECK(w.accept(5 + ReplayWindow::kWidth));
  CHECK_FALSE(w.accept(5));  // kWidth behind the highest: refused
  CHECK(w.accept(6));        // kWidth - 1 behind and never seen: accepted, once
  CHECK_FALSE(w.accept(6));
}

TEST_CASE("replay window: the edge of the window, and a jump past it forgets everything behind", "[auth]") {
  ReplayWindow w;
  CHECK(w.accept(100));
  CHECK(w.accept(100 - (ReplayWindow::kWidth - 1)));  // the oldest counter still inside
  CHECK_FALSE(w.accept(100 - ReplayWindow::kWidth));   // one older: refused
  CHECK(w.accept(1000));
  CHECK_FALSE(w.accept(100));
  CHECK(w.accept(999));
  CHECK_FALSE(w.accept(999));
}

TEST_CASE("group key: hex round trip, key files readable by their owner only", "[auth]") {
  const GroupKey k = generate_key();
  CHECK(parse_key(key_to_hex(k)).bytes == k.bytes);
  CHECK(parse_key("  " + key_to_hex(k) + "\n").bytes == k.bytes);
  // The cipher's name may follow the digits; without one the key is AES-256-GCM's.
  CHECK(parse_key(key_to_hex(k)).cipher == Cipher::aes256gcm);
  CHECK(parse_key(key_to_hex(k) + " chacha20poly1305\n").cipher == Cipher::chacha20poly1305);
  CHECK(parse_key(key_to_hex(k) + "\taes256gcm").cipher == Cipher::aes256gcm);
  CHECK_THROWS_WITH(parse_key(key_to_hex(k) + " rot13"), Catch::Contains("unknown cipher 'rot13'"));
  CHECK_THROWS_WITH(parse_key(key_to_hex(k) + " aes256gcm extra"), Catch::Contains("more words"));
  CHECK_THROWS_AS(parse_key("abc"), Error);
  CHECK_THROWS_AS(parse_key(std::string(64, 'g')), Error);
  CHECK(generate_key() != generate_key());

  const std::string path = scratch_path("key");
  std::remove(path.c_str());
  write_key_file(path, k);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(read_key_file(path) == k);
  CHECK_THROWS_WITH(write_key_file(path, k), Catch::Contains("must not exist"));  // never overwritten
  ::chmod(path.c_str(), 0644);
  CHECK_THROWS_WITH(read_key_file(path), Catch::Contains("chmod 600"));
  std::remove(path.c_str());
  CHECK_THROWS_WITH(read_key_file(path), Catch::Contains("cannot read the key file"));
}
