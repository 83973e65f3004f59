#include "rasd/jobs/cross_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace rasd::jobs {
namespace {

using Outcome = CopiesVote::Outcome;

std::vector<float> Part() { return {1.0f, 2.0f, 3.0f, 4.0f, 5.0f}; }

std::vector<float> FlippedAt(std::vector<float> part, std::size_t at) {
  part[at] = std::nextafter(part[at], 100.0f);  // one bit of the mantissa
  return part;
}

TEST(VoteOnCopiesTest, TwoSameCopiesAgreeWithoutAThird) {
  const auto vote = VoteOnCopies(Part(), Part());
  EXPECT_EQ(vote.outcome, Outcome::kAgreed);
  EXPECT_EQ(vote.differing, 0u);
}

TEST(VoteOnCopiesTest, TwoCopiesThatDifferLeaveItUndecided) {
  EXPECT_EQ(VoteOnCopies(Part(), FlippedAt(Part(), 2)).outcome, Outcome::kUndecided);
  EXPECT_EQ(VoteOnCopies(Part(), std::vector<float>(4, 1.0f)).outcome, Outcome::kUndecided)
      << "a copy of another size differs";
}

TEST(VoteOnCopiesTest, TheThirdOutvotesTheCopyItDoesNotSideWithAndSaysWhere) {
  auto wrong = FlippedAt(FlippedAt(Part(), 3), 1);
  auto vote = VoteOnCopies(wrong, Part(), Part());
  EXPECT_EQ(vote.outcome, Outcome::kFirstOutvoted);
  EXPECT_EQ(vote.first_differing, 1u);
  EXPECT_EQ(vote.differing, 2u);
  vote = VoteOnCopies(Part(), FlippedAt(Part(), 4), Part());
  EXPECT_EQ(vote.outcome, Outcome::kSecondOutvoted);
  EXPECT_EQ(vote.first_differing, 4u);
  EXPECT_EQ(vote.differing, 1u);
}

TEST(VoteOnCopiesTest, ThreeDifferentCopiesHaveNoMajority) {
  EXPECT_EQ(VoteOnCopies(Part(), FlippedAt(Part(), 0), FlippedAt(Part(), 1)).outcome,
            Outcome::kNoMajority);
}

TEST(VoteOnCopiesTest, BitsAreComparedNotValues) {
  // -0 == +0 and NaN != NaN as floats; as results of exact kernels they
  // are a different bit pattern and the same one.
  const std::vector<float> zero = {0.0f}, negative_zero = {-0.0f};
  EXPECT_EQ(VoteOnCopies(zero, negative_zero).outcome, Outcome::kUndecided);
  const std::vector<float> nan = {std::nanf("")};
  EXPECT_EQ(VoteOnCopies(nan, nan).outcome, Outcome::kAgreed);
}

}  // namespace
}  // namespace rasd::jobs
