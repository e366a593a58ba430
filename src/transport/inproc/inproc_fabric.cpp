#include "transport/inproc/inproc_fabric.hpp"

#include <algorithm>

namespace hmcast::inproc {

std::optional<Inbound> Endpoint::wait(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return !inbox_.empty() || woken_ || closed_; });
  woken_ = false;
  if (inbox_.empty()) return std::nullopt;
  Inbound in = std::move(inbox_.front());
  inbox_.pop_front();
  return in;
}

void Endpoint::wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
}

void Endpoint::deliver(Inbound in) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    inbox_.push_back(std::move(in));
  }
  cv_.notify_one();
}

void Endpoint::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    inbox_.clear();
  }
  cv_.notify_all();
}

std::shared_ptr<Fabric> Fabric::named(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<Fabric>> fabrics;
  std::lock_guard lock(mu);
  auto& slot = fabrics[name];
  auto f = slot.lock();
  if (!f) {
    f = std::make_shared<Fabric>();
    slot = f;
  }
  return f;
}

std::shared_ptr<Endpoint> Fabric::attach(std::uint64_t scope, MemberId id) {
  std::lock_guard lock(mu_);
  auto ep = std::make_shared<Endpoint>(id);
  endpoints_[{scope, id}] = ep;
  return ep;
}

void Fabric::detach(std::uint64_t scope, MemberId id) {
  std::shared_ptr<Endpoint> ep;
  {
    std::lock_guard lock(mu_);
    auto it = endpoints_.find({scope, id});
    if (it == endpoints_.end()) return;
    ep = it->second;
    endpoints_.erase(it);
  }
  ep->close();
}

void Fabric::multicast(std::uint64_t scope, MemberId from, std::span<const std::byte> bytes) {
  std::vector<std::shared_ptr<Endpoint>> targets;
  {
    std::lock_guard lock(mu_);
    for (auto it = endpoints_.lower_bound({scope, 0}); it != endpoints_.end() && it->first.first == scope; ++it)
      if (it->first.second != from) targets.push_back(it->second);
  }
  for (auto& ep : targets) ep->deliver(Inbound{true, from, std::vector<std::byte>(bytes.begin(), bytes.end()), false});
}

bool Fabric::unicast(std::uint64_t scope, MemberId from, MemberId to, std::vector<std::byte> bytes) {
  std::shared_ptr<Endpoint> ep;
  {
    std::lock_guard lock(mu_);
    auto it = endpoints_.find({scope, to});
    if (it == endpoints_.end()) return false;
    ep = it->second;
  }
  ep->deliver(Inbound{false, from, std::move(bytes), false});
  return true;
}

membership::ConnId Fabric::connect(ControlFn to_member) {
  std::lock_guard lock(control_mu_);
  const auto conn = next_conn_++;
  conns_[conn] = std::move(to_member);
  return conn;
}

void Fabric::to_coordinator(membership::ConnId conn, const membership::ControlMessage& m) {
  std::lock_guard lock(control_mu_);
  if (conns_.count(conn) == 0) return;  // hung up
  carry_out(coordinator_.on_message(conn, m));
}

void Fabric::disconnect(membership::ConnId conn) {
  std::lock_guard lock(control_mu_);
  if (conns_.erase(conn) == 0) return;
  carry_out(coordinator_.on_disconnect(conn));
}

void Fabric::carry_out(std::vector<membership::ControlOut> outs) {
  (void)coordinator_.take_issued();  // nobody logs the in-process views: keep the list from growing
  // With control_mu_ held, so members see the coordinator's messages in its order.
  // The ControlFns only queue (inproc_control.cpp), so this never calls back in.
  for (auto& o : outs) {
    auto it = conns_.find(o.conn);
    if (it == conns_.end()) continue;
    if (o.message) it->second(std::move(o.message));
    if (o.close) {
      it->second(std::nullopt);
      conns_.erase(it);
      carry_out(coordinator_.on_disconnect(o.conn));
    }
  }
}

}  // namespace hmcast::inproc
