// Field-by-field equality of two wire bodies (payloads by content), for the round
// trips of tests and fuzz targets. Exhaustive: a new wire::Body type does not
// compile until it says what makes two of it equal.
#pragma once

#include <span>

#include "core/wire.hpp"

namespace hmcast::testing {

[[nodiscard]] bool same_body(const wire::Body& a, const wire::Body& b);
[[nodiscard]] bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b);
/// wire::decode_data_only says of `bytes` what wire::decode says: it declines
/// (nullopt) exactly what is not a Data packet (too short for a header, or another
/// type byte), and otherwise gives decode()'s error and, for a good packet, its
/// header and fields.
/// Also wire::decode_data_head() of its first kDataOverhead bytes, given the rest's
/// size, where it is that long: the same error, header and fields.
[[nodiscard]] bool data_only_agrees(std::span<const std::byte> bytes);

}  // namespace hmcast::testing
