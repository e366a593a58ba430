// The shared-memory transport (src/transport/shm): the record ring on its own,
// then endpoints in one process, each with its own file, read and written from
// several threads (the TSan build runs this file too). Real processes run it in
// the `tool_soak_shm` test. Group ids depend on the process id, so concurrent test
// processes never open each other's files. Every wait is bounded.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/wire.hpp"
#include "transport/shm/crash_point.hpp"
#include "transport/shm/shm_layout.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/shm/stale_files.hpp"

namespace shm = hmcast::shm;
using Bytes = std::vector<std::byte>;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

hmcast::GroupId test_group(std::uint64_t which) {
  return (static_cast<std::uint64_t>(::getpid()) << 20) ^ (which * 0x9e3779b97f4a7c15ULL);
}

Bytes pattern(std::size_t n, std::uint32_t salt) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 131U + salt * 7U + (i >> 9U)) & 0xffU);
  return b;
}

Bytes numbered(std::uint32_t n, std::size_t size) {
  Bytes b = pattern(size, n);
  std::memcpy(b.data(), &n, sizeof n);
  return b;
}

std::uint32_t number_of(const Bytes& b) {
  std::uint32_t n = 0;
  std::memcpy(&n, b.data(), sizeof n);
  return n;
}

shm::ShmConfig config(hmcast::GroupId group, std::size_t log = 1 << 20, std::size_t inbox = 1 << 20) {
  shm::ShmConfig c;
  c.group_id = group;
  c.options.multicast_bytes = log;
  c.options.inbox_bytes = inbox;
  c.mtu = 4096;
  return c;
}

bool file_exists(hmcast::GroupId group, hmcast::MemberId m) {
  const int fd = ::shm_open(shm::file_name(group, m).c_str(), O_RDONLY, 0);
  if (fd >= 0) ::close(fd);
  return fd >= 0;
}

/// Endpoints 1..n of one group, each told about all the others.
std::vector<std::unique_ptr<shm::Endpoint>> group_of(std::uint32_t n, const shm::ShmConfig& cfg) {
  std::vector<std::unique_ptr<shm::Endpoint>> eps;
  for (std::uint32_t i = 1; i <= n; ++i) eps.push_back(std::make_unique<shm::Endpoint>(i, cfg));
  for (auto& a : eps)
    for (auto& b : eps) a->add_peer(b->id());
  return eps;
}

std::optional<shm::Inbound> next(shm::Endpoint& e, std::chrono::milliseconds limit = 5s) {
  return e.wait(Clock::now() + limit);
}

/// The next frame at `to`, the writer `from` moving on what waits for room in its
/// inbox meanwhile (its own wait() does), until `deadline`.
std::optional<shm::Inbound> next_moving(shm::Endpoint& from, shm::Endpoint& to, Clock::time_point deadline) {
  std::optional<shm::Inbound> in;
  while (!in && Clock::now() < deadline) {
    (void)from.wait(Clock::now() + 1ms);
    in = to.wait(Clock::now() + 1ms);
  }
  return in;
}

}  // namespace

TEST_CASE("shm ring: records wrap with padding and read back in order", "[shm]") {
  std::vector<std::byte> data(1024);
  shm::Ring ring{data.data(), data.size()};
  std::uint64_t tail = 0;
  std::uint64_t head = 0;
  std::uint32_t written = 0;
  std::uint32_t read = 0;
  // Sizes that do not divide the buffer, so records meet its end at every offset.
  for (int round = 0; round < 200; ++round) {
    const std::size_t len = 1 + (static_cast<std::size_t>(round) * 37) % 300;
    while (tail + ring.span_at(tail, len) - head > ring.capacity) {  // full: read the oldest
      shm::Ring::Read r{};
      REQUIRE(ring.read(head, tail, r));
      REQUIRE(r.header.source == read);
      REQUIRE(Bytes(r.payload, r.payload + r.header.length) == pattern(r.header.length, read));
      ++read;
      head = r.next;
    }
    shm::RecordHeader h;
    h.length = static_cast<std::uint32_t>(len);
    h.source = written;
    const Bytes payload = pattern(len, written);
    tail = ring.write(tail, h, payload);
    REQUIRE(tail % shm::kAlign == 0);
    ++written;
  }
  while (head < tail) {
    shm::Ring::Read r{};
    REQUIRE(ring.read(head, tail, r));
    REQUIRE(r.header.source == read++);
    head = r.next;
  }
  REQUIRE(read == written);
}

TEST_CASE("shm ring: a malformed record is refused, not followed", "[shm]") {
  std::vector<std::byte> data(256);
  shm::Ring ring{data.data(), data.size()};
  shm::RecordHeader h;
  h.length = 1000;  // past the buffer
  std::memcpy(data.data(), &h, sizeof h);
  shm::Ring::Read r{};
  CHECK_FALSE(ring.read(0, 256, r));
  h.length = 8;
  h.flags = shm::kPadding;  // padding that does not run to the end
  std::memcpy(data.data(), &h, sizeof h);
  CHECK_FALSE(ring.read(0, 256, r));
  h.flags = 0;
  std::memcpy(data.data(), &h, sizeof h);
  CHECK_FALSE(ring.read(0, 16, r));  // the record runs past the published tail
  CHECK(ring.read(0, 32, r));
  CHECK_FALSE(ring.read(8, 32, r));  // not at a record boundary
}

TEST_CASE("shm: a datagram reaches every other member once, a frame only its receiver", "[shm]") {
  const auto group = test_group(1);
  auto eps = group_of(3, config(group));
  eps[0]->multicast(numbered(7, 100));
  for (int i : {1, 2}) {
    auto in = next(*eps[static_cast<std::size_t>(i)]);
    REQUIRE(in);
    CHECK(in->datagram);
    CHECK(in->from == 1);
    CHECK(in->bytes == numbered(7, 100));
    CHECK_FALSE(next(*eps[static_cast<std::size_t>(i)], 20ms));
  }
  CHECK_FALSE(next(*eps[0], 20ms));  // never its own
  REQUIRE(eps[1]->unicast(3, pattern(5000, 3)));
  auto in = next(*eps[2]);
  REQUIRE(in);
  CHECK_FALSE(in->datagram);
  CHECK(in->from == 2);
  CHECK(in->bytes == pattern(5000, 3));
  CHECK_FALSE(next(*eps[0], 20ms));
  CHECK(eps[0]->stats().datagrams_sent == 1);
  CHECK(eps[2]->stats().frames_received == 1);
}

