#include "cp_receive.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "core/overloaded.hpp"
#include "cp_digest.hpp"
#include "cp_wire.hpp"
#include "mono_clock.hpp"
#include "process_info.hpp"

namespace hmcast::tools::cp {
namespace fs = std::filesystem;
namespace {

// Files being written at once: the source sends one file after another, so only
// a few are ever open (a large file's last small chunk may overtake the rest).
constexpr std::size_t kMaxOpenFiles = 1024;
constexpr std::size_t kReadBackBlock = 4U << 20;
constexpr auto kReportSettle = std::chrono::seconds(10);  // a failing receiver's verdict reaching the others

struct Arrived {
  MemberId sender = 0;
  std::span<const std::byte> bytes;
  std::shared_ptr<const std::vector<std::byte>> buffer;  // owns `bytes`
};
struct Left {
  std::vector<MemberId> members;
};
struct Stopped {
  std::string why;
};
using Event = std::variant<Arrived, Left, Stopped>;

/// From the progress thread to the writer: deliveries wait (and so hold the
/// group's ACKs back) while `limit` bytes are not yet written.
class Inbox {
 public:
  explicit Inbox(std::uint64_t limit) : limit_(limit) {}
  void push(Event e) {
    std::unique_lock lock(mu_);
    if (const auto* a = std::get_if<Arrived>(&e)) {
      const std::uint64_t n = a->bytes.size();
      space_.wait(lock, [&] { return closed_ || bytes_ == 0 || bytes_ + n <= limit_; });
      if (closed_) return;
      bytes_ += n;
    }
    events_.push_back(std::move(e));
    ready_.notify_one();
  }
  Event pop() {
    std::unique_lock lock(mu_);
    ready_.wait(lock, [&] { return !events_.empty(); });
    Event e = std::move(events_.front());
    events_.pop_front();
    if (const auto* a = std::get_if<Arrived>(&e)) {
      bytes_ -= a->bytes.size();
      space_.notify_all();
    }
    return e;
  }
  /// The writer is done: deliveries are dropped from now on, never waited for.
  void close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    space_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable ready_, space_;
  std::deque<Event> events_;
  std::uint64_t bytes_ = 0;
  std::uint64_t limit_;
  bool closed_ = false;
};

std::string errno_text(const std::string& what, int err) {
  std::string s = what + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) s += " (free some space there, or choose another --into)";
  return s;
}

std::string hex(std::uint64_t v) {
  char t[17];
  std::snprintf(t, sizeof t, "%016llx", static_cast<unsigned long long>(v));
  return t;
}

struct IncomingFile {
  std::string name;
  std::uint64_t size = 0;
  std::uint32_t mode = 0;
  fs::path temp, final;
  int fd = -1;
  std::uint64_t written = 0;
  std::optional<Digest> digest;
  bool done = false;
};

/// Writes one transfer under `into`; the first failure sticks (error()).
class TreeWriter {
 public:
  explicit TreeWriter(const ReceiveOptions& o) : o_(o) {}
  ~TreeWriter() { remove_partial_files(); }
  TreeWriter(const TreeWriter&) = delete;
  TreeWriter& operator=(const TreeWriter&) = delete;

  void on_message(MemberId sender, std::span<const std::byte> bytes) {
    auto dec = decode(bytes);
    if (!dec.message) {
      ++bad_;
      return;
    }
    const Message& m = *dec.message;
    if (std::holds_alternative<Report>(m.body)) return;  // another receiver's verdict
    if (!source_) {
      source_ = sender;
      transfer_ = m.transfer;
    }
    if (sender != *source_ || m.transfer != *transfer_) {
      ++bad_;
      return;
    }
    std::visit(Overloaded{
                   [&](const Pieces& p) {
                     for (const Chunk& c : p.chunks)
                       if (!error_) on_chunk(c);
                   },
                   [&](const Directory& d) {
                     if (!error_) on_directory(d);
                   },
                   [&](const End& e) { end_ = e; },
                   [&](const Report&) {},
                   [&](const Finish&) { finished_ = true; },
               },
               m.body);
  }

  void fail(std::string why) {
    if (!error_) error_ = std::move(why);
  }
  [[nodiscard]] const std::optional<std::string>& error() const { return error_; }
  [[nodiscard]] std::optional<MemberId> source() const { return source_; }
  [[nodiscard]] std::optional<std::uint64_t> transfer() const { return transfer_; }
  [[nodiscard]] bool finished() const { return finished_; }
  [[nodiscard]] bool complete() const {
    return !error_ && end_ && verified_ == end_->files && dirs_.size() == end_->directories &&
           bytes_verified_ == end_->bytes;
  }

