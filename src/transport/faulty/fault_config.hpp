// Reading and checking FaultConfig: the environment variables that switch faults
// on in processes a test starts (see FaultConfig in include/hmcast/config.hpp),
// and the bounds that keep the fault layer's memory and delays finite.
#pragma once

#include "hmcast/config.hpp"

namespace hmcast::transport {

/// `f` with every HMCAST_FAULT_* variable that is set applied over its field, then
/// checked. Throws Error(invalid_config) naming the variable or field at fault.
FaultConfig faults_with_environment(FaultConfig f);

/// Throws Error(invalid_config) naming the first field out of its bounds.
void check_faults(const FaultConfig& f);

/// True if `f` asks for any fault at all (false: the fault layer is left out).
bool any_fault(const FaultConfig& f);

}  // namespace hmcast::transport
