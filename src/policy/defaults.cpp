#include "policy/defaults.hpp"

#include <algorithm>

#include "core/wire.hpp"
#include "hmcast/error.hpp"
#include "policy/policy.hpp"
#include "policy/profile.hpp"
#include "small/fragmenter.hpp"

namespace hmcast::policy {

namespace {
/// Shared memory: the datagrams of a message of several (ProtocolConfig::fragment_mtu).
constexpr std::uint32_t kShmCutMtu = 65'000;
}  // namespace

ProtocolConfig transport_defaults(std::string_view transport, std::uint32_t mtu) {
  ProtocolConfig p;
  p.mtu = mtu;
  if (transport == "sim") {
    // Scenarios switch the multicast probe on where they test it (it costs every
    // member a frame per other member and view); when on, virtual time is cheap.
    p.multicast_probe_resend_ns = 1'000'000;
    p.multicast_probe_deadline_ns = 0;
    return p;
  }
  if (transport != "inproc" && transport != "socket" && transport != "verbs" && transport != "shm")
    throw ProfileError("no protocol defaults for transport '" + std::string(transport) +
                       "' (inproc, socket, verbs, shm or sim)");
  // Threads and processes are scheduled by the OS: a hand-off takes tens of
  // microseconds, so timers start cautious.
  p.initial_hop_rtt_ns = 200'000;
  p.min_timeout_ns = 2'000'000;
  p.ack_interval_ns = 20'000;
  // A stream of small messages shares datagrams (batch_delay_ns) and needs room in
  // flight for whole batches: 64 messages capped a batch of 64-byte messages at a
  // fraction of a datagram (docs/benchmarks.md, "Streaming"); window_bytes still
  // bounds the memory.
  p.batch_delay_ns = 20'000;
  p.window_messages = 256;
  // Every receiver's socket must hold what is in flight while it is descheduled: with
  // 16 MiB a stream of 64 KiB messages overran the 4 MiB receive buffers (696 repairs
  // for 800 messages to 7 members; 2 MiB: none, and 1.5x the rate; 1 and 4 MiB were
  // slower: docs/benchmarks.md, "Streaming").
  p.window_bytes = 2U << 20;
  // Where members share few cores, a receiver is descheduled for milliseconds at a
  // time, and a stream moves at most a window per such pause: bytes, not a count of
  // messages, are what bound the receivers' buffers and the sender's memory, so the
  // count is high enough for small messages to fill the byte window. A batch holds
  // at most a quarter of the count (GroupEngine::batch_items). Loopback sockets (64
  // KiB datagrams) and shm, where a smaller byte window than the 2 MiB above also
  // streamed 2 KiB and 64 KiB messages faster once the count no longer held small
  // ones back; not verbs, whose 512 posted receives must hold a window of datagrams
  // that are not batched (docs/benchmarks.md, "Windows of bytes, open from the start").
  if (transport == "socket" && mtu >= kLargeDatagram) {
    p.window_messages = 4096;
    p.window_bytes = 1U << 20;
  } else if (transport == "shm") {
    p.window_messages = 4096;
    p.window_bytes = 512U << 10;
  }
  // The window opens whole: it never shrinks (SmallPath grows it by one per
  // completion up to window_messages), so a slow start held back only a group's first
  // thousand or so messages, while a burst after any pause later goes at the full
  // window anyway. window_bytes bounds every burst, the first included.
  p.initial_window_messages = p.window_messages;
  p.stable_announce_ns = 1'000'000;
  // A 64 KiB message in one shared-memory datagram is copied once less; messages of
  // several datagrams keep 65,000-byte records, with which the log goes back to its
  // start where they were measured (docs/benchmarks.md, "One 64 KiB message in one
  // shm datagram").
  if (transport == "shm" && mtu > kShmCutMtu) p.fragment_mtu = kShmCutMtu;
  // Its blocks land by RDMA WRITE in the region a credit advertises; a block sent
  // before that credit would take the copy path.
  if (transport == "verbs") p.large_unasked_first_block = false;
  if (transport != "inproc") {
    // Processes on shared cores can be descheduled for many milliseconds (and
    // Soft-RoCE runs in the kernel's softirqs): time alone must not remove a live
    // member. A dead one is found at once anyway, by its control connection to
    // the manager and its broken links.
    p.repair_budget = 40;
  }
  return p;
}

ProtocolConfig sim_defaults(TimeNs latency_ns, ProtocolConfig base) {
  base.initial_hop_rtt_ns = std::max<TimeNs>(2 * latency_ns, 1000);
  base.min_timeout_ns = 5 * base.initial_hop_rtt_ns;
  return base;
}

std::uint32_t transport_mtu(const Config& config) {
  std::uint32_t mtu = ProtocolConfig{}.mtu;
  if (config.transport == TransportKind::socket) mtu = config.socket.datagram_size();
  else if (config.transport == TransportKind::shm) mtu = config.shm.mtu;
  else if (config.transport == TransportKind::verbs) mtu = config.verbs.mtu;
  // Tags (Config::key) ride inside the transport's datagrams, on the transports that seal.
  if (config.key && (config.transport == TransportKind::socket || config.transport == TransportKind::inproc))
    mtu -= kKeyTrailerBytes;
  return mtu;
}

ProtocolConfig protocol_for(const Config& config) {
  const char* transport = "inproc";
  if (config.transport == TransportKind::socket) transport = "socket";
  else if (config.transport == TransportKind::shm) transport = "shm";
  else if (config.transport == TransportKind::verbs) transport = "verbs";
  const std::uint32_t mtu = transport_mtu(config);
  Profile profile;
  try {
    profile = config.profile_file.empty() ? builtin_profile(transport, mtu) : load_profile(config.profile_file);
  } catch (const ProfileError& e) {
    throw Error(ErrorCode::invalid_config, std::string(e.what()) + "; or leave Config::profile_file empty");
  }
  return tuned(profile, config.group_size, transport_defaults(transport, mtu));
}

std::optional<std::string> check(const ProtocolConfig& c) {
  auto bad = [](const std::string& what) { return std::optional<std::string>("ProtocolConfig::" + what); };
  if (c.radix < 2) return bad("radix must be at least 2");
  if (c.mtu < wire::kDataOverhead + 64 || c.mtu > wire::kMaxDatagram)
    return bad("mtu must be in [" + std::to_string(wire::kDataOverhead + 64) + ", " + std::to_string(wire::kMaxDatagram) +
               "] (and at most " + std::to_string(wire::kMaxUdpDatagram) + " on the socket transport: a UDP datagram)");
  if (c.window_messages == 0 || c.initial_window_messages == 0) return bad("window_messages and initial_window_messages must be at least 1");
  if (c.window_bytes == 0) return bad("window_bytes must be at least 1");
  if (c.max_small_message > wire::kMaxPacket / 2) return bad("max_small_message must be at most 32 MiB");
  if (c.small_route_max > c.max_small_message)
    return bad("small_route_max must be at most max_small_message (0: max_small_message)");
  if (c.fragment_mtu != 0 && (c.fragment_mtu < wire::kDataOverhead + 64 || c.fragment_mtu > c.mtu))
    return bad("fragment_mtu must be 0 (the mtu) or in [" + std::to_string(wire::kDataOverhead + 64) + ", mtu]");
  // The small path's own rule (small::cut_of), on the bounds checked above.
  if (small::fragment_count(c.max_small_message, small::cut_of(c)) > 0xffff)
    return bad("max_small_message needs more than 65535 datagrams of this mtu (or fragment_mtu): lower it or raise them");
  if (c.block_size == 0 || c.block_size > wire::kMaxBlock) return bad("block_size must be in [1, 1 GiB]");
  if (c.min_block_size == 0) return bad("min_block_size must be at least 1");
  if (c.segment_size == 0) return bad("segment_size must be at least 1");
  if (c.large_receive_window == 0) return bad("large_receive_window must be at least 1");
  if (c.large_queue_limit == 0) return bad("large_queue_limit must be at least 1");
  if (c.max_large_message == 0) return bad("max_large_message must be at least 1");
  if (c.min_timeout_ns <= 0 || c.max_timeout_ns < c.min_timeout_ns)
    return bad("min_timeout_ns must be positive and at most max_timeout_ns");
  if (c.batch_delay_ns < 0 || c.batch_delay_ns > 1'000'000'000) return bad("batch_delay_ns must be in [0, 1 s]");
  if (c.initial_hop_rtt_ns <= 0 || c.ack_interval_ns < 0 || c.nack_delay_ns < 0 || c.stable_announce_ns <= 0 ||
      c.large_stall_ns <= 0)
    return bad("initial_hop_rtt_ns, stable_announce_ns and large_stall_ns must be positive, ack_interval_ns and "
               "nack_delay_ns not negative");
  if (c.repair_budget == 0 || c.repair_batch == 0) return bad("repair_budget and repair_batch must be at least 1");
  return std::nullopt;
}

}  // namespace hmcast::policy
