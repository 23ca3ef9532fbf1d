#include "common.h"

#include <stdexcept>

namespace atl::sync {

void ByteReader::require(std::size_t n) const {
  if (at_ + n > bytes_.size()) {
    throw MalformedMessage("malformed synchronization message: " + std::to_string(n) +
                           " bytes needed at offset " + std::to_string(at_) + " of " +
                           std::to_string(bytes_.size()));
  }
}

}  // namespace atl::sync
