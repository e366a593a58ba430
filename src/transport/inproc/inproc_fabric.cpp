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

std::shared_ptr<Endpoint> Fabric::attach() {
  std::lock_guard lock(mu_);
  auto ep = std::make_shared<Endpoint>(next_id_++);
  endpoints_[ep->id()] = ep;
  return ep;
}

void Fabric::detach(MemberId id) {
  std::shared_ptr<Endpoint> ep;
  {
    std::lock_guard lock(mu_);
    auto it = endpoints_.find(id);
    if (it == endpoints_.end()) return;
    ep = it->second;
    endpoints_.erase(it);
  }
  ep->close();
}

void Fabric::multicast(MemberId from, const std::vector<std::byte>& bytes) {
  std::vector<std::shared_ptr<Endpoint>> targets;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, ep] : endpoints_)
      if (id != from) targets.push_back(ep);
  }
  for (auto& ep : targets) ep->deliver(Inbound{true, from, bytes, false});
}

bool Fabric::unicast(MemberId from, MemberId to, std::vector<std::byte> bytes) {
  std::shared_ptr<Endpoint> ep;
  {
    std::lock_guard lock(mu_);
    auto it = endpoints_.find(to);
    if (it == endpoints_.end()) return false;
    ep = it->second;
  }
  ep->deliver(Inbound{false, from, std::move(bytes), false});
  return true;
}

std::optional<View> Fabric::rendezvous(GroupId group, MemberId self, std::uint32_t size,
                                       std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  auto& waiting = joining_[group];
  waiting.push_back(self);
  if (waiting.size() == size) {
    View v{1, waiting};
    std::sort(v.members.begin(), v.members.end());
    formed_[group] = v;
    joining_.erase(group);
    joined_.notify_all();
    return v;
  }
  const bool ok = joined_.wait_for(lock, timeout, [&] {
    auto it = formed_.find(group);
    return it != formed_.end() && it->second.contains(self);
  });
  if (!ok) {
    auto& w = joining_[group];
    w.erase(std::remove(w.begin(), w.end(), self), w.end());
    return std::nullopt;
  }
  return formed_[group];
}

}  // namespace hmcast::inproc
