// Where a member's reports to the view authority go (suspicions, the multicast
// probe's verdict, flush answers): the manager's TCP connection, the in-process
// coordinator, or the simulator's. Sans-I/O code only names the interface.
#pragma once

#include "membership/control_wire.hpp"

namespace hmcast::membership {

class ControlSink {
 public:
  virtual ~ControlSink() = default;
  virtual void send(const ControlMessage& m) = 0;
};

}  // namespace hmcast::membership
