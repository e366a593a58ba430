#include "transport/zookeeper/zk_failover_control.hpp"

#include <algorithm>

#include "hmcast/error.hpp"
#include "transport/socket/manager_client.hpp"
#include "transport/zookeeper/zk_coordination.hpp"
#include "transport/zookeeper/zk_session.hpp"

namespace hmcast::zk {

namespace {

using Clock = std::chrono::steady_clock;

// A dead coordinator's address stays in ZooKeeper until its session expires: each
// try to reach an address is short, then the seat is read again.
constexpr auto kConnectTry = std::chrono::milliseconds(300);
constexpr auto kSeatPoll = std::chrono::milliseconds(50);
// Messages kept to send again to a new coordinator: a handful per view in practice.
constexpr std::size_t kMaxKept = 1024;

}  // namespace

FailoverControlClient::FailoverControlClient(FailoverOptions opts, TimePoint deadline) : opts_(std::move(opts)) {
  const auto wait = std::max(std::chrono::milliseconds(100),
                             std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  zk_ = std::make_unique<Session>(opts_.ensemble, std::chrono::milliseconds(10000), wait);
}

FailoverControlClient::~FailoverControlClient() { close(); }

std::unique_ptr<socket::ManagerClient> FailoverControlClient::connect(TimePoint deadline) {
  std::string last = "no coordinator is seated";
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (closing_) throw Error(ErrorCode::closed, "the member closed while looking for a coordinator");
    }
    try {
      if (const auto where = find_coordinator(*zk_, opts_.root)) {
        last = "the coordinator at " + where->first + ":" + std::to_string(where->second) + " cannot be reached";
        return std::make_unique<socket::ManagerClient>(where->first, where->second,
                                                       std::min<TimePoint>(deadline, Clock::now() + kConnectTry),
                                                       opts_.key ? &*opts_.key : nullptr);
      }
    } catch (const Error& e) {
      last = e.what();
    }
    if (Clock::now() >= deadline)
      throw Error(ErrorCode::manager_lost, "no membership coordinator found through ZooKeeper at " + opts_.ensemble +
                                               " (under " + opts_.root + "): " + last +
                                               "; start `hmcast manager --zookeeper " + opts_.ensemble + "`");
    std::this_thread::sleep_for(kSeatPoll);
  }
}

membership::Welcome FailoverControlClient::join(const std::string& group, std::uint32_t expected_size,
                                                TimePoint deadline) {
  auto client = connect(deadline);
  const auto w = client->join(group, expected_size, deadline);
  std::lock_guard lock(mu_);
  current_ = std::move(client);
  group_ = group;
  group_id_ = w.group_id;
  member_ = w.member;
  return w;
}

void FailoverControlClient::listening(const std::string& host, std::uint16_t port, std::uint64_t host_id) {
  std::lock_guard lock(mu_);
  current_->listening(host, port, host_id);
}

membership::ViewPush FailoverControlClient::wait_view(TimePoint deadline) {
  socket::ManagerClient* client = nullptr;
  {
    std::lock_guard lock(mu_);
    client = current_.get();
  }
  auto v = client->wait_view(deadline);  // before start(): nobody replaces the client meanwhile
  std::lock_guard lock(mu_);
  view_ = v.view;
  return v;
}

void FailoverControlClient::start(MessageFn on_message, LostFn on_lost) {
  socket::ManagerClient* client = nullptr;
  {
    std::lock_guard lock(mu_);
    on_message_ = std::move(on_message);
    on_lost_ = std::move(on_lost);
    client = current_.get();
  }
  failover_ = std::thread([this] { run_failover(); });
  client->start([this](const membership::ControlMessage& m) { this->on_message(m); },
                [this](const std::string& why) { this->on_lost(why); });
}

void FailoverControlClient::on_message(const membership::ControlMessage& m) {
  if (const auto* r = std::get_if<membership::Refused>(&m)) {
    // Only a Rejoin is refused after the join: this member is not coming back.
    std::lock_guard lock(mu_);
    lost_why_ = "the new membership coordinator refused this member back: " + r->reason;
    no_failover_ = true;  // the connection's end is reported, not failed over
    return;
  }
  if (const auto* v = std::get_if<membership::ViewPush>(&m)) {
    std::lock_guard lock(mu_);
    view_ = std::max(view_, v->view);
    since_view_.clear();
  }
  on_message_(m);
}

void FailoverControlClient::on_lost(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (closing_) return;
    failing_over_ = true;
    if (lost_why_.empty()) lost_why_ = why;
  }
  cv_.notify_all();
}

void FailoverControlClient::run_failover() {
  for (;;) {
    std::unique_ptr<socket::ManagerClient> old;
    std::string why;
    bool give_up = false;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return failing_over_ || closing_; });
      if (closing_) return;
      old = std::move(current_);
      why = lost_why_;
      give_up = no_failover_;
    }
    old.reset();  // its reader thread has reported and ends
    if (!give_up) {
      const auto deadline = Clock::now() + opts_.failover_timeout;
      try {
        auto next = connect(deadline);
        socket::ManagerClient* client = next.get();
        {
          // The Rejoin goes first, then what the old coordinator may never have read;
          // sends from other threads wait for the lock and follow.
          std::lock_guard lock(mu_);
          if (closing_) return;
          client->send(membership::Rejoin{group_, group_id_, member_, view_});
          for (const auto& m : since_view_) client->send(m);
          current_ = std::move(next);
          failing_over_ = false;
          lost_why_.clear();
          ++failovers_;
        }
        client->start([this](const membership::ControlMessage& m) { this->on_message(m); },
                      [this](const std::string& w) { this->on_lost(w); });
        continue;
      } catch (const Error& e) {
        why += "; " + std::string(e.what());
      }
    }
    LostFn report;
    {
      std::lock_guard lock(mu_);
      if (closing_ || reported_lost_) return;
      reported_lost_ = true;
      report = on_lost_;
    }
    if (report) report(why);
    return;
  }
}

void FailoverControlClient::send(const membership::ControlMessage& m) {
  std::lock_guard lock(mu_);
  if (since_view_.size() >= kMaxKept) since_view_.erase(since_view_.begin());
  since_view_.push_back(m);
  if (current_ && !failing_over_) current_->send(m);
}

void FailoverControlClient::leave() {
  std::lock_guard lock(mu_);
  no_failover_ = true;
  if (current_ && !failing_over_) current_->leave();
}

void FailoverControlClient::close() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  if (failover_.joinable()) failover_.join();
  std::unique_ptr<socket::ManagerClient> last;
  {
    std::lock_guard lock(mu_);
    last = std::move(current_);
  }
  last.reset();  // joins its reader: no callback runs after this
}

std::uint64_t FailoverControlClient::failovers() const {
  std::lock_guard lock(mu_);
  return failovers_;
}

}  // namespace hmcast::zk
