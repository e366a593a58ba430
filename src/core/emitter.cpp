#include "core/emitter.hpp"

namespace hmcast {

void Emitter::datagram_bytes(std::vector<std::byte> bytes, Outbox& out) {
  ++stats_.datagrams_sent;
  if (!emulated_) {
    out.emplace_back(action::SendDatagram{std::move(bytes)});
    return;
  }
  // The receiver accepts a datagram-typed frame only from the member it names as
  // source (GroupEngine::on_frame): the link vouches for the sender.
  for (MemberId m : view_.members) {
    if (m == self_) continue;
    ++stats_.emulated_datagrams;
    ++stats_.frames_sent;
    out.emplace_back(action::SendP2P{m, bytes});
  }
}

}  // namespace hmcast
