#include "transport/inproc/inproc_control.hpp"

namespace hmcast::inproc {

ControlClient::ControlClient(const std::string& fabric)
    : QueuedControlClient("the in-process coordinator of fabric '" + fabric + "'"), fabric_(Fabric::named(fabric)) {
  conn_ = fabric_->connect([this](std::optional<membership::ControlMessage> m) {
    {
      std::lock_guard lock(mu_);
      inbox_.push_back(std::move(m));
    }
    cv_.notify_all();
  });
  thread_ = std::thread([this] { run(); });
}

ControlClient::~ControlClient() { close(); }

void ControlClient::send(const membership::ControlMessage& m) {
  {
    std::lock_guard lock(mu_);
    if (hung_up_ || closing_) return;
  }
  fabric_->to_coordinator(conn_, m);
}

void ControlClient::leave() {
  send(membership::Leave{});
}

void ControlClient::close() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  fabric_->disconnect(conn_);  // the coordinator removes us if it had not yet
}

void ControlClient::run() {
  for (;;) {
    std::optional<membership::ControlMessage> m;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !inbox_.empty() || closing_; });
      if (closing_) return;  // nothing more is handed on
      m = std::move(inbox_.front());
      inbox_.pop_front();
      if (!m) hung_up_ = true;
    }
    if (!m) {
      lost(peer() + " closed the connection");
      return;
    }
    received(std::move(*m));
  }
}

}  // namespace hmcast::inproc
