// What an ibv asynchronous event means to an endpoint, kept apart from the verbs
// calls (no function here calls into libibverbs) so the mapping is tested on hosts
// without an RDMA device (tests/verbs_test.cpp).
//
// The endpoint finds what an event is about (AsyncSubject: one of its link QPs, its
// UD QP, its CQ, its port, or something else on the shared device context), then
// async_action() says what to do: only events that break a queue pair, the port or
// the device change anything; the rest are counted and otherwise ignored.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

namespace hmcast::verbs {

/// Which member of ibv_async_event::element an event type sets.
enum class AsyncElement : std::uint8_t { qp, cq, srq, wq, port, device };

/// What an event is about, as the endpoint found it.
enum class AsyncSubject : std::uint8_t {
  link_qp,      // the queue pair of one of our reliable links
  datagram_qp,  // our UD queue pair (the multicast group)
  our_cq,       // our completion queue
  our_port,     // the port we use
  device,       // the device as a whole
  unrelated,    // another endpoint's object, another port, an SRQ or WQ (we use none)
};

enum class AsyncAction : std::uint8_t {
  count,       // informational or not ours: counted in Stats::async_events, nothing else
  break_link,  // that link is dead: handled as a failed completion on it
  fail,        // the endpoint cannot work any more: wait() throws TransportError
};

AsyncElement async_element(ibv_event_type type);

AsyncAction async_action(ibv_event_type type, AsyncSubject subject);

/// "IBV_EVENT_PORT_ERR" and so on (libibverbs' own ibv_event_type_str says "port error").
std::string async_event_name(ibv_event_type type);

/// The TransportError text for an event whose action is `fail`: what happened and what to do.
std::string async_failure_message(ibv_event_type type, AsyncSubject subject, const std::string& device,
                                  std::uint32_t port, const std::string& group);

}  // namespace hmcast::verbs
