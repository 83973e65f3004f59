#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "rasd/common/result.h"

namespace rasd::exporters {

// Where the metrics endpoint listens: "127.0.0.1:9464", "[::1]:9464",
// "0.0.0.0:0" (port 0: any free port, for tests).
struct ListenAddress {
  std::string host;  // without brackets
  std::uint16_t port = 0;

  // Back to the "host:port" form prometheus-cpp's Exposer takes.
  std::string ToString() const;
};

// kInvalidArgument with the reason for anything that is not HOST:PORT with a
// numeric IPv4/IPv6 address or "localhost" and a port in 0..65535.
Result<ListenAddress> ParseListenAddress(std::string_view text);

}  // namespace rasd::exporters
