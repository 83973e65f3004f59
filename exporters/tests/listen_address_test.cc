#include "rasd/exporters/listen_address.h"

#include <gtest/gtest.h>

namespace rasd::exporters {
namespace {

TEST(ListenAddressTest, ParsesIpv4Ipv6AndLocalhost) {
  auto v4 = ParseListenAddress("127.0.0.1:9464");
  ASSERT_TRUE(v4.has_value()) << v4.error().ToString();
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 9464);
  EXPECT_EQ(v4->ToString(), "127.0.0.1:9464");

  auto v6 = ParseListenAddress("[::1]:0");
  ASSERT_TRUE(v6.has_value());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  EXPECT_EQ(v6->ToString(), "[::1]:0");

  EXPECT_TRUE(ParseListenAddress("localhost:65535").has_value());
}

TEST(ListenAddressTest, RejectsMalformedAddresses) {
  for (const char* text : {"", "9464", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
                           "127.0.0.1:12x", "example.com:80", "[::zz]:1", "::1:80", "1.2.3:4"}) {
    auto parsed = ParseListenAddress(text);
    EXPECT_FALSE(parsed.has_value()) << text;
    if (!parsed) {
      EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument);
    }
  }
}

}  // namespace
}  // namespace rasd::exporters
