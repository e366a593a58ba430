// libFuzzer target: policy::parse_profile on arbitrary text (a profile file is
// input a user hands to every Node). It must never crash; whatever it accepts must
// pass validate() and survive format -> parse unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "policy/profile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace p = hmcast::policy;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  p::Profile parsed;
  try {
    parsed = p::parse_profile(text);
  } catch (const p::ProfileError&) {
    return 0;  // refused with a message: fine
  }
  try {
    p::validate(parsed);
    if (!(p::parse_profile(p::format_profile(parsed)) == parsed)) {
      std::fprintf(stderr, "profile_parse_fuzz: format/parse changed an accepted profile\n");
      std::abort();
    }
  } catch (const p::ProfileError& e) {
    std::fprintf(stderr, "profile_parse_fuzz: an accepted profile fails: %s\n", e.what());
    std::abort();
  }
  return 0;
}
