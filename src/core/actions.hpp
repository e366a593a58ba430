// What the protocol engines ask their runtime to do. Engines never perform I/O:
// they append actions to an Outbox and the runtime (simulator or real transport)
// carries them out in order.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "hmcast/types.hpp"

namespace hmcast {

/// A complete message payload. Immutable and shared: the same buffer is retained
/// for repairs, handed to delivery, and dropped when the last holder lets go.
using MessageBuffer = std::shared_ptr<const std::vector<std::byte>>;

namespace action {
struct SendDatagram {
  std::vector<std::byte> bytes;
};
struct SendP2P {
  MemberId to = 0;
  std::vector<std::byte> bytes;
};
struct Deliver {
  MemberId sender = 0;
  Seq seq = 0;
  MessageBuffer message;
};
/// This node's own message `seq` is held by every member of the current view.
struct Completed {
  Seq seq = 0;
};
struct ViewInstalled {
  View view;
  std::vector<MemberId> left;
};
/// The manager removed this node from the group; the engine stops participating.
struct Removed {
  ViewId view = 0;
};
}  // namespace action

using Action = std::variant<action::SendDatagram, action::SendP2P, action::Deliver, action::Completed,
                            action::ViewInstalled, action::Removed>;
using Outbox = std::vector<Action>;

}  // namespace hmcast
