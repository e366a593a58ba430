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

TEST_CASE("frame auth: a sealed frame opens under its view key, sender and channel only", "[auth]") {
  const GroupKey gk = generate_key();
  const ViewKey k = derive_view_key(gk, 7, 3);
  for (std::size_t n : {0U, 1U, 40U, 2048U, 65000U}) {
    auto f = frame_of(n);
    seal(k, 5, kMulticastChannel, 9, f);
    REQUIRE(f.size() == n + kTrailerBytes);
    const auto ok = open(k, 5, kMulticastChannel, f);
    REQUIRE(ok.has_value());
    CHECK(ok->frame_size == n);
    CHECK(ok->counter == 9);
    CHECK(std::equal(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n), frame_of(n).begin()));
    CHECK_FALSE(open(k, 6, kMulticastChannel, f));  // another sender
    CHECK_FALSE(open(k, 5, 2, f));                  // another channel
    CHECK_FALSE(open(derive_view_key(gk, 7, 4), 5, kMulticastChannel, f));     // the next view
    CHECK_FALSE(open(derive_view_key(gk, 8, 3), 5, kMulticastChannel, f));     // another group
    CHECK_FALSE(open(derive_view_key(generate_key(), 7, 3), 5, kMulticastChannel, f));  // another key
  }
}

TEST_CASE("frame auth: any altered byte, a cut or a counter of 0 fails", "[auth]") {
  const ViewKey k = derive_view_key(generate_key(), 1, 1);
  auto f = frame_of(100);
  seal(k, 2, kMulticastChannel, 1, f);
  for (std::size_t i = 0; i < f.size(); ++i) {
    auto g = f;
    g[i] ^= std::byte{0x01};
    CHECK_FALSE(open(k, 2, kMulticastChannel, g));
  }
  CHECK_FALSE(open(k, 2, kMulticastChannel, std::span(f).first(f.size() - 1)));
  CHECK_FALSE(open(k, 2, kMulticastChannel, std::span(f).first(kTrailerBytes - 1)));
  CHECK_FALSE(open(k, 2, kMulticastChannel, std::span<const std::byte>{}));
  std::vector<std::byte> zero(kTrailerBytes);  // counter 0 and an all-zero tag
  CHECK_FALSE(open(k, 2, kMulticastChannel, zero));
}

TEST_CASE("frame auth: view keys differ per group and view, and are the same for every holder", "[auth]") {
  const GroupKey gk = generate_key();
  CHECK(derive_view_key(gk, 1, 1).bytes == derive_view_key(gk, 1, 1).bytes);
  CHECK(derive_view_key(gk, 1, 1).bytes != derive_view_key(gk, 1, 2).bytes);
  CHECK(derive_view_key(gk, 1, 1).bytes != derive_view_key(gk, 2, 1).bytes);
  // Group and view are not interchangeable (each has its own place in the input).
  CHECK(derive_view_key(gk, 1, 2).bytes != derive_view_key(gk, 2, 1).bytes);
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
  CHECK(parse_key(key_to_hex(k)) == k);
  CHECK(parse_key("  " + key_to_hex(k) + "\n") == k);
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
