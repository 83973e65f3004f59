#include "event_text.h"

#include <gtest/gtest.h>

namespace rasd::ctl {
namespace {

TEST(ParseDurationTest, AcceptsUnitsAndRejectsNonsense) {
  EXPECT_EQ(ParseDuration("90"), 90);
  EXPECT_EQ(ParseDuration("30s"), 30);
  EXPECT_EQ(ParseDuration("5m"), 300);
  EXPECT_EQ(ParseDuration("2h"), 7200);
  EXPECT_EQ(ParseDuration("1.5d"), 129600);
  EXPECT_EQ(ParseDuration("400ms"), 0.4);
  for (const char* bad : {"", "m", "ms", "-5m", "5x", "five", "5 m", "5mss"})
    EXPECT_FALSE(ParseDuration(bad).has_value()) << bad;
}

TEST(EventTextTest, EventsAndSummaryRender) {
  const auto events = nlohmann::json::parse(R"({"events": [
    {"id": 1, "time": "2026-11-29T10:00:00Z", "severity": "FATAL", "origin": "nvidia_xid", "device": null,
     "vendor_code": 79, "pci_bdf": "0000:07:00", "mc": null, "address": null, "count": 1, "historical": false,
     "summary": "NVRM: Xid 79"}]})");
  const std::string text = FormatEvents(events);
  EXPECT_NE(text.find("2026-11-29T10:00:00Z FATAL nvidia_xid     code=79 pci=0000:07:00"),
            std::string::npos)
      << text;
  EXPECT_EQ(FormatEvents(nlohmann::json::parse(R"({"events": []})")), "no events\n");
  const auto summary = nlohmann::json::parse(
      R"({"rows": [{"origin": "edac", "severity": "CE", "events": 7, "errors": 21, "last": "2026-11-29T10:00:00Z"}]})");
  EXPECT_NE(
      FormatSummary(summary).find("edac            CE            7       21  2026-11-29T10:00:00Z"),
      std::string::npos)
      << FormatSummary(summary);
}

}  // namespace
}  // namespace rasd::ctl
