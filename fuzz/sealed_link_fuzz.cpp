// libFuzzer target: the sealing layer's inbound side (transport/sealed). The input
// is a stream of items a stranger delivers to a member holding the key (each a
// datagram to the group or to this member alone, or a link frame from some peer, of
// some size); none may reach the
// protocol, none may crash the layer, and each is counted as an auth failure or a
// replay.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <span>

#include "transport/sealed/sealed_link.hpp"

using namespace hmcast;
using namespace hmcast::transport;

namespace {

/// A transport whose inbound items are the fuzzer's.
class QueueLink final : public Link {
 public:
  std::deque<Inbound> items;
  [[nodiscard]] MemberId id() const override { return 2; }
  void multicast(std::span<const std::byte>) override {}
  bool unicast(MemberId, std::vector<std::byte>) override { return true; }
  void add_peer(MemberId, const std::string&, std::uint16_t) override {}
  std::optional<Inbound> wait(std::chrono::steady_clock::time_point) override {
    if (items.empty()) return std::nullopt;
    auto in = std::move(items.front());
    items.pop_front();
    return in;
  }
  void wake() override {}
  void close() override {}
};

auth::GroupKey fixed_key() {
  auth::GroupKey g;
  for (std::size_t i = 0; i < g.bytes.size(); ++i) g.bytes[i] = static_cast<std::byte>(i * 3 + 7);
  return g;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto bytes = std::as_bytes(std::span(data, size));
  auto inner = std::make_unique<QueueLink>();
  auto* queue = inner.get();
  std::uint64_t items = 0;
  // Each item: a flags byte (bit 0: datagram; bits 1-3: the peer; bit 4: a direct
  // datagram), a length byte, then that many bytes.
  while (bytes.size() >= 2) {
    const auto flags = std::to_integer<unsigned>(bytes[0]);
    const std::size_t len = std::min<std::size_t>(std::to_integer<std::size_t>(bytes[1]) * 4, bytes.size() - 2);
    Inbound in;
    in.datagram = (flags & 1U) != 0;
    in.from = (flags >> 1) & 7U;
    in.direct = in.datagram && (flags & 16U) != 0;
    const auto body = bytes.subspan(2, len);
    in.bytes.assign(body.begin(), body.end());
    queue->items.push_back(std::move(in));
    ++items;
    bytes = bytes.subspan(2 + len);
  }
  SealedLink link(std::move(inner), fixed_key(), 77);
  if (link.wait(std::chrono::steady_clock::now())) std::abort();  // forged without the key
  const auto s = link.stats();
  if (s.auth_failures + s.replays_refused != items) std::abort();
  return 0;
}
