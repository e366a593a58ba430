// Does datagram multicast reach every member? A member that joins a group cannot
// know: a switch without IGMP snooping or querier, a subnet manager that refused the
// join, a firewall or a NIC that drops multicast all look like silence. So after
// each view that brings in members, every member multicasts a probe and each other
// member of the view confirms it over its reliable link. A member that stays silent
// through every retry is reported (action::MulticastUnusable); the membership
// manager then switches the whole group to multicast emulated over reliable links,
// so all members fall back together and no member is left out of the fast path.
//
// Sans-I/O: it returns packets to send and reports; the engine routes wire input to
// it and carries out what it returns.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "core/timer_queue.hpp"
#include "hmcast/types.hpp"

namespace hmcast::group {

struct ProbeConfig {
  /// The probe datagram is sent again this often while a member has not confirmed
  /// (datagrams may be lost like any other; a confirmation may be slow to come).
  TimeNs resend_ns = 100'000'000;
  /// How long every member of the view has to confirm before multicast is declared
  /// unusable. Generous: a false alarm costs speed (emulated multicast), not safety.
  TimeNs deadline_ns = 3'000'000'000;
};

enum class ProbeState : std::uint8_t {
  idle,       // nothing to probe (alone in the view, or not started)
  probing,    // waiting for confirmations
  confirmed,  // every member of the view confirmed the last probe
  failed,     // a member stayed silent: reported
};

/// "idle", "probing", "confirmed" or "failed" (GroupStats::multicast_probe).
std::string_view to_string(ProbeState s);

class MulticastProbe {
 public:
  /// What the engine must do after a call.
  struct Step {
    bool send_probe = false;                     // multicast McastProbe{nonce()} now
    std::optional<std::vector<MemberId>> silent;  // report: these never confirmed
  };

  explicit MulticastProbe(ProbeConfig cfg = {}) : cfg_(cfg) {}

  /// A view is installed. Members that left are no longer waited for; members that
  /// arrived start a new probe round (a joiner receives from everyone, and everyone
  /// from the joiner, only once each side has probed).
  Step on_view(const View& view, MemberId self, TimeNs now);
  /// `from` confirmed one of our probes: it receives our multicast.
  Step on_confirm(MemberId from, TimeNs now);
  /// Timers: resend, or give up at the deadline.
  Step on_timer(TimeNs now);
  [[nodiscard]] TimeNs next_wakeup() const;

  [[nodiscard]] ProbeState state() const { return state_; }
  /// Identifies the current round in McastProbe datagrams (for diagnostics).
  [[nodiscard]] std::uint64_t nonce() const { return nonce_; }
  /// Members of the view that have not confirmed this round.
  [[nodiscard]] const std::set<MemberId>& waiting() const { return waiting_; }
  /// Probe datagrams sent, in all rounds.
  [[nodiscard]] std::uint64_t probes_sent() const { return probes_sent_; }
  /// How long the last completed round took (0 until one completes).
  [[nodiscard]] TimeNs last_round_ns() const { return last_round_ns_; }

 private:
  Step send(TimeNs now);

  ProbeConfig cfg_;
  ProbeState state_ = ProbeState::idle;
  std::set<MemberId> members_;  // of the last view, self excluded
  std::set<MemberId> waiting_;
  std::uint64_t nonce_ = 0;
  std::uint64_t probes_sent_ = 0;
  TimeNs round_start_ = 0;
  TimeNs next_send_ = kNever;
  TimeNs deadline_ = kNever;
  TimeNs last_round_ns_ = 0;
};

}  // namespace hmcast::group
