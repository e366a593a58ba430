// `import hmcast`: the C++ API for Python. Deliveries and view changes wait in a
// queue that the node's progress thread fills without the GIL; Python takes them
// with Group.receive() (or by iterating the group), which releases the GIL while it
// waits, as do broadcast(), Completion.result() and join(). A delivery exposes its
// bytes through the buffer protocol (memoryview(d), numpy.frombuffer(d)), without a
// copy, and keeps the message alive for as long as a view of it exists. With
// Node(progress="caller") there is no progress thread: receive(), Group.poll() and
// Completion.result() make the group's progress while they wait.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "hmcast/hmcast.hpp"

namespace py = pybind11;

namespace {

struct ViewChange {
  hmcast::View view;
  std::vector<hmcast::MemberId> left;
};

/// The group stopped for this member (Group::on_stopped): receive() raises it.
struct Stopped {
  hmcast::Error error;
};

/// What the progress thread hands to Python, in the order it happened.
class Inbox {
 public:
  using Event = std::variant<hmcast::Delivery, ViewChange, Stopped>;
  void push(Event e) {
    {
      std::lock_guard lock(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_one();
  }
  /// The next event, or nothing after `timeout` (none: wait for ever).
  std::optional<Event> pop(std::optional<double> timeout) {
    std::unique_lock lock(mu_);
    auto ready = [&] { return !events_.empty(); };
    if (timeout) {
      if (!cv_.wait_for(lock, std::chrono::duration<double>(*timeout), ready)) return std::nullopt;
    } else {
      cv_.wait(lock, ready);
    }
    // A stop stays (a copy goes out): every later receive() raises it too, none waits for ever.
    if (std::holds_alternative<Stopped>(events_.front())) return events_.front();
    Event e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
};

/// A Group with its inbox: callbacks are registered once, at join.
struct PyGroup {
  hmcast::Group group;
  std::shared_ptr<Inbox> inbox = std::make_shared<Inbox>();
  /// Config::progress is Progress::caller: receive() makes the progress it waits for.
  bool caller = false;

  /// The next event, or nothing after `timeout` (none: wait for ever). GIL released.
  std::optional<Inbox::Event> next(std::optional<double> timeout) {
    if (!caller) return inbox->pop(timeout);
    using Clock = std::chrono::steady_clock;
    const auto until = timeout ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(std::max(0.0, *timeout)))
                               : Clock::time_point::max();
    for (;;) {
      if (auto e = inbox->pop(0.0)) return e;
      const auto now = Clock::now();
      if (now >= until) return std::nullopt;
      group.poll(std::min<std::chrono::nanoseconds>(until - now, std::chrono::milliseconds(10)));
    }
  }
};

/// The bytes of a C-contiguous buffer (`call` names the method in the error).
std::span<const std::byte> contiguous_bytes(const py::buffer_info& info, const char* call) {
  if (!PyBuffer_IsContiguous(info.view(), 'C')) throw py::value_error(std::string(call) + "() needs a contiguous buffer");
  return {static_cast<const std::byte*>(info.ptr), static_cast<std::size_t>(info.size * info.itemsize)};
}

/// A broadcast sent from a Python buffer without waiting (Group.broadcast_lent): it
/// holds the buffer (exported, so a bytearray cannot be resized) until taken back.
struct PyLentSend {
  hmcast::Group group;  // a handle to the same group
  hmcast::LentSend sent;
  std::optional<py::buffer_info> info;  // released once the group let go of the bytes
  PyLentSend(hmcast::Group g, hmcast::LentSend s, py::buffer_info i)
      : group(std::move(g)), sent(std::move(s)), info(std::move(i)) {}
  PyLentSend(const PyLentSend&) = delete;
  PyLentSend& operator=(const PyLentSend&) = delete;
  /// Dropped before it was taken back: waits here, since the bytes go with the buffer.
  ~PyLentSend() {
    if (!info) return;
    {
      py::gil_scoped_release unlocked;
      (void)group.take_back(sent, std::chrono::nanoseconds::max());
    }
    info.reset();
  }
};

/// A Node that remembers who makes its groups progress (Config::progress).
struct PyNode : hmcast::Node {
  explicit PyNode(const hmcast::Config& c) : hmcast::Node(c), caller(c.progress == hmcast::Progress::caller) {}
  bool caller;
};

hmcast::TransportKind transport_of(const std::string& name) {
  if (name == "socket") return hmcast::TransportKind::socket;
  if (name == "inproc") return hmcast::TransportKind::inproc;
  if (name == "verbs") return hmcast::TransportKind::verbs;
  if (name == "shm") return hmcast::TransportKind::shm;
  if (name == "socket+shm") return hmcast::TransportKind::socket;  // with SocketOptions::share_memory
  throw py::value_error("transport must be 'socket', 'socket+shm', 'shm', 'inproc' or 'verbs', not '" + name + "'");
}

py::object event_to_python(Inbox::Event e) {
  if (auto* d = std::get_if<hmcast::Delivery>(&e)) return py::cast(std::move(*d));
  if (auto* s = std::get_if<Stopped>(&e)) throw s->error;  // hmcast.Error, with its message
  return py::cast(std::get<ViewChange>(std::move(e)));
}

py::dict stats_dict(const hmcast::GroupStats& s) {
  py::dict d;
  d["delivered"] = s.delivered;
  d["completed"] = s.completed;
  d["large_delivered"] = s.large_delivered;
  d["large_completed"] = s.large_completed;
  d["large_commits_relayed"] = s.large_commits_relayed;
  d["large_delivered_on_relay"] = s.large_delivered_on_relay;
  d["large_uncommitted_discarded"] = s.large_uncommitted_discarded;
  d["repairs_sent"] = s.repairs_sent;
  d["views_installed"] = s.views_installed;
  d["duplicates_dropped"] = s.duplicates_dropped;
  d["bad_packets_dropped"] = s.bad_packets_dropped;
  d["auth_failures"] = s.auth_failures;
  d["replays_refused"] = s.replays_refused;
  d["multicast_datagrams_sent"] = s.multicast_datagrams_sent;
  d["batches_sent"] = s.batches_sent;
  d["datagrams_batched"] = s.datagrams_batched;
  d["small_fragments_placed"] = s.small_fragments_placed;
  d["link_bytes_sent"] = s.link_bytes_sent;
  d["shm_locks_recovered"] = s.shm_locks_recovered;
  d["shm_partial_frames_dropped"] = s.shm_partial_frames_dropped;
  d["shm_datagrams_waited"] = s.shm_datagrams_waited;
  d["shm_multicast_overruns"] = s.shm_multicast_overruns;
  d["shm_datagrams_copied"] = s.shm_datagrams_copied;
  d["hosts"] = s.hosts;
  d["host_members"] = s.host_members;
  d["host_leader"] = s.host_leader;
  d["multicast_probe"] = s.multicast_probe;
  d["multicast_emulated"] = s.multicast_emulated;
  d["max_small_message"] = s.max_small_message;
  d["large_algorithm"] = s.large_algorithm;
  return d;
}

}  // namespace

PYBIND11_MODULE(hmcast, m) {
  m.doc() = "Reliable broadcast over hardware multicast and RDMA (hmcast)";
  // hmcast::Error keeps its message, which says what to do.
  static py::exception<hmcast::Error> error(m, "Error");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hmcast::Error& e) {
      error(e.what());
    }
  });

  py::class_<hmcast::Delivery>(m, "Delivery", py::buffer_protocol(),
                               "One message as delivered: read its bytes through memoryview(d) or "
                               "numpy.frombuffer(d) (no copy)")
      .def_readonly("sender", &hmcast::Delivery::sender)
      .def_readonly("seq", &hmcast::Delivery::seq)
      .def_readonly("large", &hmcast::Delivery::large)
      .def("__len__", [](const hmcast::Delivery& d) { return d.bytes.size(); })
      .def("tobytes", [](const hmcast::Delivery& d) {
        return py::bytes(reinterpret_cast<const char*>(d.bytes.data()), d.bytes.size());
      })
      .def_buffer([](hmcast::Delivery& d) {
        return py::buffer_info(const_cast<std::byte*>(d.bytes.data()), 1, "B", 1, {d.bytes.size()}, {1},
                               /*readonly=*/true);
      })
      .def("__repr__", [](const hmcast::Delivery& d) {
        return "<hmcast.Delivery from " + std::to_string(d.sender) + " seq " + std::to_string(d.seq) + ", " +
               std::to_string(d.bytes.size()) + " bytes>";
      });

  py::class_<ViewChange>(m, "ViewChange", "A new view: its id, its members, and who left")
      .def_property_readonly("id", [](const ViewChange& v) { return v.view.id; })
      .def_property_readonly("members", [](const ViewChange& v) { return v.view.members; })
      .def_readonly("left", &ViewChange::left)
      .def("__repr__", [](const ViewChange& v) {
        return "<hmcast.ViewChange " + std::to_string(v.view.id) + ": " + std::to_string(v.view.members.size()) +
               " members, " + std::to_string(v.left.size()) + " left>";
      });

  py::class_<hmcast::Completion>(m, "Completion", "Done once every member of the current view holds the message")
      .def_property_readonly("seq", &hmcast::Completion::seq)
      .def("done", [](const hmcast::Completion& c) { return c.wait_for(std::chrono::seconds(0)); })
      .def(
          "result",
          [](const hmcast::Completion& c, std::optional<double> timeout) {
            bool ready = true;
            {
              py::gil_scoped_release unlocked;
              if (timeout) ready = c.wait_for(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(*timeout)));
              if (ready) c.get();  // throws hmcast::Error if the message could not complete
            }
            if (!ready) {
              PyErr_SetString(PyExc_TimeoutError, "the message is not yet held by every member");
              throw py::error_already_set();
            }
          },
          py::arg("timeout") = py::none(),
          "Waits until every member holds the message (raises TimeoutError after `timeout` seconds)");

  py::class_<PyLentSend>(m, "LentSend",
                         "A broadcast sent from the caller's buffer without waiting (Group.broadcast_lent)")
      .def_property_readonly("lent", [](const PyLentSend& s) { return s.sent.lent(); })
      .def_property_readonly("completion", [](const PyLentSend& s) { return s.sent.completion(); })
      .def(
          "take_back",
          [](PyLentSend& s, std::optional<double> timeout) {
            if (!s.info) return true;
            bool back = false;
            {
              py::gil_scoped_release unlocked;
              back = s.group.take_back(
                  s.sent, timeout ? std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::duration<double>(std::max(0.0, *timeout)))
                                  : std::chrono::nanoseconds::max());
            }
            if (back) s.info.reset();
            return back;
          },
          py::arg("timeout") = py::none(),
          "Waits (at most `timeout` seconds) for the group to let go of the buffer (normally as the message "
          "completes); True: the buffer is the caller's again (the outcome is completion's)");

  py::class_<PyGroup>(m, "Group")
      .def_property_readonly("self", [](const PyGroup& g) { return g.group.self(); })
      .def_property_readonly("view", [](const PyGroup& g) {
        const auto v = g.group.view();
        return py::make_tuple(v.id, v.members);
      })
      .def(
          "broadcast",
          [](PyGroup& g, py::buffer data, bool wait) {
            py::buffer_info info = data.request();
            const auto bytes = contiguous_bytes(info, "broadcast");
            py::gil_scoped_release unlocked;  // the bytes are copied before broadcast() returns
            return g.group.broadcast(bytes, wait ? hmcast::SendMode::wait : hmcast::SendMode::fail);
          },
          py::arg("data"), py::arg("wait") = true,
          "Sends any buffer (bytes, bytearray, memoryview, a NumPy array) to every member; returns a Completion")
      .def(
          "broadcast_from",
          [](PyGroup& g, py::buffer data) {
            py::buffer_info info = data.request();
            const auto bytes = contiguous_bytes(info, "broadcast_from");
            py::gil_scoped_release unlocked;  // `info` holds the buffer until this returns
            g.group.broadcast_from(bytes);
          },
          py::arg("data"),
          "Sends a buffer from where it lies (a large one is not copied) and waits until every member holds it "
          "and the group no longer reads it; the buffer must not change meanwhile")
      .def(
          "broadcast_lent",
          [](PyGroup& g, py::buffer data, bool wait) {
            py::buffer_info info = data.request();
            const auto bytes = contiguous_bytes(info, "broadcast_lent");
            hmcast::LentSend sent;
            {
              py::gil_scoped_release unlocked;
              sent = g.group.broadcast_lent(bytes, wait ? hmcast::SendMode::wait : hmcast::SendMode::fail);
            }
            return std::make_unique<PyLentSend>(g.group, std::move(sent), std::move(info));
          },
          py::arg("data"), py::arg("wait") = true,
          "Starts sending a buffer from where it lies (a large one is not copied) and returns a LentSend; the "
          "buffer must not change until its take_back() returns True (dropping the LentSend waits for that)")
      .def(
          "receive",
          [](PyGroup& g, std::optional<double> timeout) -> py::object {
            std::optional<Inbox::Event> e;
            {
              py::gil_scoped_release unlocked;
              e = g.next(timeout);
            }
            if (!e) return py::none();
            return event_to_python(std::move(*e));
          },
          py::arg("timeout") = py::none(),
          "The next Delivery or ViewChange, or None after `timeout` seconds; raises hmcast.Error once the group "
          "stopped for this member (removed by the others, or the manager lost)")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__",
           [](PyGroup& g) {
             std::optional<Inbox::Event> e;
             {
               py::gil_scoped_release unlocked;
               e = g.next(std::nullopt);
             }
             return event_to_python(std::move(*e));
           })
      .def(
          "poll",
          [](PyGroup& g, double timeout) {
            py::gil_scoped_release unlocked;
            g.group.poll(std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::duration<double>(std::max(0.0, timeout))));
          },
          py::arg("timeout") = 0.0,
          "progress='caller': waits up to `timeout` seconds for traffic and handles it (receive() and "
          "Completion.result() do this while they wait); with the progress thread, returns at once")
      .def("stats", [](const PyGroup& g) { return stats_dict(g.group.stats()); })
      .def("leave", [](PyGroup& g) {
        py::gil_scoped_release unlocked;
        g.group.leave();
      });

  py::class_<PyNode>(m, "Node")
      .def(py::init([](const std::string& transport, std::uint32_t group_size, const std::string& manager,
                       bool embed_manager, const std::string& interface, const std::string& fabric,
                       double join_timeout, const std::string& key_file, const std::string& progress) {
             hmcast::Config c;
             c.key_file = key_file;  // empty: $HMCAST_KEY_FILE, or no key
             c.transport = transport_of(transport);
             c.socket.share_memory = transport == "socket+shm";
             c.group_size = group_size;
             c.socket.manager = manager;
             c.socket.embed_manager = embed_manager;
             c.socket.interface_address = interface;
             c.fabric = fabric;
             c.join_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(join_timeout * 1000));
             if (progress != "thread" && progress != "caller")
               throw py::value_error("progress must be 'thread' or 'caller', not '" + progress + "'");
             c.progress = progress == "caller" ? hmcast::Progress::caller : hmcast::Progress::thread;
             py::gil_scoped_release unlocked;
             return std::make_unique<PyNode>(c);
           }),
           py::arg("transport") = "socket", py::arg("group_size") = 1, py::arg("manager") = "127.0.0.1:17700",
           py::arg("embed_manager") = false, py::arg("interface") = "127.0.0.1", py::arg("fabric") = "default",
           py::arg("join_timeout") = 10.0, py::arg("key_file") = "", py::arg("progress") = "thread")
      .def_property_readonly("id", [](const PyNode& n) { return n.id(); })
      .def(
          "join",
          [](PyNode& n, const std::string& name) {
            auto g = std::make_unique<PyGroup>();
            g->caller = n.caller;
            {
              py::gil_scoped_release unlocked;
              g->group = n.join(name);
            }
            std::weak_ptr<Inbox> inbox = g->inbox;
            g->group.on_deliver([inbox](const hmcast::Delivery& d) {
              auto in = inbox.lock();
              if (!in) return;
              if (d.buffer == nullptr && !d.bytes.empty()) {
                // Lent memory (broadcast_from): valid only during this call, so the
                // queued delivery keeps a copy.
                auto copy = std::make_shared<const std::vector<std::byte>>(d.bytes.begin(), d.bytes.end());
                in->push(hmcast::Delivery{d.sender, d.seq, d.large, std::span<const std::byte>(*copy), copy});
                return;
              }
              in->push(d);
            });
            g->group.on_view_change([inbox](const hmcast::View& v, std::span<const hmcast::MemberId> left) {
              if (auto in = inbox.lock()) in->push(ViewChange{v, {left.begin(), left.end()}});
            });
            g->group.on_stopped([inbox](const hmcast::Error& e) {
              if (auto in = inbox.lock()) in->push(Stopped{e});
            });
            return g;
          },
          py::arg("name"), py::keep_alive<0, 1>(), "Joins a group; returns once this node is in a view");
}
