#include "rasd/ras/address.h"

#include <gtest/gtest.h>

namespace rasd::ras {
namespace {

TEST(AddressTest, TheValueIsParsedAndThePrintedFormKept) {
  const auto padded = ParsePrintedAddress("0x00000000007FFFA8");
  ASSERT_TRUE(padded);
  EXPECT_EQ(padded->value, 0x7fffa8u);
  EXPECT_EQ(padded->printed, "0x00000000007fffa8") << "padding kept, lower case";

  const auto nvidia = ParsePrintedAddress("0x73ac_1c000000,");
  ASSERT_TRUE(nvidia) << "the driver's '_' separator and a trailing comma";
  EXPECT_EQ(nvidia->value, 0x73ac1c000000u);
  EXPECT_EQ(nvidia->printed, "0x73ac_1c000000");

  const auto bare = ParsePrintedAddress("dead000.");
  ASSERT_TRUE(bare) << "no prefix, the end of a sentence";
  EXPECT_EQ(bare->value, 0xdead000u);
  EXPECT_EQ(bare->printed, "0xdead000");
}

TEST(AddressTest, AnythingElseIsNotAnAddress) {
  for (const char* text : {"", "0x", "0X", "_", "0x_", "0xg00", "12 34", "-0x10", "0x10 ",
                           "0x1_0000_0000_0000_0000" /* 17 digits: wider than 64 bits */}) {
    EXPECT_FALSE(ParsePrintedAddress(text)) << '"' << text << '"';
  }
}

TEST(AddressTest, SixtyFourBitsFitHoweverManyLeadingZeros) {
  const auto widest = ParsePrintedAddress("0x0000ffffffffffffffff");
  ASSERT_TRUE(widest);
  EXPECT_EQ(widest->value, 0xffffffffffffffffu);
}

TEST(AddressTest, EqualValuesAreTheSameAddressHoweverPrinted) {
  EXPECT_EQ(*ParsePrintedAddress("0x0001000"), Address::Of(0x1000));
  EXPECT_NE(*ParsePrintedAddress("0x1001"), Address::Of(0x1000));
  EXPECT_EQ(Address::Of(0xabc).printed, "0xabc");
  EXPECT_EQ(HexText(0), "0x0");
}

}  // namespace
}  // namespace rasd::ras
