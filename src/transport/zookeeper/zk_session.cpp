#include "transport/zookeeper/zk_session.hpp"

#include <cstdlib>

#include <zookeeper/zookeeper.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "core/assert.hpp"
#include "hmcast/error.hpp"

namespace hmcast::zk {

namespace {

/// Outcomes that may go away once the client reaches another server of the quorum.
bool transient(int rc) { return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT; }

[[noreturn]] void fail(const std::string& what, int rc) {
  if (rc == ZSESSIONEXPIRED)
    throw Error(ErrorCode::manager_lost,
                what + ": the ZooKeeper ensemble expired this session (out of contact longer than the session "
                       "timeout); its ephemeral nodes are gone: start a new session");
  throw Error(ErrorCode::manager_lost, what + ": " + zerror(rc) +
                                           (transient(rc) ? " (no server of a quorum answered in time: check "
                                                            "that a majority of the ensemble runs)"
                                                          : ""));
}

}  // namespace

struct Session::State {
  zhandle_t* zh = nullptr;
  std::chrono::milliseconds timeout{};
  std::mutex mu;
  std::condition_variable changed;
  int state = 0;  // the client's last session state (ZOO_*_STATE)
  /// A children watch: fires once. Owned here until it fires, so none leaks when the
  /// session closes first.
  struct Watch {
    State* state;
    std::function<void()> fn;
  };
  std::set<Watch*> watches;

  static void on_session(zhandle_t*, int type, int state, const char*, void* ctx) {
    if (type != ZOO_SESSION_EVENT) return;
    auto* self = static_cast<State*>(ctx);
    {
      std::lock_guard lock(self->mu);
      self->state = state;
    }
    self->changed.notify_all();
  }
  static void on_watch(zhandle_t*, int type, int, const char*, void* ctx) {
    if (type == ZOO_SESSION_EVENT) return;  // connection changes: the watch stays armed
    auto* w = static_cast<Watch*>(ctx);
    {
      std::lock_guard lock(w->state->mu);
      if (w->state->watches.erase(w) == 0) return;  // not ours any more
    }
    w->fn();
    delete w;
  }

  /// Runs `call` until it returns something else than a transient failure, waiting for
  /// the client to reconnect between tries, for at most the timeout.
  template <class Call>
  int retry(Call&& call) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const int rc = call();
      if (!transient(rc) || std::chrono::steady_clock::now() >= deadline) return rc;
      std::unique_lock lock(mu);
      changed.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(50)),
                         [&] { return state == ZOO_CONNECTED_STATE || state == ZOO_EXPIRED_SESSION_STATE; });
    }
  }
};

Session::Session(const std::string& ensemble, std::chrono::milliseconds session_timeout,
                 std::chrono::milliseconds timeout)
    : s_(std::make_unique<State>()) {
  s_->timeout = timeout;
  // The C client logs every refused connection to a server that is down, which a
  // session rides out by moving to another (our calls report what it cannot): its
  // own log stays quiet unless HMCAST_ZK_LOG asks for it.
  zoo_set_debug_level(std::getenv("HMCAST_ZK_LOG") != nullptr ? ZOO_LOG_LEVEL_INFO : static_cast<ZooLogLevel>(0));
  s_->zh = zookeeper_init(ensemble.c_str(), &State::on_session, static_cast<int>(session_timeout.count()), nullptr,
                          s_.get(), 0);
  if (s_->zh == nullptr)
    throw Error(ErrorCode::invalid_config, "cannot start a ZooKeeper client for '" + ensemble +
                                               "': name the ensemble as host:port,host:port,...");
  std::unique_lock lock(s_->mu);
  const bool up = s_->changed.wait_for(lock, timeout, [&] { return s_->state == ZOO_CONNECTED_STATE; });
  if (!up) {
    lock.unlock();
    zookeeper_close(s_->zh);
    throw Error(ErrorCode::manager_lost, "no server of the ZooKeeper ensemble '" + ensemble + "' answered within " +
                                             std::to_string(timeout.count()) +
                                             " ms: check that a majority of it runs and is reachable");
  }
}

Session::~Session() {
  zookeeper_close(s_->zh);  // its threads are gone once this returns: no callback runs after
  for (auto* w : s_->watches) delete w;
}

std::int64_t Session::id() const { return zoo_client_id(s_->zh)->client_id; }

bool Session::connected() const { return zoo_state(s_->zh) == ZOO_CONNECTED_STATE; }

bool Session::expired() const { return zoo_state(s_->zh) == ZOO_EXPIRED_SESSION_STATE; }