TEST_CASE("shm: a datagram over UDP's limit arrives whole; one over the MTU is refused", "[shm]") {
  // ShmOptions::mtu may pass 65507 (no network fragments it): a whole 64 KiB message
  // and its header in one record.
  const auto group = test_group(9);
  auto cfg = config(group);
  cfg.mtu = 67'584;
  auto eps = group_of(2, cfg);
  const auto big = numbered(11, 67'584);
  eps[0]->multicast(big);
  auto in = next(*eps[1]);
  REQUIRE(in);
  CHECK(in->datagram);
  CHECK(in->bytes == big);
  CHECK(eps[1]->stats().bad_input == 0);
  // A reader with a smaller MTU counts the record as bad input and skips it.
  auto small_cfg = config(test_group(10));
  small_cfg.mtu = 65'507;
  auto writer_cfg = small_cfg;
  writer_cfg.mtu = 67'584;
  auto writer = std::make_unique<shm::Endpoint>(1, writer_cfg);
  auto reader = std::make_unique<shm::Endpoint>(2, small_cfg);
  writer->add_peer(2);
  reader->add_peer(1);
  (void)next(*reader, 20ms);  // attaches to the writer's log
  writer->multicast(big);
  CHECK_FALSE(next(*reader, 50ms));
  CHECK(reader->stats().bad_input == 1);
}

TEST_CASE("shm ring: padding to the end early, the next record starts at 0", "[shm]") {
  std::vector<std::byte> data(1024);
  shm::Ring ring{data.data(), data.size()};
  shm::RecordHeader h;
  h.length = 100;
  h.source = 1;
  std::uint64_t tail = ring.write(0, h, pattern(100, 1));
  shm::Ring::Read r{};
  REQUIRE(ring.read(0, tail, r));  // read before its place is written again
  CHECK(r.header.source == 1);
  CHECK(r.next == tail);
  tail = ring.pad_to_end(tail);
  CHECK(tail == ring.capacity);
  h.source = 2;
  tail = ring.write(tail, h, pattern(100, 2));
  REQUIRE(ring.read(r.next, tail, r));  // over the padding
  CHECK(r.header.source == 2);
  CHECK(r.payload == data.data() + shm::kRecordHeader);
  CHECK(Bytes(r.payload, r.payload + r.header.length) == pattern(100, 2));
  CHECK(r.next == tail);
}

TEST_CASE("shm: a log every reader has read goes back to its start; one a reader is behind in goes on", "[shm]") {
  const auto group = test_group(43);
  auto cfg = config(group, 1 << 20);
  cfg.mtu = 16384;
  auto eps = group_of(3, cfg);
  constexpr std::size_t kSize = 16000;
  std::uint32_t sent = 0;
  // Latency-bound: each datagram is read by both before the next. 100 of them are
  // 1.6 MB, more than the log: without going back early the log would go around once.
  for (int i = 0; i < 100; ++i, ++sent) {
    eps[0]->multicast(numbered(sent, kSize));
    for (std::size_t r : {1U, 2U}) {
      auto in = next(*eps[r]);
      REQUIRE(in);
      REQUIRE(in->bytes == numbered(sent, kSize));
    }
  }
  const auto rewinds = eps[0]->stats().log_rewinds;
  CHECK(rewinds >= 10);  // one per 128 KiB written, about every 9 datagrams
  // Member 3 stops reading: the log goes on past the point where it went back before.
  for (int i = 0; i < 40; ++i) {
    eps[0]->multicast(numbered(sent + static_cast<std::uint32_t>(i), kSize));
    auto in = next(*eps[1]);
    REQUIRE(in);
    REQUIRE(in->bytes == numbered(sent + static_cast<std::uint32_t>(i), kSize));
  }
  CHECK(eps[0]->stats().log_rewinds == rewinds);
  for (int i = 0; i < 40; ++i) {  // all there, in order, none torn
    auto in = next(*eps[2]);
    REQUIRE(in);
    REQUIRE(in->bytes == numbered(sent + static_cast<std::uint32_t>(i), kSize));
  }
  CHECK_FALSE(next(*eps[2], 20ms));
  CHECK(eps[0]->stats().multicast_overruns == 0);
  CHECK(eps[1]->stats().bad_input == 0);
  CHECK(eps[2]->stats().bad_input == 0);
}

TEST_CASE("shm: an inbox read as fast as it fills goes back to its start; a full one goes on around", "[shm]") {
  const auto group = test_group(44);
  auto eps = group_of(2, config(group, 1 << 20, 2 << 20));  // a 2 MiB inbox
  // Each frame is read before the next: 100 of 250,000 bytes are 25 MB, twelve laps
  // of the inbox without going back early.
  std::uint32_t sent = 0;
  for (int i = 0; i < 100; ++i, ++sent) {
    REQUIRE(eps[0]->unicast(2, numbered(sent, 250'000)));
    auto in = next(*eps[1]);
    REQUIRE(in);
    REQUIRE(in->bytes == numbered(sent, 250'000));
  }
  const auto rewinds = eps[0]->stats().inbox_rewinds;
  CHECK(rewinds >= 10);  // once the tail is 512 KiB in: every third frame
  // Frames of 200,000 read one at a time until one goes back to the start: the
  // reader stops there, before the padding (its header is about 600 KB in). Then 29
  // of 150,000 (a frame moves in pieces of at most 256 KiB, a quarter of the inbox):
  // the third of them would end past the padding's header and write over it, were
  // the padding counted as read; they fill the inbox and wait for room.
  std::vector<Bytes> expected;
  for (int tries = 0;; ++tries, ++sent) {
    REQUIRE(tries < 20);
    const auto before = eps[0]->stats().inbox_rewinds;
    REQUIRE(eps[0]->unicast(2, numbered(sent, 200'000)));
    if (eps[0]->stats().inbox_rewinds > before) break;
    auto in = next(*eps[1]);
    REQUIRE(in);
    REQUIRE(in->bytes == numbered(sent, 200'000));
  }
  expected.push_back(numbered(sent++, 200'000));
  const auto rewound = eps[0]->stats().inbox_rewinds;
  for (int i = 0; i < 29; ++i, ++sent) {
    expected.push_back(numbered(sent, 150'000));
    REQUIRE(eps[0]->unicast(2, expected.back()));
  }
  CHECK(eps[0]->stats().inbox_rewinds == rewound);  // never while the inbox holds frames
  for (std::size_t i = 0; i < expected.size(); ++i) {
    std::optional<shm::Inbound> in;
    const auto deadline = Clock::now() + 5s;
    while (!in && Clock::now() < deadline) {
      (void)eps[0]->wait(Clock::now() + 1ms);  // moves the waiting frames on as room comes
      in = eps[1]->wait(Clock::now() + 1ms);
    }
    INFO("frame " << i << " after the rewind");
    REQUIRE(in);
    REQUIRE(in->bytes == expected[i]);
  }
  CHECK(eps[1]->stats().bad_input == 0);
  CHECK(eps[1]->stats().partial_frames_dropped == 0);
}

TEST_CASE("shm: frames larger than the inbox arrive whole and in order, from two writers at once", "[shm]") {
  const auto group = test_group(2);
  auto eps = group_of(3, config(group, 1 << 20, 64 << 10));  // a 64 KiB inbox
  constexpr int kFrames = 12;
  std::atomic<int> refused{0};  // Catch's assertions are for the main thread
  std::vector<std::thread> writers;
  for (std::size_t w : {0U, 1U})
    writers.emplace_back([&, w] {
      for (int i = 0; i < kFrames; ++i) {
        const std::size_t size = 1000 + static_cast<std::size_t>(i) * 50'000;  // up to 551 KB
        if (!eps[w]->unicast(3, pattern(size, static_cast<std::uint32_t>(static_cast<std::size_t>(i) + 100 * w)))) ++refused;
      }
    });
  std::map<hmcast::MemberId, int> seen;
  const auto deadline = Clock::now() + 20s;
  while ((seen[1] < kFrames || seen[2] < kFrames) && Clock::now() < deadline) {
    // The writers' frames wait for room in the inbox; their own wait() moves them on.
    for (std::size_t w : {0U, 1U}) (void)eps[w]->wait(Clock::now() + 1ms);
    auto in = eps[2]->wait(Clock::now() + 10ms);
    if (!in) continue;
    const int i = seen[in->from]++;
    const std::size_t size = 1000 + static_cast<std::size_t>(i) * 50'000;
    REQUIRE(in->bytes == pattern(size, static_cast<std::uint32_t>(i) + 100 * (in->from - 1)));
  }
  for (auto& t : writers) t.join();
  CHECK(refused == 0);
  CHECK(seen[1] == kFrames);
  CHECK(seen[2] == kFrames);
  CHECK(eps[2]->stats().bad_input == 0);
}

TEST_CASE("shm: readers on their own threads get every datagram the log took, in order", "[shm]") {
  const auto group = test_group(3);
  auto eps = group_of(4, config(group, 64 << 10));  // a small log: the writer meets full
  constexpr std::uint32_t kCount = 20'000;
  std::atomic<bool> done{false};
  std::atomic<int> wrong_size{0};
  std::vector<std::vector<std::uint32_t>> got(3);
  std::vector<std::thread> readers;
  for (std::size_t r = 0; r < 3; ++r)
    readers.emplace_back([&, r] {
      auto& ep = *eps[r + 1];
      const auto deadline = Clock::now() + 30s;
      while (Clock::now() < deadline) {
        auto in = ep.wait(Clock::now() + 5ms);
        if (in) {
          if (in->bytes.size() != 64 + number_of(in->bytes) % 900) ++wrong_size;
          got[r].push_back(number_of(in->bytes));
        } else if (done.load() && got[r].size() == eps[0]->stats().datagrams_sent) {
          break;
        }
      }
    });
  for (std::uint32_t i = 0; i < kCount; ++i) eps[0]->multicast(numbered(i, 64 + i % 900));
  // What met a full log waits for room: the writer's polls move it on (as its wait() does).
  for (const auto until = Clock::now() + 20s; Clock::now() < until;) {
    const auto st = eps[0]->stats();
    if (st.datagrams_sent + st.multicast_overruns == kCount) break;
    (void)eps[0]->poll();
  }
  done = true;
  for (auto& t : readers) t.join();
  const auto st = eps[0]->stats();
  CHECK(wrong_size == 0);
  CHECK(st.datagrams_sent + st.multicast_overruns == kCount);
  CHECK(st.readers_evicted == 0);  // live readers are waited for, never let go
  for (auto& g : got) {
    CHECK(g.size() == st.datagrams_sent);  // a datagram the log took reaches every reader
    for (std::size_t i = 1; i < g.size(); ++i) REQUIRE(g[i] > g[i - 1]);
  }
}

TEST_CASE("shm: a reader that stops reading is let go after reader_stall and comes back", "[shm]") {
  const auto group = test_group(4);
  auto cfg = config(group, 64 << 10);
  cfg.options.reader_stall = 50ms;
  auto eps = group_of(2, cfg);
  // Member 2 does not read: the log fills, then drops, then lets member 2 go.
  std::uint32_t i = 0;
  const auto deadline = Clock::now() + 5s;
  while (eps[0]->stats().readers_evicted == 0 && Clock::now() < deadline) {
    eps[0]->multicast(numbered(i++, 1000));
    if (eps[0]->stats().multicast_overruns > 0) std::this_thread::sleep_for(1ms);
  }
  REQUIRE(eps[0]->stats().readers_evicted == 1);
  const auto overruns = eps[0]->stats().multicast_overruns;
  CHECK(overruns > 0);
  eps[0]->multicast(numbered(i++, 1000));  // the log has room again
  CHECK(eps[0]->stats().multicast_overruns == overruns);
  // Member 2 reads again: what it had read before the eviction is void; it starts
  // again at the head and hears what comes next.
  while (next(*eps[1], 20ms)) {
  }
  CHECK(eps[1]->stats().evicted_from_peers == 1);
  eps[0]->multicast(numbered(99'999, 1000));
  auto in = next(*eps[1]);
  REQUIRE(in);
  CHECK(number_of(in->bytes) == 99'999);
}

TEST_CASE("shm: a closed member's file goes, and links to it break", "[shm]") {
  const auto group = test_group(5);
  auto eps = group_of(2, config(group));
  REQUIRE(file_exists(group, 1));
  eps[0]->close();
  CHECK_FALSE(file_exists(group, 1));
  CHECK_FALSE(eps[1]->unicast(1, pattern(10, 1)));
  CHECK_FALSE(eps[0]->unicast(2, pattern(10, 1)));
  // A member that never existed on this host: no link.
  eps[1]->add_peer(77);
  CHECK_FALSE(eps[1]->unicast(77, pattern(10, 1)));
  CHECK(eps[1]->stats().peers_unreachable == 1);
  eps[1]->remove_peer(1);
  eps[1]->remove_peer(77);
}

TEST_CASE("shm: a writer killed halfway through a frame leaves nothing torn, and its lock is taken over", "[shm]") {
  // A real process (fork) writes a 2 MiB frame into member 1's 1 MiB inbox: three
  // 256 KiB fragments go in at once and are published; once member 1 has read them
  // and made room, the writer dies (SIGKILL, by crash_point.hpp) with half of the
  // fourth copied and the inbox lock held.
  const auto group = test_group(41);
  const auto cfg = config(group, 1 << 20, 1 << 20);
  shm::Endpoint a(1, cfg);
  int report[2] = {-1, -1};
  REQUIRE(::pipe(report) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // nothing of Catch2 here: exit codes only
    ::close(report[0]);
    shm::Endpoint b(2, cfg);
    b.add_peer(1);
    if (::write(report[1], "ready\n", 6) != 6) ::_exit(2);  // its file exists: member 1 may map it
    shm::arm_crash_mid_write(report[1], 64 * 1024, 3 * 256 * 1024);
    if (!b.unicast(1, pattern(2 << 20, 2))) ::_exit(3);
    const auto until = Clock::now() + 10s;
    while (Clock::now() < until) (void)b.wait(Clock::now() + 20ms);  // flushes the rest as room appears
    ::_exit(4);  // the crash point was never reached
  }
  ::close(report[1]);
  char ready[6] = {};
  REQUIRE(::read(report[0], ready, sizeof ready) == 6);  // as in a group: peers' files exist before the view names them
  a.add_peer(2);
  int status = 0;
  pid_t reaped = 0;
  const auto deadline = Clock::now() + 20s;
  while (reaped == 0 && Clock::now() < deadline) {
    const auto in = a.wait(Clock::now() + 5ms);
    CHECK_FALSE(in.has_value());  // three fragments of four: no frame may come out
    reaped = ::waitpid(child, &status, WNOHANG);
  }
  if (reaped == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL("the writer did not die within 20 s");
  }
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  char line[512] = {};
  const ssize_t n = ::read(report[0], line, sizeof line - 1);
  ::close(report[0]);
  REQUIRE(n > 0);
  const std::string said(line, static_cast<std::size_t>(n));
  CHECK(said.find("\"event\":\"crashed_mid_write\"") != std::string::npos);
  CHECK(said.find("\"frame_offset\":786432") != std::string::npos);
  CHECK(said.find("\"record_copied\":131072") != std::string::npos);

  // The view drops the dead writer: its unfinished frame is let go, and so is its
  // file (nobody else would remove it).
  a.remove_peer(2);
  CHECK_FALSE(a.wait(Clock::now() + 5ms).has_value());
  CHECK(a.stats().partial_frames_dropped == 1);
  CHECK_FALSE(file_exists(group, 2));

  // The next writer finds the lock's holder dead, takes it over, and its frame
  // arrives whole, written over the half record nobody ever published.
  shm::Endpoint c(3, cfg);
  c.add_peer(1);
  const Bytes want = numbered(7, 300 * 1024);
  REQUIRE(c.unicast(1, want));
  std::optional<hmcast::transport::Inbound> in;
  const auto deadline2 = Clock::now() + 10s;
  while (!in && Clock::now() < deadline2) {
    in = a.wait(Clock::now() + 10ms);
    (void)c.wait(Clock::now());  // flushes what did not fit at once
  }
  REQUIRE(in);
  CHECK(in->from == 3);
  CHECK(in->bytes == want);
  CHECK(c.stats().inbox_locks_recovered == 1);
  CHECK_FALSE(a.wait(Clock::now() + 5ms).has_value());
  CHECK(a.stats().frames_received == 1);
}

TEST_CASE("shm: wake() ends a wait at once, from another thread", "[shm]") {
  const auto group = test_group(6);
  auto eps = group_of(1, config(group));
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    eps[0]->wake();
  });
  const auto start = Clock::now();
  CHECK_FALSE(eps[0]->wait(start + 10s));
  CHECK(Clock::now() - start < 5s);
  t.join();
}

namespace {

Bytes ack_frame(hmcast::GroupId group, hmcast::ViewId view, std::vector<hmcast::wire::AckEntry> entries) {
  hmcast::wire::Header h;
  h.group = group;
  h.view = view;
  h.src = 1;
  return hmcast::wire::encode(h, hmcast::wire::Ack{std::move(entries)});
}

/// The view and entries of the ACK frame `in` carries (fails the test if it is none).
std::pair<hmcast::ViewId, std::vector<hmcast::wire::AckEntry>> ack_of(const shm::Inbound& in) {
  auto d = hmcast::wire::decode(in.bytes);
  REQUIRE(d.ok());
  REQUIRE(std::holds_alternative<hmcast::wire::Ack>(d.packet.body));
  return {d.packet.header.view, std::get<hmcast::wire::Ack>(d.packet.body).entries};
}

}  // namespace

TEST_CASE("shm: an ACK goes by mail slot, merged by stream with the unread one, never across views", "[shm]") {
  using E = hmcast::wire::AckEntry;
  const auto group = test_group(21);
  auto eps = group_of(2, config(group));
  REQUIRE(eps[0]->unicast(2, ack_frame(group, 4, {E{1, 0, 5, 0}})));
  auto in = next(*eps[1]);
  REQUIRE(in);
  CHECK_FALSE(in->datagram);
  CHECK(in->from == 1);
  CHECK(ack_of(*in) == std::pair<hmcast::ViewId, std::vector<E>>{4, {E{1, 0, 5, 0}}});
  CHECK(eps[0]->stats().acks_mailed == 1);
  CHECK(eps[1]->stats().acks_mail_received == 1);
  CHECK_FALSE(next(*eps[1], 20ms));  // read once

  // Two before the reader looks: one frame, the newer entry of stream 1 and stream 3's.
  REQUIRE(eps[0]->unicast(2, ack_frame(group, 4, {E{3, 2, 4, 0}})));
  REQUIRE(eps[0]->unicast(2, ack_frame(group, 4, {E{1, 0, 6, 2}})));
  in = next(*eps[1]);
  REQUIRE(in);
  CHECK(ack_of(*in) == std::pair<hmcast::ViewId, std::vector<E>>{4, {E{1, 0, 6, 2}, E{3, 2, 4, 0}}});
  CHECK_FALSE(next(*eps[1], 20ms));

  // Another view's tree: its first frame carries its own entries only.
  REQUIRE(eps[0]->unicast(2, ack_frame(group, 5, {E{1, 6, 7, 0}})));
  in = next(*eps[1]);
  REQUIRE(in);
  CHECK(ack_of(*in) == std::pair<hmcast::ViewId, std::vector<E>>{5, {E{1, 6, 7, 0}}});
  CHECK(eps[0]->stats().acks_mailed == 4);
  CHECK(eps[1]->stats().acks_mail_received == 3);

  // More streams than a slot holds: that frame, as sent, through the inbox.
  std::vector<E> many;
  for (std::uint32_t s = 1; s <= 20; ++s) many.push_back(E{s, 1, 2, 0});
  const Bytes big = ack_frame(group, 5, many);
  REQUIRE(big.size() > shm::kMailBytes);
  REQUIRE(eps[0]->unicast(2, big));
  in = next(*eps[1]);
  REQUIRE(in);
  CHECK(in->bytes == big);
  CHECK(eps[0]->stats().acks_mailed == 4);
  // The merged set of this view holds those streams now: the inbox again, until the next view.
  const Bytes small = ack_frame(group, 5, {E{1, 7, 8, 0}});
  REQUIRE(eps[0]->unicast(2, small));
  in = next(*eps[1]);
  REQUIRE(in);
  CHECK(in->bytes == small);
  CHECK(eps[0]->stats().acks_mailed == 4);
  REQUIRE(eps[0]->unicast(2, ack_frame(group, 6, {E{1, 8, 9, 0}})));
  in = next(*eps[1]);
  REQUIRE(in);
  CHECK(ack_of(*in) == std::pair<hmcast::ViewId, std::vector<E>>{6, {E{1, 8, 9, 0}}});
  CHECK(eps[0]->stats().acks_mailed == 5);
  CHECK_FALSE(next(*eps[1], 20ms));
}

TEST_CASE("shm: a mail slot whose entry count is past any ACK's is counted and dropped", "[shm]") {
  const auto group = test_group(24);
  auto eps = group_of(2, config(group));
  const int fd = ::shm_open(shm::file_name(group, 1).c_str(), O_RDWR, 0);
  REQUIRE(fd >= 0);
  const std::size_t size = sizeof(shm::Header);
  void* at = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  REQUIRE(at != MAP_FAILED);
  auto* h = static_cast<shm::Header*>(at);
  std::uint32_t slot = shm::kMaxReaders;
  for (std::uint32_t i = 0; i < shm::kMaxReaders; ++i)
    if (h->readers[i].member.load() == 2) slot = i;
  REQUIRE(slot < shm::kMaxReaders);
  // As a writer would leave it, but with 1,000 entries counted (the count follows the
  // group, view and source: bytes 20 to 23 of what the slot holds).
  shm::MailSlot& m = h->mail[slot];
  m.to.store(2);
  m.words[2].store(std::uint64_t{1000} << 32);
  m.seq.store(2, std::memory_order_release);
  CHECK_FALSE(next(*eps[1], 20ms));
  CHECK(eps[1]->stats().bad_input == 1);
  CHECK(eps[1]->stats().acks_mail_received == 0);
  // A good frame after it still arrives.
  REQUIRE(eps[0]->unicast(2, ack_frame(group, 1, {hmcast::wire::AckEntry{1, 0, 2, 0}})));
  CHECK(next(*eps[1]));
  ::munmap(at, size);
}

TEST_CASE("shm: an ACK to a member that does not read our log goes through its inbox", "[shm]") {
  const auto group = test_group(22);
  const auto cfg = config(group);
  shm::Endpoint a(1, cfg);
  shm::Endpoint b(2, cfg);
  a.add_peer(2);  // b never attaches to a's log
  const Bytes ack = ack_frame(group, 1, {hmcast::wire::AckEntry{1, 0, 3, 0}});
  REQUIRE(a.unicast(2, ack));
  auto in = next(b);
  REQUIRE(in);
  CHECK(in->from == 1);
  CHECK(in->bytes == ack);
  CHECK(a.stats().acks_mailed == 0);
}

TEST_CASE("shm: ACKs mailed from one thread while another reads: none torn, none older than the last", "[shm]") {
  using E = hmcast::wire::AckEntry;
  const auto group = test_group(23);
  auto eps = group_of(2, config(group));
  constexpr hmcast::Seq kLast = 20'000;
  std::atomic<bool> refused{false};  // Catch's assertions are not for other threads
  std::thread writer([&] {
    for (hmcast::Seq have = 1; have <= kLast; ++have)
      if (!eps[0]->unicast(2, ack_frame(group, 1, {E{1, have / 2, have, 0}, E{7, 0, have, 0}}))) refused = true;
  });
  hmcast::Seq seen = 0;
  std::uint64_t frames = 0;
  const auto until = Clock::now() + 30s;
  while (seen < kLast && Clock::now() < until) {
    auto in = next(*eps[1], 100ms);
    if (!in) continue;
    ++frames;
    const auto [view, entries] = ack_of(*in);
    CHECK(view == 1);
    REQUIRE(entries.size() == 2);
    CHECK(entries[0] == E{1, entries[0].have / 2, entries[0].have, 0});  // a torn copy would mix two frames
    CHECK(entries[1] == E{7, 0, entries[0].have, 0});
    CHECK(entries[0].have > seen);  // each one read is newer than the last
    seen = entries[0].have;
  }
  writer.join();
  CHECK_FALSE(refused);
  CHECK(seen == kLast);
  CHECK(frames <= kLast);
  CHECK(eps[1]->stats().bad_input == 0);
}

TEST_CASE("shm: a Block's payload goes from the sender's buffer straight into the receiver's", "[shm]") {
  const auto group = test_group(7);
  auto eps = group_of(2, config(group, 1 << 20, 64 << 10));  // fragments: the payload spans many
  constexpr std::uint32_t kLen = 300'000;
  auto src = std::make_shared<Bytes>(pattern(kLen, 9));
  auto dest = std::make_shared<Bytes>(kLen + 100, std::byte{0});
  int asked = 0;
  eps[1]->set_block_placer([&](hmcast::MemberId from, std::span<const std::byte> head, std::size_t size)
                               -> std::optional<hmcast::transport::Placement> {
    ++asked;
    CHECK(from == 1);
    CHECK(head.size() == hmcast::wire::kBlockHeadSize);
    CHECK(size == hmcast::wire::kBlockHeadSize + kLen);
    return hmcast::transport::Placement{std::span(*dest).subspan(50, kLen), dest};
  });
  // The head alone (the payload left out), as the large path encodes it.
  const hmcast::wire::Header h{hmcast::wire::Type::block, group, 1, 1};
  Bytes head = hmcast::wire::encode(h, hmcast::wire::Block{1, 1, 0, 0, kLen, {}});
  REQUIRE(head.size() == hmcast::wire::kBlockHeadSize);
  // One frame placed, then an ordinary one behind it.
  REQUIRE(eps[0]->unicast(2, head, std::span<const std::byte>(*src), src));
  REQUIRE(eps[0]->unicast(2, pattern(1000, 1)));
  const auto deadline = Clock::now() + 10s;
  auto in = next_moving(*eps[0], *eps[1], deadline);
  REQUIRE(in);
  CHECK(in->placed);
  CHECK(in->bytes == head);
  CHECK(asked == 1);
  CHECK(std::equal(src->begin(), src->end(), dest->begin() + 50));
  CHECK(eps[1]->stats().bytes_placed == kLen);
  in = next_moving(*eps[0], *eps[1], deadline);
  REQUIRE(in);
  CHECK_FALSE(in->placed);
  CHECK(in->bytes == pattern(1000, 1));
}

TEST_CASE("shm: a payload lent for the call only (no keeper) is copied when it must wait for room", "[shm][lent]") {
  const auto group = test_group(8);
  auto eps = group_of(2, config(group, 1 << 20, 64 << 10));  // a 64 KiB inbox: most of it waits
  constexpr std::uint32_t kLen = 300'000;
  Bytes lent = pattern(kLen, 11);
  const Bytes want = lent;
  const Bytes head = pattern(20, 12);
  REQUIRE(eps[0]->unicast(2, head, lent, nullptr));
  std::fill(lent.begin(), lent.end(), std::byte{0xEE});  // the lender reuses its buffer at once
  CHECK(eps[0]->stats().lent_payloads_copied == 1);
  const auto deadline = Clock::now() + 10s;
  auto in = next_moving(*eps[0], *eps[1], deadline);
  REQUIRE(in);
  REQUIRE(in->bytes.size() == head.size() + kLen);
  CHECK(std::equal(head.begin(), head.end(), in->bytes.begin()));
  CHECK(std::equal(want.begin(), want.end(), in->bytes.begin() + static_cast<std::ptrdiff_t>(head.size())));
  // One that fits goes at once, and is not copied.
  REQUIRE(eps[0]->unicast(2, head, std::span<const std::byte>(want).subspan(0, 1000), nullptr));
  CHECK(eps[0]->stats().lent_payloads_copied == 1);
}

TEST_CASE("shm randomized: frames of random sizes from three writers, random inbox sizes, against a model",
          "[shm][randomized]") {
  // The model: each writer's frames arrive whole, once, in the order it sent them.
  for (std::uint32_t seed = 1; seed <= 12; ++seed) {
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    const std::size_t inbox = std::size_t{4096} << (rng() % 7);  // 4 KiB .. 256 KiB
    auto eps = group_of(4, config(test_group(100 + seed), 64 << 10, inbox));
    std::map<hmcast::MemberId, std::vector<Bytes>> sent;
    std::map<hmcast::MemberId, std::size_t> got;
    std::size_t expected = 0;
    for (int i = 0; i < 60; ++i) {
      const std::size_t w = rng() % 3;
      const std::size_t size = rng() % 4 == 0 ? 1 + rng() % 200'000 : 1 + rng() % 3000;
      Bytes f = pattern(size, seed * 1000 + static_cast<std::uint32_t>(i));
      REQUIRE(eps[w]->unicast(4, f));
      sent[eps[w]->id()].push_back(std::move(f));
      ++expected;
      // Now and then the receiver reads a little, so the writers meet a full inbox.
      while (rng() % 3 == 0)
        if (auto in = eps[3]->wait(Clock::now())) {
          REQUIRE(got[in->from] < sent[in->from].size());
          REQUIRE(in->bytes == sent[in->from][got[in->from]++]);
        }
    }
    std::size_t total = 0;
    const auto deadline = Clock::now() + 20s;
    while (Clock::now() < deadline) {
      total = 0;
      for (auto& [id, n] : got) total += n;
      if (total == expected) break;
      for (std::size_t w = 0; w < 3; ++w) (void)eps[w]->wait(Clock::now());  // writers move what waits
      if (auto in = eps[3]->wait(Clock::now() + 1ms)) {
        REQUIRE(got[in->from] < sent[in->from].size());
        REQUIRE(in->bytes == sent[in->from][got[in->from]++]);
      }
    }
    CHECK(total == expected);
    CHECK(eps[3]->stats().bad_input == 0);
    CHECK_FALSE(eps[3]->wait(Clock::now() + 5ms));  // nothing more, nothing twice
  }
}

TEST_CASE("shm: datagrams sent before a member attached reach it through its inbox, once attached through the log",
          "[shm]") {
  const auto group = test_group(40);
  const auto cfg = config(group);
  shm::Endpoint a(1, cfg);
  shm::Endpoint b(2, cfg);
  shm::Endpoint c(3, cfg);
  a.add_peer(2);
  a.add_peer(3);
  c.add_peer(1);  // c reads a's log from the start; b has not installed the view yet
  for (std::uint32_t n = 0; n < 3; ++n) a.multicast(numbered(n, 200 + n));
  CHECK(a.stats().datagrams_copied == 3);  // to b alone
  b.add_peer(1);                           // attaches at a's head: past the first three
  for (std::uint32_t n = 3; n < 5; ++n) a.multicast(numbered(n, 200 + n));
  CHECK(a.stats().datagrams_copied == 3);  // b reads the log from before the fourth
  for (shm::Endpoint* e : {&b, &c}) {
    std::vector<std::uint32_t> got;
    while (auto in = next(*e, 50ms)) {
      CHECK(in->datagram);
      CHECK(in->from == 1);
      CHECK(in->bytes == numbered(number_of(in->bytes), 200 + number_of(in->bytes)));
      got.push_back(number_of(in->bytes));
    }
    std::sort(got.begin(), got.end());
    CHECK(got == std::vector<std::uint32_t>{0, 1, 2, 3, 4});
  }
  CHECK(b.stats().copies_received == 3);
  CHECK(c.stats().copies_received == 0);
}

TEST_CASE("shm: a copy of a datagram for a member not yet attached never crowds out its frames", "[shm]") {
  const auto group = test_group(41);
  auto cfg = config(group, 1 << 20, 64 << 10);
  cfg.options.max_pending_bytes = 16 << 10;  // copies may take half of it
  shm::Endpoint a(1, cfg);
  shm::Endpoint b(2, cfg);
  a.add_peer(2);  // b never reads a's log, nor its inbox
  for (std::uint32_t n = 0; n < 100; ++n) a.multicast(numbered(n, 1000));
  // 64 KiB of inbox, then 8 KiB pending: the rest is left to the protocol's repairs.
  const auto copied = a.stats().datagrams_copied;
  CHECK(copied >= 60);
  CHECK(copied < 80);
  REQUIRE(a.unicast(2, pattern(6000, 9)));  // the link stays up, with room for a frame
  std::uint32_t datagrams = 0;
  bool frame = false;
  const auto deadline = Clock::now() + 5s;
  while (!frame && Clock::now() < deadline)
    if (auto in = next_moving(a, b, deadline)) {
      if (in->datagram) ++datagrams;
      else frame = in->bytes == pattern(6000, 9);
    }
  CHECK(frame);
  CHECK(datagrams == copied);
}

TEST_CASE("shm: a datagram that meets a full log waits for room, in order, and goes once the reader moves on",
          "[shm]") {
  const auto group = test_group(42);
  auto eps = group_of(2, config(group, 64 << 10));
  // 64 KiB of log holds 63 records of 1,000 bytes: the rest wait, none is dropped.
  for (std::uint32_t n = 0; n < 100; ++n) eps[0]->multicast(numbered(n, 1000));
  auto st = eps[0]->stats();
  CHECK(st.multicast_overruns == 0);
  CHECK(st.datagrams_waited > 30);
  CHECK(st.datagrams_sent + st.datagrams_waited == 100);
  std::vector<std::uint32_t> got;
  const auto deadline = Clock::now() + 5s;
  while (got.size() < 100 && Clock::now() < deadline)
    if (auto in = next_moving(*eps[0], *eps[1], deadline)) got.push_back(number_of(in->bytes));
  REQUIRE(got.size() == 100);
  for (std::uint32_t n = 0; n < 100; ++n) CHECK(got[n] == n);
  st = eps[0]->stats();
  CHECK(st.datagrams_sent == 100);
  // Past a log's worth waiting, the newest is dropped (the protocol repairs it): each
  // of these goes into the log, waits, or is dropped.
  for (std::uint32_t n = 0; n < 200; ++n) eps[0]->multicast(numbered(n, 1000));
  const auto after = eps[0]->stats();
  CHECK(after.multicast_overruns > 0);
  CHECK((after.datagrams_sent - st.datagrams_sent) + (after.datagrams_waited - st.datagrams_waited) +
            after.multicast_overruns ==
        200);
}

TEST_CASE("shm: a reader that attaches while two threads stream into the log misses nothing (the copies cover the race)",
          "[shm]") {
  for (int round = 0; round < 5; ++round) {
    const auto group = test_group(43 + static_cast<std::uint64_t>(round));
    // About 1.4 MB of datagrams: a log that, with a log's worth waiting for room, holds
    // them all however far the reader lags (past that the newest would be dropped),
    // and an inbox that holds every copy if the reader attaches last (past the inbox
    // and a log's worth pending, copies stop and the protocol's repairs take over).
    const auto cfg = config(group, 1 << 20, 2 << 20);
    shm::Endpoint a(1, cfg);
    shm::Endpoint b(2, cfg);
    a.add_peer(2);
    constexpr std::uint32_t kEach = 3000;  // numbers [0, kEach) from the main thread, the rest from another
    constexpr std::uint32_t kCount = 2 * kEach;
    constexpr std::uint32_t kBefore = 100;  // sent before the reader exists: copies for sure
    for (std::uint32_t n = 0; n < kBefore; ++n) a.multicast(numbered(n, 64 + n % 300));
    std::atomic<bool> reader_done{false};
    std::vector<bool> seen(kCount, false);
    std::uint32_t unique = 0;
    std::thread reader([&] {
      // Attaches while the writers go on, as a member that installs the view after
      // the sender: everything from the first datagram on must arrive.
      std::this_thread::sleep_for(std::chrono::microseconds(100 * (round + 1)));
      b.add_peer(1);
      const auto deadline = Clock::now() + 20s;
      while (unique < kCount && Clock::now() < deadline)
        if (auto in = b.wait(Clock::now() + 5ms); in && in->datagram && in->from == 1) {
          const std::uint32_t n = number_of(in->bytes);
          if (n < kCount && !seen[n]) {  // a copy and the log may both bring one
            seen[n] = true;
            ++unique;
          }
        }
      reader_done = true;
    });
    // multicast() from two threads: one may announce its record after the other has
    // learnt where the reader started.
    std::thread second([&] {
      for (std::uint32_t n = kEach; n < kCount; ++n) a.multicast(numbered(n, 64 + n % 300));
    });
    for (std::uint32_t n = kBefore; n < kEach; ++n) {
      a.multicast(numbered(n, 64 + n % 300));
      (void)a.poll();  // as the writer's progress would: what waits for room moves on
    }
    second.join();
    // The writer's progress goes on (datagrams waiting for room in its log, copies
    // waiting for room in the reader's inbox) until the reader has them all.
    while (!reader_done.load()) (void)a.wait(Clock::now() + 1ms);
    reader.join();
    CHECK(unique == kCount);
    const auto st = a.stats();
    CHECK(st.multicast_overruns == 0);
    CHECK(st.datagrams_copied >= kBefore);
  }
}

TEST_CASE("shm: a datagram given in two parts arrives as one, through the log, the wait for room and a late copy",
          "[shm]") {
  // Endpoint::multicast(head, tail): a fragment's header and its payload, read from
  // the message where it lies (Emitter::fragment). Each reader gets head + tail whole,
  // whichever way the record reaches it.
  const auto group = test_group(43);
  auto cfg = config(group, 64 << 10);
  shm::Endpoint a(1, cfg);
  shm::Endpoint b(2, cfg);
  shm::Endpoint c(3, cfg);
  a.add_peer(2);
  a.add_peer(3);
  b.add_peer(1);  // c has not installed the view: its datagrams go by copy
  auto whole = [](std::uint32_t n) { return numbered(n, 1500 + n); };
  auto send = [&](std::uint32_t n) {
    const Bytes w = whole(n);
    const std::size_t cut = 40 + n % 7;  // a head of a few dozen bytes, as a Data header's
    a.multicast(std::span(w).first(cut), std::span(w).subspan(cut));
  };
  // 64 KiB of log holds about 40 of these: the rest wait for b, in two parts joined.
  for (std::uint32_t n = 0; n < 60; ++n) send(n);
  auto st = a.stats();
  CHECK(st.datagrams_waited > 10);
  CHECK(st.multicast_overruns == 0);
  CHECK(st.datagrams_copied > 0);  // to c, not yet attached
  std::vector<std::uint32_t> got;
  const auto deadline = Clock::now() + 5s;
  while (got.size() < 60 && Clock::now() < deadline)
    if (auto in = next_moving(a, b, deadline)) {
      CHECK(in->datagram);
      CHECK(in->bytes == whole(number_of(in->bytes)));
      got.push_back(number_of(in->bytes));
    }
  REQUIRE(got.size() == 60);
  for (std::uint32_t n = 0; n < 60; ++n) CHECK(got[n] == n);
  std::uint32_t copies = 0;
  while (auto in = next(c, 50ms)) {
    CHECK(in->datagram);
    CHECK(in->bytes == whole(number_of(in->bytes)));
    ++copies;
  }
  CHECK(copies == a.stats().datagrams_copied);  // those that waited were copied as they went
  CHECK(copies == 60);
  // A tail alone, or a head alone, is a datagram too.
  const Bytes w = whole(99);
  a.multicast({}, w);
  a.multicast(w, {});
  for (int i = 0; i < 2; ++i) {
    auto in = next_moving(a, b, Clock::now() + 5s);
    REQUIRE(in);
    CHECK(in->bytes == w);
  }
}

TEST_CASE("shm: a long datagram's payload goes from the log straight where the placer says, its head alone handed on",
          "[shm][placement]") {
  // Link::places_datagrams: the reader copies the head (wire::kDataOverhead bytes)
  // out of the log, asks the placer, and copies the payload there; a datagram the
  // placer declines, or one too short to ask about, arrives whole.
  const auto group = test_group(44);
  auto cfg = config(group);
  cfg.mtu = 67'584;
  auto eps = group_of(2, cfg);
  auto dest = std::make_shared<Bytes>(70'000, std::byte{0});
  int asked = 0;
  bool decline = false;
  eps[1]->set_block_placer([&](hmcast::MemberId from, std::span<const std::byte> head, std::size_t size)
                               -> std::optional<hmcast::transport::Placement> {
    ++asked;
    CHECK(from == 1);
    REQUIRE(head.size() == hmcast::wire::kDataOverhead);
    if (decline) return std::nullopt;
    return hmcast::transport::Placement{std::span(*dest).subspan(100, size - head.size()), dest};
  });
  const Bytes big = numbered(5, 60'000);
  const std::span head = std::span(big).first(hmcast::wire::kDataOverhead);
  eps[0]->multicast(head, std::span(big).subspan(hmcast::wire::kDataOverhead));
  auto in = next(*eps[1]);
  REQUIRE(in);
  CHECK(in->datagram);
  CHECK(in->placed);
  CHECK(in->placed_size == big.size() - hmcast::wire::kDataOverhead);
  CHECK(in->placed_into == dest);
  CHECK(in->placed_at == dest->data() + 100);
  CHECK(std::equal(in->bytes.begin(), in->bytes.end(), head.begin(), head.end()));
  CHECK(std::equal(big.begin() + hmcast::wire::kDataOverhead, big.end(), dest->begin() + 100));
  CHECK(eps[1]->stats().datagram_bytes_placed == in->placed_size);
  CHECK(asked == 1);
  decline = true;  // declined: whole
  eps[0]->multicast(big);
  in = next(*eps[1]);
  REQUIRE(in);
  CHECK_FALSE(in->placed);
  CHECK(in->bytes == big);
  CHECK(asked == 2);
  decline = false;  // short: not asked
  eps[0]->multicast(numbered(6, 2000));
  in = next(*eps[1]);
  REQUIRE(in);
  CHECK_FALSE(in->placed);
  CHECK(in->bytes == numbered(6, 2000));
  CHECK(asked == 2);
}

namespace {

/// A file that looks like a member's to remove_stale_files(): a Header, its words
/// as given, then zeros (a member file's size at least).
void write_member_file(const std::string& path, std::uint64_t magic, std::uint32_t version, std::uint32_t pid,
                       std::uint32_t pid_ns, std::size_t size = sizeof(shm::Header)) {
  std::vector<std::byte> bytes(size);
  shm::Header h;
  h.magic = magic;
  h.version = version;
  h.pid = pid;
  h.pid_ns = pid_ns;
  const std::size_t n = std::min(size, offsetof(shm::Header, multicast_capacity));
  std::memcpy(bytes.data(), &h, n);
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

bool path_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

}  // namespace

TEST_CASE("shm: stale files are those of a dead process of our pid namespace, with our magic and version, and no others",
          "[shm]") {
  // In a directory of its own (no other process sweeps it), every case side by side.
  char tmpl[] = "/tmp/hmcast-stale-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const pid_t dead = ::fork();
  REQUIRE(dead >= 0);
  if (dead == 0) ::_exit(0);
  int status = 0;
  REQUIRE(::waitpid(dead, &status, 0) == dead);  // reaped: its pid names nobody now
  const auto dead_pid = static_cast<std::uint32_t>(dead);
  const auto self = static_cast<std::uint32_t>(::getpid());
  const std::uint32_t ns = shm::pid_namespace();
  REQUIRE(ns != 0);
  REQUIRE_FALSE(shm::process_alive(dead_pid));
  REQUIRE(shm::process_alive(self));
  const std::string group = "hmcast-00000000000000ab-";
  const auto at = [&](const std::string& name) { return dir + "/" + name; };
  write_member_file(at(group + "1"), shm::kMagic, shm::kVersion, dead_pid, ns, sizeof(shm::Header) + 4096);  // stale
  write_member_file(at(group + "2"), shm::kMagic, shm::kVersion, dead_pid, ns);             // stale
  write_member_file(at(group + "3"), shm::kMagic, shm::kVersion, self, ns);                 // alive
  write_member_file(at(group + "4"), shm::kMagic, shm::kVersion, dead_pid, ns + 1);         // another namespace
  write_member_file(at(group + "5"), 0, 0, dead_pid, ns);                                   // being made
  write_member_file(at(group + "6"), shm::kMagic, shm::kVersion + 1, dead_pid, ns);         // another version
  write_member_file(at(group + "7"), shm::kMagic, shm::kVersion, 0, ns);                    // no pid
  write_member_file(at(group + "8"), shm::kMagic, shm::kVersion, dead_pid, ns, 40);         // too short
  write_member_file(at("hmcast-notamember-1"), shm::kMagic, shm::kVersion, dead_pid, ns);  // not our name
  write_member_file(at("hmcast-00000000000000AB-1"), shm::kMagic, shm::kVersion, dead_pid, ns);  // nor this
  write_member_file(at(group + "x1"), shm::kMagic, shm::kVersion, dead_pid, ns);                 // nor this

  CHECK(shm::remove_stale_files(dir.c_str()) == 2);
  CHECK_FALSE(path_exists(at(group + "1")));
  CHECK_FALSE(path_exists(at(group + "2")));
  for (const char* kept : {"3", "4", "5", "6", "7", "8"}) {
    INFO("member " << kept);
    CHECK(path_exists(at(group + kept)));
  }
  CHECK(path_exists(at("hmcast-notamember-1")));
  CHECK(path_exists(at("hmcast-00000000000000AB-1")));
  CHECK(path_exists(at(group + "x1")));
  CHECK(shm::remove_stale_files(dir.c_str()) == 0);  // nothing new
  CHECK(shm::remove_stale_files((dir + "/none").c_str()) == 0);  // no such directory: nothing, no error
  for (const char* name : {"3", "4", "5", "6", "7", "8", "x1"}) ::unlink(at(group + name).c_str());
  ::unlink(at("hmcast-notamember-1").c_str());
  ::unlink(at("hmcast-00000000000000AB-1").c_str());
  CHECK(::rmdir(dir.c_str()) == 0);  // nothing else was left in it
}

TEST_CASE("shm: a member that starts removes the files of members killed with their whole group", "[shm]") {
  // A child process makes members 1-3 of a group and dies by SIGKILL: nobody of
  // that group is left to remove their files. Member 3's header first says it
  // belongs to another pid namespace (where our pid means nothing): it must stay.
  // Other test processes may start members meanwhile and remove the stale ones
  // first; either way they are gone once a member has started here.
  const auto dead_group = test_group(61);
  const auto cfg = config(dead_group, 64 << 10, 64 << 10);
  int ready[2] = {-1, -1};
  REQUIRE(::pipe(ready) == 0);
  const pid_t doomed = ::fork();
  REQUIRE(doomed >= 0);
  if (doomed == 0) {  // nothing of Catch2 here
    std::vector<std::unique_ptr<shm::Endpoint>> eps;
    for (hmcast::MemberId m = 1; m <= 3; ++m) eps.push_back(std::make_unique<shm::Endpoint>(m, cfg));
    const int fd = ::shm_open(shm::file_name(dead_group, 3).c_str(), O_RDWR, 0);
    if (fd < 0) ::_exit(2);
    void* p = ::mmap(nullptr, sizeof(shm::Header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) ::_exit(3);
    static_cast<shm::Header*>(p)->pid_ns += 1;
    if (::write(ready[1], "d", 1) != 1) ::_exit(4);
    ::raise(SIGKILL);
    ::_exit(5);
  }
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  int status = 0;
  REQUIRE(::waitpid(doomed, &status, 0) == doomed);
  REQUIRE(WIFSIGNALED(status));
  CHECK_FALSE(shm::process_alive(static_cast<std::uint32_t>(doomed)));
  REQUIRE(file_exists(dead_group, 3));
  shm::Endpoint starting(1, config(test_group(63)));
  CHECK_FALSE(file_exists(dead_group, 1));
  CHECK_FALSE(file_exists(dead_group, 2));
  CHECK(file_exists(dead_group, 3));
  CHECK(file_exists(test_group(63), 1));
  ::shm_unlink(shm::file_name(dead_group, 3).c_str());
  ::close(ready[0]);
  ::close(ready[1]);
}
