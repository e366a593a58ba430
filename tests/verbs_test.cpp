// The verbs transport's parts that need no RDMA device: UD buffer arithmetic, path
// MTUs, option checks, what asynchronous events mean, and the errors a Node gives
// where there is no device or the multicast group is full. The transport itself runs
// on Soft-RoCE in a VM: tests/rxe/run.sh (which also runs the [.rxe] cases below).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/wire.hpp"
#include "hmcast/hmcast.hpp"
#include "transport/verbs/ud_layout.hpp"
#ifdef HMCAST_HAVE_VERBS
#include "transport/verbs/async_events.hpp"
#include "transport/verbs/device.hpp"
#include "transport/verbs/verbs_transport.hpp"
#endif

using namespace hmcast;

TEST_CASE("a UD receive holds the 40-byte GRH area before the payload", "[verbs]") {
  CHECK(verbs::ud_receive_bytes(4096) == 4136);
  CHECK(verbs::ud_receive_bytes(1024) == 1064);
  // byte_len of a completion counts the GRH area.
  CHECK(verbs::ud_payload_bytes(40 + 100, 4096) == std::optional<std::size_t>(100));
  CHECK(verbs::ud_payload_bytes(40, 4096) == std::optional<std::size_t>(0));
  CHECK(verbs::ud_payload_bytes(40 + 4096, 4096) == std::optional<std::size_t>(4096));
  CHECK_FALSE(verbs::ud_payload_bytes(39, 4096).has_value());        // shorter than the GRH area
  CHECK_FALSE(verbs::ud_payload_bytes(40 + 4097, 4096).has_value());  // more than the buffer holds
}

TEST_CASE("path MTUs: the enum's bytes and what a netdev MTU allows on RoCE", "[verbs]") {
  CHECK(verbs::mtu_enum_bytes(1) == 256);
  CHECK(verbs::mtu_enum_bytes(3) == 1024);
  CHECK(verbs::mtu_enum_bytes(5) == 4096);
  CHECK(verbs::mtu_enum_bytes(0) == 0);
  CHECK(verbs::mtu_enum_bytes(6) == 0);
  CHECK(verbs::roce_path_mtu(1500) == 1024);
  CHECK(verbs::roce_path_mtu(9000) == 4096);
  CHECK(verbs::roce_path_mtu(4200) == 4096);
  CHECK(verbs::roce_path_mtu(4100) == 2048);
  CHECK(verbs::roce_path_mtu(300) == 0);
}

TEST_CASE("reliable-link frames move in chunks", "[verbs]") {
  CHECK(verbs::chunks_for(0, 65536) == 1);
  CHECK(verbs::chunks_for(1, 65536) == 1);
  CHECK(verbs::chunks_for(65536, 65536) == 1);
  CHECK(verbs::chunks_for(65537, 65536) == 2);
  CHECK(verbs::chunks_for(3 * 65536 + 5, 65536) == 4);
}

TEST_CASE("a verbs Node where the device does not exist fails at once, naming the fixes", "[verbs]") {
  Config cfg;
  cfg.transport = TransportKind::verbs;
  cfg.verbs.device = "hmcast-no-such-device";
  try {
    Node node(cfg);
    FAIL("a Node was made on a device that does not exist");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::transport_failed);
    const std::string what = e.what();
    INFO(what);
#ifdef HMCAST_HAVE_VERBS
    CHECK(what.find("hmcast-no-such-device") != std::string::npos);
    CHECK(what.find("rdma-core") != std::string::npos);                 // install and load a driver
    CHECK(what.find("rdma link add rxe0 type rxe") != std::string::npos);  // or Soft-RoCE
#endif
    CHECK(what.find("socket transport") != std::string::npos);  // or use the socket transport
  }
}

