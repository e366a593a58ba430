// Pieces of the control protocol's codec (control_wire.cpp) that group records
// (group_record.cpp) reuse: strings of at most kMaxControlString bytes, and a
// ViewPush's body.
#pragma once

#include <optional>
#include <string>

#include "core/byte_io.hpp"
#include "membership/control_wire.hpp"

namespace hmcast::membership {

void put_control_string(wire::Writer& w, const std::string& s);
std::string get_control_string(wire::Reader& r);
/// A ViewPush's body; nothing if it is malformed (the reader may be poisoned).
std::optional<ViewPush> decode_view(wire::Reader& r);

}  // namespace hmcast::membership
