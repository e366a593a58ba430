// Joining under the group key (auth/handshake.hpp): the exchange itself, and the
// manager and a member on real sockets, with the same key, another key, or none.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#include "auth/handshake.hpp"
#include "eventually.hpp"
#include "hmcast/error.hpp"
#include "membership/control_wire.hpp"
#include "transport/socket/manager_client.hpp"
#include "transport/socket/manager_server.hpp"

using namespace hmcast;
using namespace hmcast::auth;

TEST_CASE("handshake: two holders of the key prove it to each other", "[auth]") {
  const auto key = generate_key();
  const JoinInitiator member(key);
  JoinResponder manager(key);
  const auto challenge = manager.on_frame(member.hello());
  REQUIRE(challenge);
  CHECK_FALSE(manager.done());
  const auto proof = member.answer(*challenge);
  REQUIRE(proof);
  CHECK_FALSE(manager.on_frame(*proof));
  CHECK(manager.done());
  CHECK_FALSE(manager.failed());
}

TEST_CASE("handshake: another key, a replayed proof, or no exchange at all is refused", "[auth]") {
  const auto key = generate_key();
  const auto other = generate_key();
  SECTION("the manager holds another key: the member sends no proof") {
    const JoinInitiator member(key);
    JoinResponder manager(other);
    const auto challenge = manager.on_frame(member.hello());
    REQUIRE(challenge);
    CHECK_FALSE(member.answer(*challenge));
  }
  SECTION("the member holds another key: its proof fails") {
    JoinResponder manager(key);
    const auto challenge = decode_challenge(*manager.on_frame(encode_hello(fresh_nonce())));
    REQUIRE(challenge);
    (void)manager.on_frame(encode_proof(make_proof(other, Role::member, fresh_nonce(), challenge->manager_nonce)));
    CHECK(manager.failed());
  }
  SECTION("a stranger replays a member's recorded exchange on a new connection") {
    const JoinInitiator member(key);
    JoinResponder first(key);
    const auto hello = member.hello();
    const auto proof = member.answer(*first.on_frame(hello));
    REQUIRE(proof);
    JoinResponder second(key);  // a new connection: a new manager nonce
    REQUIRE(second.on_frame(hello));
    (void)second.on_frame(*proof);
    CHECK(second.failed());
  }
  SECTION("a manager's own challenge sent back as the proof") {
    JoinResponder manager(key);
    const auto challenge = manager.on_frame(encode_hello(fresh_nonce()));
    (void)manager.on_frame(*challenge);
    CHECK(manager.failed());
  }
  SECTION("a control message first (a member without the key)") {
    JoinResponder manager(key);
    CHECK_FALSE(manager.on_frame(membership::encode(membership::Join{"g", 2})));
    CHECK(manager.failed());
  }
  SECTION("frames cut short or with a byte more") {
    auto hello = encode_hello(fresh_nonce());
    CHECK(decode_hello(hello));
    hello.push_back(std::byte{0});
    CHECK_FALSE(decode_hello(hello));
    hello.resize(hello.size() - 2);
    CHECK_FALSE(decode_hello(hello));
    CHECK_FALSE(decode_proof(encode_hello(fresh_nonce())));  // the wrong type
  }
}

namespace {

auto soon() { return std::chrono::steady_clock::now() + std::chrono::seconds(10); }

/// A member of a group of one joining the manager on `port`.
membership::Welcome join_one(std::uint16_t port, const GroupKey* key, const std::string& group) {
  socket::ManagerClient client("127.0.0.1", port, soon(), key);
  return client.join(group, 1, soon());
}

}  // namespace

TEST_CASE("handshake: a manager with a key admits members with it, and only them", "[auth]") {
  const auto key = generate_key();
  socket::ManagerServer manager("127.0.0.1", 0, socket::fresh_coordinator_config(), {}, {}, key);
  CHECK(join_one(manager.port(), &key, "keyed").member != 0);
  CHECK(manager.stats().refused_without_key == 0);

  CHECK_THROWS_WITH(join_one(manager.port(), nullptr, "keyless"), Catch::Contains("hold the group key"));
  const auto other = generate_key();
  CHECK_THROWS_WITH(join_one(manager.port(), &other, "other"), Catch::Contains("could not prove"));
  // The same key bytes under another cipher: its frames would never open, so it is
  // refused here, and told which cipher it holds.
  auto other_cipher = key;
  other_cipher.cipher = key.cipher == Cipher::aes256gcm ? Cipher::chacha20poly1305 : Cipher::aes256gcm;
  CHECK_THROWS_WITH(join_one(manager.port(), &other_cipher, "other cipher"),
                    Catch::Contains("could not prove") && Catch::Contains(cipher_name(other_cipher.cipher)));
  // The manager sees the last of them hang up a moment after the member gave up.
  CHECK(testing::eventually([&] { return manager.stats().refused_without_key == 3; }));
}

TEST_CASE("handshake: a member with a key and a manager without one tell the member why", "[auth]") {
  const auto key = generate_key();
  socket::ManagerServer manager("127.0.0.1", 0, socket::fresh_coordinator_config());
  CHECK_THROWS_WITH(join_one(manager.port(), &key, "g"), Catch::Contains("it has no group key"));
  CHECK(join_one(manager.port(), nullptr, "g").member != 0);  // keyless members still get in
}

TEST_CASE("handshake: strangers holding connections open silently cannot keep a member out", "[auth]") {
  const auto key = generate_key();
  socket::ManagerServer manager("127.0.0.1", 0, socket::fresh_coordinator_config(), {}, {}, key);
  // Far more silent connections than the manager runs exchanges at once.
  constexpr int kStrangers = 200;
  std::vector<int> fds;
  for (int i = 0; i < kStrangers; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(manager.port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0);
    fds.push_back(fd);
  }
  CHECK(testing::eventually([&] { return manager.stats().connections == kStrangers; }));
  // All but the newest 64 were closed to make room, long before their 5 s ran out.
  CHECK(testing::eventually([&] { return manager.stats().exchanges_evicted == kStrangers - 64; }));
  CHECK(testing::eventually([&] { return manager.stats().refused_without_key == kStrangers - 64; }));
  // A member arriving now still joins (it pushes the oldest stranger out).
  CHECK(join_one(manager.port(), &key, "after the flood").member != 0);
  CHECK(manager.stats().exchanges_evicted == kStrangers - 64 + 1);
  for (const int fd : fds) ::close(fd);
}
