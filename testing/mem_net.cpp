#include "mem_net.hpp"

#include <algorithm>

#include "core/assert.hpp"
#include "core/overloaded.hpp"
#include "core/wire.hpp"

namespace hmcast::testing {

class MemNet::Transport final : public transport::Transport {
 public:
  Transport(MemNet& net, MemberId self) : net_(net), self_(self) {}
  [[nodiscard]] MemberId id() const override { return self_; }
  void multicast(std::span<const std::byte> bytes) override {
    net_.sent.push_back(Frame{self_, 0, std::vector<std::byte>(bytes.begin(), bytes.end())});
    if (net_.observe) net_.observe(net_.sent.back(), false);
    for (const auto& [id, m] : net_.members_)
      if (id != self_) net_.enqueue(self_, id, std::vector<std::byte>(bytes.begin(), bytes.end()), true);
  }
  bool unicast(MemberId to, std::vector<std::byte> frame) override {
    net_.sent.push_back(Frame{self_, to, frame});
    if (net_.observe) net_.observe(net_.sent.back(), false);
    if (!net_.alive(to)) return false;  // a crashed peer's link is broken
    net_.enqueue(self_, to, std::move(frame), false);
    return true;
  }
  void add_peer(MemberId, const std::string&, std::uint16_t) override {}

 private:
  MemNet& net_;
  MemberId self_;
};

class MemNet::Control final : public membership::ControlSink {
 public:
  Control(MemNet& net, MemberId self) : net_(net), self_(self) {}
  void send(const membership::ControlMessage& m) override { net_.reports[self_].push_back(m); }

