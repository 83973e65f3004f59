#include "keyword_matcher.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace rasd::ras {
namespace {

TEST(KeywordMatcherTest, FindsAnyKeywordAnywhere) {
  const KeywordMatcher matcher(
      std::vector<std::string_view>{"EDAC", "Hardware Error", "he", "hers", "AER"});
  EXPECT_TRUE(matcher.AnyIn("EDAC MC0: 1 CE"));
  EXPECT_TRUE(matcher.AnyIn("xx {7}[Hardware Error]: yy"));
  EXPECT_TRUE(matcher.AnyIn("ushers"));  // overlapping keywords through failure links
  EXPECT_TRUE(matcher.AnyIn("pcieport 0000:00:1c.1: AER"));
  EXPECT_FALSE(matcher.AnyIn(""));
  EXPECT_FALSE(matcher.AnyIn("EDA CMC Hardware error AE R"));
  EXPECT_FALSE(matcher.AnyIn("usb 1-1: new high-speed USB device"));
}

TEST(KeywordMatcherTest, AgreesWithFindOnRandomText) {
  const std::vector<std::string> keywords = {"abc", "bcd", "cab", "aab", "dd"};
  const KeywordMatcher matcher(std::vector<std::string_view>{"abc", "bcd", "cab", "aab", "dd"});
  std::mt19937 random(42);
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    const int length = static_cast<int>(random() % 12);
    for (int j = 0; j < length; ++j) text.push_back(static_cast<char>('a' + random() % 5));
    bool expected = false;
    for (const auto& keyword : keywords)
      expected = expected || text.find(keyword) != std::string::npos;
    ASSERT_EQ(matcher.AnyIn(text), expected) << text;
  }
}

TEST(KeywordMatcherTest, ThePrefilterNeverHidesAKeyword) {
  // Keywords of three bytes or more turn the anchor prefilter on; texts of
  // every length cross its eight-at-a-time loop and its tail.
  const std::vector<std::string> keywords = {"abca", "dcb", "bbbd", "Hardware Error", "ad_c"};
  const KeywordMatcher matcher = {
      {"abca", 1}, {"dcb", 2}, {"bbbd", 4}, {"Hardware Error", 8}, {"ad_c", 16}};
  std::mt19937 random(7);
  const std::string alphabet = "abcd_ ";
  for (int i = 0; i < 50000; ++i) {
    std::string text;
    const int length = static_cast<int>(random() % 40);
    for (int j = 0; j < length; ++j) text.push_back(alphabet[random() % alphabet.size()]);
    if (random() % 8 == 0) text.insert(random() % (text.size() + 1), "Hardware Error");
    std::uint32_t expected = 0;
    for (std::size_t k = 0; k < keywords.size(); ++k) {
      if (text.find(keywords[k]) != std::string::npos) expected |= 1U << k;
    }
    ASSERT_EQ(matcher.Groups(text), expected) << "'" << text << "'";
    if (expected != 0) {
      ASSERT_TRUE(matcher.MayMatch(text)) << text;
    }
  }
  EXPECT_FALSE(matcher.MayMatch("[   12.345678] usb 1-1: new high-speed USB device number 2"))
      << "a line with no anchor is rejected before the automaton";
}

TEST(KeywordMatcherTest, KeywordsSharingAnAnchorAreEachCompared) {
  // Upper-case triples are the rarest: all three are anchored on "EDA" or
  // "DAC", at different offsets in each keyword.
  const KeywordMatcher matcher = {{"EDAC", 1}, {"EDAC MC", 2}, {"xEDA", 4}, {"x_DAC", 8}};
  EXPECT_EQ(matcher.Groups("EDAC"), 1u);
  EXPECT_EQ(matcher.Groups("EDAC MC0: 1 CE"), 3u);
  EXPECT_EQ(matcher.Groups("xEDAC"), 5u);
  EXPECT_EQ(matcher.Groups("EDA"), 0u);
  EXPECT_EQ(matcher.Groups("DAC x_DA"), 0u);
  EXPECT_EQ(matcher.Groups("a much longer line that ends in x_DAC"), 8u);
  EXPECT_EQ(matcher.Groups("EDAC MC at the start of a much longer line"), 3u);
}

TEST(KeywordMatcherTest, MoreKeywordsThanTheAnchorTableIndexesStillMatch) {
  std::vector<std::string> words;
  for (int i = 0; i < 300; ++i) words.push_back("word" + std::to_string(i * 7919));
  const KeywordMatcher matcher(std::vector<std::string_view>(words.begin(), words.end()));
  EXPECT_TRUE(matcher.AnyIn("a line with word" + std::to_string(299 * 7919) + " at its end"));
  EXPECT_TRUE(matcher.AnyIn("word0"));
  EXPECT_FALSE(matcher.AnyIn("a line with word1 only"));
}

TEST(KeywordMatcherTest, GroupsOfEveryKeywordPresentAreReported) {
  const KeywordMatcher matcher = {
      {"EDAC", 1}, {"AER", 2}, {"Hardware Error", 4 | 8}, {"Error", 16}};
  EXPECT_EQ(matcher.Groups("EDAC and AER"), 3u);
  EXPECT_EQ(matcher.Groups("[Hardware Error]"), 4u | 8u | 16u)
      << "a keyword inside another counts too";
  EXPECT_EQ(matcher.Groups("nothing here"), 0u);
}

}  // namespace
}  // namespace rasd::ras
