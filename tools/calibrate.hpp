// `hmcast bench --calibrate`: measures, on the socket transport, the points the
// policy (src/policy) decides by, and writes a profile file a Node can load
// (Config::profile_file, `hmcast member --profile`).
#pragma once

#include <cstdint>
#include <string>

#include "group_runner.hpp"

namespace hmcast::tools {

/// Runs the calibration with `procs` members (as `base` says where they run),
/// prints what it measured, writes the profile to `out_path`, and with `json`
/// prints the measurements and the profile as one JSON line (last line).
void run_calibration(std::uint32_t procs, const GroupRunOptions& base, const std::string& out_path, bool json);

}  // namespace hmcast::tools
