// `hmcast cp`'s decoder on arbitrary bytes: no crash, no read out of bounds, and
// what it accepts encodes back to the same bytes (so nothing is half-checked).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/assert.hpp"
#include "cp_wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hmcast::tools::cp;
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  const auto d = decode(in);
  HMCAST_ASSERT(d.message.has_value() == (d.error == nullptr));
  if (d.message) {
    const auto again = encode(d.message->transfer, d.message->body);
    HMCAST_ASSERT(again.size() == size && std::memcmp(again.data(), data, size) == 0);
  }
  return 0;
}
