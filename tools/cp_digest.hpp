// The checksum `hmcast cp` puts on every file: XXH3-128 (libxxhash), streamed.
// It catches accidents (a short write, a bit flipped on a disk or in a buffer), not
// attackers: the group's authentication is the transport's business.
#pragma once

#include <xxhash.h>

#include <cstring>
#include <span>

#include "core/assert.hpp"
#include "cp_wire.hpp"

namespace hmcast::tools::cp {

class FileDigest {
 public:
  FileDigest() : state_(XXH3_createState()) {
    HMCAST_ASSERT(state_ != nullptr);
    const XXH_errorcode rc = XXH3_128bits_reset(state_);
    HMCAST_ASSERT(rc == XXH_OK);
  }
  ~FileDigest() { XXH3_freeState(state_); }
  FileDigest(const FileDigest&) = delete;
  FileDigest& operator=(const FileDigest&) = delete;

  void update(std::span<const std::byte> bytes) {
    const XXH_errorcode rc = XXH3_128bits_update(state_, bytes.data(), bytes.size());
    HMCAST_ASSERT(rc == XXH_OK);
  }
  [[nodiscard]] Digest digest() const {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(state_));
    Digest d{};
    static_assert(sizeof c.digest == d.size());
    std::memcpy(d.data(), c.digest, d.size());
    return d;
  }

 private:
  XXH3_state_t* state_;
};

}  // namespace hmcast::tools::cp
