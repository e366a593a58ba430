#include "group/multicast_probe.hpp"

#include <algorithm>

namespace hmcast::group {

std::string_view to_string(ProbeState s) {
  switch (s) {
    case ProbeState::idle: return "idle";
    case ProbeState::probing: return "probing";
    case ProbeState::confirmed: return "confirmed";
    case ProbeState::failed: return "failed";
  }
  return "unknown";
}

MulticastProbe::Step MulticastProbe::on_view(const View& view, MemberId self, TimeNs now) {
  std::set<MemberId> next;
  for (MemberId m : view.members)
    if (m != self) next.insert(m);
  const bool someone_new = std::any_of(next.begin(), next.end(), [&](MemberId m) { return members_.count(m) == 0; });
  members_ = std::move(next);
  std::erase_if(waiting_, [&](MemberId m) { return members_.count(m) == 0; });  // gone: nothing to wait for
  if (members_.empty()) {
    state_ = ProbeState::idle;
    waiting_.clear();
    next_send_ = deadline_ = kNever;
    return {};
  }
  if (someone_new && state_ != ProbeState::failed) {
    // A new round: every member of this view confirms again (cheap, and a member
    // that joined between two rounds is covered either way).
    state_ = ProbeState::probing;
    waiting_ = members_;
    ++nonce_;
    round_start_ = now;
    deadline_ = now + cfg_.deadline_ns;
    return send(now);
  }
  if (state_ == ProbeState::probing && waiting_.empty()) {
    state_ = ProbeState::confirmed;  // the silent ones left
    last_round_ns_ = now - round_start_;
    next_send_ = deadline_ = kNever;
  }
  return {};
}

MulticastProbe::Step MulticastProbe::on_confirm(MemberId from, TimeNs now) {
  if (state_ != ProbeState::probing || waiting_.erase(from) == 0 || !waiting_.empty()) return {};
  state_ = ProbeState::confirmed;
  last_round_ns_ = now - round_start_;
  next_send_ = deadline_ = kNever;
  return {};
}

MulticastProbe::Step MulticastProbe::on_timer(TimeNs now) {
  if (state_ != ProbeState::probing) return {};
  if (now >= deadline_) {
    state_ = ProbeState::failed;
    next_send_ = deadline_ = kNever;
    Step step;
    step.silent = std::vector<MemberId>(waiting_.begin(), waiting_.end());
    return step;
  }
  if (now >= next_send_) return send(now);
  return {};
}

TimeNs MulticastProbe::next_wakeup() const { return std::min(next_send_, deadline_); }

MulticastProbe::Step MulticastProbe::send(TimeNs now) {
  ++probes_sent_;
  next_send_ = now + cfg_.resend_ns;
  Step step;
  step.send_probe = true;
  return step;
}

}  // namespace hmcast::group
