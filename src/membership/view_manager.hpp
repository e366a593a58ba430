// The manager's side of membership: turns suspicions into new views.
//
// Sans-I/O: it only computes the next view; the engine that embeds it sends the
// view to the members. One manager per group, the lowest member id of the view
// (the networked manager with takeover comes with the socket transport).
#pragma once

#include <algorithm>
#include <optional>
#include <vector>

#include "hmcast/types.hpp"

namespace hmcast::membership {

class ViewManager {
 public:
  explicit ViewManager(View current) : current_(std::move(current)) {}

  /// `reporter` suspects `suspect`. Returns the view to install, or nothing if the
  /// suspicion is stale (suspect already gone), comes from a non-member, or names
  /// the manager itself (a manager cannot remove itself).
  std::optional<View> on_suspect(MemberId reporter, MemberId suspect) {
    if (!current_.contains(reporter) || !current_.contains(suspect)) return std::nullopt;
    if (suspect == manager()) return std::nullopt;
    View next{current_.id + 1, {}};
    std::copy_if(current_.members.begin(), current_.members.end(), std::back_inserter(next.members),
                 [&](MemberId m) { return m != suspect; });
    current_ = next;
    return next;
  }

  /// A view installed by other means (e.g. at start-up) becomes the base for the next one.
  void reset(View v) { current_ = std::move(v); }
  [[nodiscard]] const View& current() const { return current_; }
  [[nodiscard]] MemberId manager() const { return current_.members.front(); }

 private:
  View current_;
};

}  // namespace hmcast::membership
