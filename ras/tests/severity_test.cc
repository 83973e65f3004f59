#include "rasd/ras/severity.h"

#include <gtest/gtest.h>

namespace rasd::ras {
namespace {

TEST(SeverityTest, NamesRoundTripCaseInsensitively) {
  for (Severity severity : kAllSeverities) {
    EXPECT_EQ(ParseSeverity(SeverityName(severity)), severity);
  }
  EXPECT_EQ(ParseSeverity("srar"), Severity::kSrar);
  EXPECT_EQ(ParseSeverity("Fatal"), Severity::kFatal);
  EXPECT_FALSE(ParseSeverity("SRA").has_value());
  EXPECT_FALSE(ParseSeverity("").has_value());
}

TEST(SeverityTest, OrderGoesFromInfoToFatal) {
  EXPECT_LT(Severity::kCe, Severity::kUcna);
  EXPECT_LT(Severity::kSrao, Severity::kSrar);
  EXPECT_LT(Severity::kUce, Severity::kFatal);
}

}  // namespace
}  // namespace rasd::ras
