#pragma once

// Builds binary fixtures (firmware tables, ring-buffer pages) field by field.

#include <cstdint>
#include <cstring>
#include <vector>

namespace rasd::ras::testing {

using Bytes = std::vector<std::uint8_t>;

// Writes `value` little-endian at `offset`, growing `out` as needed.
template <typename T>
void Put(Bytes& out, std::size_t offset, T value) {
  if (out.size() < offset + sizeof(T)) out.resize(offset + sizeof(T));
  std::memcpy(out.data() + offset, &value, sizeof(T));
}

}  // namespace rasd::ras::testing
