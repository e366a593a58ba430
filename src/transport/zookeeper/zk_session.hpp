// One session with a ZooKeeper ensemble, through its C client (libzookeeper_mt):
// the store a membership backend that survives any one process keeps the group's
// views in (issue 19; README "Membership"). Liveness is the session itself: an
// ephemeral node lives as long as the session that created it.
//
// Every call is checked. Outcomes the caller decides on come back as values (a node
// that exists already, or not at all; a version that moved on); an operating failure
// (no quorum within the timeout, a session the ensemble expired, bad arguments) is an
// hmcast::Error whose message says what to do. Reads wait out a connection loss (the
// client moves to another server, e.g. when the leader dies) up to the timeout; so do
// writes whose outcome can be checked afterwards.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace hmcast::zk {

struct NodeData {
  std::vector<std::byte> bytes;
  std::int32_t version = 0;  // for a later conditional set()
};

class Session {
 public:
  /// Connects to `ensemble` ("host:port,host:port,..."), waiting up to `timeout` for
  /// a server of a quorum; the ensemble expires the session after `session_timeout`
  /// without contact (it may round it into its own bounds).
  Session(const std::string& ensemble, std::chrono::milliseconds session_timeout, std::chrono::milliseconds timeout);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// The session id the ensemble gave (the owner of our ephemeral nodes).
  [[nodiscard]] std::int64_t id() const;
  [[nodiscard]] bool connected() const;
  /// The ensemble expired the session: its ephemeral nodes are gone, and every call fails.
  [[nodiscard]] bool expired() const;

  /// Creates `path` holding `data`: persistent, or ephemeral (gone with this session);
  /// `sequential` appends the parent's 10-digit counter. The path created, or nullopt
  /// if a node of that name exists already.
  std::optional<std::string> create(const std::string& path, std::span<const std::byte> data, bool ephemeral,
                                    bool sequential = false);
  /// Creates `path` and each missing parent (persistent, empty); fine if they exist.
  void ensure(const std::string& path);
  /// The node's data and version, or nullopt if there is no such node.
  std::optional<NodeData> get(const std::string& path);
  /// Replaces the data if the node is still at `version`: false if it moved on (or is gone).
  bool set(const std::string& path, std::span<const std::byte> data, std::int32_t version);
  /// Deletes the node (at `version`, or any with -1): false if it is not there (or moved on).
  bool remove(const std::string& path, std::int32_t version = -1);
  /// The names of the node's children. With `on_change`, it runs once (on the
  /// client's thread) when they next change or the node goes.
  std::vector<std::string> children(const std::string& path, std::function<void()> on_change = {});
  /// Brings the server this session talks to up to date with the ensemble's leader for
  /// `path`. Reads are only as fresh as that server: another session's write, learnt
  /// of by another way than a watch, shows in a read only after a sync.
  void sync(const std::string& path);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace hmcast::zk
