// Calibration: each choice of the policy is decided by runs side by side, one
// after the other on the same transport, never by a constant:
//   radix        2 KiB all-acked p50 latency with radix 2, 4 and flat (radix n);
//   crossover    per size, all-acked p50 over the small path against the large
//                path; the largest size up to which the small path is not slower,
//                divided by the group size, is the profile's small_bytes_per_member;
//   block size   a 16 MiB message with 256 KiB and 1 MiB blocks; target_blocks
//                follows from the faster one.
#include "calibrate.hpp"

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "policy/profile.hpp"
#include "workload.hpp"

namespace hmcast::tools {

namespace {

struct Sample {
  double complete_p50_us = 0;
  double deliver_p50_us = 0;
  bool ok = false;
};

Sample measure(std::uint32_t procs, std::uint64_t size, std::uint32_t messages, const GroupRunOptions& base,
               const std::vector<std::string>& args) {
  GroupRunOptions o = base;
  o.procs = procs;
  o.senders = 1;
  o.sizes = std::to_string(size);
  o.messages = messages;
  o.serial = true;
  o.timestamps = true;
  o.group = "calibrate";
  o.member_args.insert(o.member_args.end(), args.begin(), args.end());
  const auto rep = run_group(o);
  if (!rep.delivered_ok)
    throw std::runtime_error("calibration run of " + std::to_string(size) + " bytes failed: " +
                             (rep.problems.empty() ? std::string("see the members' reports") : rep.problems.front()));
  return {rep.latency_p50_us, rep.last_delivery_p50_us, rep.delivered_ok};
}

}  // namespace

void run_calibration(std::uint32_t procs, const GroupRunOptions& base, const std::string& out_path, bool json) {
  if (procs < 2) throw std::runtime_error("--calibrate needs --procs of at least 2");
  policy::Profile p = policy::builtin_profile("socket");
  nlohmann::json log = nlohmann::json::object();
  std::cout << std::fixed << std::setprecision(1);

  // 1. ACK-tree radix at 2 KiB.
  std::vector<std::uint32_t> radices{2, 4};
  if (procs > 4) radices.push_back(procs);
  double best = 0;
  std::uint32_t best_radix = 2, best_tree_radix = 2;
  double best_tree = 0;
  for (auto r : radices) {
    const auto s = measure(procs, 2048, 300, base, {"--radix", std::to_string(r)});
    std::cout << "radix " << std::setw(4) << r << ": 2 KiB all-acked p50 " << s.complete_p50_us << " us\n";
    log["radix_p50_us"][std::to_string(r)] = s.complete_p50_us;
    if (best_radix == 2 && best == 0) best = s.complete_p50_us;
    if (s.complete_p50_us < best) best = s.complete_p50_us, best_radix = r;
    if (r < procs && (best_tree == 0 || s.complete_p50_us < best_tree)) best_tree = s.complete_p50_us, best_tree_radix = r;
  }
  p.tree_radix = best_tree_radix;
  // A radix >= n is one level; if it wins, groups up to this size go flat.
  p.flat_tree_max_group = best_radix >= procs ? std::max(procs, p.flat_tree_max_group) : procs - 1;

  // 2. Crossover between the paths.
  std::uint32_t crossover = policy::bounds::kMinSmall;
  for (const std::uint64_t size : {64ULL << 10, 256ULL << 10, 1ULL << 20, 4ULL << 20}) {
    const auto small = measure(procs, size, 20, base, {"--max-small", std::to_string(size)});
    const auto large = measure(procs, size, 20, base, {"--max-small", std::to_string(size - 1)});
    std::cout << "size " << std::setw(8) << format_size(size) << ": small path " << small.complete_p50_us
              << " us, large path " << large.complete_p50_us << " us (all-acked p50)\n";
    log["crossover_us"][std::to_string(size)] = {{"small", small.complete_p50_us}, {"large", large.complete_p50_us}};
    if (small.complete_p50_us > large.complete_p50_us) break;
    crossover = static_cast<std::uint32_t>(size);
  }
  // What members accept stays at least the built-in limit; the route scales with the group.
  p.max_small_message = std::max(p.max_small_message, crossover);
  // One group size measured gives one slope: by the group size, as the socket's.
  p.small_bytes_per_member = std::max<std::uint32_t>(1, crossover / std::max<std::uint32_t>(procs, 2));
  p.small_bytes_per_receiver = 0;

  // 3. Block size for a 16 MiB message.
  constexpr std::uint64_t kBig = 16ULL << 20;
  double best_block_us = 0;
  std::uint64_t best_block = p.max_block_size;
  for (const std::uint64_t block : {256ULL << 10, 1ULL << 20}) {
    const auto s = measure(procs, kBig, 4, base, {"--block", std::to_string(block), "--max-small", std::to_string(crossover)});
    std::cout << "block " << std::setw(8) << format_size(block) << ": 16 MiB last delivery p50 " << s.deliver_p50_us
              << " us\n";
    log["block_us"][std::to_string(block)] = s.deliver_p50_us;
    if (best_block_us == 0 || s.deliver_p50_us < best_block_us) best_block_us = s.deliver_p50_us, best_block = block;
  }
  p.target_blocks = static_cast<std::uint32_t>(kBig / best_block);
  p.max_block_size = std::max(p.max_block_size, best_block);
  p.min_block_size = std::min(p.min_block_size, best_block);

  const std::string text = policy::format_profile(p);
  std::ofstream f(out_path);
  f << "# written by `hmcast bench --calibrate --procs " << procs << "`\n" << text;
  if (!f) throw std::runtime_error("cannot write the profile to " + out_path);
  std::cout << "profile written to " << out_path << ":\n" << text;
  if (json) {
    log["profile_file"] = out_path;
    log["profile"] = {{"max_small_message", p.max_small_message}, {"small_bytes_per_member", p.small_bytes_per_member}, {"flat_tree_max_group", p.flat_tree_max_group},
                      {"tree_radix", p.tree_radix}, {"target_blocks", p.target_blocks},
                      {"min_block_size", p.min_block_size}, {"max_block_size", p.max_block_size}};
    std::cout << log.dump() << std::endl;
  }
}

}  // namespace hmcast::tools
