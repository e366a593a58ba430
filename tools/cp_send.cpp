#include "cp_send.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>

#include "cp_digest.hpp"
#include "cp_progress.hpp"
#include "cp_wire.hpp"
#include "mono_clock.hpp"
#include "process_info.hpp"

namespace hmcast::tools::cp {
namespace {

/// What the group tells the source while it sends: the receivers' verdicts, who left.
struct Verdicts {
  std::mutex mu;
  std::condition_variable changed;
  std::set<MemberId> receivers;              // of the first view
  std::map<MemberId, Report> reports;
  std::map<MemberId, std::string> failures;  // receivers that failed, and why
  std::optional<std::string> stopped;        // this member cannot go on
  std::uint64_t bad_messages = 0;

  [[nodiscard]] bool settled() const {
    for (const auto m : receivers)
      if (!reports.contains(m) && !failures.contains(m)) return false;
    return true;
  }
};

class FileReader {
 public:
  explicit FileReader(const SourceEntry& e) : entry_(e), fd_(::open(e.path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw std::runtime_error(e.path.string() + ": cannot open: " + std::strerror(errno));
  }
  ~FileReader() { ::close(fd_); }
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  /// Fills `out` from `offset`; the file must still hold those bytes.
  void read_at(std::span<std::byte> out, std::uint64_t offset) {
    std::size_t got = 0;
    while (got < out.size()) {
      const ssize_t n = ::pread(fd_, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(entry_.path.string() + ": cannot read: " + std::strerror(errno));
      if (n == 0) throw changed();
      got += static_cast<std::size_t>(n);
    }
  }
  /// After the last chunk: a file that grew meanwhile was not sent whole.
  void check_size_unchanged() {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw std::runtime_error(entry_.path.string() + ": " + std::strerror(errno));
    if (static_cast<std::uint64_t>(st.st_size) != entry_.size) throw changed();
  }

 private:
  [[nodiscard]] std::runtime_error changed() const {
    return std::runtime_error(entry_.path.string() +
                              " changed size while it was sent: copy it again once nothing writes to it");
  }
  const SourceEntry& entry_;
  int fd_;
};

/// Broadcasts messages, holding at most a bounded number of bytes not yet at every receiver.
class Sender {
 public:
  Sender(Group& g, const SendOptions& o, Progress& progress) : g_(g), o_(o), progress_(progress) {}

  void send(OutgoingMessage&& m, std::uint64_t data_bytes) {
    in_flight_.push_back({g_.broadcast(std::move(m)), data_bytes});
    in_flight_bytes_ += data_bytes;
    sent_ += data_bytes;
    if (o_.crash_after && sent_ >= *o_.crash_after) ::raise(SIGKILL);  // tests: a source that dies mid-way
    while (in_flight_bytes_ > o_.in_flight_bytes) settle_oldest();
  }
  void send(const std::vector<std::byte>& bytes) { in_flight_.push_back({g_.broadcast(bytes), 0}); }
  void drain() {
    while (!in_flight_.empty()) settle_oldest();
  }
  [[nodiscard]] std::uint64_t bytes_done() const { return done_; }

 private:
  void settle_oldest() {
    auto [c, bytes] = in_flight_.front();
    in_flight_.pop_front();
    c.get();  // throws hmcast::Error if this member cannot go on
    in_flight_bytes_ -= bytes;
    done_ += bytes;
    progress_.update(done_);
  }
  Group& g_;
  const SendOptions& o_;
  Progress& progress_;
  std::deque<std::pair<Completion, std::uint64_t>> in_flight_;
  std::uint64_t in_flight_bytes_ = 0;
  std::uint64_t done_ = 0;
  std::uint64_t sent_ = 0;
};

}  // namespace

SendOutcome send_tree(Group& g, const SourceTree& tree, const SendOptions& o) {
  HMCAST_ASSERT(o.chunk_bytes > 0);
  const std::uint64_t transfer = std::random_device{}() | (std::uint64_t{std::random_device{}()} << 32);
  Verdicts v;
  {
    const View first = g.view();
    std::lock_guard lock(v.mu);
    for (const auto m : first.members)
      if (m != g.self()) v.receivers.insert(m);
  }
  g.on_view_change([&v](const View&, std::span<const MemberId> left) {
    std::lock_guard lock(v.mu);
    for (const auto m : left)
      if (v.receivers.contains(m) && !v.reports.contains(m))
        v.failures.emplace(m, "left the group before it reported (it crashed, or was removed): its files are not complete");
    v.changed.notify_all();
  });
  g.on_deliver([&v, transfer, self = g.self()](const Delivery& d) {
    if (d.sender == self) return;
    auto dec = decode(d.bytes);
    std::lock_guard lock(v.mu);
    const auto* report = dec.message ? std::get_if<Report>(&dec.message->body) : nullptr;
    if (report == nullptr || dec.message->transfer != transfer || !v.receivers.contains(d.sender)) {
      ++v.bad_messages;
      return;
    }
    if (!report->ok) v.failures.emplace(d.sender, report->error);
    v.reports.emplace(d.sender, *report);
    v.changed.notify_all();
  });
  g.on_stopped([&v](const Error& e) {
    std::lock_guard lock(v.mu);
    v.stopped = e.what();
    v.changed.notify_all();
  });

  // The callbacks above capture this frame: no callback may run once it is gone.
  struct LeaveOnExit {
    Group& g;
    ~LeaveOnExit() { g.leave(); }
  } leave_on_exit{g};
  Progress progress(o.progress, tree.bytes, o.progress_terminal);
  Sender out(g, o, progress);
  const double cpu0 = process_cpu_seconds().total();
  const auto t0 = mono_ns();
  for (const auto& d : tree.directories) out.send(encode(transfer, Directory{d.mode, d.name}));
  // Files are read in order into messages of up to chunk_bytes of data: a large
  // file spans messages, small ones share one.
  struct Planned {
    std::uint32_t file;
    std::uint64_t offset, len;
  };
  std::uint32_t next_file = 0;
  std::uint64_t next_offset = 0;
  std::unique_ptr<FileReader> reader;  // the file being read, across messages
  std::unique_ptr<FileDigest> digest;
  while (next_file < tree.files.size()) {
    std::vector<Planned> plan;
    std::uint64_t data = 0;
    std::size_t total = pieces_header_size();
    while (next_file < tree.files.size() && plan.size() < kMaxPieces && (plan.empty() || data < o.chunk_bytes)) {
      const SourceEntry& f = tree.files[next_file];
      const std::uint64_t len = std::min(f.size - next_offset, o.chunk_bytes - data);
      plan.push_back({next_file, next_offset, len});
      data += len;
      total += piece_header_size(f.name) + len;
      next_offset += len;
      if (next_offset == f.size) {
        ++next_file;
        next_offset = 0;
      }
    }
    OutgoingMessage m = g.prepare(total);
    const auto bytes = m.bytes();
    encode_pieces_header(bytes.first(pieces_header_size()), transfer, plan.size());
    std::size_t at = pieces_header_size();
    for (const auto& p : plan) {
      const SourceEntry& f = tree.files[p.file];
      if (p.offset == 0) {
        reader = std::make_unique<FileReader>(f);
        digest = std::make_unique<FileDigest>();
      }
      HMCAST_ASSERT(reader && digest);
      const std::size_t header = piece_header_size(f.name);
      const auto piece = bytes.subspan(at + header, p.len);
      reader->read_at(piece, p.offset);
      digest->update(piece);
      Chunk c{.file = p.file, .mode = f.mode, .size = f.size, .offset = p.offset,
              .last = p.offset + p.len == f.size, .digest = {}, .name = f.name, .data = piece};
      if (c.last) {
        reader->check_size_unchanged();
        c.digest = digest->digest();
      }
      encode_piece_header(bytes.subspan(at, header), c);
      at += header + p.len;
      if (c.last) {
        reader.reset();
        digest.reset();
      }
    }
    HMCAST_ASSERT(at == total);
    out.send(std::move(m), data);
  }
  out.send(encode(transfer, End{static_cast<std::uint32_t>(tree.files.size()),
                                static_cast<std::uint32_t>(tree.directories.size()), tree.bytes}));
  out.drain();
  const auto t_sent = mono_ns();
  progress.finish(out.bytes_done());

  std::unique_lock lock(v.mu);
  const bool in_time = v.changed.wait_for(lock, o.report_timeout, [&] { return v.settled() || v.stopped; });
  if (!in_time)
    for (const auto m : v.receivers)
      if (!v.reports.contains(m) && !v.failures.contains(m))
        v.failures.emplace(m, "sent no verdict within " + std::to_string(o.report_timeout.count()) +
                                  " s of the last byte (its disk may be slow: see --report-timeout)");
  const auto t_reported = mono_ns();
  SendOutcome r;
  std::uint32_t verified = 0;
  for (const auto& [m, rep] : v.reports)
    if (rep.ok && rep.files_verified == tree.files.size() && rep.bytes_verified == tree.bytes) ++verified;
  r.all_verified = !v.stopped && verified == v.receivers.size() && v.failures.empty();
  const double secs = static_cast<double>(t_sent - t0) / 1e9;
  r.summary = {{"files", tree.files.size()},
               {"directories", tree.directories.size()},
               {"bytes", tree.bytes},
               {"skipped", tree.skipped},
               {"receivers", v.receivers.size()},
               {"verified", verified},
               {"seconds", secs},
               {"seconds_with_verdicts", static_cast<double>(t_reported - t0) / 1e9},
               {"bytes_per_second", secs > 0 ? static_cast<double>(tree.bytes) / secs : 0.0},
               {"cpu_seconds", process_cpu_seconds().total() - cpu0},
               {"bad_messages", v.bad_messages},
               {"ok", r.all_verified}};
  nlohmann::json failures = nlohmann::json::array();
  for (const auto& [m, why] : v.failures) failures.push_back({{"member", m}, {"error", why}});
  r.summary["failures"] = failures;
  if (v.stopped) r.summary["stopped"] = *v.stopped;
  lock.unlock();

  // Receivers wait for this (or for the source to leave) before they leave themselves.
  if (!v.stopped) {
    try {
      g.broadcast(encode(transfer, Finish{})).get();
    } catch (const Error&) {
      // Every receiver also stops when the source leaves: nothing is lost.
    }
  }
  return r;
}

}  // namespace hmcast::tools::cp