 private:
  MemNet& net_;
  MemberId self_;
};

MemNet::MemNet(Options options) : opt_(std::move(options)), now_(opt_.start), rng_(opt_.seed) {}

MemNet::~MemNet() = default;

membership::ViewPush MemNet::push_of(const View& v, const std::map<MemberId, Seq>& floors) const {
  membership::ViewPush p;
  p.view = v.id;
  for (MemberId m : v.members) p.members.push_back(membership::MemberAddress{m, "mem", 0});
  if (!floors.empty()) {
    p.ends_flush = true;
    for (const auto& [m, floor] : floors) p.starts.push_back(membership::StreamStart{m, floor + 1, 1});
  }
  return p;
}

void MemNet::add(MemberId id, const View& view, const std::map<MemberId, Seq>& floors) {
  HMCAST_ASSERT(members_.count(id) == 0 && view.contains(id));
  Member& m = members_[id];
  m.transport = std::make_unique<Transport>(*this, id);
  m.control = std::make_unique<Control>(*this, id);
  m.runtime = std::make_unique<runtime::Runtime>(*m.transport, *m.control, kGroup, id, push_of(view, floors),
                                                 opt_.protocol, now_);
}

void MemNet::crash(MemberId id) {
  HMCAST_ASSERT(members_.count(id) == 1);
  members_.at(id).crashed = true;
  for (auto it = links_.begin(); it != links_.end();)  // what was on its way to or from it is gone
    it = it->first.first == id || it->first.second == id ? links_.erase(it) : std::next(it);
}

bool MemNet::alive(MemberId id) const {
  auto it = members_.find(id);
  return it != members_.end() && !it->second.crashed;
}

runtime::Runtime& MemNet::at(MemberId id) {
  auto it = members_.find(id);
  HMCAST_ASSERT(it != members_.end());
  return *it->second.runtime;
}

void MemNet::install(const View& view, const std::map<MemberId, Seq>& floors) {
  const auto push = push_of(view, floors);
  for (auto& [id, m] : members_) {
    if (m.crashed || m.runtime->engine().view().id >= view.id) continue;
    AppEvents app;
    m.runtime->on_control(push, now_, app);
    record(id, app);
  }
  deliver_all();
}

small::BroadcastResult MemNet::broadcast(MemberId from, MessageBuffer message, bool deliver) {
  AppEvents app;
  const auto r = at(from).broadcast(std::move(message), now_, app);
  record(from, app);
  if (deliver) deliver_all();
  return r;
}

large::LargeResult MemNet::broadcast_large(MemberId from, std::shared_ptr<std::vector<std::byte>> bytes,
                                           bool deliver) {
  AppEvents app;
  const auto size = bytes->size();
  const auto r = at(from).broadcast_large(std::move(bytes), size, now_, app);
  record(from, app);
  if (deliver) deliver_all();
  return r;
}

void MemNet::enqueue(MemberId from, MemberId to, std::vector<std::byte> bytes, bool datagram) {
  const Link link{from, to};
  auto& q = links_[link];
  q.push_back(InFlight{std::move(bytes), datagram});
  order_.push_back(link);
}

void MemNet::deliver_all() {
  while (!order_.empty()) {
    Link link;
    if (opt_.seed == 0) {
      link = order_.front();
      order_.pop_front();
    } else {
      const auto pick = rng_.below(order_.size());
      link = order_[pick];
      order_.erase(order_.begin() + static_cast<std::ptrdiff_t>(pick));
    }
    auto it = links_.find(link);
    if (it == links_.end() || it->second.empty()) continue;  // dropped with a crash
    InFlight f = std::move(it->second.front());
    it->second.pop_front();
    const auto [from, to] = link;
    if (!alive(to) || !alive(from) || cut_off.count(to) != 0) continue;
    if (drop && drop(Frame{from, to, f.bytes})) continue;
    if (observe) observe(Frame{from, to, f.bytes}, true);
    AppEvents app;
    if (f.datagram) {
      // Shared, as a transport hands it over: small messages may stay in it.
      const auto owner = std::make_shared<const std::vector<std::byte>>(std::move(f.bytes));
      at(to).on_datagram(*owner, now_, app, owner);
    } else {
      at(to).on_frame(from, f.bytes, false, now_, app);
    }
    record(to, app);
  }
}

void MemNet::advance(TimeNs dt) {
  now_ += dt;
  for (auto& [id, m] : members_) {
    if (m.crashed || now_ < m.runtime->engine().next_wakeup()) continue;
    AppEvents app;
    m.runtime->on_timer(now_, app);
    record(id, app);
  }
  deliver_all();
}

void MemNet::settle(int rounds, TimeNs step) {
  for (int i = 0; i < rounds; ++i) advance(step);
}

void MemNet::record(MemberId at, AppEvents& app) {
  for (auto& a : app) {
    std::visit(Overloaded{
                   [&](action::Deliver& d) { delivered[at].push_back(Delivered{d.sender, d.seq, false, d.message}); },
                   [&](action::DeliverLarge& d) { delivered[at].push_back(Delivered{d.sender, d.seq, true, d.message}); },
                   [&](action::Completed& c) {
                     completed[at].push_back(c.seq);
                     for (MemberId m : members_.at(at).runtime->engine().view().members) {
                       if (!alive(m)) continue;
                       const auto got = seqs(m, at);
                       if (std::find(got.begin(), got.end(), c.seq) == got.end()) premature.emplace_back(at, c.seq);
                     }
                   },
                   [&](action::CompletedLarge& c) { completed_large[at].push_back(c.seq); },
                   [&](action::FailedLarge& f) { failed_large[at].push_back(f.seq); },
                   [&](action::ViewInstalled&) {},
                   [&](action::Removed&) {},
               },
               a);
  }
  app.clear();
}

std::vector<Seq> MemNet::seqs(MemberId member, MemberId sender) const {
  std::vector<Seq> v;
  auto it = delivered.find(member);
  if (it == delivered.end()) return v;
  for (const auto& d : it->second)
    if (d.sender == sender && !d.large) v.push_back(d.seq);
  return v;
}

std::vector<const MemNet::Frame*> MemNet::of_type(wire::Type t, std::optional<MemberId> from) const {
  std::vector<const Frame*> v;
  for (const auto& f : sent)
    if (f.bytes.size() >= wire::kHeaderSize && wire::peek_type(f.bytes) == t && (!from || f.from == *from))
      v.push_back(&f);
  return v;
}

}  // namespace hmcast::testing
