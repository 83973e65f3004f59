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

TEST(SeverityTest, BlockErrnosAndReriStatusClassAsTheirSourcesSay) {
  EXPECT_EQ(SeverityOfBlockErrno(-5), Severity::kUce) << "EIO";
  EXPECT_EQ(SeverityOfBlockErrno(-61), Severity::kUce) << "ENODATA: a critical medium error";
  EXPECT_EQ(SeverityOfBlockErrno(-67), Severity::kCe) << "ENOLINK: recoverable transport";
  EXPECT_EQ(SeverityOfBlockErrno(-11), Severity::kInfo) << "EAGAIN: refused, no data lost";
  EXPECT_EQ(SeverityOfBlockErrno(0), Severity::kInfo);
  EXPECT_TRUE(IsMediaLessBlockMajor(7)) << "loop";
  EXPECT_FALSE(IsMediaLessBlockMajor(8)) << "sd";
  EXPECT_EQ(SeverityOfReriStatus(0x1), Severity::kInfo) << "valid, no error bit";
  EXPECT_EQ(SeverityOfReriStatus(0x3), Severity::kCe);
  EXPECT_EQ(SeverityOfReriStatus(0x5), Severity::kUcna);
  EXPECT_EQ(SeverityOfReriStatus(0xf), Severity::kUce);
}

}  // namespace
}  // namespace rasd::ras
