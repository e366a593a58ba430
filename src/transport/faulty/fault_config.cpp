#include "transport/faulty/fault_config.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "hmcast/error.hpp"

namespace hmcast::transport {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == 0 ? nullptr : v;
}

double env_probability(const char* name, double fallback) {
  const char* v = env(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  if (end == v || *end != 0 || !(d >= 0 && d <= 1))
    throw Error(ErrorCode::invalid_config, std::string(name) + "='" + v + "' is not a probability in [0, 1]");
  return d;
}

std::uint64_t env_unsigned(const char* name, std::uint64_t fallback, std::uint64_t max) {
  const char* v = env(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (end == v || *end != 0 || *v == '-' || errno == ERANGE || n > max)
    throw Error(ErrorCode::invalid_config, std::string(name) + "='" + v + "' is not a whole number in [0, " +
                                               std::to_string(max) + "]");
  return n;
}

void check_probability(const char* field, double p) {
  if (!(p >= 0 && p <= 1))
    throw Error(ErrorCode::invalid_config,
                std::string("FaultConfig::") + field + " = " + std::to_string(p) + " is not a probability in [0, 1]");
}

void check_delay(const char* field, std::int64_t ns) {
  if (ns < 0 || ns > FaultConfig::kMaxFaultDelayNs)
    throw Error(ErrorCode::invalid_config, std::string("FaultConfig::") + field + " = " + std::to_string(ns) +
                                               " ns is outside [0, " + std::to_string(FaultConfig::kMaxFaultDelayNs) +
                                               "] (faults are for tests: delays are bounded)");
}

}  // namespace

FaultConfig faults_with_environment(FaultConfig f) {
  constexpr std::uint64_t kMaxUs = FaultConfig::kMaxFaultDelayNs / 1000;
  f.datagram_loss = env_probability("HMCAST_FAULT_LOSS", f.datagram_loss);
  f.datagram_duplicate = env_probability("HMCAST_FAULT_DUP", f.datagram_duplicate);
  f.datagram_reorder = env_probability("HMCAST_FAULT_REORDER", f.datagram_reorder);
  if (env("HMCAST_FAULT_DELAY_US") != nullptr) {
    f.datagram_delay_ns_max = static_cast<std::int64_t>(env_unsigned("HMCAST_FAULT_DELAY_US", 0, kMaxUs) * 1000);
    f.datagram_delay_ns_min = 0;
  }
  if (env("HMCAST_FAULT_LINK_DELAY_US") != nullptr)
    f.link_delay_ns_max = static_cast<std::int64_t>(env_unsigned("HMCAST_FAULT_LINK_DELAY_US", 0, kMaxUs) * 1000);
  f.seed = env_unsigned("HMCAST_FAULT_SEED", f.seed, UINT64_MAX);
  check_faults(f);
  return f;
}

void check_faults(const FaultConfig& f) {
  check_probability("datagram_loss", f.datagram_loss);
  check_probability("datagram_duplicate", f.datagram_duplicate);
  check_probability("datagram_reorder", f.datagram_reorder);
  check_delay("datagram_reorder_max_ns", f.datagram_reorder_max_ns);
  check_delay("datagram_delay_ns_min", f.datagram_delay_ns_min);
  check_delay("datagram_delay_ns_max", f.datagram_delay_ns_max);
  check_delay("link_delay_ns_max", f.link_delay_ns_max);
  if (f.datagram_delay_ns_min > f.datagram_delay_ns_max)
    throw Error(ErrorCode::invalid_config, "FaultConfig::datagram_delay_ns_min (" +
                                               std::to_string(f.datagram_delay_ns_min) +
                                               ") is over datagram_delay_ns_max (" +
                                               std::to_string(f.datagram_delay_ns_max) + "): raise the maximum");
  if (f.datagram_reorder_depth == 0)
    throw Error(ErrorCode::invalid_config,
                "FaultConfig::datagram_reorder_depth must be at least 1 (how many later datagrams may overtake one)");
  if (f.max_held == 0)
    throw Error(ErrorCode::invalid_config, "FaultConfig::max_held must be at least 1 (items the fault layer holds)");
}

bool any_fault(const FaultConfig& f) {
  return f.datagram_loss > 0 || f.datagram_duplicate > 0 || f.datagram_reorder > 0 || f.datagram_delay_ns_max > 0 ||
         f.link_delay_ns_max > 0;
}

}  // namespace hmcast::transport
