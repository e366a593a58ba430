// Four members in one process broadcast to each other; each waits until everyone
// has its message (no barrier needed). Built and run by the tests.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "hmcast/hmcast.hpp"

int main() {
  hmcast::Config config;
  config.group_size = 4;  // the first view forms when four members joined

  std::atomic<int> deliveries{0};
  std::vector<std::thread> members;
  for (int i = 0; i < 4; ++i) {
    members.emplace_back([config, &deliveries] {
      hmcast::Node node{config};                    // chooses and owns the transport
      hmcast::Group g = node.join("weights");       // returns once this node is in a view
      // Callbacks run on the node's progress thread until the Node is destroyed: capture
      // what they need by value (here the member id), not locals that die before the Node.
      g.on_deliver([&deliveries, self = g.self()](const hmcast::Delivery& d) {
        std::printf("member %u got message %llu from %u (%zu bytes)\n", self,
                    static_cast<unsigned long long>(d.seq), d.sender, d.bytes.size());
        ++deliveries;
      });
      g.on_view_change([](const hmcast::View& v, std::span<const hmcast::MemberId> left) {
        std::printf("view %llu: %zu members, %zu left\n", static_cast<unsigned long long>(v.id), v.members.size(),
                    left.size());
      });
      const std::string text = "hello from member " + std::to_string(g.self());
      auto done = g.broadcast(std::as_bytes(std::span(text)));  // bytes are copied
      done.get();  // every member of the view has it now
      // Or write the message in place, in a buffer the transport hands out: sent without a copy.
      hmcast::OutgoingMessage msg = g.prepare(text.size());
      std::copy(text.begin(), text.end(), reinterpret_cast<char*>(msg.bytes().data()));
      g.broadcast(std::move(msg)).get();
      std::printf("member %u: all members have my messages\n", g.self());
      // Stay until the others are done too: leaving early would make them repair us.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    });
  }
  for (auto& t : members) t.join();
  std::printf("%d deliveries (4 members x 8 messages expected)\n", deliveries.load());
  return deliveries == 32 ? 0 : 1;
}