#ifdef HMCAST_HAVE_VERBS
TEST_CASE("verbs options are checked before any device is touched", "[verbs]") {
  const auto rejects = [](VerbsOptions o, const std::string& field) {
    try {
      verbs::check_options(o);
      return false;
    } catch (const Error& e) {
      return e.code() == ErrorCode::invalid_config && std::string(e.what()).find(field) != std::string::npos;
    }
  };
  verbs::check_options(VerbsOptions{});  // the defaults are valid
  VerbsOptions o;
  o.mtu = 8192;
  CHECK(rejects(o, "mtu"));
  o = {};
  o.receive_ring = 0;
  CHECK(rejects(o, "receive_ring"));
  o = {};
  o.send_depth = 0;
  CHECK(rejects(o, "send_depth"));
  o = {};
  o.link_receive_depth = 2;
  CHECK(rejects(o, "link_receive_depth"));
  o = {};
  o.link_chunk = 100;
  CHECK(rejects(o, "link_chunk"));
  o = {};
  o.busy_poll = std::chrono::seconds(5);
  CHECK(rejects(o, "busy_poll"));
  o = {};
  o.gid_index = -2;
  CHECK(rejects(o, "gid_index"));
  // A bad option is reported as such even on a host without devices.
  Config cfg;
  cfg.transport = TransportKind::verbs;
  cfg.verbs.receive_ring = 0;
  CHECK_THROWS_AS(Node(cfg), Error);
}

TEST_CASE("the no-device message names every way out", "[verbs]") {
  const auto m = verbs::no_device_message("no RDMA device found on this host");
  CHECK(m.find("no RDMA device found on this host") != std::string::npos);
  CHECK(m.find("ibverbs-providers") != std::string::npos);
  CHECK(m.find("modprobe rdma_rxe") != std::string::npos);
  CHECK(m.find("TransportKind::socket") != std::string::npos);
}
#endif

#ifdef HMCAST_HAVE_VERBS
TEST_CASE("a full multicast group: the message names the device, the limit and the fixes", "[verbs]") {
  const auto full = verbs::multicast_join_message("rxe0", 56, "239.1.2.3",
                                                  "RDMA_CM_EVENT_MULTICAST_ERROR (status -1, Cannot allocate memory)",
                                                  verbs::attach_refused_by_limit(ENOMEM));
  INFO(full);
  CHECK(full.find("rxe0 refused to attach one more queue pair") != std::string::npos);
  CHECK(full.find("at most 56 (max_mcast_qp_attach)") != std::string::npos);
  CHECK(full.find("239.1.2.3") != std::string::npos);
  CHECK(full.find("Cannot allocate memory") != std::string::npos);  // what the device said stays in
  CHECK(full.find("at most 56 member processes of a group per device") != std::string::npos);
  CHECK(full.find("--transport socket") != std::string::npos);
  CHECK(full.find("subnet manager") == std::string::npos);  // the cause is known: no other leads
  // Another join failure still names the limit, among the other causes.
  const auto other = verbs::multicast_join_message("mlx5_0", 240, "239.1.2.3", "RDMA_CM_EVENT_MULTICAST_ERROR "
                                                   "(status -110, Connection timed out)", verbs::attach_refused_by_limit(ETIMEDOUT));
  INFO(other);
  CHECK(other.find("limit of 240 queue pairs per group on mlx5_0") != std::string::npos);
  CHECK(other.find("at most 240 member processes") != std::string::npos);
  CHECK(other.find("subnet manager") != std::string::npos);
  CHECK(other.find("224.0.0.0/4") != std::string::npos);
  CHECK(verbs::attach_refused_by_limit(ENOSPC));
  CHECK_FALSE(verbs::attach_refused_by_limit(EINVAL));
}

TEST_CASE("a device without multicast is refused at construction, naming the fixes", "[verbs]") {
  const auto m = verbs::no_multicast_message("siw0");
  CHECK(m.find("siw0") != std::string::npos);
  CHECK(m.find("max_mcast_qp_attach is 0") != std::string::npos);
  CHECK(m.find("rdma link add rxe0 type rxe") != std::string::npos);
  CHECK(m.find("TransportKind::socket") != std::string::npos);
}
#endif

#ifdef HMCAST_HAVE_VERBS
TEST_CASE("asynchronous events: each type names the element it is about", "[verbs]") {
  using verbs::AsyncElement;
  CHECK(verbs::async_element(IBV_EVENT_QP_FATAL) == AsyncElement::qp);
  CHECK(verbs::async_element(IBV_EVENT_PATH_MIG_ERR) == AsyncElement::qp);
  CHECK(verbs::async_element(IBV_EVENT_COMM_EST) == AsyncElement::qp);
  CHECK(verbs::async_element(IBV_EVENT_QP_LAST_WQE_REACHED) == AsyncElement::qp);
  CHECK(verbs::async_element(IBV_EVENT_CQ_ERR) == AsyncElement::cq);
  CHECK(verbs::async_element(IBV_EVENT_SRQ_LIMIT_REACHED) == AsyncElement::srq);
  CHECK(verbs::async_element(IBV_EVENT_WQ_FATAL) == AsyncElement::wq);
  CHECK(verbs::async_element(IBV_EVENT_PORT_ERR) == AsyncElement::port);
  CHECK(verbs::async_element(IBV_EVENT_GID_CHANGE) == AsyncElement::port);
  CHECK(verbs::async_element(IBV_EVENT_DEVICE_FATAL) == AsyncElement::device);
}

