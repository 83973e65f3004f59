#include "rasd/exporters/listen_address.h"

#include <arpa/inet.h>

#include <charconv>

namespace rasd::exporters {

std::string ListenAddress::ToString() const {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<ListenAddress> ParseListenAddress(std::string_view text) {
  const auto invalid = [&](std::string_view why) {
    return Fail(ErrorCode::kInvalidArgument,
                "listen address '" + std::string(text) + "' " + std::string(why));
  };
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return invalid("needs HOST:PORT");
  std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    in6_addr address{};
    if (inet_pton(AF_INET6, std::string(host).c_str(), &address) != 1) {
      return invalid("has an invalid IPv6 address");
    }
  } else if (host != "localhost") {
    in_addr address{};
    if (inet_pton(AF_INET, std::string(host).c_str(), &address) != 1) {
      return invalid("needs a numeric IPv4 address, [IPv6] or localhost");
    }
  }
  unsigned port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      port > 65535) {
    return invalid("has a port outside 0..65535");
  }
  return ListenAddress{std::string(host), static_cast<std::uint16_t>(port)};
}

}  // namespace rasd::exporters
