// The hostile peer over verbs (see sprayer.hpp): a non-member endpoint on the
// group's UD multicast and on RC links to every member.
#include <arpa/inet.h>

#include <algorithm>
#include <chrono>

#include "hmcast/error.hpp"
#include "sprayer.hpp"
#ifdef HMCAST_HAVE_VERBS
#include "transport/verbs/verbs_transport.hpp"
#endif

namespace hmcast::tools {

SprayStats spray_verbs(const membership::IssuedView& target, const std::string& interface_address,
                       const std::string& device, std::uint64_t seed, const std::atomic<bool>& stop,
                       std::uint32_t pause_us) {
#ifdef HMCAST_HAVE_VERBS
  SprayStats st;
  Rng rng(seed);
  verbs::EndpointConfig cfg;
  cfg.options.device = device;
  cfg.options.interface_address = interface_address;
  in_addr a{};
  a.s_addr = htonl(target.multicast_address);
  char text[INET_ADDRSTRLEN] = {};
  cfg.group_address = ::inet_ntop(AF_INET, &a, text, sizeof text) != nullptr ? text : "";
  constexpr MemberId kSprayer = 0x7fff'0000;  // never a member id the manager hands out
  verbs::Endpoint ep(kSprayer, cfg);
  for (const auto& m : target.push.members) ep.add_peer(m.id, m.host, m.port);
  std::size_t next_member = 0;
  for (std::uint64_t round = 0; !stop.load(); ++round) {
    auto d = bad_datagram(target, rng, round, ep.mtu());  // the "over the MTU" kind: the most UD carries
    if (d.size() > ep.mtu()) d.resize(ep.mtu());
    ep.multicast(d);
    ++st.datagrams;
    if (round % 4 == 0 && !target.push.members.empty()) {
      // A bad frame to one member over its RC link (round robin); kinds rotate too.
      const auto& m = target.push.members[next_member++ % target.push.members.size()];
      auto f = bad_datagram(target, rng, round / 4, 1 + rng.below(200'000));
      if (ep.unicast(m.id, std::move(f))) ++st.link_frames;
    }
    // Drive the endpoint (connections, completions) instead of sleeping; what the
    // group multicasts to us is dropped.
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(pause_us);
    while (ep.wait(until)) {
    }
  }
  ep.close();
  return st;
#else
  (void)target, (void)interface_address, (void)device, (void)seed, (void)stop, (void)pause_us;
  throw Error(ErrorCode::transport_failed, "this hmcast was built without the verbs transport");
#endif
}

}  // namespace hmcast::tools