TEST_CASE("asynchronous events: what kills a QP breaks its link or ends the endpoint", "[verbs]") {
  using verbs::AsyncAction;
  using verbs::AsyncSubject;
  for (const auto qp_dead : {IBV_EVENT_QP_FATAL, IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR, IBV_EVENT_PATH_MIG_ERR}) {
    INFO(verbs::async_event_name(qp_dead));
    CHECK(verbs::async_action(qp_dead, AsyncSubject::link_qp) == AsyncAction::break_link);  // membership removes the peer
    CHECK(verbs::async_action(qp_dead, AsyncSubject::datagram_qp) == AsyncAction::fail);    // the multicast path is gone
    CHECK(verbs::async_action(qp_dead, AsyncSubject::unrelated) == AsyncAction::count);     // another endpoint's QP
  }
  CHECK(verbs::async_action(IBV_EVENT_PORT_ERR, AsyncSubject::our_port) == AsyncAction::fail);
  CHECK(verbs::async_action(IBV_EVENT_PORT_ERR, AsyncSubject::unrelated) == AsyncAction::count);  // another port
  CHECK(verbs::async_action(IBV_EVENT_DEVICE_FATAL, AsyncSubject::device) == AsyncAction::fail);
  CHECK(verbs::async_action(IBV_EVENT_CQ_ERR, AsyncSubject::our_cq) == AsyncAction::fail);
  CHECK(verbs::async_action(IBV_EVENT_CQ_ERR, AsyncSubject::unrelated) == AsyncAction::count);
}

TEST_CASE("asynchronous events: informational ones are only counted", "[verbs]") {
  using verbs::AsyncAction;
  using verbs::AsyncSubject;
  for (const auto info : {IBV_EVENT_PORT_ACTIVE, IBV_EVENT_LID_CHANGE, IBV_EVENT_PKEY_CHANGE, IBV_EVENT_SM_CHANGE,
                          IBV_EVENT_CLIENT_REREGISTER, IBV_EVENT_GID_CHANGE})
    CHECK(verbs::async_action(info, AsyncSubject::our_port) == AsyncAction::count);
  for (const auto info : {IBV_EVENT_COMM_EST, IBV_EVENT_SQ_DRAINED, IBV_EVENT_PATH_MIG, IBV_EVENT_QP_LAST_WQE_REACHED}) {
    CHECK(verbs::async_action(info, AsyncSubject::link_qp) == AsyncAction::count);
    CHECK(verbs::async_action(info, AsyncSubject::datagram_qp) == AsyncAction::count);
  }
  // hmcast makes no shared receive queues or work queues: never ours.
  CHECK(verbs::async_action(IBV_EVENT_SRQ_LIMIT_REACHED, AsyncSubject::unrelated) == AsyncAction::count);
  CHECK(verbs::async_action(IBV_EVENT_SRQ_ERR, AsyncSubject::unrelated) == AsyncAction::count);
  CHECK(verbs::async_action(IBV_EVENT_WQ_FATAL, AsyncSubject::unrelated) == AsyncAction::count);
  // A type newer than the code is counted, not fatal (31: the largest value the enum can hold).
  CHECK(verbs::async_action(static_cast<ibv_event_type>(31), AsyncSubject::unrelated) == AsyncAction::count);
  CHECK(verbs::async_event_name(static_cast<ibv_event_type>(31)) == "ibv async event 31");
}

