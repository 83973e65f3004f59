#include "rasd/jobs/cross_check.h"

#include <cstring>

namespace rasd::jobs {
namespace {

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

}  // namespace

CopiesVote VoteOnCopies(std::span<const float> first, std::span<const float> second,
                        std::span<const float> third) {
  CopiesVote vote;
  if (SameBits(first, second)) return vote;
  if (third.empty()) {
    vote.outcome = CopiesVote::Outcome::kUndecided;
    return vote;
  }
  const bool with_first = SameBits(third, first);
  const bool with_second = SameBits(third, second);
  if (with_first == with_second) {
    vote.outcome = CopiesVote::Outcome::kNoMajority;
    return vote;
  }
  vote.outcome =
      with_first ? CopiesVote::Outcome::kSecondOutvoted : CopiesVote::Outcome::kFirstOutvoted;
  const std::span<const float> wrong = with_first ? second : first;
  if (wrong.size() != third.size()) {
    vote.differing = wrong.size();
    return vote;
  }
  bool found = false;
  for (std::size_t i = 0; i < wrong.size(); ++i) {
    if (std::memcmp(&wrong[i], &third[i], sizeof(float)) == 0) continue;
    if (!found) vote.first_differing = i;
    found = true;
    ++vote.differing;
  }
  return vote;
}

}  // namespace rasd::jobs
