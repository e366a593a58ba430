// Field-by-field equality of two wire bodies (payloads by content), for the round
// trips of tests and fuzz targets. Exhaustive: a new wire::Body type does not
// compile until it says what makes two of it equal.
#pragma once

#include <span>

#include "core/wire.hpp"

namespace hmcast::testing {

[[nodiscard]] bool same_body(const wire::Body& a, const wire::Body& b);
[[nodiscard]] bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b);

}  // namespace hmcast::testing