TEST_CASE("asynchronous events: a fatal one's message says what happened and what to do", "[verbs]") {
  using verbs::AsyncSubject;
  const auto port = verbs::async_failure_message(IBV_EVENT_PORT_ERR, AsyncSubject::our_port, "rxe0", 1, "239.1.2.3");
  CHECK(port.find("IBV_EVENT_PORT_ERR on rxe0 port 1") != std::string::npos);
  CHECK(port.find("PORT_ACTIVE") != std::string::npos);  // how to tell it is back
  CHECK(port.find("recreate the Node") != std::string::npos);
  CHECK(port.find("--transport socket") != std::string::npos);
  const auto dev = verbs::async_failure_message(IBV_EVENT_DEVICE_FATAL, AsyncSubject::device, "mlx5_0", 1, "239.1.2.3");
  CHECK(dev.find("IBV_EVENT_DEVICE_FATAL on mlx5_0") != std::string::npos);
  CHECK(dev.find("dmesg") != std::string::npos);
  const auto ud = verbs::async_failure_message(IBV_EVENT_QP_FATAL, AsyncSubject::datagram_qp, "rxe0", 1, "239.1.2.3");
  CHECK(ud.find("239.1.2.3") != std::string::npos);
  CHECK(ud.find("multicast path is gone") != std::string::npos);
  const auto cq = verbs::async_failure_message(IBV_EVENT_CQ_ERR, AsyncSubject::our_cq, "rxe0", 1, "239.1.2.3");
  CHECK(cq.find("hmcast bug") != std::string::npos);
}
#endif

#ifdef HMCAST_HAVE_VERBS
// On a real device only: tests/rxe/suites.sh runs these inside the VM, after the
// soaks (the second takes the netdev down and up again). HMCAST_RXE_DEVICE,
// HMCAST_RXE_ADDRESS and HMCAST_RXE_NETDEV say where.
namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

verbs::EndpointConfig rxe_endpoint(const std::string& group) {
  verbs::EndpointConfig cfg;
  cfg.options.device = env_or("HMCAST_RXE_DEVICE", "rxe0");
  cfg.options.interface_address = env_or("HMCAST_RXE_ADDRESS", "10.77.0.1");
  cfg.options.mtu = 1024;
  cfg.options.receive_ring = 8;  // many endpoints at once: little pinned memory each
  cfg.options.send_depth = 4;
  cfg.group_address = group;
  return cfg;
}

}  // namespace

TEST_CASE("rxe: a multicast group takes max_mcast_qp_attach endpoints, and one more fails naming the limit", "[.rxe]") {
  std::vector<std::unique_ptr<verbs::Endpoint>> members;
  members.push_back(std::make_unique<verbs::Endpoint>(1, rxe_endpoint("239.77.0.1")));
  const std::uint32_t limit = members.front()->stats().max_mcast_qp_attach;
  REQUIRE(limit > 0);
  REQUIRE(limit <= 1024);  // one process holds them all: keep it affordable
  while (members.size() < limit)
    members.push_back(std::make_unique<verbs::Endpoint>(static_cast<MemberId>(members.size() + 1),
                                                        rxe_endpoint("239.77.0.1")));
  try {
    verbs::Endpoint extra(limit + 1, rxe_endpoint("239.77.0.1"));
    FAIL("the device attached QP " << limit + 1 << " to a group that holds " << limit);
  } catch (const verbs::TransportError& e) {
    const std::string what = e.what();
    WARN("endpoint " << limit + 1 << " on one group: " << what);  // shown in build/rxe/device_events.out
    CHECK(what.find("refused to attach one more queue pair") != std::string::npos);
    CHECK(what.find("at most " + std::to_string(limit) + " (max_mcast_qp_attach)") != std::string::npos);
    CHECK(what.find("--transport socket") != std::string::npos);
  }
  // Another group on the same device still has room.
  CHECK_NOTHROW(verbs::Endpoint(limit + 2, rxe_endpoint("239.77.0.2")));
}

