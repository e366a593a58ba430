// The source side of `hmcast cp`: broadcasts a tree of files to the group and
// waits until every receiver reports whether it verified them.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>

#include <nlohmann/json.hpp>

#include "cp_tree.hpp"
#include "hmcast/hmcast.hpp"

namespace hmcast::tools::cp {

struct SendOptions {
  // Data per message: each large message costs a pipeline fill and a final ACK,
  // so messages are large (small files share one; docs/benchmarks.md, "hmcast cp").
  std::uint64_t chunk_bytes = 64ULL << 20;
  std::uint64_t in_flight_bytes = 128ULL << 20;  // sent and not yet at every receiver (memory bound)
  std::chrono::seconds report_timeout{300};      // after the last byte, for the receivers' verdicts
  std::FILE* progress = nullptr;                 // where progress lines go (none if null)
  bool progress_terminal = false;
  std::optional<std::uint64_t> crash_after;      // tests: SIGKILL this process once this many bytes are sent
};

/// What happened, for the summary line and `--json`.
struct SendOutcome {
  nlohmann::json summary;
  bool all_verified = false;  // every receiver of the first view verified every file
};

/// Sends `tree` through `g` (already joined; every other member receives) and
/// returns once every receiver reported, left, or the report timeout passed;
/// leaves the group before it returns or throws.
/// Throws std::runtime_error when a file cannot be read, or changes while it is
/// sent; hmcast::Error when this member cannot go on in the group.
SendOutcome send_tree(Group& g, const SourceTree& tree, const SendOptions& o);

}  // namespace hmcast::tools::cp
