// What every simulated run reports, small or large path: the promise's checks
// (delivered once and intact, nothing missing, no liveness failure) and the first
// invariant violations, in words.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hmcast::sim {

struct RunResult {
  std::uint32_t nodes = 0;
  std::uint64_t messages_sent = 0;
  std::uint64_t completed = 0;
  bool delivered_ok = false;
  std::uint64_t duplicates_delivered = 0;
  std::uint64_t missing = 0;  // completed messages some live member never delivered
  std::uint64_t views_installed = 0;
  std::uint64_t crashed = 0;
  bool timed_out = false;
  std::vector<std::string> violations;  // the first few, human-readable

  /// Records an invariant violation (the first eight are kept).
  void violation(std::string what) {
    if (violations.size() < 8) violations.push_back(std::move(what));
  }
  /// These fields into `j`.
  void put(nlohmann::ordered_json& j) const {
    j["nodes"] = nodes;
    j["messages_sent"] = messages_sent;
    j["completed"] = completed;
    j["delivered_ok"] = delivered_ok;
    j["duplicates_delivered"] = duplicates_delivered;
    j["missing"] = missing;
    j["views_installed"] = views_installed;
    j["crashed"] = crashed;
    j["timed_out"] = timed_out;
    j["violations"] = violations;
  }
};

}  // namespace hmcast::sim