TEST_CASE("rxe: a Block payload is RDMA WRITTEN into the advertised buffer, freed only once the writer answered the revoke",
          "[.rxe]") {
  auto cfg = rxe_endpoint("239.77.0.4");
  verbs::Endpoint writer(1, cfg);
  verbs::Endpoint receiver(2, cfg);
  writer.add_peer(2, receiver.interface_address(), receiver.port());
  receiver.add_peer(1, writer.interface_address(), writer.port());
  std::vector<verbs::Inbound> at_writer, at_receiver;
  // One thread drives both endpoints (connections, completions, control frames).
  const auto pump_until = [&](const auto& done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done() && std::chrono::steady_clock::now() < until) {
      if (auto in = writer.wait(std::chrono::steady_clock::now() + std::chrono::milliseconds(2)))
        at_writer.push_back(std::move(*in));
      if (auto in = receiver.wait(std::chrono::steady_clock::now() + std::chrono::milliseconds(2)))
        at_receiver.push_back(std::move(*in));
    }
    return done();
  };
  const auto header = [](MemberId src) {
    wire::Header h;
    h.group = 5;
    h.view = 1;
    h.src = src;
    return h;
  };

  // Final buffers come registered from the endpoint's pool; other memory is not offered.
  receiver.offer_region(1, 1, std::make_shared<std::vector<std::byte>>(std::size_t{256} << 10));
  CHECK(receiver.stats().regions_unregistered == 1);
  auto buffer = receiver.allocate_large(std::size_t{256} << 10);
  const std::byte* where = buffer->data();
  receiver.offer_region(1, 1, buffer);
  receiver.offer_region(1, 2, buffer);  // the same memory for two messages: one registration
  CHECK(receiver.stats().regions_registered == 1);
  CHECK(receiver.stats().region_cache_hits == 0);
  // A descriptor names the connection the writer sends on: with none yet, a Ready
  // goes alone and the blocks would come by the copy path.
  REQUIRE(receiver.unicast(1, wire::encode(header(2), wire::Ready{1, 1, 1})));
  REQUIRE(pump_until([&] { return at_writer.size() == 1; }));
  CHECK(receiver.stats().regions_advertised == 0);
  // Once the writer's link to us is up, the next Ready is preceded by the descriptor.
  REQUIRE(writer.unicast(2, wire::encode(header(1), wire::Ready{9, 9, 1})));
  REQUIRE(pump_until([&] { return at_receiver.size() == 1; }));
  at_receiver.clear();
  REQUIRE(receiver.unicast(1, wire::encode(header(2), wire::Ready{1, 1, 1})));
  REQUIRE(pump_until([&] { return at_writer.size() == 2; }));
  CHECK(wire::peek_type(at_writer.back().bytes) == wire::Type::ready);  // the descriptor never shows
  CHECK(receiver.stats().regions_advertised == 1);

  std::vector<std::byte> payload(std::size_t{64} << 10);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>(i * 7 + 3);
  const auto block = [&](Seq seq) {
    return wire::encode(header(1), wire::Block{1, seq, 0, std::uint64_t{64} << 10,
                                               static_cast<std::uint32_t>(payload.size()), payload});
  };
  REQUIRE(writer.unicast(2, block(1)));
  REQUIRE(pump_until([&] { return !at_receiver.empty(); }));
  CHECK(at_receiver.front().placed);
  CHECK(at_receiver.front().bytes.size() == wire::kBlockHeadSize);  // the head alone
  CHECK(std::equal(payload.begin(), payload.end(), buffer->begin() + (std::ptrdiff_t{64} << 10)));
  CHECK(writer.stats().bytes_written == payload.size());
  CHECK(receiver.stats().bytes_placed == payload.size());
  // The WRITE and its head went to the queue pair in one chain (one post, one
  // completion asked for), not one post each.
  CHECK(writer.stats().rc_chains_posted < writer.stats().rc_messages_sent);

  // The writer drops its link and connects again (here: its address book changed and
  // changed back). Descriptors named the old connection: the writer forgets them, and
  // the receiver counts that connection out of every region when it dies.
  writer.add_peer(2, receiver.interface_address(), static_cast<std::uint16_t>(receiver.port() + 1));
  writer.add_peer(2, receiver.interface_address(), receiver.port());
  std::fill(buffer->begin(), buffer->end(), std::byte{0});
  REQUIRE(writer.unicast(2, block(2)));  // (1, 2) was never advertised: the copy path
  REQUIRE(pump_until([&] { return at_receiver.size() == 2; }));
  CHECK_FALSE(at_receiver.back().placed);
  CHECK(at_receiver.back().bytes.size() == wire::kBlockHeadSize + payload.size());
  CHECK(std::all_of(buffer->begin(), buffer->end(), [](std::byte b) { return b == std::byte{0}; }));
  // A Ready now advertises (1, 2) for the new connection, and its block is placed.
  REQUIRE(receiver.unicast(1, wire::encode(header(2), wire::Ready{1, 2, 1})));
  REQUIRE(pump_until([&] { return at_writer.size() == 3; }));
  CHECK(receiver.stats().regions_advertised == 2);
  REQUIRE(writer.unicast(2, block(2)));
  REQUIRE(pump_until([&] { return at_receiver.size() == 3; }));
  CHECK(at_receiver.back().placed);
  CHECK(std::equal(payload.begin(), payload.end(), buffer->begin() + (std::ptrdiff_t{64} << 10)));

  // The node drops the buffer of (1, 1): its only holder was the dead connection, so
  // it goes at once. (1, 2) stays, registered, until the writer confirmed on its
  // sending queue pair that it stopped.
  std::weak_ptr<std::vector<std::byte>> weak = buffer;
  buffer.reset();
  receiver.retire_region(1, 1);
  CHECK(receiver.stats().regions_held == 1);
  CHECK(receiver.stats().regions_freed == 1);
  receiver.retire_region(1, 2);
  CHECK(receiver.stats().regions_held == 1);
  CHECK_FALSE(weak.expired());
  REQUIRE(pump_until([&] { return receiver.stats().regions_held == 0; }));
  CHECK(receiver.stats().regions_freed == 2);
  CHECK(weak.expired());
  // Back in the pool, still registered: the next large message gets it at no cost.
  CHECK(receiver.stats().pool_idle_bytes == std::size_t{256} << 10);
  auto again = receiver.allocate_large(std::size_t{200} << 10);
  CHECK(again->data() == where);
  CHECK(receiver.stats().region_cache_hits == 1);
  CHECK(receiver.stats().regions_registered == 1);

  // Revoked: the next block comes whole, by the copy path.
  REQUIRE(writer.unicast(2, block(2)));
  REQUIRE(pump_until([&] { return at_receiver.size() == 4; }));
  CHECK_FALSE(at_receiver.back().placed);
  CHECK(at_receiver.back().bytes.size() == wire::kBlockHeadSize + payload.size());
  CHECK(writer.stats().bytes_written == 2 * payload.size());
  CHECK(writer.stats().regions_stale == 0);
  CHECK(receiver.stats().placed_malformed == 0);
  CHECK(receiver.stats().control_malformed == 0);
}