std::optional<std::string> Session::create(const std::string& path, std::span<const std::byte> data, bool ephemeral,
                                           bool sequential) {
  HMCAST_ASSERT(data.size() <= (1U << 20));  // ZooKeeper's default jute.maxbuffer
  const int mode = ephemeral ? (sequential ? ZOO_EPHEMERAL_SEQUENTIAL : ZOO_EPHEMERAL)
                             : (sequential ? ZOO_PERSISTENT_SEQUENTIAL : ZOO_PERSISTENT);
  std::vector<char> created(path.size() + 16);
  bool retried = false;
  const int rc = s_->retry([&] {
    const int r = zoo_create(s_->zh, path.c_str(), reinterpret_cast<const char*>(data.data()),
                             static_cast<int>(data.size()), &ZOO_OPEN_ACL_UNSAFE, mode, created.data(),
                             static_cast<int>(created.size()));
    retried = retried || transient(r);
    return r;
  });
  if (rc == ZNODEEXISTS && retried && !sequential && ephemeral) {
    // The first try may have landed before the connection dropped: ours if we own it.
    struct Stat st {};
    if (s_->retry([&] { return zoo_exists(s_->zh, path.c_str(), 0, &st); }) == ZOK && st.ephemeralOwner == id())
      return path;
  }
  if (rc == ZNODEEXISTS) return std::nullopt;
  if (rc != ZOK) fail("cannot create ZooKeeper node " + path, rc);
  return std::string(created.data());
}

void Session::ensure(const std::string& path) {
  HMCAST_ASSERT(!path.empty() && path[0] == '/');
  for (std::size_t at = path.find('/', 1);; at = path.find('/', at + 1)) {
    const std::string prefix = path.substr(0, at);
    (void)create(prefix, {}, false);  // there already is fine
    if (at == std::string::npos) return;
  }
}

std::optional<NodeData> Session::get(const std::string& path) {
  std::vector<char> buf(1U << 20);
  int len = 0;
  struct Stat st {};
  const int rc = s_->retry([&] {
    len = static_cast<int>(buf.size());
    return zoo_get(s_->zh, path.c_str(), 0, buf.data(), &len, &st);
  });
  if (rc == ZNONODE) return std::nullopt;
  if (rc != ZOK) fail("cannot read ZooKeeper node " + path, rc);
  NodeData d;
  const auto* first = reinterpret_cast<const std::byte*>(buf.data());
  if (len > 0) d.bytes.assign(first, first + len);
  d.version = st.version;
  return d;
}

bool Session::set(const std::string& path, std::span<const std::byte> data, std::int32_t version) {
  const int rc = zoo_set(s_->zh, path.c_str(), reinterpret_cast<const char*>(data.data()),
                         static_cast<int>(data.size()), version);
  if (rc == ZBADVERSION || rc == ZNONODE) return false;
  if (rc != ZOK) fail("cannot write ZooKeeper node " + path, rc);
  return true;
}

bool Session::remove(const std::string& path, std::int32_t version) {
  const int rc = zoo_delete(s_->zh, path.c_str(), version);
  if (rc == ZBADVERSION || rc == ZNONODE) return false;
  if (rc != ZOK) fail("cannot delete ZooKeeper node " + path, rc);
  return true;
}

std::vector<std::string> Session::children(const std::string& path, std::function<void()> on_change) {
  struct String_vector names {};
  State::Watch* watch = nullptr;
  if (on_change) {
    watch = new State::Watch{s_.get(), std::move(on_change)};
    std::lock_guard lock(s_->mu);
    s_->watches.insert(watch);
  }
  const int rc = s_->retry([&] {
    return watch != nullptr ? zoo_wget_children(s_->zh, path.c_str(), &State::on_watch, watch, &names)
                            : zoo_get_children(s_->zh, path.c_str(), 0, &names);
  });
  if (rc != ZOK && watch != nullptr) {
    // Not armed: nothing will call it.
    std::lock_guard lock(s_->mu);
    if (s_->watches.erase(watch) != 0) delete watch;
  }
  if (rc == ZNONODE) return {};
  if (rc != ZOK) fail("cannot list ZooKeeper node " + path, rc);
  std::vector<std::string> out;
  for (std::int32_t i = 0; i < names.count; ++i) out.emplace_back(names.data[i]);
  deallocate_String_vector(&names);
  return out;
}

void Session::sync(const std::string& path) {
  // The client always runs a completion, with ZCLOSING at the latest when the session
  // closes; so the state it fills is shared with it and outlives a timed-out wait here.
  struct Pending {
    std::mutex mu;
    std::condition_variable done;
    bool finished = false;
    int rc = 0;
  };
  const auto run = [&]() -> int {
    auto pending = std::make_shared<Pending>();
    auto* held = new std::shared_ptr<Pending>(pending);
    const int rc = zoo_async(
        s_->zh, path.c_str(),
        [](int result, const char*, const void* data) {
          auto* p = static_cast<const std::shared_ptr<Pending>*>(data);
          {
            std::lock_guard lock((*p)->mu);
            (*p)->finished = true;
            (*p)->rc = result;
          }
          (*p)->done.notify_all();
          delete p;
        },
        held);
    if (rc != ZOK) {
      delete held;  // not queued: nothing will call it
      return rc;
    }
    std::unique_lock lock(pending->mu);
    if (!pending->done.wait_for(lock, s_->timeout, [&] { return pending->finished; })) return ZOPERATIONTIMEOUT;
    return pending->rc;
  };
  const int rc = s_->retry(run);
  if (rc != ZOK && rc != ZNONODE) fail("cannot sync ZooKeeper node " + path, rc);
}

}  // namespace hmcast::zk
