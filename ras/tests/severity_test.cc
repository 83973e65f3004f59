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

TEST(SeverityTest, GhesNumbersAreTheKernelsFourClasses) {
  EXPECT_EQ(SeverityOfGhesNumber(0), Severity::kInfo);
  EXPECT_EQ(SeverityOfGhesNumber(1), Severity::kCe);
  EXPECT_EQ(SeverityOfGhesNumber(2), Severity::kUce);
  EXPECT_EQ(SeverityOfGhesNumber(3), Severity::kFatal);
  EXPECT_EQ(SeverityOfGhesNumber(7), Severity::kInfo) << "a number the kernel never writes";
}

}  // namespace
}  // namespace rasd::ras
