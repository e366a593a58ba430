// libFuzzer target: the verbs transport's zero-copy control messages (region
// descriptors, revokes and their answers, transport/verbs/region_wire.hpp). They
// arrive from peers, so nothing may crash; whatever decodes must encode back to the
// same bytes (one encoding per message), and an advertised region never wraps.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <variant>

#include "transport/verbs/region_wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  const auto m = hmcast::verbs::decode_region_message(bytes);
  if (!m) return 0;
  const auto again = hmcast::verbs::encode_region_message(*m);
  if (again.size() != bytes.size() || !std::equal(again.begin(), again.end(), bytes.begin())) std::abort();
  if (const auto* a = std::get_if<hmcast::verbs::RegionAdvertise>(&*m)) {
    if (a->length == 0 || a->addr + a->length < a->addr) std::abort();
    // Any segment the sender would accept lies inside the region.
    const std::uint64_t offset = a->length / 2, length = a->length - offset;
    if (!hmcast::verbs::region_covers(a->length, offset, length)) std::abort();
    if (hmcast::verbs::region_covers(a->length, offset, length + 1)) std::abort();
  }
  return 0;
}
