// libFuzzer target: the membership control protocol's decoder, the group record's
// decoder (what a successor coordinator adopts), and the manager's Coordinator fed
// with whatever decodes, adopting the input as a record when it is one. Nothing may crash; whatever decodes must
// encode back to the same bytes (the format has one encoding per message).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "membership/control_wire.hpp"
#include "membership/coordinator.hpp"
#include "membership/group_record.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  auto m = hmcast::membership::decode_control(bytes);
  if (m) {
    const auto again = hmcast::membership::encode(*m);
    if (again.size() != bytes.size() || !std::equal(again.begin(), again.end(), bytes.begin())) std::abort();
  }
  const auto record = hmcast::membership::decode_group_record(bytes);
  if (record) {
    const auto again = hmcast::membership::encode(*record);
    if (again.size() != bytes.size() || !std::equal(again.begin(), again.end(), bytes.begin())) std::abort();
  }
  // The input as a conversation: each byte picks a connection, then a message follows.
  hmcast::membership::Coordinator c({});
  if (record) (void)c.adopt(*record, 0);
  std::size_t pos = 0;
  while (pos + 2 <= size) {
    const hmcast::membership::ConnId conn = data[pos] % 4;
    const std::size_t len = std::min<std::size_t>(data[pos + 1], size - pos - 2);
    auto msg = hmcast::membership::decode_control(bytes.subspan(pos + 2, len));
    if (msg) (void)c.on_message(conn, *msg);
    else (void)c.on_disconnect(conn);
    pos += 2 + len;
    if (pos % 7 == 0) (void)c.on_tick(static_cast<std::int64_t>(pos));
  }
  return 0;
}