  /// Once complete: directories get their modes last (a read-only one would have
  /// refused the files written into it), deepest first.
  void apply_directory_modes() {
    auto dirs = dirs_;
    std::sort(dirs.begin(), dirs.end(), [](const auto& a, const auto& b) { return a.name.size() > b.name.size(); });
    for (const auto& d : dirs)
      if (::chmod((o_.into / d.name).c_str(), d.mode) != 0) fail(errno_text("chmod " + (o_.into / d.name).string(), errno));
  }

  void remove_partial_files() {
    for (auto& [i, f] : files_) {
      if (f.fd >= 0) ::close(f.fd);
      f.fd = -1;
      if (!f.done) ::unlink(f.temp.c_str());
    }
    open_files_ = 0;
  }

  [[nodiscard]] nlohmann::json figures() const {
    return {{"files_verified", verified_}, {"bytes_verified", bytes_verified_}, {"directories", dirs_.size()},
            {"bytes_written", written_}, {"bad_messages", bad_}};
  }
  [[nodiscard]] Report verdict() const {
    return Report{verified_, bytes_verified_, complete(), error_.value_or("")};
  }

 private:
  void on_directory(const Directory& d) {
    if (!dir_names_.insert(d.name).second) return fail("the source sent directory " + d.name + " twice");
    std::error_code ec;
    fs::create_directories(o_.into / d.name, ec);
    if (ec) return fail("cannot create " + (o_.into / d.name).string() + ": " + ec.message());
    dirs_.push_back(d);
  }

