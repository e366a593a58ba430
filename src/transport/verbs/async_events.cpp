#include "transport/verbs/async_events.hpp"

namespace hmcast::verbs {

AsyncElement async_element(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_CQ_ERR:
      return AsyncElement::cq;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      return AsyncElement::qp;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      return AsyncElement::srq;
    case IBV_EVENT_WQ_FATAL:
      return AsyncElement::wq;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
      return AsyncElement::port;
    case IBV_EVENT_DEVICE_FATAL:
      return AsyncElement::device;
  }
  return AsyncElement::device;  // a type newer than this code: no element is read
}

AsyncAction async_action(ibv_event_type type, AsyncSubject subject) {
  switch (type) {
    // The queue pair went to the error state: its work requests flush and it never
    // sends again. On a link that is the same news as a failed completion (which may
    // never come if nothing was posted); on the UD QP the multicast path is gone.
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
      if (subject == AsyncSubject::link_qp) return AsyncAction::break_link;
      if (subject == AsyncSubject::datagram_qp) return AsyncAction::fail;
      return AsyncAction::count;
    // Completions were lost: no queue pair on the CQ can be trusted any more.
    case IBV_EVENT_CQ_ERR:
      return subject == AsyncSubject::our_cq ? AsyncAction::fail : AsyncAction::count;
    // Our port is down: the group membership and every link on it go with it.
    case IBV_EVENT_PORT_ERR:
      return subject == AsyncSubject::our_port ? AsyncAction::fail : AsyncAction::count;
    case IBV_EVENT_DEVICE_FATAL:
      return AsyncAction::fail;
    // LAST_WQE_REACHED only comes for queue pairs on a shared receive queue, which
    // hmcast does not use (a QP's own failure comes as QP_FATAL or flushed completions).
    // The others report changes the port or rdma_cm deal with (a lost multicast
    // membership comes as RDMA_CM_EVENT_MULTICAST_ERROR, handled by the endpoint).
    case IBV_EVENT_QP_LAST_WQE_REACHED:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
    case IBV_EVENT_WQ_FATAL:
      return AsyncAction::count;
  }
  return AsyncAction::count;
}

std::string async_event_name(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_CQ_ERR: return "IBV_EVENT_CQ_ERR";
    case IBV_EVENT_QP_FATAL: return "IBV_EVENT_QP_FATAL";
    case IBV_EVENT_QP_REQ_ERR: return "IBV_EVENT_QP_REQ_ERR";
    case IBV_EVENT_QP_ACCESS_ERR: return "IBV_EVENT_QP_ACCESS_ERR";
    case IBV_EVENT_COMM_EST: return "IBV_EVENT_COMM_EST";
    case IBV_EVENT_SQ_DRAINED: return "IBV_EVENT_SQ_DRAINED";
    case IBV_EVENT_PATH_MIG: return "IBV_EVENT_PATH_MIG";
    case IBV_EVENT_PATH_MIG_ERR: return "IBV_EVENT_PATH_MIG_ERR";
    case IBV_EVENT_DEVICE_FATAL: return "IBV_EVENT_DEVICE_FATAL";
    case IBV_EVENT_PORT_ACTIVE: return "IBV_EVENT_PORT_ACTIVE";
    case IBV_EVENT_PORT_ERR: return "IBV_EVENT_PORT_ERR";
    case IBV_EVENT_LID_CHANGE: return "IBV_EVENT_LID_CHANGE";
    case IBV_EVENT_PKEY_CHANGE: return "IBV_EVENT_PKEY_CHANGE";
    case IBV_EVENT_SM_CHANGE: return "IBV_EVENT_SM_CHANGE";
    case IBV_EVENT_SRQ_ERR: return "IBV_EVENT_SRQ_ERR";
    case IBV_EVENT_SRQ_LIMIT_REACHED: return "IBV_EVENT_SRQ_LIMIT_REACHED";
    case IBV_EVENT_QP_LAST_WQE_REACHED: return "IBV_EVENT_QP_LAST_WQE_REACHED";
    case IBV_EVENT_CLIENT_REREGISTER: return "IBV_EVENT_CLIENT_REREGISTER";
    case IBV_EVENT_GID_CHANGE: return "IBV_EVENT_GID_CHANGE";
    case IBV_EVENT_WQ_FATAL: return "IBV_EVENT_WQ_FATAL";
  }
  return "ibv async event " + std::to_string(static_cast<int>(type));
}

std::string async_failure_message(ibv_event_type type, AsyncSubject subject, const std::string& device,
                                  std::uint32_t port, const std::string& group) {
  const std::string head = "verbs transport: " + async_event_name(type) + " on " + device;
  const std::string or_socket =
      "; or use the socket transport (Config::transport = TransportKind::socket, `--transport socket`)";
  switch (subject) {
    case AsyncSubject::device:
      return head + ": the device failed and every queue pair on it is gone. Check `dmesg` and `ibv_devinfo -d " +
             device + "` (the driver may need a reset or a reload), then recreate the Node" + or_socket;
    case AsyncSubject::our_port:
      return head + " port " + std::to_string(port) +
             ": the port went down, taking the multicast group and the reliable links with it. Bring it back up "
             "(cable and switch; InfiniBand: the subnet manager; RoCE: the netdev, `ip link set <netdev> up`) until "
             "`ibv_devinfo -d " + device + "` shows PORT_ACTIVE, then recreate the Node" + or_socket;
    case AsyncSubject::datagram_qp:
      return head + ": the datagram queue pair of the multicast group " + group +
             " failed, so the multicast path is gone. Recreate the Node; if it happens again, check `dmesg` for the "
             "driver's reason" + or_socket;
    case AsyncSubject::our_cq:
      return head + ": the completion queue overflowed and completions were lost. This is an hmcast bug (the queue "
                    "is sized for every work request it can hold): please report it, and recreate the Node";
    case AsyncSubject::link_qp:
    case AsyncSubject::unrelated:
      break;
  }
  return head + ": recreate the Node" + or_socket;
}

}  // namespace hmcast::verbs