TEST_CASE("rxe: the port going down ends every endpoint on the device with IBV_EVENT_PORT_ERR", "[.rxe]") {
  const std::string netdev = env_or("HMCAST_RXE_NETDEV", "d0");
  // Two endpoints of one process share rdma_cm's device context and so its async fd:
  // both must hear the event, the one asleep in epoll (interrupt mode) too.
  auto cfg_b = rxe_endpoint("239.77.0.3");
  cfg_b.options.completion = CompletionMode::interrupt;
  verbs::Endpoint a(1, rxe_endpoint("239.77.0.3"));
  verbs::Endpoint b(2, cfg_b);
  const auto wait_for_failure = [](verbs::Endpoint& e) -> std::string {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < until) {
      try {
        (void)e.wait(std::chrono::steady_clock::now() + std::chrono::milliseconds(200));
      } catch (const verbs::TransportError& err) {
        return err.what();
      }
    }
    return "";
  };
  std::string b_failure;
  std::thread waiter([&] { b_failure = wait_for_failure(b); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // b is asleep by now
  REQUIRE(std::system(("ip link set " + netdev + " down").c_str()) == 0);
  const std::string a_failure = wait_for_failure(a);
  waiter.join();
  // Back as it was for whatever runs next (the route left with the link).
  CHECK(std::system(("ip link set " + netdev + " up && ip route replace 224.0.0.0/4 dev " + netdev).c_str()) == 0);
  WARN("hybrid endpoint: " << a_failure << " (" << a.stats().async_events << " async events)");
  WARN("interrupt endpoint: " << b_failure << " (" << b.stats().async_events << " async events)");
  CHECK(a_failure.find("IBV_EVENT_PORT_ERR on " + env_or("HMCAST_RXE_DEVICE", "rxe0") + " port 1") !=
        std::string::npos);
  CHECK(b_failure.find("IBV_EVENT_PORT_ERR") != std::string::npos);
  CHECK(a.stats().async_events >= 1);
  CHECK(b.stats().async_events >= 1);
}
#endif
