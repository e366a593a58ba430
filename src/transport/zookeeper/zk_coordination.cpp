#include "transport/zookeeper/zk_coordination.hpp"

#include "core/assert.hpp"
#include "hmcast/error.hpp"
#include "transport/socket/manager_server.hpp"
#include "transport/socket/net_util.hpp"

namespace hmcast::zk {

namespace {

std::span<const std::byte> as_bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

}  // namespace

std::string leader_path(const std::string& root) { return root + "/leader"; }
std::string groups_path(const std::string& root) { return root + "/groups"; }

std::string group_path(const std::string& root, const std::string& group) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name;
  name.reserve(group.size() * 2);
  for (const char ch : group) {
    const auto c = static_cast<unsigned char>(ch);
    name.push_back(kHex[c >> 4U]);
    name.push_back(kHex[c & 15U]);
  }
  return groups_path(root) + "/" + name;
}

std::optional<std::pair<std::string, std::uint16_t>> find_coordinator(Session& s, const std::string& root) {
  // A member looks after losing the last coordinator: without a sync its server may
  // still show that one's address.
  s.sync(leader_path(root));
  const auto node = s.get(leader_path(root));
  if (!node) return std::nullopt;
  const std::string text(reinterpret_cast<const char*>(node->bytes.data()), node->bytes.size());
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;  // seated, not listening yet
  std::uint32_t port = 0;
  for (std::size_t i = colon + 1; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9' || port > 65535) return std::nullopt;
    port = port * 10 + static_cast<std::uint32_t>(text[i] - '0');
  }
  if (port == 0 || port > 65535) return std::nullopt;
  return std::make_pair(text.substr(0, colon), static_cast<std::uint16_t>(port));
}

Seat::Seat(const std::string& ensemble, std::string root, std::chrono::milliseconds session_timeout,
           std::chrono::milliseconds connect_timeout)
    : session_(ensemble, session_timeout, connect_timeout), root_(std::move(root)) {
  session_.ensure(groups_path(root_));
}

bool Seat::try_take() {
  HMCAST_ASSERT(!seated_);
  seated_ = session_.create(leader_path(root_), {}, /*ephemeral=*/true).has_value();
  return seated_;
}

std::vector<membership::GroupRecord> Seat::records(std::size_t* undecodable) {
  HMCAST_ASSERT(seated_);
  std::vector<membership::GroupRecord> out;
  std::size_t bad = 0;
  for (const auto& child : session_.children(groups_path(root_))) {
    const auto node = session_.get(groups_path(root_) + "/" + child);
    if (!node) continue;  // removed meanwhile
    auto r = membership::decode_group_record(node->bytes);
    if (r && group_path(root_, r->name) == groups_path(root_) + "/" + child) out.push_back(std::move(*r));
    else ++bad;
  }
  if (undecodable != nullptr) *undecodable = bad;
  return out;
}

void Seat::publish(const std::string& host, std::uint16_t port) {
  HMCAST_ASSERT(seated_);
  if (!session_.set(leader_path(root_), as_bytes(host + ":" + std::to_string(port)), -1))
    throw Error(ErrorCode::manager_lost, "the coordinator's seat in ZooKeeper vanished before it could publish "
                                         "its address (its session expired?): restart this manager");
}

void Seat::store(const std::vector<membership::IssuedView>& issued, const std::vector<std::string>& dropped) {
  HMCAST_ASSERT(seated_);
  if (session_.expired())
    throw Error(ErrorCode::manager_lost, "this manager's ZooKeeper session expired: another manager may coordinate now");
  for (const auto& v : issued) {
    const auto path = group_path(root_, v.group);
    const auto bytes = membership::encode(v.record);
    if (session_.set(path, bytes, -1) || session_.create(path, bytes, /*ephemeral=*/false)) continue;
    if (!session_.set(path, bytes, -1))  // created and removed again meanwhile: not by a seated manager
      throw Error(ErrorCode::manager_lost, "cannot store the record of group '" + v.group + "' in ZooKeeper");
  }
  for (const auto& name : dropped) (void)session_.remove(group_path(root_, name));
}

StandingManager::StandingManager(Options o) : o_(std::move(o)) {
  seat_ = std::make_unique<Seat>(o_.ensemble, o_.root, o_.session_timeout, std::chrono::seconds(30));
  thread_ = std::thread([this] { run(); });
}

StandingManager::~StandingManager() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::string StandingManager::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void StandingManager::run() {
  const auto fail = [&](const std::string& why) {
    {
      std::lock_guard lock(mu_);
      failure_ = why;
    }
    if (o_.on_event) o_.on_event(why);
  };
  try {
    while (!seat_->try_take()) {
      if (stop_) return;
      if (seat_->lost()) return fail("the ZooKeeper session expired while standing for the seat");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::size_t bad = 0;
    socket::Succession succession;
    succession.adopt = seat_->records(&bad);
    succession.rejoin_window = o_.rejoin_window;
    succession.store = [this](const auto& issued, const auto& dropped) { seat_->store(issued, dropped); };
    const auto adopted = succession.adopt.size();
    socket::ManagerServer server(o_.host, o_.port, socket::fresh_coordinator_config(),
                                 o_.on_view ? o_.on_view : socket::ManagerServer::ViewLog{}, std::move(succession), o_.key);
    seat_->publish(o_.host, server.port());
    seated_ = true;
    if (o_.on_event)
      o_.on_event("coordinating, listening on " + o_.host + ":" + std::to_string(server.port()) + "; took over " +
                  std::to_string(adopted) + " group(s)" +
                  (bad == 0 ? std::string() : ", left " + std::to_string(bad) + " unreadable record(s)"));
    while (!stop_) {
      if (seat_->lost()) return fail("this manager's ZooKeeper session expired: another may coordinate now");
      if (auto why = server.failure(); !why.empty()) return fail(why);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception& e) {
    fail(std::string("the standing manager stopped: ") + e.what());
  }
}

}  // namespace hmcast::zk
