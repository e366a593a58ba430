// Errors of the public API: an exception with a code and a message that says what to do.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace hmcast {

enum class ErrorCode : std::uint8_t {
  window_full,        // SendMode::fail and the sender window is full: retry after a completion
  message_too_large,  // over ProtocolConfig::max_large_message
  removed,            // this member was removed from the group (suspected by the others)
  closed,             // the Node or Group was destroyed while the operation waited
  join_timeout,       // fewer than Config::group_size members joined in time
  manager_lost,       // the membership manager is gone: views cannot change, so the group stops
  transport_failed,   // the operating system refused the transport (the message names the call)
  invalid_config,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  [[nodiscard]] ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace hmcast
