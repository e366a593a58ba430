// libFuzzer target: the membership control protocol's decoder, and the manager's
// Coordinator fed with whatever decodes. Nothing may crash; whatever decodes must
// encode back to the same bytes (the format has one encoding per message).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "membership/control_wire.hpp"
#include "membership/coordinator.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  auto m = hmcast::membership::decode_control(bytes);
  if (m) {
    const auto again = hmcast::membership::encode(*m);
    if (again.size() != bytes.size() || !std::equal(again.begin(), again.end(), bytes.begin())) std::abort();
  }
  // The input as a conversation: each byte picks a connection, then a message follows.
  hmcast::membership::Coordinator c({});
  std::size_t pos = 0;
  while (pos + 2 <= size) {
    const hmcast::membership::ConnId conn = data[pos] % 4;
    const std::size_t len = std::min<std::size_t>(data[pos + 1], size - pos - 2);
    auto msg = hmcast::membership::decode_control(bytes.subspan(pos + 2, len));
    if (msg) (void)c.on_message(conn, *msg);
    else (void)c.on_disconnect(conn);
    pos += 2 + len;
  }
  return 0;
}
