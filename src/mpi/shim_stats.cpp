#include "mpi/shim_stats.hpp"

#include <sstream>

namespace hmcast::mpi {

ShimStats& stats() {
  static ShimStats s;
  return s;
}

std::string ShimStats::json(int world_rank) const {
  std::ostringstream o;
  o << "{\"rank\":" << world_rank << ",\"hmcast_calls\":" << hmcast_calls() << ",\"fallback_calls\":"
    << fallback_calls() << ",\"hmcast_small\":" << small << ",\"hmcast_large\":" << large
    << ",\"hmcast_packed\":" << packed << ",\"hmcast_bytes\":" << bytes << ",\"hmcast_errors\":" << errors
    << ",\"hmcast_nonblocking\":" << nonblocking << ",\"fortran_calls\":" << fortran << ",\"fallback_disabled\":" << disabled
    << ",\"fallback_intercomm\":" << intercomm << ",\"fallback_single_rank\":" << single_rank
    << ",\"fallback_group_limit\":" << group_limit << ",\"fallback_setup_failed\":" << setup_failed
    << ",\"fallback_unsupported\":" << unsupported << ",\"groups_created\":" << groups_created << ",\"repairs_sent\":" << repairs_sent
    << ",\"faults_dropped\":" << faults_dropped << ",\"root_waits\":" << root_waits << ",\"credits_sent\":" << credits_sent
    << ",\"received_in_place\":" << received_in_place << ",\"received_copied\":" << received_copied
    << ",\"sent_in_place\":" << sent_in_place << ",\"nonblocking_in_place\":" << nonblocking_in_place
    << ",\"max_queued_bytes\":" << max_queued_bytes << ",\"bad_messages\":" << bad_messages << "}";
  return o.str();
}

}  // namespace hmcast::mpi
