#include "policy/profile.hpp"

#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

namespace hmcast::policy {

namespace {

[[noreturn]] void fail(const std::string& what) { throw ProfileError("profile: " + what); }

template <class T>
void check_range(const char* key, T v, T lo, T hi) {
  if (v < lo || v > hi)
    fail(std::string(key) + " = " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
         std::to_string(hi) + "]");
}

template <class T>
T number(std::string_view key, std::string_view text, int line) {
  T v{};
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc{} || ptr != end)
    fail("line " + std::to_string(line) + ": " + std::string(key) + " needs a whole number in range, not '" +
         std::string(text) + "'");
  return v;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

Profile builtin_profile(std::string_view transport, std::uint32_t datagram) {
  Profile p;
  p.transport = std::string(transport);
  if (transport == "socket") {
    // Measured on loopback and on the emulated cluster (docs/benchmarks.md): every
    // process is woken by the kernel, so each ACK-tree level costs a wake-up;
    // up to 16 members one level (all ACK the sender) is fastest.
    p.flat_tree_max_group = 16;
    p.tree_radix = 4;
    p.ack_interval_ns = 20'000;
    // Where the large path overtakes the small one grows with the group: on loopback
    // about 64 KiB at 2 members, 64-256 KiB at 4 and 256 KiB-1 MiB at 8
    // (docs/benchmarks.md, "The small/large crossover").
    p.small_bytes_per_member = 48U << 10;
    if (datagram >= kLargeDatagram) {
      // 64 KiB datagrams (loopback): each carries eight times as much, so the small
      // path stays the faster one far longer: 1 MiB at 4 members and 1-2 MiB at 8
      // (docs/benchmarks.md, "The crossover with 64 KiB datagrams"). Members must
      // accept what the route sends.
      p.small_bytes_per_member = 256U << 10;
      p.max_small_message = 4U << 20;
    }
    // A member process may be descheduled for tens of milliseconds on shared cores
    // (and a host's own sending queues its credits behind its data): two blocks of
    // credit asked 512 KiB early keep the links busier than one asked 256 KiB early;
    // four let senders crowd a receiver's link. Blocks: a slow step delays every
    // later one, and a smaller block shortens the stall, down to where per-block
    // costs win. Segments: every send and receive on a TCP link costs a pass through
    // the kernel's stack whatever its size, which on loopback and fast links is most
    // of a segment's time; a relay forwards a segment only once it holds it all,
    // which on slow links lengthens each hop. The measurements: docs/benchmarks.md,
    // "Figures behind the defaults" and "Blocks and segments".
    p.receive_window = 2;
    p.credit_lead_bytes = 512U << 10;
    p.min_block_size = 512U << 10;
    p.target_blocks = 256;
    p.segment_size = 256U << 10;
  } else if (transport == "shm") {
    // The socket profile (the same processes on one host, woken the same way), but a
    // datagram is written once into the sender's log and read by all, while the large
    // path moves every block through each receiver's inbox, member to member: the
    // small path stays faster up to about 1 MiB per receiver: 1 MiB at 2 members
    // and 3 MiB at 4 (docs/benchmarks.md, "Members on one host" and "The shared
    // memory crossover by receivers"). At most half of the default multicast log
    // (ShmOptions), so one message never overruns a reader that is a little behind.
    p = builtin_profile("socket");  // the 8 KiB one: the shm figures below replace its crossover
    p.transport = std::string(transport);
    p.small_bytes_per_member = 0;
    p.small_bytes_per_receiver = 1U << 20;
    p.max_small_message = 4U << 20;
    // The blocks and segments this transport was measured with (its large path
    // copies through the receivers' inboxes, with no system call per segment to
    // save); the socket's larger ones are untried here.
    p.min_block_size = 128U << 10;
    p.segment_size = 64U << 10;
  } else if (transport == "verbs") {
    // Polled completion queues: a hop costs a few microseconds, the sender's
    // receive queue is the limit. Panda's RDMA collectives: degree 3 best for the
    // smallest messages; 8 direct children keep the root's work small.
    p.flat_tree_max_group = 8;
    p.tree_radix = 3;
    p.ack_interval_ns = 1'000;
  } else if (transport == "sim") {
    p.flat_tree_max_group = 4;
    p.tree_radix = 2;
    p.ack_interval_ns = 1'000;
  } else if (transport == "inproc") {
    p.flat_tree_max_group = 16;
    p.tree_radix = 4;
  } else {
    fail("no built-in profile for transport '" + std::string(transport) + "' (socket, shm, verbs, sim or inproc)");
  }
  return p;
}

void validate(const Profile& p) {
  if (p.transport.empty() || p.transport.size() > 32 || p.transport.find_first_of(" \t\r\n#") != std::string::npos)
    fail("transport must be one word of at most 32 characters");
  check_range("max_small_message", p.max_small_message, bounds::kMinSmall, bounds::kMaxSmall);
  check_range("small_bytes_per_member", p.small_bytes_per_member, 0U, bounds::kMaxSmall);
  check_range("small_bytes_per_receiver", p.small_bytes_per_receiver, 0U, bounds::kMaxSmall);
  if (p.small_bytes_per_member != 0 && p.small_bytes_per_receiver != 0)
    fail("small_bytes_per_member and small_bytes_per_receiver are both set: the route scales with one of them, "
         "set the other to 0");
  check_range("flat_tree_max_group", p.flat_tree_max_group, 1U, bounds::kMaxFlatGroup);
  check_range("tree_radix", p.tree_radix, 2U, bounds::kMaxRadix);
  check_range("min_block_size", p.min_block_size, bounds::kMinBlock, bounds::kMaxBlock);
  check_range("max_block_size", p.max_block_size, p.min_block_size, bounds::kMaxBlock);
  check_range("target_blocks", p.target_blocks, 1U, bounds::kMaxTargetBlocks);
  check_range("segment_size", p.segment_size, bounds::kMinSegment, bounds::kMaxBlock);
  check_range("ack_interval_ns", p.ack_interval_ns, std::int64_t{0}, bounds::kMaxAckIntervalNs);
  check_range("receive_window", p.receive_window, 1U, bounds::kMaxReceiveWindow);
  check_range("credit_lead_bytes", p.credit_lead_bytes, std::uint64_t{0}, bounds::kMaxCreditLead);
}

std::string format_profile(const Profile& p) {
  validate(p);
  std::ostringstream out;
  out << "hmcast-profile " << kProfileVersion << "\n"
      << "transport " << p.transport << "\n"
      << "max_small_message " << p.max_small_message << "\n"
      << "small_bytes_per_member " << p.small_bytes_per_member << "\n"
      << "small_bytes_per_receiver " << p.small_bytes_per_receiver << "\n"
      << "flat_tree_max_group " << p.flat_tree_max_group << "\n"
      << "tree_radix " << p.tree_radix << "\n"
      << "min_block_size " << p.min_block_size << "\n"
      << "max_block_size " << p.max_block_size << "\n"
      << "target_blocks " << p.target_blocks << "\n"
      << "segment_size " << p.segment_size << "\n"
      << "ack_interval_ns " << p.ack_interval_ns << "\n"
      << "receive_window " << p.receive_window << "\n"
      << "credit_lead_bytes " << p.credit_lead_bytes << "\n";
  return out.str();
}

Profile parse_profile(std::string_view text) {
  if (text.size() > 64 * 1024) fail("file is over 64 KiB: not a profile");
  Profile p;
  std::map<std::string, int> seen;
  int line_no = 0;
  bool have_version = false;
  int version = 0;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    if (const auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    const auto sp = line.find_first_of(" \t");
    if (sp == std::string_view::npos) fail("line " + std::to_string(line_no) + ": expected 'key value'");
    const std::string key(line.substr(0, sp));
    const std::string_view value = trim(line.substr(sp));
    if (!have_version) {
      if (key != "hmcast-profile")
        fail("line " + std::to_string(line_no) + ": the first line must be 'hmcast-profile " +
             std::to_string(kProfileVersion) + "'");
      const int v = number<int>(key, value, line_no);
      version = v;
      if (v < 1 || v > kProfileVersion)
        fail("version " + std::to_string(v) + " is not supported (this build reads version " +
             std::to_string(kProfileVersion) + "): calibrate again with `hmcast bench --calibrate`");
      have_version = true;
      continue;
    }
    if (++seen[key] > 1) fail("line " + std::to_string(line_no) + ": " + key + " appears twice");
    if (key == "transport") {
      p.transport = std::string(value);
    } else if (key == "max_small_message") {
      p.max_small_message = number<std::uint32_t>(key, value, line_no);
    } else if (key == "small_bytes_per_member" && version >= 2) {
      p.small_bytes_per_member = number<std::uint32_t>(key, value, line_no);
    } else if (key == "small_bytes_per_receiver" && version >= 4) {
      p.small_bytes_per_receiver = number<std::uint32_t>(key, value, line_no);
    } else if (key == "flat_tree_max_group") {
      p.flat_tree_max_group = number<std::uint32_t>(key, value, line_no);
    } else if (key == "tree_radix") {
      p.tree_radix = number<std::uint32_t>(key, value, line_no);
    } else if (key == "min_block_size") {
      p.min_block_size = number<std::uint64_t>(key, value, line_no);
    } else if (key == "max_block_size") {
      p.max_block_size = number<std::uint64_t>(key, value, line_no);
    } else if (key == "target_blocks") {
      p.target_blocks = number<std::uint32_t>(key, value, line_no);
    } else if (key == "segment_size" && version >= 3) {
      p.segment_size = number<std::uint64_t>(key, value, line_no);
    } else if (key == "ack_interval_ns") {
      p.ack_interval_ns = number<std::int64_t>(key, value, line_no);
    } else if (key == "receive_window") {
      p.receive_window = number<std::uint32_t>(key, value, line_no);
    } else if (key == "credit_lead_bytes") {
      p.credit_lead_bytes = number<std::uint64_t>(key, value, line_no);
    } else {
      fail("line " + std::to_string(line_no) + ": unknown key '" + key + "'");
    }
  }
  if (!have_version) fail("empty: the first line must be 'hmcast-profile " + std::to_string(kProfileVersion) + "'");
  for (const char* k : {"transport", "max_small_message", "flat_tree_max_group", "tree_radix", "min_block_size",
                        "max_block_size", "target_blocks", "ack_interval_ns", "receive_window", "credit_lead_bytes"})
    if (seen[k] != 1) fail(std::string("missing key '") + k + "'");
  if (version >= 2 && seen["small_bytes_per_member"] != 1) fail("missing key 'small_bytes_per_member'");
  if (version >= 3 && seen["segment_size"] != 1) fail("missing key 'segment_size'");
  if (version >= 4 && seen["small_bytes_per_receiver"] != 1) fail("missing key 'small_bytes_per_receiver'");
  validate(p);
  return p;
}

Profile load_profile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read '" + path + "': check the path (write one with `hmcast bench --calibrate --profile-out`)");
  std::string text;
  char buf[4096];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(f.gcount()));
    if (text.size() > 64 * 1024) fail("'" + path + "' is over 64 KiB: not a profile");
  }
  try {
    return parse_profile(text);
  } catch (const ProfileError& e) {
    throw ProfileError(std::string(e.what()) + " (in '" + path + "')");
  }
}

}  // namespace hmcast::policy
