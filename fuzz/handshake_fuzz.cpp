// libFuzzer target: joining under the group key (auth/handshake.hpp). Whatever a
// stranger sends on a control connection must not crash the manager's side and
// must never finish the exchange without the key; whatever a stranger posing as
// the manager sends must never draw a proof from a member.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "auth/handshake.hpp"

using namespace hmcast::auth;

namespace {

const GroupKey& fixed_key() {
  static const GroupKey k = [] {
    GroupKey g;
    for (std::size_t i = 0; i < g.bytes.size(); ++i) g.bytes[i] = static_cast<std::byte>(i * 5 + 3);
    return g;
  }();
  return k;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  (void)decode_hello(bytes);
  (void)decode_challenge(bytes);
  (void)decode_proof(bytes);
  // As a member: a challenge from a stranger never draws a proof.
  const JoinInitiator member(fixed_key());
  if (member.answer(bytes)) std::abort();
  // As the manager: the input split in two frames at its first byte's offset.
  const std::size_t cut = bytes.empty() ? 0 : std::to_integer<std::size_t>(bytes[0]) % (bytes.size() + 1);
  JoinResponder manager(fixed_key());
  (void)manager.on_frame(bytes.first(cut));
  if (!manager.failed() && !manager.done()) (void)manager.on_frame(bytes.subspan(cut));
  if (manager.done()) std::abort();  // a proof made without the key
  return 0;
}