  IncomingFile* open_file(const Chunk& c) {
    auto it = files_.find(c.file);
    if (it != files_.end()) {
      IncomingFile& f = it->second;
      if (f.name != c.name || f.size != c.size || f.mode != c.mode) {
        fail("the source described file " + std::to_string(c.file) + " in two ways (" + f.name + ", " + c.name + ")");
        return nullptr;
      }
      if (f.done) {
        fail("a chunk of " + f.name + " came after the file was complete");
        return nullptr;
      }
      return &f;
    }
    if (!names_.insert(c.name).second) {
      fail("the source sent two files named " + c.name);
      return nullptr;
    }
    if (open_files_ >= kMaxOpenFiles) {
      fail("more than " + std::to_string(kMaxOpenFiles) + " files arriving at once");
      return nullptr;
    }
    IncomingFile f;
    f.name = c.name;
    f.size = c.size;
    f.mode = c.mode;
    f.final = o_.into / c.name;
    std::error_code ec;
    fs::create_directories(f.final.parent_path(), ec);
    if (ec) {
      fail("cannot create " + f.final.parent_path().string() + ": " + ec.message());
      return nullptr;
    }
    f.temp = f.final.parent_path() / ("." + f.final.filename().string() + ".hmcp-" + hex(*transfer_) + ".part");
    f.fd = ::open(f.temp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (f.fd < 0) {
      fail(errno_text("cannot create " + f.temp.string(), errno));
      return nullptr;
    }
    ++open_files_;
    return &files_.emplace(c.file, std::move(f)).first->second;
  }

  void on_chunk(const Chunk& c) {
    IncomingFile* f = open_file(c);
    if (f == nullptr) return;
    if (c.data.size() > f->size - f->written) return fail("the source sent more of " + f->name + " than its size");
    std::size_t put = 0;
    while (put < c.data.size()) {
      const ssize_t n = ::pwrite(f->fd, c.data.data() + put, c.data.size() - put, static_cast<off_t>(c.offset + put));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail(errno_text("writing " + f->final.string(), errno));
      put += static_cast<std::size_t>(n);
    }
    f->written += c.data.size();
    written_ += c.data.size();
    if (o_.crash_after && written_ >= *o_.crash_after) ::raise(SIGKILL);  // tests: a receiver that dies mid-way
    if (c.last) f->digest = c.digest;
    if (f->written == f->size && f->digest) finish_file(*f);
  }

  void finish_file(IncomingFile& f) {
    if (o_.fsync && ::fdatasync(f.fd) != 0) return fail(errno_text("flushing " + f.final.string(), errno));
    // Read back what the disk holds: the check covers the writes, not only the network.
    FileDigest digest;
    std::vector<std::byte> block(static_cast<std::size_t>(std::min<std::uint64_t>(kReadBackBlock, f.size)));
    for (std::uint64_t off = 0; off < f.size;) {
      const ssize_t n = ::pread(f.fd, block.data(), std::min<std::uint64_t>(block.size(), f.size - off),
                                static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return fail(errno_text("reading back " + f.final.string(), n == 0 ? EIO : errno));
      digest.update(std::span(block).first(static_cast<std::size_t>(n)));
      off += static_cast<std::uint64_t>(n);
    }
    if (digest.digest() != *f.digest)
      return fail(f.final.string() + ": its checksum differs from the source's after writing (a disk or memory fault?)");
    if (::fchmod(f.fd, f.mode) != 0) return fail(errno_text("chmod " + f.final.string(), errno));
    ::close(f.fd);
    f.fd = -1;
    --open_files_;
    if (::rename(f.temp.c_str(), f.final.c_str()) != 0) {
      const int err = errno;
      ::unlink(f.temp.c_str());
      return fail(errno_text("renaming " + f.temp.string() + " to " + f.final.string(), err));
    }
    f.done = true;
    ++verified_;
    bytes_verified_ += f.size;
  }

  const ReceiveOptions& o_;
  std::optional<MemberId> source_;
  std::optional<std::uint64_t> transfer_;
  std::map<std::uint32_t, IncomingFile> files_;
  std::set<std::string> names_;
  std::vector<Directory> dirs_;
  std::set<std::string> dir_names_;
  std::optional<End> end_;
  std::optional<std::string> error_;
  std::uint32_t verified_ = 0;
  std::uint64_t bytes_verified_ = 0;
  std::uint64_t written_ = 0;
  std::uint64_t bad_ = 0;
  std::size_t open_files_ = 0;  // files_ still being written (each holds a descriptor)
  bool finished_ = false;
};

}  // namespace

ReceiveOutcome receive_tree(Group& g, const ReceiveOptions& o) {
  std::error_code ec;
  fs::create_directories(o.into, ec);
  Inbox inbox(o.queue_bytes);
  // The callbacks capture `inbox`: the group is left (and the inbox closed, so no
  // callback waits for space) before it goes.
  struct LeaveOnExit {
    Group& g;
    Inbox& inbox;
    ~LeaveOnExit() {
      inbox.close();
      g.leave();
    }
  } leave_on_exit{g, inbox};
  g.on_deliver([&inbox](const Delivery& d) { inbox.push(Arrived{d.sender, d.bytes, d.buffer}); });
  g.on_view_change([&inbox](const View&, std::span<const MemberId> left) {
    inbox.push(Left{std::vector<MemberId>(left.begin(), left.end())});
  });
  g.on_stopped([&inbox](const Error& e) { inbox.push(Stopped{e.what()}); });

  TreeWriter w(o);
  if (ec) w.fail("cannot create " + o.into.string() + ": " + ec.message());
  const double cpu0 = process_cpu_seconds().total();
  const auto t0 = mono_ns();
  std::optional<Completion> reported;
  bool stopped = false, source_gone = false;
  while (!w.error() && !(reported && (w.finished() || source_gone))) {
    std::visit(Overloaded{
                   [&](const Arrived& a) { w.on_message(a.sender, a.bytes); },
                   [&](const Left& l) {
                     if (w.source() && std::ranges::find(l.members, *w.source()) != l.members.end()) {
                       source_gone = true;
                       if (!reported)
                         w.fail("the source (member " + std::to_string(*w.source()) +
                                ") left before the transfer ended: its files are not all here");
                     }
                   },
                   [&](const Stopped& s) {
                     stopped = true;
                     w.fail("this member stopped: " + s.why);
                   },
               },
               inbox.pop());
    if (!reported && w.complete()) {
      w.apply_directory_modes();
      if (!w.error()) reported = g.broadcast(encode(*w.transfer(), w.verdict()));
    }
  }
  const auto t_done = mono_ns();
  inbox.close();  // from here on nothing is written: deliveries must not wait for the writer
  if (w.error()) {
    w.remove_partial_files();
    if (!stopped && w.transfer()) {
      try {
        // The source names this member's failure instead of waiting for it.
        (void)g.broadcast(encode(*w.transfer(), w.verdict()), SendMode::fail).wait_for(kReportSettle);
      } catch (const Error&) {
        // Removed or closed meanwhile: the source sees this member leave instead.
      }
    }
  }
  ReceiveOutcome r;
  r.ok = !w.error() && w.complete();
  r.summary = w.figures();
  r.summary["member"] = g.self();
  r.summary["into"] = o.into.string();
  r.summary["ok"] = r.ok;
  r.summary["seconds"] = static_cast<double>(t_done - t0) / 1e9;
  r.summary["cpu_seconds"] = process_cpu_seconds().total() - cpu0;
  if (w.error()) r.summary["error"] = *w.error();
  return r;
}

}  // namespace hmcast::tools::cp
